/*
 * cli_bench_quality.c - `h2oserve bench quality`: streaming perplexity of a model on
 * a text under KV policies (engine/eval/quality.h), as a table and JSON lines, with
 * an optional budget sweep and chart. docs/quality.md has the method and the
 * numbers.
 *
 * Usage: h2oserve bench quality --text FILE [--model DIR|NAME] [--prompt-len 64]
 *          [--gen-len 448] [--segments N] [--batch 16] [--kv-policy full|h2o|local]
 *          [--h2o-heavy-ratio X --h2o-recent-ratio X | --h2o-heavy N --h2o-recent N]
 *          [--sweep 0.05,0.1,0.2,0.5] [--plot FILE.png] [--dtype fp32|bf16]
 *          [--device cpu|cuda|auto] [--max-batched-tokens N] [--block-size N]
 *          [--kv-min-budget N]
 * The flags are config/'s table rows of scope CFG_BENCH_QUALITY: the engine's as
 * serve spells them, with this command's defaults (the CPU, the full policy, no
 * floor), and its own (--text, --prompt-len, --sweep, ...).
 *
 * The text is tokenized as one stream without BOS. `full` always runs first: every
 * other row is reported as a ratio to it. --sweep f1,f2,... runs, for each total
 * budget fraction f of P + G, h2o with f/2 heavy + f/2 recent and local with f
 * recent. Budgets are exactly what they say: the server's floor (kv_min_budget)
 * applies only when --kv-min-budget asks for it, to every h2o and local row.
 *
 * Owns: the configuration, the text's tokens and the model, until it returns.
 * Thread: main (quality_run drives the backend).
 */
#include "cli.h"

#include "err.h"
#include "model.h"
#include "quality.h"
#include "tokenizer.h"
#include "util.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_SWEEP CFG_SWEEP_MAX

struct opts {
    const char *model, *text, *plot;
    struct model_opts mo;
    struct quality_spec q;
    float sweep[MAX_SWEEP];
    int n_sweep;
    int32_t min_budget; /* --kv-min-budget, for every h2o / local row */
};

struct config {
    struct kv_spec kv;
    float fraction; /* of P + G, for the sweep's chart; 0 otherwise */
    struct quality_result r;
};

/* The run as the table's configuration says it (c is parsed and validated). */
static void opts_of_cfg(const struct cfg *c, struct opts *o)
{
    struct engine_opts eo;
    cfg_engine_opts(c, &eo);
    const struct cfg_bench_quality *b = &c->bench_quality;
    *o = (struct opts){.model = c->model,
                       .text = b->text,
                       .plot = b->plot,
                       .mo = eo.model_opts,
                       .min_budget = c->kv_min_budget};
    quality_spec_default(&o->q);
    o->q.prompt_len = b->prompt_len;
    o->q.gen_len = b->gen_len;
    o->q.segments = b->segments;
    o->q.batch = b->batch;
    o->q.max_batched = c->max_batched_tokens;
    o->q.block_size = c->block_size;
    cfg_kv_spec(c, &o->q.kv);
    if (b->sweep) o->n_sweep = cfg_fractions(b->sweep, o->sweep, MAX_SWEEP);
}

/* The configurations to run: full, then the policy asked for or the sweep. */
static int plan(const struct opts *o, struct config *c)
{
    int n = 0;
    c[n++].kv = (struct kv_spec){.policy = KV_POLICY_FULL, .heavy = -1, .recent = -1};
    if (o->n_sweep == 0 && o->q.kv.policy != KV_POLICY_FULL) c[n++].kv = o->q.kv;
    for (int i = 0; i < o->n_sweep; i++) {
        const float f = o->sweep[i];
        c[n].kv = (struct kv_spec){.policy = KV_POLICY_H2O,
                                   .heavy_ratio = f / 2,
                                   .recent_ratio = f / 2,
                                   .heavy = -1,
                                   .recent = -1};
        c[n++].fraction = f;
        c[n].kv = (struct kv_spec){
            .policy = KV_POLICY_LOCAL, .recent_ratio = f, .heavy = -1, .recent = -1};
        c[n++].fraction = f;
    }
    for (int i = 1; i < n; i++)
        c[i].kv.min_budget = o->min_budget;
    return n;
}

/* Whether `prog` is an executable file in a $PATH folder. */
static bool on_path(const char *prog)
{
    const char *path = getenv("PATH");
    while (path && *path) {
        const size_t n = strcspn(path, ":");
        char buf[PATH_MAX];
        snprintf(buf, sizeof buf, "%.*s/%s", (int)n, path, prog);
        if (n > 0 && access(buf, X_OK) == 0) return true;
        path += n + (path[n] == ':');
    }
    return false;
}

