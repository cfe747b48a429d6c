/*
 * cpu_amx.c - bf16 linear layers on AMX tiles (see cpu_amx.h).
 *
 * The micro-kernel holds up to 2 x 2 output tiles (32 rows x 32 columns, fp32) in
 * tmm0-3, and per 32 K loads two A tiles (tmm4-5: 16 rows x 32 bf16 of src) and two B
 * tiles (tmm6-7: packed weights), then four tdpbf16ps. Rows run in chunks of 256 (16
 * tiles), so a chunk of src stays in the core's L2 while every column pair's weights
 * stream past it, and each weight panel (32 columns x k) is reused by the chunk's 8
 * row pairs. Work items are (row chunk, column pair), split statically over the
 * OpenMP threads; no item splits K, so the sum order of an output never depends on M
 * or on the threads.
 * Compiled on every x86-64 build, with the AMX code under function target
 * attributes: cpu_amx_available decides at run time.
 */
#include "cpu_amx.h"

#include "err.h"
#include "util.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)

#include <cpuid.h>
#include <immintrin.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#define AMX_TARGET __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl")))
#define ARCH_REQ_XCOMP_PERM 0x1023 /* asm/prctl.h */
#define XFEATURE_XTILEDATA 18
#define ROW_CHUNK 256 /* rows whose src stays in L2 while the weights stream */

static bool amx_ok;
static pthread_once_t amx_once = PTHREAD_ONCE_INIT;

static void amx_probe(void)
{
    const char *env = getenv("H2O_CPU_AMX");
    if (env && strcmp(env, "0") == 0) return;
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return;
    const bool bf16 = (d >> 22) & 1, tile = (d >> 24) & 1;
    /* Linux hands out the 8 KiB tile state only to processes that ask (5.16 on). */
    amx_ok = bf16 && tile &&
             syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}

bool cpu_amx_available(void)
{
    pthread_once(&amx_once, amx_probe);
    return amx_ok;
}

/* Every tile 16 rows of 64 bytes: C 16 x 16 fp32, A 16 x 32 bf16, B 16 K pairs x
 * 16 columns x 2 bf16. */
struct tilecfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};

AMX_TARGET static void tiles_config(void)
{
    struct tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) {
        cfg.rows[t] = 16;
        cfg.colsb[t] = 64;
    }
    _tile_loadconfig(&cfg);
}

/*
 * MT x NT output tiles (1 or 2 each) over all of K: a0, a1 the src rows of the two
 * row tiles (row stride lda bytes), b0, b1 the packed panels of the two column tiles;
 * c [MT * 16, 32] fp32 gets the sums.
 */
AMX_TARGET static inline __attribute__((always_inline)) void
micro(const uint16_t *a0, const uint16_t *a1, int64_t lda, const uint16_t *b0,
      const uint16_t *b1, int64_t kb_n, float *c, const int MT, const int NT)
{
    _tile_zero(0);
    if (NT == 2) _tile_zero(1);
    if (MT == 2) _tile_zero(2);
    if (MT == 2 && NT == 2) _tile_zero(3);
    for (int64_t kb = 0; kb < kb_n; kb++) {
        _tile_loadd(4, a0 + kb * 32, lda);
        if (MT == 2) _tile_loadd(5, a1 + kb * 32, lda);
        _tile_loadd(6, b0 + kb * 512, 64);
        if (NT == 2) _tile_loadd(7, b1 + kb * 512, 64);
        _tile_dpbf16ps(0, 4, 6);
        if (NT == 2) _tile_dpbf16ps(1, 4, 7);
        if (MT == 2) _tile_dpbf16ps(2, 5, 6);
        if (MT == 2 && NT == 2) _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, c, 128);
    if (NT == 2) _tile_stored(1, c + 16, 128);
    if (MT == 2) _tile_stored(2, c + 16 * 32, 128);
    if (MT == 2 && NT == 2) _tile_stored(3, c + 16 * 32 + 16, 128);
}

