/*
 * cuda_sample.cu - one decode step's sampling on the device (see cuda_kernels.h and
 * struct cuda_sample_args in cuda_ref.h): the twin of engine/sampler.c's steps 3-5,
 * checked against cuda_ref_sample (itself checked against sampler_sample).
 *
 * One block of 1024 threads per row. Everything that does not depend on the order
 * of operations runs across the block: the order-key maximum and the first index
 * holding it (greedy), the weights, the threshold search's counts and integer masses,
 * the ordered collection of candidates (a prefix sum over contiguous chunks keeps
 * them in id order, as the CPU's scan does), the log-sum-exp (a double tree sum;
 * logprobs agree within 1e-5) and the top-N alternatives (a per-thread list, then N
 * rounds of a block maximum over packed (logit key, ~id) words). Everything whose
 * result depends on the order of floating-point sums or on the candidates' order runs
 * exactly as the CPU does it: the full-vocabulary total in sampler.c's eight
 * interleaved lanes (eight threads, one lane each), the 64-token block sums of the
 * draw, and the selection (quickselect, the nucleus partition) and the draw itself on
 * thread 0 over the few candidates. So for the same u the same token comes out, up
 * to FMA contraction differences in fast_exp between the host compiler and nvcc.
 * Workspace: a->scratch, 16 bytes per token per row (candidates, weights).
 */
#include "cuda_kernels.h"

#include <stdint.h>

enum { CS_THREADS = 1024, CS_WARPS = CS_THREADS / 32, CS_N_TAU = 4, CS_FEW = 1024,
       CS_SMALL = 16 };
#define CS_FIX_ONE 16777216.0f
#define CS_MIN_TEMPERATURE 1e-5f
#define CS_MAX_TEMPERATURE 1e30f

/* sampler_impl.h's struct sampler_cand. */
struct cs_cand {
    float logit;
    float w;
    int32_t id;
};

/* ---- the CPU sampler's scalar pieces --------------------------------------------- */

__device__ static inline int32_t cs_order_key(uint32_t b)
{
    int32_t k = (int32_t)b;
    return k ^ (int32_t)((uint32_t)(k >> 31) >> 1);
}

/* Step 3 on one logit: NaN -> -inf, +inf -> FLT_MAX. */
__device__ static inline float cs_clean(float l)
{
    uint32_t b = __float_as_uint(l);
    b = (b & 0x7fffffffu) > 0x7f800000u ? 0xff800000u : b;
    b = b == 0x7f800000u ? 0x7f7fffffu : b;
    return __uint_as_float(b);
}

/* engine/util/fast_exp.h's fast_exp. */
__device__ static inline float cs_fast_exp(float x)
{
    const float shifter = 12582912.0f;
    const float ln2_hi = 0.693145751953125f, ln2_lo = 1.42860676533018e-6f;
    float xc = x < -87.0f ? -87.0f : x;
    float kf = xc * 1.44269504088896341f + shifter;
    uint32_t n_bits = __float_as_uint(kf) - __float_as_uint(shifter);
    kf -= shifter;
    float r = (xc - kf * ln2_hi) - kf * ln2_lo;
    float p = 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    float scale = __uint_as_float((n_bits + 127u) << 23);
    return x < -87.0f ? 0.0f : p * scale;
}

