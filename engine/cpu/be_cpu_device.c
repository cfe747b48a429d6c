/*
 * be_cpu_device.c - the CPU backend's emulation of slot state on a device (see
 * be_cpu_device.h): kv_read_state, the victims a device decode pass would pick, and
 * sampling on the kept logits.
 */
#include "be_cpu_device.h"

#include "err.h"
#include "h2o.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

/* One head's state for slots [0, n) of a sequence with block table `blocks`, from
 * one layer's [n_blocks, n_head, block_size] arrays into pos / score [n]. */
static void gather_head(const struct cpu_kv_layer *kv, const int32_t *blocks, int32_t n,
                        int32_t h, int32_t n_head, int32_t bs, int32_t *pos, float *score)
{
    /* A block's slots are contiguous: one copy per block, not a division per slot
     * (this runs for every head of every evicting sequence each decode step). */
    for (int32_t s0 = 0; s0 < n; s0 += bs) {
        const int64_t i = ((int64_t)blocks[s0 / bs] * n_head + h) * bs;
        const size_t m = (size_t)MIN(bs, n - s0);
        memcpy(pos + s0, kv->pos + i, m * sizeof *pos);
        memcpy(score + s0, kv->score + i, m * sizeof *score);
    }
}

void be_cpu_device_read_state(const struct be_cpu_device_pool *p, const int32_t *blocks,
                              int32_t n_slots, int32_t *pos, float *score)
{
    const int32_t L = p->n_layer, H = p->n_head;
    CHECK(n_slots >= 0);
    for (int32_t l = 0; l < L; l++)
        for (int32_t h = 0; h < H; h++) {
            const int64_t at = ((int64_t)l * H + h) * n_slots;
            gather_head(&p->kv[l], blocks, n_slots, h, H, p->block_size, pos + at,
                        score + at);
        }
}

void be_cpu_device_begin(struct be_cpu_device *d)
{
    d->n_victim_seqs = 0; /* the last forward's victims only */
}

void be_cpu_device_pick_victims(struct be_cpu_device *d, const struct be_cpu_device_pool *p,
                                const struct be_batch *b)
{
    const int32_t L = p->n_layer, H = p->n_head, LH = L * H;
    if (b->n_seq > d->cap_victim_seqs) {
        d->cap_victim_seqs = MAX(b->n_seq, 2 * d->cap_victim_seqs);
        d->victims =
            xrealloc(d->victims, (size_t)d->cap_victim_seqs * LH * sizeof *d->victims);
    }
    d->n_victim_seqs = b->n_seq;
    for (int32_t i = 0; i < b->n_seq; i++) {
        const struct be_seq *sq = &b->seqs[i];
        int32_t *vic = d->victims + (int64_t)i * LH;
        for (int32_t j = 0; j < LH; j++)
            vic[j] = -1;
        if (sq->n_tok != 1 || sq->h2o_budget <= 0) continue;
        const int32_t n = sq->n_slots, t = b->pos[sq->tok_start];
        if (n > d->cap_ev_slots) {
            d->cap_ev_slots = MAX(n, 2 * d->cap_ev_slots);
            d->ev_pos = xrealloc(d->ev_pos, (size_t)d->cap_ev_slots * sizeof *d->ev_pos);
            d->ev_score =
                xrealloc(d->ev_score, (size_t)d->cap_ev_slots * sizeof *d->ev_score);
        }
        for (int32_t l = 0; l < L; l++)
            for (int32_t h = 0; h < H; h++) {
                gather_head(&p->kv[l], sq->blocks, n, h, H, p->block_size, d->ev_pos,
                            d->ev_score);
                int32_t occupied = 0;
                for (int32_t s = 0; s < n; s++)
                    occupied += d->ev_pos[s] >= 0;
                if (occupied >= sq->h2o_budget)
                    vic[l * H + h] = h2o_select_evict_window(d->ev_score, d->ev_pos, n, t,
                                                             sq->h2o_recent, p->window);
            }
    }
}

int be_cpu_device_victims(const struct be_cpu_device *d, const struct be_cpu_device_pool *p,
                          int32_t seq, int32_t *victims)
{
    const int32_t LH = p->n_layer * p->n_head;
    if (seq < 0 || seq >= d->n_victim_seqs)
        return err_set(ENG_EINVAL, "CPU backend: no sequence %d in the last forward", seq);
    memcpy(victims, d->victims + (int64_t)seq * LH, (size_t)LH * sizeof *victims);
    return 0;
}

float *be_cpu_device_keep(struct be_cpu_device *d, int32_t n_out, int32_t vocab)
{
    const int64_t need = (int64_t)n_out * vocab;
    if (need > d->cap_kept) {
        d->cap_kept = MAX(need, 2 * d->cap_kept);
        d->kept = xrealloc(d->kept, (size_t)d->cap_kept * sizeof *d->kept);
    }
    d->n_kept = n_out;
    return d->kept;
}

int be_cpu_device_sample(struct be_cpu_device *d, int32_t vocab,
                         const struct be_sample_row *rows, int32_t n, struct sample_out *out)
{
    const int32_t V = vocab;
    float *row = xmalloc((size_t)V * sizeof *row);
    int err = 0;
    for (int32_t i = 0; i < n && !err; i++) {
        const struct be_sample_row *r = &rows[i];
        if (r->row < 0 || r->row >= d->n_kept) {
            err = err_set(ENG_EINVAL, "sample: row %d of a forward that kept %d", r->row,
                          d->n_kept);
            break;
        }
        memcpy(row, d->kept + (int64_t)r->row * V, (size_t)V * sizeof *row);
        for (int32_t j = 0; j < r->n_add; j++) row[r->add_ids[j]] += r->add_vals[j];
        struct sampler_params p;
        sampler_params_default(&p);
        p.temperature = r->temperature;
        p.top_p = r->top_p;
        p.top_k = r->top_k;
        p.n_logprobs = r->n_logprobs;
        sampler_sample_u(&p, row, V, r->u, &d->scratch, &out[i]);
    }
    free(row);
    return err;
}

void be_cpu_device_deinit(struct be_cpu_device *d)
{
    free(d->victims);
    free(d->kept);
    sampler_scratch_deinit(&d->scratch);
    free(d->ev_pos);
    free(d->ev_score);
    memset(d, 0, sizeof *d);
}
