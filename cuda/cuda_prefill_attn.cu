/*
 * cuda_prefill_attn.cu - paged prefill attention that also makes the H2O column sums
 * (see cuda_kernels.h and, for the exact contract, cuda_ref.h); the twin of the
 * prefill path of cpu_attn_forward and of the host reference cuda_ref_prefill_attn.
 *
 * Three kernels on the caller's stream, each reading what the one before wrote:
 * Heads: n_head query heads over KV KV heads (grouped-query attention: query head h
 * reads KV head h / (n_head / KV)); the pool is per KV head.
 *  1. write_kv, grid (KV, n_seq): the chunk's K (transposed), V, pos and score = 0
 *     into their slots.
 *  2. fwd, grid (query tiles, n_head, n_seq): one block per tile of PA_QT queries of
 *     one (sequence, head). It walks the sequence's slots in key tiles of PA_KT: K and
 *     V tiles to shared memory, logits (one warp per query row, one lane per slot, an
 *     fmaf chain over d in order: the reference's bits), then the online softmax
 *     (running max m and sum l per row, the running output rescaled by exp(m_old -
 *     m_new)). No attention matrix leaves the block. At the end out = o / l in fp16
 *     and lse = m + log(l) per row to global memory.
 *  3. col, grid (key tiles, KV, n_seq): one block per tile of PA_KT slots of one
 *     (sequence, KV head). For each query head of the group in turn it walks the
 *     chunk's queries in tiles of PA_QT, recomputes the same logits (bit-identical to
 *     pass 2's) and adds p = exp(l - lse) of each query to its slot's column sum; then
 *     score[slot] += col, one writer per slot: no atomics, and the sum (over the
 *     group's query heads, in order) does not depend on scheduling.
 * With a sliding window a query sees only the slots inside it (pa_visible), in both
 * passes; a key tile is skipped by the causal bound only, so tiles wholly behind
 * every window are still loaded (their probabilities are 0: correct, some waste).
 * Key tiles in which no slot is visible to any query of the tile (free slots, or all
 * later than every query: about half the causal square) are skipped in both passes;
 * that changes no arithmetic, since their probabilities are exactly 0.
 * With an int8 cache (a.k8 set) pass 1 quantizes each row's K and V (one warp per
 * row, cuda_int8.cuh's rule), and the key tiles hold the int8 elements as fp16 (every
 * int8 value is an fp16 exactly, so the logits' fmaf chain is the reference's) with
 * each slot's two scales beside them: a logit is k_scale * the chain, a value row
 * enters with weight p * v_scale (cpu_attn_int8.c's arithmetic).
 */
#include "cuda_int8.cuh"
#include "cuda_kernels.h"

#include <cuda_fp16.h>

#include <math.h>

/* PA_KT is the warp size: in the logits steps lane j owns slot j of the key tile. */
enum {
    PA_THREADS = 128,
    PA_WARPS = PA_THREADS / 32,
    PA_QT = 16,
    PA_KT = 32,
    PA_MAX_D = 256
};
/* Dynamic shared memory above which the launch opts in to more than the default 48 KiB
 * per block (the static part is under 1 KiB). */
enum { PA_OPT_IN_BYTES = 46 * 1024 };