/* Perplexity vs budget fraction, one line per policy and full as a level. */
static int draw(const char *png, const struct config *c, int n, const char *title)
{
    FILE *g = popen("gnuplot", "w");
    if (!g) return err_set(ENG_EIO, "--plot: cannot run gnuplot (install gnuplot-nox)");
    fprintf(g, "set terminal pngcairo size 800,500\nset output '%s'\n", png);
    fprintf(g,
            "set title \"%s\" noenhanced\nset xlabel 'KV budget (share of prompt + "
            "generation)'\nset ylabel 'perplexity'\nset logscale x\nset key top right\n"
            "set grid\n",
            title);
    fprintf(g,
            "plot '-' with linespoints title 'h2o (half heavy, half recent)', "
            "'-' with linespoints title 'local (recent only)', "
            "%.6f with lines dashtype 2 title 'full'\n",
            c[0].r.perplexity);
    for (int pol = 0; pol < 2; pol++) {
        const enum kv_policy want = pol == 0 ? KV_POLICY_H2O : KV_POLICY_LOCAL;
        for (int i = 1; i < n; i++)
            if (c[i].kv.policy == want)
                fprintf(g, "%g %.6f\n", c[i].fraction, c[i].r.perplexity);
        fprintf(g, "e\n");
    }
    const int rc = pclose(g);
    if (rc != 0)
        return err_set(ENG_EIO, "--plot: gnuplot failed (exit %d; is gnuplot installed?)",
                       rc);
    return 0;
}

/* The run itself, on a parsed configuration. */
static int run(const struct cfg *cf)
{
    struct opts o;
    opts_of_cfg(cf, &o);
    /* A sweep takes minutes; a missing gnuplot must not wait for its end. */
    if (o.plot && !on_path("gnuplot")) {
        fprintf(stderr, "h2oserve bench quality: --plot needs gnuplot, which is not on "
                        "PATH (Debian: apt-get install gnuplot-nox)\n");
        return 2;
    }

    char *text = NULL;
    size_t len = 0;
    int32_t *ids = NULL, n_ids = 0;
    struct model *m = NULL;
    int err = util_read_file(o.text, &text, &len);
    if (err) {
        fprintf(stderr, "h2oserve bench quality: %s\n", err_msg());
        return 1;
    }
    err = model_load(&m, o.model, &o.mo);
    if (!err) err = tokenizer_encode(m->tok, text, len, false, &ids, &n_ids);
    free(text);

    struct config c[1 + 2 * MAX_SWEEP];
    const int n = plan(&o, c);
    if (!err) {
        const int32_t L = o.q.prompt_len + o.q.gen_len;
        int64_t segs = n_ids / L;
        if (o.q.segments > 0) segs = MIN(segs, o.q.segments);
        printf("model %s, backend %s (%s, KV cache %s), text %s: %d tokens, %lld segments "
               "of %d + %d tokens (%lld scored)\n",
               m->cfg.name, backend_name(&m->be), dtype_name(m->dtype),
               dtype_name(m->kv_dtype), o.text, n_ids, (long long)segs, o.q.prompt_len,
               o.q.gen_len, (long long)segs * o.q.gen_len);
        printf("%-6s %6s %6s %11s %8s\n", "policy", "heavy", "recent", "perplexity",
               "vs full");
    }
    for (int i = 0; !err && i < n; i++) {
        struct quality_spec q = o.q;
        q.kv = c[i].kv;
        err = quality_run(m, ids, n_ids, &q, &c[i].r);
        if (err) break;
        const struct kv_budget *b = &c[i].r.budget;
        const bool full = b->policy == KV_POLICY_FULL;
        printf("%-6s %6d %6d %11.4f %7.4fx\n", kv_budget_policy_name(b->policy),
               full ? 0 : b->heavy, full ? 0 : b->recent, c[i].r.perplexity,
               c[i].r.perplexity / c[0].r.perplexity);
        fflush(stdout);
    }
    for (int i = 0; !err && i < n; i++) {
        const struct kv_budget *b = &c[i].r.budget;
        const bool full = b->policy == KV_POLICY_FULL;
        printf("{\"bench\": \"quality\", \"model\": \"%s\", \"dtype\": \"%s\", "
               "\"kv_cache_dtype\": \"%s\", \"policy\": "
               "\"%s\", \"heavy\": %d, \"recent\": %d, \"min_budget\": %d, \"prompt_len\": "
               "%d, "
               "\"gen_len\": %d, "
               "\"segments\": %d, \"tokens\": %lld, \"perplexity\": %.6f, "
               "\"ratio_to_full\": %.6f}\n",
               m->cfg.name, dtype_name(m->dtype), dtype_name(m->kv_dtype),
               kv_budget_policy_name(b->policy), full ? 0 : b->heavy, full ? 0 : b->recent,
               c[i].kv.min_budget, o.q.prompt_len, o.q.gen_len, c[i].r.segments,
               (long long)c[i].r.tokens, c[i].r.perplexity,
               c[i].r.perplexity / c[0].r.perplexity);
    }
    if (!err && o.plot) {
        char title[256];
        snprintf(title, sizeof title, "%s: perplexity vs KV budget, %d + %d tokens",
                 m->cfg.name, o.q.prompt_len, o.q.gen_len);
        err = draw(o.plot, c, n, title);
        if (!err) printf("chart: %s\n", o.plot);
    }
    if (err) fprintf(stderr, "h2oserve bench quality: %s\n", err_msg());
    free(ids);
    model_destroy(m);
    return err ? 1 : 0;
}

int cli_bench_quality(int argc, char **argv)
{
    struct cfg c;
    int rc = cli_parse(&c, CFG_BENCH_QUALITY, argc, argv, "h2oserve bench quality", NULL);
    if (rc < 0 && !c.bench_quality.text) {
        fprintf(stderr, "h2oserve bench quality: --text FILE is required\n");
        cfg_usage(stderr, "bench quality");
        rc = 2;
    }
    if (rc < 0) rc = run(&c);
    cfg_free(&c);
    return rc;
}
