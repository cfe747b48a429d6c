/*
 * fakecuda.h - a fake CUDA device for tests on machines without a GPU: the CUDA
 * runtime calls, the kernels of cuda/cuda_kernels.h, the cuBLAS projections of
 * cuda/cuda_gemm.h and the NCCL communicator of cuda/comm_nccl.h, all on the host,
 * linked in place of libcudart, libcublas, libnccl and the kernel library so that the
 * CUDA backend's host code (cuda/be_cuda.c, be_cuda_fwd.c) runs unchanged.
 *
 * Device memory is host memory, but every allocation is registered with its device
 * and kind (device or pinned host), and every call checks its pointers the way a GPU
 * would fail on them: a kernel, GEMM, memset or all-reduce given host memory or
 * another device's memory, a copy whose direction contradicts its pointers or runs
 * past an allocation, a stream of another device than the current one, a kernel
 * precondition broken (an fp16 pointer not 4-byte aligned, n_slots above max_slots,
 * a chunk above max_chunk). Each such misuse prints "fakecuda: ..." on stderr, is
 * counted (fakecuda_violations) and returns a CUDA error, so the backend's own error
 * path is exercised too.
 *
 * Work runs at once, in call order: streams are handles that remember their device,
 * and cudaStreamSynchronize only checks its argument. So a missing synchronisation
 * (reading a download before the stream reached it) cannot show here; what a test
 * can see is that cudaDeviceSynchronize was called (fakecuda_device_syncs). Events
 * remember the host time they were recorded at, so cudaEventElapsedTime between two
 * of them is the host time of the fake work enqueued between.
 *
 * State: the fake driver is process-global (one machine), guarded by a mutex; the
 * current device is per thread, as in CUDA. Thread: any.
 */
#ifndef H2O_FAKECUDA_H
#define H2O_FAKECUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Pretend the machine has n GPUs (0 at start); cudaGetDeviceCount reports them. */
void fakecuda_set_devices(int n);

/* Whether the NVIDIA driver is "installed" (true at start): the backend's driver
 * check (be_cuda_driver_present) answers this instead of looking at /dev/nvidiactl. */
void fakecuda_set_driver(bool present);

/* Each fake GPU's memory size in bytes (1 GiB at start): cudaMemGetInfo and
 * cudaMalloc's out-of-memory answer use it. */
void fakecuda_set_memory(size_t bytes);

/* One fake GPU's memory size, overriding fakecuda_set_memory for it (0: back to
 * the common size); with fakecuda_device_used, a test runs one rank out of memory. */
void fakecuda_set_device_memory(int device, size_t bytes);

/* Bytes allocated on `device` now. */
size_t fakecuda_device_used(int device);

/* cudaDeviceSynchronize calls made with `device` current since the start. */
int64_t fakecuda_device_syncs(int device);

/* Make `device` unusable (as a GPU held by another process in exclusive mode, or
 * fallen off the bus): creating a stream on it fails. */
void fakecuda_set_broken(int device, bool broken);

/* Live allocations (device and pinned) over all devices: 0 after a backend is
 * destroyed, or it leaked. */
int64_t fakecuda_live_allocations(void);

/* Misuses detected since the start (see above); a correct backend makes none. */
int64_t fakecuda_violations(void);

#endif
