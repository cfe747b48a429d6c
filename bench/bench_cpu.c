/*
 * bench_cpu.c - CPU backend throughput and model FLOP utilisation.
 *
 * For a model (default dummy:opt-125m) in fp32 and bf16: prefill and decode
 * tokens/s at batch 1, 16 and 64 with a 512-token context, and the model FLOP
 * utilisation (MFU): the model FLOP/s achieved divided by the rate the model's own
 * linear layer (cpu_linear: oneDNN's matmul, or our AVX2 or AMX kernel where
 * cpu_gemm takes one) reaches on a 2048x2048x2048 product of the same dtype,
 * measured in the same run. bf16 is dropped, with a line that says so, on a CPU
 * the backend refuses it on.
 *
 * Model FLOPs count the work the model needs, not what the code happens to do:
 * 2 * (parameters of the layer GEMMs) per token, 2 * hidden * vocab (times the
 * projection when present) per token whose logits are needed, and 4 * hidden per
 * attended (query, key) pair per layer (QK^T and PV).
 *
 * Decode attention streams the whole KV cache once per step, so its yardstick is the
 * memory bandwidth, not the FLOP peak: the run starts with a streaming-read probe
 * (a 1 GiB buffer, far beyond every cache, summed by as many OpenMP threads as the
 * model runs on; five reads, all printed, the median the reference) and repeats it
 * (three reads, the median) right after each batch's decode steps; each profile line
 * gives the bytes the decode attention reads per step (the K and V tiles of every
 * block a sequence holds, plus its slots' pos and score), the GB/s that makes over
 * the attention's time and its share of the probe taken after it.
 *
 * Usage: bench_cpu [--model NAME] [--ctx 512] [--decode-steps 16] [--batches 1,16,64]
 *                  [--dtypes fp32,bf16] [--max-batched-tokens 2048]
 *                  [--tensor-parallel N]
 * With --tensor-parallel N the layers are sharded over N rank threads that split the
 * cores; on one socket this measures the cost of the all-reduces, not a speed-up.
 */
#include "backend_cpu.h"
#include "batch.h"
#include "bench_args.h"
#include "bench_probe.h"
#include "cpu_gemm.h"
#include "engine_core.h"
#include "err.h"
#include "kv_seq.h"
#include "model.h"
#include "util.h"

#include <getopt.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct bench_opts {
    const char *model;
    int32_t ctx, decode_steps, max_batched, tensor_parallel;
    int32_t batches[8], n_batches;
    enum dtype dtypes[2];
    int n_dtypes;
};

/* GFLOP/s of the linear layer on an n x n x n product in `dt`. */
static double gemm_peak(enum dtype dt, int64_t n)
{
    struct cpu_dnnl d;
    struct cpu_linear l;
    CHECK(cpu_gemm_init(&d) == 0);
    float *w = xmalloc((size_t)(n * n) * sizeof *w);
    for (int64_t i = 0; i < n * n; i++) w[i] = (float)((i * 7919) % 1000) * 1e-3f - 0.5f;
    CHECK(cpu_gemm_linear_init(&l, &d, w, NULL, n, n, dt, DTYPE_F32, false) == 0);
    void *src = xmalloc((size_t)(n * n) * 4);
    if (dt == DTYPE_F32) memcpy(src, w, (size_t)(n * n) * 4);
    else for (int64_t i = 0; i < n * n; i++) ((uint16_t *)src)[i] = f32_to_bf16(w[i]);
    float *dst = xmalloc((size_t)(n * n) * sizeof *dst);
    /* Warm up (page faults, clock ramp), then the best of ten: the peak is the
     * denominator of every MFU, so a slow outlier must not inflate them. */
    for (int rep = 0; rep < 3; rep++)
        cpu_gemm_linear_run(&l, &d, src, n, dst);
    double best = 1e30;
    for (int rep = 0; rep < 10; rep++) {
        double t0 = time_now();
        cpu_gemm_linear_run(&l, &d, src, n, dst);
        double t = time_now() - t0;
        best = t < best ? t : best;
    }
    cpu_gemm_linear_deinit(&l);
    cpu_gemm_deinit(&d);
    free(w);
    free(src);
    free(dst);
    return 2.0 * (double)n * (double)n * (double)n / best * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/*
 * GB/s of a streaming read of a 1 GiB buffer by omp_get_max_threads() threads (the
 * model's), each summing its static share: the roofline of decode attention, which
 * reads its KV tiles once per step the same way. Writes the n_rep rates to rates[]
 * and returns their median. The buffer is written by the same threads and static
 * split first, so each thread's pages are faulted in before the timed reads.
 */
static double read_bandwidth(double *rates, int n_rep)
{
    const int64_t n = ((int64_t)1 << 30) / (int64_t)sizeof(uint64_t);
    uint64_t *buf = xmalloc((size_t)n * sizeof *buf);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++)
        buf[i] = (uint64_t)i;
    uint64_t check = 0;
    for (int rep = 0; rep < n_rep; rep++)
        rates[rep] = bench_probe_read(buf, n, &check);
    /* Every read summed 0..n-1: a wrong sum means the compiler dropped reads. */
    CHECK(check == (uint64_t)n_rep * (uint64_t)(n * (n - 1) / 2));
    free(buf);
    double sorted[16];
    memcpy(sorted, rates, (size_t)n_rep * sizeof *rates);
    qsort(sorted, (size_t)n_rep, sizeof *sorted, cmp_double);
    return sorted[n_rep / 2];
}

