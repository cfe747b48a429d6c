/*
 * cpu_gemm.c - linear layers as oneDNN matmul primitives (see cpu_gemm.h).
 *
 * oneDNN chooses the weights layout (format_tag_any) for the primitive it builds;
 * the PyTorch [n, k] matrix is reordered into it once. Per call only two small
 * memory objects are made for src and dst, whose M is known then.
 *
 * oneDNN 2.6 builds its fast bf16 kernel (brgemm) only for a fixed M; with a runtime
 * M it falls back to gemm:jit, 1.3-3x slower at decode sizes (M = 8..64; see
 * docs/benchmarks.md, "GEMMs"). So half-precision layers run M in chunks of
 * CPU_LINEAR_CHUNK rows, each chunk on a primitive built for exactly its row count
 * (lazily, once per count; oneDNN's primitive cache shares the JIT code between
 * layers of the same shape). fp32 keeps one runtime-M primitive: there gemm:jit is
 * as fast.
 */
#include "cpu_gemm.h"

#include "err.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

#define DNNL_TRY(call, what)                                                               \
    do {                                                                                   \
        dnnl_status_t st_ = (call);                                                        \
        if (st_ != dnnl_success) {                                                         \
            err = err_set(ENG_EUNSUPPORTED, "oneDNN: %s failed (status %d)", what,         \
                          (int)st_);                                                       \
            goto fail;                                                                     \
        }                                                                                  \
    } while (0)

static dnnl_data_type_t dnnl_dt(enum dtype t)
{
    return t == DTYPE_BF16 ? dnnl_bf16 : t == DTYPE_F16 ? dnnl_f16 : dnnl_f32;
}

int cpu_gemm_init(struct cpu_dnnl *d)
{
    int err = 0;
    memset(d, 0, sizeof *d);
    DNNL_TRY(dnnl_engine_create(&d->engine, dnnl_cpu, 0), "engine_create");
    DNNL_TRY(dnnl_stream_create(&d->stream, d->engine, dnnl_stream_default_flags),
             "stream_create");
    return 0;
fail:
    cpu_gemm_deinit(d);
    return err;
}

void cpu_gemm_deinit(struct cpu_dnnl *d)
{
    if (d->stream) dnnl_stream_destroy(d->stream);
    if (d->engine) dnnl_engine_destroy(d->engine);
    memset(d, 0, sizeof *d);
}

/* Reorder src memory into dst memory (same dims, different layouts). */
static int reorder(struct cpu_dnnl *d, dnnl_memory_t src, const dnnl_memory_desc_t *src_md,
                   dnnl_memory_t dst, const dnnl_memory_desc_t *dst_md)
{
    int err = 0;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_t prim = NULL;
    DNNL_TRY(
        dnnl_reorder_primitive_desc_create(&pd, src_md, d->engine, dst_md, d->engine, NULL),
        "reorder_primitive_desc_create");
    DNNL_TRY(dnnl_primitive_create(&prim, pd), "reorder primitive_create");
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, dst}};
    DNNL_TRY(dnnl_primitive_execute(prim, d->stream, 2, args), "reorder execute");
    DNNL_TRY(dnnl_stream_wait(d->stream), "stream_wait");
fail:
    if (prim) dnnl_primitive_destroy(prim);
    if (pd) dnnl_primitive_desc_destroy(pd);
    return err;
}

/* The matmul primitive for src rows `m` (DNNL_RUNTIME_DIM_VAL: any) against weights
 * in layout *w_md (format_tag_any: oneDNN's choice). */
static int make_matmul(dnnl_primitive_desc_t *pd, const struct cpu_linear *l,
                       struct cpu_dnnl *d, int64_t m, const dnnl_memory_desc_t *w_md)
{
    int err = 0;
    dnnl_memory_desc_t src_md, b_md, dst_md;
    dnnl_dims_t src_dims = {m, l->k}, b_dims = {1, l->n}, dst_dims = {m, l->n};
    DNNL_TRY(
        dnnl_memory_desc_init_by_tag(&src_md, 2, src_dims, dnnl_dt(l->src_dtype), dnnl_ab),
        "src md");
    DNNL_TRY(dnnl_memory_desc_init_by_tag(&b_md, 2, b_dims, dnnl_f32, dnnl_ab), "bias md");
    DNNL_TRY(
        dnnl_memory_desc_init_by_tag(&dst_md, 2, dst_dims, dnnl_dt(l->dst_dtype), dnnl_ab),
        "dst md");
    dnnl_matmul_desc_t desc;
    DNNL_TRY(
        dnnl_matmul_desc_init(&desc, &src_md, w_md, l->bias_buf ? &b_md : NULL, &dst_md),
        "matmul_desc_init");
    DNNL_TRY(dnnl_primitive_desc_create(pd, &desc, l->attr, d->engine, NULL),
             "matmul primitive_desc_create");
fail:
    return err;
}

