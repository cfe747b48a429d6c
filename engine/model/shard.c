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
    if (cfg->n_head % size || cfg->ffn % size)
        return err_set(ENG_EINVAL,
                       "tensor parallelism: %s has %d heads and ffn %d, not both "
                       "divisible by %d ranks",
                       cfg->name, cfg->n_head, cfg->ffn, size);
    s->rank = rank;
    s->size = size;
    s->n_head = cfg->n_head / size;
    s->head0 = rank * s->n_head;
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

/* This rank's heads of q, k and v stacked: [3 * rows, hidden] and [3 * rows]. */
static int read_qkv(const struct shard *s, const struct opt_config *cfg,
                    const struct weights *w, int32_t li, struct shard_layer *l)
{
    const int64_t hd = cfg->hidden, rows = (int64_t)s->n_head * cfg->head_dim;
    const int64_t row0 = (int64_t)s->head0 * cfg->head_dim;
    const char *names[3] = {"q_proj", "k_proj", "v_proj"};
    l->qkv_w = malloc((size_t)(3 * rows * hd) * sizeof *l->qkv_w);
    l->qkv_b = malloc((size_t)(3 * rows) * sizeof *l->qkv_b);
    if (!l->qkv_w || !l->qkv_b)
        return err_set(ENG_ENOMEM, "out of memory loading layer %d", li);
    int err = 0;
    for (int i = 0; i < 3 && !err; i++) {
        char prefix[96];
        float *wt = NULL, *bs = NULL;
        snprintf(prefix, sizeof prefix, "layers.%d.self_attn.%s", li, names[i]);
        err = read_linear(w, prefix, (struct shard_part){hd, hd, row0, rows, 0, hd}, true,
                          &wt, &bs);
        if (!err) {
            memcpy(l->qkv_w + i * rows * hd, wt, (size_t)(rows * hd) * sizeof *wt);
            memcpy(l->qkv_b + i * rows, bs, (size_t)rows * sizeof *bs);
        }
        free(wt);
        free(bs);
    }
    return err;
}

int shard_read_layer(const struct shard *s, const struct opt_config *cfg,
                     const struct weights *w, int32_t li, struct shard_layer *out)
{
    const int64_t hd = cfg->hidden, ffn = cfg->ffn;
    const int64_t attn_cols = (int64_t)s->n_head * cfg->head_dim;
    const int64_t attn0 = (int64_t)s->head0 * cfg->head_dim;
    const bool rank0 = s->rank == 0;
    struct shard_layer l = {0};
    char p[96];
    int err = read_qkv(s, cfg, w, li, &l);
    snprintf(p, sizeof p, "layers.%d.self_attn.out_proj", li);
    if (!err)
        err = read_linear(w, p, (struct shard_part){hd, hd, 0, hd, attn0, attn_cols}, rank0,
                          &l.out_w, &l.out_b);
    snprintf(p, sizeof p, "layers.%d.fc1", li);
    if (!err)
        err = read_linear(w, p, (struct shard_part){ffn, hd, s->ffn0, s->n_ffn, 0, hd},
                          true, &l.fc1_w, &l.fc1_b);
    snprintf(p, sizeof p, "layers.%d.fc2", li);
    if (!err)
        err = read_linear(w, p, (struct shard_part){hd, ffn, 0, hd, s->ffn0, s->n_ffn},
                          rank0, &l.fc2_w, &l.fc2_b);
    snprintf(p, sizeof p, "layers.%d.self_attn_layer_norm", li);
    if (!err) err = read_linear(w, p, shard_whole(hd, 1), true, &l.ln1_w, &l.ln1_b);
    snprintf(p, sizeof p, "layers.%d.final_layer_norm", li);
    if (!err) err = read_linear(w, p, shard_whole(hd, 1), true, &l.ln2_w, &l.ln2_b);
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
