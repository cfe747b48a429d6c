/*
 * test_sched.c - the scheduler's request side (engine/sched.c, see sched.h) as a
 * specification: checking and queueing requests, admission and its reservations,
 * the fork after the prompt, finishing and cancelling. The step itself (what a step
 * carries, eviction, sampling) is test_sched_step.c's; the scheduler at scale is
 * test_sched_stress.c's.
 *
 * Every test drives sched_create / sched_add / sched_step / sched_cancel /
 * sched_cancel_all / sched_destroy directly on dummy:tiny in fp32 through
 * tests/lib/sched_harness.h, whose observer checks every event as it arrives and
 * whose h_close checks that every block is back in the pool.
 *
 * The tests, one per claim of sched.h and docs/kv-cache.md "Memory and admission":
 * first come first served within a class; interactive before batch; a long prompt
 * is not starved by a stream of short ones; a cancel frees blocks and reservations
 * at once, wherever the request is; every sequence ends with exactly one finishing
 * event, n > 1 forks are identical when greedy and seeded seed + i when sampling
 * (also when the compacted prompt holds one block more than its slots need, and with
 * the slot state served as a device's); requests that cannot run get one error
 * event and leave the scheduler working; an absolute budget near INT32_MAX runs like
 * a full cache, and greedy forks equal the lone request at every budget shape (both
 * found reviewing the KV path). The tests that found engine bugs say so where they
 * are.
 *
 * This file is over 600 lines because it is one module's specification: the claims
 * above are sixteen tests of sched.c, each a scenario of its own (a pool, a queue of
 * requests, the events expected), and a file per group of claims would not be
 * findable by the module it tests.
 */
#include "sched_harness.h"

/* ---- 1. First come, first served within a class. ---- */

/* One sequence at a time (max_num_seqs 1): prompts of decreasing length, so neither
 * shortest-first nor anything but submission order gives 1..5. */
TEST(fcfs_one_seq_at_a_time)
{
    struct harness h;
    if (!h_open(&h, 64, 1, 16, 8)) return;
    const int32_t P[5] = {40, 30, 20, 10, 5};
    for (int32_t i = 0; i < 5; i++)
        h_add(&h, mkreq((uint64_t)i + 1, P[i], 4, 1, REQ_PRIO_BATCH, spec_full(),
                        10 + (uint64_t)i));
    h_run_idle(&h, 1000);
    h_check_all_answered(&h);
    const int32_t want[5] = {1, 2, 3, 4, 5};
    EXPECT_EQ(h.o.n_first, 5);
    EXPECT_EQ(h.o.n_fin_order, 5);
    expect_order(h.o.first_order, want, 5, "first tokens");
    expect_order(h.o.fin_order, want, 5, "finishes");
    EXPECT_EQ(h.max_n_seqs, 1);
    /* One at a time: each request's first token comes after the previous one ended. */
    for (int32_t i = 2; i <= 5; i++)
        EXPECT(h.o.r[i].first_token_step > h.o.r[i - 1].finish_step);
    h_close(&h);
}

/* A pool that fits one: request 1 (7 blocks) runs alone in 8 blocks; request 5 (2
 * blocks) would fit beside request 2 (6 blocks), but strict FCFS lets nobody overtake
 * request 3 (5 blocks), which waits for request 2. */
TEST(fcfs_pool_fits_one)
{
    struct harness h;
    if (!h_open(&h, 8, 8, 32, 8)) return;
    const int32_t P[5] = {100, 80, 60, 40, 20};
    for (int32_t i = 0; i < 5; i++) {
        struct kv_spec full = spec_full();
        CHECK(admit_blocks(&full, P[i], 8, 1) <= 8);
        h_add(&h, mkreq((uint64_t)i + 1, P[i], 8, 1, REQ_PRIO_INTERACTIVE, full,
                        20 + (uint64_t)i));
    }
    h_run_idle(&h, 1000);
    h_check_all_answered(&h);
    const int32_t want[5] = {1, 2, 3, 4, 5};
    EXPECT_EQ(h.o.n_first, 5);
    expect_order(h.o.first_order, want, 5, "first tokens");
    /* Requests 2 and 5 never run side by side: 5 starts after 2 ended. */
    EXPECT(h.o.r[5].first_token_step > h.o.r[2].finish_step);
    h_close(&h);
}

/* ---- 2. Interactive before batch. ---- */

