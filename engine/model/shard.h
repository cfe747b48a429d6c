/*
 * shard.h - which part of each tensor a tensor-parallel rank holds, and reading
 * exactly that part from a checkpoint, for every family (arch.h names the tensors).
 *
 * Megatron-style sharding over N ranks (DESIGN section 4, docs/tensor-parallel.md):
 * rank r holds query heads [r * n_head / N, (r + 1) * n_head / N) of q and KV heads
 * [r * n_kv_head / N, (r + 1) * n_kv_head / N) of k and v (whole heads; with GQA a
 * rank's query heads are exactly those that read its KV heads) and the matching
 * input columns of out_proj, and fc1 units [r * ffn / N, (r + 1) * ffn / N) (rows of
 * fc1, or of both gate and up for SwiGLU, and input columns of fc2 / down). Each rank's
 * out_proj and fc2 then produce a partial sum of the full output and one all-reduce after
 * each makes it whole; their biases belong to rank 0 alone so that they are added once.
 * LayerNorms are replicated. Every backend (CPU ranks, GPU ranks) loads through this file,
 * so the split is written once.
 *
 * Owns: the fp32 host buffers of a struct shard_layer (shard_layer_free).
 * Thread: any; the reads are safe from several rank threads at once.
 */
#ifndef H2O_SHARD_H
#define H2O_SHARD_H

#include "model.h"

#include <stdint.h>

struct weights;

/* Rank `rank` of `size`: its heads and fc1 units. */
struct shard {
    int32_t rank, size;
    int32_t head0, n_head;       /* query heads [head0, head0 + n_head) */
    int32_t kv_head0, n_kv_head; /* KV heads [kv_head0, kv_head0 + n_kv_head) */
    int32_t ffn0, n_ffn;         /* fc1 units [ffn0, ffn0 + n_ffn) */
};

/*
 * The ranges of rank `rank` of `size` for cfg. Returns 0, or ENG_EINVAL (message
 * set, naming the model) when n_head, n_kv_head or ffn is not divisible by size.
 */
int shard_init(struct shard *s, const struct opt_config *cfg, int32_t rank, int32_t size);

/* One rank's part of one decoder layer, fp32, PyTorch layout ([out, in] rows). A
 * bias the family does not have (arch.h) is NULL. */
struct shard_layer {
    /* [(n_head_r + 2 * n_kv_head_r) * head_dim, hidden] and its bias: this rank's q
     * rows, then its k rows, then its v rows (NeoX's fused per-head rows regrouped) */
    float *qkv_w, *qkv_b;
    float *out_w, *out_b; /* [hidden, n_head_r * head_dim], [hidden] or NULL off rank 0 */
    /* [n_fc1, hidden], [n_fc1]: fc1 (n_fc1 = n_ffn), or for SwiGLU the gate rows then
     * the up rows (n_fc1 = 2 * n_ffn, no bias) */
    float *fc1_w, *fc1_b;
    float *fc2_w, *fc2_b; /* [hidden, n_ffn], [hidden] or NULL off rank 0 (down_proj) */
    float *ln1_w, *ln1_b; /* [hidden] the norm before attention (RMSNorm: no bias) */
    float *ln2_w, *ln2_b; /* [hidden] the norm before the MLP */
};

/*
 * Read rank s's part of layer `layer` (weights_read_f32_part: only its rows and
 * columns of each tensor). Returns 0, or the reader's error (message set) with *out
 * zeroed. Owns: *out's buffers (shard_layer_free).
 */
int shard_read_layer(const struct shard *s, const struct opt_config *cfg,
                     const struct weights *w, int32_t layer, struct shard_layer *out);

/* Free the buffers and zero *l. */
void shard_layer_free(struct shard_layer *l);

/* A window of a tensor: rows [row0, row0 + n_rows) x columns [col0, col0 + n_cols) of
 * a [rows, cols] tensor; a vector has cols = 1. */
struct shard_part {
    int64_t rows, cols, row0, n_rows, col0, n_cols;
};

/* The whole of a [rows, cols] tensor. */
static inline struct shard_part shard_whole(int64_t rows, int64_t cols)
{
    return (struct shard_part){rows, cols, 0, rows, 0, cols};
}

/*
 * Read window p of tensor "<prefix>.<what>" (e.g. "layers.0.fc1", "weight") into a
 * new fp32 buffer *dst [n_rows, n_cols] (the caller frees it), or set *dst = NULL and
 * return the reader's error.
 */
int shard_read(const struct weights *w, const char *prefix, const char *what,
               struct shard_part p, float **dst);

#endif
