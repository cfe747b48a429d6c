/*
 * bench_attn.c - decode attention alone against the memory roofline.
 *
 * A decode step streams every sequence's KV cache once, so the attention's
 * yardstick is the machine's read bandwidth. This builds the cache of `batch`
 * sequences of `ctx` tokens for `layers` layers of `heads` x `head_dim` (OPT-125m's
 * shape by default) in pools of 16-slot blocks handed out in order, as a fresh
 * kv_pool does, then times decode steps (cpu_attn_forward for every layer, one new
 * token per sequence) with the default kernel set, each followed by a
 * streaming-read probe of a 1 GiB buffer with the same threads. Per repetition it
 * prints the step's time, the bytes it reads (K and V of every block held, plus
 * each slot's pos and score: bench_cpu's count), their GB/s and their share of the
 * probe run right after. Without bench_cpu's prefill a run takes seconds, so builds
 * can be compared in many alternating runs on a machine whose bandwidth drifts.
 *
 * Usage: bench_attn [--batch 64] [--ctx 512] [--layers 12] [--heads 12]
 *                   [--head-dim 64] [--dtypes fp32,bf16,int8] [--reps 5]
 * (int8: the int8 cache, fp32 output, a scale per slot of K and of V counted in the
 * bytes.)
 */
#include "bench_probe.h"
#include "cpu_attn.h"
#include "dtype.h"
#include "util.h"

#include <getopt.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void run_dtype(enum dtype dt, int32_t B, int32_t ctx, int32_t L, int32_t H,
                      int32_t D, int32_t reps, const uint64_t *buf, int64_t n_buf,
                      uint64_t *sink)
{
    const int32_t BS = 16, n_slots = ctx + 1, per_seq = CEIL_DIV(n_slots, BS);
    const int64_t n_blocks = (int64_t)B * per_seq, n_el = n_blocks * H * BS;
    const size_t es = (size_t)dtype_size(dt);
    struct cpu_kv_layer *kv = xcalloc((size_t)L, sizeof *kv);
    int32_t *blocks = xmalloc((size_t)n_blocks * sizeof *blocks);
    for (int64_t b = 0; b < n_blocks; b++)
        blocks[b] = (int32_t)b;
    for (int32_t l = 0; l < L; l++) {
        kv[l].k = xmalloc((size_t)n_el * D * es);
        kv[l].v = xmalloc((size_t)n_el * D * es);
        kv[l].pos = xmalloc((size_t)n_el * sizeof(int32_t));
        kv[l].score = xcalloc((size_t)n_el, sizeof(float));
        if (dt == DTYPE_I8) {
            kv[l].k_scale = xmalloc((size_t)n_el * sizeof(float));
            kv[l].v_scale = xmalloc((size_t)n_el * sizeof(float));
            for (int64_t e = 0; e < n_el; e++)
                kv[l].k_scale[e] = kv[l].v_scale[e] = 4e-3f;
        }
        /* Small values: the scores stay finite; the bits do not matter otherwise. */
        for (int64_t e = 0; e < n_el * D; e++) {
            const float x = (float)((e * 7919) % 1000) * 1e-3f - 0.5f;
            if (dt == DTYPE_I8) {
                ((int8_t *)kv[l].k)[e] = (int8_t)(x * 250.0f);
                ((int8_t *)kv[l].v)[e] = (int8_t)(-x * 250.0f);
            } else if (dt == DTYPE_F32) {
                ((float *)kv[l].k)[e] = x;
                ((float *)kv[l].v)[e] = -x;
            } else {
                ((uint16_t *)kv[l].k)[e] = f32_to_bf16(x);
                ((uint16_t *)kv[l].v)[e] = f32_to_bf16(-x);
            }
        }
        for (int64_t e = 0; e < n_el; e++)
            kv[l].pos[e] = (int32_t)(e % BS + (e / (BS * H)) % per_seq * BS);
    }
    struct be_seq *seqs = xcalloc((size_t)B, sizeof *seqs);
    int32_t *pos = xmalloc((size_t)B * sizeof *pos),
            *tokens = xcalloc((size_t)B, sizeof *tokens);
    for (int32_t i = 0; i < B; i++) {
        seqs[i] = (struct be_seq){.blocks = blocks + (int64_t)i * per_seq,
                                  .n_blocks = per_seq,
                                  .tok_start = i,
                                  .n_tok = 1,
                                  .slot_start = ctx,
                                  .n_slots = n_slots};
        pos[i] = ctx;
    }
    const struct be_batch batch = {
        .n_tok = B, .tokens = tokens, .pos = pos, .n_seq = B, .seqs = seqs};
    float *qkv = xmalloc((size_t)B * 3 * H * D * sizeof *qkv);
    for (int64_t e = 0; e < (int64_t)B * 3 * H * D; e++)
        qkv[e] = (float)((e * 104729) % 2000) * 1e-3f - 1.0f;
    const enum dtype out_dt = dt == DTYPE_I8 ? DTYPE_F32 : dt;
    void *out = xmalloc((size_t)B * H * D * dtype_size(out_dt));
    const int32_t stride = cpu_attn_scratch_floats(n_slots, BS, H);
    float *scratch = xmalloc((size_t)omp_get_max_threads() * stride * sizeof *scratch);
    /* bench_cpu's count: K, V, pos and score of every slot of every block held (and
     * int8's two scales). */
    const double bytes = (double)B * per_seq * BS * L * H *
                         (2.0 * D * es + 8.0 + (dt == DTYPE_I8 ? 8.0 : 0.0));
    const struct cpu_attn_kernels *set = dt == DTYPE_I8     ? cpu_attn_int8_kernels_for(BS)
                                         : dt == DTYPE_BF16 ? cpu_attn_bf16_kernels_for(BS)
                                                            : cpu_attn_kernels_for(BS);
    for (int32_t rep = 0; rep <= reps; rep++) {
        const double t0 = time_now();
        for (int32_t l = 0; l < L; l++) {
            const struct cpu_attn_args a = {.batch = &batch,
                                            .qkv = qkv,
                                            .out = out,
                                            .out_dtype = out_dt,
                                            .kv = kv[l],
                                            .kv_dtype = dt,
                                            .layer = l,
                                            .n_head = H,
                                            .head_dim = D,
                                            .block_size = BS,
                                            .scale = 1.0f / sqrtf((float)D),
                                            .scratch = scratch,
                                            .scratch_stride = stride};
            cpu_attn_forward(&a);
        }
        const double t = time_now() - t0, bw = bench_probe_read(buf, n_buf, sink);
        if (rep == 0) continue; /* warm-up: first touch of the scratch, clock ramp */
        printf("%-5s step %7.2f ms, %.3f GB = %5.1f GB/s = %3.0f%% of the %.1f GB/s probe "
               "(kernels %s)\n",
               dtype_name(dt), 1e3 * t, bytes * 1e-9, bytes / t * 1e-9,
               100.0 * bytes / t * 1e-9 / bw, bw, cpu_attn_kernels_name(set));
        fflush(stdout);
    }
    for (int32_t l = 0; l < L; l++) {
        free(kv[l].k);
        free(kv[l].v);
        free(kv[l].pos);
        free(kv[l].score);
        free(kv[l].k_scale);
        free(kv[l].v_scale);
    }
    free(kv);
    free(blocks);
    free(seqs);
    free(pos);
    free(tokens);
    free(qkv);
    free(out);
    free(scratch);
}

