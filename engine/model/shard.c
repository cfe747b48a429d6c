/*
 * shard.c - a tensor-parallel rank's part of each tensor (see shard.h).
 */
#include "shard.h"

#include "err.h"
#include "util.h"
#include "weights.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int shard_init(struct shard *s, const struct opt_config *cfg, int32_t rank, int32_t size)
{
    CHECK(size >= 1 && rank >= 0 && rank < size);
    if (cfg->n_head % size || cfg->n_kv_head % size || cfg->ffn % size)
        return err_set(
            ENG_EINVAL,
            "tensor parallelism: %s has %d heads, %d KV heads and ffn %d, not all "
            "divisible by %d ranks",
            cfg->name, cfg->n_head, cfg->n_kv_head, cfg->ffn, size);
    s->rank = rank;
    s->size = size;
    s->n_head = cfg->n_head / size;
    s->head0 = rank * s->n_head;
    s->n_kv_head = cfg->n_kv_head / size;
    s->kv_head0 = rank * s->n_kv_head;
    s->n_ffn = cfg->ffn / size;
    s->ffn0 = rank * s->n_ffn;
    return 0;
}

int shard_read(const struct weights *w, const char *prefix, const char *what,
               struct shard_part p, float **dst)
{
    char name[128];
    snprintf(name, sizeof name, "%s.%s", prefix, what);
    float *buf = malloc((size_t)(p.n_rows * p.n_cols) * sizeof *buf);
    if (!buf) return err_set(ENG_ENOMEM, "out of memory reading %s", name);
    int64_t shape[2] = {p.rows, p.cols};
    int err = weights_read_f32_part(w, name, p.cols > 1 ? 2 : 1, shape, p.row0, p.n_rows,
                                    p.col0, p.n_cols, buf);
    if (err) {
        free(buf);
        buf = NULL;
    }
    *dst = buf;
    return err;
}

/* The weight window p of "<prefix>.weight" and, when `bias`, the bias of its rows. */
static int read_linear(const struct weights *w, const char *prefix, struct shard_part p,
                       bool bias, float **wt, float **bs)
{
    int err = shard_read(w, prefix, "weight", p, wt);
    if (!err && bias)
        err = shard_read(w, prefix, "bias",
                         (struct shard_part){p.rows, 1, p.row0, p.n_rows, 0, 1}, bs);
    return err;
}

/* Copy rows [row0, row0 + n) of "<prefix>.weight" (a [rows, hidden] tensor) and of
 * its bias (when `bias`) into w_dst / b_dst. */
static int copy_rows(const struct weights *w, const char *prefix, int64_t rows, int64_t hd,
                     int64_t row0, int64_t n, bool bias, float *w_dst, float *b_dst)
{
    float *wt = NULL, *bs = NULL;
    int err = read_linear(w, prefix, (struct shard_part){rows, hd, row0, n, 0, hd}, bias,
                          &wt, &bs);
    if (!err) {
        memcpy(w_dst, wt, (size_t)(n * hd) * sizeof *wt);
        if (bias) memcpy(b_dst, bs, (size_t)n * sizeof *bs);
    }
    free(wt);
    free(bs);
    return err;
}

/* "layers.<li>.<name>" */
static void layer_prefix(char *buf, size_t cap, int32_t li, const char *name)
{
    snprintf(buf, cap, "layers.%d.%s", li, name);
}

/* This rank's q, k and v rows stacked: [(Hr + 2 KVr) * D, hidden], q | k | v. */
static int read_qkv(const struct shard *s, const struct opt_config *cfg,
                    const struct weights *w, int32_t li, struct shard_layer *l)
{
    const struct model_arch *a = &cfg->arch;
    const int64_t hd = cfg->hidden, D = cfg->head_dim;
    const int64_t q_rows = (int64_t)s->n_head * D, kv_rows = (int64_t)s->n_kv_head * D;
    const int64_t rows = q_rows + 2 * kv_rows;
    l->qkv_w = malloc((size_t)(rows * hd) * sizeof *l->qkv_w);
    l->qkv_b = a->qkv_bias ? malloc((size_t)rows * sizeof *l->qkv_b) : NULL;
    if (!l->qkv_w || (a->qkv_bias && !l->qkv_b))
        return err_set(ENG_ENOMEM, "out of memory loading layer %d", li);
    char p[128];
    int err = 0;
    if (a->qkv == ARCH_QKV_FUSED_HEADS) {
        /* NeoX: rows [head][q|k|v][D] of a [3 * n_head * D, hidden] tensor; head h's q
         * is block 3h, its k 3h + 1, its v 3h + 2 (no GQA in this layout). */
        layer_prefix(p, sizeof p, li, a->names->qkv);
        const int64_t total = 3 * (int64_t)cfg->n_head * D;
        for (int32_t h = 0; h < s->n_head && !err; h++)
            for (int32_t part = 0; part < 3 && !err; part++) {
                const int64_t dst =
                    part == 0 ? h * D : q_rows + (part - 1) * kv_rows + h * D;
                err = copy_rows(w, p, total, hd, (3 * (int64_t)(s->head0 + h) + part) * D,
                                D, a->qkv_bias, l->qkv_w + dst * hd,
                                a->qkv_bias ? l->qkv_b + dst : NULL);
            }
        return err;
    }
    const char *names[3] = {a->names->q, a->names->k, a->names->v};
    const int64_t n_rows[3] = {q_rows, kv_rows, kv_rows};
    const int64_t all[3] = {(int64_t)cfg->n_head * D, (int64_t)cfg->n_kv_head * D,
                            (int64_t)cfg->n_kv_head * D};
    const int64_t first[3] = {(int64_t)s->head0 * D, (int64_t)s->kv_head0 * D,
                              (int64_t)s->kv_head0 * D};
    int64_t dst = 0;
    for (int i = 0; i < 3 && !err; i++) {
        layer_prefix(p, sizeof p, li, names[i]);
        err = copy_rows(w, p, all[i], hd, first[i], n_rows[i], a->qkv_bias,
                        l->qkv_w + dst * hd, a->qkv_bias ? l->qkv_b + dst : NULL);
        dst += n_rows[i];
    }
    return err;
}

