/*
 * backend.h - the backend vtable: what the engine needs from a device.
 *
 * Coarse on purpose (ggml-style table of function pointers plus an opaque context):
 * load the weights, allocate the paged KV pool, run one batched forward, copy and
 * initialise blocks, and expose the per-slot H2O state. The CPU backend
 * (engine/cpu) is the readable reference; the CUDA backend implements the same table.
 *
 * KV geometry (DESIGN section 5): per layer, K and V pools of n_blocks blocks, each
 * [n_head, block_size, head_dim]; and per layer the slot state pos/score, each
 * [n_blocks, n_head, block_size]. pos = -1 marks a free slot. A sequence's block
 * table maps slot s to (blocks[s / block_size], s % block_size) for every layer and
 * head; with H2O the same slot may hold different tokens in different heads.
 */
#ifndef H2O_BACKEND_H
#define H2O_BACKEND_H

#include "dtype.h"
#include "sampler.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct weights;
struct opt_config;

/* One sequence's part of a batch. */
struct be_seq {
    const int32_t *blocks; /* block table [n_blocks], covers every slot used below */
    int32_t n_blocks;
    int32_t tok_start;     /* first row of this sequence in the batch */
    int32_t n_tok;         /* rows: a prefill chunk, or 1 for a decode token */
    /* The new tokens go to slots slot_start .. slot_start + n_tok - 1 in every layer
     * and head, unless head_slots is set (one decode token only): then the token goes
     * to slot head_slots[layer * n_head + head], the hole H2O left in that head. */
    int32_t slot_start;
    const int32_t *head_slots; /* [n_layer * n_head] or NULL */
    /* Attention scans slots [0, n_slots) after the new tokens are written; a slot is
     * attended when 0 <= pos[slot] <= the query's position (free slots are -1). */
    int32_t n_slots;
    /* The sequence's H2O budget, for a decode token (n_tok == 1) of a sequence that
     * evicts: B = H + R slots per head and the recent window R >= 1; h2o_budget 0
     * otherwise (full, or a prompt chunk). A backend whose slot state lives on a
     * device (kv_state returns -1) picks each head's victim in the forward's own
     * pass once B slots are occupied (see kv_victims); the CPU backend ignores them
     * unless it emulates such a device (be_cpu_opts.device_state). */
    int32_t h2o_budget, h2o_recent;
};

struct be_batch {
    int32_t n_tok;
    const int32_t *tokens;   /* [n_tok] */
    const int32_t *pos;      /* [n_tok] logical positions (never slot indices) */
    int32_t n_seq;
    const struct be_seq *seqs; /* [n_seq], rows in order, disjoint */
    int32_t n_out;
    const int32_t *out_rows;   /* [n_out] rows whose logits are wanted */
};

/* One row for be_ops.sample: the engine's sampler split at step 3 (sampler.h). */
struct be_sample_row {
    int32_t row;            /* row of the last forward's logits, 0 .. n_out - 1 */
    const int32_t *add_ids; /* [n_add] steps 1-2: logits[add_ids[i]] += add_vals[i] */
    const float *add_vals;  /* [n_add], applied in order */
    int32_t n_add;
    float temperature, top_p;
    int32_t top_k;
    int32_t n_logprobs;     /* -1 (none) .. SAMPLER_MAX_LOGPROBS */
    double u;               /* the host's rng_uniform draw; unread when greedy */
};

/* Where forward time went, summed since the last read. */
struct be_profile {
    double forward_s; /* whole forwards */
    double gemm_s;    /* matrix products (weights) */
    double attn_s;    /* attention over the KV cache, KV writes included */
    int64_t n_forward;
};