TEST(interactive_before_batch)
{
    struct harness h;
    if (!h_open(&h, 64, 1, 16, 32)) return;
    for (uint64_t id = 1; id <= 3; id++)
        h_add(&h, mkreq(id, 8, 4, 1, REQ_PRIO_BATCH, spec_full(), id));
    h_step(&h); /* batch 1 is admitted; 2 and 3 wait */
    for (uint64_t id = 11; id <= 13; id++)
        h_add(&h, mkreq(id, 8, 4, 1, REQ_PRIO_INTERACTIVE, spec_full(), id));
    h_run_idle(&h, 1000);
    h_check_all_answered(&h);
    /* The running batch request is not preempted; every interactive request starts
     * before any waiting batch request, FCFS among themselves. */
    const int32_t want[6] = {1, 11, 12, 13, 2, 3};
    EXPECT_EQ(h.o.n_first, 6);
    expect_order(h.o.first_order, want, 6, "first tokens");
    for (int32_t i = 11; i <= 13; i++)
        for (int32_t b = 2; b <= 3; b++)
            EXPECT(h.o.r[i].first_token_step < h.o.r[b].first_token_step);
    h_close(&h);
}

/* Same with a pool that fits one request, the class order must hold for blocks too,
 * and a waiting interactive request that does not fit yet blocks the batch class. */
TEST(interactive_before_batch_pool_bound)
{
    struct harness h;
    if (!h_open(&h, 8, 8, 32, 32)) return;
    /* Batch 1 takes 7 of 8 blocks; batch 2 (1 block) would fit beside it. */
    h_add(&h, mkreq(1, 100, 8, 1, REQ_PRIO_BATCH, spec_full(), 1));
    h_step(&h);
    h_add(&h, mkreq(2, 5, 4, 1, REQ_PRIO_BATCH, spec_full(), 2));
    /* Interactive 11 needs 4 blocks: it waits for batch 1, and batch 2 waits for it. */
    h_add(&h, mkreq(11, 50, 8, 1, REQ_PRIO_INTERACTIVE, spec_full(), 11));
    h_run_idle(&h, 1000);
    h_check_all_answered(&h);
    const int32_t want[3] = {1, 11, 2};
    EXPECT_EQ(h.o.n_first, 3);
    expect_order(h.o.first_order, want, 3, "first tokens");
    h_close(&h);
}

/* ---- 3. No starvation of a long prompt. ---- */

/*
 * Eight short requests (2 blocks each) fill the scheduler (max_num_seqs 8); then a
 * 300-token prompt needing 20 of the 24 blocks arrives, and after it one short
 * request per step for 300 steps. The long one fits only once at most two shorts
 * run; a scheduler that admits whatever fits refills every seat a short frees with
 * the next short and never gets there. FCFS makes the shorts behind it wait, so it
 * must finish within
 *   (8 requests ahead, run one after the other: 10 prompt + 16 decode steps each)
 *   + ceil((300 + 8 * 10) / (32 - 8)) prefill steps + 8 decode steps
 * of its submission (a loose bound; it is far quicker in practice).
 */
TEST(long_prompt_not_starved)
{
    enum {
        N_AHEAD = 8,
        SHORT_P = 10,
        SHORT_T = 16,
        LONG_P = 300,
        LONG_T = 8,
        STREAM = 300,
        MNS = 8,
        MBT = 32
    };
    struct harness h;
    if (!h_open(&h, 24, MNS, MBT, 1 + N_AHEAD + 1 + STREAM)) return;
    uint64_t id = 1;
    for (int32_t i = 0; i < N_AHEAD; i++, id++)
        h_add(&h, mkreq(id, SHORT_P, SHORT_T, 1, REQ_PRIO_BATCH, spec_full(), id));
    const uint64_t long_id = id++;
    h_add(&h, mkreq(long_id, LONG_P, LONG_T, 1, REQ_PRIO_BATCH, spec_full(), 99));
    const int64_t bound = N_AHEAD * (SHORT_P + SHORT_T) +
                          CEIL_DIV(LONG_P + N_AHEAD * SHORT_P, MBT - MNS) + LONG_T;
    CHECK(bound < STREAM);
    for (int32_t t = 0; t < STREAM; t++, id++) {
        h_add(&h, mkreq(id, SHORT_P, SHORT_T, 1, REQ_PRIO_BATCH, spec_full(), id));
        h_step(&h);
    }
    h_run_idle(&h, 100000);
    h_check_all_answered(&h);
    const struct req_obs *lq = &h.o.r[long_id];
    EXPECT(lq->finish_step >= 0);
    const int64_t took = lq->finish_step - lq->add_step;
    printf("# the 300-token prompt finished %lld steps after submission (bound %lld)\n",
           (long long)took, (long long)bound);
    EXPECT(took <= bound);
    h_close(&h);
}

/* ---- 4. Cancellation frees blocks at once. ---- */

