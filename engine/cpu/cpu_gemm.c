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
 * as fast. oneDNN 3.2 (-Donednn_prefix) still picks gemm:jit for a runtime-M bf16
 * matmul (avx512_core_bf16, 2026-12-02), so the chunks stay with it too.
 *
 * Two kinds of layer skip oneDNN, for one reason: a row's result must not depend on
 * how many rows share the call (nor on the thread count), or a sequence's output
 * would depend on the rest of its batch. bf16 on AMX runs cpu_amx.c's kernel
 * (cap_isa_below_amx says why), and fp32 where oneDNN has no AVX-512 kernels runs
 * cpu_avx2.c's (cpu_avx2.h says why).
 */
#include "cpu_gemm.h"

#include "err.h"
#include "util.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* The engine's thread count (omp_set_num_threads per rank thread, OMP_NUM_THREADS)
 * bounds the GEMMs only when oneDNN's threads are OpenMP's too: a TBB build (PyPI's
 * `onednn` wheels) would take every core, and TBB's limit (tbb::global_control) has
 * no C API. */
#if DNNL_CPU_RUNTIME != DNNL_RUNTIME_OMP
#error "oneDNN must be an OpenMP build (DNNL_CPU_RUNTIME OMP): see docs/benchmarks.md"
#endif

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

/*
 * The C API's two generations, in one place. oneDNN 2.x memory descriptors are
 * structs the caller fills and passes by pointer, and a matmul is an operation
 * descriptor first; 3.x (-Donednn_prefix, docs/benchmarks.md) makes descriptors
 * opaque heap handles, passed by value and destroyed by their owner, and builds the
 * primitive descriptor in one call. Everything below this block is written once
 * against md_ref (how a descriptor is passed) and these helpers.
 */
#if DNNL_VERSION_MAJOR >= 3
typedef const_dnnl_memory_desc_t md_ref;
#define MD(md) (md)

static dnnl_status_t md_make(dnnl_memory_desc_t *md, int64_t rows, int64_t cols,
                             dnnl_data_type_t dt, dnnl_format_tag_t tag)
{
    dnnl_dims_t dims = {rows, cols};
    return dnnl_memory_desc_create_with_tag(md, 2, dims, dt, tag);
}

/* Frees what md_make or md_keep made: a 3.x descriptor is heap memory of its owner's. */
static void md_free(dnnl_memory_desc_t *md)
{
    if (*md) dnnl_memory_desc_destroy(*md);
    *md = NULL;
}

/* A copy of what pd reports, that outlives pd. */
static dnnl_status_t md_keep(dnnl_memory_desc_t *md, const_dnnl_primitive_desc_t pd,
                             dnnl_query_t what)
{
    return dnnl_memory_desc_clone(md, dnnl_primitive_desc_query_md(pd, what, 0));
}

static dnnl_status_t matmul_pd_create(dnnl_primitive_desc_t *pd, dnnl_engine_t engine,
                                      md_ref src, md_ref w, md_ref bias, md_ref dst,
                                      const_dnnl_primitive_attr_t attr)
{
    return dnnl_matmul_primitive_desc_create(pd, engine, src, w, bias, dst, attr);
}

/* 3.x dropped the post-op's output scale (scales moved to attributes). */
static dnnl_status_t append_relu(dnnl_post_ops_t po)
{
    return dnnl_post_ops_append_eltwise(po, dnnl_eltwise_relu, 0.0f, 0.0f);
}
#else
typedef const dnnl_memory_desc_t *md_ref;
#define MD(md) (&(md))

static dnnl_status_t md_make(dnnl_memory_desc_t *md, int64_t rows, int64_t cols,
                             dnnl_data_type_t dt, dnnl_format_tag_t tag)
{
    dnnl_dims_t dims = {rows, cols};
    return dnnl_memory_desc_init_by_tag(md, 2, dims, dt, tag);
}

static void md_free(dnnl_memory_desc_t *md)
{
    (void)md; /* a 2.x descriptor is a plain struct */
}

static dnnl_status_t md_keep(dnnl_memory_desc_t *md, const_dnnl_primitive_desc_t pd,
                             dnnl_query_t what)
{
    *md = *dnnl_primitive_desc_query_md(pd, what, 0);
    return dnnl_success;
}

static dnnl_status_t matmul_pd_create(dnnl_primitive_desc_t *pd, dnnl_engine_t engine,
                                      md_ref src, md_ref w, md_ref bias, md_ref dst,
                                      const_dnnl_primitive_attr_t attr)
{
    dnnl_matmul_desc_t desc;
    dnnl_status_t st = dnnl_matmul_desc_init(&desc, src, w, bias, dst);
    return st != dnnl_success ? st
                              : dnnl_primitive_desc_create(pd, &desc, attr, engine, NULL);
}

static dnnl_status_t append_relu(dnnl_post_ops_t po)
{
    return dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f);
}
#endif

