/*
 * bench_throughput.c - FlexGen's offline throughput benchmark on any backend.
 *
 * n prompts of prompt_len tokens each generate gen_len greedy tokens (workload.h:
 * prefill in max_batched-token forwards, then lockstep decode, as flex_opt.py runs
 * it) under one KV policy: full, h2o (the H2O paper's 20% by default: heavy =
 * recent = 10% of prompt_len + gen_len) or local (the recent window only).
 *
 * The batch is --batch N; or, with --kv-cache-bytes X, the largest batch whose KV
 * cache fits in X (the paper's regime, where KV memory limits the batch); or, with
 * --batch max, the largest batch whose KV cache fits in what the backend can give
 * the pool (be_ops.kv_capacity: for CUDA what --gpu-memory-utilization leaves after
 * the weights and workspace; for the CPU the server's default, min(4 GiB, a quarter
 * of RAM)), the pool then sized for that batch. --max-num-seqs N caps both searches.
 * --kv-policy takes a list (full,h2o): each policy in turn on one loaded model, each
 * at its own batch. --compare runs full, h2o and local at the same KV memory in one
 * command (X, the capacity with --batch max, or by default what full needs for
 * --batch sequences) and prints each one's ratios to full.
 *
 * Metrics (REFERENCE.md section 3, flex_opt.py's definitions):
 *   prefill throughput = n * prompt_len / prefill time
 *   decode throughput  = n * (gen_len - 1) / decode time
 *   total throughput   = n * gen_len / (prefill time + decode time)   <- the headline
 * printed as a table and, for each run, one JSON line right after its row (batch
 * size, the batch that fit, KV and weight memory, the model's load time), so that a
 * run cut short keeps the rows before it. One warm-up run of a single short sequence
 * first (cuBLAS and oneDNN choose and load their kernels on first use).
 *
 * Usage: bench_throughput [--model dummy:opt-125m] [--device cpu|cuda|auto]
 *          [--dtype fp32|bf16] [--kv-cache-dtype auto|fp32|bf16|int8] [--tensor-parallel N]
 *          [--batch 16 | --batch max | --kv-cache-bytes X] [--max-num-seqs 4096]
 *          [--prompt-len 512] [--gen-len 32] [--kv-policy full|h2o|local[,...]]
 *          [--h2o-heavy-ratio 0.1] [--h2o-recent-ratio 0.1] [--kv-min-budget 0]
 *          [--compare]
 *          [--max-batched-tokens 2048] [--block-size 16] [--gpu-memory-utilization 0.9]
 */
#include "bench_args.h"
#include "engine.h"
#include "err.h"
#include "kv_budget.h"
#include "model.h"
#include "util.h"
#include "workload.h"

#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The default of --max-num-seqs: the largest batch --kv-cache-bytes and --batch max
 * choose. */
#define MAX_BATCH 4096
/* How far the search for the batch that fits looks past the cap, to report it. */
#define FIT_SEARCH (1 << 20)

struct opts {
    const char *model;
    struct model_opts mo;
    struct workload w; /* n = --batch */
    int64_t kv_bytes;  /* --kv-cache-bytes, 0 = sized for the batch */
    bool batch_max;    /* --batch max: the largest that fits the backend's capacity */
    int32_t max_seqs;  /* --max-num-seqs: the largest batch either search picks */
    enum kv_policy policies[3];
    int n_policies; /* --kv-policy's list; 0 = the default (h2o) */
    bool compare;
};

/* Parameters of the model (the tied LM head counted once). */
static int64_t param_count(const struct opt_config *c)
{
    return opt_config_param_count(c);
}

struct row {
    enum kv_policy policy;
    int32_t batch;
    int32_t fit;         /* the largest batch the KV memory holds (0: a fixed batch) */
    int64_t pool_blocks; /* the pool the run had */
    struct workload_result r;
};


