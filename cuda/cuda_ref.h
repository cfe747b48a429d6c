/*
 * cuda_ref.h - the CUDA attention kernels' arguments and their host references:
 * decode (cuda_decode_attn) and prefill (cuda_prefill_attn); and the references of the
 * KV cache's state kernels (compaction, block init, state gather) and the sampler.
 *
 * Plain C, no CUDA headers: built in every configuration (also -Dcuda=disabled), so
 * the logic of the kernels (cuda_decode_attn.cu, cuda_prefill_attn.cu) is tested on
 * the CPU in CI against the engine's own attention and H2O eviction (tests/unit/
 * test_cuda_ref.c, test_cuda_prefill_ref.c), and the GPU parity tests (tests/gpu/)
 * compare the kernels with these same references on the same data.
 *
 * Layout: the CPU backend's (engine/cpu/cpu_attn.h) with fp16 elements. Per layer,
 * K [n_blocks, n_head, head_dim, block_size] (each (block, head) tile transposed),
 * V [n_blocks, n_head, block_size, head_dim], slot state pos / score
 * [n_blocks, n_head, block_size]; slot s of a sequence is offset s % block_size of
 * block blocks[s / block_size], in every head (DESIGN section 5).
 *
 * int8 KV cache (--kv-cache-dtype int8, the CPU backend's format, docs/kv-cache.md):
 * the same layout with int8 elements (k8, v8 in the arguments below, k and v then
 * unused) plus one fp32 scale per (slot, KV head) for its key and one for its value,
 * k_scale / v_scale [n_blocks, n_head, block_size] beside pos and score. A token is
 * quantized once, when its K/V are written (cuda_ref_int8_quantize, the rule of the
 * CPU's cpu_attn_int8_quantize); attention reads scale * element in fp32 (a logit is
 * k_scale * (q . k8), a value row enters as (p * v_scale) * v8, as cpu_attn_int8.c
 * computes them), and compaction, block copies and block init carry the scales with
 * their slots. Every kernel here takes the int8 cache when k8 is set.
 *
 * Owns: nothing. The kernel takes device pointers, the reference host pointers.
 * Thread: the reference is pure apart from its writes through the arguments.
 */
#ifndef H2O_CUDA_REF_H
#define H2O_CUDA_REF_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Quantize one head's n values x (fp16) to int8: dst[i * stride] = round(x / scale)
 * with scale = max|x| / 127, returned (0 for an all-zero row, whose elements are then
 * 0). The rule of the CPU backend's cpu_attn_int8_quantize (engine/cpu/
 * cpu_attn_int8.c) applied to the widened values, operation for operation: amax by
 * fmaxf, inv = 127 / amax, lrintf(x * inv) (round to nearest even) clamped to
 * [-127, 127], scale = amax / 127; so a CUDA pool and a CPU pool written from the
 * same fp16 K/V hold the same bytes (tests/unit/test_cuda_ref.c checks it against
 * that very function). The kernels do the same per element (__float2int_rn on the
 * same fp32 product).
 */
float cuda_ref_int8_quantize(int8_t *dst, int64_t stride, const uint16_t *x, int32_t n);

/* One decode sequence of the step. */
struct cuda_decode_seq {
    int32_t n_slots; /* slots [0, n_slots) are scanned, the new token's included */
    int32_t t;       /* the decode token's logical position */
    int32_t budget;  /* B = H + R slots per head; INT32_MAX (or <= 0) never evicts (full) */
    int32_t recent;  /* R >= 1, the recent window including the current token */
};

/*
 * One layer's decode attention for n_seq sequences of one token each.
 *
 * Heads: n_head query heads over KV = n_kv_head KV heads (0 means n_head; n_head a
 * multiple of KV): query head h reads KV head g = h / (n_head / KV) (grouped-query
 * attention, transformers' repeat_kv). The pool and every per-head array below are
 * per KV head; qkv rows are q [n_head] | k [KV] | v [KV] heads of head_dim.
 *
 * For each (sequence i, KV head g): write the token's K and V (from qkv) into slot
 * new_slot[i * KV + g] with pos = t and score = 0. Each query head h of the group
 * attends with q * scale over every slot j < n_slots whose 0 <= pos[j] <= t and,
 * with a sliding window W > 0 (Mistral), pos[j] > t - W: fp32 logits (an FMA chain
 * over d in order), fp32 softmax; out = sum_j p(j) V_j rounded once to fp16;
 * score[j] += p_h(j) for every attended slot, the group's query heads in order, so a
 * KV head's score is the sum over its query heads (the CPU's rule, docs/kv-cache.md;
 * the new token starts with its own p). Then, if the KV head's occupied slots
 * (pos >= 0 among [0, n_slots)) number at least B, victim[i * KV + g] =
 * cuda_ref_victim_window's choice: with a window, the oldest occupied slot with pos <=
 * t + 1 - W (outside the next token's window); otherwise (or none such) argmin score
 * among occupied slots with pos <= t - (R - 1) (the R - 1 newest, the current token
 * included, are protected; with R = 1 the new token competes), ties to the older
 * position; else -1. The victim is only reported: its slot keeps its pos and score
 * until the caller frees it (the next token of that head goes there).
 */