/* The primitive for chunks of exactly `rows` rows, built on first use. */
static dnnl_primitive_t chunk_primitive(const struct cpu_linear *l, struct cpu_dnnl *d,
                                        int64_t rows)
{
    if (l->by_rows[rows]) return l->by_rows[rows];
    dnnl_primitive_desc_t pd = NULL;
    /* The weights layout was accepted for CPU_LINEAR_CHUNK rows at init; a row count
     * it is refused for would be a oneDNN bug, not an input error. */
    CHECK(make_matmul(&pd, l, d, rows, &l->weights_md) == 0);
    CHECK(dnnl_primitive_create(&l->by_rows[rows], pd) == dnnl_success);
    dnnl_primitive_desc_destroy(pd);
    return l->by_rows[rows];
}

int cpu_gemm_linear_init(struct cpu_linear *l, struct cpu_dnnl *d, const float *w,
                         const float *b, int64_t n, int64_t k, enum dtype src_dtype,
                         enum dtype dst_dtype, bool relu)
{
    int err = 0;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_memory_t plain = NULL;
    void *plain_buf = NULL;

    memset(l, 0, sizeof *l);
    l->k = k;
    l->n = n;
    l->src_dtype = src_dtype;
    l->dst_dtype = dst_dtype;
    if (b) {
        l->bias_buf = xmalloc((size_t)n * sizeof *l->bias_buf);
        memcpy(l->bias_buf, b, (size_t)n * sizeof *l->bias_buf);
    }

    DNNL_TRY(dnnl_primitive_attr_create(&l->attr), "attr_create");
    if (relu) {
        DNNL_TRY(dnnl_post_ops_create(&po), "post_ops_create");
        DNNL_TRY(dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f),
                 "append relu");
        DNNL_TRY(dnnl_primitive_attr_set_post_ops(l->attr, po), "set_post_ops");
    }

    dnnl_memory_desc_t any_md;
    dnnl_dims_t w_dims = {k, n};
    DNNL_TRY(dnnl_memory_desc_init_by_tag(&any_md, 2, w_dims, dnnl_dt(src_dtype),
                                          dnnl_format_tag_any),
             "weights md");
    const bool chunked = src_dtype != DTYPE_F32;
    err =
        make_matmul(&pd, l, d, chunked ? CPU_LINEAR_CHUNK : DNNL_RUNTIME_DIM_VAL, &any_md);
    if (err) goto fail;
    l->weights_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    if (chunked) {
        l->by_rows = calloc(CPU_LINEAR_CHUNK + 1, sizeof *l->by_rows);
        if (!l->by_rows) {
            err = err_set(ENG_ENOMEM, "out of memory for a linear layer");
            goto fail;
        }
        DNNL_TRY(dnnl_primitive_create(&l->by_rows[CPU_LINEAR_CHUNK], pd),
                 "matmul primitive_create");
    } else {
        DNNL_TRY(dnnl_primitive_create(&l->prim, pd), "matmul primitive_create");
    }

    /* The PyTorch matrix w [n, k] row-major is the [k, n] matrix with strides
     * {1, k}: oneDNN's "ba" tag. Convert it to the compute dtype first. */
    l->weights_bytes = dnnl_memory_desc_get_size(&l->weights_md);
    l->weights_buf = aligned_alloc(64, (l->weights_bytes + 63) / 64 * 64);
    if (!l->weights_buf) {
        err = err_set(ENG_ENOMEM, "out of memory for a %lldx%lld weight", (long long)n,
                      (long long)k);
        goto fail;
    }
    DNNL_TRY(dnnl_memory_create(&l->weights, &l->weights_md, d->engine, l->weights_buf),
             "weights memory");
    dnnl_memory_desc_t plain_md;
    DNNL_TRY(
        dnnl_memory_desc_init_by_tag(&plain_md, 2, w_dims, dnnl_dt(src_dtype), dnnl_ba),
        "plain weights md");
    size_t nk = (size_t)n * (size_t)k;
    if (src_dtype == DTYPE_F32) {
        plain_buf = (void *)w; /* oneDNN only reads it */
    } else {
        uint16_t *h = xmalloc(nk * sizeof *h);
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < nk; i++)
            h[i] = f32_to_bf16(w[i]);
        plain_buf = h;
    }
    DNNL_TRY(dnnl_memory_create(&plain, &plain_md, d->engine, plain_buf), "plain memory");
    err = reorder(d, plain, &plain_md, l->weights, &l->weights_md);
    if (err) goto fail;

    if (b) {
        dnnl_memory_desc_t b_md;
        dnnl_dims_t b_dims = {1, n};
        DNNL_TRY(dnnl_memory_desc_init_by_tag(&b_md, 2, b_dims, dnnl_f32, dnnl_ab),
                 "bias md");
        DNNL_TRY(dnnl_memory_create(&l->bias, &b_md, d->engine, l->bias_buf),
                 "bias memory");
    }
    err = 0;