/*
 * Cap oneDNN below AMX, once per process and before its first primitive (later calls
 * are refused by oneDNN), unless the user chose a cap (ONEDNN_MAX_CPU_ISA, or
 * oneDNN 2.x's DNNL_MAX_CPU_ISA). On AMX CPUs (Sapphire Rapids on) oneDNN 2.6 runs a
 * bf16 matmul of a few rows on AVX512-BF16 kernels and of more rows on AMX tiles,
 * which sum in another order: a row's result would then depend on how many rows
 * share its step, and a sequence's output on the rest of the batch
 * (tests/backend/test_cpu_gemm.c caught it). bf16 layers run on AMX through our own
 * kernel instead (cpu_amx.c), whose rows do not depend on the batch.
 */
static void cap_isa_below_amx(void)
{
    if (getenv("ONEDNN_MAX_CPU_ISA") || getenv("DNNL_MAX_CPU_ISA")) return;
    (void)dnnl_set_max_cpu_isa(dnnl_cpu_isa_avx512_core_bf16);
}
static pthread_once_t isa_once = PTHREAD_ONCE_INIT;

/* Whether oneDNN may run its AVX-512 kernels (avx512_core or an ISA that extends it:
 * each dnnl_cpu_isa_t value holds the bits of the ones it extends). There its fp32
 * rows do not depend on the row count and it runs bf16; below, neither holds. */
static bool onednn_avx512(void)
{
    pthread_once(&isa_once, cap_isa_below_amx);
    return (dnnl_get_effective_cpu_isa() & dnnl_cpu_isa_avx512_core) ==
           dnnl_cpu_isa_avx512_core;
}

/* AMX CPUs have AVX-512 too; a layer AMX does not take (K not a multiple of 32) runs
 * on oneDNN. */
bool cpu_gemm_has_bf16(void)
{
    return onednn_avx512();
}

/* Whether fp32 layers run cpu_avx2.c's kernel rather than oneDNN. */
static bool fp32_on_avx2(void)
{
    return !onednn_avx512() && cpu_avx2_available();
}

const char *cpu_gemm_isa(void)
{
    pthread_once(&isa_once, cap_isa_below_amx);
    switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_sse41: return "sse4.1 (fp32 rows depend on the batch)";
    case dnnl_cpu_isa_avx: return "avx (fp32 rows depend on the batch)";
    case dnnl_cpu_isa_avx2:
        return fp32_on_avx2() ? "avx2, fp32 GEMMs on our AVX2 kernel"
                              : "avx2 (fp32 rows depend on the batch)";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16:
        return cpu_amx_available() ? "avx512_core_bf16, bf16 GEMMs on our AMX kernel"
                                   : "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx (rows depend on the batch)";
    default: return "other";
    }
}

