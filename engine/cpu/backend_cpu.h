/*
 * backend_cpu.h - the CPU backend's options and constructor (engine/cpu/be_cpu.c).
 *
 * The backend itself is reached through the wrappers of backend.h.
 */
#ifndef H2O_BACKEND_CPU_H
#define H2O_BACKEND_CPU_H

#include "dtype.h"

#include <stdbool.h>

struct backend;

struct be_cpu_opts {
    enum dtype dtype; /* DTYPE_F32 or DTYPE_BF16: weights, activations into GEMMs */
    /* With kv_dtype_set, the KV cache's storage: DTYPE_F32, DTYPE_BF16 or DTYPE_I8
     * (symmetric, an fp32 scale per token and KV head: engine/cpu/cpu_attn_int8.c),
     * independent of dtype; without, the cache is stored in dtype. */
    enum dtype kv_dtype;
    bool kv_dtype_set;
    int n_threads;    /* 0 = OpenMP's default; split evenly between the ranks */
    int tensor_parallel; /* ranks (threads) the layers are sharded over; 0 or 1 = none */
    /* Serve the slot state as a device backend does (kv_state NULL; kv_read_state,
     * and victims picked in the forward for kv_victims; sample on the kept logits):
     * the engine's path for the CUDA backend, run and tested on the CPU
     * (be_cpu_device.c). Results are identical either way. */
    bool device_state;
};

/*
 * Create the CPU backend. Returns 0, ENG_EUNSUPPORTED when bf16 is asked for on a
 * CPU without it, or ENG_EINVAL for tensor_parallel outside 0..BE_MAX_TP. The model's
 * heads and ffn must divide by tensor_parallel; load says so (ENG_EINVAL) if not.
 * Owns: *out (backend_destroy). Thread: the engine thread from then on.
 */
int backend_cpu_create(struct backend *out, const struct be_cpu_opts *opts);

/* Whether this CPU has AVX512-BF16 (the default dtype is bf16 where it does). */
int backend_cpu_has_bf16(void);

#endif
