/*
 * be_cuda_impl.h - the CUDA backend's state, shared by be_cuda.c (set-up, weights,
 * KV operations) and be_cuda_fwd.c (the forward).
 *
 * One rank per GPU: rank r uses device r, its own stream, cuBLAS handle and, with
 * tensor parallelism, NCCL communicator, all driven from one host thread (ranks.h:
 * the engine thread is rank 0). Rank r holds its shard of the layers (shard.h: its
 * query heads of q and out_proj, its KV heads of k and v, its fc1 units (gate and up
 * for SwiGLU) and fc2 columns), the replicated embeddings and norms, and a KV pool of
 * its own KV heads only: per layer K [n_blocks, n_kv_head_r, head_dim, block_size],
 * V [n_blocks, n_kv_head_r, block_size, head_dim] (fp16, or int8 with per-slot
 * scales: opts.kv_int8), pos / score [n_blocks,
 * n_kv_head_r, block_size] (the layout of cuda_ref.h with n_kv_head_r heads). Rank 0
 * also holds the final norm, project_out and the LM head, and returns the logits.
 * What differs between model families is read from cfg.arch (arch.h), as the CPU
 * backend's cpu_rank.c does.
 *
 * fp16 weights and activations (the residual stream too, as FlexGen and Hugging Face
 * run OPT in fp16), fp32 accumulation in every GEMM and kernel, fp32 H2O scores,
 * fp32 logits.
 *
 * Thread: a rank's fields only on that rank's thread, inside a ranks_run job; the
 * struct cuda_be fields on the engine thread between jobs.
 */
#ifndef H2O_BE_CUDA_IMPL_H
#define H2O_BE_CUDA_IMPL_H

#include "backend.h"
#include "backend_cuda.h"
#include "comm.h"
#include "cuda_gemm.h"
#include "cuda_kernels.h"
#include "model.h"
#include "ranks.h"
#include "shard.h"

#include <cuda_runtime_api.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One layer's weights on a rank's device, fp16, PyTorch [out, in] layout. */
struct cu_layer {
    /* [(n_head_r + 2 n_kv_head_r) * head_dim, hidden]: q | k | v rows, and the bias
     * (NULL where the family has none) */
    uint16_t *qkv_w, *qkv_b;
    uint16_t *out_w, *out_b; /* [hidden, n_head_r * head_dim], [hidden] or NULL */
    uint16_t *fc1_w, *fc1_b; /* [n_fc1, hidden], [n_fc1] or NULL; SwiGLU: gate | up rows,
                                n_fc1 = 2 n_ffn */
    uint16_t *fc2_w, *fc2_b; /* [hidden, n_ffn], [hidden] or NULL off rank 0 */
    uint16_t *ln1_w, *ln1_b, *ln2_w, *ln2_b; /* [hidden]; the biases NULL for RMSNorm */
    /* This rank's KV pool and slot state for the layer: k / v with an fp16 cache;
     * with an int8 one (cuda_be.opts.kv_int8) k8 / v8 in the same layout and the scales
     * k_scale / v_scale [n_blocks, n_kv_head_r, block_size] instead (cuda_ref.h). */
    uint16_t *k, *v;
    int8_t *k8, *v8;
    float *k_scale, *v_scale;
    int32_t *pos;
    float *score;
};

/*
 * The forward's batch description on a device, one upload per forward (the byte
 * offsets of each array in the rank's meta buffer). Decode sequences (one token)
 * and prefill chunks are listed separately because two kernels attend them.
 */
struct cu_meta {
    size_t tokens, pos, out_rows;           /* [n_tok], [n_tok], [n_out] */
    size_t dec_seqs, dec_blocks, dec_slots; /* [n_dec] cuda_decode_seq, [n_dec, max_blocks],
                                               [n_layer, n_dec, n_head_r] new slots */
    size_t pre_seqs, pre_blocks;            /* [n_pre] cuda_prefill_seq, [n_pre, max_blocks] */
    size_t bytes;
};

/* What a span of the forward's time profile is (be_cuda_prof.c). */
enum cu_span { CU_SPAN_OTHER, CU_SPAN_GEMM, CU_SPAN_ATTN, CU_N_SPAN };

/* One forward's timing events on a rank's stream: event i begins a span of kind[i]
 * that event i + 1 ends. */
