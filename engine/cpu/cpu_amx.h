/*
 * cpu_amx.h - bf16 linear layers on AMX tiles (Sapphire Rapids and later), with a
 * kernel whose every output row is computed the same way whatever the row count.
 *
 * Why not oneDNN's AMX: oneDNN 2.6 picks its blocking (and, for few rows, a split of
 * the K sum across threads, or AVX-512 kernels) by the row count M, so a row's
 * result depends on how many rows share the call, and a sequence's output on the rest
 * of its batch (cpu_gemm.c caps oneDNN below AMX for that reason). Here one kernel
 * runs every M: 16-row tiles (a partial last tile is padded with zero rows, which
 * touch no other row), each output element summed by one thread over K in one fixed
 * order (tile by tile, 32 K at a time), so row r of a call is the same bits as row r
 * computed alone.
 *
 * Weights are packed once into AMX's B-tile format: for every 16 output columns and
 * 32 input features, a 1 KiB tile of 16 rows (K pairs) x 16 columns x 2 bf16.
 * Thread: pack and free on the layer's owner; cpu_amx_gemm fans out to OpenMP.
 */
#ifndef H2O_CPU_AMX_H
#define H2O_CPU_AMX_H

#include "dtype.h"

#include <stdbool.h>
#include <stdint.h>

/* Whether this process can run AMX bf16 tiles: the CPU has them (cpuid) and Linux
 * granted the tile state (arch_prctl, asked once). H2O_CPU_AMX=0 in the environment
 * says no. Thread: any. */
bool cpu_amx_available(void);

/* Weights [n, k] packed into B tiles; n padded to a multiple of 16 with zero
 * columns. */
struct cpu_amx_weights {
    int64_t n, k, n_tiles; /* n_tiles = ceil(n / 16); k a multiple of 32 */
    uint16_t *packed;      /* [n_tiles, k / 32, 16, 32] bf16, 64-byte aligned */
};

/* Whether cpu_amx_pack takes a layer of k input features (a multiple of 32). */
bool cpu_amx_supports(int64_t k);

/* Pack PyTorch-layout w [n, k] (fp32, rounded to bf16 here). Returns 0 or
 * ENG_ENOMEM. Owns: the packed copy; the caller keeps w. Thread: any. */
int cpu_amx_pack(struct cpu_amx_weights *w, const float *src, int64_t n, int64_t k);
void cpu_amx_free(struct cpu_amx_weights *w);

/* Bytes the packed weights hold. */
size_t cpu_amx_bytes(const struct cpu_amx_weights *w);

/*
 * dst [m, n] = src [m, k] (bf16, row-major) W^T + bias (fp32 [n] or NULL), ReLU if
 * relu, computed in fp32 and stored as dst_dtype (fp32, or bf16 rounded to nearest
 * even). m == 0 is a no-op. Thread: the caller's; runs on its OpenMP threads, each of
 * which configures and releases its own tiles.
 */
void cpu_amx_gemm(const struct cpu_amx_weights *w, const uint16_t *src, int64_t m,
                  const float *bias, bool relu, void *dst, enum dtype dst_dtype);

#endif
