/*
 * loadgen_opts.c - bench/loadgen's command line (see loadgen_opts.h).
 * Thread: main.
 */
#include "loadgen_opts.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f,
        "usage: loadgen [options]\n"
        "  --host H               server address (127.0.0.1)\n"
        "  --port N               server port (8000)\n"
        "  --base-url URL         http://host[:port][/prefix] instead of --host/--port\n"
        "  --endpoint PATH        the API path after the base URL (/v1/completions)\n"
        "  --backend B            openai or vllm: both stream /v1/completions (openai)\n"
        "  --dataset-name D       random, the only one: random token-id prompts (random)\n"
        "  --model NAME           model id (default: the first of GET /v1/models)\n"
        "  --api-key KEY          sent as Authorization: Bearer KEY\n"
        "  --num-prompts N        requests to send (1000)\n"
        "  --request-rate R       R requests/s on average, or inf: all at once (inf)\n"
        "  --burstiness B         gaps ~ Gamma(shape B, mean 1/R): 1 = Poisson, < 1\n"
        "                         burstier, > 1 (up to inf) more even; no effect at\n"
        "                         --request-rate inf (1)\n"
        "  --max-concurrency C    at most C requests in flight (unlimited)\n"
        "  --random-input-len I   prompt tokens per request (1024)\n"
        "  --random-output-len O  generated tokens per request, EOS ignored (128)\n"
        "  --random-vocab-size V  prompt ids drawn from [4, V) (512: valid for every\n"
        "                         OPT model and dummy:tiny)\n"
        "  --seed S               prompts and arrival times (0)\n"
        "  --timeout S            per-request limit in seconds, connect included (600)\n"
        "  --percentile-metrics L the block's latency sections, a comma list of ttft,\n"
        "                         tpot, itl, e2el (ttft,tpot,itl, as vLLM)\n"
        "  --metric-percentiles L the P<p> lines of each section, a comma list of\n"
        "                         percentiles in [0, 100], e.g. 50,90,99,99.9 (99)\n"
        "  --save-result [FILE]   write the metrics and every request as JSON to FILE;\n"
        "                         without FILE (vLLM's flag) to --result-filename, or\n"
        "                         to vLLM's name LABEL-RATEqps[-concurrencyC]-MODEL-\n"
        "                         DATE.json; the name is put in --result-dir\n"
        "  --result-filename F    the file name of --save-result\n"
        "  --result-dir D         the directory of --save-result's file (created)\n"
        "  --label L              the file name's first part (the backend's name)\n"
        "  --save-detailed        accepted for vLLM; the per-request arrays (ttfts,\n"
        "                         itls, input_lens, ...) are always saved\n");
}