__device__ static inline bool cs_above(const struct cs_cand *a, const struct cs_cand *b)
{
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

__device__ static inline void cs_swap(struct cs_cand *c, int32_t i, int32_t j)
{
    struct cs_cand t = c[i];
    c[i] = c[j];
    c[j] = t;
}

/* sampler_select.c's cand_insertion_sort, cand_partition, cand_top_k and
 * sampler_select_nucleus, line for line (thread 0 only). */
__device__ static void cs_insertion_sort(struct cs_cand *c, int32_t lo, int32_t hi)
{
    for (int32_t i = lo + 1; i < hi; i++) {
        struct cs_cand x = c[i];
        int32_t j = i;
        while (j > lo && cs_above(&x, &c[j - 1])) {
            c[j] = c[j - 1];
            j--;
        }
        c[j] = x;
    }
}

__device__ static int32_t cs_partition(struct cs_cand *c, int32_t lo, int32_t hi,
                                       double *mass_above)
{
    int32_t mid = lo + (hi - lo) / 2, last = hi - 1;
    if (cs_above(&c[mid], &c[lo])) cs_swap(c, mid, lo);
    if (cs_above(&c[last], &c[lo])) cs_swap(c, last, lo);
    if (cs_above(&c[last], &c[mid])) cs_swap(c, last, mid);
    cs_swap(c, mid, last);
    struct cs_cand pv = c[last];
    double mass = 0.0;
    int32_t i = lo;
    for (int32_t j = lo; j < last; j++) {
        if (cs_above(&c[j], &pv)) {
            mass += c[j].w;
            cs_swap(c, i, j);
            i++;
        }
    }
    cs_swap(c, i, last);
    *mass_above = mass;
    return i;
}

__device__ static void cs_top_k(struct cs_cand *c, int32_t n, int32_t k)
{
    int32_t lo = 0, hi = n;
    while (hi - lo > CS_SMALL) {
        double unused;
        int32_t i = cs_partition(c, lo, hi, &unused);
        if (i == k || i + 1 == k) return;
        if (i > k)
            hi = i;
        else
            lo = i + 1;
    }
    cs_insertion_sort(c, lo, hi);
}

__device__ static int32_t cs_nucleus(struct cs_cand *c, int32_t n, double target)
{
    int32_t lo = 0, hi = n;
    double acc = 0.0;
    while (hi - lo > CS_SMALL) {
        double above;
        int32_t i = cs_partition(c, lo, hi, &above);
        if (acc + above >= target) {
            hi = i;
        } else {
            acc += above + c[i].w;
            lo = i + 1;
            if (acc >= target) return lo;
        }
    }
    cs_insertion_sort(c, lo, hi);
    for (int32_t j = lo; j < hi; j++) {
        acc += c[j].w;
        if (acc >= target) return j + 1;
    }
    return hi > 0 ? hi : 1;
}

/* sampler.c's draw_cand with u in place of the rng (thread 0). */
__device__ static int32_t cs_draw_cand(const struct cs_cand *c, int32_t n, double u01)
{
    double total = 0.0;
    for (int32_t j = 0; j < n; j++)
        total += c[j].w;
    double u = u01 * total, acc = 0.0;
    int32_t last = 0;
    for (int32_t j = 0; j < n; j++) {
        if (!(c[j].w > 0.0f)) continue;
        acc += c[j].w;
        last = j;
        if (acc > u) return c[j].id;
    }
    return c[last].id;
}

/* sampler.c's sum_weights over w[0, n), one thread. */
__device__ static double cs_sum8(const float *w, int32_t n)
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

/* ---- block-wide pieces (every thread of the block calls them) --------------------- */

struct cs_shared {
    unsigned long long u64[CS_WARPS];
    long long i64[CS_WARPS][CS_N_TAU];
    int32_t i32[CS_WARPS][CS_N_TAU];
    double f64[CS_WARPS];
    int32_t prefix[CS_THREADS];
    double lane[8];
    int32_t n_cand, token;
    double total;
};

__device__ static unsigned long long cs_max_u64(unsigned long long v, struct cs_shared *sh)
{
    for (int o = 16; o > 0; o >>= 1) {
        unsigned long long x = __shfl_xor_sync(0xffffffffu, v, o);
        v = x > v ? x : v;
    }
    if (threadIdx.x % 32 == 0) sh->u64[threadIdx.x / 32] = v;
    __syncthreads();
    v = 0;
    for (int i = 0; i < CS_WARPS; i++)
        v = sh->u64[i] > v ? sh->u64[i] : v;
    __syncthreads();
    return v;
}

__device__ static double cs_sum_f64(double v, struct cs_shared *sh)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    if (threadIdx.x % 32 == 0) sh->f64[threadIdx.x / 32] = v;
    __syncthreads();
    v = 0.0;
    for (int i = 0; i < CS_WARPS; i++)
        v += sh->f64[i];
    __syncthreads();
    return v;
}

/* Counts (and integer masses) of CS_N_TAU thresholds, summed over the block. */
__device__ static void cs_count4(int32_t cnt[CS_N_TAU], long long mass[CS_N_TAU],
                                 struct cs_shared *sh)
{
    for (int t = 0; t < CS_N_TAU; t++) {
        for (int o = 16; o > 0; o >>= 1) {
            cnt[t] += __shfl_xor_sync(0xffffffffu, cnt[t], o);
            mass[t] += __shfl_xor_sync(0xffffffffu, mass[t], o);
        }
        if (threadIdx.x % 32 == 0) {
            sh->i32[threadIdx.x / 32][t] = cnt[t];
            sh->i64[threadIdx.x / 32][t] = mass[t];
        }
    }
    __syncthreads();
    for (int t = 0; t < CS_N_TAU; t++) {
        cnt[t] = 0;
        mass[t] = 0;
        for (int i = 0; i < CS_WARPS; i++)
            cnt[t] += sh->i32[i][t], mass[t] += sh->i64[i][t];
    }
    __syncthreads();
}