struct cu_marks {
    cudaEvent_t *ev; /* [cap], created on the rank's device */
    uint8_t *kind;   /* [cap] enum cu_span */
    int32_t n, cap;
};

struct cu_rank {
    struct shard sh;
    int device;
    cudaStream_t stream;
    struct cuda_gemm *gemm;
    struct comm *comm; /* NULL with one rank */
    /* Replicated weights, fp16. */
    uint16_t *embed;     /* [vocab, proj] */
    uint16_t *pos_embed; /* [max_pos + pos_offset, hidden], learned positions only */
    float *inv_freq; /* [rope.dims / 2] rotary inverse frequencies (arch_rope_inv_freq) */
    uint16_t *project_in; /* [hidden, proj] when proj != hidden */
    /* Rank 0 only. */
    uint16_t *project_out; /* [proj, hidden] when proj != hidden */
    uint16_t *lnf_w,
        *lnf_b; /* [hidden] the final norm (arch.final_norm); b NULL for RMSNorm */
    uint16_t *lm_head;       /* [vocab, proj]: embed unless the checkpoint has its own */
    bool own_lm_head;
    struct cu_layer *layers; /* [n_layer] */
    /* Workspace, grown to the largest batch seen. */
    int32_t cap_tok, cap_out;
    uint16_t *x;   /* [n_tok, hidden] residual stream */
    uint16_t *h;   /* [n_tok, max(hidden, proj)] LayerNorm output, GEMM input */
    uint16_t *qkv; /* [n_tok, (n_head_r + 2 n_kv_head_r) * head_dim] */
    uint16_t *attn; /* [n_tok, n_head_r * head_dim] */
    uint16_t *ff;  /* [n_tok, n_ffn] */
    uint16_t *ff2; /* [n_tok, 2 n_ffn] SwiGLU's gate | up */
    uint16_t *tmp; /* [n_tok, max(hidden, proj)] */
    uint16_t *par; /* [n_tok, hidden] parallel residual: the attention's output */
    float *lse;    /* [n_tok, n_head_r] prefill log-sum-exp */
    float *logits; /* [n_out, vocab] rank 0 */
    void *meta;    /* device batch description (struct cu_meta) */
    size_t meta_cap;
    int32_t *victims;      /* [n_layer, n_dec, n_kv_head_r] decode victims, device */
    int32_t *victims_host; /* the same, pinned host */
    size_t victims_cap;    /* int32 elements of both */
    /* kv_read_state / kv_compact staging: device and pinned host. */
    void *stage_dev, *stage_host;
    size_t stage_cap;
    size_t kv_room; /* bytes this GPU can give the pool, measured after load */
    /* The time profile (be_cuda_prof.c; rank 0 only): this forward's events, the last
     * forward's (complete, read during this one), and the seconds read so far. */
    bool timing; /* this forward records events */
    struct cu_marks marks[2];
    int mark_cur; /* marks[mark_cur] is being recorded */
    double span_s[CU_N_SPAN];
    /* The first error of the current job; the engine thread reports it. */
    int err;
    char msg[256];
};

/* A run of consecutive decode sequences: decode indices [d0, d1), first row row0.
 * The decode kernel takes its sequences' rows as one dense block of qkv. */
struct dec_run {
    int32_t d0, d1, row0;
};

struct cuda_be {
    struct be_cuda_opts opts;
    struct opt_config cfg;
    int32_t n_rank;
    struct cu_rank *ranks;
    struct ranks *threads;
    struct comm_nccl_group *group;
    int32_t n_blocks, block_size;
    size_t capacity; /* bytes the pool may take over all ranks, measured after load */
    /* The current job's arguments (set by the engine thread before ranks_run). */
    const struct weights *w;
    const struct be_batch *batch;
    float *logits_out;
    const int32_t *op_blocks, *op_src, *op_dst, *op_keep;
    int32_t op_n, op_slots, op_keep_n;
    int32_t *op_pos_out;
    float *op_score_out;
    /* The forward's batch description on the host (pinned), shared by the ranks. */
    void *meta_host;
    size_t meta_host_cap;
    struct cu_meta meta;
    int32_t n_seq; /* sequences of the last forward */
    int32_t n_dec, n_pre, max_blocks, max_dec_slots, max_pre_slots, max_chunk;
    int32_t *dec_index; /* [n_seq] decode index of each batch sequence, or -1 */
    struct dec_run *runs; /* [n_runs] */
    int32_t n_runs;
    int32_t cap_seq;
    bool have_victims; /* the last forward produced victims */
    int32_t n_kept;    /* rows of rank 0's logits kept for sample (forward with NULL) */
    /* be_cuda_sample.c's buffers on rank 0: device, and pinned host. */
    void *samp_dev, *samp_host;
    size_t samp_dev_cap, samp_host_cap;
    struct be_profile prof;
    bool timing; /* time the forwards' spans: set by the first be_ops.profile call */
    bool loaded;
};

