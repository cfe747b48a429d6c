/*
 * cuda_decode_attn.cu - paged decode attention with the H2O score update and victim
 * choice fused in (see cuda_kernels.h and, for the exact contract, cuda_ref.h); the
 * twin of the decode path of cpu_attn_forward plus h2o_select_evict, and of the host
 * reference cuda_ref_decode_attn.
 *
 * One thread block per (sequence, KV head), DA_THREADS threads; with grouped-query
 * attention the group's query heads run in turn (steps 2-5 once per query head). A
 * query head's logits live in shared memory (one fp32 per slot; no attention matrix
 * in global memory), so a block reads its K and V tiles once from DRAM (again from
 * L1/L2 for the other query heads of the group) and touches the slot state a few
 * times (read pos, read-modify-write score per query head). Steps, each ended by a
 * barrier:
 *  1. write the new token's K, V, pos and score (= 0) into its slot; per query head,
 *     q * scale to shared memory;
 *  2. logits, one thread per slot: an fmaf chain over d in order (K tiles are
 *     transposed, so the 16 slots of a block are 16 consecutive halves per d and a
 *     warp's loads coalesce), block max;
 *  3. e = expf(l - max), block sum;
 *  4. p = e / sum: score += p (slots outside a sliding window get p = 0);
 *  5. out = sum p V: DA_THREADS / (head_dim / 2) groups of threads, each group one
 *     slot at a time with a half2 pair of the head per thread, then the groups'
 *     partial sums are added in shared memory in group order;
 *  6. after the group: the occupied count and each thread's best eviction candidates
 *     among its slots, reduced to the block's argmin (score, then position), and with
 *     a window the oldest slot outside the next token's window, which goes first.
 * With an int8 cache (a.k8 set) step 1 quantizes the token's K and V (one element per
 * thread, the head's max |x| reduced over the block, cuda_int8.cuh's rule), step 2
 * multiplies each slot's int8 dot product by its key scale and step 5 weights each
 * slot's int8 row by p * its value scale: fp32 throughout, never a dequantized tile,
 * and a quarter of fp32's (half of fp16's) K/V bytes read per step.
 */
#include "cuda_int8.cuh"
#include "cuda_kernels.h"

#include <cuda_fp16.h>

#include <math.h>

/* A multiple of 32, at most 1024. */
enum { DA_THREADS = 256, DA_WARPS = DA_THREADS / 32, DA_MAX_D = 256 };
/* Dynamic shared memory (4 bytes per slot) above which the launch opts in to more than
 * the default 48 KiB per block: 8192 slots. */
enum { DA_OPT_IN_BYTES = 32 * 1024 };

/* An eviction candidate: lower score first, then older position; slot -1 = none. */
struct da_cand {
    float score;
    int32_t pos, slot;
};

static __device__ bool da_better(const da_cand &x, const da_cand &y)
{
    if (x.slot < 0) return false;
    if (y.slot < 0) return true;
    if (x.score != y.score) return x.score < y.score;
    return x.pos < y.pos;
}

