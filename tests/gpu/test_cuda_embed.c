/*
 * test_cuda_embed.c - the embedding kernels (cuda/cuda_embed.cu: cuda_embed and
 * cuda_embed_positions) against a host reference written from the CPU backend's
 * semantics (engine/cpu/cpu_ops.c: the token rows, plus the learned positions looked
 * up at position + 2), on random fp16 data.
 *
 * The host reference reads the same fp16 inputs widened to float and does one fp32
 * add of two fp16 values, then one round-to-nearest-even to fp16, as the kernels do:
 * IEEE fp32 gives the same bits on host and device, so the outputs must be
 * bit-identical.
 *
 * Without a CUDA device (cudaGetDeviceCount finds none, or no driver) it prints
 * "no CUDA device: skipping" and exits 77, meson's skip code. Run on a GPU machine
 * with tests/gpu/run.sh.
 */
#include "cuda_kernels.h"
#include "dtype.h"
#include "test.h"

#include "gpu_testlib.h"

#include <cuda_runtime_api.h>

#include <stdbool.h>
#include <stdint.h>

/* The random inputs (gpu_rnd_*): the same data on every run. */
static uint64_t rng = 0x9e3779b97f4a7c15ull;

/* cpu_ops_embed then cpu_ops_add_positions on fp16 tables: dst [n, d]; tok NULL = dst kept.
 */
static void ref_embed(uint16_t *dst, const uint16_t *tok, const int32_t *ids,
                      const uint16_t *pos_table, const int32_t *pos, int32_t offset,
                      int32_t n, int32_t d)
{
    for (int32_t i = 0; i < n; i++)
        for (int32_t j = 0; j < d; j++) {
            uint16_t *o = dst + (int64_t)i * d + j;
            float v = f16_to_f32(tok ? tok[(int64_t)ids[i] * d + j] : *o);
            if (pos_table) v += f16_to_f32(pos_table[(int64_t)(pos[i] + offset) * d + j]);
            *o = f32_to_f16(v);
        }
}

/* One embed check: `mode` 0 = tokens + positions, 1 = tokens only, 2 = positions onto
 * an existing x (the project_in path). */
static void check_embed(int32_t n, int32_t d, int mode)
{
    const int32_t vocab = 97, max_pos = 64, offset = 2;
    uint16_t *tok = gpu_rnd_f16(&rng, (int64_t)vocab * d, -1.0f, 1.0f);
    uint16_t *pt = gpu_rnd_f16(&rng, (int64_t)(max_pos + offset) * d, -0.5f, 0.5f);
    uint16_t *x0 = gpu_rnd_f16(&rng, (int64_t)n * d, -1.0f, 1.0f);
    int32_t *ids = malloc((size_t)n * sizeof *ids), *pos = malloc((size_t)n * sizeof *pos);
    for (int32_t i = 0; i < n; i++) {
        ids[i] = (int32_t)gpu_rnd_uniform(&rng, 0.0f, (float)vocab);
        pos[i] = (int32_t)gpu_rnd_uniform(&rng, 0.0f, (float)max_pos);
    }
    /* The last row reads the table's last rows: the offset must stay in range. */
    ids[n - 1] = vocab - 1;
    pos[n - 1] = max_pos - 1;
    uint16_t *want = malloc((size_t)n * d * sizeof *want);
    uint16_t *got = malloc((size_t)n * d * sizeof *got);
    memcpy(want, x0, (size_t)n * d * sizeof *want);
    ref_embed(want, mode == 2 ? NULL : tok, ids, mode == 1 ? NULL : pt, pos, offset, n, d);

    uint16_t *d_tok = gpu_to_dev(tok, (size_t)vocab * d * 2);
    uint16_t *d_pt = gpu_to_dev(pt, (size_t)(max_pos + offset) * d * 2);
    uint16_t *d_x = gpu_to_dev(x0, (size_t)n * d * 2);
    int32_t *d_ids = gpu_to_dev(ids, (size_t)n * 4), *d_pos = gpu_to_dev(pos, (size_t)n * 4);
    EXPECT(d_tok && d_pt && d_x && d_ids && d_pos);
    cudaError_t e;
    if (mode == 2)
        e = cuda_embed_positions(d_x, d_pt, d_pos, offset, n, d, 0);
    else
        e = cuda_embed(d_x, d_tok, d_ids, mode == 1 ? NULL : d_pt, d_pos, offset, n, d, 0);
    EXPECT_EQ(e, cudaSuccess);
    EXPECT_EQ(gpu_f16_from_dev(got, d_x, (int64_t)n * d), cudaSuccess);
    EXPECT_EQ(gpu_f16_bit_diffs("embed", got, want, (int64_t)n * d), 0);

    cudaFree(d_tok), cudaFree(d_pt), cudaFree(d_x), cudaFree(d_ids), cudaFree(d_pos);
    free(tok), free(pt), free(x0), free(ids), free(pos), free(want), free(got);
}

TEST(embed_tokens_plus_positions_at_offset_2)
{
    check_embed(7, 768, 0);  /* OPT-125m width, a short prompt */
    check_embed(1, 4096, 0); /* one decode token, OPT-6.7B width */
    check_embed(300, 10, 0); /* rows narrower than the block */
}

TEST(embed_tokens_only_then_add_positions)
{
    check_embed(5, 512, 1); /* OPT-350m: tokens at 512, project_in, then positions */
    check_embed(5, 1024, 2);
}

TEST(bad_arguments_are_refused_before_launch)
{
    uint16_t *d = NULL;
    GPU_OK(cudaMalloc((void **)&d, 64));
    int32_t *ids = (int32_t *)d;
    EXPECT_EQ(cuda_embed(d, d, ids, d, ids, 2, 1, 3, 0), cudaErrorInvalidValue); /* odd d */
    EXPECT_EQ(cuda_embed(d, NULL, ids, d, ids, 2, 1, 4, 0), cudaErrorInvalidValue);
    EXPECT_EQ(cuda_embed_positions(d, NULL, ids, 2, 1, 4, 0), cudaErrorInvalidValue);
    /* Empty work is not an error and launches nothing. */
    EXPECT_EQ(cuda_embed(d, d, ids, d, ids, 2, 0, 4, 0), cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    cudaFree(d);
}

int main(void)
{
    const int n_dev = gpu_device_count();
    if (n_dev == 0) return 77; /* meson's skip code */
    gpu_print_device(n_dev);

    RUN(embed_tokens_plus_positions_at_offset_2);
    RUN(embed_tokens_only_then_add_positions);
    RUN(bad_arguments_are_refused_before_launch);
    return test_done();
}