/* fc1, or SwiGLU's gate rows then up rows, of this rank's units. */
static int read_fc1(const struct shard *s, const struct opt_config *cfg,
                    const struct weights *w, int32_t li, struct shard_layer *l)
{
    const struct model_arch *a = &cfg->arch;
    const int64_t hd = cfg->hidden, ffn = cfg->ffn;
    char p[128];
    if (a->mlp == ARCH_MLP_FC) {
        layer_prefix(p, sizeof p, li, a->names->fc1);
        return read_linear(w, p, (struct shard_part){ffn, hd, s->ffn0, s->n_ffn, 0, hd},
                           a->mlp_bias, &l->fc1_w, &l->fc1_b);
    }
    l->fc1_w = malloc((size_t)(2 * s->n_ffn * hd) * sizeof *l->fc1_w);
    if (!l->fc1_w) return err_set(ENG_ENOMEM, "out of memory loading layer %d", li);
    layer_prefix(p, sizeof p, li, a->names->gate);
    int err = copy_rows(w, p, ffn, hd, s->ffn0, s->n_ffn, false, l->fc1_w, NULL);
    layer_prefix(p, sizeof p, li, a->names->up);
    if (!err)
        err = copy_rows(w, p, ffn, hd, s->ffn0, s->n_ffn, false,
                        l->fc1_w + (int64_t)s->n_ffn * hd, NULL);
    return err;
}

int shard_read_layer(const struct shard *s, const struct opt_config *cfg,
                     const struct weights *w, int32_t li, struct shard_layer *out)
{
    const struct model_arch *a = &cfg->arch;
    const int64_t hd = cfg->hidden, ffn = cfg->ffn;
    const int64_t attn_cols = (int64_t)s->n_head * cfg->head_dim;
    const int64_t attn0 = (int64_t)s->head0 * cfg->head_dim;
    const int64_t attn_all = (int64_t)cfg->n_head * cfg->head_dim;
    const bool rank0 = s->rank == 0, ln_bias = a->norm == ARCH_NORM_LAYERNORM;
    struct shard_layer l = {0};
    char p[128];
    int err = read_qkv(s, cfg, w, li, &l);
    layer_prefix(p, sizeof p, li, a->names->o);
    if (!err)
        err = read_linear(w, p, (struct shard_part){hd, attn_all, 0, hd, attn0, attn_cols},
                          rank0 && a->o_bias, &l.out_w, &l.out_b);
    if (!err) err = read_fc1(s, cfg, w, li, &l);
    layer_prefix(p, sizeof p, li, a->mlp == ARCH_MLP_FC ? a->names->fc2 : a->names->down);
    if (!err)
        err = read_linear(w, p, (struct shard_part){hd, ffn, 0, hd, s->ffn0, s->n_ffn},
                          rank0 && a->mlp_bias, &l.fc2_w, &l.fc2_b);
    layer_prefix(p, sizeof p, li, a->names->ln1);
    if (!err) err = read_linear(w, p, shard_whole(hd, 1), ln_bias, &l.ln1_w, &l.ln1_b);
    layer_prefix(p, sizeof p, li, a->names->ln2);
    if (!err) err = read_linear(w, p, shard_whole(hd, 1), ln_bias, &l.ln2_w, &l.ln2_b);
    if (err) shard_layer_free(&l);
    *out = l;
    return err;
}

void shard_layer_free(struct shard_layer *l)
{
    free(l->qkv_w);
    free(l->qkv_b);
    free(l->out_w);
    free(l->out_b);
    free(l->fc1_w);
    free(l->fc1_b);
    free(l->fc2_w);
    free(l->fc2_b);
    free(l->ln1_w);
    free(l->ln1_b);
    free(l->ln2_w);
    free(l->ln2_b);
    memset(l, 0, sizeof *l);
}