/*
 * Run one policy. kv_bytes 0: the fixed batch, the pool sized for it. Otherwise the
 * largest batch whose peak fits in kv_bytes, at most --max-num-seqs; the pool is
 * kv_bytes itself (--kv-cache-bytes, the paper's regime), or with --batch max only
 * what that batch needs (the capacity is a bound, not a size to take: a CPU run
 * would otherwise touch 4 GiB for a few sequences).
 */
static int run_policy(struct model *m, const struct opts *o, enum kv_policy policy,
                      int64_t kv_bytes, struct row *out)
{
    struct workload w = o->w;
    w.spec.policy = policy;
    const size_t block = backend_kv_block_bytes(&m->be, w.block_size);
    int64_t pool = kv_bytes > 0 ? kv_bytes / (int64_t)block : workload_peak_blocks(&w);
    int32_t fit = 0;
    if (kv_bytes > 0) {
        fit = workload_max_batch(&w, pool, FIT_SEARCH);
        w.n = MIN(fit, o->max_seqs);
        if (w.n == 0)
            return err_set(ENG_ENOMEM,
                           "%s: %lld bytes of KV cache hold no sequence of %d + %d "
                           "tokens",
                           kv_budget_policy_name(policy), (long long)kv_bytes, w.prompt_len,
                           w.gen_len);
        /* The batch's own peak, planned without a pool limit, is what it needs; if a
         * limit changed the plan (prompts held back from a forward), keep the limit. */
        if (o->batch_max) pool = MIN(pool, workload_peak_blocks(&w));
    }
    *out = (struct row){.policy = policy, .batch = w.n, .fit = fit, .pool_blocks = pool};
    return workload_run(m, &w, (int32_t)MIN(pool, INT32_MAX), &out->r);
}

static double total_tps(const struct row *r, const struct workload *w)
{
    return (double)r->batch * w->gen_len / (r->r.prefill_s + r->r.decode_s);
}

static void print_row(const struct row *r, const struct workload *w, double block_mib,
                      const struct row *full)
{
    const double n = r->batch;
    printf("%-6s %6d %10.3f %12.1f %10.3f %12.1f %12.1f %10.1f",
           kv_budget_policy_name(r->policy), r->batch, r->r.prefill_s,
           n * w->prompt_len / r->r.prefill_s, r->r.decode_s,
           n * (w->gen_len - 1) / r->r.decode_s, total_tps(r, w),
           r->r.peak_blocks * block_mib);
    if (full) printf(" %8.2fx", total_tps(r, w) / total_tps(full, w));
    printf("\n");
}

static void print_json(const struct model *m, const struct opts *o, const struct row *r,
                       double block_bytes, int64_t weight_bytes, int64_t kv_bytes)
{
    const struct workload *w = &o->w;
    struct kv_budget b;
    struct kv_spec spec = w->spec;
    spec.policy = r->policy;
    CHECK(kv_budget_resolve(&spec, w->prompt_len, w->gen_len, &b) == 0);
    const double n = r->batch;
    printf("{\"bench\": \"throughput\", \"model\": \"%s\", \"backend\": \"%s\", \"dtype\": "
           "\"%s\", \"kv_cache_dtype\": \"%s\", \"tensor_parallel\": %d, \"prompt_len\": "
           "%d, \"gen_len\": %d, "
           "\"kv_policy\": \"%s\", \"heavy\": %d, \"recent\": %d, \"batch\": %d, "
           "\"batch_rule\": \"%s\", \"batch_fit\": %d, \"max_num_seqs\": %d, "
           "\"kv_capacity_bytes\": %lld, "
           "\"kv_pool_bytes\": %.0f, \"peak_kv_bytes\": %.0f, \"weight_bytes\": %lld, "
           "\"load_s\": %.2f, "
           "\"prefill_latency_s\": %.4f, \"prefill_throughput\": %.2f, "
           "\"decode_latency_s\": %.4f, \"decode_throughput\": %.2f, "
           "\"total_throughput\": %.2f, \"tokens_evicted\": %lld}\n",
           m->cfg.name, backend_name(&m->be), dtype_name(m->dtype), dtype_name(m->kv_dtype),
           MAX(o->mo.tensor_parallel, 1), w->prompt_len, w->gen_len,
           kv_budget_policy_name(r->policy), b.policy == KV_POLICY_FULL ? 0 : b.heavy,
           b.policy == KV_POLICY_FULL ? 0 : b.recent, r->batch,
           o->batch_max   ? "max"
           : kv_bytes > 0 ? "kv-cache-bytes"
                          : "fixed",
           r->fit, kv_bytes > 0 ? o->max_seqs : 0, (long long)kv_bytes,
           (double)r->pool_blocks * block_bytes, r->r.peak_blocks * block_bytes,
           (long long)weight_bytes, m->load_seconds, r->r.prefill_s,
           n * w->prompt_len / r->r.prefill_s, r->r.decode_s,
           n * (w->gen_len - 1) / r->r.decode_s, total_tps(r, w), (long long)r->r.evicted);
}

