/*
 * test_cuda_sample_ref.c - the host reference of the CUDA sampler (cuda_ref_sample,
 * cuda/cuda_ref_sample.c) against the engine's own sampler_sample on the CPU.
 *
 * Each row's random logits go through sampler_sample with a seeded rng, and through
 * the reference with the one number that rng would give (rng_uniform on a copy, for
 * non-greedy rows only: greedy ones draw nothing). Tokens, the number of top
 * alternatives and their ids must be identical; logprobs agree within 1e-5 (they are
 * the same float operations, so in practice bit for bit). Rows cover greedy,
 * temperatures, top-k, top-p, both together, heavy ties (logits on a coarse grid),
 * NaN / +-inf logits, all -inf, -0 against +0, OPT's vocabulary and small ones, and
 * several rows per call with mixed settings. tests/gpu/test_cuda_sample compares the
 * kernel with this reference.
 */
#include "test.h"

#include "cuda_ref.h"
#include "rng.h"
#include "sampler.h"

#include <float.h>
#include <stdint.h>

/* A small generator for the test data, independent of the sampler's rng. */
static uint64_t lcg_state = 88172645463325252ull;
static double lcg_u(void)
{
    lcg_state ^= lcg_state << 13;
    lcg_state ^= lcg_state >> 7;
    lcg_state ^= lcg_state << 17;
    return (double)(lcg_state >> 11) * (1.0 / 9007199254740992.0);
}
static float lcg_normal(void)
{
    double a = lcg_u(), b = lcg_u();
    return (float)(sqrt(-2.0 * log(a + 1e-300)) * cos(6.283185307179586 * b));
}

enum kind { K_NORMAL, K_TIES, K_SPECIAL, K_ALL_NEG_INF, K_ZEROS, K_PEAKED };

static void fill(float *x, int32_t vocab, enum kind k, float scale)
{
    for (int32_t j = 0; j < vocab; j++) {
        float v = lcg_normal() * scale;
        switch (k) {
        case K_TIES: v = floorf(v); break; /* a handful of distinct values */
        case K_SPECIAL: {
            double r = lcg_u();
            if (r < 0.01) v = NAN;
            else if (r < 0.02) v = -INFINITY;
            else if (r < 0.025) v = 5.0f;
            break;
        }
        case K_ALL_NEG_INF: v = lcg_u() < 0.5 ? -INFINITY : NAN; break;
        case K_ZEROS: v = lcg_u() < 0.5 ? 0.0f : -0.0f; break;
        case K_PEAKED: v = j % 97 == 3 ? 20.0f + v : v; break;
        default: break;
        }
        x[j] = v;
    }
    if (k == K_SPECIAL && vocab > 10) x[vocab / 3] = INFINITY;
}

struct row_cfg {
    float temperature, top_p;
    int32_t top_k, n_logprobs;
};

static int failures_shown;

/* Run rows [n] of logits through both and compare. */
static void check_rows(const float *logits, int32_t n, int32_t vocab, const struct row_cfg *cfg,
                       uint64_t seed)
{
    float *x = malloc((size_t)vocab * sizeof *x);
    float *temperature = malloc((size_t)n * sizeof(float));
    float *top_p = malloc((size_t)n * sizeof(float));
    int32_t *top_k = malloc((size_t)n * sizeof(int32_t));
    int32_t *nlp = malloc((size_t)n * sizeof(int32_t));
    double *u = malloc((size_t)n * sizeof(double));
    int32_t *token = malloc((size_t)n * sizeof(int32_t));
    float *logprob = malloc((size_t)n * sizeof(float));
    int32_t *n_top = malloc((size_t)n * sizeof(int32_t));
    int32_t *top_ids = malloc((size_t)n * CUDA_SAMPLE_MAX_TOP * sizeof(int32_t));
    float *top_lps = malloc((size_t)n * CUDA_SAMPLE_MAX_TOP * sizeof(float));
    struct sample_out *want = malloc((size_t)n * sizeof *want);
    struct sampler_scratch scratch;
    sampler_scratch_init(&scratch);
    for (int32_t i = 0; i < n; i++) {
        struct sampler_params p;
        sampler_params_default(&p);
        p.temperature = cfg[i].temperature;
        p.top_p = cfg[i].top_p;
        p.top_k = cfg[i].top_k;
        p.n_logprobs = cfg[i].n_logprobs;
        struct rng r, r_copy;
        rng_seed(&r, seed + (uint64_t)i);
        r_copy = r;
        int greedy = !(p.temperature >= 1e-5f) || p.top_k == 1 || !(p.top_p > 0.0f);
        u[i] = greedy ? -1.0 : rng_uniform(&r_copy); /* -1: the reference must not read it */
        memcpy(x, logits + (int64_t)i * vocab, (size_t)vocab * sizeof *x);
        sampler_sample(&p, x, vocab, NULL, 0, &r, &scratch, &want[i]);
        EXPECT(memcmp(&r, &r_copy, sizeof r) == 0); /* one draw, or none when greedy */
        temperature[i] = p.temperature;
        top_p[i] = p.top_p;
        top_k[i] = p.top_k;
        nlp[i] = p.n_logprobs;
    }
    struct cuda_sample_args a = {
        .logits = logits, .temperature = temperature, .top_k = top_k, .top_p = top_p,
        .u = u, .n_logprobs = nlp, .token = token, .logprob = logprob, .n_top = n_top,
        .top_ids = top_ids, .top_logprobs = top_lps, .n = n, .vocab = vocab,
    };
    cuda_ref_sample(&a);
    for (int32_t i = 0; i < n; i++) {
        int bad = token[i] != want[i].token || n_top[i] != want[i].n_top ||
                  !(fabsf(logprob[i] - want[i].logprob) <= 1e-5f);
        for (int32_t r = 0; r < want[i].n_top && r < CUDA_SAMPLE_MAX_TOP; r++)
            bad |= top_ids[i * CUDA_SAMPLE_MAX_TOP + r] != want[i].top_ids[r] ||
                   !(fabsf(top_lps[i * CUDA_SAMPLE_MAX_TOP + r] - want[i].top_logprobs[r]) <=
                     1e-5f);
        if (bad && failures_shown++ < 10)
            fprintf(stderr,
                    "# vocab %d row %d T %g k %d p %g nlp %d: token %d want %d, lp %g want %g,"
                    " n_top %d want %d\n",
                    vocab, i, (double)cfg[i].temperature, cfg[i].top_k, (double)cfg[i].top_p,
                    cfg[i].n_logprobs, token[i], want[i].token, (double)logprob[i],
                    (double)want[i].logprob, n_top[i], want[i].n_top);
        EXPECT(!bad);
    }
    sampler_scratch_deinit(&scratch);
    free(want), free(top_lps), free(top_ids), free(n_top), free(logprob), free(token);
    free(u), free(nlp), free(top_k), free(top_p), free(temperature), free(x);
}

