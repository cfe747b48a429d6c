/*
 * cpu_rank.h - one tensor-parallel rank of the CPU backend: its shard of every
 * decoder layer, its workspace, and the forward from token ids to the residual
 * stream after the last layer.
 *
 * Megatron-style sharding over N ranks (DESIGN section 4, docs/tensor-parallel.md):
 * rank r holds heads [r * n_head / N, (r + 1) * n_head / N) of q/k/v (rows of the
 * [hidden, hidden] weights) and the matching input columns of out_proj, and fc1
 * units [r * ffn / N, (r + 1) * ffn / N) (rows of fc1, input columns of fc2). Each
 * rank's out_proj and fc2 then produce a partial sum of the full output; one
 * all-reduce (comm.h) after each makes it whole on every rank, and every rank keeps
 * an identical copy of the residual stream. The biases of out_proj and fc2 belong to
 * rank 0 alone, so they are added once. LayerNorms, embeddings and positions are
 * replicated. With N = 1 a rank is the whole model and makes no collective call.
 *
 * The KV pool is shared: the ranks are threads of one process, so the pool holds
 * every head ([n_blocks, n_head, ...], as for N = 1) and each rank writes and
 * attends only its own heads. The engine's H2O state reads (be_ops.kv_state) and
 * compaction therefore see one pool whatever N is. (A GPU rank would own a pool of
 * its heads only; the arithmetic per head is the same.)
 *
 * Owns: its layers' weights (oneDNN layouts), its oneDNN engine and stream, and its
 * workspace; not the shared tables or the KV pool (struct cpu_model, the backend's).
 * Thread: the rank's own thread (rank 0: the engine thread) after load.
 */
#ifndef H2O_CPU_RANK_H
#define H2O_CPU_RANK_H

#include "backend.h"
#include "comm.h"
#include "cpu_attn.h"
#include "cpu_gemm.h"
#include "model.h"
#include "shard.h"

#include <stdint.h>

struct weights;

/* What every rank reads and nobody writes during a forward. */
struct cpu_model {
    struct opt_config cfg;
    enum dtype dtype;        /* fp32 or bf16: weights, GEMM inputs */
    enum dtype kv_dtype;     /* fp32, bf16 or int8 (with scales): the KV cache */
    float *embed;            /* [vocab, proj] token embedding, fp32 for the lookup */
    float *pos_embed;        /* [max_pos + 2, hidden], learned positions only */
    float *inv_freq;         /* [rope.dims / 2] rotary frequencies, rotary only */
    struct cpu_kv_layer *kv; /* [n_layer] the pool, every head; NULL before kv_alloc */
    int32_t block_size;
};

struct cpu_layer {
    float *ln1_w, *ln1_b;  /* [hidden] the norm before attention (b NULL for RMSNorm) */
    float *ln2_w, *ln2_b;  /* [hidden] the norm before the MLP */
    struct cpu_linear qkv; /* [hidden] -> [(n_head_r + 2 n_kv_r) * head_dim]: q | k | v */
    struct cpu_linear out; /* [n_head_r * head_dim] -> [hidden], bias on rank 0 */
    /* [hidden] -> [n_fc1]: fc1 with ReLU fused (n_fc1 = ffn_r), fc1 before GELU
     * (fp32 out), or SwiGLU's gate | up (n_fc1 = 2 ffn_r, fp32 out) */
    struct cpu_linear fc1;
    struct cpu_linear fc2; /* [ffn_r] -> [hidden], bias on rank 0 */
};

struct cpu_ws {
    int32_t cap_tok;
    float *x;       /* [n_tok, hidden] residual stream */
    void *h;        /* [n_tok, max(hidden, proj)] GEMM input (dtype) */
    float *qkv;     /* [n_tok, (n_head_r + 2 n_kv_r) * head_dim] */
    void *attn;     /* [n_tok, n_head_r * head_dim] attention output (dtype) */
    void *ff;       /* [n_tok, ffn_r] fc2's input (dtype) */
    float *ff32;    /* [n_tok, 2 * ffn_r] fc1's fp32 output when the activation is ours */
    float *par;     /* [n_tok, hidden] parallel residual: the attention's output */
    float *tmp;     /* [n_tok, max(hidden, proj)] GEMM output before the residual add */
    float *emb;     /* [n_tok, proj] embedding before project_in */
    float *scratch; /* [scratch_rows, scratch_stride] attention rows */
    int32_t scratch_stride;
    int32_t scratch_rows; /* threads the scratch was sized for */
};

struct cpu_rank {
    struct shard sh;   /* r of N: this rank's heads and fc1 units */
    struct comm *comm; /* NULL when size == 1 */
    struct cpu_dnnl dnnl;
    struct cpu_linear project_in; /* when proj != hidden */
    struct cpu_layer *layers;     /* [n_layer] */
    struct cpu_ws ws;
    double gemm_s, attn_s; /* time since the profile was last read */
};

/*
 * Set up rank `rank` of `size` for model m (whose cfg is filled in): its head and
 * fc1 ranges (shard.h) and its oneDNN engine. comm may be NULL only when size == 1;
 * the rank takes it over (cpu_rank_deinit destroys it). Returns 0, ENG_EINVAL (heads
 * or ffn not divisible by size) or ENG_EUNSUPPORTED (oneDNN).
 * Thread: any.
 */
int cpu_rank_init(struct cpu_rank *r, const struct cpu_model *m, int32_t rank, int32_t size,
                  struct comm *comm);

/*
 * Read this rank's shard of every layer (shard_read_layer: only its rows and
 * columns) and project_in. Returns 0 or the reader's error (message set); after a
 * failure cpu_rank_deinit frees what was built. Thread: any, one rank at a time or
 * each from its own thread.
 */
int cpu_rank_load(struct cpu_rank *r, const struct cpu_model *m, const struct weights *w);

/* A linear layer of rank r from PyTorch-layout w [n, k] and bias b [n] (or NULL), in
 * the model's dtype (cpu_gemm_linear_init on the rank's engine). Thread: any. */
int cpu_rank_linear(struct cpu_rank *r, const struct cpu_model *m, struct cpu_linear *l,
                    const float *w, const float *b, int64_t n, int64_t k,
                    enum dtype dst_dtype, bool relu);

/*
 * Embeddings and every layer for batch b: writes this rank's heads' K/V, pos and
 * H2O scores into the shared pool and leaves the residual stream after the last
 * layer in r->ws.x [n_tok, hidden]. Collective when size > 1: every rank runs it
 * with the same batch, each on its own thread, at the same time.
 * Thread: the rank's.
 */
void cpu_rank_forward(struct cpu_rank *r, const struct cpu_model *m,
                      const struct be_batch *b);

/* The GEMM input: x [n] converted to the compute dtype in r->ws.h (a no-op view for
 * fp32). Thread: the rank's. */
const void *cpu_rank_gemm_in(struct cpu_rank *r, const struct cpu_model *m, const float *x,
                             int64_t n);

/* A GEMM on this rank's stream, its time added to r->gemm_s. Thread: the rank's. */
void cpu_rank_gemm(struct cpu_rank *r, const struct cpu_linear *l, const void *src,
                   int64_t m, void *dst);

/* Free everything the rank owns, its comm handle included. Safe on a zeroed or
 * half-built rank. Thread: any, once no forward runs. */
void cpu_rank_deinit(struct cpu_rank *r, int32_t n_layer);

#endif