fail:
    if (plain) dnnl_memory_destroy(plain);
    if (plain_buf && plain_buf != (void *)w) free(plain_buf);
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (po) dnnl_post_ops_destroy(po);
    if (err) cpu_gemm_linear_deinit(l);
    return err;
}

void cpu_gemm_linear_deinit(struct cpu_linear *l)
{
    if (l->prim) dnnl_primitive_destroy(l->prim);
    if (l->by_rows)
        for (int32_t i = 0; i <= CPU_LINEAR_CHUNK; i++)
            if (l->by_rows[i]) dnnl_primitive_destroy(l->by_rows[i]);
    if (l->attr) dnnl_primitive_attr_destroy(l->attr);
    if (l->weights) dnnl_memory_destroy(l->weights);
    if (l->bias) dnnl_memory_destroy(l->bias);
    free(l->by_rows);
    free(l->weights_buf);
    free(l->bias_buf);
    memset(l, 0, sizeof *l);
}

/* dst rows [0, m) from src rows [0, m) with one primitive. */
static void run_rows(const struct cpu_linear *l, struct cpu_dnnl *d, dnnl_primitive_t prim,
                     const void *src, int64_t m, void *dst)
{
    dnnl_memory_desc_t src_md, dst_md;
    dnnl_dims_t src_dims = {m, l->k}, dst_dims = {m, l->n};
    dnnl_memory_t src_mem = NULL, dst_mem = NULL;
    CHECK(dnnl_memory_desc_init_by_tag(&src_md, 2, src_dims, dnnl_dt(l->src_dtype),
                                       dnnl_ab) == dnnl_success);
    CHECK(dnnl_memory_desc_init_by_tag(&dst_md, 2, dst_dims, dnnl_dt(l->dst_dtype),
                                       dnnl_ab) == dnnl_success);
    CHECK(dnnl_memory_create(&src_mem, &src_md, d->engine, (void *)src) == dnnl_success);
    CHECK(dnnl_memory_create(&dst_mem, &dst_md, d->engine, dst) == dnnl_success);
    dnnl_exec_arg_t args[4] = {
        {DNNL_ARG_SRC, src_mem},
        {DNNL_ARG_WEIGHTS, l->weights},
        {DNNL_ARG_DST, dst_mem},
        {DNNL_ARG_BIAS, l->bias},
    };
    /* A failure here means a configuration accepted at init was refused at run
     * time: a bug, not an input error. */
    CHECK(dnnl_primitive_execute(prim, d->stream, l->bias ? 4 : 3, args) == dnnl_success);
    CHECK(dnnl_stream_wait(d->stream) == dnnl_success);
    dnnl_memory_destroy(src_mem);
    dnnl_memory_destroy(dst_mem);
}

void cpu_gemm_linear_run(const struct cpu_linear *l, struct cpu_dnnl *d, const void *src,
                         int64_t m, void *dst)
{
    if (!l->by_rows) {
        if (m > 0) run_rows(l, d, l->prim, src, m, dst);
        return;
    }
    const size_t src_row = (size_t)l->k * dtype_size(l->src_dtype);
    const size_t dst_row = (size_t)l->n * dtype_size(l->dst_dtype);
    for (int64_t r = 0; r < m; r += CPU_LINEAR_CHUNK) {
        const int64_t rows = MIN(CPU_LINEAR_CHUNK, m - r);
        run_rows(l, d, chunk_primitive(l, d, rows), (const char *)src + (size_t)r * src_row,
                 rows, (char *)dst + (size_t)r * dst_row);
    }
}