/* "full,h2o" into o->policies (each at most once). Returns 0, or -1. */
static int parse_policies(const char *s, struct opts *o)
{
    o->n_policies = 0;
    char buf[64];
    if (strlen(s) >= sizeof buf) return -1;
    strcpy(buf, s);
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        enum kv_policy p;
        if (kv_budget_policy_parse(t, &p) || o->n_policies == 3) return -1;
        for (int i = 0; i < o->n_policies; i++)
            if (o->policies[i] == p) return -1;
        o->policies[o->n_policies++] = p;
    }
    return o->n_policies > 0 ? 0 : -1;
}

static int usage(FILE *f, int rc)
{
    fprintf(f, "usage: bench_throughput [--model NAME] [--device cpu|cuda|auto] "
               "[--dtype fp32|bf16] [--kv-cache-dtype auto|fp32|bf16|int8] "
               "[--tensor-parallel N] "
               "[--batch N | --batch max | --kv-cache-bytes X] [--max-num-seqs N (4096)] "
               "[--prompt-len N] [--gen-len N] [--kv-policy full|h2o|local[,...]] "
               "[--h2o-heavy-ratio X] [--h2o-recent-ratio X] [--kv-min-budget N (0)] "
               "[--compare] "
               "[--max-batched-tokens N] [--block-size N] [--gpu-memory-utilization X]\n");
    return rc;
}