/*
 * Pool 64, max_batched_tokens 32. Step 1 admits A (full, P 20, n 2: reserves
 * 2 * ceil(60 / 16) = 8) whose whole prompt fits, so both forks decode from step 2,
 * and B (H2O H = R = 8, P 100, n 2: reserves max(7, 2 * 1) = 7) with the 12 tokens
 * left; steps 2 and 3 give B 30 prompt tokens each (32 minus A's two decode tokens),
 * so B holds ceil(72 / 16) = 5 blocks mid-prompt. C (full, P 10 + 500, n 2:
 * 64 blocks) waits. Each cancel takes effect inside sched_cancel.
 */
TEST(cancel_frees_blocks_at_once)
{
    struct harness h;
    if (!h_open(&h, 64, 8, 32, 128)) return;
    const struct kv_spec kvA = spec_full(), kvB = spec_abs(KV_POLICY_H2O, 8, 8),
                         kvC = spec_full();
    h_add(&h, mkreq(1, 20, 40, 2, REQ_PRIO_BATCH, kvA, 1));
    h_add(&h, mkreq(2, 100, 50, 2, REQ_PRIO_BATCH, kvB, 2));
    h_add(&h, mkreq(3, 10, 500, 2, REQ_PRIO_BATCH, kvC, 3));
    for (int i = 0; i < 3; i++)
        h_step(&h);

    const int32_t resA = admit_blocks(&kvA, 20, 40, 2),
                  resB = admit_blocks(&kvB, 100, 50, 2);
    const int32_t heldB = CEIL_DIV(12 + 30 + 30, BS);
    EXPECT_EQ(resA, 8);
    EXPECT_EQ(resB, 7);
    const struct req_obs *A = &h.o.r[1], *B = &h.o.r[2], *C = &h.o.r[3];
    EXPECT_EQ(A->seq[0].n_tok, 3);
    EXPECT_EQ(A->seq[1].n_tok, 3);
    EXPECT_EQ(B->n_events, 0);
    EXPECT_EQ(C->n_events, 0);
    const int32_t heldA = A->seq[0].last_blocks + A->seq[1].last_blocks;
    EXPECT_EQ(heldA, 2 * CEIL_DIV(22, BS)); /* 20 prompt + 2 decode tokens each */
    struct sched_stats st0 = h_stats(&h);
    EXPECT_EQ(st0.blocks_used, heldA + heldB);
    EXPECT_EQ(st0.blocks_reserved, resA + resB);
    EXPECT_EQ(st0.n_waiting, 1);
    EXPECT_EQ(st0.n_running, 2);
    EXPECT_EQ(st0.n_seqs, 3);

    /* Mid-prompt: both of B's completions end, though only one sequence existed. */
    h_cancel(&h, 2);
    struct sched_stats st1 = h_stats(&h);
    EXPECT_EQ(st0.blocks_used - st1.blocks_used, heldB);
    EXPECT_EQ(st0.blocks_reserved - st1.blocks_reserved, resB);
    EXPECT_EQ(st1.n_running, 1);
    EXPECT_EQ(B->n_events, 2);
    for (int k = 0; k < 2; k++) {
        EXPECT_EQ(B->seq[k].n_fin, 1);
        EXPECT_EQ(B->seq[k].fin, REQ_FINISH_CANCELLED);
    }

    /* Decoding: both forks end, their blocks and reservation come back. */
    const int32_t a_events = A->n_events;
    h_cancel(&h, 1);
    struct sched_stats st2 = h_stats(&h);
    EXPECT_EQ(st1.blocks_used - st2.blocks_used, heldA);
    EXPECT_EQ(st1.blocks_reserved - st2.blocks_reserved, resA);
    EXPECT_EQ(A->n_events - a_events, 2);
    for (int k = 0; k < 2; k++) {
        EXPECT_EQ(A->seq[k].n_fin, 1);
        EXPECT_EQ(A->seq[k].fin, REQ_FINISH_CANCELLED);
    }
    EXPECT_EQ(st2.blocks_used, 0);
    EXPECT_EQ(st2.blocks_reserved, 0);

    /* Waiting: nothing held or reserved, two finishing events. */
    h_cancel(&h, 3);
    struct sched_stats st3 = h_stats(&h);
    EXPECT_EQ(st3.blocks_used, 0);
    EXPECT_EQ(st3.blocks_reserved, 0);
    EXPECT_EQ(st3.n_waiting, 0);
    EXPECT_EQ(C->n_events, 2);
    for (int k = 0; k < 2; k++)
        EXPECT_EQ(C->seq[k].fin, REQ_FINISH_CANCELLED);
    EXPECT(sched_idle(h.s));

    /* Unknown and finished ids are ignored; a step afterwards does nothing. */
    const int64_t before = A->n_events + B->n_events + C->n_events;
    sched_cancel(h.s, 1);
    sched_cancel(h.s, 77);
    EXPECT_EQ(h_step(&h), 0);
    EXPECT_EQ(A->n_events + B->n_events + C->n_events, before);

    /* The scheduler keeps working: a request after the cancels runs to the end. */
    h_add(&h, mkreq(4, 30, 20, 2, REQ_PRIO_BATCH, spec_abs(KV_POLICY_H2O, 4, 4), 4));
    h_run_idle(&h, 1000);
    h_check_all_answered(&h);
    EXPECT_EQ(h.o.r[4].seq[1].n_tok, 20);
    h_close(&h);
}