static __device__ float da_warp_max(float v)
{
    for (int off = 16; off > 0; off /= 2)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

static __device__ float da_warp_sum(float v)
{
    for (int off = 16; off > 0; off /= 2)
        v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

/* The block-wide max (is_max) or sum of v; every thread gets it. red: [DA_WARPS]. */
static __device__ float da_block_reduce(float v, float *red, bool is_max)
{
    v = is_max ? da_warp_max(v) : da_warp_sum(v);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) red[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < DA_WARPS ? red[lane] : (is_max ? -INFINITY : 0.0f);
        v = is_max ? da_warp_max(v) : da_warp_sum(v);
        if (lane == 0) red[0] = v;
    }
    __syncthreads();
    v = red[0];
    __syncthreads(); /* red is reused by the next call */
    return v;
}

static __device__ da_cand da_warp_argmin(da_cand c)
{
    for (int off = 16; off > 0; off /= 2) {
        da_cand o;
        o.score = __shfl_xor_sync(0xffffffffu, c.score, off);
        o.pos = __shfl_xor_sync(0xffffffffu, c.pos, off);
        o.slot = __shfl_xor_sync(0xffffffffu, c.slot, off);
        if (da_better(o, c)) c = o;
    }
    return c;
}

/* KV heads: n_kv_head, or n_head when 0. */
static __host__ __device__ int32_t da_kv_heads(const cuda_decode_attn_args &a)
{
    return a.n_kv_head > 0 ? a.n_kv_head : a.n_head;
}

/* Index of slot s of KV head g in a [n_blocks, KV, block_size] array. */
static __device__ int64_t da_slot_index(const cuda_decode_attn_args &a,
                                        const int32_t *blocks, int32_t s, int32_t g)
{
    return ((int64_t)blocks[s / a.block_size] * da_kv_heads(a) + g) * a.block_size +
           s % a.block_size;
}

/*
 * grid (KV, n_seq), block DA_THREADS, dynamic shared memory 4 * max_slots bytes. One
 * block per (sequence, KV head): the group's query heads run one after another over
 * the same slots, so each slot's score is read-modified-written by one thread, the
 * query heads in order, as the reference (and the CPU's attend_seq_kv_head) adds
 * them. The K/V tiles of the second and later query heads come from L1/L2.
 */
__global__
__launch_bounds__(DA_THREADS) void cuda_decode_attn_kernel(cuda_decode_attn_args a)
{
    extern __shared__ float lg[]; /* [n_slots] logits, then probabilities */
    __shared__ float q[DA_MAX_D];
    __shared__ float red[DA_WARPS];
    __shared__ float2 part[DA_THREADS]; /* [groups, head_dim / 2] partial outputs */
    __shared__ da_cand cand[DA_WARPS], wcand[DA_WARPS];
    __shared__ int32_t occ[DA_WARPS];

    const int32_t g = blockIdx.x, i = blockIdx.y, tid = threadIdx.x;
    const int32_t H = a.n_head, KV = da_kv_heads(a), D = a.head_dim, BS = a.block_size;
    const int32_t rep = H / KV;
    const cuda_decode_seq sq = a.seqs[i];
    const int32_t *blocks = a.blocks + (int64_t)i * a.max_blocks;
    const __half *row = (const __half *)a.qkv + (int64_t)i * (H + 2 * KV) * D;
    __half *kp = (__half *)a.k, *vp = (__half *)a.v;
    const int32_t n = sq.n_slots;
    /* Visible: 0 <= pos <= t and, with a window, pos > t - W. */
    const int64_t lo = a.window > 0 ? (int64_t)sq.t - a.window : -1;

    /* 1. The new token into its slot. */
    {
        const int64_t ni = da_slot_index(a, blocks, a.new_slot[(int64_t)i * KV + g], g);
        const int64_t tile = ni / BS, off = ni % BS;
        const __half *kn = row + (int64_t)H * D + (int64_t)g * D,
                     *vn = kn + (int64_t)KV * D;
        if (a.k8) {
            /* D <= DA_MAX_D == DA_THREADS: thread d quantizes element d. Threads past
             * the head add 0 to the max, which starts from 0 in the rule too. */
            const float kx = tid < D ? __half2float(kn[tid]) : 0.0f;
            const float vx = tid < D ? __half2float(vn[tid]) : 0.0f;
            const float kmax = da_block_reduce(fabsf(kx), red, true);
            const float vmax = da_block_reduce(fabsf(vx), red, true);
            if (tid < D) {
                a.k8[(tile * D + tid) * BS + off] = cuda_int8_elem(kx, kmax);
                a.v8[ni * D + tid] = cuda_int8_elem(vx, vmax);
            }
            if (tid == 0) {
                a.k_scale[ni] = cuda_int8_scale(kmax);
                a.v_scale[ni] = cuda_int8_scale(vmax);
            }
        } else {
            for (int32_t d = tid; d < D; d += DA_THREADS) {
                kp[(tile * D + d) * BS + off] = kn[d];
                vp[ni * D + d] = vn[d];
            }
        }
        if (tid == 0) {
            a.pos[ni] = sq.t;
            a.score[ni] = 0.0f;
        }
    }

    for (int32_t h = g * rep; h < (g + 1) * rep; h++) {
        /* The scaled query into shared memory. */
        for (int32_t d = tid; d < D; d += DA_THREADS)
            q[d] = __half2float(row[(int64_t)h * D + d]) * a.scale;
        /* Global writes by the block (step 1) are visible to it after the barrier;
         * for h > g * rep it also ends the previous head's reads of lg and q. */
        __syncthreads();

        /* 2. Logits of the visible slots, -inf elsewhere. */
        float mx = -INFINITY;
        for (int32_t j = tid; j < n; j += DA_THREADS) {
            const int64_t si = da_slot_index(a, blocks, j, g);
            const int64_t tj = si / BS, oj = si % BS;
            const int32_t pj = a.pos[si];
            float l = -INFINITY;
            if (pj >= 0 && pj <= sq.t && pj > lo) {
                float acc = 0.0f;
                if (a.k8) {
                    /* int8 widens to fp32 exactly; the scale is constant over the dot
                     * product, so it is applied once (the reference's order). */
                    const int8_t *kt = a.k8 + tj * D * BS + oj;
#pragma unroll 8
                    for (int32_t d = 0; d < D; d++)
                        acc = fmaf(q[d], (float)kt[(int64_t)d * BS], acc);
                    acc = __fmul_rn(a.k_scale[si], acc); /* never fused with what follows */
                } else {
                    const __half *kt = kp + tj * D * BS + oj;
                    /* Unrolled so that several K loads are in flight before their FMAs;
                     * the FMAs still run in order of d (the reference's arithmetic). */
#pragma unroll 8
                    for (int32_t d = 0; d < D; d++)
                        acc = fmaf(q[d], __half2float(kt[(int64_t)d * BS]), acc);
                }
                l = acc;
            }
            lg[j] = l;
            mx = fmaxf(mx, l);
        }
        mx = da_block_reduce(mx, red, true);

        /* 3. Unnormalised weights and their sum (>= 1: the token sees itself). */
        float sum = 0.0f;
        for (int32_t j = tid; j < n; j += DA_THREADS) {
            const float e = expf(lg[j] - mx); /* expf(-inf) = 0 */
            lg[j] = e;
            sum += e;
        }
        const float inv = 1.0f / da_block_reduce(sum, red, false);

        /* 4. Probabilities and the H2O scores: this query head's share. */
        for (int32_t j = tid; j < n; j += DA_THREADS) {
            const float p = lg[j] * inv;
            lg[j] = p;
            if (p != 0.0f) a.score[da_slot_index(a, blocks, j, g)] += p;
        }
        __syncthreads(); /* publishes lg[] = p for step 5 */

        /* 5. out = sum_j p_j V_j. */
        const int32_t D2 = D / 2, G = DA_THREADS / D2, grp = tid / D2, lane = tid % D2;
        if (grp < G) {
            float2 acc = make_float2(0.0f, 0.0f);
#pragma unroll 4
            for (int32_t j = grp; j < n; j += G) {
                const float p = lg[j];
                if (p != 0.0f) { /* free slots: no weight, and their V may be anything */
                    const int64_t si = da_slot_index(a, blocks, j, g);
                    if (a.k8) {
                        /* D is even, so the int8 pair of lane is 2-byte aligned. */
                        const char2 v = ((const char2 *)(a.v8 + si * D))[lane];
                        const float pv = p * a.v_scale[si];
                        acc.x = fmaf(pv, (float)v.x, acc.x);
                        acc.y = fmaf(pv, (float)v.y, acc.y);
                    } else {
                        const float2 v =
                            __half22float2(((const __half2 *)(vp + si * D))[lane]);
                        acc.x = fmaf(p, v.x, acc.x);
                        acc.y = fmaf(p, v.y, acc.y);
                    }
                }
            }
            part[grp * D2 + lane] = acc;
        }
        __syncthreads();
        if (tid < D2) {
            float2 o = part[tid];
            for (int32_t gg = 1; gg < G; gg++) {
                o.x += part[gg * D2 + tid].x;
                o.y += part[gg * D2 + tid].y;
            }
            ((__half2 *)a.out)[((int64_t)i * H * D + (int64_t)h * D) / 2 + tid] =
                __floats2half2_rn(o.x, o.y);
        }
        /* The next head's first barrier orders these reads of part before its writes. */
    }

    /* 6. Occupancy and the eviction candidates over the group's summed scores (each
     * thread reads back the scores it wrote itself): the H2O one (lowest score, then
     * older, among pos <= t - (R - 1)) and, with a window, the oldest slot outside the
     * next token's window (pos <= t + 1 - W; score 0 so da_better orders by pos). */
    const int64_t last = (int64_t)sq.t - (sq.recent - 1); /* newer positions stay */
    const int64_t wlast = a.window > 0 ? (int64_t)sq.t + 1 - a.window : -1;
    da_cand best = {0.0f, 0, -1}, wbest = {0.0f, 0, -1};
    int32_t n_occ = 0;
    for (int32_t j = tid; j < n; j += DA_THREADS) {
        const int64_t si = da_slot_index(a, blocks, j, g);
        const int32_t pj = a.pos[si];
        if (pj >= 0) {
            n_occ++;
            const da_cand c = {a.score[si], pj, j}, w = {0.0f, pj, j};
            if (pj <= last && da_better(c, best)) best = c;
            if (pj <= wlast && da_better(w, wbest)) wbest = w;
        }
    }
    best = da_warp_argmin(best);
    wbest = da_warp_argmin(wbest);
    n_occ = __reduce_add_sync(0xffffffffu, n_occ);
    if (tid % 32 == 0) {
        cand[tid / 32] = best;
        wcand[tid / 32] = wbest;
        occ[tid / 32] = n_occ;
    }
    __syncthreads();
    if (tid == 0) {
        int32_t total = 0;
        for (int w = 0; w < DA_WARPS; w++) {
            total += occ[w];
            if (da_better(cand[w], best)) best = cand[w];
            if (da_better(wcand[w], wbest)) wbest = wcand[w];
        }
        const bool evict = sq.budget > 0 && total >= sq.budget;
        a.victim[(int64_t)i * KV + g] = !evict            ? -1
                                        : wbest.slot >= 0 ? wbest.slot
                                                          : best.slot;
    }
}

extern "C" cudaError_t cuda_decode_attn(const struct cuda_decode_attn_args *a,
                                        cudaStream_t stream)
{
    if (a->n_seq < 0 || a->n_head < 0 || a->head_dim <= 0 || a->head_dim % 2 != 0 ||
        a->head_dim > DA_MAX_D || a->block_size <= 0 || a->max_slots < 0 ||
        a->max_blocks < 0 || a->n_seq > 65535 || a->n_kv_head < 0 || a->window < 0 ||
        (a->n_kv_head > 0 && a->n_head % a->n_kv_head != 0) ||
        (a->k8 && (!a->v8 || !a->k_scale || !a->v_scale)))
        return cudaErrorInvalidValue;
    if (a->n_seq == 0 || a->n_head == 0) return cudaSuccess;
    const size_t smem = (size_t)(a->max_slots > 0 ? a->max_slots : 1) * sizeof(float);
    if (smem > DA_OPT_IN_BYTES) {
        /* Static and dynamic shared memory together may not pass 48 KiB unless the
         * kernel opts in; the static part is about 3 KiB, so opt in well before.
         * This fails when the device has less shared memory per block than asked
         * for (227 KiB on sm_90, 163 KiB on sm_80). */
        cudaError_t e =
            cudaFuncSetAttribute((const void *)cuda_decode_attn_kernel,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return e;
    }
    cuda_decode_attn_kernel<<<dim3(da_kv_heads(*a), a->n_seq), DA_THREADS, smem, stream>>>(
        *a);
    return cudaGetLastError();
}