int cpu_gemm_init(struct cpu_dnnl *d)
{
    int err = 0;
    memset(d, 0, sizeof *d);
    pthread_once(&isa_once, cap_isa_below_amx); /* tensor-parallel ranks init at once */
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
static int reorder(struct cpu_dnnl *d, dnnl_memory_t src, md_ref src_md, dnnl_memory_t dst,
                   md_ref dst_md)
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
 * in layout w_md (format_tag_any: oneDNN's choice). */
static int make_matmul(dnnl_primitive_desc_t *pd, const struct cpu_linear *l,
                       struct cpu_dnnl *d, int64_t m, md_ref w_md)
{
    int err = 0;
    dnnl_memory_desc_t src_md, b_md, dst_md;
    memset(&src_md, 0, sizeof src_md); /* md_free-able whatever fails */
    memset(&b_md, 0, sizeof b_md);
    memset(&dst_md, 0, sizeof dst_md);
    DNNL_TRY(md_make(&src_md, m, l->k, dnnl_dt(l->src_dtype), dnnl_ab), "src md");
    DNNL_TRY(md_make(&b_md, 1, l->n, dnnl_f32, dnnl_ab), "bias md");
    DNNL_TRY(md_make(&dst_md, m, l->n, dnnl_dt(l->dst_dtype), dnnl_ab), "dst md");
    DNNL_TRY(matmul_pd_create(pd, d->engine, MD(src_md), w_md,
                              l->bias_buf ? MD(b_md) : NULL, MD(dst_md), l->attr),
             "matmul primitive_desc_create");
fail:
    md_free(&src_md);
    md_free(&b_md);
    md_free(&dst_md);
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
    CHECK(make_matmul(&pd, l, d, rows, MD(l->weights_md)) == 0);
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
    dnnl_memory_desc_t any_md, plain_md, b_md;
    memset(&any_md, 0, sizeof any_md); /* md_free-able whatever fails */
    memset(&plain_md, 0, sizeof plain_md);
    memset(&b_md, 0, sizeof b_md);

    memset(l, 0, sizeof *l);
    l->k = k;
    l->n = n;
    l->src_dtype = src_dtype;
    l->dst_dtype = dst_dtype;
    if (b) {
        l->bias_buf = xmalloc((size_t)n * sizeof *l->bias_buf);
        memcpy(l->bias_buf, b, (size_t)n * sizeof *l->bias_buf);
    }

    if (src_dtype == DTYPE_BF16 && cpu_amx_supports(k) && cpu_amx_available()) {
        l->amx = true;
        l->relu = relu;
        err = cpu_amx_pack(&l->amx_w, w, n, k);
        if (err) goto fail;
        l->weights_bytes = cpu_amx_bytes(&l->amx_w);
        return 0;
    }
    if (src_dtype == DTYPE_F32 && dst_dtype == DTYPE_F32 && fp32_on_avx2()) {
        l->avx2 = true;
        l->relu = relu;
        err = cpu_avx2_pack(&l->avx2_w, w, n, k);
        if (err) goto fail;
        l->weights_bytes = cpu_avx2_bytes(&l->avx2_w);
        return 0;
    }
    /* oneDNN 2.6 builds a bf16 matmul below AVX-512 and then fails to run it. */
    if (src_dtype != DTYPE_F32 && !cpu_gemm_has_bf16()) {
        err = err_set(ENG_EUNSUPPORTED,
                      "CPU backend: %s GEMMs need AVX-512 or AMX, which this CPU lacks; "
                      "use --dtype fp32",
                      dtype_name(src_dtype));
        goto fail;
    }
    DNNL_TRY(dnnl_primitive_attr_create(&l->attr), "attr_create");
    if (relu) {
        DNNL_TRY(dnnl_post_ops_create(&po), "post_ops_create");
        DNNL_TRY(append_relu(po), "append relu");
        DNNL_TRY(dnnl_primitive_attr_set_post_ops(l->attr, po), "set_post_ops");
    }

    DNNL_TRY(md_make(&any_md, k, n, dnnl_dt(src_dtype), dnnl_format_tag_any), "weights md");
    const bool chunked = src_dtype != DTYPE_F32;
    err = make_matmul(&pd, l, d, chunked ? CPU_LINEAR_CHUNK : DNNL_RUNTIME_DIM_VAL,
                      MD(any_md));
    if (err) goto fail;
    DNNL_TRY(md_keep(&l->weights_md, pd, dnnl_query_weights_md), "weights md query");
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
    l->weights_bytes = dnnl_memory_desc_get_size(MD(l->weights_md));
    l->weights_buf = aligned_alloc(64, (l->weights_bytes + 63) / 64 * 64);
    if (!l->weights_buf) {
        err = err_set(ENG_ENOMEM, "out of memory for a %lldx%lld weight", (long long)n,
                      (long long)k);
        goto fail;
    }
    DNNL_TRY(dnnl_memory_create(&l->weights, MD(l->weights_md), d->engine, l->weights_buf),
             "weights memory");
    DNNL_TRY(md_make(&plain_md, k, n, dnnl_dt(src_dtype), dnnl_ba), "plain weights md");
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
    DNNL_TRY(dnnl_memory_create(&plain, MD(plain_md), d->engine, plain_buf),
             "plain memory");
    err = reorder(d, plain, MD(plain_md), l->weights, MD(l->weights_md));
    if (err) goto fail;

    if (b) {
        DNNL_TRY(md_make(&b_md, 1, n, dnnl_f32, dnnl_ab), "bias md");
        DNNL_TRY(dnnl_memory_create(&l->bias, MD(b_md), d->engine, l->bias_buf),
                 "bias memory");
    }
    err = 0;
fail:
    if (plain) dnnl_memory_destroy(plain);
    if (plain_buf && plain_buf != (void *)w) free(plain_buf);
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (po) dnnl_post_ops_destroy(po);
    md_free(&any_md);
    md_free(&plain_md);
    md_free(&b_md);
    if (err) cpu_gemm_linear_deinit(l);
    return err;
}

void cpu_gemm_linear_deinit(struct cpu_linear *l)
{
    if (l->amx) cpu_amx_free(&l->amx_w);
    if (l->avx2) cpu_avx2_free(&l->avx2_w);
    if (l->prim) dnnl_primitive_destroy(l->prim);
    if (l->by_rows)
        for (int32_t i = 0; i <= CPU_LINEAR_CHUNK; i++)
            if (l->by_rows[i]) dnnl_primitive_destroy(l->by_rows[i]);
    if (l->attr) dnnl_primitive_attr_destroy(l->attr);
    if (l->weights) dnnl_memory_destroy(l->weights);
    if (l->bias) dnnl_memory_destroy(l->bias);
    md_free(&l->weights_md);
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
    dnnl_memory_t src_mem = NULL, dst_mem = NULL;
    CHECK(md_make(&src_md, m, l->k, dnnl_dt(l->src_dtype), dnnl_ab) == dnnl_success);
    CHECK(md_make(&dst_md, m, l->n, dnnl_dt(l->dst_dtype), dnnl_ab) == dnnl_success);
    CHECK(dnnl_memory_create(&src_mem, MD(src_md), d->engine, (void *)src) == dnnl_success);
    CHECK(dnnl_memory_create(&dst_mem, MD(dst_md), d->engine, dst) == dnnl_success);
    md_free(&src_md); /* the memory objects keep their own copies */
    md_free(&dst_md);
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
    if (l->amx) {
        cpu_amx_gemm(&l->amx_w, src, m, l->bias_buf, l->relu, dst, l->dst_dtype);
        return;
    }
    if (l->avx2) {
        cpu_avx2_gemm(&l->avx2_w, src, m, l->bias_buf, l->relu, dst);
        return;
    }
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