/*
 * Bytes decode attention reads per step, averaged over the run's steps: per layer,
 * sequence and KV head, every 16-slot block the sequence holds (its last one too,
 * read whole) with its K and V tiles and each slot's pos and score.
 */
static double attn_bytes_per_step(const struct opt_config *c, const struct bench_opts *o,
                                  int32_t B, enum dtype dt)
{
    const double per_slot = 2.0 * c->head_dim * dtype_size(dt) + 2.0 * sizeof(int32_t);
    double slots = 0;
    for (int32_t s = 0; s < o->decode_steps; s++)
        slots += (double)B * CEIL_DIV(o->ctx + s + 1, 16) * 16;
    return slots * c->n_layer * c->n_kv_head * per_slot / o->decode_steps;
}

/* Model FLOPs per token outside attention and the LM head. */
static double layer_flops_per_token(const struct opt_config *c)
{
    /* 2 FLOPs per weight of every layer's matrices (GQA's narrower k/v, SwiGLU's
     * third matrix included); biases and norms are noise. */
    double h = c->hidden, f = c->ffn, q = (double)c->n_head * c->head_dim;
    double kv = (double)c->n_kv_head * c->head_dim;
    double mats =
        h * (q + 2.0 * kv) + q * h + (c->arch.mlp == ARCH_MLP_SWIGLU ? 3.0 : 2.0) * h * f;
    return 2.0 * c->n_layer * mats;
}

static double head_flops(const struct opt_config *c)
{
    double fl = 2.0 * c->word_embed_proj_dim * c->vocab_size;
    if (c->word_embed_proj_dim != c->hidden)
        fl += 2.0 * 2.0 * c->hidden * c->word_embed_proj_dim; /* project_in and _out */
    return fl;
}

static double attn_flops(const struct opt_config *c, double pairs)
{
    /* q . k and p . v over every query head. */
    return 4.0 * (double)c->n_head * c->head_dim * c->n_layer * pairs;
}

struct result {
    double prefill_tps, prefill_gflops, decode_tps, decode_gflops;
    double decode_s;           /* wall time of all decode steps */
    double read_bw;            /* read_bandwidth's median right after them */
    struct be_profile decode;  /* backend time split of those steps */
    double prefill_s;          /* wall time of the prefill forwards */
    struct be_profile prefill; /* and their split */
};

/* Time profile of the backend since the last read (zeros if it keeps none). */
static struct be_profile read_profile(struct model *m)
{
    struct be_profile p = {0};
    backend_profile(&m->be, &p);
    return p;
}

static struct result run_batch(struct model *m, const struct bench_opts *o, int32_t B)
{
    const struct opt_config *c = &m->cfg;
    const int32_t P = o->ctx, V = c->vocab_size, S = o->decode_steps;
    const int32_t bs = 16, per_seq = CEIL_DIV(P + S, bs);
    /* A pool of exactly the batch's blocks on the model loaded for the dtype. */
    const struct engine_core_opts co = {
        .upto = ENGINE_CORE_POOL, .shared_model = m, .block_size = bs, .kv_blocks = B * per_seq};
    struct engine_core *core;
    CHECK(engine_core_open(&co, &core) == 0);
    struct kv_pool *pool = &core->pool;
    struct kv_seq *kv = xcalloc((size_t)B, sizeof *kv);
    int32_t *toks = xmalloc((size_t)(P + S) * sizeof *toks);
    for (int32_t t = 0; t < P + S; t++) toks[t] = 4 + (t * 131) % (V - 4);
    toks[0] = 2;
    struct batch_item *items = xcalloc((size_t)B, sizeof *items);
    struct batch b;
    batch_init(&b);
    for (int32_t i = 0; i < B; i++) kv_seq_init(&kv[i]);