static int parse_args(int argc, char **argv, struct opts *o)
{
    static const struct option lo[] = {
        {"model", required_argument, 0, 'm'},
        {"device", required_argument, 0, 'D'},
        {"dtype", required_argument, 0, 'd'},
        {"kv-cache-dtype", required_argument, 0, 'Q'},
        {"tensor-parallel", required_argument, 0, 'p'},
        {"batch", required_argument, 0, 'b'},
        {"kv-cache-bytes", required_argument, 0, 'K'},
        {"max-num-seqs", required_argument, 0, 'n'},
        {"prompt-len", required_argument, 0, 'P'},
        {"gen-len", required_argument, 0, 'g'},
        {"kv-policy", required_argument, 0, 'k'},
        {"policy", required_argument, 0, 'k'}, /* the first name it had */
        {"h2o-heavy-ratio", required_argument, 0, 'H'},
        {"h2o-recent-ratio", required_argument, 0, 'R'},
        {"kv-min-budget", required_argument, 0, 'F'},
        {"compare", no_argument, 0, 'c'},
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
            if (model_parse_device(optarg, &o->mo.device))
                return fprintf(stderr, "--device wants cpu, cuda or auto\n"), 2;
            break;
        case 'd':
            if (model_parse_dtype(optarg, &o->mo.dtype))
                return fprintf(stderr, "--dtype wants fp32 or bf16\n"), 2;
            break;
        case 'Q':
            /* The serve flag's names (cfg_table.c): auto = the compute dtype. */
            o->mo.kv_dtype_set = strcmp(optarg, "auto") != 0;
            if (strcmp(optarg, "int8") == 0)
                o->mo.kv_dtype = DTYPE_I8;
            else if (o->mo.kv_dtype_set && model_parse_dtype(optarg, &o->mo.kv_dtype))
                return fprintf(stderr, "--kv-cache-dtype wants auto, fp32, bf16 or int8\n"),
                       2;
            break;
        case 'p': o->mo.tensor_parallel = atoi(optarg); break;
        case 'b':
            o->batch_max = strcmp(optarg, "max") == 0;
            if (!o->batch_max) o->w.n = atoi(optarg);
            break;
        case 'n': o->max_seqs = atoi(optarg); break;
        case 'K':
            if (bench_args_size(optarg, &o->kv_bytes) || o->kv_bytes <= 0)
                return fprintf(stderr, "--kv-cache-bytes wants a size like 512M\n"), 2;
            break;
        case 'P': o->w.prompt_len = atoi(optarg); break;
        case 'g': o->w.gen_len = atoi(optarg); break;
        case 'k':
            if (parse_policies(optarg, o))
                return fprintf(stderr, "--kv-policy wants full, h2o or local, or a list of "
                                       "them (full,h2o)\n"),
                       2;
            o->w.spec.policy = o->policies[0];
            break;
        case 'H': o->w.spec.heavy_ratio = (float)atof(optarg); break;
        case 'R': o->w.spec.recent_ratio = (float)atof(optarg); break;
        case 'F': o->w.spec.min_budget = atoi(optarg); break;
        case 'c': o->compare = true; break;
        case 't': o->w.max_batched = atoi(optarg); break;
        case 's': o->w.block_size = atoi(optarg); break;
        case 'u': o->mo.gpu_memory_utilization = (float)atof(optarg); break;
        default: return usage(ch == 'h' ? stdout : stderr, ch == 'h' ? 0 : 2);
        }
    }
    if (o->batch_max && o->kv_bytes > 0)
        return fprintf(stderr, "--batch max and --kv-cache-bytes both choose the batch: "
                               "give one\n"),
               2;
    if (o->w.n <= 0 || o->max_seqs <= 0 || o->w.prompt_len <= 0 || o->w.gen_len <= 1 ||
        o->w.max_batched <= 0 || o->w.block_size <= 0 || o->mo.tensor_parallel < 0 ||
        !(o->w.spec.heavy_ratio >= 0) || !(o->w.spec.recent_ratio >= 0) ||
        o->w.spec.min_budget < 0)
        return fprintf(stderr, "sizes must be positive (gen-len at least 2)\n"), 2;
    return -1;
}

