/*
 * weights_dummy.c - deterministic random weights with the real tensor shapes of any
 * family arch.h describes (OPT, Llama, Qwen2, GPT-NeoX).
 *
 * Like FlexGen's _DUMMY_ weights, these let the server and benchmarks run any OPT
 * size with no download. Nothing is materialised: the table only lists names and
 * shapes, and weights_read_f32 generates a tensor's values when asked, so even
 * dummy:opt-66b costs no memory until a backend loads it.
 * Value of element i of tensor `name`: a splitmix64 stream whose start depends on the
 * seed and a hash of the name, so any element can be computed independently (the
 * generation is parallel) and is the same on every machine and thread count.
 * Owns nothing beyond the table entries it adds.
 */
#include "err.h"
#include "util.h"
#include "weights_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* The splitmix64 increment (2^64 / golden ratio) and finaliser. */
#define GOLDEN 0x9e3779b97f4a7c15ull

static inline uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/*
 * The sum of four 16-bit uniforms (Irwin-Hall) is close enough to normal for weights
 * that only need the right scale: its variance is (65536^2 - 1) / 3, and this factor
 * brings the standard deviation to 0.02, OPT's init. The sum is an integer and the
 * scaling a single float multiply, so no FMA contraction or libm can change a bit.
 */
#define NORMAL_CENTER 131070 /* 4 * 65535 / 2 */
#define NORMAL_SCALE 5.285799584260604e-07f

#define GEN_CHUNK ((int64_t)1 << 16)

void weights_dummy_generate(const struct weights *w, const struct weights_tensor *t,
                            int64_t first, int64_t n, float *dst)
{
    const uint64_t base = mix64(w->seed ^ mix64(t->hash));
    const int64_t n_chunks = CEIL_DIV(n, GEN_CHUNK);
#pragma omp parallel for schedule(static) if (n_chunks > 1)
    for (int64_t c = 0; c < n_chunks; c++) {
        int64_t lo = c * GEN_CHUNK, hi = MIN(n, lo + GEN_CHUNK);
        for (int64_t i = lo; i < hi; i++) {
            /* Element first + i of the tensor: a shard reads the values the whole
             * tensor has at its indices. */
            uint64_t x = mix64(base + (uint64_t)(first + i + 1) * GOLDEN);
            int32_t s = (int32_t)(x & 0xffff) + (int32_t)((x >> 16) & 0xffff) +
                        (int32_t)((x >> 32) & 0xffff) + (int32_t)(x >> 48);
            dst[i] = (float)(s - NORMAL_CENTER) * NORMAL_SCALE;
        }
    }
}

static void add(struct weights *w, enum weights_fill fill, int ndim, int64_t d0, int64_t d1,
                const char *fmt, ...) __attribute__((format(printf, 6, 7)));