static __device__ float pa_warp_max(float v)
{
    for (int off = 16; off > 0; off /= 2)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

static __device__ float pa_warp_sum(float v)
{
    for (int off = 16; off > 0; off /= 2)
        v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

/* Index of slot s of head h in a [n_blocks, n_head, block_size] array. */
/* KV heads: n_kv_head, or n_head when 0. */
static __host__ __device__ int32_t pa_kv_heads(const cuda_prefill_attn_args &a)
{
    return a.n_kv_head > 0 ? a.n_kv_head : a.n_head;
}

/* Index of slot s of KV head g in a [n_blocks, KV, block_size] array. */
static __device__ int64_t pa_slot_index(const cuda_prefill_attn_args &a,
                                        const int32_t *blocks, int32_t s, int32_t g)
{
    return ((int64_t)blocks[s / a.block_size] * pa_kv_heads(a) + g) * a.block_size +
           s % a.block_size;
}

/* Whether the query at qpos sees a slot at kpos: occupied, not later, and inside the
 * sliding window when there is one. */
static __device__ bool pa_visible(const cuda_prefill_attn_args &a, int32_t kpos,
                                  int32_t qpos)
{
    return kpos >= 0 && kpos <= qpos && (a.window <= 0 || kpos > qpos - a.window);
}

/* 1. grid (n_head, n_seq): the chunk's K, V and slot state into their slots. */
__global__
__launch_bounds__(PA_THREADS) void cuda_prefill_write_kv(cuda_prefill_attn_args a)
{
    const int32_t g = blockIdx.x, i = blockIdx.y;
    const int32_t H = a.n_head, KV = pa_kv_heads(a), D = a.head_dim, BS = a.block_size;
    const cuda_prefill_seq sq = a.seqs[i];
    const int32_t *blocks = a.blocks + (int64_t)i * a.max_blocks;
    const __half *qkv = (const __half *)a.qkv;
    __half *kp = (__half *)a.k, *vp = (__half *)a.v;
    if (a.k8) {
        /* int8: one warp per row, the lanes reduce the head's max |x| then quantize. */
        const int32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
        for (int32_t r = warp; r < sq.n_tok; r += PA_WARPS) {
            const int64_t row = sq.tok_start + r;
            const int64_t si = pa_slot_index(a, blocks, sq.slot_start + r, g);
            const int64_t tile = si / BS, off = si % BS;
            const __half *k =
                qkv + row * (H + 2 * KV) * D + (int64_t)H * D + (int64_t)g * D;
            const __half *v = k + (int64_t)KV * D;
            float kmax = 0.0f, vmax = 0.0f;
            for (int32_t d = lane; d < D; d += 32) {
                kmax = fmaxf(kmax, fabsf(__half2float(k[d])));
                vmax = fmaxf(vmax, fabsf(__half2float(v[d])));
            }
            kmax = pa_warp_max(kmax);
            vmax = pa_warp_max(vmax);
            for (int32_t d = lane; d < D; d += 32) {
                a.k8[(tile * D + d) * BS + off] = cuda_int8_elem(__half2float(k[d]), kmax);
                a.v8[si * D + d] = cuda_int8_elem(__half2float(v[d]), vmax);
            }
            if (lane == 0) {
                a.k_scale[si] = cuda_int8_scale(kmax);
                a.v_scale[si] = cuda_int8_scale(vmax);
                a.pos[si] = a.tok_pos[row];
                a.score[si] = 0.0f;
            }
        }
        return;
    }
    for (int64_t e = threadIdx.x; e < (int64_t)sq.n_tok * D; e += PA_THREADS) {
        const int32_t r = (int32_t)(e / D), d = (int32_t)(e % D);
        const int64_t row = sq.tok_start + r;
        const int64_t si = pa_slot_index(a, blocks, sq.slot_start + r, g);
        const int64_t tile = si / BS, off = si % BS;
        const __half *k = qkv + row * (H + 2 * KV) * D + (int64_t)H * D + (int64_t)g * D;
        kp[(tile * D + d) * BS + off] = k[d];
        vp[si * D + d] = k[(int64_t)KV * D + d];
        if (d == 0) {
            a.pos[si] = a.tok_pos[row];
            a.score[si] = 0.0f;
        }
    }
}

/*
 * Shared memory of one key tile: kpos[j] (-1 = not attendable: free, or past n_slots),
 * K transposed [head_dim][PA_KT] and, when with_v, V [PA_KT][head_dim]; K/V of
 * slots that are not attendable are zeros (a free slot may hold any bits, NaN
 * included, and 0 * NaN is NaN). With an int8 cache kt / vt get the int8 elements
 * as fp16 (exact) and ksc / vsc [PA_KT] each slot's key and value scale (0 for a slot
 * not attendable); vsc only when with_v. Returns whether some slot of the tile is
 * visible to a query at position qmax or earlier; all threads return the same, after
 * a barrier.
 */
static __device__ bool pa_load_keys(const cuda_prefill_attn_args &a, const int32_t *blocks,
                                    int32_t h, int32_t n, int32_t j0, int32_t qmax,
                                    int32_t *kpos, __half *kt, __half *vt, float *ksc,
                                    float *vsc, bool with_v)
{
    const int32_t D = a.head_dim, BS = a.block_size, tid = threadIdx.x;
    if (tid < PA_KT) {
        const int32_t s = j0 + tid;
        kpos[tid] = s < n ? a.pos[pa_slot_index(a, blocks, s, h)] : -1;
    }
    const bool mine = tid < PA_KT && kpos[tid] >= 0 && kpos[tid] <= qmax;
    if (!__syncthreads_or(mine)) return false; /* also publishes kpos */
    const __half *kp = (const __half *)a.k, *vp = (const __half *)a.v;
    const __half zero = __float2half(0.0f);
    if (a.k8) {
        if (tid < PA_KT) {
            const int64_t si = kpos[tid] >= 0 ? pa_slot_index(a, blocks, j0 + tid, h) : -1;
            ksc[tid] = si >= 0 ? a.k_scale[si] : 0.0f;
            if (with_v) vsc[tid] = si >= 0 ? a.v_scale[si] : 0.0f;
        }
        for (int32_t e = tid; e < D * PA_KT; e += PA_THREADS) {
            const int32_t d = e / PA_KT, j = e % PA_KT;
            __half x = zero;
            if (kpos[j] >= 0) {
                const int64_t si = pa_slot_index(a, blocks, j0 + j, h);
                x = __int2half_rn(a.k8[((si / BS) * D + d) * BS + si % BS]);
            }
            kt[e] = x;
        }
        if (with_v)
            for (int32_t e = tid; e < PA_KT * D; e += PA_THREADS) {
                const int32_t j = e / D, d = e % D;
                __half x = zero;
                if (kpos[j] >= 0)
                    x = __int2half_rn(a.v8[pa_slot_index(a, blocks, j0 + j, h) * D + d]);
                vt[e] = x;
            }
        __syncthreads();
        return true;
    }
    /* K: consecutive threads take consecutive slots of one dimension (the pool's
     * transposed tiles make those runs of block_size halves). */
    for (int32_t e = tid; e < D * PA_KT; e += PA_THREADS) {
        const int32_t d = e / PA_KT, j = e % PA_KT;
        __half x = zero;
        if (kpos[j] >= 0) {
            const int64_t si = pa_slot_index(a, blocks, j0 + j, h);
            x = kp[((si / BS) * D + d) * BS + si % BS];
        }
        kt[e] = x;
    }
    /* V: consecutive threads take consecutive dimensions of one slot. */
    if (with_v)
        for (int32_t e = tid; e < PA_KT * D; e += PA_THREADS) {
            const int32_t j = e / D, d = e % D;
            __half x = zero;
            if (kpos[j] >= 0) x = vp[pa_slot_index(a, blocks, j0 + j, h) * D + d];
            vt[e] = x;
        }
    __syncthreads();
    return true;
}

/* The logit of query row r (q [PA_QT][head_dim], scaled) against slot j of the key
 * tile (kt [head_dim][PA_KT]): the reference's fmaf chain over d in order. */
static __device__ float pa_logit(const float *q, const __half *kt, int32_t D, int32_t r,
                                 int32_t j)
{
    float acc = 0.0f;
#pragma unroll 8
    for (int32_t d = 0; d < D; d++)
        acc = fmaf(q[r * D + d], __half2float(kt[d * PA_KT + j]), acc);
    return acc;
}

/* pa_logit, times the slot's key scale ksc[j] with an int8 cache. __fmul_rn keeps the
 * product a rounded multiply that the compiler may not fuse with the subtraction
 * that follows it in either pass, so passes 2 and 3 see the same logit bits. */
static __device__ float pa_logit_i8(const cuda_prefill_attn_args &a, const float *ksc,
                                    const float *q, const __half *kt, int32_t D, int32_t r,
                                    int32_t j)
{
    const float l = pa_logit(q, kt, D, r, j);
    return a.k8 ? __fmul_rn(ksc[j], l) : l;
}

/* Loads query rows q0 .. q0 + PA_QT - 1 of the chunk: q scaled (zeros past the
 * chunk), their positions (-1 past the chunk: they see nothing) and, when lse_out is
 * set, their saved log-sum-exp. Returns the tile's largest position, after a barrier. */
static __device__ int32_t pa_load_queries(const cuda_prefill_attn_args &a,
                                          const cuda_prefill_seq &sq, int32_t h, int32_t q0,
                                          float *q, int32_t *qpos, float *lse_out)
{
    const int32_t H = a.n_head, KV = pa_kv_heads(a), D = a.head_dim, tid = threadIdx.x;
    const __half *qkv = (const __half *)a.qkv;
    for (int32_t e = tid; e < PA_QT * D; e += PA_THREADS) {
        const int32_t r = e / D, d = e % D;
        float x = 0.0f;
        if (q0 + r < sq.n_tok) {
            const int64_t row = sq.tok_start + q0 + r;
            x = __half2float(qkv[row * (H + 2 * KV) * D + (int64_t)h * D + d]) * a.scale;
        }
        q[e] = x;
    }
    if (tid < PA_QT) {
        const bool in = q0 + tid < sq.n_tok;
        const int64_t row = sq.tok_start + q0 + tid;
        qpos[tid] = in ? a.tok_pos[row] : -1;
        if (lse_out) lse_out[tid] = in ? a.lse[row * H + h] : 0.0f;
    }
    __syncthreads();
    int32_t qmax = -1;
    for (int32_t r = 0; r < PA_QT; r++)
        qmax = max(qmax, qpos[r]);
    return qmax;
}

/*
 * 2. grid (ceil(max_chunk / PA_QT), n_head, n_seq): outputs and log-sum-exps of one
 * query tile. Dynamic shared memory: q, o [PA_QT][D] fp32, p [PA_QT][PA_KT] fp32,
 * kt [D][PA_KT] and vt [PA_KT][D] fp16.
 */
__global__ __launch_bounds__(PA_THREADS) void cuda_prefill_fwd(cuda_prefill_attn_args a)
{
    extern __shared__ float smem[];
    __shared__ float m[PA_QT], l[PA_QT], corr[PA_QT];
    __shared__ float ksc[PA_KT], vsc[PA_KT]; /* int8 cache: the tile's scales */
    __shared__ int32_t qpos[PA_QT], kpos[PA_KT];

    const int32_t q0 = blockIdx.x * PA_QT, h = blockIdx.y, i = blockIdx.z;
    const int32_t H = a.n_head, D = a.head_dim, tid = threadIdx.x;
    const int32_t g = h / (H / pa_kv_heads(a)); /* the KV head query head h reads */
    const int32_t warp = tid / 32, lane = tid % 32;
    const cuda_prefill_seq sq = a.seqs[i];
    if (q0 >= sq.n_tok) return; /* the whole block: this sequence's chunk is shorter */
    const int32_t *blocks = a.blocks + (int64_t)i * a.max_blocks;
    float *q = smem, *o = q + PA_QT * D, *p = o + PA_QT * D;
    __half *kt = (__half *)(p + PA_QT * PA_KT), *vt = kt + D * PA_KT;

    for (int32_t e = tid; e < PA_QT * D; e += PA_THREADS)
        o[e] = 0.0f;
    if (tid < PA_QT) {
        m[tid] = -INFINITY;
        l[tid] = 0.0f;
    }
    const int32_t qmax = pa_load_queries(a, sq, h, q0, q, qpos, NULL);

    for (int32_t j0 = 0; j0 < sq.n_slots; j0 += PA_KT) {
        if (!pa_load_keys(a, blocks, g, sq.n_slots, j0, qmax, kpos, kt, vt, ksc, vsc, true))
            continue;
        /* Logits and the online softmax: warp w owns rows w, w + PA_WARPS, ... */
        for (int32_t r = warp; r < PA_QT; r += PA_WARPS) {
            const int32_t j = lane;
            const bool vis = pa_visible(a, kpos[j], qpos[r]);
            float s = -INFINITY;
            if (vis) s = pa_logit_i8(a, ksc, q, kt, D, r, j);
            const float m_old = m[r];
            const float m_new = fmaxf(m_old, pa_warp_max(s));
            /* A row that has seen nothing yet keeps m = -inf, l = 0, o = 0. */
            const float c = m_new == -INFINITY ? 1.0f : expf(m_old - m_new);
            const float e = vis ? expf(s - m_new) : 0.0f;
            const float sum = pa_warp_sum(e);
            p[r * PA_KT + j] = e;
            __syncwarp(); /* every lane has read m[r] and l[r] before lane 0 updates them */
            if (lane == 0) {
                m[r] = m_new;
                l[r] = l[r] * c + sum;
                corr[r] = c;
            }
        }
        __syncthreads();
        /* o = o * corr + p V, one (row, dimension) per thread, slots in order. */
        for (int32_t e = tid; e < PA_QT * D; e += PA_THREADS) {
            const int32_t r = e / D, d = e % D;
            float acc = o[e] * corr[r];
            if (a.k8)
                for (int32_t j = 0; j < PA_KT; j++)
                    acc = fmaf(p[r * PA_KT + j] * vsc[j], __half2float(vt[j * D + d]), acc);
            else
                for (int32_t j = 0; j < PA_KT; j++)
                    acc = fmaf(p[r * PA_KT + j], __half2float(vt[j * D + d]), acc);
            o[e] = acc;
        }
        __syncthreads(); /* the next tile overwrites kpos, kt, vt and p */
    }

    /* Every row of the chunk sees itself, so l >= 1 for r < n_tok - q0. */
    const int32_t nq = min((int32_t)PA_QT, sq.n_tok - q0);
    __half *out = (__half *)a.out;
    for (int32_t e = tid; e < nq * D; e += PA_THREADS) {
        const int32_t r = e / D, d = e % D;
        const int64_t row = sq.tok_start + q0 + r;
        out[row * H * D + (int64_t)h * D + d] = __float2half_rn(o[e] / l[r]);
    }
    if (tid < nq) a.lse[(int64_t)(sq.tok_start + q0 + tid) * H + h] = m[tid] + logf(l[tid]);
}

/*
 * 3. grid (ceil(max_slots / PA_KT), n_head, n_seq): the column sums of one key tile
 * over all the chunk's queries, added to the slots' scores. Dynamic shared memory:
 * q [PA_QT][D] fp32, kt [D][PA_KT] fp16.
 */
__global__ __launch_bounds__(PA_THREADS) void cuda_prefill_col(cuda_prefill_attn_args a)
{
    extern __shared__ float smem[];
    __shared__ float lse[PA_QT], part[PA_WARPS][PA_KT];
    __shared__ float ksc[PA_KT]; /* int8 cache: the tile's key scales */
    __shared__ int32_t qpos[PA_QT], kpos[PA_KT];

    const int32_t j0 = blockIdx.x * PA_KT, g = blockIdx.y, i = blockIdx.z;
    const int32_t D = a.head_dim, tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int32_t rep = a.n_head / pa_kv_heads(a);
    const cuda_prefill_seq sq = a.seqs[i];
    if (j0 >= sq.n_slots) return; /* the whole block: this sequence has fewer slots */
    const int32_t *blocks = a.blocks + (int64_t)i * a.max_blocks;
    float *q = smem;
    __half *kt = (__half *)(q + PA_QT * D);

    /* The group's query heads in order, each adding its column sums to the KV head's
     * scores (the reference's order); the K tile is the KV head's, shared by all. */
    bool have_keys = false;
    for (int32_t h = g * rep; h < (g + 1) * rep; h++) {
        float col =
            0.0f; /* lane j's share of slot j's sum: rows warp, warp + PA_WARPS, ... */
        for (int32_t q0 = 0; q0 < sq.n_tok; q0 += PA_QT) {
            const int32_t qmax = pa_load_queries(a, sq, h, q0, q, qpos, lse);
            /* The K tile once, at the first query tile that can see any of it; earlier
             * tiles add nothing and are skipped. Once loaded it stays for every later
             * tile and query head (the per-pair mask below decides what each query
             * sees). */
            if (!have_keys) {
                have_keys = pa_load_keys(a, blocks, g, sq.n_slots, j0, qmax, kpos, kt, NULL,
                                         ksc, NULL, false);
                if (!have_keys) continue;
            }
            for (int32_t r = warp; r < PA_QT; r += PA_WARPS) {
                const int32_t j = lane;
                if (pa_visible(a, kpos[j], qpos[r])) {
                    /* The same logit as pass 2's, bit for bit. */
                    col += expf(pa_logit_i8(a, ksc, q, kt, D, r, j) - lse[r]);
                }
            }
            __syncthreads(); /* the next query tile overwrites q, qpos and lse */
        }
        part[warp][lane] = col;
        __syncthreads();
        if (tid < PA_KT && j0 + tid < sq.n_slots) {
            float sum = 0.0f;
            for (int32_t w = 0; w < PA_WARPS; w++)
                sum += part[w][tid];
            if (sum != 0.0f) a.score[pa_slot_index(a, blocks, j0 + tid, g)] += sum;
        }
        __syncthreads(); /* the next query head overwrites part */
    }
}

static cudaError_t pa_smem(const void *k, size_t bytes)
{
    if (bytes <= PA_OPT_IN_BYTES) return cudaSuccess;
    return cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
}

extern "C" cudaError_t cuda_prefill_attn(const struct cuda_prefill_attn_args *a,
                                         cudaStream_t stream)
{
    if (a->n_tok < 0 || a->n_seq < 0 || a->n_head < 0 || a->head_dim <= 0 ||
        a->head_dim > PA_MAX_D || a->block_size <= 0 || a->max_chunk < 0 ||
        a->max_slots < 0 || a->max_blocks < 0 || a->n_seq > 65535 || a->n_head > 65535 ||
        a->n_kv_head < 0 || a->window < 0 ||
        (a->n_kv_head > 0 && a->n_head % a->n_kv_head != 0) ||
        (a->k8 && (!a->v8 || !a->k_scale || !a->v_scale)))
        return cudaErrorInvalidValue;
    if (a->n_tok == 0 || a->n_seq == 0 || a->n_head == 0 || a->max_chunk == 0)
        return cudaSuccess;
    const int32_t D = a->head_dim;
    const size_t fwd_smem = (size_t)2 * PA_QT * D * sizeof(float) +
                            (size_t)PA_QT * PA_KT * sizeof(float) +
                            (size_t)2 * PA_KT * D * sizeof(__half);
    const size_t col_smem =
        (size_t)PA_QT * D * sizeof(float) + (size_t)PA_KT * D * sizeof(__half);
    cudaError_t e = pa_smem((const void *)cuda_prefill_fwd, fwd_smem);
    if (e == cudaSuccess) e = pa_smem((const void *)cuda_prefill_col, col_smem);
    if (e != cudaSuccess) return e;

    const unsigned n_qt = (unsigned)((a->max_chunk + PA_QT - 1) / PA_QT);
    const unsigned n_kt = (unsigned)((a->max_slots + PA_KT - 1) / PA_KT);
    const unsigned KV = (unsigned)pa_kv_heads(*a);
    cuda_prefill_write_kv<<<dim3(KV, a->n_seq), PA_THREADS, 0, stream>>>(*a);
    cuda_prefill_fwd<<<dim3(n_qt, a->n_head, a->n_seq), PA_THREADS, fwd_smem, stream>>>(*a);
    if (n_kt > 0)
        cuda_prefill_col<<<dim3(n_kt, KV, a->n_seq), PA_THREADS, col_smem, stream>>>(*a);
    return cudaGetLastError();
}