int main(int argc, char **argv)
{
    struct opts o = {.model = "dummy:opt-125m",
                     .max_seqs = MAX_BATCH,
                     .w = {.n = 16,
                           .prompt_len = 512,
                           .gen_len = 32,
                           .max_batched = 2048,
                           .block_size = 16}};
    kv_budget_spec_default(&o.w.spec);
    /* FlexGen's workload at the paper's exact budget: no floor unless asked for
     * (--kv-min-budget); the budget run is printed with every result. */
    o.w.spec.min_budget = 0;
    model_opts_default(&o.mo);
    int rc = parse_args(argc, argv, &o);
    if (rc >= 0) return rc;
    /* A decode step carries every sequence at once and a prefill step up to
     * max_batched tokens: a device backend keeps room for the largest out of its
     * pool (kv_capacity), so the batch --batch max finds is one that runs. */
    const bool searched = o.batch_max || o.kv_bytes > 0 || o.compare;
    const int32_t most = searched ? o.max_seqs : o.w.n;
    o.mo.max_step_rows = MAX(most, 1);
    o.mo.max_step_tokens = MAX(o.w.max_batched, most);
    struct model *m = NULL;
    if (model_load(&m, o.model, &o.mo)) {
        fprintf(stderr, "bench_throughput: %s\n", err_msg());
        return 1;
    }
    const double block = (double)backend_kv_block_bytes(&m->be, o.w.block_size);
    const int64_t weights = param_count(&m->cfg) * dtype_size(m->dtype);
    struct workload warm = o.w;
    warm.n = 1;
    warm.prompt_len = MIN(o.w.prompt_len, 64);
    warm.gen_len = 4;
    struct workload_result wr;
    int err = workload_run(m, &warm, (int32_t)workload_peak_blocks(&warm), &wr);

    /* The policies: --kv-policy's list (default h2o); --compare: every policy at one KV
     * memory, by default what full needs for --batch. --batch max: the backend's
     * capacity bounds every policy's batch. */
    enum kv_policy policies[3] = {o.w.spec.policy};
    int n_pol = 1;
    if (o.n_policies > 0) {
        memcpy(policies, o.policies, sizeof policies);
        n_pol = o.n_policies;
    }
    int64_t kv_bytes = o.batch_max ? engine_core_kv_capacity(m) : o.kv_bytes;
    if (o.compare) {
        policies[0] = KV_POLICY_FULL;
        policies[1] = KV_POLICY_H2O;
        policies[2] = KV_POLICY_LOCAL;
        n_pol = 3;
        if (kv_bytes == 0) {
            struct workload full = o.w;
            full.spec.policy = KV_POLICY_FULL;
            kv_bytes = (int64_t)((double)workload_peak_blocks(&full) * block);
        }
    }
    printf(
        "model %s, backend %s (%s, KV cache %s), tensor parallel %d, %d + %d tokens, %s, "
        "weights %.1f MiB (loaded in %.1f s), max batched tokens %d\n",
        m->cfg.name, backend_name(&m->be), dtype_name(m->dtype), dtype_name(m->kv_dtype),
        MAX(o.mo.tensor_parallel, 1), o.w.prompt_len, o.w.gen_len,
        o.batch_max    ? "batch: the largest that fits the backend's KV capacity"
        : kv_bytes > 0 ? "batch: the largest that fits the KV cache"
                       : "fixed batch",
        (double)weights / (1 << 20), m->load_seconds, o.w.max_batched);
    if (kv_bytes > 0)
        printf("KV cache: %.1f MiB%s, at most %d sequences\n", (double)kv_bytes / (1 << 20),
               o.batch_max ? " (the backend's capacity; each pool sized for its batch)"
                           : "",
               o.max_seqs);
    printf("%-6s %6s %10s %12s %10s %12s %12s %10s%s\n", "policy", "batch", "prefill s",
           "prefill t/s", "decode s", "decode t/s", "total t/s", "peak KV MiB",
           o.compare ? "  vs full" : "");
    fflush(stdout);
    struct row rows[3];
    int n_done = 0;
    for (int i = 0; !err && i < n_pol; i++) {
        err = run_policy(m, &o, policies[i], kv_bytes, &rows[i]);
        if (err) break;
        print_row(&rows[i], &o.w, block / (1 << 20), o.compare ? &rows[0] : NULL);
        /* Its JSON line at once: a later policy that fails or is stopped leaves it. */
        print_json(m, &o, &rows[i], block, weights, kv_bytes);
        fflush(stdout);
        n_done++;
    }
    /* Where a decode step's time goes (the backend's profile over the decode phase). */
    for (int i = 0; i < n_done; i++) {
        const struct be_profile *p = &rows[i].r.decode_prof;
        const double ms = 1e3 / (o.w.gen_len - 1);
        if (p->n_forward == 0) continue;
        const struct workload_result *r = &rows[i].r;
        printf(
            "%-6s decode step %.2f ms = gemm %.2f + attention %.2f + other forward %.2f + "
            "H2O victims %.2f + sampling %.2f + batching %.2f\n",
            kv_budget_policy_name(rows[i].policy), r->decode_s * ms, p->gemm_s * ms,
            p->attn_s * ms, (p->forward_s - p->gemm_s - p->attn_s) * ms, r->evict_s * ms,
            r->sample_s * ms, (r->decode_s - p->forward_s - r->evict_s - r->sample_s) * ms);
    }
    if (err) fprintf(stderr, "bench_throughput: %s\n", err_msg());
    model_destroy(m);
    return err ? 1 : 0;
}
