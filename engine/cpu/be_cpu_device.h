/*
 * be_cpu_device.h - the CPU backend's emulation of slot state on a device
 * (be_cpu_opts.device_state), in a module of its own.
 *
 * The CUDA backend keeps the H2O slot state on the GPUs: the engine reads a
 * prompt's state with kv_read_state, takes each decode token's victims from
 * kv_victims (picked in the forward's own pass), and samples where the logits are
 * (be_ops.sample). With device_state the CPU backend serves its host pool the same
 * way, so that path of the engine runs and is tested on every machine; the results
 * are identical either way. This module is that service; be_cpu.c puts it in the
 * ops table it hands out (kv_state NULL).
 *
 * Owns: the last forward's victims, the logits kept for sample, and their scratch.
 * Thread: engine only.
 */
#ifndef H2O_BE_CPU_DEVICE_H
#define H2O_BE_CPU_DEVICE_H

#include "backend.h"
#include "backend_cpu.h"
#include "cpu_attn.h"
#include "sampler.h"

#include <stdint.h>

/* The pool geometry the emulation reads: one cpu_kv_layer per layer, every head. */
struct be_cpu_device_pool {
    const struct cpu_kv_layer *kv; /* [n_layer] */
    int32_t n_layer, n_head, block_size;
    int32_t window; /* the model's sliding window (h2o_select_evict_window), 0 = none */
};

struct be_cpu_device {
    /* The last forward's victims [n_seq, n_layer * n_head] (-1 for a sequence
     * without a budget, or a head below it), and scratch for one head's slots,
     * ev_pos / ev_score [cap_ev_slots]. */
    int32_t *victims;
    int32_t n_victim_seqs, cap_victim_seqs;
    int32_t *ev_pos;
    float *ev_score;
    int32_t cap_ev_slots;
    /* Logits kept for sample when the forward gets logits NULL [n_kept, vocab], and
     * the sampler's scratch. */
    float *kept;
    int64_t cap_kept;
    int32_t n_kept;
    struct sampler_scratch scratch;
};

/*
 * One sequence's slot state of every layer and head (block table `blocks`, slots
 * [0, n_slots)) into pos and score [n_layer, n_head, n_slots]: what a device backend
 * copies back for kv_read_state. Valid on the host pool too, so the host table offers
 * it as well. Borrows everything.
 */
void be_cpu_device_read_state(const struct be_cpu_device_pool *p, const int32_t *blocks,
                              int32_t n_slots, int32_t *pos, float *score);

/* Forget the last forward's victims (at the start of a forward). The forward resets
 * n_kept itself once its ranks are done, as before it writes logits. */
void be_cpu_device_begin(struct be_cpu_device *d);

/*
 * After a forward: each decode token's victims, as the device decode pass picks them
 * (cuda_decode_attn_args): once a head's occupied slots among [0, n_slots) number at
 * least B, the argmin score among them outside the R - 1 newest positions
 * (h2o_select_evict, which skips free slots), else -1. The scores read are the ones
 * this forward just accumulated, as on the device.
 */
void be_cpu_device_pick_victims(struct be_cpu_device *d, const struct be_cpu_device_pool *p,
                                const struct be_batch *b);

/* kv_victims: the victims [n_layer * n_head] of the last forward's sequence seq.
 * Returns 0, or ENG_EINVAL when that forward had no sequence seq. */
int be_cpu_device_victims(const struct be_cpu_device *d, const struct be_cpu_device_pool *p,
                          int32_t seq, int32_t *victims);

/* Where a forward without a logits destination writes its logits: [n_out, vocab]
 * kept for be_cpu_device_sample, as a device would keep them. Owned by d. */
float *be_cpu_device_keep(struct be_cpu_device *d, int32_t n_out, int32_t vocab);

/* be_ops.sample on the kept rows, through the sampler's split (steps 1-2 as the
 * given additions, steps 3-5 with the given u). Returns 0, or ENG_EINVAL for a row
 * the last forward did not keep. */
int be_cpu_device_sample(struct be_cpu_device *d, int32_t vocab,
                         const struct be_sample_row *rows, int32_t n, struct sample_out *out);

/* Free what d holds; d may be all zeros. */
void be_cpu_device_deinit(struct be_cpu_device *d);

#endif
