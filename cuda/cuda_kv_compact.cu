/*
 * cuda_kv_compact.cu - H2O prefill compaction of one layer of one sequence (see
 * cuda_kernels.h and struct cuda_kv_compact_args in cuda_ref.h); the twin of the CPU
 * backend's kv_compact (cpu_attn_kv_compact_head), checked against cuda_ref_kv_compact.
 *
 * One block per head. The move is in place and slot keep[i] may itself be the
 * destination of an earlier i' (keep = {1, 2}: slot 1 is read for slot 0 and written
 * from slot 2), so the block walks the destinations in chunks of KVC_CHUNK slots, in
 * order: it reads the chunk's sources (K, V, pos, score) into shared memory, waits,
 * writes them to slots [i0, i0 + KVC_CHUNK), waits. That is the sequential loop's
 * result: a chunk's writes land only in [i0, i0 + KVC_CHUNK), and every later source
 * keep[j] >= j lies above, so no source is overwritten before it is read. Then the
 * slots n_keep..n_slots-1 are marked free (after the last chunk read them).
 * K tiles are transposed, so a warp reading one dimension of consecutive kept slots
 * gets 2-byte elements block_size apart; V rows are moved as 4-byte pairs.
 * An int8 cache (a.k8 set) runs the same kernel on 1-byte K elements and 2-byte V
 * pairs, and moves each slot's two scales with its pos and score.
 */
#include "cuda_kernels.h"

#include <stdint.h>

enum { KVC_THREADS = 256, KVC_CHUNK = 32, KVC_MAX_HEAD_DIM = 256 };

/*
 * KE: one K element (uint16_t for fp16, int8_t for int8), VP: two V elements
 * (uint32_t, uint16_t); k / v: a.k / a.v or a.k8 / a.v8 as those types. Only bits
 * are moved, so the element types need no arithmetic.
 */
template <typename KE, typename VP>
__global__ void cuda_kv_compact_kernel(struct cuda_kv_compact_args a, KE *k, VP *v)
{
    __shared__ KE ks[KVC_MAX_HEAD_DIM * KVC_CHUNK];     /* [d][c] */
    __shared__ VP vs[KVC_MAX_HEAD_DIM / 2 * KVC_CHUNK]; /* [c][d / 2] */
    __shared__ int32_t ps[KVC_CHUNK];
    __shared__ float ss[KVC_CHUNK], kss[KVC_CHUNK], vss[KVC_CHUNK]; /* score, scales */
    __shared__ int64_t src_tile[KVC_CHUNK], dst_tile[KVC_CHUNK]; /* tile * BS + offset */

    const int32_t h = blockIdx.x, H = a.n_head, D = a.head_dim, BS = a.block_size;
    const int32_t D2 = D / 2;
    const int32_t *keep = a.keep + (int64_t)h * a.n_keep;
    const bool scales = a.k_scale != NULL;

    for (int32_t i0 = 0; i0 < a.n_keep; i0 += KVC_CHUNK) {
        const int32_t n = min(KVC_CHUNK, a.n_keep - i0);
        if ((int32_t)threadIdx.x < n) {
            const int32_t c = threadIdx.x, i = i0 + c, s = keep[i];
            src_tile[c] = ((int64_t)a.blocks[s / BS] * H + h) * BS + s % BS;
            dst_tile[c] = ((int64_t)a.blocks[i / BS] * H + h) * BS + i % BS;
        }
        __syncthreads();
        /* Read: slot c fastest, so a warp walks consecutive kept slots of one
         * dimension (K) or one slot's row (V). */
        for (int32_t e = threadIdx.x; e < D * n; e += KVC_THREADS) {
            const int32_t d = e / n, c = e % n;
            const int64_t t = src_tile[c] / BS, o = src_tile[c] % BS;
            ks[d * KVC_CHUNK + c] = k[(t * D + d) * BS + o];
        }
        for (int32_t e = threadIdx.x; e < D2 * n; e += KVC_THREADS) {
            const int32_t c = e / D2, d = e % D2;
            vs[c * (KVC_MAX_HEAD_DIM / 2) + d] = v[src_tile[c] * D2 + d];
        }
        if ((int32_t)threadIdx.x < n) {
            ps[threadIdx.x] = a.pos[src_tile[threadIdx.x]];
            ss[threadIdx.x] = a.score[src_tile[threadIdx.x]];
            if (scales) {
                kss[threadIdx.x] = a.k_scale[src_tile[threadIdx.x]];
                vss[threadIdx.x] = a.v_scale[src_tile[threadIdx.x]];
            }
        }
        __syncthreads();
        /* Write the chunk to its destinations. */
        for (int32_t e = threadIdx.x; e < D * n; e += KVC_THREADS) {
            const int32_t d = e / n, c = e % n;
            const int64_t t = dst_tile[c] / BS, o = dst_tile[c] % BS;
            k[(t * D + d) * BS + o] = ks[d * KVC_CHUNK + c];
        }
        for (int32_t e = threadIdx.x; e < D2 * n; e += KVC_THREADS) {
            const int32_t c = e / D2, d = e % D2;
            v[dst_tile[c] * D2 + d] = vs[c * (KVC_MAX_HEAD_DIM / 2) + d];
        }
        if ((int32_t)threadIdx.x < n) {
            a.pos[dst_tile[threadIdx.x]] = ps[threadIdx.x];
            a.score[dst_tile[threadIdx.x]] = ss[threadIdx.x];
            if (scales) {
                a.k_scale[dst_tile[threadIdx.x]] = kss[threadIdx.x];
                a.v_scale[dst_tile[threadIdx.x]] = vss[threadIdx.x];
            }
        }
        /* The next chunk reuses the shared buffers and the tile tables. */
        __syncthreads();
    }
    for (int32_t i = a.n_keep + threadIdx.x; i < a.n_slots; i += KVC_THREADS) {
        const int64_t di = ((int64_t)a.blocks[i / BS] * H + h) * BS + i % BS;
        a.pos[di] = -1;
        a.score[di] = 0.0f;
    }
}

extern "C" cudaError_t cuda_kv_compact(const struct cuda_kv_compact_args *a,
                                       cudaStream_t stream)
{
    if (a->n_head < 0 || a->head_dim <= 0 || a->head_dim % 2 != 0 ||
        a->head_dim > KVC_MAX_HEAD_DIM || a->block_size <= 0 || a->n_slots < 0 ||
        a->n_keep < 0 || a->n_keep > a->n_slots ||
        (a->k8 && (!a->v8 || !a->k_scale || !a->v_scale)))
        return cudaErrorInvalidValue;
    if (a->n_head == 0 || a->n_slots == 0) return cudaSuccess;
    if (a->k8)
        cuda_kv_compact_kernel<<<(unsigned)a->n_head, KVC_THREADS, 0, stream>>>(
            *a, a->k8, (uint16_t *)a->v8);
    else
        cuda_kv_compact_kernel<<<(unsigned)a->n_head, KVC_THREADS, 0, stream>>>(
            *a, a->k, (uint32_t *)a->v);
    return cudaGetLastError();
}
