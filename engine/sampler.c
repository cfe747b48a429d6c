/*
 * sampler.c - logits to token: bias, penalties, logprobs, temperature, top-k,
 * top-p, and the per-sequence xoshiro256** generator (see sampler.h for the order
 * of the steps and why).
 *
 * Owns: nothing between calls except what the caller's sampler_scratch holds.
 * Invariant: scratch->counts is all zeros between calls.
 * Thread: any, one scratch and one rng per thread at a time.
 */
#include "sampler.h"

#include "fast_exp.h"
#include "util.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A token that may survive top-k / top-p: its processed logit, its unnormalised
 * probability at the request's temperature, and its id. */
struct sampler_cand {
    float logit;
    float w;
    int32_t id;
};

/* Below this many elements selection finishes with an insertion sort, which beats
 * further partitioning on such short ranges. */
#define SAMPLER_SMALL 16

/* Temperatures below this are greedy, as in vLLM: dividing logits by them would
 * overflow, and the distribution is an argmax to float precision anyway. */
#define SAMPLER_MIN_TEMPERATURE 1e-5f

/* Above this every finite logit is already equally likely. Clamping keeps 1 / T
 * above zero, so a -inf logit still maps to weight 0 and not to NaN (-inf * 0). */
#define SAMPLER_MAX_TEMPERATURE 1e30f

/* Thresholds tried per sweep of the threshold search (see find_tau). */
#define SAMPLER_N_TAU 4

/* Tokens per block in the candidate collection (see collect). */
#define SAMPLER_BLOCK 16

/* The threshold search stops refining once this many tokens (plus 4k for top-k)
 * pass it: selection on a few thousand candidates costs less than another pass. */
#define SAMPLER_FEW_CANDS 1024

/* ---- vectorisable building blocks ---------------------------------------------- */

/* w[j] = e^((logits[j] - m) * inv_t) for j < n. */
static void exp_weights(const float *logits, int32_t n, float m, float inv_t, float *w)
{
    for (int32_t j = 0; j < n; j++)
        w[j] = fast_exp((logits[j] - m) * inv_t);
}

/*
 * The sum of w[0, n) in double, in a fixed order: eight interleaved partial sums
 * (which the compiler keeps in SIMD registers, where one running sum would wait on
 * every addition), then the tail, then the eight lanes. Fixed order keeps the
 * result, and so every draw, identical from run to run.
 */
static double sum_weights(const float *w, int32_t n)
{
    double lane[8] = {0};
    int32_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int k = 0; k < 8; k++)
            lane[k] += (double)w[j + k];
    double s = 0.0;
    for (; j < n; j++)
        s += (double)w[j];
    for (int k = 0; k < 8; k++)
        s += lane[k];
    return s;
}

/* Weights in the threshold search are summed as integers in units of 2^-24. */
#define SAMPLER_FIX_ONE 16777216.0f

/*
 * How many of x[0, n) are >= tau, and (when `mass` is not NULL) the sum of their
 * weights w in units of 2^-24, each weight rounded down. Integer sums vectorise
 * (their order does not matter) and, rounded down, never overstate the mass, so a
 * threshold found sufficient with them is sufficient.
 */
static int32_t count_ge(const float *x, const float *w, int32_t n, float tau, int64_t *mass)
{
    int32_t count = 0;
    int64_t sum = 0;
    if (mass) {
        for (int32_t j = 0; j < n; j++) {
            int in = x[j] >= tau;
            count += in;
            sum += in ? (int64_t)(w[j] * SAMPLER_FIX_ONE) : 0;
        }
        *mass = sum;
    } else {
        for (int32_t j = 0; j < n; j++)
            count += x[j] >= tau;
    }
    return count;
}

/* ---- random numbers ------------------------------------------------------------ */

/* splitmix64 turns one seed into well-mixed state words; xoshiro must not start
 * from an all-zero state, and splitmix64 never yields four zeros in a row. */
