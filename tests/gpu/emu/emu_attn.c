/*
 * emu_attn.c - the decode and prefill attention kernels (cuda_decode_attn.cu,
 * cuda_prefill_attn.cu) run under the CPU emulation of cuda_emu.h against their host
 * references (cuda_ref.c), on random paged cases (tests/lib/paged_case.h) with
 * grouped-query attention (1, 2, 4 or 7 query heads per KV head) and, every other
 * case, a sliding window: K/V and positions identical, scores and lse within 1e-5
 * (relative above 1), outputs within half an fp16 ulp + 1e-5 of the unrounded
 * reference, victims identical (or a near tie within 1e-5). The same bar as
 * tests/gpu/test_cuda_decode_attn and test_cuda_prefill, which need a GPU. Every
 * case runs twice, with the fp16 cache and with the same pool made int8
 * (paged_pool_to_int8): there the int8 K/V and both scales must be identical.
 *
 * Not part of the meson suites: emu_attn.sh builds and runs it by hand (about a
 * minute for 40 + 40 cases on two cores). Prints one line per case and the total of
 * mismatches; exits 1 when there is any.
 */
#include "paged_case.h"
#include "cuda_ref.h"
#include "dtype.h"
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

cudaError_t cuda_decode_attn(const struct cuda_decode_attn_args *a, cudaStream_t stream);
cudaError_t cuda_prefill_attn(const struct cuda_prefill_attn_args *a, cudaStream_t stream);

static void *dup(const void *p, size_t n)
{
    void *q = malloc(n ? n : 1);
    memcpy(q, p, n);
    return q;
}
static long bad;
static int out_miss(const uint16_t *got, const float *want, int64_t n, const char *what)
{
    int m = 0;
    for (int64_t i = 0; i < n; i++) {
        double g = f16_to_f32(got[i]), r = want[i];
        if (!(fabs(g - r) <= fabs(r) / 2048.0 + 1e-5) && m++ < 3)
            printf("  %s[%lld] = %g want %g\n", what, (long long)i, g, r);
    }
    return m;
}

/* The int8 pool's arrays of the kernel's copy against the reference's: differences. */
static long int8_diffs(const struct paged_pool *p, const int8_t *k8, const int8_t *v8,
                       const float *ks, const float *vs)
{
    const int64_t el = paged_pool_slots(p);
    long b = 0;
    for (int64_t i = 0; i < el * p->head_dim; i++)
        b += k8[i] != p->k8[i] || v8[i] != p->v8[i];
    for (int64_t i = 0; i < el; i++)
        b += memcmp(&ks[i], &p->k_scale[i], 4) != 0 ||
             memcmp(&vs[i], &p->v_scale[i], 4) != 0;
    return b;
}

static void decode_case(struct decode_case *c)
{
    const int32_t H = c->pool.n_head, D = c->pool.head_dim, Hq = c->n_q_head;
    const int64_t el = paged_pool_slots(&c->pool), n_out = (int64_t)c->n_seq * Hq * D,
                  n_sh = (int64_t)c->n_seq * H;
    const bool i8 = c->pool.k8 != NULL;
    struct cuda_decode_attn_args d = dc_args(c);
    if (i8) {
        d.k8 = dup(c->pool.k8, el * D);
        d.v8 = dup(c->pool.v8, el * D);
        d.k_scale = dup(c->pool.k_scale, el * 4);
        d.v_scale = dup(c->pool.v_scale, el * 4);
    } else {
        d.k = dup(c->pool.k, el * D * 2);
        d.v = dup(c->pool.v, el * D * 2);
    }
    d.pos = dup(c->pool.pos, el * 4);
    d.score = dup(c->pool.score, el * 4);
    d.out = malloc(n_out * 2);
    d.victim = malloc(n_sh * 4);
    cuda_decode_attn(&d, 0);
    float *want = malloc(n_out * 4);
    struct cuda_decode_attn_args h = dc_args(c);
    cuda_ref_decode_attn(&h, want);
    long b = 0;
    if (i8)
        b += int8_diffs(&c->pool, d.k8, d.v8, d.k_scale, d.v_scale);
    else
        for (int64_t i = 0; i < el * D; i++)
            b += d.k[i] != c->pool.k[i] || d.v[i] != c->pool.v[i];
    for (int64_t i = 0; i < el; i++)
        b += d.pos[i] != c->pool.pos[i] || !(fabsf(d.score[i] - c->pool.score[i]) <= 1e-5f);
    b += out_miss(d.out, want, n_out, "out");
    int near = 0;
    for (int64_t i = 0; i < n_sh; i++)
        if (d.victim[i] != c->victim[i]) {
            int seq = i / H, hd = i % H;
            if (d.victim[i] >= 0 && c->victim[i] >= 0 &&
                fabsf(c->pool.score[dc_index(c, seq, d.victim[i], hd)] -
                      c->pool.score[dc_index(c, seq, c->victim[i], hd)]) <= 1e-5f)
                near++;
            else {
                b++;
                printf("  victim %lld: %d want %d\n", (long long)i, d.victim[i],
                       c->victim[i]);
            }
        }
    printf("decode%s n_seq=%d heads=%d/%d D=%d BS=%d window=%d max_slots=%d: %ld bad, %d "
           "near\n",
           i8 ? " int8" : "", c->n_seq, Hq, H, D, c->pool.block_size, c->window,
           c->max_slots, b, near);
    bad += b;
    free(d.k);
    free(d.v);
    free(d.k8);
    free(d.v8);
    free(d.k_scale);
    free(d.v_scale);
    free(d.pos);
    free(d.score);
    free(d.out);
    free(d.victim);
    free(want);
}

