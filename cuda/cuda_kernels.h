/*
 * cuda_kernels.h - the CUDA backend's own kernels, callable from C: embedding +
 * learned positions, LayerNorm, bias (+ ReLU), RMSNorm and LayerNorm with eps, GELU
 * and SwiGLU, rotary positions, residual add, paged decode attention
 * with the H2O score update and victim choice, paged prefill attention with the H2O
 * column sums, the H2O prefill compaction of the KV cache, freeing whole KV blocks and
 * reading a sequence's slot state back, and sampling.
 *
 * Each function is named after its file (cuda_embed.cu has cuda_embed) and after its
 * CPU twin in engine/cpu/cpu_ops.h, whose results it matches up to fp16 rounding.
 * Activations and weights are fp16; every sum and product is done in fp32 and rounded
 * to fp16 once, on the store. C has no half type and <cuda_fp16.h> is C++, so fp16
 * tensors cross this interface as uint16_t (the IEEE binary16 bits, as dtype.h's
 * f32_to_f16 makes them).
 *
 * Owns: nothing. Every pointer is device memory owned by the caller (the backend, and
 * for now tests/gpu); the functions only enqueue a kernel on `stream` (0 is the legacy
 * default stream) and return without waiting. fp16 pointers must be 4-byte aligned
 * (an even element offset from a cudaMalloc'ed base): the kernels move half2 pairs.
 * Indices (token ids, positions) are not checked on the device; the engine validated
 * them on the host before the batch was built.
 *
 * Returns: cudaSuccess, cudaErrorInvalidValue for arguments the kernel cannot take
 * (negative sizes, an odd row width where pairs are needed, a grid past CUDA's
 * limits), or the launch's error from cudaGetLastError; empty work launches nothing.
 * Errors while the kernel runs surface at the next synchronising call, as usual in
 * CUDA.
 * Thread: any host thread that owns `stream`; calls on one stream run in order.
 *
 * Used by the CUDA backend (be_cuda.c, be_cuda_fwd.c; docs/cuda.md).
 */
#ifndef H2O_CUDA_KERNELS_H
#define H2O_CUDA_KERNELS_H

#include "cuda_ref.h"

#include <cuda_runtime_api.h>

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * dst [n, d] = tok [ids[i], :] + pos_table [pos[i] + offset, :], the token embedding
 * plus OPT's learned position (offset 2, as Hugging Face looks them up).
 * tok [vocab, d], pos_table [max_pos + offset, d], ids [n], pos [n]; d even.
 * pos_table may be NULL: tokens only, for models with project_in (OPT-350m), where
 * the positions are added after the projection with cuda_embed_positions.
 */
cudaError_t cuda_embed(uint16_t *dst, const uint16_t *tok, const int32_t *ids,
                       const uint16_t *pos_table, const int32_t *pos, int32_t offset,
                       int32_t n, int32_t d, cudaStream_t stream);

/* x [n, d] += pos_table [pos[i] + offset, :]; d even. */
cudaError_t cuda_embed_positions(uint16_t *x, const uint16_t *pos_table, const int32_t *pos,
                                 int32_t offset, int32_t n, int32_t d, cudaStream_t stream);

/*
 * dst [n, d] = (x - mean) / sqrt(var + 1e-5) * w + b over each row of x [n, d], with
 * w, b [d]; mean and variance in fp32, two passes as PyTorch (and cpu_ops_layernorm) do.
 * d even. dst may alias x (post-LN models normalise the residual stream in place).
 */
cudaError_t cuda_layernorm(uint16_t *dst, const uint16_t *x, const uint16_t *w,
                           const uint16_t *b, int32_t n, int32_t d, cudaStream_t stream);

/*
 * x [n, m] = x + bias [m], then max(0, .) when relu: the epilogue of a cuBLAS
 * projection (cuBLAS's GemmEx adds no bias). m even.
 */
cudaError_t cuda_bias_relu(uint16_t *x, const uint16_t *bias, int32_t n, int32_t m,
                           bool relu, cudaStream_t stream);

/*
 * dst [n, d] = the norm of each row of x [n, d] with weight w [d]: RMSNorm when rms
 * (x / sqrt(mean(x^2) + eps) * w; b unread, may be NULL; Llama, Mistral, Qwen2) or
 * LayerNorm with the model's eps ((x - mean) / sqrt(var + eps) * w + b, two passes;
 * GPT-NeoX). fp32 statistics; within half an fp16 ulp + 1e-5 of cuda_ref_norm. d
 * even; eps >= 0. dst may alias x.
 */
cudaError_t cuda_norm(uint16_t *dst, const uint16_t *x, const uint16_t *w,
                      const uint16_t *b, bool rms, float eps, int32_t n, int32_t d,
                      cudaStream_t stream);

/*
 * x [n, m] = act(x + bias [m]) in place, bias NULL for none (GPT-NeoX's fc1: bias +
 * GELU, exact or tanh); the add and the activation in fp32, one rounding. m even.
 * Matches cuda_ref_act within half an fp16 ulp + 1e-5.
 */
