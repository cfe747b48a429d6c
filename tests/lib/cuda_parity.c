/*
 * cuda_parity.c - the CUDA backend against the CPU backend (cuda_parity.h): runs of
 * engine_run.h's table on both, compared step by step and slot by slot.
 */
#include "cuda_parity.h"

#include "test.h"

#include "cuda_ref.h"

#include <math.h>

uint64_t parity_seed = PARITY_SEED;
/* parity_run's KV dtype: int8 during parity_check_int8, else the backend's default. */
static bool parity_int8;
struct parity_worst parity_worst;

/* Every case of engine_run.h's table on `dev` with `tp` ranks, prompts in chunks of
 * `chunk`. */
static bool parity_run(struct erun *r, const char *name, enum be_device dev, int tp,
                       int32_t chunk)
{
    struct model_opts mo;
    /* The CPU reference keeps its slot state as a device does (a victim keeps its pos
     * and score until the next token lands in it), so that the state read back after
     * the last step is comparable; its tokens and logits are the same either way
     * (test_device_state). */
    erun_opts(&mo, dev, tp, dev == BE_DEVICE_CPU);
    if (parity_int8) {
        mo.kv_dtype = DTYPE_I8;
        mo.kv_dtype_set = true;
    }
    return erun_run(r, name, &mo, chunk, parity_seed);
}

/* The gap between the two largest logits of a row. */
static double top2_gap(const float *x, int32_t n)
{
    float a = -INFINITY, b = -INFINITY;
    for (int32_t i = 0; i < n; i++) {
        if (x[i] > a) {
            b = a;
            a = x[i];
        } else if (x[i] > b) {
            b = x[i];
        }
    }
    return (double)a - (double)b;
}

/* One sequence's slot state of every layer from a backend: kv_read_state where the
 * state is on the device (kv_state NULL), else gathered from kv_state's host arrays.
 * pos, score [n_layer, n_kv_head, n_slots]. */
static void read_state(struct model *m, const struct kv_seq *kv, int32_t *pos, float *score)
{
    const struct be_ops *ops = m->be.ops;
    const int32_t L = m->cfg.n_layer, H = m->cfg.n_kv_head, n = kv->n_slots;
    int32_t *lp = NULL;
    float *ls = NULL;
    if (!ops->kv_state) {
        CHECK(ops->kv_read_state(m->be.ctx, kv->blocks, n, pos, score) == 0);
        return;
    }
    for (int32_t l = 0; l < L; l++) {
        CHECK(ops->kv_state(m->be.ctx, l, &lp, &ls) == 0);
        cuda_ref_kv_gather_state(pos + (size_t)l * H * n, score + (size_t)l * H * n, lp, ls,
                                 kv->blocks, n, H, kv->block_size);
    }
}

/* Sort a head's slots by position (insertion sort: a few dozen slots). */
static void sort_by_pos(int32_t *pos, float *score, int32_t n)
{
    for (int32_t i = 1; i < n; i++)
        for (int32_t j = i; j > 0 && pos[j - 1] > pos[j]; j--) {
            const int32_t p = pos[j];
            const float q = score[j];
            pos[j] = pos[j - 1];
            score[j] = score[j - 1];
            pos[j - 1] = p;
            score[j - 1] = q;
        }
}

/* kv_copy_blocks (a fork): copy sequence e's blocks to fresh ones of the pool and read
 * the copy's state back; it must equal the original's bit for bit. want_pos /
 * want_score are the original's state, already sorted per head by sort_by_pos. */
static void check_copy(struct erun *r, const struct eseq *e, const int32_t *want_pos,
                       const float *want_score)
{
    const int32_t nb = e->kv.n_blocks, ns = e->kv.n_slots;
    const size_t n = (size_t)r->m->cfg.n_layer * (size_t)r->m->cfg.n_kv_head * (size_t)ns;
    int32_t *dst = xmalloc((size_t)nb * 4), *pos = xmalloc(n * 4);
    float *score = xmalloc(n * 4);
    CHECK(kv_pool_alloc(&r->pool, nb, dst) == 0);
    r->m->be.ops->kv_init_blocks(r->m->be.ctx, dst, nb);
    r->m->be.ops->kv_copy_blocks(r->m->be.ctx, e->kv.blocks, dst, nb);
    struct kv_seq copy = e->kv;
    copy.blocks = dst;
    read_state(r->m, &copy, pos, score);
    for (size_t row = 0; row < n / (size_t)ns; row++)
        sort_by_pos(pos + row * (size_t)ns, score + row * (size_t)ns, ns);
    if (memcmp(pos, want_pos, n * 4) || memcmp(score, want_score, n * 4))
        TEST_FAIL("kv_copy_blocks: the copy's state differs from the original's");
    kv_pool_free(&r->pool, dst, nb);
    free(dst);
    free(pos);
    free(score);
}

