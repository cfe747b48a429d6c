/*
 * test_cuda_host.c - the CUDA backend's host code (cuda/be_cuda.c, be_cuda_fwd.c) on
 * a fake device (tests/fakecuda: the CUDA runtime, the kernels, cuBLAS and NCCL on
 * the CPU) against the CPU backend, on machines without a GPU.
 *
 * What the fake makes checkable is the orchestration: the batch description and its
 * offsets, the decode runs and the prefill chunks handed to the kernels, the per-rank
 * new slots and victims, the KV block operations (init, copy, compaction), the slot
 * state read-back, tensor-parallel sharding with the all-reduce, and every pointer
 * the backend gives the "GPU" (the fake refuses host memory, another device's memory,
 * out-of-block copies and broken kernel preconditions, and counts them). What it
 * cannot check is the kernels' device code (tests/gpu does that on a GPU) and
 * stream synchronisation (the fake runs work at once).
 *
 * The bar, as tests/gpu/test_cuda_model.c sets it for a real GPU: the same sequences
 * (engine_run.h: batched, prompts in chunks, 64 greedy decode steps, H2O budgets that
 * evict during the prompt and mid-decode, R = 1, H = 0, and full) on the CPU backend
 * in fp32 and on the CUDA backend in fp16 give logits within TOL_LOGIT, the same
 * greedy tokens up to a near-tie, and the same evictions, slots and blocks; the same
 * with two fake GPUs and tensor_parallel 2; and after each sequence the slot state
 * that kv_read_state returns equals the CPU's (positions exactly, scores within
 * fp16 noise). Also: --device cuda without a GPU or driver fails cleanly, kv_capacity
 * is positive and within the fake memory, generate_run runs, nothing leaks, and the
 * fake saw no misuse.
 */
#include "test.h"

#include "cuda_ref.h"
#include "engine_run.h"
#include "err.h"
#include "fakecuda.h"
#include "generate.h"

#include <math.h>
#include <signal.h>
#include <unistd.h>

static const struct {
    int32_t P, H, R;
    bool full;
} cases[] = {
    {40, 4, 3, false}, {40, 6, 1, false}, {40, 0, 8, false}, {30, 25, 25, false},
    {33, 0, 0, true},  {21, 0, 0, true},
};
#define N_CASES ((int32_t)ARRAY_LEN(cases))
#define POOL_BLOCKS 512
#define BS 16

/* fp16 activations and weights over 2 layers against fp32: the measured differences
 * are printed (about 1e-2 on these models); a wrong head, slot, row or scale moves
 * logits by whole units. TP = 2 against TP = 1 differs only in fp16 summation order. */
#define TOL_LOGIT 5e-2
#define TOL_TP 2e-2
/* Scores are sums of fp32 probabilities computed from fp16 K/V and queries: relative
 * to max(1, score) (measured about 3e-3). */
#define TOL_SCORE 2e-2

static double worst_logit_diff, worst_tp_diff, worst_score_diff;

static struct model *load(const char *name, enum be_device dev, int tp)
{
    struct model_opts mo;
    model_opts_default(&mo);
    mo.dtype = DTYPE_F32;
    mo.device = dev;
    mo.tensor_parallel = tp;
    /* The CPU reference keeps its slot state as a device does (a victim keeps its pos
     * and score until the next token lands in it), so that the state read back after
     * the last step is comparable; its tokens and logits are the same either way. */
    mo.device_state = dev == BE_DEVICE_CPU;
    struct model *m = NULL;
    const char *path = strncmp(name, "dummy:", 6) == 0 ? name : test_data(name);
    if (model_load(&m, path, &mo)) {
        printf("# model_load(%s, %s, tp %d): %s\n", path, dev == BE_DEVICE_CUDA ? "cuda" : "cpu",
               tp, err_msg());
        return NULL;
    }
    if (m->be.ops->kv_alloc(m->be.ctx, POOL_BLOCKS, BS)) {
        printf("# kv_alloc: %s\n", err_msg());
        model_destroy(m);
        return NULL;
    }
    return m;
}

struct run {
    struct model *m;
    struct kv_pool pool;
    struct eseq es[N_CASES];
};