static int parse_int(const char *s, long long lo, long long hi, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

/* --base-url http://host[:port][/prefix] */
static int parse_base_url(struct lg_opts *o, const char *url)
{
    if (strncmp(url, "http://", 7) != 0)
        return -1;
    const char *h = url + 7, *slash = strchr(h, '/');
    size_t hl = slash ? (size_t)(slash - h) : strlen(h);
    char hp[256];
    if (hl == 0 || hl >= sizeof hp)
        return -1;
    memcpy(hp, h, hl);
    hp[hl] = '\0';
    char *colon = strrchr(hp, ':');
    if (colon && !strchr(hp, ']') == !strchr(colon, ']')) {
        long long port;
        if (parse_int(colon + 1, 1, 65535, &port))
            return -1;
        o->port = (int)port;
        *colon = '\0';
    }
    if (hp[0] == '[') {  /* [::1] */
        memmove(hp, hp + 1, strlen(hp));
        hp[strcspn(hp, "]")] = '\0';
    }
    snprintf(o->host, sizeof o->host, "%s", hp);
    snprintf(o->prefix, sizeof o->prefix, "%s", slash ? slash : "");
    size_t pl = strlen(o->prefix);
    while (pl && o->prefix[pl - 1] == '/')
        o->prefix[--pl] = '\0';
    if (pl >= 3 && strcmp(o->prefix + pl - 3, "/v1") == 0)  /* .../v1 as OpenAI's base */
        o->prefix[pl - 3] = '\0';
    return 0;
}

static const char *opt_name(const struct option *longopts, int val)
{
    for (; longopts->name; longopts++)
        if (longopts->val == val)
            return longopts->name;
    return "?";
}

/* vLLM's completions client refuses an API URL that does not end in "completions"
 * before it sends anything; so do we, and a path must be one. A path that passes
 * but that the server does not route fails every request with its HTTP 404. */
static int check_endpoint(const char *e)
{
    size_t n = strlen(e);
    if (e[0] != '/' || n >= 256 || n < 11 || strcmp(e + n - 11, "completions") != 0) {
        fprintf(stderr, "loadgen: bad value for --endpoint: %s (a path that starts with "
                "'/' and ends in 'completions', as vLLM's completions client requires; "
                "the server's is /v1/completions)\n", e);
        return -1;
    }
    return 0;
}

/* vLLM's "openai" and "vllm" backends are one client, the streaming completions
 * one we have. Its chat client would need /v1/chat/completions, which the server
 * does not have yet (and text prompts, where ours are token ids). */
static int check_backend(const char *b)
{
    if (strcmp(b, "openai") == 0 || strcmp(b, "vllm") == 0)
        return 0;
    if (strcmp(b, "openai-chat") == 0)
        fprintf(stderr, "loadgen: --backend openai-chat is not supported: this server has "
                "no /v1/chat/completions endpoint yet; use --backend openai or vllm (the "
                "streaming /v1/completions client)\n");
    else
        fprintf(stderr, "loadgen: --backend %s is not supported: loadgen has only vLLM's "
                "completions client, --backend openai or vllm\n", b);
    return -1;
}

/* The next item of a comma list, spaces around it trimmed, into item[cap]; returns
 * the rest after its comma, or NULL after the last item. */
static const char *list_next(const char *s, char *item, size_t cap)
{
    const char *comma = strchr(s, ',');
    size_t n = comma ? (size_t)(comma - s) : strlen(s);
    while (n && *s == ' ')
        s++, n--;
    while (n && s[n - 1] == ' ')
        n--;
    if (n >= cap)
        n = cap - 1;  /* too long for any valid item; it will not match */
    memcpy(item, s, n);
    item[n] = '\0';
    return comma ? comma + 1 : NULL;
}

/* --percentile-metrics ttft,tpot,itl,e2el. vLLM ignores a name it does not know;
 * we refuse it, since a misspelt name would silently drop its section. */
static int parse_metrics(const char *list, unsigned *out)
{
    unsigned set = 0;
    char item[64];
    const char *rest = list;
    do {
        rest = list_next(rest, item, sizeof item);
        int m = 0;
        while (m < LG_N_METRICS &&
               strcmp(item, loadgen_stats_metric_key((enum lg_metric)m)) != 0)
            m++;
        if (m == LG_N_METRICS) {
            fprintf(stderr, "loadgen: bad value for --percentile-metrics: %s ('%s' is not "
                    "one of ttft, tpot, itl, e2el)\n", list, item);
            return -1;
        }
        set |= 1u << m;
    } while (rest);
    *out = set;
    return 0;
}

/* --metric-percentiles 50,90,99,99.9: each a number in [0, 100] (numpy's range). */
static int parse_percentiles(const char *list, double *pct, int *n_pct)
{
    int n = 0;
    char item[64], *end;
    const char *rest = list;
    do {
        rest = list_next(rest, item, sizeof item);
        double p = strtod(item, &end);
        if (n == LG_MAX_PERCENTILES || end == item || *end || !(p >= 0 && p <= 100)) {
            fprintf(stderr, "loadgen: bad value for --metric-percentiles: %s (%s)\n", list,
                    n == LG_MAX_PERCENTILES ? "at most 16 percentiles"
                                            : "each a number in [0, 100]");
            return -1;
        }
        pct[n++] = p;
    } while (rest);
    *n_pct = n;
    return 0;
}

int loadgen_opts_parse(struct lg_opts *o, int argc, char **argv)
{
    enum { O_HOST = 256, O_PORT, O_BASE, O_MODEL, O_KEY, O_NUM, O_RATE, O_CONC, O_IN,
           O_OUT, O_VOCAB, O_SEED, O_TIMEOUT, O_SAVE, O_BURST, O_ENDPOINT, O_BACKEND,
           O_DATASET, O_PMETRICS, O_PCTS, O_RFILE, O_RDIR, O_LABEL, O_DETAILED, O_HELP };
    static const struct option longopts[] = {
        {"host", 1, 0, O_HOST}, {"port", 1, 0, O_PORT}, {"base-url", 1, 0, O_BASE},
        {"model", 1, 0, O_MODEL}, {"api-key", 1, 0, O_KEY}, {"num-prompts", 1, 0, O_NUM},
        {"request-rate", 1, 0, O_RATE}, {"max-concurrency", 1, 0, O_CONC},
        {"random-input-len", 1, 0, O_IN}, {"random-output-len", 1, 0, O_OUT},
        {"random-vocab-size", 1, 0, O_VOCAB}, {"seed", 1, 0, O_SEED},
        {"timeout", 1, 0, O_TIMEOUT}, {"save-result", 2, 0, O_SAVE},
        {"burstiness", 1, 0, O_BURST}, {"endpoint", 1, 0, O_ENDPOINT},
        {"backend", 1, 0, O_BACKEND}, {"dataset-name", 1, 0, O_DATASET},
        {"percentile-metrics", 1, 0, O_PMETRICS}, {"metric-percentiles", 1, 0, O_PCTS},
        {"result-filename", 1, 0, O_RFILE}, {"result-dir", 1, 0, O_RDIR},
        {"label", 1, 0, O_LABEL}, {"save-detailed", 0, 0, O_DETAILED},
        {"help", 0, 0, O_HELP},
        {0, 0, 0, 0}};
    *o = (struct lg_opts){.host = "127.0.0.1", .port = 8000, .num_prompts = 1000,
                          .request_rate = INFINITY, .burstiness = 1.0, .input_len = 1024,
                          .output_len = 128, .vocab = 512, .timeout_s = 600,
                          .endpoint = "/v1/completions", .backend = "openai",
                          .metrics = 1u << LG_TTFT | 1u << LG_TPOT | 1u << LG_ITL,
                          .n_pct = 1, .pct = {99}};
    int c;
    long long v = 0;
    char *end;
    const char *save_file = NULL;
    optind = 0;  /* GNU getopt's full reset: a parse does not depend on an earlier one */
    // "+": stop at the first operand instead of moving it to the end, so that the
    // word after --save-result is still there to be taken as its FILE.
    while ((c = getopt_long(argc, argv, "+", longopts, NULL)) != -1) {
        const char *a = optarg, *hint = "";
        int bad = 0;
        switch (c) {
        case O_HOST: snprintf(o->host, sizeof o->host, "%s", a); break;
        case O_PORT: bad = parse_int(a, 1, 65535, &v); o->port = (int)v; break;
        case O_BASE: bad = parse_base_url(o, a); break;
        case O_MODEL: o->model = a; break;
        case O_KEY: o->api_key = a; break;
        case O_NUM: bad = parse_int(a, 0, 100000000, &v); o->num_prompts = v; break;
        case O_CONC: bad = parse_int(a, 1, 1000000, &v); o->max_concurrency = (int32_t)v; break;
        case O_IN: bad = parse_int(a, 1, 1 << 20, &v); o->input_len = (int32_t)v; break;
        case O_OUT: bad = parse_int(a, 1, 1 << 20, &v); o->output_len = (int32_t)v; break;
        case O_VOCAB: bad = parse_int(a, 5, 1 << 30, &v); o->vocab = (int32_t)v; break;
        case O_SEED: bad = parse_int(a, 0, INT64_MAX, &v); o->seed = (uint64_t)v; break;
        case O_SAVE:
            // vLLM's --save-result takes no value; ours takes FILE. A next word that is
            // not an option is our FILE, so both `--save-result out.json` and
            // `--save-result --result-filename out.json` mean what they say.
            o->save_result = true;
            if (!a && optind < argc && argv[optind][0] != '-')
                a = argv[optind++];
            if (a) {
                save_file = a;
                bad = !*a;
            }
            break;
        case O_RFILE: o->result_filename = a; bad = !*a; break;
        case O_RDIR: o->result_dir = a; bad = !*a; break;
        case O_LABEL: o->label = a; break;
        case O_DETAILED: break;
        case O_RATE:
            o->request_rate = strtod(a, &end);
            bad = end == a || *end || !(o->request_rate > 0);
            break;
        case O_BURST:  /* vLLM asserts burstiness > 0; "inf" is its even spacing */
            o->burstiness = strtod(a, &end);
            bad = end == a || *end || !(o->burstiness > 0);
            hint = " (the gamma shape, > 0: 1 = Poisson, < 1 burstier, inf = even gaps)";
            break;
        case O_TIMEOUT:
            o->timeout_s = strtod(a, &end);
            bad = end == a || *end || !(o->timeout_s > 0) || o->timeout_s > 1e9;
            break;
        case O_ENDPOINT:
            o->endpoint = a;
            if (check_endpoint(a) != 0)
                return -1;
            break;
        case O_BACKEND:
            o->backend = a;
            if (check_backend(a) != 0)
                return -1;
            break;
        case O_DATASET:
            if (strcmp(a, "random") != 0) {
                fprintf(stderr, "loadgen: --dataset-name %s is not supported: loadgen has "
                        "only vLLM's 'random' dataset (random token ids, "
                        "--random-input-len and --random-output-len of them)\n", a);
                return -1;
            }
            break;
        case O_PMETRICS:
            if (parse_metrics(a, &o->metrics) != 0)
                return -1;
            break;
        case O_PCTS:
            if (parse_percentiles(a, o->pct, &o->n_pct) != 0)
                return -1;
            break;
        case O_HELP: usage(stdout); return 1;
        default: usage(stderr); return -1;
        }
        if (bad) {
            fprintf(stderr, "loadgen: bad value for --%s: %s%s\n", opt_name(longopts, c), a,
                    hint);
            return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "loadgen: unexpected argument %s\n", argv[optind]);
        return -1;
    }
    if (save_file && o->result_filename && strcmp(save_file, o->result_filename) != 0) {
        fprintf(stderr, "loadgen: two result files: --save-result %s and --result-filename "
                "%s (give one)\n", save_file, o->result_filename);
        return -1;
    }
    if (save_file)
        o->result_filename = save_file;
    if (!o->save_result && (o->result_filename || o->result_dir))
        fprintf(stderr, "loadgen: --result-filename and --result-dir name the file of "
                "--save-result; without it nothing is saved (as in vLLM)\n");
    return 0;
}