    /* Prefill: whole prompts, as many per forward as max_batched_tokens allows. */
    read_profile(m);
    double t0 = time_now();
    for (int32_t i = 0; i < B;) {
        int32_t n = 0, room = o->max_batched;
        while (i + n < B && (n == 0 || room >= P)) {
            items[n] = (struct batch_item){.kv = &kv[i + n], .tokens = toks, .n_tok = P};
            room -= P;
            n++;
        }
        CHECK(batch_run(&b, &m->be, pool, V, items, n) == 0);
        i += n;
    }
    double tp = time_now() - t0;
    const struct be_profile pre = read_profile(m);
    /* Decode: every sequence one token per step. */
    t0 = time_now();
    for (int32_t s = 0; s < S; s++) {
        for (int32_t i = 0; i < B; i++)
            items[i] = (struct batch_item){.kv = &kv[i], .tokens = &toks[P + s], .n_tok = 1,
                                           .pos0 = P + s};
        CHECK(batch_run(&b, &m->be, pool, V, items, B) == 0);
    }
    double td = time_now() - t0;
    struct be_profile prof = read_profile(m);
    /* The machine's bandwidth drifts (a shared host: 17 to 46 GB/s within minutes
     * here), so each batch's attention is compared with a probe taken right after
     * its decode steps rather than with the one at the start. */
    double rates[3];
    const double bw = read_bandwidth(rates, 3);

    struct result r;
    double pairs_prefill = (double)B * P * (P + 1) / 2.0;
    double fl_prefill = (double)B * P * layer_flops_per_token(c) + B * head_flops(c) +
                        attn_flops(c, pairs_prefill);
    double pairs_decode = 0;
    for (int32_t s = 0; s < S; s++) pairs_decode += (double)B * (P + s + 1);
    double fl_decode = (double)B * S * (layer_flops_per_token(c) + head_flops(c)) +
                       attn_flops(c, pairs_decode);
    r.prefill_tps = (double)B * P / tp;
    r.prefill_gflops = fl_prefill / tp * 1e-9;
    r.decode_tps = (double)B * S / td;
    r.decode_gflops = fl_decode / td * 1e-9;
    r.decode_s = td;
    r.prefill_s = tp;
    r.prefill = pre;
    r.read_bw = bw;
    r.decode = prof;

    for (int32_t i = 0; i < B; i++) kv_seq_deinit(&kv[i], pool);
    CHECK(pool->n_free == pool->n_blocks);
    engine_core_close(core);
    batch_deinit(&b);
    free(kv);
    free(toks);
    free(items);
    return r;
}

