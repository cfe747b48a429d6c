/*
 * test_sched_stress.c - the scheduler at scale: the H2O admission claim (the same
 * pool holds about 5x as many 512 + 512 sequences at the 20% budget as with the full
 * cache) and a seeded stress run of 1000 random requests with random cancels. The
 * observer of sched_harness.h checks every event; every block returns to the pool.
 */
#include "sched_harness.h"

/*
 * 64 identical requests of 512 + 512 tokens into a pool of 512 blocks of 16, which
 * is what the full policy needs for 8 sequences (64 blocks each). With H2O 20%
 * (heavy = recent = 0.1 of 1024: B = 206, 13 blocks) a decoding sequence keeps 13
 * blocks and a prefilling one reserves its 32 prompt blocks, so the steady state is
 * floor((512 - 32) / 13) = 36 decoding plus one prefilling, 37 once that one is done.
 * Nothing finishes in the steps run here (512 tokens each); the run stops when the
 * number decoding has not grown for 16 steps, then everything is cancelled.
 */
static int32_t max_decoding(struct kv_spec kv, int32_t *max_seqs, int32_t *budget_blocks,
                            int32_t *max_blocks, int64_t *steps)
{
    enum { N = 64, P = 512, T = 512 };
    struct harness h;
    if (!h_open(&h, 512, 128, 1024, N)) return -1;
    for (int32_t i = 0; i < N; i++)
        h_add(&h, mkreq((uint64_t)i, P, T, 1, REQ_PRIO_BATCH, kv, 7));
    int32_t best = 0, since = 0;
    int64_t k = 0;
    for (; k < 400 && since < 16; k++) {
        h_step(&h);
        if (h.o.n_decoding > best) {
            best = h.o.n_decoding;
            since = 0;
        } else {
            since++;
        }
    }
    EXPECT(h.o.n_fin_order == 0);
    *max_seqs = h.max_n_seqs;
    *budget_blocks = h.o.max_budget_blocks;
    *max_blocks = h.o.max_kv_blocks;
    *steps = k;
    h_cancel_all(&h);
    EXPECT(sched_idle(h.s));
    h_check_all_answered(&h);
    h_close(&h);
    return best;
}

TEST(h2o_admits_more_than_full)
{
    int32_t full_seqs, h2o_seqs, full_budget, h2o_budget, full_blocks, h2o_blocks;
    int64_t full_steps, h2o_steps;
    const int32_t full =
        max_decoding(spec_full(), &full_seqs, &full_budget, &full_blocks, &full_steps);
    const int32_t h2o = max_decoding(spec_ratio(KV_POLICY_H2O, 0.1f, 0.1f), &h2o_seqs,
                                     &h2o_budget, &h2o_blocks, &h2o_steps);
    printf("# pool of 512 blocks, 512 + 512 tokens: full decodes %d at once (%d live, %lld "
           "steps), h2o 20%% %d (%d live, %lld steps, %d blocks each at most), %.2fx\n",
           full, full_seqs, (long long)full_steps, h2o, h2o_seqs, (long long)h2o_steps,
           h2o_blocks, full > 0 ? (double)h2o / full : 0.0);
    EXPECT_EQ(full, 8);
    EXPECT_EQ(full_seqs, 8);
    EXPECT_EQ(full_budget, 0);
    EXPECT_EQ(h2o_budget, 13);
    EXPECT(h2o_blocks <= 13);
    EXPECT(2 * h2o >= 9 * full); /* >= 4.5x */
    EXPECT(h2o <= 512 / 13);     /* and never more than the pool holds */
}

/* ---- 8. Stress. ---- */

enum cancel_kind { CANCEL_WAITING, CANCEL_PREFILLING, CANCEL_DECODING, N_CANCEL_KINDS };

struct stress_req {
    struct kv_spec kv;
    int32_t P, T, n;
    enum req_priority prio;
};