cudaError_t cuda_act(uint16_t *x, const uint16_t *bias, int32_t n, int32_t m,
                     enum cuda_act act, cudaStream_t stream);

/*
 * SwiGLU: dst [n, f] = silu(src[:, :f]) * src[:, f:] for src [n, 2f], the gate and up
 * projections side by side as one GEMM writes them (shard.h stacks gate then up).
 * f even; dst must not overlap src. Matches cuda_ref_act_swiglu within half an fp16
 * ulp + 1e-5.
 */
cudaError_t cuda_act_swiglu(uint16_t *dst, const uint16_t *src, int32_t n, int32_t f,
                            cudaStream_t stream);

/*
 * Rotary positions in place on the first n_heads heads (head_dim each, contiguous) of
 * the rows of x (row r at x + r * row_stride; for the q | k | v rows of one
 * projection, n_heads = the q heads and the k heads, which follow each other): the
 * contract of cuda_ref_rope (cuda_ref.h), pos [n] the tokens' true positions,
 * inv_freq [dims / 2] device memory filled from arch_rope_inv_freq. dims even, 0 <
 * dims <= head_dim (NeoX rotates a part of each head); n_heads at most 65535. Matches
 * the reference within half an fp16 ulp + 1e-5.
 */
cudaError_t cuda_rope(uint16_t *x, int64_t row_stride, const int32_t *pos,
                      const float *inv_freq, int32_t n, int32_t n_heads, int32_t head_dim,
                      int32_t dims, cudaStream_t stream);

/* x [n] += y [n], the residual add; any n. x and y must not overlap unless equal. */
cudaError_t cuda_add(uint16_t *x, const uint16_t *y, int64_t n, cudaStream_t stream);

/*
 * One layer's decode attention, H2O included, for n_seq sequences of one token each:
 * the contract of struct cuda_decode_attn_args (cuda_ref.h), whose host reference
 * cuda_ref_decode_attn it matches up to fp32 rounding noise (bit-identical logits;
 * softmax sums, expf and value sums to about 1e-7 relative) and one fp16 rounding of
 * the output. Every pointer in *a is device memory; *a itself is read on the host
 * and may be reused once the call returns. head_dim even and at most 256 (the
 * kernel moves V as half2 pairs), n_seq at most 65535, every n_slots at most
 * max_slots, which sizes the kernel's shared memory at 4 bytes per slot (plus about
 * 3 KiB): past 8192 slots the call opts in to more than the default 48 KiB with
 * cudaFuncSetAttribute, up to about 57000 slots on sm_90 (227 KiB) and 40000 on sm_80
 * (163 KiB); beyond, that call's error is returned. Block tables and slots are not
 * checked on the device. With an int8 cache (a->k8, v8, k_scale, v_scale all set) the
 * token's int8 K/V and scales are the reference's bit for bit (the quantizer is exact
 * arithmetic, cuda_int8.cuh) and the rest matches as above.
 */
cudaError_t cuda_decode_attn(const struct cuda_decode_attn_args *a, cudaStream_t stream);

/*
 * H2O prefill compaction of one layer of one sequence: the contract of struct
 * cuda_kv_compact_args (cuda_ref.h), whose host reference cuda_ref_kv_compact (and so
 * the CPU backend's kv_compact) it matches bit for bit: every value is only moved.
 * The kv_compact op is one call per layer. Every pointer in *a is device memory (keep
 * this layer's [n_head, n_keep] rows); *a is read on the host. head_dim even and at
 * most 256, 0 <= n_keep <= n_slots; keep ascending per head and the block table are
 * not checked on the device. With an int8 cache (a->k8 set, v8 and both scales too)
 * int8 K/V and the scales move instead of k / v. n_head == 0 or n_slots == 0 launches
 * nothing.
 */
cudaError_t cuda_kv_compact(const struct cuda_kv_compact_args *a, cudaStream_t stream);

/*
 * Mark every slot of blocks[0..n) free in one layer: pos = -1, score = 0 and V = 0
 * (V too: attention multiplies every slot of a visible block by its probability, 0 for
 * a free slot, and 0 * NaN left by an earlier owner would leak), as the CPU backend's
 * kv_init_blocks does; K is left as it is (a free slot's logit is replaced, not
 * multiplied). The kv_init_blocks op is one call per layer. blocks: device [n], each
 * in [0, n_blocks) of the pool (not checked on the device; a block listed twice is
 * cleared twice). v [n_blocks, n_head, block_size, head_dim] fp16, pos / score
 * [n_blocks, n_head, block_size] as in cuda_ref.h. head_dim even (V is cleared as
 * 4-byte pairs, so v must be 4-byte aligned); any n_head, block_size >= 1.
 * n == 0 or n_head == 0 launches nothing. Host reference: cuda_ref_kv_init_blocks.
 */
cudaError_t cuda_kv_blocks_init(uint16_t *v, int32_t *pos, float *score,
                                const int32_t *blocks, int32_t n, int32_t n_head,
                                int32_t head_dim, int32_t block_size, cudaStream_t stream);