static bool run_cases(struct run *r, const char *name, enum be_device dev, int tp, int32_t chunk)
{
    r->m = load(name, dev, tp);
    if (!r->m) return false;
    kv_pool_init(&r->pool, POOL_BLOCKS, BS);
    for (int32_t c = 0; c < N_CASES; c++)
        eseq_init(&r->es[c], cases[c].P, cases[c].H, cases[c].R, cases[c].full,
                  700 + (uint64_t)c, r->m->cfg.vocab_size);
    run_engine(r->m, &r->pool, r->es, N_CASES, chunk);
    return true;
}

static void free_run(struct run *r)
{
    if (!r->m) return;
    for (int32_t c = 0; c < N_CASES; c++) eseq_deinit(&r->es[c], &r->pool);
    EXPECT_EQ(r->pool.n_free, r->pool.n_blocks);
    kv_pool_deinit(&r->pool);
    model_destroy(r->m);
    r->m = NULL;
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
 * state is on the device, else gathered from kv_state's host arrays.
 * pos, score [n_layer, n_head, n_slots]. */
static void read_state(struct model *m, const struct kv_seq *kv, int32_t *pos, float *score)
{
    const struct be_ops *ops = m->be.ops;
    const int32_t L = m->cfg.n_layer, H = m->cfg.n_head, n = kv->n_slots;
    int32_t *lp = NULL;
    float *ls = NULL;
    if (ops->kv_state(m->be.ctx, 0, &lp, &ls) != 0) {
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
static void check_copy(struct run *r, const struct eseq *e, const int32_t *want_pos,
                       const float *want_score)
{
    const int32_t nb = e->kv.n_blocks, ns = e->kv.n_slots;
    const size_t n = (size_t)r->m->cfg.n_layer * (size_t)r->m->cfg.n_head * (size_t)ns;
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

/* Compare run `got` with reference `ref` case by case, logits within tol. */
static void compare(struct run *ref, struct run *got, double tol, double *worst,
                    const char *what)
{
    const int32_t V = ref->m->cfg.vocab_size, L = ref->m->cfg.n_layer, H = ref->m->cfg.n_head;
    for (int32_t c = 0; c < N_CASES; c++) {
        struct eseq *a = &ref->es[c], *b = &got->es[c];
        int32_t diff = -1;
        for (int32_t k = 0; k < STEPS && diff < 0; k++)
            if (a->tokens[a->P + k] != b->tokens[b->P + k]) diff = k;
        const int32_t rows = diff < 0 ? STEPS + 1 : diff + 1;
        const double d = max_abs_diff(a->logits, b->logits, (int64_t)rows * V);
        *worst = MAX(*worst, d);
        printf("# %s case %d (P %d, %s H %d R %d): max |logit diff| %.3g over %d steps%s\n",
               what, c, a->P, cases[c].full ? "full" : "h2o", cases[c].H, cases[c].R, d, rows,
               diff < 0 ? "" : " (then a token differs)");
        if (!(d <= tol)) TEST_FAIL("%s case %d: logits differ by %g > %g", what, c, d, tol);
        if (!cases[c].full && b->kv.n_evicted == 0) TEST_FAIL("%s case %d: no eviction", what, c);
        if (diff >= 0) {
            /* Only a near-tie may flip: the reference's best two within 2 tol. */
            const double gap = top2_gap(a->logits + (int64_t)diff * V, V);
            if (!(gap <= 2 * tol))
                TEST_FAIL("%s case %d: token %d differs at step %d with a margin of %g", what,
                          c, b->tokens[b->P + diff], diff, gap);
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
        size_t moved = 0;
        double ds = 0;
        for (size_t row = 0; row < (size_t)L * (size_t)H; row++) {
            int32_t *ra = pa + row * (size_t)ns, *rb = pb + row * (size_t)ns;
            float *qa = sa + row * (size_t)ns, *qb = sb + row * (size_t)ns;
            for (int32_t j = 0; j < ns; j++) moved += ra[j] != rb[j];
            sort_by_pos(ra, qa, ns);
            sort_by_pos(rb, qb, ns);
            for (int32_t j = 0; j < ns; j++) {
                if (ra[j] != rb[j]) {
                    TEST_FAIL("%s case %d: layer %zu head %zu holds other tokens (position "
                              "%d vs %d)", what, c, row / (size_t)H, row % (size_t)H, rb[j],
                              ra[j]);
                    break;
                }
                ds = MAX(ds, fabs((double)qa[j] - (double)qb[j]) / MAX(1.0, fabs((double)qa[j])));
            }
        }
        worst_score_diff = MAX(worst_score_diff, ds);
        if (moved) printf("#   %zu of %zu tokens in other slots (near-tied victims)\n", moved, n);
        if (!(ds <= TOL_SCORE)) TEST_FAIL("%s case %d: H2O scores differ by %g", what, c, ds);
        if (c == 0) check_copy(got, b, pb, sb);
        free(pa);
        free(pb);
        free(sa);
        free(sb);
    }
}

/* CUDA (tp ranks on as many fake GPUs) against the CPU backend in fp32; with tp 2
 * also against CUDA tp 1. */
static void check_model(const char *name, int32_t chunk, int tp)
{
    const int64_t live0 = fakecuda_live_allocations(), bad0 = fakecuda_violations();
    fakecuda_set_devices(tp);
    struct run cpu = {0}, gpu = {0}, one = {0};
    char what[128];
    if (!run_cases(&cpu, name, BE_DEVICE_CPU, 1, chunk) ||
        !run_cases(&gpu, name, BE_DEVICE_CUDA, tp, chunk)) {
        TEST_FAIL("%s: cannot run on both backends", name);
    } else {
        snprintf(what, sizeof what, "%s cuda tp %d vs cpu, chunk %d", name, tp, chunk);
        compare(&cpu, &gpu, TOL_LOGIT, &worst_logit_diff, what);
        if (tp > 1) {
            if (!run_cases(&one, name, BE_DEVICE_CUDA, 1, chunk)) {
                TEST_FAIL("%s: cannot run cuda tp 1", name);
            } else {
                snprintf(what, sizeof what, "%s cuda tp %d vs tp 1, chunk %d", name, tp, chunk);
                compare(&one, &gpu, TOL_TP, &worst_tp_diff, what);
            }
        }
    }
    free_run(&cpu);
    free_run(&gpu);
    free_run(&one);
    EXPECT_EQ(fakecuda_live_allocations(), live0);
    EXPECT_EQ(fakecuda_violations(), bad0);
}

TEST(golden_tiny_opt) { check_model("golden/tiny-opt", 7, 1); }
/* One-token prompt chunks: the backend runs them through the decode kernel. */
TEST(golden_tiny_opt_chunk1) { check_model("golden/tiny-opt", 1, 1); }
TEST(golden_tiny_opt_350m) { check_model("golden/tiny-opt-350m", 1 << 20, 1); }
TEST(dummy_tiny) { check_model("dummy:tiny", 5, 1); }
TEST(golden_tiny_opt_tp2) { check_model("golden/tiny-opt", 1 << 20, 2); }
TEST(golden_tiny_opt_350m_tp2) { check_model("golden/tiny-opt-350m", 9, 2); }
TEST(dummy_tiny_tp2) { check_model("dummy:tiny", 3, 2); }

/* No GPU, no driver, too few GPUs: model_load fails with the message the CLI shows,
 * and nothing is left allocated. */
TEST(no_device_is_a_clean_error)
{
    const int64_t live0 = fakecuda_live_allocations();
    struct model_opts mo;
    model_opts_default(&mo);
    mo.device = BE_DEVICE_CUDA;
    struct model *m = NULL;

    fakecuda_set_devices(0);
    EXPECT_EQ(backend_cuda_device_count(), 0);
    EXPECT_EQ(model_load(&m, "dummy:tiny", &mo), ENG_EUNAVAILABLE);
    EXPECT(m == NULL);
    EXPECT(strstr(err_msg(), "no GPU found") && strstr(err_msg(), "--device cpu"));

    fakecuda_set_devices(2);
    fakecuda_set_driver(false);
    EXPECT_EQ(backend_cuda_device_count(), 0);
    EXPECT_EQ(model_load(&m, "dummy:tiny", &mo), ENG_EUNAVAILABLE);
    EXPECT(strstr(err_msg(), "no GPU found"));
    /* Auto falls back to the CPU. */
    mo.device = BE_DEVICE_AUTO;
    EXPECT_EQ(model_load(&m, "dummy:tiny", &mo), 0);
    if (m) EXPECT_STR(m->be.ops->name, "cpu");
    model_destroy(m);
    m = NULL;
    fakecuda_set_driver(true);

    mo.device = BE_DEVICE_CUDA;
    fakecuda_set_devices(1);
    mo.tensor_parallel = 2;
    EXPECT_EQ(model_load(&m, "dummy:tiny", &mo), ENG_EUNAVAILABLE);
    EXPECT(strstr(err_msg(), "needs 2 GPUs, 1 found"));
    /* Heads that do not divide: refused at load, every rank's memory given back. */
    fakecuda_set_devices(4);
    mo.tensor_parallel = 3;
    EXPECT(model_load(&m, "dummy:tiny", &mo) != 0);
    printf("# tp 3: %s\n", err_msg());
    EXPECT(m == NULL);
    EXPECT_EQ(fakecuda_live_allocations(), live0);
}

/* A hang is the failure these tests look for: end the process with a message. */
static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "# hung: a rank waits for ever in a collective\nnot ok\n";
    if (write(1, msg, sizeof msg - 1) < 0) _exit(2);
    _exit(1);
}

/* A GPU that cannot be used at set-up (its stream cannot be made): with TP = 2 the
 * other rank must not wait for ever in NCCL's collective communicator set-up; the
 * load fails naming the GPU, and everything is given back. */
TEST(broken_gpu_fails_create_cleanly)
{
    const int64_t live0 = fakecuda_live_allocations();
    fakecuda_set_devices(2);
    fakecuda_set_broken(1, true);
    alarm(30);
    struct model_opts mo;
    model_opts_default(&mo);
    mo.device = BE_DEVICE_CUDA;
    mo.tensor_parallel = 2;
    struct model *m = NULL;
    EXPECT_EQ(model_load(&m, "dummy:tiny", &mo), ENG_EUNAVAILABLE);
    alarm(0);
    printf("# %s\n", err_msg());
    EXPECT(strstr(err_msg(), "GPU 1"));
    EXPECT(m == NULL);
    fakecuda_set_broken(1, false);
    EXPECT_EQ(fakecuda_live_allocations(), live0);
}

/* One rank out of GPU memory for a forward's workspace (rank 0, which also holds
 * the logits): the forward returns ENG_ENOMEM instead of leaving the other rank in
 * the all-reduce for ever, and the next forward, with memory back, works. */
TEST(rank_out_of_memory_fails_forward_cleanly)
{
    fakecuda_set_devices(2);
    struct model *m = load("dummy:tiny", BE_DEVICE_CUDA, 2);
    if (!m) {
        TEST_FAIL("cannot load");
        return;
    }
    const int32_t blocks[1] = {0}, tokens[4] = {2, 10, 11, 12}, pos[4] = {0, 1, 2, 3};
    const int32_t out_rows[1] = {3};
    const struct be_seq seq = {.blocks = blocks, .n_blocks = 1, .tok_start = 0, .n_tok = 4,
                               .slot_start = 0, .n_slots = 4};
    const struct be_batch b = {.n_tok = 4, .tokens = tokens, .pos = pos, .n_seq = 1,
                               .seqs = &seq, .n_out = 1, .out_rows = out_rows};
    float *logits = xmalloc((size_t)m->cfg.vocab_size * sizeof *logits);
    m->be.ops->kv_init_blocks(m->be.ctx, blocks, 1);
    fakecuda_set_device_memory(0, fakecuda_device_used(0));
    alarm(30);
    EXPECT_EQ(m->be.ops->forward(m->be.ctx, &b, logits), ENG_ENOMEM);
    alarm(0);
    printf("# %s\n", err_msg());
    EXPECT(strstr(err_msg(), "rank 0"));
    fakecuda_set_device_memory(0, 0);
    m->be.ops->kv_init_blocks(m->be.ctx, blocks, 1);
    alarm(30);
    EXPECT_EQ(m->be.ops->forward(m->be.ctx, &b, logits), 0);
    alarm(0);
    EXPECT(isfinite(logits[0]));
    free(logits);
    model_destroy(m);
}

/* kv_capacity: positive, at most the fake GPUs' memory, and what the weights use is
 * not counted in it (larger for the smaller model). */
TEST(kv_capacity_positive)
{
    for (int tp = 1; tp <= 2; tp++) {
        fakecuda_set_devices(tp);
        struct model_opts mo;
        model_opts_default(&mo);
        mo.device = BE_DEVICE_CUDA;
        mo.tensor_parallel = tp;
        struct model *m = NULL;
        if (model_load(&m, "dummy:tiny", &mo)) {
            TEST_FAIL("model_load: %s", err_msg());
            continue;
        }
        const size_t cap = m->be.ops->kv_capacity(m->be.ctx);
        const size_t block = m->be.ops->kv_block_bytes(m->be.ctx, BS);
        printf("# tp %d: kv_capacity %zu bytes, %zu blocks of %zu bytes\n", tp, cap,
               block ? cap / block : 0, block);
        EXPECT(cap > 0);
        EXPECT(cap <= (size_t)tp << 30);
        EXPECT(block > 0 && cap / block >= 16);
        model_destroy(m);
    }
}

/* The scheduler's path (h2oserve generate) on the fake GPUs: it runs, the budget
 * holds, and the tokens are the CPU backend's. */
TEST(generate_run_on_cuda)
{
    static const char *const prompts[] = {"The quick brown fox", "In a hole in the ground",
                                          "Tensor parallelism splits every layer"};
    struct gen_result out[3][3];
    const struct {
        enum be_device dev;
        int tp;
    } runs[3] = {{BE_DEVICE_CPU, 1}, {BE_DEVICE_CUDA, 1}, {BE_DEVICE_CUDA, 2}};
    fakecuda_set_devices(2);
    for (int k = 0; k < 3; k++) {
        struct model_opts mo;
        model_opts_default(&mo);
        mo.dtype = DTYPE_F32;
        mo.device = runs[k].dev;
        mo.tensor_parallel = runs[k].tp;
        struct model *m = NULL;
        CHECK(model_load(&m, "dummy:tiny", &mo) == 0);
        struct gen_request rq[3];
        for (int i = 0; i < 3; i++) {
            rq[i] = (struct gen_request){.prompt = prompts[i], .prompt_len = strlen(prompts[i]),
                                         .max_tokens = 40, .ignore_eos = true};
            sampler_params_default(&rq[i].sp);
            rq[i].sp.temperature = 0;
            rq[i].kv = (struct kv_spec){.policy = KV_POLICY_H2O, .heavy = 4, .recent = 4};
        }
        struct gen_opts go;
        gen_opts_default(&go);
        go.max_batched_tokens = 16;
        EXPECT_EQ(generate_run(m, &go, rq, 3, out[k]), 0);
        model_destroy(m);
    }
    for (int i = 0; i < 3; i++) {
        for (int k = 1; k < 3; k++) {
            EXPECT_EQ(out[k][i].n_tokens, 40);
            EXPECT(out[k][i].kv_evicted > 0);
            EXPECT(out[k][i].kv_slots <= 8);
            int32_t same = 0;
            while (same < out[k][i].n_tokens && same < out[0][i].n_tokens &&
                   out[k][i].tokens[same] == out[0][i].tokens[same])
                same++;
            printf("# generate prompt %d cuda tp %d: %d of %d tokens as the cpu's\n", i,
                   runs[k].tp, same, out[0][i].n_tokens);
            EXPECT_EQ(same, out[0][i].n_tokens);
        }
        for (int k = 0; k < 3; k++) gen_result_free(&out[k][i]);
    }
}

/*
 * be_ops.sample on the fake GPU (cuda_logits_rows, then cuda_sample, whose fake runs
 * the host reference) against the engine's sampler on the same logits: one prompt
 * forwarded twice into fresh sequences, once with the logits copied back and once
 * kept on the device; then rows with every kind of knob, additions (a token added
 * twice, a -100 ban) and several rows from one logits row. Same tokens and
 * alternatives, logprobs within 1e-5.
 */
TEST(sample_on_the_gpu_matches_the_host_sampler)
{
    fakecuda_set_devices(1);
    struct model *m = load("dummy:tiny", BE_DEVICE_CUDA, 1);
    CHECK(m);
    const int32_t V = m->cfg.vocab_size;
    struct kv_pool pool;
    kv_pool_init(&pool, POOL_BLOCKS, BS);
    int32_t prompt[12];
    for (int32_t i = 0; i < 12; i++) prompt[i] = 2 + 37 * i % (V - 2);
    struct kv_seq kv[2];
    struct batch b;
    batch_init(&b);
    float *host = xmalloc((size_t)2 * V * sizeof *host);
    for (int k = 0; k < 2; k++) {
        kv_seq_init(&kv[k]);
        struct batch_item it = {.kv = &kv[k], .tokens = prompt, .n_tok = 12, .all_logits = true};
        b.device_logits = k == 1; /* the second forward keeps its logits on the GPU */
        EXPECT_EQ(batch_run(&b, &m->be, &pool, V, &it, 1), 0);
        if (k == 0) memcpy(host, b.logits + (int64_t)10 * V, (size_t)2 * V * sizeof *host);
    }
    static const int32_t ids[] = {5, 9, 5, 100};
    static const float vals[] = {3.0f, -100.0f, -0.75f, 1.5f};
    const struct be_sample_row rows[] = {
        {.row = 11, .temperature = 0, .top_p = 1, .n_logprobs = 5},
        {.row = 11, .add_ids = ids, .add_vals = vals, .n_add = 4, .temperature = 0.7f,
         .top_p = 1, .top_k = 5, .n_logprobs = 2, .u = 0.61},
        {.row = 10, .temperature = 1.3f, .top_p = 0.9f, .n_logprobs = -1, .u = 0.05},
        {.row = 11, .add_ids = ids, .add_vals = vals, .n_add = 3, .temperature = 1.0f,
         .top_p = 1, .n_logprobs = 0, .u = 0.999},
    };
    const int32_t n = (int32_t)ARRAY_LEN(rows);
    struct sample_out got[4], want[4];
    EXPECT_EQ(m->be.ops->sample(m->be.ctx, rows, n, got), 0);
    struct sampler_scratch scratch;
    sampler_scratch_init(&scratch);
    float *row = xmalloc((size_t)V * sizeof *row);
    for (int32_t i = 0; i < n; i++) {
        memcpy(row, host + (int64_t)(rows[i].row - 10) * V, (size_t)V * sizeof *row);
        for (int32_t j = 0; j < rows[i].n_add; j++) row[rows[i].add_ids[j]] += rows[i].add_vals[j];
        struct sampler_params p;
        sampler_params_default(&p);
        p.temperature = rows[i].temperature;
        p.top_p = rows[i].top_p;
        p.top_k = rows[i].top_k;
        p.n_logprobs = rows[i].n_logprobs;
        sampler_sample_u(&p, row, V, rows[i].u, &scratch, &want[i]);
        EXPECT_EQ(got[i].token, want[i].token);
        EXPECT_EQ(got[i].n_top, want[i].n_top);
        EXPECT(fabs((double)got[i].logprob - want[i].logprob) <= 1e-5);
        for (int32_t k = 0; k < want[i].n_top; k++) {
            EXPECT_EQ(got[i].top_ids[k], want[i].top_ids[k]);
            EXPECT(fabs((double)got[i].top_logprobs[k] - want[i].top_logprobs[k]) <= 1e-5);
        }
    }
    /* A row the last forward did not keep is an error, not a read past the end. */
    const struct be_sample_row bad = {.row = 12, .temperature = 0, .top_p = 1};
    EXPECT_EQ(m->be.ops->sample(m->be.ctx, &bad, 1, got), ENG_EINVAL);
    sampler_scratch_deinit(&scratch);
    free(row);
    free(host);
    for (int k = 0; k < 2; k++) kv_seq_deinit(&kv[k], &pool);
    batch_deinit(&b);
    kv_pool_deinit(&pool);
    model_destroy(m);
}

int main(void)
{
    RUN(no_device_is_a_clean_error);
    RUN(golden_tiny_opt);
    RUN(golden_tiny_opt_chunk1);
    RUN(golden_tiny_opt_350m);
    RUN(dummy_tiny);
    RUN(golden_tiny_opt_tp2);
    RUN(golden_tiny_opt_350m_tp2);
    RUN(dummy_tiny_tp2);
    signal(SIGALRM, on_alarm);
    RUN(broken_gpu_fails_create_cleanly);
    RUN(rank_out_of_memory_fails_forward_cleanly);
    RUN(kv_capacity_positive);
    RUN(generate_run_on_cuda);
    RUN(sample_on_the_gpu_matches_the_host_sampler);
    printf("# worst |logit diff| cuda vs cpu %.3g, cuda tp 2 vs tp 1 %.3g, H2O score %.3g\n",
           worst_logit_diff, worst_tp_diff, worst_score_diff);
    EXPECT_EQ(fakecuda_violations(), 0);
    EXPECT_EQ(fakecuda_live_allocations(), 0);
    return test_done();
}