int main(int argc, char **argv)
{
    struct bench_opts o = {.model = "dummy:opt-125m", .ctx = 512, .decode_steps = 16,
                           .max_batched = 2048, .batches = {1, 16, 64}, .n_batches = 3,
                           .dtypes = {DTYPE_F32, DTYPE_BF16}, .n_dtypes = 2};
    if (!backend_cpu_has_bf16()) o.n_dtypes = 1;
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'}, {"ctx", required_argument, 0, 'c'},
        {"decode-steps", required_argument, 0, 's'}, {"batches", required_argument, 0, 'b'},
        {"dtypes", required_argument, 0, 'd'}, {"max-batched-tokens", required_argument, 0, 't'},
        {"tensor-parallel", required_argument, 0, 'p'}, {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    int ch;
    while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (ch) {
        case 'm': o.model = optarg; break;
        case 'c': o.ctx = atoi(optarg); break;
        case 's': o.decode_steps = atoi(optarg); break;
        case 't': o.max_batched = atoi(optarg); break;
        case 'p': o.tensor_parallel = atoi(optarg); break;
        case 'b':
            o.n_batches = bench_args_int_list(optarg, o.batches, 8);
            if (o.n_batches <= 0) return fprintf(stderr, "bad --batches\n"), 2;
            break;
        case 'd':
            o.n_dtypes = 0;
            if (strstr(optarg, "fp32")) o.dtypes[o.n_dtypes++] = DTYPE_F32;
            if (strstr(optarg, "bf16")) o.dtypes[o.n_dtypes++] = DTYPE_BF16;
            if (!o.n_dtypes) return fprintf(stderr, "bad --dtypes\n"), 2;
            break;
        default:
            fprintf(ch == 'h' ? stdout : stderr,
                    "usage: bench_cpu [--model NAME] [--ctx N] [--decode-steps N] "
                    "[--batches 1,16,64] [--dtypes fp32,bf16] [--max-batched-tokens N] "
                    "[--tensor-parallel N]\n");
            return ch == 'h' ? 0 : 2;
        }
    }
    if (o.ctx <= 0 || o.decode_steps <= 0 || o.max_batched <= 0 || o.tensor_parallel < 0)
        return fprintf(stderr, "sizes must be positive\n"), 2;
    if (o.dtypes[o.n_dtypes - 1] == DTYPE_BF16 && !backend_cpu_has_bf16()) {
        printf("bf16 skipped: this CPU lacks AVX512-BF16, the CPU backend refuses it\n");
        if (--o.n_dtypes == 0) return 2;
    }

    printf("model %s, context %d, %d decode steps, %d tokens per prefill forward, "
           "tensor parallel %d\n", o.model, o.ctx, o.decode_steps, o.max_batched,
           MAX(o.tensor_parallel, 1));
    double rates[5];
    const double bw = read_bandwidth(rates, 5);
    printf("read bandwidth %.1f GB/s (median of %.1f %.1f %.1f %.1f %.1f), %d threads, "
           "1 GiB buffer\n",
           bw, rates[0], rates[1], rates[2], rates[3], rates[4], omp_get_max_threads());
    printf("%-5s %-8s %6s %12s %10s %7s\n", "dtype", "phase", "batch", "tokens/s", "GFLOP/s",
           "MFU");
    for (int di = 0; di < o.n_dtypes; di++) {
        enum dtype dt = o.dtypes[di];
        double peak = gemm_peak(dt, 2048);
        /* The model only: each batch size brings its own pool (run_batch). */
        struct engine_core_opts co = {.upto = ENGINE_CORE_MODEL, .model = o.model};
        model_opts_default(&co.model_opts);
        co.model_opts.dtype = dt;
        co.model_opts.tensor_parallel = o.tensor_parallel;
        struct engine_core *core;
        if (engine_core_open(&co, &core)) {
            fprintf(stderr, "bench_cpu: %s\n", err_msg());
            return 1;
        }
        struct model *m = core->m;
        printf("%-5s %-8s %6s %12s %10.1f %7s\n", dtype_name(dt), "gemm2048", "-", "-", peak,
               "(peak)");
        struct result prof[8];
        for (int bi = 0; bi < o.n_batches; bi++) {
            struct result r = run_batch(m, &o, o.batches[bi]);
            printf("%-5s %-8s %6d %12.1f %10.1f %6.1f%%\n", dtype_name(dt), "prefill",
                   o.batches[bi], r.prefill_tps, r.prefill_gflops,
                   100.0 * r.prefill_gflops / peak);
            printf("%-5s %-8s %6d %12.1f %10.1f %6.1f%%\n", dtype_name(dt), "decode",
                   o.batches[bi], r.decode_tps, r.decode_gflops, 100.0 * r.decode_gflops / peak);
            fflush(stdout);
            prof[bi] = r;
        }
        /* Where the prefill's time goes, per 1000 prompt tokens: what OpenVINO
         * GenAI's faster prefill would have to be won back in. */
        for (int bi = 0; bi < o.n_batches; bi++) {
            const struct result *r = &prof[bi];
            const double k = 1e3 / ((double)o.batches[bi] * o.ctx), f = r->prefill.forward_s;
            printf("%-5s %-8s %6d   per 1000 prompt tokens %.1f ms = gemm %.1f + attention "
                   "%.1f + other %.1f + host %.1f\n",
                   dtype_name(dt), "prefill", o.batches[bi], 1e3 * r->prefill_s * k,
                   1e3 * r->prefill.gemm_s * k, 1e3 * r->prefill.attn_s * k,
                   1e3 * (f - r->prefill.gemm_s - r->prefill.attn_s) * k,
                   1e3 * (r->prefill_s - f) * k);
        }
        /* Where a decode step's time goes: weight GEMMs, attention over the KV
         * cache, the rest of the forward, and the host work around it. */
        for (int bi = 0; bi < o.n_batches; bi++) {
            const struct result *r = &prof[bi];
            const double steps = o.decode_steps, f = r->decode.forward_s;
            const double bytes = attn_bytes_per_step(&m->cfg, &o, o.batches[bi], dt);
            const double gbs =
                r->decode.attn_s > 0 ? bytes * steps / r->decode.attn_s * 1e-9 : 0;
            printf("%-5s %-8s %6d   step %.2f ms = gemm %.2f + attention %.2f + other %.2f "
                   "+ host %.2f; attention reads %.3f GB/step = %.1f GB/s = %.0f%% of the "
                   "%.1f GB/s read probe after it\n",
                   dtype_name(dt), "profile", o.batches[bi], 1e3 * r->decode_s / steps,
                   1e3 * r->decode.gemm_s / steps, 1e3 * r->decode.attn_s / steps,
                   1e3 * (f - r->decode.gemm_s - r->decode.attn_s) / steps,
                   1e3 * (r->decode_s - f) / steps, bytes * 1e-9, gbs,
                   100.0 * gbs / r->read_bw, r->read_bw);
        }
        engine_core_close(core);
    }
    return 0;
}
