/*
 * cuda_decode_attn.cu - paged decode attention with the H2O score update and victim
 * choice fused in (see cuda_kernels.h and, for the exact contract, cuda_ref.h); the
 * twin of the decode path of cpu_attn_forward plus h2o_select_evict, and of the host
 * reference cuda_ref_decode_attn.
 *
 * One thread block per (sequence, head), DA_THREADS threads. The head's logits live
 * in shared memory (one fp32 per slot; no attention matrix in global memory), so a
 * block reads its K and V tiles once from DRAM and touches the slot state twice
 * (read pos, read-modify-write score). Steps, each ended by a barrier:
 *  1. write the new token's K, V, pos and score (= 0) into its slot; q * scale to
 *     shared memory;
 *  2. logits, one thread per slot: an fmaf chain over d in order (K tiles are
 *     transposed, so the 16 slots of a block are 16 consecutive halves per d and a
 *     warp's loads coalesce), block max;
 *  3. e = expf(l - max), block sum;
 *  4. p = e / sum: score += p, occupied count, and each thread's best eviction
 *     candidate among its slots, reduced to the block's argmin (score, then
 *     position);
 *  5. out = sum p V: DA_THREADS / (head_dim / 2) groups of threads, each group one
 *     slot at a time with a half2 pair of the head per thread, then the groups'
 *     partial sums are added in shared memory in group order.
 */
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

/* Index of slot s of head h in a [n_blocks, n_head, block_size] array. */
static __device__ int64_t da_slot_index(const cuda_decode_attn_args &a,
                                        const int32_t *blocks, int32_t s, int32_t h)
{
    return ((int64_t)blocks[s / a.block_size] * a.n_head + h) * a.block_size +
           s % a.block_size;
}

