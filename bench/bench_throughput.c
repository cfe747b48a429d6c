/*
 * bench_throughput.c - FlexGen's offline throughput workload on any backend.
 *
 * n prompts of exactly prompt_len tokens (deterministic random ids) generate gen_len
 * tokens each, greedy, all at once: the prompts are prefilled (max_batched_tokens
 * per forward, several prompts per forward), then every sequence decodes in one
 * batch per step, gen_len - 1 steps (the first token comes from the prefill), as
 * FlexGen's flex_opt.py runs its workload. With --policy h2o each sequence keeps the
 * H2O paper's 20% budget (heavy = recent = 10% of prompt_len + gen_len) and evicts
 * as it goes; with full it keeps everything.
 *
 * Metrics (REFERENCE.md section 3, flex_opt.py's definitions):
 *   prefill throughput = n * prompt_len / prefill time
 *   decode throughput  = n * (gen_len - 1) / decode time
 *   total throughput   = n * gen_len / (prefill time + decode time)   <- the headline
 * Tokens are greedy, taken where the server takes them: on the device when the
 * backend samples there (CUDA), so the logits never cross to the host.
 * One warm-up run of a single short sequence first (cuBLAS and oneDNN pick and load
 * their kernels on first use). The KV pool holds exactly what the n sequences need
 * under the policy, and the peak KV memory is printed next to the numbers.
 *
 * Usage: bench_throughput [--model dummy:opt-125m] [--device cpu|cuda|auto]
 *          [--dtype fp32|bf16] [--tensor-parallel N] [--batch 16] [--prompt-len 512]
 *          [--gen-len 32] [--policy full|h2o] [--max-batched-tokens 2048]
 *          [--block-size 16] [--gpu-memory-utilization 0.9]
 */
#include "batch.h"
#include "err.h"
#include "h2o.h"
#include "kv_pool.h"
#include "kv_seq.h"
#include "model.h"
#include "util.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct opts {
    const char *model;
    struct model_opts mo;
    int32_t batch, prompt_len, gen_len, max_batched, block_size;
    enum kv_policy policy;
};

struct result {
    double prefill_s, decode_s;
    int64_t evicted;
    int32_t peak_blocks;
    uint64_t checksum; /* of the generated tokens: the same run gives the same tokens */
};