/* Compare run `got` with reference `ref` case by case, logits within tol; the largest
 * logit difference goes to *worst. With exact_heads every head must hold the same
 * tokens as the reference's; without, a head that holds other ones (a near-tie of two
 * victims' scores) is counted and printed, its scores are not compared, and at most
 * one head in fifty (at least one) may differ. The fake device runs the host
 * references, so test_cuda_host asks for exact heads; a real GPU rounds its own way,
 * so test_cuda_model does not. */
static void compare(struct erun *ref, struct erun *got, double tol, double *worst,
                    const char *what, bool exact_heads)
{
    const int32_t V = ref->m->cfg.vocab_size, L = ref->m->cfg.n_layer,
                  H = ref->m->cfg.n_kv_head;
    for (int32_t c = 0; c < ERUN_CASES; c++) {
        const struct erun_case *k = &erun_cases[c];
        struct eseq *a = &ref->es[c], *b = &got->es[c];
        int32_t diff = -1;
        for (int32_t t = 0; t < STEPS && diff < 0; t++)
            if (a->tokens[a->P + t] != b->tokens[b->P + t]) diff = t;
        const int32_t rows = diff < 0 ? STEPS + 1 : diff + 1;
        const double d = max_abs_diff(a->logits, b->logits, (int64_t)rows * V);
        *worst = MAX(*worst, d);
        printf("# %s case %d (P %d, %s H %d R %d): max |logit diff| %.3g over %d steps%s\n",
               what, c, a->P, k->full ? "full" : "h2o", k->H, k->R, d, rows,
               diff < 0 ? "" : " (then a token differs)");
        if (!(d <= tol)) TEST_FAIL("%s case %d: logits differ by %g > %g", what, c, d, tol);
        if (!k->full && b->kv.n_evicted == 0) TEST_FAIL("%s case %d: no eviction", what, c);
        if (diff >= 0) {
            /* Only a near-tie may flip: the reference's best two within 2 tol. */
            const double gap = top2_gap(a->logits + (int64_t)diff * V, V);
            if (!(gap <= 2 * tol))
                TEST_FAIL("%s case %d: token %d differs at step %d with a margin of %g",
                          what, c, b->tokens[b->P + diff], diff, gap);
            continue;
        }
        EXPECT_EQ(a->kv.n_evicted, b->kv.n_evicted);
        EXPECT_EQ(a->kv.n_slots, b->kv.n_slots);
        EXPECT_EQ(a->kv.n_blocks, b->kv.n_blocks);
        if (a->kv.n_slots != b->kv.n_slots) continue;
        /* The slot state after the last step, as kv_read_state serves it. */
        const int32_t ns = a->kv.n_slots;
        const size_t n = (size_t)L * (size_t)H * (size_t)ns;
        int32_t *pa = xmalloc(n * 4), *pb = xmalloc(n * 4);
        float *sa = xmalloc(n * 4), *sb = xmalloc(n * 4);
        read_state(ref->m, &a->kv, pa, sa);
        read_state(got->m, &b->kv, pb, sb);
        /* Each head must hold the same tokens with the same scores. Which slot a token
         * sits in may differ where two victims were near-tied (fp16 noise swaps the
         * order they are evicted in, so the next two tokens swap holes); so the state
         * is compared per head as a set of (position, score), sorted by position. */
        size_t moved = 0, other_heads = 0;
        double ds = 0;
        for (size_t row = 0; row < (size_t)L * (size_t)H; row++) {
            int32_t *ra = pa + row * (size_t)ns, *rb = pb + row * (size_t)ns;
            float *qa = sa + row * (size_t)ns, *qb = sb + row * (size_t)ns;
            for (int32_t j = 0; j < ns; j++)
                moved += ra[j] != rb[j];
            sort_by_pos(ra, qa, ns);
            sort_by_pos(rb, qb, ns);
            if (memcmp(ra, rb, (size_t)ns * sizeof *ra) != 0) {
                other_heads++;
                for (int32_t j = 0; j < ns && exact_heads; j++)
                    if (ra[j] != rb[j]) {
                        TEST_FAIL("%s case %d: layer %zu head %zu holds other tokens "
                                  "(position %d vs %d)",
                                  what, c, row / (size_t)H, row % (size_t)H, rb[j], ra[j]);
                        break;
                    }
                continue;
            }
            for (int32_t j = 0; j < ns; j++)
                ds = MAX(ds, fabs((double)qa[j] - (double)qb[j]) /
                                 MAX(1.0, fabs((double)qa[j])));
        }
        parity_worst.score = MAX(parity_worst.score, ds);
        if (moved)
            printf("#   %zu of %zu tokens in other slots (near-tied victims)\n", moved, n);
        if (other_heads && !exact_heads)
            printf("#   %zu of %d heads hold other tokens (near-tied victims)\n",
                   other_heads, L * H);
        /* Near-ties are rare: more than one head in fifty (or than one head) points at
         * a wrong score or slot, not at rounding. */
        if (!exact_heads && other_heads > (size_t)MAX(1, L * H / 50))
            TEST_FAIL("%s case %d: %zu of %d heads hold other tokens", what, c, other_heads,
                      L * H);
        if (!(ds <= TOL_SCORE))
            TEST_FAIL("%s case %d: H2O scores differ by %g", what, c, ds);
        if (c == 0) check_copy(got, b, pb, sb);
        free(pa);
        free(pb);
        free(sa);
        free(sb);
    }
}