struct cuda_decode_attn_args {
    const uint16_t *qkv;   /* [n_seq, (n_head + 2 KV) * head_dim] fp16: q | k | v,
                              q unscaled (and rotated, for rotary models) */
    uint16_t *out;         /* [n_seq, n_head * head_dim] fp16 */
    uint16_t *k;           /* [n_blocks, KV, head_dim, block_size] fp16 */
    uint16_t *v;           /* [n_blocks, KV, block_size, head_dim] fp16 */
    int32_t *pos;          /* [n_blocks, KV, block_size], -1 = free */
    float *score;          /* [n_blocks, KV, block_size] accumulated attention */
    const int32_t *blocks; /* [n_seq, max_blocks] block tables, row i for sequence i */
    int32_t max_blocks;    /* row stride of blocks */
    const struct cuda_decode_seq *seqs; /* [n_seq] */
    const int32_t *new_slot; /* [n_seq, KV] the new token's slot in each KV head */
    int32_t *victim;         /* [n_seq, KV] out: slot to evict, or -1 */
    int32_t n_seq, n_head, head_dim, block_size;
    int32_t max_slots; /* >= every seqs[i].n_slots: sizes the kernel's shared memory */
    float scale;       /* head_dim^-0.5 */
    int32_t n_kv_head; /* KV heads; 0 = n_head (OPT, NeoX) */
    int32_t window;    /* sliding window W; 0 = none */
    /* int8 KV cache, or all NULL for fp16 (the header comment): with k8 set, K/V are
     * k8 [n_blocks, KV, head_dim, block_size] and v8 [n_blocks, KV, block_size,
     * head_dim] int8, their scales k_scale / v_scale [n_blocks, KV, block_size], and
     * k / v are not read. */
    int8_t *k8, *v8;
    float *k_scale, *v_scale;
};

/*
 * The reference: the computation above on host memory, one (sequence, head) after
 * another, in the kernel's arithmetic where it is fixed (logits, the single fp16
 * rounding) and in plain sequential order where the kernel reduces in parallel (max,
 * sum, values), with expf. out_f32 [n_seq, n_head * head_dim], when not NULL, gets
 * the outputs before the fp16 rounding; a->out may be NULL when only those are
 * wanted.
 */
void cuda_ref_decode_attn(const struct cuda_decode_attn_args *a, float *out_f32);

/*
 * The eviction rule alone, for one head's n slots (pos -1 = free): argmin score
 * among pos >= 0 and pos <= t - (recent - 1), ties to the older position; -1 if none.
 * The same rule as h2o_select_evict (engine/h2o.c), written here so that this file
 * depends on nothing but dtype.h.
 */
int32_t cuda_ref_victim(const float *score, const int32_t *pos, int32_t n, int32_t t,
                        int32_t recent);

/*
 * The eviction rule with a sliding window (window > 0): the oldest occupied slot with
 * pos <= t + 1 - window, if any; else cuda_ref_victim. window <= 0 is cuda_ref_victim.
 * The same rule as h2o_select_evict_window (engine/kv/h2o.c).
 */
int32_t cuda_ref_victim_window(const float *score, const int32_t *pos, int32_t n, int32_t t,
                               int32_t recent, int32_t window);

/*
 * H2O prefill compaction of one layer of one sequence (the device twin of be_ops
 * kv_compact, whose CPU code is cpu_attn_kv_compact_head in engine/cpu/cpu_attn.c):
 * for every head h, move slot keep[h * n_keep + i] to slot i (K, V, pos, score, bit
 * copies; with an int8 cache K8, V8 and both scales) for i < n_keep, keep ascending within
 * a head (so keep[i] >= i), in increasing i; then mark slots n_keep..n_slots-1 free (pos
 * -1, score 0; their K/V are left as they are). The kv_compact op is this for every layer,
 * keep advancing by n_head * n_keep per layer. Layout as above (K tiles transposed).
 */