static const float temps[] = {0.0f, 1e-6f, 0.3f, 0.7f, 1.0f, 1.5f, 100.0f};
static const int32_t ks[] = {0, 1, 2, 5, 40, 1000};
static const float ps[] = {1.0f, 0.95f, 0.5f, 0.1f, 0.0f};
static const int32_t nlps[] = {-1, 0, 1, 5};

#define N_ELEMS(a) ((int32_t)(sizeof(a) / sizeof((a)[0])))

/* Every combination of the settings above, one row each, on logits of one kind. */
static void sweep(int32_t vocab, enum kind k, float scale, int32_t stride)
{
    int32_t n_cfg = N_ELEMS(temps) * N_ELEMS(ks) * N_ELEMS(ps);
    struct row_cfg *cfg = malloc((size_t)n_cfg * sizeof *cfg);
    int32_t n = 0;
    for (int32_t t = 0; t < N_ELEMS(temps); t++)
        for (int32_t ki = 0; ki < N_ELEMS(ks); ki++)
            for (int32_t pi = 0; pi < N_ELEMS(ps); pi++) {
                if ((t + ki + pi) % stride) continue;
                cfg[n].temperature = temps[t];
                cfg[n].top_k = ks[ki];
                cfg[n].top_p = ps[pi];
                cfg[n].n_logprobs = nlps[(t + ki * 3 + pi) % N_ELEMS(nlps)];
                n++;
            }
    float *logits = malloc((size_t)n * vocab * sizeof *logits);
    for (int32_t i = 0; i < n; i++)
        fill(logits + (int64_t)i * vocab, vocab, k, scale);
    check_rows(logits, n, vocab, cfg, 1000u * (uint64_t)vocab + (uint64_t)k);
    free(logits);
    free(cfg);
}

TEST(small_vocab_all_settings)
{
    sweep(37, K_NORMAL, 2.0f, 1);
    sweep(1000, K_NORMAL, 3.0f, 1);
    sweep(1001, K_NORMAL, 0.5f, 1);
}

TEST(ties)
{
    sweep(37, K_TIES, 1.0f, 1);
    sweep(5000, K_TIES, 1.5f, 1);
    sweep(300, K_ZEROS, 1.0f, 1);
}

TEST(special_values)
{
    sweep(500, K_SPECIAL, 2.0f, 1);
    sweep(64, K_ALL_NEG_INF, 1.0f, 1);
}

TEST(opt_vocab)
{
    sweep(50272, K_NORMAL, 3.0f, 3);
    sweep(50272, K_PEAKED, 1.0f, 4);
    sweep(50272, K_TIES, 2.0f, 5);
}

TEST(many_draws)
{
    /* The same settings on many fresh rows: the draw lands all over the candidates. */
    const int32_t n = 400, vocab = 2048;
    struct row_cfg *cfg = malloc((size_t)n * sizeof *cfg);
    float *logits = malloc((size_t)n * vocab * sizeof *logits);
    for (int32_t i = 0; i < n; i++) {
        cfg[i] = (struct row_cfg){.temperature = 0.8f + 0.001f * (float)i,
                                  .top_k = (i % 4) * 25,
                                  .top_p = i % 3 ? 0.9f : 1.0f,
                                  .n_logprobs = i % 6 - 1};
        fill(logits + (int64_t)i * vocab, vocab, i % 5 ? K_NORMAL : K_TIES, 2.0f);
    }
    check_rows(logits, n, vocab, cfg, 7);
    free(logits);
    free(cfg);
}

int main(void)
{
    RUN(small_vocab_all_settings);
    RUN(ties);
    RUN(special_values);
    RUN(opt_vocab);
    RUN(many_draws);
    return test_done();
}
