/*
 * kv_seq.c - a sequence's block table and its H2O bookkeeping (see kv_seq.h).
 */
#include "kv_seq.h"

#include "h2o.h"

#include "backend.h"
#include "err.h"
#include "kv_pool.h"
#include "model.h"
#include "util.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

void kv_seq_init(struct kv_seq *seq)
{
    memset(seq, 0, sizeof *seq);
    seq->budget.policy = KV_POLICY_FULL;
}

void kv_seq_set_budget(struct kv_seq *seq, const struct kv_budget *b)
{
    seq->budget = *b;
}

int kv_seq_grow(struct kv_seq *seq, struct kv_pool *pool, struct backend *be,
                int32_t n_slots)
{
    seq->block_size = pool->block_size;
    int32_t need = CEIL_DIV(n_slots, pool->block_size);
    if (need <= seq->n_blocks) return 0;
    if (need > seq->cap) {
        seq->cap = MAX(need, 2 * seq->cap);
        seq->blocks = xrealloc(seq->blocks, (size_t)seq->cap * sizeof *seq->blocks);
    }
    int32_t add = need - seq->n_blocks;
    int err = kv_pool_alloc(pool, add, seq->blocks + seq->n_blocks);
    if (err) return err;
    backend_kv_init_blocks(be, seq->blocks + seq->n_blocks, add);
    seq->n_blocks = need;
    return 0;
}

/* Index of slot s of head h in a layer's [n_blocks, n_head, block_size] state. */
static inline int64_t state_index(const struct kv_seq *seq, int32_t s, int32_t h,
                                  int32_t n_head, int32_t bs)
{
    return ((int64_t)seq->blocks[s / bs] * n_head + h) * bs + s % bs;
}

/* One head's slot state for slots 0..n-1 of the sequence, gathered from a layer's
 * [n_blocks, n_head, block_size] arrays. */
static void gather_head(const struct kv_seq *seq, const int32_t *lpos, const float *lscore,
                        int32_t h, int32_t n_head, int32_t n, int32_t *pos, float *score)
{
    /* A head's slots of one block are contiguous: copy them a block at a time (one
     * decode step gathers every head of every decoding sequence, so this is hot). */
    const int32_t bs = seq->block_size;
    for (int32_t s0 = 0; s0 < n; s0 += bs) {
        const int64_t i = state_index(seq, s0, h, n_head, bs);
        const size_t len = (size_t)MIN(bs, n - s0);
        memcpy(pos + s0, lpos + i, len * sizeof *pos);
        memcpy(score + s0, lscore + i, len * sizeof *score);
    }
}

void kv_seq_finish_prefill(struct kv_seq *seq, struct kv_pool *pool, struct backend *be,
                           const struct opt_config *cfg)
{
    seq->prefilled = true;
    const int32_t B = kv_budget_slots(&seq->budget), n = seq->n_slots;
    if (seq->budget.policy == KV_POLICY_FULL || n <= B - 1) return;
    const int32_t L = cfg->n_layer, H = cfg->n_kv_head, bs = pool->block_size,
                  keep_n = B - 1;
    CHECK(seq->block_size == bs);
    int32_t *keep = xmalloc((size_t)L * H * (size_t)n * sizeof *keep);
    int32_t *scratch = xmalloc((size_t)n * sizeof *scratch);
    int32_t *pos = xmalloc((size_t)n * sizeof *pos);
    float *col = xmalloc((size_t)n * sizeof *col);
    /* Device state: every layer's state comes over in one copy, dev_pos / dev_col
     * [n_layer, n_head, n], rather than L * H small reads. */
    int32_t *dev_pos = NULL;
    float *dev_col = NULL;
    if (backend_state_on_device(be)) {
        dev_pos = xmalloc((size_t)L * H * (size_t)n * sizeof *dev_pos);
        dev_col = xmalloc((size_t)L * H * (size_t)n * sizeof *dev_col);
        CHECK(backend_kv_read_state(be, seq->blocks, n, dev_pos, dev_col) == 0);
    }
    for (int32_t l = 0; l < L; l++) {
        int32_t *lpos = NULL;
        float *lscore = NULL;
        if (!dev_pos) backend_kv_state(be, l, &lpos, &lscore);
        for (int32_t h = 0; h < H; h++) {
            const int64_t lh = (int64_t)l * H + h;
            const int32_t *hpos = pos;
            const float *hcol = col;
            if (dev_pos) {
                hpos = dev_pos + lh * n;
                hcol = dev_col + lh * n;
            } else {
                gather_head(seq, lpos, lscore, h, H, n, pos, col);
            }
            int32_t *k = keep + lh * keep_n;
            int32_t got = h2o_select_prefill_window(hcol, hpos, n, seq->budget.heavy,
                                                    seq->budget.recent,
                                                    cfg->arch.sliding_window, k, scratch);
            CHECK(got == keep_n);
        }
    }
    backend_kv_compact(be, seq->blocks, n, keep, keep_n);
    seq->n_evicted += (int64_t)(n - keep_n) * L * H;
    /* The kept tokens are in slots 0..B-2; the budget needs ceil(B / bs) blocks. */
    const int32_t need = CEIL_DIV(B, bs);
    if (seq->n_blocks > need) {
        kv_pool_free(pool, seq->blocks + need, seq->n_blocks - need);
        seq->n_blocks = need;
    }
    seq->n_slots = keep_n;
    free(keep);
    free(scratch);
    free(pos);
    free(col);
    free(dev_pos);
    free(dev_col);
}