/* sched_cancel_all on a mix of decoding, prefilling and waiting requests of both
 * classes: one cancelled finish per completion, every block back at once. */
TEST(cancel_all_frees_everything)
{
    struct harness h;
    if (!h_open(&h, 64, 8, 32, 16)) return;
    h_add(&h,
          mkreq(1, 10, 100, 3, REQ_PRIO_BATCH, spec_ratio(KV_POLICY_H2O, 0.1f, 0.1f), 1));
    h_add(&h, mkreq(2, 200, 100, 1, REQ_PRIO_INTERACTIVE, spec_full(), 2));
    h_add(&h, mkreq(3, 50, 400, 2, REQ_PRIO_BATCH, spec_full(), 3));
    h_add(&h, mkreq(4, 5, 5, 1, REQ_PRIO_BATCH, spec_full(), 4));
    h_add(&h, mkreq(5, 5, 5, 2, REQ_PRIO_INTERACTIVE, spec_full(), 5));
    for (int i = 0; i < 3; i++)
        h_step(&h);
    struct sched_stats st = h_stats(&h);
    EXPECT(st.blocks_used > 0);
    EXPECT(st.n_waiting > 0);
    h_cancel_all(&h);
    st = h_stats(&h);
    EXPECT(sched_idle(h.s));
    EXPECT_EQ(st.blocks_used, 0);
    EXPECT_EQ(st.blocks_reserved, 0);
    EXPECT_EQ(h.pool.n_free, h.pool.n_blocks);
    h_check_all_answered(&h);
    EXPECT_EQ(h_step(&h), 0);
    h_close(&h);
}

/* ---- 5. Every sequence ends once; n > 1 forks. ---- */

TEST(every_sequence_finishes_once)
{
    enum { P = 17, T = 12, SEED = 1234 };
    struct harness h;
    if (!h_open(&h, 256, 32, 64, 64)) return;
    const struct kv_spec kvs[2] = {spec_full(), spec_abs(KV_POLICY_H2O, 4, 4)};
    /* id = 10 * n + 2 * policy + (temperature 1): the same prompt everywhere. */
    int64_t prompt_sum = 0;
    for (int32_t n = 1; n <= 4; n++)
        for (int32_t pol = 0; pol < 2; pol++)
            for (int32_t temp = 0; temp < 2; temp++) {
                struct req *r = mkreq((uint64_t)(10 * n + 2 * pol + temp), P, T, n,
                                      REQ_PRIO_BATCH, kvs[pol], 42);
                r->sp.temperature = (float)temp;
                r->seed = SEED;
                h_add(&h, r);
                prompt_sum += P;
            }
    /* seed + index: a lone request with seed SEED + 1 is sequence 1 of the others. */
    struct req *r = mkreq(50, P, T, 1, REQ_PRIO_BATCH, kvs[0], 42);
    r->sp.temperature = 1;
    r->seed = SEED + 1;
    h_add(&h, r);
    prompt_sum += P;
    /* A text prompt: BOS + 12 bytes with the dummy byte tokenizer. */
    r = req_new(51, &kvs[1]);
    r->prompt = xstrdup("Hello, world");
    r->prompt_len = strlen(r->prompt);
    r->n = 2;
    r->max_tokens = T;
    r->ignore_eos = true;
    r->sp.temperature = 0;
    h.o.r[51].n_prompt = 13;
    h_add(&h, r);
    prompt_sum += 13;
    /* max_tokens 0: every sequence finishes at once, by length, with no token. */
    r = mkreq(52, P, 0, 3, REQ_PRIO_BATCH, kvs[0], 42);
    h_add(&h, r);
    EXPECT_EQ(h.o.r[52].n_fin, 3);

    h_run_idle(&h, 1000);
    h_check_all_answered(&h);
    for (int32_t id = 10; id <= 51; id++) {
        const struct req_obs *q = &h.o.r[id];
        if (!q->added) continue;
        for (int32_t k = 0; k < q->n; k++) {
            EXPECT_EQ(q->seq[k].n_tok, T);
            EXPECT_EQ(q->seq[k].fin, REQ_FINISH_LENGTH);
        }
    }
    for (int32_t k = 0; k < 3; k++)
        EXPECT_EQ(h.o.r[52].seq[k].n_tok, 0);
    for (int32_t pol = 0; pol < 2; pol++) {
        /* Greedy: every fork, of every n, gives the text of n = 1 (the prompt's KV and
         * H2O state are copied exactly). */
        const struct seq_obs *ref = &h.o.r[10 + 2 * pol].seq[0];
        for (int32_t n = 1; n <= 4; n++)
            for (int32_t k = 0; k < n; k++) {
                const struct seq_obs *so = &h.o.r[10 * n + 2 * pol].seq[k];
                if (so->tok_hash != ref->tok_hash || so->text_hash != ref->text_hash ||
                    so->text_len != ref->text_len)
                    TEST_FAIL("greedy, %s, n %d: sequence %d differs from n = 1",
                              pol ? "h2o" : "full", n, k);
            }
        /* Sampling: sequence k samples with seed + k, so the forks differ, and
         * sequence k is the same whatever n is. */
        for (int32_t n = 2; n <= 4; n++)
            for (int32_t a = 0; a < n; a++) {
                const struct seq_obs *sa = &h.o.r[10 * n + 2 * pol + 1].seq[a];
                const struct seq_obs *same = &h.o.r[10 * 4 + 2 * pol + 1].seq[a];
                if (sa->tok_hash != same->tok_hash)
                    TEST_FAIL(
                        "temperature 1, %s: sequence %d of n %d differs from that of n 4",
                        pol ? "h2o" : "full", a, n);
                for (int32_t b = a + 1; b < n; b++) {
                    const struct seq_obs *sb = &h.o.r[10 * n + 2 * pol + 1].seq[b];
                    if (sa->tok_hash == sb->tok_hash || sa->text_hash == sb->text_hash)
                        TEST_FAIL(
                            "temperature 1, %s, n %d: sequences %d and %d are the same",
                            pol ? "h2o" : "full", n, a, b);
                }
            }
    }
    if (h.o.r[50].seq[0].tok_hash != h.o.r[41].seq[1].tok_hash)
        TEST_FAIL("a request seeded %d does not sample like sequence 1 of one seeded %d",
                  SEED + 1, SEED);
    /* A prompt is prefilled once, whatever n is. */
    EXPECT_EQ(h_stats(&h).prompt_tokens, prompt_sum);
    h_close(&h);
}

