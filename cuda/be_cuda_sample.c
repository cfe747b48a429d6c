/*
 * be_cuda_sample.c - sampling on the GPU (be_ops.sample) from the logits the last
 * forward kept on rank 0's device (forward with logits NULL): the engine's sampler
 * split at step 3 (sampler.h). The host sends each row's knobs, its step 1-2
 * additions and its one uniform draw; cuda_logits_rows builds the rows, cuda_sample
 * draws; only the tokens, logprobs and alternatives (about 50 bytes a row) come back
 * instead of a 200 KB row of logits.
 *
 * Thread: engine (rank 0's thread; the other ranks take no part).
 */
#include "be_cuda_impl.h"

#include "err.h"
#include "util.h"

#include <string.h>

/* Byte offsets of one call's arrays in the staging buffers (all 16-byte aligned). */
struct samp_layout {
    size_t rows, off, ids, vals, temp, top_k, top_p, n_lp, u; /* host -> device */
    size_t in_bytes;
    size_t token, logprob, n_top, top_ids, top_lp;           /* device -> host */
    size_t out_bytes;
    size_t dst, scratch; /* device only */
    size_t dev_bytes;
};

static size_t al16(size_t n)
{
    return (n + 15) & ~(size_t)15;
}

static struct samp_layout layout(int32_t n, int64_t n_add, int32_t vocab)
{
    struct samp_layout L;
    const size_t N = (size_t)n, A = (size_t)MAX(n_add, 1), T = CUDA_SAMPLE_MAX_TOP;
    size_t o = 0;
    L.rows = o, o = al16(o + N * 4);
    L.off = o, o = al16(o + (N + 1) * 4);
    L.ids = o, o = al16(o + A * 4);
    L.vals = o, o = al16(o + A * 4);
    L.temp = o, o = al16(o + N * 4);
    L.top_k = o, o = al16(o + N * 4);
    L.top_p = o, o = al16(o + N * 4);
    L.n_lp = o, o = al16(o + N * 4);
    L.u = o, o = al16(o + N * 8);
    L.in_bytes = o;
    L.token = o, o = al16(o + N * 4);
    L.logprob = o, o = al16(o + N * 4);
    L.n_top = o, o = al16(o + N * 4);
    L.top_ids = o, o = al16(o + N * T * 4);
    L.top_lp = o, o = al16(o + N * T * 4);
    L.out_bytes = o - L.in_bytes;
    L.dst = o, o = al16(o + N * (size_t)vocab * 4);
    L.scratch = o, o = al16(o + CUDA_SAMPLE_SCRATCH_BYTES(n, vocab));
    L.dev_bytes = o;
    return L;
}

size_t be_cuda_sample_reserve_bytes(int32_t rows, int32_t vocab)
{
    return 2 * layout(rows, 0, vocab).dev_bytes; /* samp_reserve allocates twice over */
}

/* Grow the sampler's device and pinned host buffers. */
static int samp_reserve(struct cuda_be *c, struct cu_rank *r, const struct samp_layout *L)
{
    if (L->dev_bytes > c->samp_dev_cap) {
        cudaFree(c->samp_dev);
        c->samp_dev = NULL;
        c->samp_dev_cap = 0;
        if (be_cuda_fail(r, cudaMalloc(&c->samp_dev, 2 * L->dev_bytes), "sampling buffers"))
            return r->err;
        c->samp_dev_cap = 2 * L->dev_bytes;
    }
    const size_t host = L->in_bytes + L->out_bytes;
    if (host > c->samp_host_cap) {
        cudaFreeHost(c->samp_host);
        c->samp_host = NULL;
        c->samp_host_cap = 0;
        if (be_cuda_fail(r, cudaMallocHost(&c->samp_host, 2 * host),
                         "pinned sampling buffers"))
            return r->err;
        c->samp_host_cap = 2 * host;
    }
    return 0;
}