/* The row's processed logit j (step 3; all zero when nothing is finite). */
__device__ static inline float cs_x(const float *L, int32_t j, bool all_inf)
{
    return all_inf ? 0.0f : cs_clean(L[j]);
}

/* sampler_select.c's find_tau; w == NULL for top-k. */
__device__ static float cs_find_tau(const float *L, bool all_inf, const float *w, int32_t V,
                                    float m, float scale, int32_t k, double target,
                                    struct cs_shared *sh)
{
    const long long need = (long long)ceil(target * (double)CS_FIX_ONE);
    const int32_t few = CS_FEW + 4 * k;
    float dist[CS_N_TAU], tau[CS_N_TAU];
    float lo = 0.0f, hi = -1.0f;
    int32_t n_lo = 0, n_hi = 0;
    for (int sweep = 0; sweep < 6; sweep++) {
        for (int t = 0; t < CS_N_TAU; t++) {
            if (sweep == 0)
                dist[t] = scale * (float)(1 << (2 * t));
            else
                dist[t] = lo + (hi - lo) * (float)(t + 1) / (float)(CS_N_TAU + 1);
            tau[t] = m - dist[t];
        }
        int32_t count[CS_N_TAU] = {0};
        long long mass[CS_N_TAU] = {0};
        for (int32_t j = threadIdx.x; j < V; j += CS_THREADS) {
            float x = cs_x(L, j, all_inf);
            long long wf = w ? (long long)(w[j] * CS_FIX_ONE) : 0;
            for (int t = 0; t < CS_N_TAU; t++) {
                int in = x >= tau[t];
                count[t] += in;
                mass[t] += in ? wf : 0;
            }
        }
        cs_count4(count, mass, sh);
        int t = 0;
        while (t < CS_N_TAU && (w ? mass[t] < need : count[t] < k))
            t++;
        if (t > 0) lo = dist[t - 1], n_lo = count[t - 1];
        if (t < CS_N_TAU) hi = dist[t], n_hi = count[t];
        if (hi < 0.0f) return -INFINITY;
        if (n_hi <= few || n_hi <= n_lo + n_lo / 2) break;
    }
    return m - hi;
}

/* sampler_select.c's collect: the passing tokens in id order into c; returns how
 * many (on every thread). Each thread scans one contiguous chunk; a prefix sum over
 * the chunk counts places them. */
__device__ static int32_t cs_collect(const float *L, bool all_inf, const float *w, int32_t V,
                                     float tau, struct cs_cand *c, struct cs_shared *sh)
{
    const int32_t chunk = (V + CS_THREADS - 1) / CS_THREADS;
    const int32_t j0 = min(V, (int32_t)threadIdx.x * chunk), j1 = min(V, j0 + chunk);
    int32_t mine = 0;
    for (int32_t j = j0; j < j1; j++) {
        float x = cs_x(L, j, all_inf);
        mine += x >= tau && x > -INFINITY && (!w || w[j] > 0.0f);
    }
    sh->prefix[threadIdx.x] = mine;
    __syncthreads();
    if (threadIdx.x == 0) {
        int32_t s = 0;
        for (int i = 0; i < CS_THREADS; i++) {
            int32_t v = sh->prefix[i];
            sh->prefix[i] = s;
            s += v;
        }
        sh->n_cand = s;
    }
    __syncthreads();
    int32_t n = sh->prefix[threadIdx.x];
    for (int32_t j = j0; j < j1; j++) {
        float x = cs_x(L, j, all_inf);
        if (x >= tau && x > -INFINITY && (!w || w[j] > 0.0f)) {
            c[n].logit = x;
            c[n].w = w ? w[j] : 0.0f;
            c[n].id = j;
            n++;
        }
    }
    int32_t total = sh->n_cand;
    __syncthreads();
    return total;
}