/*
 * Forks when B - 1 is a multiple of the block size (B = 1, 17, 33 with blocks of
 * 16) and the prompt is longer than B - 1: the compacted prompt holds B - 1 tokens
 * in ceil(B / 16) blocks, one more than its slots need, and each fork must get that
 * many blocks too (this aborted in sched.c's finish_prompt before 7f53c20). The
 * greedy forks must match a lone request, and B = 16, 32 are the controls.
 */
TEST(forks_when_budget_is_one_past_a_block)
{
    enum { P = 40, T = 24 };
    const int32_t hr[][2] = {{0, 1}, {8, 9}, {0, 17}, {16, 17}, {8, 8}, {16, 16}};
    const int32_t n_cases = (int32_t)ARRAY_LEN(hr);
    struct harness h;
    if (!h_open(&h, 64, 8, 32, 32)) return;
    for (int32_t c = 0; c < n_cases; c++) {
        const struct kv_spec kv = spec_abs(KV_POLICY_H2O, hr[c][0], hr[c][1]);
        h_add(&h, mkreq((uint64_t)(2 * c), P, T, 1, REQ_PRIO_BATCH, kv, 5));
        h_add(&h, mkreq((uint64_t)(2 * c + 1), P, T, 3, REQ_PRIO_BATCH, kv, 5));
        h_run_idle(&h, 1000);
    }
    h_check_all_answered(&h);
    for (int32_t c = 0; c < n_cases; c++) {
        const struct req_obs *one = &h.o.r[2 * c], *three = &h.o.r[2 * c + 1];
        for (int32_t k = 0; k < 3; k++) {
            EXPECT_EQ(three->seq[k].n_tok, T);
            if (three->seq[k].tok_hash != one->seq[0].tok_hash)
                TEST_FAIL("H %d R %d: fork %d differs from the lone request", hr[c][0],
                          hr[c][1], k);
        }
    }
    h_close(&h);
}

/*
 * The same forks with the slot state served as a device's (model_opts.device_state):
 * each fork's decode tokens must carry the H2O budget (the fork counts as prefilled,
 * or the device picks no victim and kv_seq_after_decode aborts), and every sequence
 * gives the tokens of the host-state run.
 */