/* Fill the host half of the call's arrays. */
static void describe(char *h, const struct samp_layout *L, const struct be_sample_row *rows,
                     int32_t n)
{
    int32_t *off = (int32_t *)(h + L->off);
    off[0] = 0;
    for (int32_t i = 0; i < n; i++) {
        const struct be_sample_row *s = &rows[i];
        ((int32_t *)(h + L->rows))[i] = s->row;
        if (s->n_add > 0) { /* rows without additions may carry NULL lists */
            memcpy((int32_t *)(h + L->ids) + off[i], s->add_ids, (size_t)s->n_add * 4);
            memcpy((float *)(h + L->vals) + off[i], s->add_vals, (size_t)s->n_add * 4);
        }
        off[i + 1] = off[i] + s->n_add;
        ((float *)(h + L->temp))[i] = s->temperature;
        ((int32_t *)(h + L->top_k))[i] = s->top_k;
        ((float *)(h + L->top_p))[i] = s->top_p;
        ((int32_t *)(h + L->n_lp))[i] = s->n_logprobs;
        ((double *)(h + L->u))[i] = s->u;
    }
}

int be_cuda_sample(void *ctx, const struct be_sample_row *rows, int32_t n,
                   struct sample_out *out)
{
    struct cuda_be *c = ctx;
    struct cu_rank *r = &c->ranks[0];
    const int32_t V = c->cfg.vocab_size;
    int64_t n_add = 0;
    for (int32_t i = 0; i < n; i++) {
        if (rows[i].row < 0 || rows[i].row >= c->n_kept)
            return err_set(ENG_EINVAL, "sample: row %d of a forward that kept %d", rows[i].row,
                           c->n_kept);
        n_add += rows[i].n_add;
    }
    if (n == 0) return 0;
    const struct samp_layout L = layout(n, n_add, V);
    r->err = 0;
    if (be_cuda_fail(r, cudaSetDevice(r->device), "cudaSetDevice") ||
        samp_reserve(c, r, &L))
        return err_set(r->err, "%s", r->msg);
    char *h = c->samp_host, *d = c->samp_dev;
    describe(h, &L, rows, n);
    struct cuda_sample_args a = {
        .logits = (const float *)(d + L.dst), .temperature = (const float *)(d + L.temp),
        .top_k = (const int32_t *)(d + L.top_k), .top_p = (const float *)(d + L.top_p),
        .u = (const double *)(d + L.u), .n_logprobs = (const int32_t *)(d + L.n_lp),
        .token = (int32_t *)(d + L.token), .logprob = (float *)(d + L.logprob),
        .n_top = (int32_t *)(d + L.n_top), .top_ids = (int32_t *)(d + L.top_ids),
        .top_logprobs = (float *)(d + L.top_lp), .scratch = d + L.scratch, .n = n, .vocab = V,
    };
    cudaStream_t st = r->stream;
    if (be_cuda_fail(r, cudaMemcpyAsync(d, h, L.in_bytes, cudaMemcpyHostToDevice, st),
                     "upload") ||
        be_cuda_fail(
            r,
            cuda_logits_rows((float *)(d + L.dst), r->logits, (const int32_t *)(d + L.rows),
                             n, V, (const int32_t *)(d + L.off),
                             (const int32_t *)(d + L.ids), (const float *)(d + L.vals), st),
            "cuda_logits_rows") ||
        be_cuda_fail(r, cuda_sample(&a, st), "cuda_sample") ||
        be_cuda_fail(r,
                     cudaMemcpyAsync(h + L.in_bytes, d + L.in_bytes, L.out_bytes,
                                     cudaMemcpyDeviceToHost, st),
                     "download") ||
        be_cuda_fail(r, cudaStreamSynchronize(st), "sample"))
        return err_set(r->err, "%s", r->msg);
    for (int32_t i = 0; i < n; i++) {
        struct sample_out *o = &out[i];
        memset(o, 0, sizeof *o);
        o->token = ((const int32_t *)(h + L.token))[i];
        o->logprob = ((const float *)(h + L.logprob))[i];
        o->n_top = ((const int32_t *)(h + L.n_top))[i];
        for (int32_t k = 0; k < o->n_top && k < SAMPLER_MAX_LOGPROBS; k++) {
            o->top_ids[k] = ((const int32_t *)(h + L.top_ids))[i * CUDA_SAMPLE_MAX_TOP + k];
            o->top_logprobs[k] = ((const float *)(h + L.top_lp))[i * CUDA_SAMPLE_MAX_TOP + k];
        }
    }
    return 0;
}