/* Record CUDA error e of `what` as the rank's first error; returns nonzero on error
 * (the job then returns early). */
int be_cuda_fail(struct cu_rank *r, cudaError_t e, const char *what);

/* Record the engine error just set on this thread (err_msg) as the rank's. */
int be_cuda_fail_eng(struct cu_rank *r, int err);

/* Run job fn on every rank and turn the first rank error into this thread's error
 * (err_set). Returns 0 or that error. */
int be_cuda_run(struct cuda_be *c, ranks_fn fn);

/* Grow device buffer *p to hold n bytes (contents lost); returns nonzero on error. */
int be_cuda_reserve(struct cu_rank *r, void **p, size_t *cap, size_t n, const char *what);

/* Whether an NVIDIA driver is installed (be_cuda_driver.c: /dev/nvidiactl exists),
 * asked before any CUDA call. Its own file so that tests/fakecuda, which stands in
 * for the CUDA runtime on machines without a GPU, can answer it instead. */
bool be_cuda_driver_present(void);

/* Begin a span of `kind` on r's stream (one cudaEventRecord); the previous mark's span
 * ends here. Nothing unless r->timing. Returns r->err. */
int be_cuda_mark(struct cu_rank *r, enum cu_span kind);

/* Add the spans of m (a synchronised forward's: every event complete) to r->span_s
 * and empty it. Waits for nothing. */
void be_cuda_marks_read(struct cu_rank *r, struct cu_marks *m);

/* End of a forward on r: a completed one's events wait to be read by the next
 * forward (the sets swap); a failed one's are dropped. */
void be_cuda_marks_done(struct cu_rank *r, bool ok);

/* Destroy r's events (its device current). */
void be_cuda_marks_free(struct cu_rank *r);

/* The forward (be_cuda_fwd.c), a be_ops entry. */
int be_cuda_forward(void *ctx, const struct be_batch *b, float *logits);

/* The device bytes the sampler takes for a step of `rows` rows (without logit_bias
 * or penalty additions, which add 8 bytes each): what the pool must leave it.
 * Thread: any. */
size_t be_cuda_sample_reserve_bytes(int32_t rows, int32_t vocab);

/* Sampling from the kept logits (be_cuda_sample.c), a be_ops entry. */
int be_cuda_sample(void *ctx, const struct be_sample_row *rows, int32_t n,
                   struct sample_out *out);

/* The victims of the last forward's sequence `seq` (be_cuda_fwd.c), a be_ops entry. */
int be_cuda_kv_victims(void *ctx, int32_t seq, int32_t *victims);

/* The KV pool (be_cuda_kv.c): be_ops entries, each a job on every rank. */
size_t be_cuda_kv_block_bytes(void *ctx, int32_t block_size);
size_t be_cuda_kv_capacity(void *ctx);
int be_cuda_kv_alloc(void *ctx, int32_t n_blocks, int32_t block_size);
void be_cuda_kv_init_blocks(void *ctx, const int32_t *blocks, int32_t n);
void be_cuda_kv_copy_blocks(void *ctx, const int32_t *src, const int32_t *dst, int32_t n);
void be_cuda_kv_compact(void *ctx, const int32_t *blocks, int32_t n_slots, const int32_t *keep,
                        int32_t n_keep);
int be_cuda_kv_read_state(void *ctx, const int32_t *blocks, int32_t n_slots, int32_t *pos,
                          float *score);

/* Free rank r's part of the pool (on the rank's thread, its device current); safe
 * when none was allocated. */
void be_cuda_kv_free(struct cuda_be *c, struct cu_rank *r);

#endif