static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline uint64_t rotl64(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

void rng_seed(struct rng *r, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&x);
}

uint64_t rng_next(struct rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl64(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl64(s[3], 45);
    return result;
}

double rng_uniform(struct rng *r)
{
    /* The top 53 bits fill a double's mantissa exactly, so every value is a
     * multiple of 2^-53 and 1.0 itself never comes out. */
    return (double)(rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

/* ---- parameters and scratch ---------------------------------------------------- */

void sampler_params_default(struct sampler_params *p)
{
    memset(p, 0, sizeof *p);
    p->temperature = 1.0f;
    p->top_p = 1.0f;
    p->top_k = 0;
    p->n_logprobs = -1;
}

void sampler_scratch_init(struct sampler_scratch *s)
{
    memset(s, 0, sizeof *s);
}

void sampler_scratch_deinit(struct sampler_scratch *s)
{
    free(s->counts);
    free(s->w);
    free(s->cand);
    memset(s, 0, sizeof *s);
}

/* Grow the buffers to `vocab` entries. The old contents need not survive: counts
 * are all zero between calls, so fresh zeroed memory keeps the invariant. */
static void scratch_reserve(struct sampler_scratch *s, int32_t vocab)
{
    if (s->cap >= vocab) return;
    free(s->counts);
    free(s->w);
    free(s->cand);
    s->counts = xcalloc((size_t)vocab, sizeof *s->counts);
    s->w = xmalloc((size_t)vocab * sizeof *s->w);
    s->cand = xmalloc((size_t)vocab * sizeof *s->cand);
    s->cap = vocab;
}

/* ---- steps 1-3: the processed logits ------------------------------------------- */

static void apply_bias(const struct sampler_params *p, float *logits, int32_t vocab)
{
    /* Ids come from the client's logit_bias; the server validates them, and one
     * that slipped through is skipped rather than written out of bounds. */
    for (int32_t i = 0; i < p->n_bias; i++) {
        int32_t id = p->bias_ids[i];
        if (id >= 0 && id < vocab) logits[id] += p->bias_vals[i];
    }
}

static void apply_penalties(const struct sampler_params *p, float *logits, int32_t vocab,
                            const int32_t *out_tokens, int32_t n_out, int32_t *counts)
{
    if (n_out <= 0 || (p->presence_penalty == 0.0f && p->frequency_penalty == 0.0f)) return;
    /* Counting into a vocab-sized array and then zeroing only the entries we raised
     * costs O(n_out), not O(vocab), and needs no sort. The second loop applies each
     * distinct token once: the first time it meets a token it applies the penalty
     * and zeroes the count, so later occurrences see 0 and skip. */
    for (int32_t i = 0; i < n_out; i++) {
        int32_t t = out_tokens[i];
        CHECK(t >= 0 && t < vocab); /* generated tokens are ours, never client input */
        counts[t]++;
    }
    for (int32_t i = 0; i < n_out; i++) {
        int32_t t = out_tokens[i];
        int32_t c = counts[t];
        if (c == 0) continue;
        logits[t] -= (float)c * p->frequency_penalty + p->presence_penalty;
        counts[t] = 0;
    }
}

/* An int32 that orders like the float with bits `b` (all of them, NaN aside):
 * negative floats grow in magnitude as their bits grow, so their low 31 bits are
 * flipped. Integer comparisons vectorise where float ones with NaN in play do not. */
static inline int32_t order_key(uint32_t b)
{
    int32_t k = (int32_t)b;
    return k ^ (int32_t)((uint32_t)(k >> 31) >> 1);
}

/*
 * Replace NaN by -inf and +inf by FLT_MAX, and find the maximum and the lowest id
 * that reaches it. When nothing is finite every logit becomes 0 (uniform), so the
 * caller always has a maximum to subtract and a token to return. The first pass
 * works on bit patterns and an integer maximum, so it is branch-free SIMD; the
 * second looks for the first copy of the maximum sixteen tokens at a time.
 */
static float sanitize(float *logits, int32_t vocab, int32_t *argmax)
{
    const uint32_t neg_inf = 0xff800000u, pos_inf = 0x7f800000u, flt_max = 0x7f7fffffu;
    int32_t key_m = INT32_MIN;
    for (int32_t j = 0; j < vocab; j++) {
        uint32_t b = f32_bits(logits[j]);
        b = (b & 0x7fffffffu) > pos_inf ? neg_inf : b;
        b = b == pos_inf ? flt_max : b;
        logits[j] = bits_f32(b);
        int32_t key = order_key(b);
        key_m = key > key_m ? key : key_m;
    }
    uint32_t mb = (uint32_t)order_key((uint32_t)key_m); /* order_key is its own inverse */
    if (mb == neg_inf) {
        for (int32_t j = 0; j < vocab; j++)
            logits[j] = 0.0f;
        *argmax = 0;
        return 0.0f;
    }
    int32_t j = 0;
    for (; j + 16 <= vocab; j += 16) {
        int hit = 0;
        for (int k = 0; k < 16; k++)
            hit |= f32_bits(logits[j + k]) == mb;
        if (hit) break;
    }
    while (f32_bits(logits[j]) != mb)
        j++;
    *argmax = j;
    return bits_f32(mb);
}

/* ---- step 4: logprobs ------------------------------------------------------------ */

/* log(sum_j e^logits[j]), computed around the maximum `m` so nothing overflows.
 * `w` [vocab] is scratch. */
static double log_sum_exp(const float *logits, int32_t vocab, float m, float *w)
{
    exp_weights(logits, vocab, m, 1.0f, w);
    return (double)m + log(sum_weights(w, vocab));
}

/* True when token (la, ia) ranks above (lb, ib): larger logit, then lower id. This
 * total order makes every selection below deterministic. */
static inline int ranks_above(float la, int32_t ia, float lb, int32_t ib)
{
    return la > lb || (la == lb && ia < ib);
}

/* The `n` (<= 5) most likely tokens, best first, skipping -inf (impossible tokens
 * have no meaningful logprob and -inf does not fit in JSON). One pass keeping a
 * tiny sorted array. */
static void top_logprobs(const float *logits, int32_t vocab, int32_t n, double lse,
                         struct sample_out *out)
{
    int32_t ids[SAMPLER_MAX_LOGPROBS];
    float vals[SAMPLER_MAX_LOGPROBS];
    int32_t have = 0;
    for (int32_t j = 0; j < vocab && n > 0; j += SAMPLER_BLOCK) {
        int32_t end = MIN(j + SAMPLER_BLOCK, vocab);
        /* Once the list is full, a block with nothing at or above its last entry
         * is skipped after one vectorised count; far into the scan most are. */
        if (have == n && count_ge(logits + j, NULL, end - j, vals[n - 1], NULL) == 0)
            continue;
        for (int32_t i = j; i < end; i++) {
            float l = logits[i];
            if (l == -INFINITY) continue;
            if (have == n && !ranks_above(l, i, vals[n - 1], ids[n - 1])) continue;
            int32_t pos = have < n ? have++ : n - 1;
            while (pos > 0 && ranks_above(l, i, vals[pos - 1], ids[pos - 1])) {
                vals[pos] = vals[pos - 1];
                ids[pos] = ids[pos - 1];
                pos--;
            }
            vals[pos] = l;
            ids[pos] = i;
        }
    }
    out->n_top = have;
    for (int32_t i = 0; i < have; i++) {
        out->top_ids[i] = ids[i];
        out->top_logprobs[i] = (float)((double)vals[i] - lse);
    }
}

/* ---- step 5: selection over candidates ----------------------------------------- */

static inline int cand_above(const struct sampler_cand *a, const struct sampler_cand *b)
{
    return ranks_above(a->logit, a->id, b->logit, b->id);
}

static inline void cand_swap(struct sampler_cand *c, int32_t i, int32_t j)
{
    struct sampler_cand t = c[i];
    c[i] = c[j];
    c[j] = t;
}

/* Sort c[lo, hi) best first. Only used on ranges of at most SAMPLER_SMALL. */
static void cand_insertion_sort(struct sampler_cand *c, int32_t lo, int32_t hi)
{
    for (int32_t i = lo + 1; i < hi; i++) {
        struct sampler_cand x = c[i];
        int32_t j = i;
        while (j > lo && cand_above(&x, &c[j - 1])) {
            c[j] = c[j - 1];
            j--;
        }
        c[j] = x;
    }
}

/*
 * Partition c[lo, hi) (hi - lo >= 3) around a median-of-three pivot: on return the
 * pivot is at the returned index i, everything in [lo, i) ranks above it and
 * everything in (i, hi) below. *mass_above receives the sum of w over [lo, i).
 * Ids are unique, so no two candidates tie and the split is always strict.
 */
static int32_t cand_partition(struct sampler_cand *c, int32_t lo, int32_t hi,
                              double *mass_above)
{
    int32_t mid = lo + (hi - lo) / 2, last = hi - 1;
    /* Order c[lo], c[mid], c[last] so the median lands in c[mid], then park it at
     * the end where the scan below does not touch it. */
    if (cand_above(&c[mid], &c[lo])) cand_swap(c, mid, lo);
    if (cand_above(&c[last], &c[lo])) cand_swap(c, last, lo);
    if (cand_above(&c[last], &c[mid])) cand_swap(c, last, mid);
    cand_swap(c, mid, last);
    struct sampler_cand pv = c[last];
    double mass = 0.0;
    int32_t i = lo;
    for (int32_t j = lo; j < last; j++) {
        if (cand_above(&c[j], &pv)) {
            mass += c[j].w;
            cand_swap(c, i, j);
            i++;
        }
    }
    cand_swap(c, i, last);
    *mass_above = mass;
    return i;
}

/* Rearrange c[0, n) so that its k best (0 < k < n) come first, in no particular
 * order. Quickselect: expected O(n), and nothing beyond the k-th is ever sorted. */
static void cand_top_k(struct sampler_cand *c, int32_t n, int32_t k)
{
    int32_t lo = 0, hi = n;
    while (hi - lo > SAMPLER_SMALL) {
        double unused;
        int32_t i = cand_partition(c, lo, hi, &unused);
        if (i == k || i + 1 == k) return;
        if (i > k)
            hi = i;
        else
            lo = i + 1;
    }
    cand_insertion_sort(c, lo, hi);
}

/*
 * The nucleus: rearrange c[0, n) so that the smallest best-first prefix whose mass
 * (sum of w) reaches `target` (> 0) comes first, and return its length (>= 1).
 * Like quickselect, but the side to keep is chosen by mass rather than by count:
 * if the candidates above the pivot already reach the target, the cut lies among
 * them; otherwise they and the pivot are all in, and the cut lies below. Expected
 * O(n) even when the nucleus is most of the vocabulary (flat distributions).
 */
static int32_t cand_nucleus(struct sampler_cand *c, int32_t n, double target)
{
    int32_t lo = 0, hi = n;
    double acc = 0.0; /* mass of c[0, lo), all in the nucleus; always below target */
    while (hi - lo > SAMPLER_SMALL) {
        double above;
        int32_t i = cand_partition(c, lo, hi, &above);
        if (acc + above >= target) {
            hi = i;
        } else {
            acc += above + c[i].w;
            lo = i + 1;
            if (acc >= target) return lo;
        }
    }
    cand_insertion_sort(c, lo, hi);
    for (int32_t j = lo; j < hi; j++) {
        acc += c[j].w;
        if (acc >= target) return j + 1;
    }
    /* Summing in a different order than the partition did can fall short of the
     * target by a rounding error; the whole remaining range is then the nucleus. */
    return hi > 0 ? hi : 1;
}

/*
 * Draw from weights w[0, n) with total `total`: the first index where the running
 * sum passes u * total. Whole blocks of 64 are skipped by their (vectorised) sums
 * while the running sum stays below the target; the block that crosses it is
 * scanned one by one. Rounding can leave the last running sum a hair below
 * u * total; then the last index with a non-zero weight is taken, never an
 * impossible one.
 */
static int32_t draw_index(const float *w, int32_t n, double total, struct rng *rng)
{
    double u = rng_uniform(rng) * total, acc = 0.0;
    int32_t j = 0;
    for (; j + 64 <= n; j += 64) {
        double b = sum_weights(w + j, 64);
        if (acc + b > u) break;
        acc += b;
    }
    for (; j < n; j++) {
        acc += w[j];
        if (w[j] > 0.0f && acc > u) return j;
    }
    for (j = n - 1; j > 0 && !(w[j] > 0.0f); j--)
        continue;
    return j;
}

/* The same draw over candidates, whose total is summed here. */
static int32_t draw_cand(const struct sampler_cand *c, int32_t n, struct rng *rng)
{
    double total = 0.0;
    for (int32_t j = 0; j < n; j++)
        total += c[j].w;
    double u = rng_uniform(rng) * total, acc = 0.0;
    int32_t last = 0;
    for (int32_t j = 0; j < n; j++) {
        if (!(c[j].w > 0.0f)) continue;
        acc += c[j].w;
        last = j;
        if (acc > u) return c[j].id;
    }
    return c[last].id;
}

/* count_ge for SAMPLER_N_TAU thresholds in one sweep: the constant inner loop
 * unrolls into independent sums, which the compiler vectorises side by side. */
static void count_ge_n(const float *x, const float *w, int32_t n, const float *tau,
                       int32_t *count, int64_t *mass)
{
    int32_t cnt[SAMPLER_N_TAU] = {0};
    int64_t sum[SAMPLER_N_TAU] = {0};
    if (w) {
        for (int32_t j = 0; j < n; j++) {
            int64_t wf = (int64_t)(w[j] * SAMPLER_FIX_ONE);
            for (int t = 0; t < SAMPLER_N_TAU; t++) {
                int in = x[j] >= tau[t];
                cnt[t] += in;
                sum[t] += in ? wf : 0;
            }
        }
    } else {
        for (int32_t j = 0; j < n; j++)
            for (int t = 0; t < SAMPLER_N_TAU; t++)
                cnt[t] += x[j] >= tau[t];
    }
    for (int t = 0; t < SAMPLER_N_TAU; t++)
        count[t] = cnt[t], mass[t] = sum[t];
}

/*
 * A logit threshold for top-k (w == NULL: at least `k` tokens at or above it) or
 * top-p (w != NULL: tokens at or above it hold at least `target` of w's mass), as
 * high as a few sweeps can find; -inf when only the whole vocabulary is known to
 * suffice. The first sweep tries distances of 1, 4, 16 and 64 times `scale`
 * below the maximum m (for top-p, scale is the temperature, so the weight at the
 * threshold goes from e^-1 to e^-64); each later sweep splits the gap between the
 * last distance that fell short and the first that sufficed, while many
 * candidates would pass and a third or more of them might not be needed. Each
 * sweep is vectorised, where a histogram would scatter into memory token by token.
 */
static float find_tau(const float *logits, const float *w, int32_t vocab, float m,
                      float scale, int32_t k, double target)
{
    const int64_t need = (int64_t)ceil(target * (double)SAMPLER_FIX_ONE);
    const int32_t few = SAMPLER_FEW_CANDS + 4 * k;
    float dist[SAMPLER_N_TAU], tau[SAMPLER_N_TAU];
    int32_t count[SAMPLER_N_TAU];
    int64_t mass[SAMPLER_N_TAU];
    float lo = 0.0f, hi = -1.0f; /* distances: `lo` falls short, `hi` suffices */
    int32_t n_lo = 0, n_hi = 0;
    for (int sweep = 0; sweep < 6; sweep++) {
        for (int t = 0; t < SAMPLER_N_TAU; t++) {
            if (sweep == 0)
                dist[t] = scale * (float)(1 << (2 * t)); /* 1, 4, 16, 64 */
            else
                dist[t] = lo + (hi - lo) * (float)(t + 1) / (float)(SAMPLER_N_TAU + 1);
            tau[t] = m - dist[t];
        }
        count_ge_n(logits, w, vocab, tau, count, mass);
        int t = 0;
        while (t < SAMPLER_N_TAU && (w ? mass[t] < need : count[t] < k))
            t++;
        if (t > 0) lo = dist[t - 1], n_lo = count[t - 1];
        if (t < SAMPLER_N_TAU) hi = dist[t], n_hi = count[t];
        if (hi < 0.0f) return -INFINITY; /* not even 64 * scale below the maximum */
        if (n_hi <= few || n_hi <= n_lo + n_lo / 2) break;
    }
    return m - hi;
}

/*
 * Put every token with logit >= tau (and > -inf; with `w`, also weight > 0) into
 * c, with its weight when `w` is given; returns how many. A block of
 * SAMPLER_BLOCK tokens is skipped after one vectorised count when none passes,
 * which is most blocks for top-k; within a block the candidate is written
 * unconditionally and the count advanced by the test, so no branch mispredicts
 * when the passing tokens are scattered (a wide nucleus).
 */
static int32_t collect(const float *logits, const float *w, int32_t vocab, float tau,
                       struct sampler_cand *c)
{
    int32_t n = 0;
    for (int32_t j = 0; j < vocab; j += SAMPLER_BLOCK) {
        int32_t end = MIN(j + SAMPLER_BLOCK, vocab);
        if (count_ge(logits + j, NULL, end - j, tau, NULL) == 0) continue;
        for (int32_t i = j; i < end; i++) {
            float l = logits[i], wi = w ? w[i] : 0.0f;
            c[n].logit = l;
            c[n].w = wi;
            c[n].id = i;
            n += l >= tau && l > -INFINITY && (!w || wi > 0.0f);
        }
    }
    return n;
}

/*
 * Top-k candidates: c[0, n) on return hold the k best finite tokens (n < k only
 * when fewer are finite), weighted at temperature 1 / inv_t; returns n. A
 * threshold search narrows the vocabulary to about k tokens (or a thousand), and
 * quickselect finishes on those.
 */
static int32_t select_top_k(const float *logits, int32_t vocab, float m, float inv_t,
                            int32_t k, struct sampler_cand *c)
{
    float tau = find_tau(logits, NULL, vocab, m, 1.0f, k, 0.0);
    int32_t n = collect(logits, NULL, vocab, tau, c);
    if (n > k) {
        cand_top_k(c, n, k);
        n = k;
    }
    for (int32_t j = 0; j < n; j++)
        c[j].w = fast_exp((c[j].logit - m) * inv_t);
    return n;
}

/*
 * Top-p candidates without top-k: the nucleus at `top_p` of the weights `w`
 * [vocab] (total `total`), placed in c[0, n); returns n >= 1. A threshold search
 * narrows the vocabulary to tokens that surely hold the nucleus (checked exactly
 * here, in double; the whole vocabulary when the check fails), and the
 * mass-partition selection finds the exact nucleus among them.
 */
static int32_t select_top_p(const float *logits, const float *w, int32_t vocab, float m,
                            float temperature, double total, float top_p,
                            struct sampler_cand *c)
{
    double target = (double)top_p * total;
    float tau = find_tau(logits, w, vocab, m, temperature, 0, target);
    int32_t n = collect(logits, w, vocab, tau, c);
    double kept = 0.0;
    for (int32_t j = 0; j < n; j++)
        kept += c[j].w;
    if (kept < target && tau > -INFINITY) n = collect(logits, w, vocab, -INFINITY, c);
    return n > 1 ? cand_nucleus(c, n, target) : n;
}

/*
 * Step 5 for a non-greedy request. `m` is the maximum processed logit. When the
 * full-vocabulary sum of e^(logit - m) at temperature 1 falls out as a by-product,
 * it is stored in *sum_t1 so the logprobs need not recompute it (left < 0
 * otherwise).
 */
static int32_t sample_random(const struct sampler_params *p, const float *logits,
                             int32_t vocab, float m, struct rng *rng,
                             struct sampler_scratch *s, double *sum_t1)
{
    float inv_t = 1.0f / MIN(p->temperature, SAMPLER_MAX_TEMPERATURE);
    int top_k_on = p->top_k > 0 && p->top_k < vocab;
    int top_p_on = p->top_p < 1.0f;

    if (top_k_on) {
        /* Select by logit first, so exp runs only on the k survivors; top_p then
         * applies to what top-k left, renormalised. */
        int32_t n = select_top_k(logits, vocab, m, inv_t, p->top_k, s->cand);
        if (top_p_on && n > 1) {
            double total = 0.0;
            for (int32_t j = 0; j < n; j++)
                total += s->cand[j].w;
            n = cand_nucleus(s->cand, n, (double)p->top_p * total);
        }
        return draw_cand(s->cand, n, rng);
    }

    exp_weights(logits, vocab, m, inv_t, s->w);
    double total = sum_weights(s->w, vocab);
    if (p->temperature == 1.0f) *sum_t1 = total;
    if (!top_p_on) return draw_index(s->w, vocab, total, rng);
    float t = MIN(p->temperature, SAMPLER_MAX_TEMPERATURE);
    int32_t n = select_top_p(logits, s->w, vocab, m, t, total, p->top_p, s->cand);
    return draw_cand(s->cand, n, rng);
}

/* ---- the whole call -------------------------------------------------------------- */

int32_t sampler_sample(const struct sampler_params *p, float *logits, int32_t vocab,
                       const int32_t *out_tokens, int32_t n_out, struct rng *rng,
                       struct sampler_scratch *scratch, struct sample_out *out)
{
    CHECK(p && logits && vocab > 0 && rng && scratch && out);
    CHECK(n_out == 0 || out_tokens);
    CHECK(p->n_bias == 0 || (p->bias_ids && p->bias_vals));
    CHECK(p->n_logprobs <= SAMPLER_MAX_LOGPROBS);
    scratch_reserve(scratch, vocab);

    apply_bias(p, logits, vocab);
    apply_penalties(p, logits, vocab, out_tokens, n_out, scratch->counts);
    int32_t argmax;
    float m = sanitize(logits, vocab, &argmax);

    /* Greedy when asked (temperature 0, or below SAMPLER_MIN_TEMPERATURE) and
     * wherever the other knobs leave a single candidate (top_k 1, top_p 0): the
     * answer is the argmax, no draw needed. NaN settings fall here too, as the
     * negated comparisons are true for NaN. */
    int greedy =
        !(p->temperature >= SAMPLER_MIN_TEMPERATURE) || p->top_k == 1 || !(p->top_p > 0.0f);
    double sum_t1 = -1.0;
    int32_t token =
        greedy ? argmax : sample_random(p, logits, vocab, m, rng, scratch, &sum_t1);

    memset(out, 0, sizeof *out);
    out->token = token;
    if (p->n_logprobs >= 0) {
        double lse = sum_t1 > 0.0 ? (double)m + log(sum_t1)
                                  : log_sum_exp(logits, vocab, m, scratch->w);
        out->logprob = (float)((double)logits[token] - lse);
        top_logprobs(logits, vocab, p->n_logprobs, lse, out);
    }
    return token;
}