/*
 * The same for an int8 KV cache: V8 [n_blocks, n_head, block_size, head_dim] all 0 and
 * the value scales v_scale [n_blocks, n_head, block_size] 0 besides pos and score, as
 * the CPU backend's kv_init_blocks clears both; K8 and the key scales are left (a free
 * slot's logit is replaced). v8 2-byte aligned, v_scale not NULL; otherwise the
 * conditions above. Host reference: cuda_ref_kv_init_blocks_i8.
 */
cudaError_t cuda_kv_blocks_init_i8(int8_t *v8, float *v_scale, int32_t *pos, float *score,
                                   const int32_t *blocks, int32_t n, int32_t n_head,
                                   int32_t head_dim, int32_t block_size,
                                   cudaStream_t stream);

/*
 * One layer's slot state of one sequence, dense: pos_out/score_out [n_head, n_slots]
 * get, for head h and slot s, the state at block blocks[s / block_size], offset
 * s % block_size. blocks: device [ceil(n_slots / block_size)], not checked on the
 * device. pos / score [n_blocks, n_head, block_size]. The kv_read_state op is one call
 * per layer into pos_out + layer * n_head * n_slots (its [n_layer, n_head, n_slots]
 * layout), then one copy to the host. n_head at most 65535 (the grid's y), block_size
 * >= 1; n_slots == 0 or n_head == 0 launches nothing. The outputs must not overlap
 * the pool. Host reference: cuda_ref_kv_gather_state (bit-identical: values are only
 * copied).
 */
cudaError_t cuda_kv_blocks_gather_state(int32_t *pos_out, float *score_out,
                                        const int32_t *pos, const float *score,
                                        const int32_t *blocks, int32_t n_slots,
                                        int32_t n_head, int32_t block_size,
                                        cudaStream_t stream);

/*
 * One layer's prefill attention for a chunk of prompt tokens of each of n_seq
 * sequences, H2O column sums included: the contract of struct cuda_prefill_attn_args
 * (cuda_ref.h), whose host reference cuda_ref_prefill_attn it matches up to fp32
 * rounding noise (bit-identical logits; the online softmax's sums, expf and the value
 * sums to about 1e-6 relative) and one fp16 rounding of the output. Three kernels on
 * `stream`: the chunk's K/V writes, the tiled attention (saves each row's log-sum-exp
 * in a->lse), then the column sums from those (docs/cuda.md). Every pointer in *a is
 * device memory; *a is read on the host and may be reused once the call returns.
 * head_dim 1..256; n_seq and n_head at most 65535; every seqs[i].n_tok at most
 * max_chunk and n_slots at most max_slots (they size the grids: a larger one is
 * silently cut short). Shared memory is 256 * head_dim + 2048 bytes per block (66 KiB
 * at head_dim 256, where the call opts in past 48 KiB). Block tables, slots and rows
 * are not checked on the device. With an int8 cache (a->k8, v8, k_scale, v_scale all
 * set) the chunk's int8 K/V and scales are the reference's bit for bit.
 */
cudaError_t cuda_prefill_attn(const struct cuda_prefill_attn_args *a, cudaStream_t stream);

/*
 * The rows a step samples: dst [n, vocab] fp32, row i = src row rows[i] (src [n_out,
 * vocab], the forward's logits) plus, in order, the additions add_ids[k] / add_vals[k]
 * for k in [add_off[i], add_off[i + 1]) (sampler.h steps 1-2: logit_bias, then the
 * negated penalties). add_off [n + 1]. Several rows may name one src row. Matches
 * cuda_ref_logits_rows bit for bit. Ids are not checked on the device (the engine
 * made them, within the vocabulary).
 */
cudaError_t cuda_logits_rows(float *dst, const float *src, const int32_t *rows, int32_t n,
                             int32_t vocab, const int32_t *add_off, const int32_t *add_ids,
                             const float *add_vals, cudaStream_t stream);

/*
 * One decode step's sampling for a->n rows of fp32 logits [n, vocab]: the contract of
 * struct cuda_sample_args (cuda_ref.h), whose host reference cuda_ref_sample (and so
 * the CPU's sampler_sample, steps 3-5) it matches: the same greedy token, the same
 * drawn token for the same u (the host draws u from the sequence's rng; the order-
 * and rounding-sensitive sums and the selection run as the CPU runs them, see
 * cuda_sample.cu), logprobs within 1e-5. One block of 1024 threads per row; only
 * token, logprob, n_top, top_ids and top_logprobs (36 bytes or so per row) need to
 * come back to the host. Every pointer in *a is device memory, a->scratch
 * CUDA_SAMPLE_SCRATCH_BYTES(n, vocab) of it, 16-byte aligned; *a is read on the host.
 * Returns cudaErrorInvalidValue for n < 0, vocab <= 0 or no scratch.
 */
cudaError_t cuda_sample(const struct cuda_sample_args *a, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