struct cuda_kv_compact_args {
    uint16_t *k;           /* [n_blocks, n_head, head_dim, block_size] fp16 */
    uint16_t *v;           /* [n_blocks, n_head, block_size, head_dim] fp16 */
    int32_t *pos;          /* [n_blocks, n_head, block_size] */
    float *score;          /* [n_blocks, n_head, block_size] */
    const int32_t *blocks; /* the sequence's block table, covering slots [0, n_slots) */
    const int32_t *keep;   /* [n_head, n_keep] kept slots per head, ascending */
    int32_t n_slots, n_keep; /* 0 <= n_keep <= n_slots */
    int32_t n_head, head_dim, block_size;
    /* int8 KV cache, or NULL for fp16: with k8 set, k8 / v8 and the scales
     * k_scale / v_scale [n_blocks, n_head, block_size] move instead of k / v. */
    int8_t *k8, *v8;
    float *k_scale, *v_scale;
};

/* The reference: the CPU backend's loop on host memory, one head after another. */
void cuda_ref_kv_compact(const struct cuda_kv_compact_args *a);

/*
 * The reference of cuda_kv_blocks_init (the CPU backend's kv_init_blocks, one layer):
 * for each of blocks[0..n), every slot of every head gets pos -1, score 0 and V all
 * +0.0 (fp16 bits 0); K and blocks not listed are left as they are. Layout as above:
 * v [n_blocks, n_head, block_size, head_dim], pos / score [n_blocks, n_head,
 * block_size].
 */
void cuda_ref_kv_init_blocks(uint16_t *v, int32_t *pos, float *score, const int32_t *blocks,
                             int32_t n, int32_t n_head, int32_t head_dim,
                             int32_t block_size);

/* The same for an int8 cache: V8 all 0 and the value scales 0 besides pos and score
 * (the CPU backend clears both: 0 * anything stays 0 for a free slot); v8 [n_blocks,
 * n_head, block_size, head_dim], v_scale [n_blocks, n_head, block_size]. */
void cuda_ref_kv_init_blocks_i8(int8_t *v8, float *v_scale, int32_t *pos, float *score,
                                const int32_t *blocks, int32_t n, int32_t n_head,
                                int32_t head_dim, int32_t block_size);

/*
 * The reference of cuda_kv_blocks_gather_state (one layer of the CPU backend's
 * kv_read_state): pos_out / score_out [n_head, n_slots], entry (h, s) from slot s of
 * head h, i.e. index (blocks[s / block_size] * n_head + h) * block_size +
 * s % block_size of pos / score [n_blocks, n_head, block_size].
 */
void cuda_ref_kv_gather_state(int32_t *pos_out, float *score_out, const int32_t *pos,
                              const float *score, const int32_t *blocks, int32_t n_slots,
                              int32_t n_head, int32_t block_size);

/* The most alternatives cuda_sample reports per row (sampler.h's SAMPLER_MAX_LOGPROBS). */
#define CUDA_SAMPLE_MAX_TOP 5

/*
 * One decode step's sampling for n rows (cuda_sample, cuda_ref_sample): steps 3-5 of
 * engine/sampler.h on logits that already carry logit_bias and the penalties (steps
 * 1-2 touch a handful of tokens; the caller adds them on the device first).
 *
 * Per row i: NaN -> -inf, +inf -> FLT_MAX (all non-finite: every logit 0, uniform);
 * greedy (argmax, ties to the lowest id) when !(temperature[i] >= 1e-5),
 * top_k[i] == 1 or !(top_p[i] > 0); otherwise the CPU sampler's draw with u[i] in
 * place of rng_uniform: the host draws u[i] from the sequence's rng (exactly one
 * rng_uniform for a non-greedy row, none for a greedy one), so the device needs no
 * generator and the random stream stays the CPU's. The candidates and their order
 * are the CPU's (sampler_select.c: threshold search, quickselect, nucleus), so the
 * same u gives the same token. logprob = the token's log_softmax of the processed
 * logits (before temperature, top-k, top-p) when n_logprobs[i] >= 0, else 0;
 * n_top[i] = the number of alternatives (finite logits, most likely first, ties
 * lowest id, at most n_logprobs[i]), the rest of top_ids / top_logprobs zeroed.
 * Only token, logprob, n_top, top_ids and top_logprobs come back to the host.
 */