struct be_ops {
    const char *name;
    /* Load every tensor of `cfg` from `w`; the backend keeps its own copy. */
    int (*load)(void *ctx, const struct opt_config *cfg, const struct weights *w);
    /* Allocate the KV pool and slot state for n_blocks blocks. Once. */
    int (*kv_alloc)(void *ctx, int32_t n_blocks, int32_t block_size);
    /* Bytes one block takes over all layers (K, V and slot state). */
    size_t (*kv_block_bytes)(void *ctx, int32_t block_size);
    /* Mark every slot of these blocks free (pos = -1, score = 0) in every layer. */
    void (*kv_init_blocks)(void *ctx, const int32_t *blocks, int32_t n);
    /* Copy K, V and slot state of src[i] to dst[i] in every layer (fork). */
    void (*kv_copy_blocks)(void *ctx, const int32_t *src, const int32_t *dst, int32_t n);
    /*
     * H2O prefill compaction of one sequence (block table `blocks`, slots
     * 0..n_slots-1 in use): for every layer and head h, move slot
     * keep[(layer * n_head + h) * n_keep + i] to slot i (K, V, pos, score) for
     * i < n_keep, sources ascending; then mark slots n_keep..n_slots-1 free.
     */
    void (*kv_compact)(void *ctx, const int32_t *blocks, int32_t n_slots, const int32_t *keep,
                       int32_t n_keep);
    /* Host pointers to one layer's slot state [n_blocks, n_head, block_size], or
     * -1 when the state lives on a device: the engine then uses kv_read_state and
     * kv_victims, which such a backend must provide. */
    int (*kv_state)(void *ctx, int32_t layer, int32_t **pos, float **score);
    /*
     * Device state only. Copy one sequence's slot state (block table `blocks`, slots
     * [0, n_slots)) of every layer and head to the host: pos and score
     * [n_layer, n_head, n_slots]. The engine reads it once per prompt, to choose the
     * tokens H2O keeps (kv_seq_finish_prefill). Returns 0 or an engine error.
     */
    int (*kv_read_state)(void *ctx, const int32_t *blocks, int32_t n_slots, int32_t *pos,
                         float *score);
    /*
     * Device state only. After a forward: the victims of the forward's sequence
     * `seq` (an index into that be_batch's seqs, a decode token with h2o_budget > 0),
     * victims [n_layer * n_head]: for each (layer, head), the slot that the decode
     * pass chose to evict once the head held h2o_budget occupied slots (the rule of
     * h2o_select_evict), or -1 when it held fewer. A victim keeps its pos and score
     * until the sequence's next token is written into it (the engine passes it as
     * that head's head_slots entry), so attention never sees a stale token. Returns
     * 0 or an engine error.
     */
    int (*kv_victims)(void *ctx, int32_t seq, int32_t *victims);
    /* Optional (NULL: the engine sizes the pool from host RAM): bytes the KV pool may
     * take, for a device backend the memory left after weights and workspace
     * (--gpu-memory-utilization). */
    size_t (*kv_capacity)(void *ctx);
    /*
     * One forward over the batch: writes each token's K/V and pos into its slots,
     * adds every query's attention probabilities to the attended slots' scores, and
     * writes logits [n_out, vocab] (fp32) for the requested rows. logits may be NULL
     * when the backend has `sample`: the logits then stay where they were computed,
     * for the sample call that follows.
     */
    int (*forward)(void *ctx, const struct be_batch *b, float *logits);
    /*
     * Optional. Sample n rows of the last forward, run with logits NULL: for entry
     * i, a copy of logits row rows[i].row gets the additions of steps 1-2, then steps
     * 3-5 of sampler_sample_u with the entry's knobs and u (sampler.h); out[i] gets
     * what sampler_sample_u returns. Entries may share a row (n completions of one
     * prompt). Only the sample_outs come back: the point is that the [n_out, vocab]
     * logits never cross to the host. Returns 0 or an engine error.
     */
    int (*sample)(void *ctx, const struct be_sample_row *rows, int32_t n,
                  struct sample_out *out);
    /* Read and reset the time profile; NULL when the backend keeps none. The CUDA
     * backend times gemm_s and attn_s only from the first read on (events cost). */
    void (*profile)(void *ctx, struct be_profile *out);
    void (*destroy)(void *ctx);
};

struct backend {
    const struct be_ops *ops;
    void *ctx;
};

/* Where the model runs. */
enum be_device {
    BE_DEVICE_CPU = 0,  /* the CPU backend (oneDNN) */
    BE_DEVICE_CUDA = 1, /* the CUDA backend, one GPU per tensor-parallel rank */
    BE_DEVICE_AUTO = 2, /* CUDA where this build has it and a GPU is present, else CPU */
};

/* Most tensor-parallel ranks a backend takes. */
#define BE_MAX_TP 64

struct be_cpu_opts {
    enum dtype dtype; /* DTYPE_F32 or DTYPE_BF16: weights, activations into GEMMs, KV */
    int n_threads;    /* 0 = OpenMP's default; split evenly between the ranks */
    int tensor_parallel; /* ranks (threads) the layers are sharded over; 0 or 1 = none */
    /* Serve the slot state as a device backend does (kv_state -1; kv_read_state,
     * and victims picked in the forward for kv_victims): the engine's path for the
     * CUDA backend, run and tested on the CPU. Results are identical either way. */
    bool device_state;
};

/*
 * Create the CPU backend. Returns 0, ENG_EUNSUPPORTED when bf16 is asked for on a
 * CPU without it, or ENG_EINVAL for tensor_parallel outside 0..BE_MAX_TP. The model's
 * heads and ffn must divide by tensor_parallel; load says so (ENG_EINVAL) if not. Owns: *out (backend_destroy). Thread: the engine thread from
 * then on.
 */
int backend_cpu_create(struct backend *out, const struct be_cpu_opts *opts);

struct be_cuda_opts {
    int tensor_parallel;          /* ranks, one per GPU (devices 0..N-1); 0 or 1 = GPU 0 */
    float gpu_memory_utilization; /* fraction of each GPU's memory for weights, workspace
                                     and the KV pool together, in (0, 1]; 0 = 0.9 */
    int32_t max_step_tokens;      /* tokens of one forward the workspace reserve holds
                                     (activations); 0 = 4096 */
    int32_t max_step_rows;        /* logits rows of one forward the reserve holds (the
                                     logits and, on rank 0, the sampler); 0 = 512 */
};

/*
 * Create the CUDA backend: fp16 weights and activations, fp32 accumulation, fp32 H2O
 * scores, the slot state on the GPUs (kv_state returns -1; kv_read_state and
 * kv_victims serve the engine). Returns 0, ENG_EUNSUPPORTED when this build has no
 * CUDA backend, ENG_EUNAVAILABLE when fewer GPUs than ranks are present or a device
 * cannot be initialised, or ENG_EINVAL for bad options.
 * Owns: *out (backend_destroy). Thread: the engine thread from then on (with tensor
 * parallelism it drives one worker thread per further GPU).
 */
int backend_cuda_create(struct backend *out, const struct be_cuda_opts *opts);

/*
 * How many CUDA GPUs this build can use: 0 without the CUDA backend, without an
 * NVIDIA driver (no /dev/nvidiactl: then no CUDA call is made at all) or without a
 * device. Thread: any.
 */
int backend_cuda_device_count(void);

/* Whether this CPU has AVX512-BF16 (the default dtype is bf16 where it does). */
int backend_cpu_has_bf16(void);

/* Destroy a backend made by any *_create. Safe on a zeroed struct. Thread: engine. */
void backend_destroy(struct backend *be);

#endif