TEST(forks_with_device_state)
{
    enum { P = 40, T = 24 };
    const int32_t hr[][2] = {{0, 1}, {8, 9}, {4, 3}, {16, 17}};
    const int32_t n_cases = (int32_t)ARRAY_LEN(hr);
    uint64_t hash[2][ARRAY_LEN(hr)][3];
    for (int dev = 0; dev < 2; dev++) {
        struct harness h;
        if (!h_open_ex(&h, 64, 8, 32, 32, dev == 1)) return;
        for (int32_t c = 0; c < n_cases; c++) {
            const struct kv_spec kv = spec_abs(KV_POLICY_H2O, hr[c][0], hr[c][1]);
            h_add(&h, mkreq((uint64_t)c, P, T, 3, REQ_PRIO_BATCH, kv, 9));
        }
        h_run_idle(&h, 1000);
        h_check_all_answered(&h);
        for (int32_t c = 0; c < n_cases; c++)
            for (int32_t k = 0; k < 3; k++) {
                EXPECT_EQ(h.o.r[c].seq[k].n_tok, T);
                hash[dev][c][k] = h.o.r[c].seq[k].tok_hash;
            }
        h_close(&h);
    }
    for (int32_t c = 0; c < n_cases; c++)
        for (int32_t k = 0; k < 3; k++)
            if (hash[1][c][k] != hash[0][c][k])
                TEST_FAIL("H %d R %d: fork %d differs with device_state", hr[c][0],
                          hr[c][1], k);
}

/* ---- 6. Requests that cannot run. ---- */

static void expect_rejected(struct harness *h, struct req *r, const char *what)
{
    const uint64_t id = r->id;
    h->o.r[id].expect_error = true;
    struct sched_stats before = h_stats(h);
    h_add(h, r);
    struct sched_stats after = h_stats(h);
    const struct req_obs *q = &h->o.r[id];
    if (q->n_err != 1 || q->n_events != 1)
        TEST_FAIL("%s: %d error events of %d events from sched_add, expected exactly 1",
                  what, q->n_err, q->n_events);
    if (after.n_waiting != before.n_waiting ||
        after.blocks_reserved != before.blocks_reserved)
        TEST_FAIL("%s: the rejected request was queued", what);
}

TEST(errors)
{
    struct harness h;
    if (!h_open(&h, 160, 4, 64, 64)) return;
    const struct kv_spec full = spec_full();
    struct req *r;

    r = mkreq(1, 0, 8, 1, REQ_PRIO_BATCH, full, 1);
    expect_rejected(&h, r, "an empty prompt");
    r = mkreq(3, 2000, MAX_POS - 2000 + 1, 1, REQ_PRIO_BATCH, spec_abs(KV_POLICY_H2O, 8, 8),
              3);
    expect_rejected(&h, r, "prompt 2000 + max_tokens 49 > 2048 positions");
    r = mkreq(4, 3000, 1, 1, REQ_PRIO_BATCH, full, 4);
    expect_rejected(&h, r, "a prompt of 3000 tokens");
    r = mkreq(5, 1000, 1000, 2, REQ_PRIO_BATCH, full, 5);
    CHECK(admit_blocks(&full, 1000, 1000, 2) > 160);
    expect_rejected(&h, r, "2 x 125 blocks in a pool of 160");
    r = mkreq(6, 10, 10, 5, REQ_PRIO_BATCH, full, 6);
    expect_rejected(&h, r, "n 5 > max_num_seqs 4");
    r = mkreq(7, 10, 10, 1, REQ_PRIO_BATCH, full, 7);
    r->prompt_ids[3] = VOCAB;
    expect_rejected(&h, r, "token id 512 in a vocabulary of 512");
    r = mkreq(8, 10, 10, 1, REQ_PRIO_BATCH, full, 8);
    r->prompt_ids[0] = -1;
    expect_rejected(&h, r, "token id -1");
    r = mkreq(9, 10, 10, 1, REQ_PRIO_BATCH, spec_abs(KV_POLICY_H2O, 4, 0), 9);
    expect_rejected(&h, r, "a recent window of 0");
    r = mkreq(10, 10, 10, 1, REQ_PRIO_BATCH, spec_ratio(KV_POLICY_H2O, -0.1f, 0.1f), 10);
    expect_rejected(&h, r, "a negative heavy ratio");
    r = mkreq(11, 10, 10, 0, REQ_PRIO_BATCH, full, 11);
    expect_rejected(&h, r, "n 0");
    r = mkreq(12, 10, -1, 1, REQ_PRIO_BATCH, full, 12);
    expect_rejected(&h, r, "max_tokens -1");
    EXPECT(sched_idle(h.s));
    EXPECT_EQ(h_step(&h), 0);

    /* Still working: the longest request the context allows (2000 + 48 = 2048
     * positions, 128 blocks of full KV), beside a short H2O one. */
    h_add(&h, mkreq(20, 2000, MAX_POS - 2000, 1, REQ_PRIO_BATCH, full, 20));
    h_add(&h,
          mkreq(21, 30, 10, 2, REQ_PRIO_INTERACTIVE, spec_abs(KV_POLICY_H2O, 2, 2), 21));
    h_run_idle(&h, 1000);
    h_check_all_answered(&h);
    EXPECT_EQ(h.o.r[20].seq[0].n_tok, 48);
    EXPECT_EQ(h.o.r[21].seq[1].n_tok, 10);
    h_close(&h);
}