int main(int argc, char **argv)
{
    int32_t B = 64, ctx = 512, L = 12, H = 12, D = 64, reps = 5;
    enum dtype dts[3] = {DTYPE_F32, DTYPE_BF16};
    int n_dt = 2;
    static const struct option opts[] = {
        {"batch", required_argument, 0, 'b'},
        {"ctx", required_argument, 0, 'c'},
        {"layers", required_argument, 0, 'l'},
        {"heads", required_argument, 0, 'H'},
        {"head-dim", required_argument, 0, 'D'},
        {"dtypes", required_argument, 0, 'd'},
        {"reps", required_argument, 0, 'r'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    int ch;
    while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (ch) {
        case 'b': B = atoi(optarg); break;
        case 'c': ctx = atoi(optarg); break;
        case 'l': L = atoi(optarg); break;
        case 'H': H = atoi(optarg); break;
        case 'D': D = atoi(optarg); break;
        case 'r': reps = atoi(optarg); break;
        case 'd':
            n_dt = 0;
            if (strstr(optarg, "fp32")) dts[n_dt++] = DTYPE_F32;
            if (strstr(optarg, "bf16")) dts[n_dt++] = DTYPE_BF16;
            if (strstr(optarg, "int8")) dts[n_dt++] = DTYPE_I8;
            if (!n_dt) return fprintf(stderr, "bad --dtypes\n"), 2;
            break;
        default:
            fprintf(ch == 'h' ? stdout : stderr,
                    "usage: bench_attn [--batch N] [--ctx N] [--layers N] [--heads N] "
                    "[--head-dim N] [--dtypes fp32,bf16,int8] [--reps N]\n");
            return ch == 'h' ? 0 : 2;
        }
    }
    if (B <= 0 || ctx <= 0 || L <= 0 || H <= 0 || reps <= 0 || !cpu_attn_supports(D, 16))
        return fprintf(stderr, "bad sizes\n"), 2;
    const int64_t n_buf = ((int64_t)1 << 30) / (int64_t)sizeof(uint64_t);
    uint64_t *buf = xmalloc((size_t)n_buf * sizeof *buf), sink = 0;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n_buf; i++)
        buf[i] = (uint64_t)i;
    printf("batch %d, context %d, %d layers x %d heads x %d, %d threads\n", B, ctx, L, H, D,
           omp_get_max_threads());
    for (int i = 0; i < n_dt; i++)
        run_dtype(dts[i], B, ctx, L, H, D, reps, buf, n_buf, &sink);
    free(buf);
    /* Every probe (reps + 1 per dtype) summed 0 .. n_buf - 1, modulo 2^64 like sink:
     * a wrong total means reads were dropped. */
    const uint64_t per_probe = (uint64_t)(n_buf * (n_buf - 1) / 2);
    CHECK(sink == (uint64_t)n_dt * (uint64_t)(reps + 1) * per_probe);
    return 0;
}