struct cuda_sample_args {
    const float *logits;        /* [n, vocab] processed logits (bias, penalties applied) */
    const float *temperature;   /* [n] 0 (or < 1e-5) = greedy */
    const int32_t *top_k;       /* [n] 0 (or >= vocab) = off */
    const float *top_p;         /* [n] 1 = off, <= 0 = greedy */
    const double *u;            /* [n] rng_uniform of the row's rng; unread when greedy */
    const int32_t *n_logprobs;  /* [n] -1 (none) .. CUDA_SAMPLE_MAX_TOP */
    int32_t *token;             /* [n] out */
    float *logprob;             /* [n] out */
    int32_t *n_top;             /* [n] out */
    int32_t *top_ids;           /* [n, CUDA_SAMPLE_MAX_TOP] out */
    float *top_logprobs;        /* [n, CUDA_SAMPLE_MAX_TOP] out */
    void *scratch;              /* cuda_sample only: CUDA_SAMPLE_SCRATCH_BYTES of device
                                   memory (weights and candidates); the reference ignores it */
    int32_t n, vocab;
};

/* The device workspace cuda_sample needs: per row, a float weight and a 12-byte
 * candidate per token. */
#define CUDA_SAMPLE_SCRATCH_BYTES(n, vocab) ((size_t)(n) * (size_t)(vocab) * 16u)

/*
 * The reference (cuda_ref_sample.c): the CPU sampler's steps 3-5 row by row on host
 * memory, the selection through the engine's own sampler_select_* (so users link the
 * engine). Allocates its O(vocab) scratch per call and frees it.
 */
void cuda_ref_sample(const struct cuda_sample_args *a);

/* The reference of cuda_logits_rows (cuda_kernels.h), on host memory. */
void cuda_ref_logits_rows(float *dst, const float *src, const int32_t *rows, int32_t n,
                          int32_t vocab, const int32_t *add_off, const int32_t *add_ids,
                          const float *add_vals);

/* One sequence's prefill chunk. */
struct cuda_prefill_seq {
    int32_t tok_start;  /* first row of this sequence in qkv / out / tok_pos */
    int32_t n_tok;      /* rows of the chunk (>= 1) */
    int32_t slot_start; /* row r of the chunk goes to slot slot_start + r, every head */
    int32_t n_slots;    /* slots [0, n_slots) are scanned, the chunk's included */
};

/*
 * One layer's prefill attention for a chunk of prompt tokens of each of n_seq
 * sequences (cpu_attn_forward on a batch without head_slots).
 *
 * Heads as in decode: n_head query heads over KV = n_kv_head KV heads (0 = n_head),
 * query head h reading KV head h / (n_head / KV); the pool is per KV head, lse and out
 * per query head. With a sliding window W > 0 a query at position t sees only
 * positions > t - W (below: "sees"), for its softmax and for the column sums alike.
 * A KV head's column sums are those of its query heads, added to the score one query
 * head after another (the CPU's per-KV-head sum).
 *
 * For each sequence i, row r of its chunk (batch row tok_start + r) and head h: write
 * the token's K and V (from qkv) into slot slot_start + r with pos = tok_pos[row] and
 * score = 0. Then every query row attends, as in decode, to each slot j < n_slots with
 * 0 <= pos[j] <= its own position (causal inside the chunk, all of the earlier
 * chunks' tokens, never a free slot): fp32 logits q * scale . k (an FMA chain over d
 * in order), fp32 softmax, out rounded once to fp16. lse[row * n_head + h] gets the
 * row's log-sum-exp, max + log(sum exp(l - max)).
 * The H2O column sums (DESIGN section 5): score[j] += col[j] with
 * col[j] = sum over the chunk's query rows i of p(i, j), p(i, j) = exp(l(i, j) -
 * lse(i)) from the saved log-sum-exp, for every slot of [0, n_slots) (0 where no query
 * sees it). Previous chunks' slots keep the sums of their own chunks, so over a whole
 * prompt score is the column sum of every query, as the CPU engine accumulates it
 * (cpu_attn.c adds each query's p into score directly).
 */
