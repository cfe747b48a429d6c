/*
 * backend.h - the backend vtable: what the engine needs from a device, and the
 * wrappers the engine calls it through.
 *
 * Coarse on purpose (ggml-style table of function pointers plus an opaque context):
 * load the weights, allocate the paged KV pool, run one batched forward, copy and
 * initialise blocks, and expose the per-slot H2O state. The CPU backend
 * (engine/cpu, backend_cpu.h) is the readable reference; the CUDA backend (cuda/,
 * backend_cuda.h) implements the same table. Entries marked optional may be NULL:
 * the backend_* wrappers (backend.c) own the checks and supply the fallback, so
 * the engine calls the wrappers, never the table.
 *
 * KV geometry (DESIGN section 5): per layer, K and V pools of n_blocks blocks, K
 * [n_blocks, n_kv_head, head_dim, block_size] (each (block, head) tile transposed, so
 * the logits of a block's slots are one vector FMA per dimension) and V
 * [n_blocks, n_kv_head, block_size, head_dim]; and per layer the slot state pos/score,
 * each [n_blocks, n_kv_head, block_size]. pos = -1 marks a free slot. A sequence's block
 * table maps slot s to (blocks[s / block_size], s % block_size) for every layer and
 * head; with H2O the same slot may hold different tokens in different heads.
 *
 * Slot state on a device: a backend that keeps pos/score where the host cannot
 * read them (the CUDA backend) leaves kv_state NULL and provides kv_read_state and
 * kv_victims instead; backend_state_on_device says which kind the engine has.
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
     * to slot head_slots[layer * n_kv_head + head], the hole H2O left in that head. */
    int32_t slot_start;
    const int32_t *head_slots; /* [n_layer * n_kv_head] or NULL */
    /* Attention scans slots [0, n_slots) after the new tokens are written; a slot is
     * attended when 0 <= pos[slot] <= the query's position (free slots are -1). */
    int32_t n_slots;
    /* The sequence's H2O budget, for a decode token (n_tok == 1) of a sequence that
     * evicts: B = H + R slots per head and the recent window R >= 1; h2o_budget 0
     * otherwise (full, or a prompt chunk). A backend whose slot state lives on a
     * device (kv_state NULL) picks each head's victim in the forward's own pass
     * once B slots are occupied (see kv_victims); the CPU backend ignores them
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
     * keep[(layer * n_kv_head + h) * n_keep + i] to slot i (K, V, pos, score) for
     * i < n_keep, sources ascending; then mark slots n_keep..n_slots-1 free.
     */
    void (*kv_compact)(void *ctx, const int32_t *blocks, int32_t n_slots, const int32_t *keep,
                       int32_t n_keep);
    /* Host pointers to one layer's slot state [n_blocks, n_kv_head, block_size];
     * returns 0. NULL when the state lives on a device: the engine then uses
     * kv_read_state and kv_victims, which such a backend must provide. */
    int (*kv_state)(void *ctx, int32_t layer, int32_t **pos, float **score);
    /*
     * Required when kv_state is NULL; a host backend may have it too (the CPU
     * backend's is a plain gather). Copy one sequence's slot state (block table
     * `blocks`, slots [0, n_slots)) of every layer and head to the host: pos and
     * score [n_layer, n_kv_head, n_slots]. The engine reads it once per prompt, to
     * choose the tokens H2O keeps (kv_seq_finish_prefill). Returns 0 or an engine
     * error.
     */
    int (*kv_read_state)(void *ctx, const int32_t *blocks, int32_t n_slots, int32_t *pos,
                         float *score);
    /*
     * Device state only: required when kv_state is NULL, else NULL. After a forward:
     * the victims of the forward's sequence `seq` (an index into that be_batch's
     * seqs, a decode token with h2o_budget > 0), victims [n_layer * n_kv_head]: for each
     * (layer, head), the slot that the decode pass chose to evict once the head held
     * h2o_budget occupied slots (the rule of h2o_select_evict), or -1 when it held fewer. A
     * victim keeps its pos and score until the sequence's next token is written into it
     * (the engine passes it as that head's head_slots entry), so attention never sees a
     * stale token. Returns 0 or an engine error.
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
     * Optional (NULL: the engine samples the logits on the host). Sample n rows of
     * the last forward, run with logits NULL: for entry i, a copy of logits row
     * rows[i].row gets the additions of steps 1-2, then steps 3-5 of sampler_sample_u with the entry's knobs and u (sampler.h); out[i] gets
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

/*
 * The wrappers: the engine's only way into a backend. Each checks what the table
 * promises (CHECK: a broken promise is a bug, not an error to return) and supplies
 * the fallback of an optional entry. All take a backend made by a *_create
 * (backend_cpu.h, backend_cuda.h) and borrow their arguments.
 * Thread: the engine thread (the one that drives the backend), unless noted.
 */

