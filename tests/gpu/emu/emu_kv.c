/*
 * emu_kv.c - the KV state kernels that move or clear slots (cuda_kv_compact.cu,
 * cuda_kv_blocks.cu's init) run under the CPU emulation of cuda_emu.h against their
 * host references (cuda_ref.c), with the fp16 cache and with the int8 one (its bytes
 * and both scales): every byte of the pool identical after the call, as
 * tests/gpu/test_cuda_kv_compact and test_cuda_kv_blocks require on a GPU. The
 * compaction moves slots in place in chunks whose sources may be earlier chunks'
 * destinations, so barrier placement matters here as in the attention kernels.
 *
 * Not part of the meson suites: emu_attn.sh builds and runs it with the others.
 * Prints one line per case and the total of mismatches; exits 1 when there is any.
 */
#include "paged_case.h"
#include "cuda_kernels.h"
#include "dtype.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *dup(const void *p, size_t n)
{
    void *q = malloc(n ? n : 1);
    memcpy(q, p, n);
    return q;
}
static long bad;

/* One compaction, kernel on copies of the case's pool, reference on the case. */
static void compact_case(uint64_t *st, int32_t H, int32_t D, int32_t BS, int32_t n,
                         int32_t n_keep, bool i8)
{
    struct compact_case c;
    cc_make(&c, st, H, D, BS, n, n_keep);
    if (i8) paged_pool_to_int8(&c.pool);
    const int64_t el = cc_slots(&c);
    struct cuda_kv_compact_args d = cc_args(&c);
    if (i8) {
        d.k8 = dup(c.pool.k8, el * D), d.v8 = dup(c.pool.v8, el * D);
        d.k_scale = dup(c.pool.k_scale, el * 4), d.v_scale = dup(c.pool.v_scale, el * 4);
    } else {
        d.k = dup(c.pool.k, el * D * 2), d.v = dup(c.pool.v, el * D * 2);
    }
    d.pos = dup(c.pool.pos, el * 4);
    d.score = dup(c.pool.score, el * 4);
    cuda_kv_compact(&d, 0);
    struct cuda_kv_compact_args h = cc_args(&c);
    cuda_ref_kv_compact(&h);
    long b = 0;
    if (i8) {
        b += memcmp(d.k8, c.pool.k8, el * D) != 0 || memcmp(d.v8, c.pool.v8, el * D) != 0;
        b += memcmp(d.k_scale, c.pool.k_scale, el * 4) != 0 ||
             memcmp(d.v_scale, c.pool.v_scale, el * 4) != 0;
    } else {
        b += memcmp(d.k, c.pool.k, el * D * 2) != 0 ||
             memcmp(d.v, c.pool.v, el * D * 2) != 0;
    }
    b += memcmp(d.pos, c.pool.pos, el * 4) != 0 ||
         memcmp(d.score, c.pool.score, el * 4) != 0;
    printf("compact%s H=%d D=%d BS=%d n=%d keep=%d: %ld bad\n", i8 ? " int8" : "", H, D, BS,
           n, n_keep, b);
    bad += b;
    free(d.k), free(d.v), free(d.k8), free(d.v8), free(d.k_scale), free(d.v_scale);
    free(d.pos), free(d.score);
    cc_free(&c);
}

/* One int8 block init over random bytes, kernel against reference. */
static void init_i8_case(uint64_t *st, int32_t H, int32_t D, int32_t BS, int32_t n_pool,
                         int32_t n)
{
    const int64_t ns = (int64_t)H * BS * n_pool;
    int8_t *v8 = dc_alloc((size_t)(ns * D));
    float *vs = dc_alloc((size_t)ns * 4), *score = dc_alloc((size_t)ns * 4);
    int32_t *pos = dc_alloc((size_t)ns * 4), *blocks = dc_alloc((size_t)(n + 1) * 4);
    for (int64_t e = 0; e < ns * D; e++)
        v8[e] = (int8_t)(dc_int(st, 255) - 127);
    for (int64_t e = 0; e < ns; e++) {
        vs[e] = dc_float(st, 0.0f, 1.0f);
        score[e] = dc_float(st, 0.0f, 9.0f);
        pos[e] = dc_int(st, 1000);
    }
    dc_shuffle_blocks(st, blocks, n_pool, n);
    int8_t *gv8 = dup(v8, ns * D);
    float *gvs = dup(vs, ns * 4), *gscore = dup(score, ns * 4);
    int32_t *gpos = dup(pos, ns * 4);
    cuda_kv_blocks_init_i8(gv8, gvs, gpos, gscore, blocks, n, H, D, BS, 0);
    cuda_ref_kv_init_blocks_i8(v8, vs, pos, score, blocks, n, H, D, BS);
    const long b = (memcmp(gv8, v8, ns * D) != 0) + (memcmp(gvs, vs, ns * 4) != 0) +
                   (memcmp(gpos, pos, ns * 4) != 0) + (memcmp(gscore, score, ns * 4) != 0);
    printf("init int8 H=%d D=%d BS=%d pool=%d n=%d: %ld bad\n", H, D, BS, n_pool, n, b);
    bad += b;
    free(v8), free(vs), free(score), free(pos), free(blocks);
    free(gv8), free(gvs), free(gscore), free(gpos);
}

int main(int argc, char **argv)
{
    const int n = argc > 1 ? atoi(argv[1]) : 12;
    static const int32_t bss[] = {16, 5, 1, 32};
    uint64_t st = 41;
    for (int k = 0; k < n; k++) {
        const int32_t BS = bss[k % 4], H = 1 + dc_int(&st, 4),
                      D = 2 * (1 + dc_int(&st, 64));
        const int32_t slots = 1 + dc_int(&st, 150);
        const int32_t keep = k % 7 == 0 ? slots : k % 7 == 1 ? 0 : 1 + dc_int(&st, slots);
        uint64_t st8 = st;
        compact_case(&st, H, D, BS, slots, keep, false);
        compact_case(&st8, H, D, BS, slots, keep, true);
        init_i8_case(&st, H, D, BS, 2 + dc_int(&st, 8), dc_int(&st, 3));
    }
    printf("TOTAL bad %ld\n", bad);
    return bad != 0;
}