struct cuda_prefill_attn_args {
    const uint16_t *qkv;    /* [n_tok, (n_head + 2 KV) * head_dim] fp16: q | k | v, q
                               unscaled (and rotated, for rotary models) */
    uint16_t *out;          /* [n_tok, n_head * head_dim] fp16 */
    float *lse;             /* [n_tok, n_head] out: each query row's log-sum-exp */
    uint16_t *k;            /* [n_blocks, KV, head_dim, block_size] fp16 */
    uint16_t *v;            /* [n_blocks, KV, block_size, head_dim] fp16 */
    int32_t *pos;           /* [n_blocks, KV, block_size], -1 = free */
    float *score;           /* [n_blocks, KV, block_size] accumulated attention */
    const int32_t *blocks;  /* [n_seq, max_blocks] block tables, row i for sequence i */
    int32_t max_blocks;     /* row stride of blocks */
    const int32_t *tok_pos; /* [n_tok] logical positions of the rows */
    const struct cuda_prefill_seq *seqs; /* [n_seq], rows in order, disjoint */
    int32_t n_tok, n_seq, n_head, head_dim, block_size;
    int32_t max_chunk; /* >= every seqs[i].n_tok: sizes the kernels' grid */
    int32_t max_slots; /* >= every seqs[i].n_slots: sizes the kernels' grid */
    float scale;       /* head_dim^-0.5 */
    int32_t n_kv_head; /* KV heads; 0 = n_head (OPT, NeoX) */
    int32_t window;    /* sliding window W; 0 = none */
    /* int8 KV cache, or all NULL for fp16 (the header comment): with k8 set, K/V are
     * k8 [n_blocks, KV, head_dim, block_size] and v8 [n_blocks, KV, block_size,
     * head_dim] int8, their scales k_scale / v_scale [n_blocks, KV, block_size], and
     * k / v are not read. */
    int8_t *k8, *v8;
    float *k_scale, *v_scale;
};

/*
 * The reference: the computation above on host memory, one (sequence, head) after
 * another and one query after another, with the kernel's logits arithmetic (bit-
 * identical), expf, and sequential sums where the kernel reduces in tiles; the column
 * sum of each slot adds its queries' p in query order, then adds that sum to score.
 * out_f32 [n_tok, n_head * head_dim], when not NULL, gets the outputs before the
 * fp16 rounding; a->out and a->lse may be NULL when not wanted.
 */
void cuda_ref_prefill_attn(const struct cuda_prefill_attn_args *a, float *out_f32);

/*
 * The element-wise kernels of the Llama / Mistral / Qwen2 / GPT-NeoX forward
 * (cuda_norm.cu, cuda_rope.cu, cuda_act.cu) and their host references. The
 * references read fp16 and write the unrounded fp32 result, so that the GPU tests can
 * check the kernel's single fp16 rounding (gpu_f16_misses) and the fake device
 * (tests/fakecuda) rounds it once itself. They follow the CPU backend's cpu_ops_norm,
 * cpu_ops_act, cpu_ops_swiglu and cpu_ops_rope (engine/cpu/cpu_ops.c) step for step on
 * the widened fp16 inputs.
 */

/* The activations (arch.h's enum arch_act, which this plain header cannot include;
 * be_cuda_fwd.c maps one onto the other). */
enum cuda_act { CUDA_ACT_RELU, CUDA_ACT_GELU, CUDA_ACT_GELU_TANH, CUDA_ACT_SILU };

/*
 * out [n, d] = the norm of each row of x [n, d]: RMSNorm (rms: x * 1 / sqrt(mean(x^2)
 * + eps) * w, b unused and may be NULL) or LayerNorm ((x - mean) / sqrt(var + eps) *
 * w + b, two passes), fp32 statistics summed in row order. w, b [d].
 */
void cuda_ref_norm(float *out, const uint16_t *x, const uint16_t *w, const uint16_t *b,
                   int rms, float eps, int32_t n, int32_t d);

/* One activation on one fp32 value, as cpu_ops.c's act_one. */
float cuda_ref_act_one(float x, enum cuda_act act);

/* out [n, m] = act(x + bias) for x [n, m], bias [m] or NULL (no bias). */
void cuda_ref_act(float *out, const uint16_t *x, const uint16_t *bias, int32_t n, int32_t m,
                  enum cuda_act act);

/* out [n, f] = silu(src[:, :f]) * src[:, f:] for src [n, 2f] (gate then up, as
 * shard.h stacks them). */
void cuda_ref_act_swiglu(float *out, const uint16_t *src, int32_t n, int32_t f);

/*
 * Rotary positions: out [n, row_stride] = x [n, row_stride] widened, with the first
 * n_heads heads of head_dim of each row rotated: within the first `dims` elements of
 * a head, element i < dims / 2 pairs with i + dims / 2 (rotate_half) and the pair
 * turns by the fp32 angle (float)pos[r] * inv_freq[i] (cosf, sinf); the rest of each
 * head (NeoX's partial rotary) and of the row (v) is copied. inv_freq [dims / 2]
 * from arch_rope_inv_freq, computed on the host.
 */
void cuda_ref_rope(float *out, const uint16_t *x, int64_t row_stride, const int32_t *pos,
                   const float *inv_freq, int32_t n, int32_t n_heads, int32_t head_dim,
                   int32_t dims);

#ifdef __cplusplus
}
#endif

#endif