void parity_check_model(const char *name, int32_t chunk, int tp, bool exact_heads)
{
    struct erun cpu = {0}, gpu = {0}, one = {0};
    char what[128];
    if (!parity_run(&cpu, name, BE_DEVICE_CPU, 1, chunk) ||
        !parity_run(&gpu, name, BE_DEVICE_CUDA, tp, chunk)) {
        TEST_FAIL("%s: cannot run on both backends", name);
    } else {
        snprintf(what, sizeof what, "%s cuda tp %d vs cpu, chunk %d", name, tp, chunk);
        compare(&cpu, &gpu, TOL_LOGIT, &parity_worst.logit, what, exact_heads);
        if (tp > 1) {
            if (!parity_run(&one, name, BE_DEVICE_CUDA, 1, chunk)) {
                TEST_FAIL("%s: cannot run cuda tp 1", name);
            } else {
                snprintf(what, sizeof what, "%s cuda tp %d vs tp 1, chunk %d", name, tp,
                         chunk);
                compare(&one, &gpu, TOL_TP, &parity_worst.tp, what, exact_heads);
            }
        }
    }
    erun_free(&cpu);
    erun_free(&gpu);
    erun_free(&one);
}

void parity_check_int8(const char *name, int32_t chunk, int tp)
{
    struct erun cpu = {0}, gpu = {0};
    parity_int8 = true;
    const bool ok = parity_run(&cpu, name, BE_DEVICE_CPU, 1, chunk) &&
                    parity_run(&gpu, name, BE_DEVICE_CUDA, tp, chunk);
    parity_int8 = false;
    if (!ok) {
        TEST_FAIL("%s: cannot run with an int8 KV cache on both backends", name);
        erun_free(&cpu);
        erun_free(&gpu);
        return;
    }
    EXPECT_EQ(cpu.m->kv_dtype, DTYPE_I8);
    EXPECT_EQ(gpu.m->kv_dtype, DTYPE_I8);
    const int32_t V = cpu.m->cfg.vocab_size;
    double worst = 0.0, row0 = 0.0;
    int32_t same_tokens = 0;
    for (int32_t c = 0; c < ERUN_CASES; c++) {
        const struct erun_case *k = &erun_cases[c];
        const struct eseq *a = &cpu.es[c], *b = &gpu.es[c];
        int32_t rows = STEPS + 1;
        for (int32_t t = 0; t < STEPS; t++)
            if (a->tokens[a->P + t] != b->tokens[b->P + t]) {
                rows = t + 1; /* later rows see different tokens */
                break;
            }
        same_tokens += rows - 1;
        for (int32_t r = 0; r < rows; r++) {
            const float *la = a->logits + (int64_t)r * V, *lb = b->logits + (int64_t)r * V;
            double d = 0.0, mag = 0.0;
            for (int32_t v = 0; v < V; v++) {
                d = fmax(d, fabs((double)la[v] - lb[v]));
                mag = fmax(mag, fabs((double)la[v]));
            }
            const double rel = d / fmax(mag, 1e-3);
            worst = fmax(worst, rel);
            if (r == 0) row0 = fmax(row0, rel);
        }
        if (!k->full && b->kv.n_evicted == 0)
            TEST_FAIL("%s int8 case %d: no eviction", name, c);
        if (k->full) EXPECT_EQ(b->kv.n_evicted, 0);
        if (!k->full && b->kv.n_slots > k->H + k->R)
            TEST_FAIL("%s int8 case %d: %d slots over a budget of %d", name, c,
                      b->kv.n_slots, k->H + k->R);
    }
    printf("# %s int8 KV, cuda tp %d vs cpu, chunk %d: worst logit error %.3g of the row's "
           "max |logit| (prompt rows %.3g); %d of %d greedy tokens agree before any "
           "differs\n",
           name, tp, chunk, worst, row0, same_tokens, ERUN_CASES * STEPS);
    if (!(row0 < 0.06))
        TEST_FAIL("%s: int8 prompt logits off by %.3g of their scale", name, row0);
    if (!(worst < 0.15))
        TEST_FAIL("%s: int8 logits off by %.3g of their scale", name, worst);
    erun_free(&cpu);
    erun_free(&gpu);
}