int32_t kv_seq_next_slots(const struct kv_seq *seq)
{
    return seq->head_slots ? seq->n_slots : seq->n_slots + 1;
}

/*
 * The part of kv_seq_after_decode before the per-head work: nothing to do (false),
 * or the device already chose the victims (false, done here), or the host must
 * evict one token per (layer, head) of seq (true; head_slots allocated).
 */
static bool evict_begin(struct kv_seq *seq, struct backend *be, const struct opt_config *cfg)
{
    const int32_t B = kv_budget_slots(&seq->budget);
    if (seq->budget.policy == KV_POLICY_FULL || seq->n_slots < B) return false;
    CHECK(seq->n_slots == B);
    const int32_t L = cfg->n_layer, H = cfg->n_kv_head;
    if (!seq->head_slots)
        seq->head_slots = xmalloc((size_t)L * H * sizeof *seq->head_slots);
    seq->n_evicted += (int64_t)L * H; /* every head evicts one token either way */
    if (!backend_state_on_device(be)) return true;
    /* The forward chose the victims by the same rule on the device. They are not
     * freed here: each keeps its pos and score until this head's next token is
     * written over it (head_slots sends it there), and nothing reads the slot in
     * between. All B slots of every head are occupied now, so each head has one. */
    CHECK(seq->prefilled);
    CHECK(backend_kv_victims(be, seq->batch_index, seq->head_slots) == 0);
    for (int32_t i = 0; i < L * H; i++)
        CHECK(seq->head_slots[i] >= 0 && seq->head_slots[i] < B);
    return false;
}

/* Evict one token of head lh (= layer * n_head + head) of seq, the token at
 * position t just attended: gather the head's B slots (all occupied), pick by
 * h2o_select_evict, free the slot and remember the hole. pos / score hold B. */
static void evict_head(struct kv_seq *seq, struct backend *be, int32_t n_head,
                       int32_t window, int32_t lh, int32_t t, int32_t *pos, float *score)
{
    const int32_t B = kv_budget_slots(&seq->budget), h = lh % n_head;
    int32_t *lpos;
    float *lscore;
    backend_kv_state(be, lh / n_head, &lpos, &lscore);
    gather_head(seq, lpos, lscore, h, n_head, B, pos, score);
    const int32_t e = h2o_select_evict_window(score, pos, B, t, seq->budget.recent, window);
    CHECK(e >= 0);
    const int64_t i = state_index(seq, e, h, n_head, seq->block_size);
    lpos[i] = -1;
    lscore[i] = 0.0f;
    seq->head_slots[lh] = e;
}

void kv_seq_after_decode(struct kv_seq *seq, struct backend *be, const struct opt_config *cfg,
                         int32_t t)
{
    kv_seq_after_decode_many(&seq, &t, 1, be, cfg);
}

void kv_seq_after_decode_many(struct kv_seq *const *seqs, const int32_t *t, int32_t n,
                              struct backend *be, const struct opt_config *cfg)
{
    const int32_t LH = cfg->n_layer * cfg->n_kv_head;
    /* The (sequence, head) pairs to evict, and the largest budget among them. */
    int32_t *which = xmalloc((size_t)MAX(n, 1) * sizeof *which), n_ev = 0, max_b = 1;
    for (int32_t i = 0; i < n; i++)
        if (evict_begin(seqs[i], be, cfg)) {
            which[n_ev++] = i;
            max_b = MAX(max_b, kv_budget_slots(&seqs[i]->budget));
        }
    /* One OpenMP region for the whole step's heads (each thread with its own gather
     * buffers): a region per sequence costs more to wake than its scan. */
    const int64_t n_task = (int64_t)n_ev * LH;
#pragma omp parallel if (n_task * max_b >= (1 << 16))
    {
        int32_t *pos = xmalloc((size_t)max_b * sizeof *pos);
        float *score = xmalloc((size_t)max_b * sizeof *score);
#pragma omp for schedule(static)
        for (int64_t k = 0; k < n_task; k++) {
            const int32_t i = which[k / LH];
            evict_head(seqs[i], be, cfg->n_kv_head, cfg->arch.sliding_window,
                       (int32_t)(k % LH), t[i], pos, score);
        }
        free(pos);
        free(score);
    }
    free(which);
}

void kv_seq_release(struct kv_seq *seq, struct kv_pool *pool)
{
    kv_pool_free(pool, seq->blocks, seq->n_blocks);
    seq->n_blocks = 0;
    seq->n_slots = 0;
    seq->prefilled = false;
    free(seq->head_slots);
    seq->head_slots = NULL;
}

void kv_seq_deinit(struct kv_seq *seq, struct kv_pool *pool)
{
    kv_seq_release(seq, pool);
    free(seq->blocks);
    kv_seq_init(seq);
}
