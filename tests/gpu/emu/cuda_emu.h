/*
 * cuda_emu.h - just enough of CUDA's device side to run a kernel file as host C++:
 * one host thread per CUDA thread of a block, the blocks of a grid one after another,
 * a real barrier for __syncthreads and per-warp barriers for the shuffles.
 *
 * Why: no machine this project has had lends a GPU, and a kernel's barrier placement,
 * indexing and reductions are where it goes wrong; run under this, a kernel can be
 * compared with its host reference (cuda_ref.c) on the same cases as the GPU tests.
 * It checks logic only: not the device's arithmetic (host libm and no FMA
 * contraction), memory model, occupancy or timing. Shared memory is function-local
 * statics (one set, reused block after block), dynamic shared memory a buffer
 * poisoned with NaN before every launch. emu_attn.sh rewrites a .cu's launches
 * (kernel<<<grid, block, smem, stream>>>(args)) into emu_run calls and its
 * `extern __shared__` arrays into emu_smem.
 *
 * Owns: the emulator's globals (cuda_emu.cpp). Thread: the kernel threads it starts;
 * one launch at a time.
 */
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <pthread.h>

using std::max;
using std::min;
/* CUDA's int overloads, which also take an enum constant with an int (std's templates
 * want one type). */
static inline int min(int a, int b)
{
    return a < b ? a : b;
}
static inline int max(int a, int b)
{
    return a > b ? a : b;
}

#undef __global__
#define __global__
#undef __shared__
#define __shared__ static
#undef __launch_bounds__
#define __launch_bounds__(...)

extern thread_local uint3 threadIdx;
extern thread_local uint3 blockIdx;
extern dim3 blockDim, gridDim;
extern char *emu_smem;            /* dynamic shared memory of the running block */
extern pthread_barrier_t emu_bar; /* the block's threads */
extern pthread_barrier_t emu_warp_bar[32];
extern float emu_fx[1024]; /* shuffle exchange slots, one per thread */
extern int emu_ix[1024];
extern int emu_or;

/* Run body() as every thread of every block of grid (block.x threads, at most 1024,
 * a multiple of 32), with smem bytes of dynamic shared memory. */
void emu_run(dim3 grid, dim3 block, size_t smem, std::function<void()> body);

static inline void __syncthreads()
{
    pthread_barrier_wait(&emu_bar);
}

static inline int __syncthreads_or(int p)
{
    pthread_barrier_wait(&emu_bar);
    if (threadIdx.x == 0) emu_or = 0;
    pthread_barrier_wait(&emu_bar);
    if (p) __atomic_store_n(&emu_or, 1, __ATOMIC_SEQ_CST);
    pthread_barrier_wait(&emu_bar);
    const int r = emu_or;
    pthread_barrier_wait(&emu_bar);
    return r;
}

static inline void __syncwarp(unsigned = 0xffffffffu)
{
    pthread_barrier_wait(&emu_warp_bar[threadIdx.x / 32]);
}

/* Full-warp shuffles only (every caller in the kernels passes 0xffffffff). */
static inline float __shfl_xor_sync(unsigned, float v, int off)
{
    const int t = threadIdx.x;
    __syncwarp();
    emu_fx[t] = v;
    __syncwarp();
    const float r = emu_fx[(t & ~31) | ((t & 31) ^ off)];
    __syncwarp();
    return r;
}

static inline int __shfl_xor_sync(unsigned, int v, int off)
{
    const int t = threadIdx.x;
    __syncwarp();
    emu_ix[t] = v;
    __syncwarp();
    const int r = emu_ix[(t & ~31) | ((t & 31) ^ off)];
    __syncwarp();
    return r;
}

/* A multiply the compiler may not fuse (the host compile here fuses nothing anyway). */
static inline float __fmul_rn(float a, float b)
{
    return a * b;
}

/* Round to nearest even, as the device instruction (and lrintf in the default mode). */
static inline int __float2int_rn(float x)
{
    return (int)lrintf(x);
}

static inline int __reduce_add_sync(unsigned, int v)
{
    const int t = threadIdx.x;
    __syncwarp();
    emu_ix[t] = v;
    __syncwarp();
    int s = 0;
    for (int i = 0; i < 32; i++)
        s += emu_ix[(t & ~31) | i];
    __syncwarp();
    return s;
}
