/*
 * backend_cuda.h - the CUDA backend's options and constructor: cuda/be_cuda.c in a
 * build with CUDA, engine/backend_nocuda.c (a clear error, no device) without.
 *
 * Plain C, no CUDA headers: the engine and the server include it in every build.
 * The backend itself is reached through the wrappers of backend.h.
 */
#ifndef H2O_BACKEND_CUDA_H
#define H2O_BACKEND_CUDA_H

#include <stdbool.h>
#include <stdint.h>

struct backend;

struct be_cuda_opts {
    int tensor_parallel;          /* ranks, one per GPU (devices 0..N-1); 0 or 1 = GPU 0 */
    float gpu_memory_utilization; /* fraction of each GPU's memory for weights, workspace
                                     and the KV pool together, in (0, 1]; 0 = 0.9 */
    int32_t max_step_tokens;      /* tokens of one forward the workspace reserve holds
                                     (activations); 0 = 4096 */
    int32_t max_step_rows;        /* logits rows of one forward the reserve holds (the
                                     logits and, on rank 0, the sampler); 0 = 512 */
    bool kv_int8;                 /* K/V stored as int8 with one fp32 scale per (slot, KV
                                     head), the CPU backend's format (--kv-cache-dtype
                                     int8); false = fp16 */
};

/*
 * Create the CUDA backend: fp16 weights and activations, fp32 accumulation, fp32 H2O
 * scores, fp16 or (kv_int8) int8 K/V, the slot state on the GPUs (kv_state NULL;
 * kv_read_state and kv_victims serve the engine). Returns 0, ENG_EUNSUPPORTED when this
 * build has no CUDA backend, ENG_EUNAVAILABLE when fewer GPUs than ranks are present or a
 * device cannot be initialised, or ENG_EINVAL for bad options. Owns: *out
 * (backend_destroy). Thread: the engine thread from then on (with tensor parallelism it
 * drives one worker thread per further GPU).
 */
int backend_cuda_create(struct backend *out, const struct be_cuda_opts *opts);

/*
 * How many CUDA GPUs this build can use: 0 without the CUDA backend, without an
 * NVIDIA driver (no /dev/nvidiactl: then no CUDA call is made at all) or without a
 * device. Thread: any.
 */
int backend_cuda_device_count(void);

#endif