/* The epilogue of one item: bias, ReLU, the dtype; only rows < m and columns < n, 16
 * columns at a time (bf16 rounded to nearest even, as f32_to_bf16: the sums are
 * finite). */
AMX_TARGET static void store_item(const float *c, int64_t row0, int64_t rows, int64_t col0,
                                  int64_t cols, int64_t n, const float *bias, bool relu,
                                  void *dst, enum dtype dt)
{
    for (int64_t j0 = 0; j0 < cols; j0 += 16) {
        const __mmask16 m =
            (__mmask16)(cols - j0 >= 16 ? 0xffffu : (1u << (cols - j0)) - 1u);
        const __m512 b =
            bias ? _mm512_maskz_loadu_ps(m, bias + col0 + j0) : _mm512_setzero_ps();
        for (int64_t i = 0; i < rows; i++) {
            __m512 v = _mm512_add_ps(_mm512_loadu_ps(c + i * 32 + j0), b);
            if (relu) v = _mm512_max_ps(v, _mm512_setzero_ps());
            const int64_t o = (row0 + i) * n + col0 + j0;
            if (dt == DTYPE_F32) {
                _mm512_mask_storeu_ps((float *)dst + o, m, v);
            } else {
                __m512i u = _mm512_castps_si512(v);
                u = _mm512_add_epi32(
                    u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
                                        _mm512_and_si512(_mm512_srli_epi32(u, 16),
                                                         _mm512_set1_epi32(1))));
                _mm256_mask_storeu_epi16((uint16_t *)dst + o, m,
                                         _mm512_cvtepi32_epi16(_mm512_srli_epi32(u, 16)));
            }
        }
    }
}

/* One thread's share of gemm_tiles: its tile configuration, its items of the
 * static schedule, its release. A function of its own, called inside the parallel
 * region, because clang outlines a parallel region into a function that does not
 * inherit AMX_TARGET (clang 14 then cannot compile the tile intrinsics in it). */
AMX_TARGET static void gemm_thread(const struct cpu_amx_weights *w, const uint16_t *src,
                                   const uint16_t *tail, int64_t m, const float *bias,
                                   bool relu, void *dst, enum dtype dt)
{
    const int64_t K = w->k, kb_n = K / 32, m_tiles = CEIL_DIV(m, 16);
    const int64_t n_pairs = CEIL_DIV(w->n_tiles, 2), chunks = CEIL_DIV(m, ROW_CHUNK);
    const int64_t lda = K * (int64_t)sizeof(uint16_t);
    tiles_config();
    float c[32 * 32];
#pragma omp for schedule(static)
    for (int64_t item = 0; item < chunks * n_pairs; item++) {
        const int64_t chunk = item / n_pairs, np = item % n_pairs;
        const int64_t nt0 = 2 * np, ntn = MIN(2, w->n_tiles - nt0);
        const uint16_t *b0 = w->packed + nt0 * kb_n * 512, *b1 = b0 + kb_n * 512;
        const int64_t mt_end = MIN(m_tiles, (chunk + 1) * (ROW_CHUNK / 16));
        for (int64_t mt0 = chunk * (ROW_CHUNK / 16); mt0 < mt_end; mt0 += 2) {
            const int64_t mtn = MIN(2, mt_end - mt0);
            /* A partial last row tile reads the zero-padded copy. */
            const uint16_t *a0 = (mt0 + 1) * 16 <= m ? src + mt0 * 16 * K : tail;
            const uint16_t *a1 = (mt0 + 2) * 16 <= m ? src + (mt0 + 1) * 16 * K : tail;
            if (mtn == 2 && ntn == 2)
                micro(a0, a1, lda, b0, b1, kb_n, c, 2, 2);
            else if (mtn == 2)
                micro(a0, a1, lda, b0, b1, kb_n, c, 2, 1);
            else if (ntn == 2)
                micro(a0, a1, lda, b0, b1, kb_n, c, 1, 2);
            else
                micro(a0, a1, lda, b0, b1, kb_n, c, 1, 1);
            store_item(c, mt0 * 16, MIN(mtn * 16, m - mt0 * 16), nt0 * 16,
                       MIN(ntn * 16, w->n - nt0 * 16), w->n, bias, relu, dst, dt);
        }
    }
    _tile_release();
}