/* Cancel live request `id` and check what came back against where it was. */
static void stress_cancel(struct harness *h, const struct stress_req *sr, uint64_t id,
                          int32_t *kinds)
{
    const struct req_obs *q = &h->o.r[id];
    const struct sched_stats b = h_stats(h);
    int32_t live = 0, held = 0;
    for (int32_t k = 0; k < q->n; k++)
        if (!q->seq[k].n_fin) {
            live++;
            held += q->seq[k].last_blocks;
        }
    const bool decoding = q->seq[0].n_tok > 0;
    const int32_t events = q->n_events;
    h_cancel(h, id);
    const struct sched_stats a = h_stats(h);
    const int32_t d_used = b.blocks_used - a.blocks_used;
    const int32_t d_res = b.blocks_reserved - a.blocks_reserved;
    if (q->n_events - events != live || q->n_fin != q->n)
        violation(&h->o, "cancel of req %llu: %d events for %d live sequences",
                  (unsigned long long)id, q->n_events - events, live);
    if (decoding) {
        kinds[CANCEL_DECODING]++;
        const int32_t share = live * decode_blocks(&sr->kv, sr->P, sr->T);
        if (d_used != held || d_res != share || b.n_running - a.n_running != 1)
            violation(&h->o,
                      "cancel of decoding req %llu: freed %d blocks (held %d) and %d "
                      "reserved (expected %d)",
                      (unsigned long long)id, d_used, held, d_res, share);
    } else if (d_res == 0) {
        kinds[CANCEL_WAITING]++;
        if (d_used != 0 || b.n_waiting - a.n_waiting != 1)
            violation(&h->o,
                      "cancel of waiting req %llu: freed %d blocks, waiting %d -> %d",
                      (unsigned long long)id, d_used, b.n_waiting, a.n_waiting);
    } else {
        kinds[CANCEL_PREFILLING]++;
        const int32_t res = admit_blocks(&sr->kv, sr->P, sr->T, sr->n);
        if (d_res != res || d_used < 1 || d_used > CEIL_DIV(sr->P, BS) ||
            b.n_running - a.n_running != 1)
            violation(&h->o,
                      "cancel of prefilling req %llu: freed %d blocks (prompt %d) and "
                      "%d reserved (expected %d)",
                      (unsigned long long)id, d_used, CEIL_DIV(sr->P, BS), d_res, res);
    }
}

/* A random request: mostly valid, 2% built to be rejected. */
static void stress_make(uint64_t *rng, struct stress_req *sr, bool *bad)
{
    sr->P = lcg_range(rng, 1, 200);
    sr->T = lcg_range(rng, 1, 64);
    sr->n = lcg_range(rng, 1, 3);
    switch (lcg(rng) % 10) {
    case 0:
    case 1: sr->kv = spec_full(); break;
    case 2: sr->kv = spec_ratio(KV_POLICY_H2O, 0.1f, 0.1f); break;
    case 3: sr->kv = spec_ratio(KV_POLICY_H2O, 0.05f, 0.15f); break;
    case 4: sr->kv = spec_ratio(KV_POLICY_H2O, 0.3f, 0.0f); break; /* R = 1 */
    case 5: sr->kv = spec_ratio(KV_POLICY_LOCAL, 0.1f, 0.2f); break;
    case 6: sr->kv = spec_abs(KV_POLICY_H2O, 0, lcg_range(rng, 1, 40)); break; /* H = 0 */
    case 7: sr->kv = spec_abs(KV_POLICY_H2O, lcg_range(rng, 0, 40), 1); break; /* R = 1 */
    case 8:
        sr->kv = spec_abs(KV_POLICY_H2O, lcg_range(rng, 0, 300), lcg_range(rng, 1, 300));
        break;
    default: sr->kv = spec_abs(KV_POLICY_LOCAL, -1, lcg_range(rng, 1, 64)); break;
    }
    *bad = lcg(rng) % 50 == 0;
    if (*bad) sr->kv = spec_abs(KV_POLICY_H2O, 4, 0); /* recent 0: rejected */
}