static int32_t argmax(const float *x, int32_t n)
{
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/*
 * The greedy token of each item's last logits row, as the server takes it: on the
 * backend's device when it samples there (the logits never leave it), else on the
 * host. tok[i] gets item i's token.
 */
static int pick(struct model *m, struct batch *b, const struct batch_item *items, int32_t n,
                struct be_sample_row *rows, struct sample_out *outs, int32_t *tok)
{
    const int32_t V = m->cfg.vocab_size;
    if (!b->device_logits) {
        for (int32_t i = 0; i < n; i++)
            tok[i] = argmax(b->logits + (size_t)items[i].logits_row * (size_t)V, V);
        return 0;
    }
    for (int32_t i = 0; i < n; i++)
        rows[i] = (struct be_sample_row){
            .row = items[i].logits_row, .temperature = 0, .top_p = 1, .n_logprobs = -1};
    int err = m->be.ops->sample(m->be.ctx, rows, n, outs);
    for (int32_t i = 0; !err && i < n; i++)
        tok[i] = outs[i].token;
    return err;
}

/* Run the workload for `n` sequences; returns nonzero (message set) on failure. */
static int run(struct model *m, const struct opts *o, int32_t n, int32_t prompt_len,
               int32_t gen_len, struct result *res)
{
    const int32_t V = m->cfg.vocab_size, bs = o->block_size;
    struct kv_spec spec;
    kv_spec_default(&spec);
    spec.policy = o->policy;
    struct kv_budget budget;
    CHECK(kv_budget_resolve(&spec, prompt_len, gen_len, &budget) == 0);
    /* Every sequence at its peak at once: the whole prompt before compaction, a
     * block more for the decode growth (full) or the budget after. */
    const int32_t per_seq =
        CEIL_DIV(kv_budget_peak_slots(&budget, prompt_len, gen_len), bs) + 1;
    struct kv_pool pool;
    kv_pool_init(&pool, n * per_seq, bs);
    int err = m->be.ops->kv_alloc(m->be.ctx, n * per_seq, bs);
    if (err) return err;
    struct kv_seq *kv = xcalloc((size_t)n, sizeof *kv);
    int32_t *toks = xmalloc((size_t)n * (size_t)(prompt_len + gen_len) * sizeof *toks);
    struct batch_item *items = xmalloc((size_t)n * sizeof *items);
    struct be_sample_row *rows = xmalloc((size_t)n * sizeof *rows);
    struct sample_out *outs = xmalloc((size_t)n * sizeof *outs);
    int32_t *picked = xmalloc((size_t)n * sizeof *picked);
    uint64_t seed = 12345;
    for (int32_t i = 0; i < n; i++) {
        kv_seq_init(&kv[i]);
        kv_seq_set_budget(&kv[i], &budget);
        int32_t *t = toks + (size_t)i * (size_t)(prompt_len + gen_len);
        t[0] = m->cfg.bos_id;
        for (int32_t j = 1; j < prompt_len; j++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            t[j] = 4 + (int32_t)((seed >> 33) % (uint64_t)(V - 4));
        }
    }
    struct batch b;
    batch_init(&b);
    b.device_logits = m->be.ops->sample != NULL;
    memset(res, 0, sizeof *res);

    /* Prefill: chunks of the prompts in order, up to max_batched tokens a forward. */
    double t0 = time_now();
    int32_t seq = 0, done = 0; /* sequence being filled, its tokens already cached */
    while (!err && seq < n) {
        int32_t k = 0, room = o->max_batched;
        while (seq < n && room > 0) {
            const int32_t take = MIN(room, prompt_len - done);
            items[k++] = (struct batch_item){
                .kv = &kv[seq],
                .tokens = toks + (size_t)seq * (size_t)(prompt_len + gen_len) + done,
                .n_tok = take,
                .pos0 = done};
            room -= take;
            done += take;
            if (done == prompt_len) {
                seq++;
                done = 0;
            }
        }
        err = batch_run(&b, &m->be, &pool, V, items, k);
        if (!err) err = pick(m, &b, items, k, rows, outs, picked);
        for (int32_t i = 0; !err && i < k; i++) {
            struct kv_seq *s = items[i].kv;
            if (items[i].pos0 + items[i].n_tok < prompt_len) continue;
            const int32_t si = (int32_t)(s - kv);
            kv_seq_finish_prefill(s, &pool, &m->be, &m->cfg);
            toks[(size_t)si * (size_t)(prompt_len + gen_len) + prompt_len] = picked[i];
        }
    }
    res->prefill_s = time_now() - t0;
    for (int32_t i = 0; i < n; i++)
        res->peak_blocks += kv[i].n_blocks;

    /* Decode: every sequence one token per step. */
    t0 = time_now();
    for (int32_t step = 1; !err && step < gen_len; step++) {
        const int32_t p = prompt_len + step - 1; /* position of the token fed now */
        for (int32_t i = 0; i < n; i++)
            items[i] = (struct batch_item){
                .kv = &kv[i],
                .tokens = toks + (size_t)i * (size_t)(prompt_len + gen_len) + p,
                .n_tok = 1,
                .pos0 = p};
        err = batch_run(&b, &m->be, &pool, V, items, n);
        if (!err) err = pick(m, &b, items, n, rows, outs, picked);
        for (int32_t i = 0; !err && i < n; i++) {
            kv_seq_after_decode(&kv[i], &m->be, &m->cfg, p);
            toks[(size_t)i * (size_t)(prompt_len + gen_len) + p + 1] = picked[i];
        }
        int32_t held = 0;
        for (int32_t i = 0; i < n; i++)
            held += kv[i].n_blocks;
        res->peak_blocks = MAX(res->peak_blocks, held);
    }
    res->decode_s = time_now() - t0;
    for (int32_t i = 0; i < n; i++) {
        res->evicted += kv[i].n_evicted;
        const int32_t *g = toks + (size_t)i * (size_t)(prompt_len + gen_len) + prompt_len;
        for (int32_t j = 0; j < gen_len; j++)
            res->checksum = res->checksum * 1000003u + (uint64_t)g[j];
        kv_seq_deinit(&kv[i], &pool);
    }
    batch_deinit(&b);
    kv_pool_deinit(&pool);
    free(kv);
    free(toks);
    free(items);
    free(rows);
    free(outs);
    free(picked);
    return err;
}

static int parse_args(int argc, char **argv, struct opts *o)
{
    static const struct option lo[] = {
        {"model", required_argument, 0, 'm'},
        {"device", required_argument, 0, 'D'},
        {"dtype", required_argument, 0, 'd'},
        {"tensor-parallel", required_argument, 0, 'p'},
        {"batch", required_argument, 0, 'b'},
        {"prompt-len", required_argument, 0, 'P'},
        {"gen-len", required_argument, 0, 'g'},
        {"policy", required_argument, 0, 'k'},
        {"max-batched-tokens", required_argument, 0, 't'},
        {"block-size", required_argument, 0, 's'},
        {"gpu-memory-utilization", required_argument, 0, 'u'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    int ch;
    while ((ch = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (ch) {
        case 'm': o->model = optarg; break;
        case 'D':
            if (!strcmp(optarg, "cpu"))
                o->mo.device = BE_DEVICE_CPU;
            else if (!strcmp(optarg, "cuda"))
                o->mo.device = BE_DEVICE_CUDA;
            else if (!strcmp(optarg, "auto"))
                o->mo.device = BE_DEVICE_AUTO;
            else
                return fprintf(stderr, "--device wants cpu, cuda or auto\n"), 2;
            break;
        case 'd':
            if (!strcmp(optarg, "fp32"))
                o->mo.dtype = DTYPE_F32;
            else if (!strcmp(optarg, "bf16"))
                o->mo.dtype = DTYPE_BF16;
            else
                return fprintf(stderr, "--dtype wants fp32 or bf16\n"), 2;
            break;
        case 'p': o->mo.tensor_parallel = atoi(optarg); break;
        case 'b': o->batch = atoi(optarg); break;
        case 'P': o->prompt_len = atoi(optarg); break;
        case 'g': o->gen_len = atoi(optarg); break;
        case 't': o->max_batched = atoi(optarg); break;
        case 's': o->block_size = atoi(optarg); break;
        case 'u': o->mo.gpu_memory_utilization = (float)atof(optarg); break;
        case 'k':
            if (kv_policy_parse(optarg, &o->policy) || o->policy == KV_POLICY_LOCAL)
                return fprintf(stderr, "--policy wants full or h2o\n"), 2;
            break;
        default:
            fprintf(
                ch == 'h' ? stdout : stderr,
                "usage: bench_throughput [--model NAME] [--device cpu|cuda|auto] "
                "[--dtype fp32|bf16] [--tensor-parallel N] [--batch N] [--prompt-len N] "
                "[--gen-len N] [--policy full|h2o] [--max-batched-tokens N] "
                "[--block-size N] [--gpu-memory-utilization X]\n");
            return ch == 'h' ? 0 : 2;
        }
    }
    if (o->batch <= 0 || o->prompt_len <= 0 || o->gen_len <= 1 || o->max_batched <= 0 ||
        o->block_size <= 0 || o->mo.tensor_parallel < 0)
        return fprintf(stderr, "sizes must be positive (gen-len at least 2)\n"), 2;
    return -1;
}

int main(int argc, char **argv)
{
    struct opts o = {.model = "dummy:opt-125m",
                     .batch = 16,
                     .prompt_len = 512,
                     .gen_len = 32,
                     .max_batched = 2048,
                     .block_size = 16,
                     .policy = KV_POLICY_H2O};
    model_opts_default(&o.mo);
    int rc = parse_args(argc, argv, &o);
    if (rc >= 0) return rc;
    struct model *m = NULL;
    if (model_load(&m, o.model, &o.mo)) {
        fprintf(stderr, "bench_throughput: %s\n", err_msg());
        return 1;
    }
    struct result warm, r;
    if (run(m, &o, 1, MIN(o.prompt_len, 64), 4, &warm) ||
        run(m, &o, o.batch, o.prompt_len, o.gen_len, &r)) {
        fprintf(stderr, "bench_throughput: %s\n", err_msg());
        model_destroy(m);
        return 1;
    }
    const double n = o.batch, total = r.prefill_s + r.decode_s;
    const double kv_mib = (double)r.peak_blocks *
                          (double)m->be.ops->kv_block_bytes(m->be.ctx, o.block_size) /
                          (1 << 20);
    printf("model %s, backend %s (%s), tensor parallel %d, %d x (%d + %d), policy %s, "
           "max batched tokens %d\n",
           m->cfg.name, m->be.ops->name, dtype_name(m->dtype), MAX(o.mo.tensor_parallel, 1),
           o.batch, o.prompt_len, o.gen_len, kv_policy_name(o.policy), o.max_batched);
    printf("prefill latency: %.3f s, prefill throughput: %.1f token/s\n", r.prefill_s,
           n * o.prompt_len / r.prefill_s);
    printf("decode latency: %.3f s, decode throughput: %.1f token/s\n", r.decode_s,
           n * (o.gen_len - 1) / r.decode_s);
    printf("total latency: %.3f s, total throughput: %.1f token/s\n", total,
           n * o.gen_len / total);
    printf("peak KV cache: %.1f MiB (%d blocks), tokens evicted: %lld, tokens checksum "
           "%016llx\n",
           kv_mib, r.peak_blocks, (long long)r.evicted, (unsigned long long)r.checksum);
    model_destroy(m);
    return 0;
}