static void prefill_case(struct prefill_case *c)
{
    const int32_t H = c->pool.n_head, D = c->pool.head_dim, Hq = c->n_q_head;
    const int64_t el = paged_pool_slots(&c->pool);
    const bool i8 = c->pool.k8 != NULL;
    uint16_t *k = dup(c->pool.k, el * D * 2), *v = dup(c->pool.v, el * D * 2);
    int8_t *k8 = i8 ? dup(c->pool.k8, el * D) : NULL,
           *v8 = i8 ? dup(c->pool.v8, el * D) : NULL;
    float *ks = i8 ? dup(c->pool.k_scale, el * 4) : NULL;
    float *vs = i8 ? dup(c->pool.v_scale, el * 4) : NULL;
    int32_t *pos = dup(c->pool.pos, el * 4);
    float *score = dup(c->pool.score, el * 4);
    long b = 0;
    for (int32_t step = 0; step < c->n_steps; step++) {
        struct prefill_batch pb;
        pc_batch(c, step, &pb);
        const int64_t n_out = (int64_t)pb.n_tok * Hq * D;
        struct cuda_prefill_attn_args d = pc_args(c, &pb);
        if (i8) {
            d.k8 = k8, d.v8 = v8, d.k_scale = ks, d.v_scale = vs;
        } else {
            d.k = k, d.v = v;
        }
        d.pos = pos;
        d.score = score;
        d.out = malloc(n_out * 2);
        d.lse = malloc(pb.n_tok * Hq * 4);
        cuda_prefill_attn(&d, 0);
        float *want = malloc(n_out * 4);
        struct cuda_prefill_attn_args h = pc_args(c, &pb);
        cuda_ref_prefill_attn(&h, want);
        if (i8)
            b += int8_diffs(&c->pool, k8, v8, ks, vs);
        else
            for (int64_t i = 0; i < el * D; i++)
                b += k[i] != c->pool.k[i] || v[i] != c->pool.v[i];
        for (int64_t i = 0; i < el; i++) {
            float m = fmaxf(1.0f, fabsf(c->pool.score[i]));
            if (pos[i] != c->pool.pos[i] ||
                !(fabsf(score[i] - c->pool.score[i]) <= 1e-5f * m)) {
                if (b < 3)
                    printf("  step %d slot %lld: pos %d/%d score %g/%g\n", step,
                           (long long)i, pos[i], c->pool.pos[i], score[i],
                           c->pool.score[i]);
                b++;
            }
        }
        for (int64_t i = 0; i < (int64_t)pb.n_tok * Hq; i++) {
            float m = fmaxf(1.0f, fabsf(pb.lse[i]));
            if (!(fabsf(d.lse[i] - pb.lse[i]) <= 1e-5f * m)) b++;
        }
        b += out_miss(d.out, want, n_out, "out");
        free(d.out);
        free(d.lse);
        free(want);
        pc_batch_free(&pb);
    }
    printf("prefill%s n_seq=%d heads=%d/%d D=%d BS=%d window=%d max_p=%d steps=%d: %ld "
           "bad\n",
           i8 ? " int8" : "", c->n_seq, Hq, H, D, c->pool.block_size, c->window, c->max_p,
           c->n_steps, b);
    bad += b;
    free(k);
    free(v);
    free(k8);
    free(v8);
    free(ks);
    free(vs);
    free(pos);
    free(score);
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 12;
    static const int32_t dims[] = {64, 16, 80, 2}, reps[] = {1, 2, 4, 7};
    uint64_t st = 21;
    for (int k = 0; k < n; k++) {
        struct decode_case c;
        const int32_t n_seq = 1 + dc_int(&st, 3), KV = 1 + dc_int(&st, 2);
        const int32_t rep = reps[dc_int(&st, 4)], D = dims[dc_int(&st, 4)];
        const int32_t BS = k % 3 ? 16 : 5, max_b = 2 + dc_int(&st, k % 4 == 0 ? 300 : 40);
        const int32_t window = k % 2 ? 0 : 1 + dc_int(&st, 2 * max_b);
        dc_make_gqa(&c, &st, n_seq, KV * rep, KV, D, BS, max_b, k % 5 == 0, window);
        decode_case(&c);
        dc_free(&c);
        /* A case of the same shape from another stream, as an int8 cache. */
        uint64_t st8 = st ^ 0x1234;
        dc_make_gqa(&c, &st8, n_seq, KV * rep, KV, D, BS, max_b, k % 5 == 0, window);
        paged_pool_to_int8(&c.pool);
        decode_case(&c);
        dc_free(&c);
    }
    for (int k = 0; k < n; k++) {
        struct prefill_case c;
        const int32_t n_seq = 1 + dc_int(&st, 2), KV = 1 + dc_int(&st, 2);
        const int32_t rep = reps[dc_int(&st, 4)], D = dims[k % 4];
        const int32_t BS = k % 3 ? 16 : 5, max_p = 1 + dc_int(&st, k % 4 == 0 ? 90 : 40);
        const int32_t window = k % 2 ? 0 : 1 + dc_int(&st, max_p);
        const int32_t chunks = 1 + dc_int(&st, PC_MAX_CHUNKS);
        pc_make_gqa(&c, &st, n_seq, KV * rep, KV, D, BS, max_p, chunks, window);
        prefill_case(&c);
        pc_free(&c);
        uint64_t st8 = st ^ 0x1234;
        pc_make_gqa(&c, &st8, n_seq, KV * rep, KV, D, BS, max_p, chunks, window);
        paged_pool_to_int8(&c.pool);
        prefill_case(&c);
        pc_free(&c);
    }
    printf("TOTAL bad %ld\n", bad);
    return bad != 0;
}