/* sched_create refuses options that leave a step no room for prompt tokens, a
 * negative batch prompt cap, and a max_model_len past the model's positions. */
TEST(invalid_options)
{
    struct model *m = tiny_model(4);
    if (!m) return;
    struct kv_pool pool;
    kv_pool_init(&pool, 4, BS);
    struct obs o = {0};
    const struct sched_opts bad[] = {{0, 16, 0, 0}, {8, 8, 0, 0}, {8, 4, 0, 0},
                                     {8, 16, -1, 0}, {8, 16, 0, MAX_POS + 1},
                                     {8, 16, 0, -1}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct sched *s = sched_create(m, &pool, &bad[i], on_event, &o);
        if (s)
            TEST_FAIL("sched_create accepted max_num_seqs %d, max_batched_tokens %d, "
                      "batch_prompt_tokens %d, max_model_len %d",
                      bad[i].max_num_seqs, bad[i].max_batched_tokens,
                      bad[i].batch_prompt_tokens, bad[i].max_model_len);
        sched_destroy(s);
    }
    /* The message says what the model supports. */
    EXPECT(strstr(err_msg(), "max_model_len") != NULL);
    EXPECT(strstr(err_msg(), "2048") != NULL);
    kv_pool_deinit(&pool);
    model_destroy(m);
}

/* max_model_len 100 on a model of 2048 positions: prompt + max_tokens = 101 is refused
 * with the context length the engine was given, 100 runs to its last token. */
TEST(max_model_len_limits_the_context)
{
    struct harness h;
    if (!h_open(&h, 64, 4, 64, 8)) return;
    sched_destroy(h.s);
    h.so.max_model_len = 100;
    h.s = sched_create(h.m, &h.pool, &h.so, on_event, &h.o);
    CHECK(h.s);
    const struct kv_spec full = spec_full();
    expect_rejected(&h, mkreq(1, 60, 41, 1, REQ_PRIO_BATCH, full, 1), "60 + 41 > 100");
    EXPECT(strstr(h.o.r[1].err_msg, "maximum context length is 100 tokens") != NULL);
    h_add(&h, mkreq(2, 60, 40, 1, REQ_PRIO_BATCH, full, 2));
    h_run_idle(&h, 1000);
    h_check_all_answered(&h);
    EXPECT_EQ(h.o.r[2].seq[0].n_tok, 40);
    h_close(&h);
}

/* ---- 7. The memory bound and admission: the H2O claim. ---- */

/*
 * A request with neither a prompt nor prompt ids (req_new's zeroes) is rejected like
 * an empty prompt. Last in the file: sched_add used to memcpy from the NULL
 * prompt_ids (size 0, still undefined), which UBSan with halt_on_error stops at.
 */
TEST(request_without_prompt)
{
    struct harness h;
    if (!h_open(&h, 16, 4, 64, 8)) return;
    const struct kv_spec full = spec_full();
    struct req *r = req_new(2, &full);
    r->ignore_eos = true;
    expect_rejected(&h, r, "no prompt at all (NULL prompt and prompt_ids)");
    h_add(&h, mkreq(3, 5, 5, 1, REQ_PRIO_BATCH, full, 3));
    h_run_idle(&h, 100);
    h_check_all_answered(&h);
    h_close(&h);
}

/* ---- Budgets near INT32_MAX. ---- */

/*
 * The API accepts any absolute heavy / recent count up to INT32_MAX. H + R then
 * overflowed int32 in kv_budget_slots (and ceil(B / block_size) for values just
 * below it), so the scheduler computed a negative decode share and aborted on its
 * own invariants: one request could take the server down. A budget that large can
 * never evict anything, so it must run exactly like a full cache.
 */