/* grid (n_head, n_seq), block DA_THREADS, dynamic shared memory 4 * max_slots bytes. */
__global__
__launch_bounds__(DA_THREADS) void cuda_decode_attn_kernel(cuda_decode_attn_args a)
{
    extern __shared__ float lg[]; /* [n_slots] logits, then probabilities */
    __shared__ float q[DA_MAX_D];
    __shared__ float red[DA_WARPS];
    __shared__ float2 part[DA_THREADS]; /* [groups, head_dim / 2] partial outputs */
    __shared__ da_cand cand[DA_WARPS];
    __shared__ int32_t occ[DA_WARPS];

    const int32_t h = blockIdx.x, i = blockIdx.y, tid = threadIdx.x;
    const int32_t H = a.n_head, D = a.head_dim, BS = a.block_size;
    const cuda_decode_seq sq = a.seqs[i];
    const int32_t *blocks = a.blocks + (int64_t)i * a.max_blocks;
    const __half *row = (const __half *)a.qkv + (int64_t)i * 3 * H * D;
    __half *kp = (__half *)a.k, *vp = (__half *)a.v;
    const int32_t n = sq.n_slots;

    /* 1. The new token into its slot; the scaled query into shared memory. */
    {
        const int64_t ni = da_slot_index(a, blocks, a.new_slot[(int64_t)i * H + h], h);
        const int64_t tile = ni / BS, off = ni % BS;
        for (int32_t d = tid; d < D; d += DA_THREADS) {
            kp[(tile * D + d) * BS + off] = row[(int64_t)H * D + (int64_t)h * D + d];
            vp[ni * D + d] = row[2 * (int64_t)H * D + (int64_t)h * D + d];
            q[d] = __half2float(row[(int64_t)h * D + d]) * a.scale;
        }
        if (tid == 0) {
            a.pos[ni] = sq.t;
            a.score[ni] = 0.0f;
        }
    }
    __syncthreads(); /* global writes by the block are visible to it after the barrier */

    /* 2. Logits of the visible slots, -inf elsewhere. */
    float mx = -INFINITY;
    for (int32_t j = tid; j < n; j += DA_THREADS) {
        const int64_t si = da_slot_index(a, blocks, j, h);
        const int64_t tj = si / BS, oj = si % BS;
        const int32_t pj = a.pos[si];
        float l = -INFINITY;
        if (pj >= 0 && pj <= sq.t) {
            const __half *kt = kp + tj * D * BS + oj;
            float acc = 0.0f;
            /* Unrolled so that several K loads are in flight before their FMAs; the
             * FMAs still run in order of d (the reference's arithmetic). */
#pragma unroll 8
            for (int32_t d = 0; d < D; d++)
                acc = fmaf(q[d], __half2float(kt[(int64_t)d * BS]), acc);
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

    /* 4. Probabilities, H2O scores, occupancy and this thread's eviction candidate. */
    const int64_t last = (int64_t)sq.t - (sq.recent - 1); /* newer positions stay */
    da_cand best = {0.0f, 0, -1};
    int32_t n_occ = 0;
    for (int32_t j = tid; j < n; j += DA_THREADS) {
        const int64_t si = da_slot_index(a, blocks, j, h);
        const float p = lg[j] * inv;
        lg[j] = p;
        const int32_t pj = a.pos[si];
        float s = a.score[si];
        if (p != 0.0f) a.score[si] = s += p;
        if (pj >= 0) {
            n_occ++;
            const da_cand c = {s, pj, j};
            if (pj <= last && da_better(c, best)) best = c;
        }
    }
    best = da_warp_argmin(best);
    n_occ = __reduce_add_sync(0xffffffffu, n_occ);
    if (tid % 32 == 0) {
        cand[tid / 32] = best;
        occ[tid / 32] = n_occ;
    }
    __syncthreads(); /* also publishes lg[] = p for step 5 */
    if (tid == 0) {
        int32_t total = 0;
        for (int w = 0; w < DA_WARPS; w++) {
            total += occ[w];
            if (da_better(cand[w], best)) best = cand[w];
        }
        const bool evict = sq.budget > 0 && total >= sq.budget;
        a.victim[(int64_t)i * H + h] = evict ? best.slot : -1;
    }

    /* 5. out = sum_j p_j V_j. */
    const int32_t D2 = D / 2, G = DA_THREADS / D2, g = tid / D2, lane = tid % D2;
    if (g < G) {
        float2 acc = make_float2(0.0f, 0.0f);
#pragma unroll 4
        for (int32_t j = g; j < n; j += G) {
            const float p = lg[j];
            if (p != 0.0f) { /* free slots: no weight, and their V may be anything */
                const int64_t si = da_slot_index(a, blocks, j, h);
                const float2 v = __half22float2(((const __half2 *)(vp + si * D))[lane]);
                acc.x = fmaf(p, v.x, acc.x);
                acc.y = fmaf(p, v.y, acc.y);
            }
        }
        part[g * D2 + lane] = acc;
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
}

extern "C" cudaError_t cuda_decode_attn(const struct cuda_decode_attn_args *a,
                                        cudaStream_t stream)
{
    if (a->n_seq < 0 || a->n_head < 0 || a->head_dim <= 0 || a->head_dim % 2 != 0 ||
        a->head_dim > DA_MAX_D || a->block_size <= 0 || a->max_slots < 0 ||
        a->max_blocks < 0 || a->n_seq > 65535)
        return cudaErrorInvalidValue;
    if (a->n_seq == 0 || a->n_head == 0) return cudaSuccess;
    const size_t smem = (size_t)(a->max_slots > 0 ? a->max_slots : 1) * sizeof(float);
    if (smem > DA_OPT_IN_BYTES) {
        /* Static and dynamic shared memory together may not pass 48 KiB unless the
         * kernel opts in; the static part is about 3 KiB, so opt in well before.
         * This fails when the device has less shared memory per block than asked
         * for (227 KiB on sm_90, 163 KiB on sm_80). */
        cudaError_t e =
            cudaFuncSetAttribute(cuda_decode_attn_kernel,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return e;
    }
    cuda_decode_attn_kernel<<<dim3(a->n_head, a->n_seq), DA_THREADS, smem, stream>>>(*a);
    return cudaGetLastError();
}