/* One scheduler, n_req random requests; returns the steps taken. */
static int64_t stress_round(uint64_t seed, int32_t n_req, int32_t *kinds,
                            int64_t *n_rejected)
{
    uint64_t rng = seed;
    const int32_t mbts[4] = {17, 32, 64, 100}, pools[3] = {64, 128, 256};
    const int32_t mbt = mbts[lcg(&rng) % 4];
    const int32_t mns = lcg_range(&rng, 3, MIN(40, mbt - 1));
    /* The largest request (full, 200 + 64 tokens, n 3) needs 51 blocks. */
    const int32_t n_blocks = pools[lcg(&rng) % 3];
    struct harness h;
    if (!h_open(&h, n_blocks, mns, mbt, n_req)) return 0;
    printf("# stress round seed %llu: %d requests, max_num_seqs %d, max_batched_tokens %d, "
           "%d blocks of %d\n",
           (unsigned long long)seed, n_req, mns, mbt, n_blocks, BS);
    struct stress_req *reqs = xcalloc((size_t)n_req, sizeof *reqs);
    int32_t added = 0;
    int64_t steps = 0, prompt_lo = 0, prompt_hi = 0;
    int32_t max_reserved = 0;
    while (added < n_req || !sched_idle(h.s)) {
        /* Arrivals: about one every three steps, in bursts, so the queue comes and
         * goes instead of only growing. */
        if (added < n_req && lcg(&rng) % 6 == 0) {
            int32_t burst = lcg_range(&rng, 1, 3);
            for (int32_t b = 0; b < burst && added < n_req; b++) {
                const uint64_t id = (uint64_t)added;
                struct stress_req *sr = &reqs[added++];
                bool bad;
                stress_make(&rng, sr, &bad);
                sr->prio = lcg(&rng) % 2 ? REQ_PRIO_BATCH : REQ_PRIO_INTERACTIVE;
                struct req *r = mkreq(id, sr->P, sr->T, sr->n, sr->prio, sr->kv, rng);
                if (lcg(&rng) % 4 == 0) {
                    r->sp.temperature = 1;
                    r->seed = lcg(&rng);
                }
                h.o.r[id].expect_error = bad;
                h_add(&h, r);
                if (bad) {
                    (*n_rejected)++;
                    /* Cancelling a rejected id is cancelling an unknown one: ignored. */
                    h_cancel(&h, id);
                } else {
                    prompt_hi += sr->P;
                    if (lcg(&rng) % 20 == 0) stress_cancel(&h, sr, id, kinds); /* at once */
                }
            }
        }
        /* Cancels of live requests, wherever they are: a random one, one that is
         * decoding, or the oldest of a class with no token yet (likely mid-prompt:
         * admission is FCFS). */
        if (added > 0 && lcg(&rng) % 8 == 0) {
            const int32_t how = (int32_t)(lcg(&rng) % 3),
                          from = (int32_t)(lcg(&rng) % added);
            const enum req_priority prio =
                lcg(&rng) % 2 ? REQ_PRIO_BATCH : REQ_PRIO_INTERACTIVE;
            int64_t pick = how == 0 ? from : -1;
            for (int32_t k = 0; k < added && pick < 0; k++) {
                const int32_t i = how == 1 ? (from + k) % added : k;
                const struct req_obs *q = &h.o.r[i];
                if (q->expect_error || q->cancelled || q->n_fin == q->n) continue;
                if (how == 1 ? q->first_token_step >= 0
                             : reqs[i].prio == prio && q->first_token_step < 0)
                    pick = i;
            }
            const struct req_obs *q = pick >= 0 ? &h.o.r[pick] : NULL;
            if (q && !q->expect_error && !q->cancelled && q->n_fin < q->n)
                stress_cancel(&h, &reqs[pick], (uint64_t)pick, kinds);
        }
        const struct sched_stats st_now = h_stats(&h);
        max_reserved = MAX(max_reserved, st_now.blocks_reserved);
        if (!sched_idle(h.s)) {
            if (h_step(&h) <= 0) {
                TEST_FAIL("sched_step did no work while requests were waiting or running");
                break;
            }
            steps++;
        }
        if (h.o.n_violations > 20) break;
    }
    printf("# %lld steps, at most %d of %d blocks reserved\n", (long long)steps,
           max_reserved, n_blocks);
    h_check_all_answered(&h);
    for (int32_t i = 0; i < added; i++)
        if (h.o.r[i].seq[0].n_tok > 0) prompt_lo += reqs[i].P;
    const struct sched_stats st = h_stats(&h);
    if (st.prompt_tokens < prompt_lo || st.prompt_tokens > prompt_hi)
        TEST_FAIL("prompt_tokens %lld outside [%lld, %lld]", (long long)st.prompt_tokens,
                  (long long)prompt_lo, (long long)prompt_hi);
    free(reqs);
    h_close(&h);
    return steps;
}

TEST(stress_1000_random_requests)
{
    int32_t kinds[N_CANCEL_KINDS] = {0};
    int64_t rejected = 0, steps = 0;
    const double t0 = time_now();
    for (int32_t round = 0; round < 8 && !test_cur_failed; round++)
        steps += stress_round(0x5eed0000u + (uint64_t)round, 125, kinds, &rejected);
    printf("# 1000 requests in %lld steps, %.1f s: %lld rejected; cancelled %d waiting, %d "
           "mid-prompt, %d decoding\n",
           (long long)steps, time_now() - t0, (long long)rejected, kinds[CANCEL_WAITING],
           kinds[CANCEL_PREFILLING], kinds[CANCEL_DECODING]);
    EXPECT(rejected > 0);
    for (int k = 0; k < N_CANCEL_KINDS; k++)
        EXPECT(kinds[k] >= 5);
}


int main(void)
{
    RUN(h2o_admits_more_than_full);
    RUN(stress_1000_random_requests);
    return test_done();
}