/* sampler.c's sum_weights over the whole row, in its order: lanes on threads 0-7. */
__device__ static double cs_total8(const float *w, int32_t V, struct cs_shared *sh)
{
    const int32_t body = V / 8 * 8;
    if (threadIdx.x < 8) {
        double s = 0.0;
        for (int32_t j = threadIdx.x; j < body; j += 8)
            s += (double)w[j];
        sh->lane[threadIdx.x] = s;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        double s = 0.0;
        for (int32_t j = body; j < V; j++)
            s += (double)w[j];
        for (int k = 0; k < 8; k++)
            s += sh->lane[k];
        sh->total = s;
    }
    __syncthreads();
    double total = sh->total;
    __syncthreads();
    return total;
}

/* ---- the kernel ------------------------------------------------------------------- */

__global__ void __launch_bounds__(CS_THREADS) cuda_sample_kernel(struct cuda_sample_args a)
{
    __shared__ struct cs_shared sh;
    const int32_t row = blockIdx.x, V = a.vocab, NT = CUDA_SAMPLE_MAX_TOP;
    const float *L = a.logits + (int64_t)row * V;
    /* The row's 16 bytes per token of workspace: V candidates, then V weights; the
     * 64-token block sums of the plain draw reuse the (then unused, 16-byte
     * aligned) candidate space. */
    char *base = (char *)a.scratch + (int64_t)row * V * 16;
    struct cs_cand *C = (struct cs_cand *)base;
    float *W = (float *)(base + (int64_t)V * 12);

    /* The maximum by order key and the first index holding its bits. */
    unsigned long long best = 0;
    for (int32_t j = threadIdx.x; j < V; j += CS_THREADS) {
        uint32_t k = (uint32_t)cs_order_key(__float_as_uint(cs_clean(L[j]))) ^ 0x80000000u;
        best = k > best ? k : best;
    }
    best = cs_max_u64(best, &sh);
    const uint32_t mb = (uint32_t)cs_order_key((uint32_t)best ^ 0x80000000u);
    const bool all_inf = mb == 0xff800000u;
    const float m = all_inf ? 0.0f : __uint_as_float(mb);
    unsigned long long first = 0; /* ~index, so the maximum is the lowest index */
    for (int32_t j = threadIdx.x; j < V; j += CS_THREADS)
        if (__float_as_uint(cs_x(L, j, all_inf)) == __float_as_uint(m)) {
            first = ~(unsigned long long)j;
            break;
        }
    first = cs_max_u64(first, &sh);
    const int32_t argmax = (int32_t)~first;

    const float temp = a.temperature[row], top_p = a.top_p[row];
    const int32_t top_k = a.top_k[row], nlp = a.n_logprobs[row];
    const bool greedy = !(temp >= CS_MIN_TEMPERATURE) || top_k == 1 || !(top_p > 0.0f);
    int32_t token = argmax;
    if (!greedy) {
        const double u01 = a.u[row];
        const float t = fminf(temp, CS_MAX_TEMPERATURE), inv_t = 1.0f / t;
        const bool top_k_on = top_k > 0 && top_k < V, top_p_on = top_p < 1.0f;
        if (top_k_on) {
            float tau = cs_find_tau(L, all_inf, NULL, V, m, 1.0f, top_k, 0.0, &sh);
            int32_t n = cs_collect(L, all_inf, NULL, V, tau, C, &sh);
            if (threadIdx.x == 0) {
                if (n > top_k) {
                    cs_top_k(C, n, top_k);
                    n = top_k;
                }
                for (int32_t j = 0; j < n; j++)
                    C[j].w = cs_fast_exp((C[j].logit - m) * inv_t);
                if (top_p_on && n > 1) {
                    double total = 0.0;
                    for (int32_t j = 0; j < n; j++)
                        total += C[j].w;
                    n = cs_nucleus(C, n, (double)top_p * total);
                }
                sh.token = cs_draw_cand(C, n, u01);
            }
        } else {
            for (int32_t j = threadIdx.x; j < V; j += CS_THREADS)
                W[j] = cs_fast_exp((cs_x(L, j, all_inf) - m) * inv_t);
            __syncthreads();
            const double total = cs_total8(W, V, &sh);
            if (!top_p_on) {
                /* draw_index: the 64-token block sums in parallel (kept in the
                 * candidate space, unused on this path), then the walk on thread 0. */
                double *bsum = (double *)base;
                const int32_t nb = V / 64;
                for (int32_t b = threadIdx.x; b < nb; b += CS_THREADS)
                    bsum[b] = cs_sum8(W + (int64_t)b * 64, 64);
                __syncthreads();
                if (threadIdx.x == 0) {
                    double u = u01 * total, acc = 0.0;
                    int32_t j = 0, b = 0, tok = -1;
                    for (; b < nb; b++, j += 64) {
                        if (acc + bsum[b] > u) break;
                        acc += bsum[b];
                    }
                    for (; j < V; j++) {
                        acc += W[j];
                        if (W[j] > 0.0f && acc > u) {
                            tok = j;
                            break;
                        }
                    }
                    if (tok < 0)
                        for (tok = V - 1; tok > 0 && !(W[tok] > 0.0f); tok--)
                            continue;
                    sh.token = tok;
                }
            } else {
                const double target = (double)top_p * total;
                float tau = cs_find_tau(L, all_inf, W, V, m, t, 0, target, &sh);
                int32_t n = cs_collect(L, all_inf, W, V, tau, C, &sh);
                if (threadIdx.x == 0) {
                    double kept = 0.0;
                    for (int32_t j = 0; j < n; j++)
                        kept += C[j].w;
                    sh.n_cand = kept < target && tau > -INFINITY ? -1 : n;
                }
                __syncthreads();
                n = sh.n_cand;
                __syncthreads();
                if (n < 0) n = cs_collect(L, all_inf, W, V, -INFINITY, C, &sh);
                if (threadIdx.x == 0) {
                    if (n > 1) n = cs_nucleus(C, n, target);
                    sh.token = cs_draw_cand(C, n, u01);
                }
            }
        }
        __syncthreads();
        token = sh.token;
    }

    if (threadIdx.x == 0) {
        a.token[row] = token;
        a.logprob[row] = 0.0f;
        a.n_top[row] = 0;
    }
    if ((int32_t)threadIdx.x < NT) {
        a.top_ids[(int64_t)row * NT + threadIdx.x] = 0;
        a.top_logprobs[(int64_t)row * NT + threadIdx.x] = 0.0f;
    }
    if (nlp < 0) return;

    /* log-sum-exp at temperature 1 and this thread's best nlp tokens, as packed
     * (order key, ~id) words: the larger word ranks above (larger logit, lower id). */
    double s = 0.0;
    unsigned long long list[CUDA_SAMPLE_MAX_TOP] = {0, 0, 0, 0, 0};
    for (int32_t j = threadIdx.x; j < V; j += CS_THREADS) {
        float x = cs_x(L, j, all_inf);
        s += (double)cs_fast_exp((x - m) * 1.0f);
        if (x == -INFINITY || nlp == 0) continue;
        /* -0 and +0 tie in the CPU's float comparison, so they share a key here. */
        const uint32_t xb = x == 0.0f ? 0u : __float_as_uint(x);
        unsigned long long key =
            (unsigned long long)((uint32_t)cs_order_key(xb) ^ 0x80000000u) << 32 |
            (uint32_t)~(uint32_t)j;
        if (key <= list[nlp - 1]) continue;
        int32_t pos = nlp - 1;
        while (pos > 0 && key > list[pos - 1]) {
            list[pos] = list[pos - 1];
            pos--;
        }
        list[pos] = key;
    }
    const double lse = (double)m + log(cs_sum_f64(s, &sh));
    int32_t head = 0;
    for (int32_t r = 0; r < nlp; r++) {
        unsigned long long mine = head < nlp ? list[head] : 0;
        unsigned long long top = cs_max_u64(mine, &sh);
        if (top == 0) break; /* fewer finite tokens than asked */
        if (mine == top) head++;
        if (threadIdx.x == 0) {
            int32_t id = (int32_t)~(uint32_t)(top & 0xffffffffu);
            float x = __uint_as_float(
                (uint32_t)cs_order_key((uint32_t)(top >> 32) ^ 0x80000000u));
            a.top_ids[(int64_t)row * NT + r] = id;
            a.top_logprobs[(int64_t)row * NT + r] = (float)((double)x - lse);
            a.n_top[row] = r + 1;
        }
    }
    if (threadIdx.x == 0) a.logprob[row] = (float)((double)cs_x(L, token, all_inf) - lse);
}

extern "C" cudaError_t cuda_sample(const struct cuda_sample_args *a, cudaStream_t stream)
{
    if (a->n < 0 || a->vocab <= 0 || !a->scratch)
        return cudaErrorInvalidValue;
    if (a->n == 0) return cudaSuccess;
    cuda_sample_kernel<<<(unsigned)a->n, CS_THREADS, 0, stream>>>(*a);
    return cudaGetLastError();
}