/* The backend's name ("cpu", "cuda"), for logs. Thread: any. */
const char *backend_name(const struct backend *be);

/* Load every tensor of `cfg` from `w` (once). Returns 0 or an engine error. */
int backend_load(struct backend *be, const struct opt_config *cfg, const struct weights *w);

/* Allocate the KV pool and slot state for n_blocks blocks. Returns 0 or an engine
 * error (ENG_ENOMEM, ENG_EINVAL for a block size the backend cannot run). */
int backend_kv_alloc(struct backend *be, int32_t n_blocks, int32_t block_size);

/* Bytes one block takes over all layers (K, V and slot state). */
size_t backend_kv_block_bytes(const struct backend *be, int32_t block_size);

/* Whether the backend bounds the KV pool (be_ops.kv_capacity); if so, the bytes the
 * pool may take go to *bytes (0 is a real answer: a device the weights filled).
 * Without one, the engine sizes the pool from host RAM. */
bool backend_kv_capacity(const struct backend *be, size_t *bytes);

/* be_ops.kv_init_blocks, kv_copy_blocks and kv_compact. */
void backend_kv_init_blocks(struct backend *be, const int32_t *blocks, int32_t n);
void backend_kv_copy_blocks(struct backend *be, const int32_t *src, const int32_t *dst,
                            int32_t n);
void backend_kv_compact(struct backend *be, const int32_t *blocks, int32_t n_slots,
                        const int32_t *keep, int32_t n_keep);

/* Whether the slot state lives on a device (kv_state NULL): the engine then reads
 * it with backend_kv_read_state and takes the victims from backend_kv_victims.
 * Thread: any. */
bool backend_state_on_device(const struct backend *be);

/* Host pointers to one layer's slot state [n_blocks, n_kv_head, block_size]; only for
 * a backend whose state is on the host (checked). The arrays stay the backend's. */
void backend_kv_state(struct backend *be, int32_t layer, int32_t **pos, float **score);

/* be_ops.kv_read_state: pos and score [n_layer, n_kv_head, n_slots] of one sequence.
 * Returns 0 or an engine error. */
int backend_kv_read_state(struct backend *be, const int32_t *blocks, int32_t n_slots,
                          int32_t *pos, float *score);

/* be_ops.kv_victims, device state only (checked): victims [n_layer * n_kv_head] of the
 * last forward's sequence `seq`. Returns 0 or an engine error. */
int backend_kv_victims(struct backend *be, int32_t seq, int32_t *victims);

/* Whether the backend samples where the logits are (be_ops.sample): a forward may
 * then be run with logits NULL. Thread: any. */
bool backend_can_sample(const struct backend *be);

/* be_ops.forward; logits NULL only when backend_can_sample (checked). Returns 0 or
 * an engine error. */
int backend_forward(struct backend *be, const struct be_batch *b, float *logits);

/* be_ops.sample, for a backend that can (checked). Returns 0 or an engine error. */
int backend_sample(struct backend *be, const struct be_sample_row *rows, int32_t n,
                   struct sample_out *out);

/* Read and reset the time profile into *out; all zeros from a backend that keeps
 * none. */
void backend_profile(struct backend *be, struct be_profile *out);

/* Destroy a backend made by any *_create. Safe on a zeroed struct. */
void backend_destroy(struct backend *be);

#endif
