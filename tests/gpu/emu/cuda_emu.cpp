/*
 * cuda_emu.cpp - the emulator's launch (cuda_emu.h) and the two runtime calls the
 * kernel files' launchers make (cudaGetLastError, cudaFuncSetAttribute), which here
 * have nothing to do. Thread: the caller's; it starts and joins the kernel threads.
 */
#include "cuda_emu.h"

#include <vector>

thread_local uint3 threadIdx, blockIdx;
dim3 blockDim, gridDim;
char *emu_smem;
pthread_barrier_t emu_bar, emu_warp_bar[32];
float emu_fx[1024];
int emu_ix[1024];
int emu_or;

static std::function<void()> *emu_body;

static void *emu_thread(void *arg)
{
    threadIdx = {(unsigned)(size_t)arg, 0, 0};
    (*emu_body)();
    return nullptr;
}

void emu_run(dim3 grid, dim3 block, size_t smem, std::function<void()> body)
{
    gridDim = grid;
    blockDim = block;
    const int nt = (int)block.x;
    if (nt <= 0 || nt > 1024 || nt % 32 || block.y != 1 || block.z != 1) abort();
    std::vector<float> sm(smem / 4 + 4);
    pthread_barrier_init(&emu_bar, nullptr, (unsigned)nt);
    for (int w = 0; w < nt / 32; w++)
        pthread_barrier_init(&emu_warp_bar[w], nullptr, 32);
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                /* A kernel must not read shared memory it has not written. */
                std::fill(sm.begin(), sm.end(), NAN);
                emu_smem = (char *)sm.data();
                std::function<void()> b = [&, x, y, z]() {
                    blockIdx = {x, y, z};
                    body();
                };
                emu_body = &b;
                std::vector<pthread_t> th((size_t)nt);
                for (int t = 0; t < nt; t++)
                    pthread_create(&th[(size_t)t], nullptr, emu_thread, (void *)(size_t)t);
                for (int t = 0; t < nt; t++)
                    pthread_join(th[(size_t)t], nullptr);
            }
    pthread_barrier_destroy(&emu_bar);
    for (int w = 0; w < nt / 32; w++)
        pthread_barrier_destroy(&emu_warp_bar[w]);
}

extern "C" cudaError_t cudaGetLastError(void)
{
    return cudaSuccess;
}

extern "C" cudaError_t cudaFuncSetAttribute(const void *, enum cudaFuncAttribute, int)
{
    return cudaSuccess;
}
