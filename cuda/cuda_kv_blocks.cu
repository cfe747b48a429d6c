/*
 * cuda_kv_blocks.cu - whole-block slot state of the paged KV cache on the device (see
 * cuda_kernels.h): cuda_kv_blocks_init, the twin of the CPU backend's kv_init_blocks
 * (one layer per call), and cuda_kv_blocks_gather_state, one layer of the CPU backend's
 * kv_read_state (the slot state of one sequence, dense, for the host). Checked against
 * cuda_ref_kv_init_blocks and cuda_ref_kv_gather_state (cuda_ref.c), which use the same
 * index formulas.
 *
 * Both are pure stores (init) or a gather (state): no arithmetic, no shared memory, no
 * barriers. A block of the pool is contiguous in every per-layer array (V
 * [n_blocks, n_head, block_size, head_dim], pos / score [n_blocks, n_head,
 * block_size]), so init fills n contiguous runs; gather reads runs of block_size
 * consecutive slots. cuda_kv_blocks_init_i8 is the init of an int8 cache: the same
 * kernel on 2-byte words of int8 V, with the value scales cleared beside pos and score.
 */
#include "cuda_kernels.h"

#include <stdint.h>

enum {
    KVB_THREADS = 256,
    /* Words (4-byte V pairs) each thread of cuda_kv_blocks_init stores at least: with
     * fewer, OPT-6.7B's 128 KiB blocks would take 128 tiny CTAs each. */
    KVB_WORDS_PER_THREAD = 8,
    KVB_MAX_GRID_Y = 65535,
};

/*
 * grid (n, cy) x KVB_THREADS: CTA (i, y) clears part of block blocks[i]. The block's
 * V is n_words = n_head * block_size * head_dim / 2 4-byte words and its slot state
 * n_state = n_head * block_size entries, both at index blocks[i] * (count); the cy
 * CTAs of a block stride over both together, so consecutive threads store
 * consecutive words (a warp writes 128 contiguous bytes). W is the word: uint32_t
 * (two fp16) or uint16_t (two int8); v_scale, when not NULL, is cleared with the slot
 * state (an int8 cache).
 */
template <typename W>
__global__ void cuda_kv_init_blocks_kernel(W *v, float *v_scale, int32_t *pos, float *score,
                                           const int32_t *blocks, int64_t n_words,
                                           int64_t n_state)
{
    const int64_t b = blocks[blockIdx.x];
    const int64_t stride = (int64_t)gridDim.y * blockDim.x;
    const int64_t first = (int64_t)blockIdx.y * blockDim.x + threadIdx.x;
    W *vb = v + b * n_words;
    for (int64_t e = first; e < n_words; e += stride)
        vb[e] = 0u; /* two fp16 +0.0, or two int8 0 */
    for (int64_t e = first; e < n_state; e += stride) {
        pos[b * n_state + e] = -1;
        score[b * n_state + e] = 0.0f;
        if (v_scale) v_scale[b * n_state + e] = 0.0f;
    }
}

/* The launch of both inits: checks, then (n, cy) CTAs as described above. */
template <typename W>
static cudaError_t kvb_init(W *v, float *v_scale, int32_t *pos, float *score,
                            const int32_t *blocks, int32_t n, int32_t n_head,
                            int32_t head_dim, int32_t block_size, cudaStream_t stream)
{
    if (n < 0 || n_head < 0 || head_dim <= 0 || head_dim % 2 != 0 || block_size <= 0)
        return cudaErrorInvalidValue;
    if (n == 0 || n_head == 0) return cudaSuccess;
    const int64_t n_state = (int64_t)n_head * block_size;
    const int64_t n_words = n_state * head_dim / 2;
    const int64_t per_cta = (int64_t)KVB_THREADS * KVB_WORDS_PER_THREAD;
    int64_t cy = (n_words + per_cta - 1) / per_cta;
    if (cy > KVB_MAX_GRID_Y) cy = KVB_MAX_GRID_Y; /* the CTAs then stride further */
    const dim3 grid((unsigned)n, (unsigned)cy);
    cuda_kv_init_blocks_kernel<<<grid, KVB_THREADS, 0, stream>>>(v, v_scale, pos, score,
                                                                 blocks, n_words, n_state);
    return cudaGetLastError();
}

extern "C" cudaError_t cuda_kv_blocks_init(uint16_t *v, int32_t *pos, float *score,
                                           const int32_t *blocks, int32_t n, int32_t n_head,
                                           int32_t head_dim, int32_t block_size,
                                           cudaStream_t stream)
{
    return kvb_init((uint32_t *)v, (float *)NULL, pos, score, blocks, n, n_head, head_dim,
                    block_size, stream);
}

extern "C" cudaError_t cuda_kv_blocks_init_i8(int8_t *v8, float *v_scale, int32_t *pos,
                                              float *score, const int32_t *blocks,
                                              int32_t n, int32_t n_head, int32_t head_dim,
                                              int32_t block_size, cudaStream_t stream)
{
    if (!v_scale) return cudaErrorInvalidValue;
    return kvb_init((uint16_t *)v8, v_scale, pos, score, blocks, n, n_head, head_dim,
                    block_size, stream);
}

/*
 * grid (ceil(n_slots / KVB_THREADS), n_head) x KVB_THREADS: thread s of head
 * blockIdx.y copies slot s's pos and score from offset s % block_size of block
 * blocks[s / block_size] to row h of the dense [n_head, n_slots] output. The stores
 * are fully coalesced; the loads in runs of block_size slots.
 */
__global__ void cuda_kv_gather_state_kernel(int32_t *pos_out, float *score_out,
                                            const int32_t *pos, const float *score,
                                            const int32_t *blocks, int32_t n_slots,
                                            int32_t n_head, int32_t block_size)
{
    const int64_t s = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (s >= n_slots) return;
    const int32_t h = blockIdx.y;
    const int64_t src =
        ((int64_t)blocks[s / block_size] * n_head + h) * block_size + s % block_size;
    const int64_t dst = (int64_t)h * n_slots + s;
    pos_out[dst] = pos[src];
    score_out[dst] = score[src];
}

extern "C" cudaError_t cuda_kv_blocks_gather_state(int32_t *pos_out, float *score_out,
                                                   const int32_t *pos, const float *score,
                                                   const int32_t *blocks, int32_t n_slots,
                                                   int32_t n_head, int32_t block_size,
                                                   cudaStream_t stream)
{
    if (n_slots < 0 || n_head < 0 || n_head > KVB_MAX_GRID_Y || block_size <= 0)
        return cudaErrorInvalidValue;
    if (n_slots == 0 || n_head == 0) return cudaSuccess;
    const dim3 grid((unsigned)((n_slots + KVB_THREADS - 1) / KVB_THREADS),
                    (unsigned)n_head);
    cuda_kv_gather_state_kernel<<<grid, KVB_THREADS, 0, stream>>>(
        pos_out, score_out, pos, score, blocks, n_slots, n_head, block_size);
    return cudaGetLastError();
}