TEST(huge_absolute_budget)
{
    const int32_t hr[][2] = {
        {INT32_MAX, 1}, {1, INT32_MAX}, {INT32_MAX, INT32_MAX}, {INT32_MAX - 20, 5}};
    struct kv_budget b;
    for (int32_t c = 0; c < (int32_t)ARRAY_LEN(hr); c++) {
        const struct kv_spec kv = spec_abs(KV_POLICY_H2O, hr[c][0], hr[c][1]);
        CHECK(kv_budget_resolve(&kv, 20, 8, &b) == 0);
        const int64_t B = (int64_t)b.heavy + b.recent;
        /* Still no eviction: B above every token the sequence can hold. */
        EXPECT(B >= 28);
        /* ceil(B / block_size) must not overflow either. */
        EXPECT(B <= INT32_MAX - 4096);
        EXPECT_EQ((int64_t)kv_budget_slots(&b), B);
    }

    struct harness h;
    if (!h_open(&h, 64, 8, 64, 16)) return;
    for (int32_t c = 0; c < (int32_t)ARRAY_LEN(hr); c++) {
        const struct kv_spec kv = spec_abs(KV_POLICY_H2O, hr[c][0], hr[c][1]);
        h_add(&h, mkreq((uint64_t)(2 * c), 20, 8, 2, REQ_PRIO_BATCH, kv, 9));
        h_add(&h, mkreq((uint64_t)(2 * c + 1), 20, 8, 1, REQ_PRIO_BATCH, spec_full(), 9));
        h_run_idle(&h, 200);
    }
    h_check_all_answered(&h);
    for (int32_t c = 0; c < (int32_t)ARRAY_LEN(hr); c++) {
        const struct req_obs *big = &h.o.r[2 * c], *full = &h.o.r[2 * c + 1];
        for (int32_t k = 0; k < 2; k++)
            if (big->seq[k].tok_hash != full->seq[0].tok_hash)
                TEST_FAIL("H %d R %d seq %d: differs from the full cache", hr[c][0],
                          hr[c][1], k);
    }
    h_close(&h);
}

/* ---- Forks at every budget shape. ---- */

/*
 * Greedy forks must each produce the lone request's tokens: the fork copies blocks,
 * slot state and n_slots, and every later eviction must see the same state in every
 * fork. Budgets: below the prompt (compacted), the prompt exactly B - 1 and B, above
 * the prompt but reached while decoding, never reached; max_tokens 1 (the forks never
 * decode) and 2 (one decode step, not cached after).
 */
TEST(forks_match_lone_request)
{
    const int32_t cases[][4] = {
        /* P, H, R, max_tokens */
        {40, 4, 3, 30}, {9, 5, 5, 30}, {10, 5, 5, 30}, {12, 10, 10, 30}, {20, 40, 40, 20},
        {40, 4, 3, 1},  {40, 4, 3, 2}, {9, 5, 5, 2},   {17, 0, 1, 20},   {16, 8, 9, 25},
    };
    const int32_t n_cases = (int32_t)ARRAY_LEN(cases);
    struct harness h;
    if (!h_open(&h, 128, 8, 64, 2 * n_cases)) return;
    for (int32_t c = 0; c < n_cases; c++) {
        const struct kv_spec kv = spec_abs(KV_POLICY_H2O, cases[c][1], cases[c][2]);
        h_add(&h, mkreq((uint64_t)(2 * c), cases[c][0], cases[c][3], 1, REQ_PRIO_BATCH, kv,
                        31));
        h_add(&h, mkreq((uint64_t)(2 * c + 1), cases[c][0], cases[c][3], 4, REQ_PRIO_BATCH,
                        kv, 31));
    }
    h_run_idle(&h, 2000);
    h_check_all_answered(&h);
    for (int32_t c = 0; c < n_cases; c++) {
        const struct req_obs *one = &h.o.r[2 * c], *four = &h.o.r[2 * c + 1];
        for (int32_t k = 0; k < 4; k++) {
            EXPECT_EQ(four->seq[k].n_tok, cases[c][3]);
            if (four->seq[k].tok_hash != one->seq[0].tok_hash)
                TEST_FAIL("P %d H %d R %d T %d: fork %d differs from the lone request",
                          cases[c][0], cases[c][1], cases[c][2], cases[c][3], k);
        }
    }
    h_close(&h);
}

int main(void)
{
    RUN(fcfs_one_seq_at_a_time);
    RUN(fcfs_pool_fits_one);
    RUN(interactive_before_batch);
    RUN(interactive_before_batch_pool_bound);
    RUN(long_prompt_not_starved);
    RUN(cancel_frees_blocks_at_once);
    RUN(cancel_all_frees_everything);
    RUN(every_sequence_finishes_once);
    RUN(forks_when_budget_is_one_past_a_block);
    RUN(forks_with_device_state);
    RUN(errors);
    RUN(invalid_options);
    RUN(max_model_len_limits_the_context);
    RUN(request_without_prompt);
    RUN(huge_absolute_budget);
    RUN(forks_match_lone_request);
    return test_done();
}