static void add(struct weights *w, enum weights_fill fill, int ndim, int64_t d0, int64_t d1,
                const char *fmt, ...)
{
    char name[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    int64_t shape[2] = {d0, d1};
    /* The names are ours and distinct, so a failure is a bug in this file. */
    int err = weights_add(w, name, strlen(name), DTYPE_F32, fill, ndim, shape, NULL, -1);
    CHECK(err == 0);
}

/* Every tensor of another family (arch.h), prefix-free, in its checkpoints' names;
 * norm weights 1 and biases 0, as for OPT. */
static void build_arch(struct weights *w, const struct opt_config *cfg)
{
    const struct model_arch *a = &cfg->arch;
    const struct arch_names *nm = a->names;
    const int64_t h = cfg->hidden, ffn = cfg->ffn, D = cfg->head_dim;
    const int64_t q = (int64_t)cfg->n_head * D, kv = (int64_t)cfg->n_kv_head * D;
    const enum weights_fill N = WEIGHTS_FILL_NORMAL, ONE = WEIGHTS_FILL_ONE,
                            ZERO = WEIGHTS_FILL_ZERO;
    const bool ln_bias = a->norm == ARCH_NORM_LAYERNORM;
    add(w, N, 2, cfg->vocab_size, h, "%s.weight", nm->embed);
    if (!cfg->tied_lm_head) add(w, N, 2, cfg->vocab_size, h, "%s.weight", nm->lm_head);
    add(w, ONE, 1, h, 0, "%s.weight", nm->final_norm);
    if (ln_bias) add(w, ZERO, 1, h, 0, "%s.bias", nm->final_norm);
    for (int l = 0; l < cfg->n_layer; l++) {
        const char *norms[2] = {nm->ln1, nm->ln2};
        for (int i = 0; i < 2; i++) {
            add(w, ONE, 1, h, 0, "layers.%d.%s.weight", l, norms[i]);
            if (ln_bias) add(w, ZERO, 1, h, 0, "layers.%d.%s.bias", l, norms[i]);
        }
        if (a->qkv == ARCH_QKV_FUSED_HEADS) {
            add(w, N, 2, 3 * q, h, "layers.%d.%s.weight", l, nm->qkv);
            if (a->qkv_bias) add(w, ZERO, 1, 3 * q, 0, "layers.%d.%s.bias", l, nm->qkv);
        } else {
            const char *names[3] = {nm->q, nm->k, nm->v};
            const int64_t rows[3] = {q, kv, kv};
            for (int i = 0; i < 3; i++) {
                add(w, N, 2, rows[i], h, "layers.%d.%s.weight", l, names[i]);
                if (a->qkv_bias)
                    add(w, ZERO, 1, rows[i], 0, "layers.%d.%s.bias", l, names[i]);
            }
        }
        add(w, N, 2, h, q, "layers.%d.%s.weight", l, nm->o);
        if (a->o_bias) add(w, ZERO, 1, h, 0, "layers.%d.%s.bias", l, nm->o);
        if (a->mlp == ARCH_MLP_SWIGLU) {
            add(w, N, 2, ffn, h, "layers.%d.%s.weight", l, nm->gate);
            add(w, N, 2, ffn, h, "layers.%d.%s.weight", l, nm->up);
            add(w, N, 2, h, ffn, "layers.%d.%s.weight", l, nm->down);
        } else {
            add(w, N, 2, ffn, h, "layers.%d.%s.weight", l, nm->fc1);
            add(w, N, 2, h, ffn, "layers.%d.%s.weight", l, nm->fc2);
            if (a->mlp_bias) {
                add(w, ZERO, 1, ffn, 0, "layers.%d.%s.bias", l, nm->fc1);
                add(w, ZERO, 1, h, 0, "layers.%d.%s.bias", l, nm->fc2);
            }
        }
    }
}

/* Every tensor of HF OPTForCausalLM's decoder, prefix-free; lm_head is tied. */
void weights_dummy_build(struct weights *w, const struct opt_config *cfg)
{
    if (cfg->arch.family != ARCH_OPT) {
        build_arch(w, cfg);
        return;
    }
    const int64_t h = cfg->hidden, proj = cfg->word_embed_proj_dim, ffn = cfg->ffn;
    const enum weights_fill N = WEIGHTS_FILL_NORMAL, ONE = WEIGHTS_FILL_ONE,
                            ZERO = WEIGHTS_FILL_ZERO;
    add(w, N, 2, cfg->vocab_size, proj, "embed_tokens.weight");
    /* HF looks positions up at position + 2, hence two extra rows. */
    add(w, N, 2, (int64_t)cfg->max_pos + 2, h, "embed_positions.weight");
    if (proj != h) {
        add(w, N, 2, h, proj, "project_in.weight");
        add(w, N, 2, proj, h, "project_out.weight");
    }
    if (cfg->ln_before) {
        add(w, ONE, 1, h, 0, "final_layer_norm.weight");
        add(w, ZERO, 1, h, 0, "final_layer_norm.bias");
    }
    static const char *const proj_names[] = {"q_proj", "k_proj", "v_proj", "out_proj"};
    for (int l = 0; l < cfg->n_layer; l++) {
        for (size_t i = 0; i < ARRAY_LEN(proj_names); i++) {
            add(w, N, 2, h, h, "layers.%d.self_attn.%s.weight", l, proj_names[i]);
            add(w, ZERO, 1, h, 0, "layers.%d.self_attn.%s.bias", l, proj_names[i]);
        }
        add(w, ONE, 1, h, 0, "layers.%d.self_attn_layer_norm.weight", l);
        add(w, ZERO, 1, h, 0, "layers.%d.self_attn_layer_norm.bias", l);
        add(w, N, 2, ffn, h, "layers.%d.fc1.weight", l);
        add(w, ZERO, 1, ffn, 0, "layers.%d.fc1.bias", l);
        add(w, N, 2, h, ffn, "layers.%d.fc2.weight", l);
        add(w, ZERO, 1, h, 0, "layers.%d.fc2.bias", l);
        add(w, ONE, 1, h, 0, "layers.%d.final_layer_norm.weight", l);
        add(w, ZERO, 1, h, 0, "layers.%d.final_layer_norm.bias", l);
    }
}
