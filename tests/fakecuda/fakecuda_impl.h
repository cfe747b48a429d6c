/*
 * fakecuda_impl.h - what the fake device's files share: the pointer checks of the
 * allocation registry (fakecuda_runtime.c) and the violation report.
 * Thread: any.
 */
#ifndef H2O_FAKECUDA_IMPL_H
#define H2O_FAKECUDA_IMPL_H

#include "fakecuda.h"

#include <cuda_runtime_api.h>

/* Report a misuse: print it, count it; returns cudaErrorInvalidValue for chaining. */
cudaError_t fakecuda_violation(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Whether [p, p + bytes) lies inside one device allocation of the calling thread's
 * current device; reports a violation naming `what` when not. NULL with bytes 0 is
 * fine. */
bool fakecuda_dev_ok(const void *p, size_t bytes, const char *what);

/* Whether `stream` is 0 or a live stream of the current device; reports when not. */
bool fakecuda_stream_ok(cudaStream_t stream, const char *what);

/* Whether an fp16 pointer is 4-byte aligned, as the kernels' half2 moves need. */
bool fakecuda_aligned4(const void *p, const char *what);

/* The calling thread's current device. */
int fakecuda_current_device(void);

#endif