static void gemm_tiles(const struct cpu_amx_weights *w, const uint16_t *src,
                       const uint16_t *tail, int64_t m, const float *bias, bool relu,
                       void *dst, enum dtype dt)
{
#pragma omp parallel
    gemm_thread(w, src, tail, m, bias, relu, dst, dt);
}

void cpu_amx_gemm(const struct cpu_amx_weights *w, const uint16_t *src, int64_t m,
                  const float *bias, bool relu, void *dst, enum dtype dst_dtype)
{
    CHECK(amx_ok);
    if (m <= 0) return;
    uint16_t *tail = NULL;
    if (m % 16) { /* the last rows, then zero rows up to 16 */
        const int64_t r0 = m / 16 * 16;
        tail = aligned_alloc(64, (size_t)(16 * w->k) * sizeof *tail);
        CHECK(tail);
        memset(tail, 0, (size_t)(16 * w->k) * sizeof *tail);
        memcpy(tail, src + r0 * w->k, (size_t)((m - r0) * w->k) * sizeof *tail);
    }
    gemm_tiles(w, src, tail, m, bias, relu, dst, dst_dtype);
    free(tail);
}

#else /* not x86-64: no AMX */

bool cpu_amx_available(void)
{
    return false;
}

void cpu_amx_gemm(const struct cpu_amx_weights *w, const uint16_t *src, int64_t m,
                  const float *bias, bool relu, void *dst, enum dtype dst_dtype)
{
    (void)w, (void)src, (void)m, (void)bias, (void)relu, (void)dst, (void)dst_dtype;
    CHECK(false);
}

#endif

bool cpu_amx_supports(int64_t k)
{
    return k > 0 && k % 32 == 0;
}

int cpu_amx_pack(struct cpu_amx_weights *w, const float *src, int64_t n, int64_t k)
{
    CHECK(cpu_amx_supports(k) && n > 0);
    memset(w, 0, sizeof *w);
    w->n = n;
    w->k = k;
    w->n_tiles = CEIL_DIV(n, 16);
    const int64_t kb_n = k / 32;
    const size_t elems = (size_t)(w->n_tiles * kb_n) * 512;
    w->packed = aligned_alloc(64, elems * sizeof *w->packed);
    if (!w->packed)
        return err_set(ENG_ENOMEM, "out of memory for a %lldx%lld AMX weight", (long long)n,
                       (long long)k);
        /* Tile (nt, kb), row r, column c, element e = W[nt * 16 + c][kb * 32 + 2 r + e]. */
#pragma omp parallel for schedule(static)
    for (int64_t nt = 0; nt < w->n_tiles; nt++)
        for (int64_t kb = 0; kb < kb_n; kb++) {
            uint16_t *tile = w->packed + (nt * kb_n + kb) * 512;
            for (int r = 0; r < 16; r++)
                for (int c = 0; c < 16; c++)
                    for (int e = 0; e < 2; e++) {
                        const int64_t col = nt * 16 + c, kk = kb * 32 + 2 * r + e;
                        tile[r * 32 + c * 2 + e] =
                            col < n ? f32_to_bf16(src[col * k + kk]) : 0;
                    }
        }
    return 0;
}

void cpu_amx_free(struct cpu_amx_weights *w)
{
    free(w->packed);
    memset(w, 0, sizeof *w);
}

size_t cpu_amx_bytes(const struct cpu_amx_weights *w)
{
    return (size_t)(w->n_tiles * (w->k / 32)) * 512 * sizeof(uint16_t);
}