void parity_generate(const char *name, int32_t max_tokens, int max_tp, bool same_as_cpu)
{
    static const char *const prompts[] = {"The quick brown fox", "In a hole in the ground",
                                          "Tensor parallelism splits every layer"};
    enum { N_PROMPTS = 3, N_RUNS = 4 };
    const struct {
        enum be_device dev;
        int tp;
    } runs[N_RUNS] = {
        {BE_DEVICE_CPU, 1}, {BE_DEVICE_CUDA, 1}, {BE_DEVICE_CUDA, 1}, {BE_DEVICE_CUDA, 2}};
    const int n_runs = max_tp >= 2 ? 4 : 3;
    struct gen_result out[N_RUNS][N_PROMPTS];
    memset(out, 0, sizeof out);
    for (int k = 0; k < n_runs; k++) {
        struct model_opts mo;
        erun_opts(&mo, runs[k].dev, runs[k].tp, false);
        struct model *m = NULL;
        CHECK(model_load(&m, name, &mo) == 0);
        struct gen_request rq[N_PROMPTS];
        erun_requests(rq, prompts, N_PROMPTS, max_tokens,
                      (struct kv_spec){.policy = KV_POLICY_H2O, .heavy = 4, .recent = 4});
        EXPECT_EQ(erun_generate(m, rq, N_PROMPTS, out[k]), 0);
        model_destroy(m);
    }
    for (int i = 0; i < N_PROMPTS; i++) {
        for (int k = 1; k < n_runs; k++) {
            EXPECT_EQ(out[k][i].n_tokens, max_tokens);
            EXPECT(out[k][i].kv_evicted > 0);
            EXPECT(out[k][i].kv_slots <= 8);
            int32_t same = 0;
            while (same < out[k][i].n_tokens && same < out[0][i].n_tokens &&
                   out[k][i].tokens[same] == out[0][i].tokens[same])
                same++;
            if (k == 2) {
                if (out[2][i].n_tokens != out[1][i].n_tokens ||
                    memcmp(out[2][i].tokens, out[1][i].tokens,
                           (size_t)out[1][i].n_tokens * sizeof *out[1][i].tokens))
                    TEST_FAIL("%s prompt %d: two cuda tp 1 runs differ", name, i);
                continue;
            }
            printf("# generate %s prompt %d cuda tp %d: %d of %d tokens as the cpu's\n",
                   name, i, runs[k].tp, same, out[0][i].n_tokens);
            if (same_as_cpu) EXPECT_EQ(same, out[0][i].n_tokens);
        }
        for (int k = 0; k < n_runs; k++)
            generate_result_free(&out[k][i]);
    }
}
