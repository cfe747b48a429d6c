/*
 * test_sched_step.c - one scheduler step (engine/sched_step.c, see sched.h) as a
 * specification: which tokens a step carries, and how the step samples. The
 * requests' side (admission, reservations, forks, cancelling) is test_sched.c's.
 *
 * Every test drives the scheduler directly on dummy:tiny in fp32 through
 * tests/lib/sched_harness.h, whose observer checks every event as it arrives and
 * whose h_close checks that every block is back in the pool.
 *
 * The tests, one per claim of sched.h and docs/kv-cache.md "Memory and admission":
 * a step with interactive prompt work carries no batch sequence, yet batch
 * sequences are never starved by a stream of interactive prompts (at most 4 steps
 * in a row sit out); batch prompt tokens per step stay within batch_prompt_tokens;
 * sampling on the "device" (the logits left on the backend) gives the host
 * sampler's tokens and logprobs bit for bit; and every EOS id of the tokenizer ends a
 * sequence.
 */
#include "sched_harness.h"

#include "tokenizer.h"
#include "tokenizer_impl.h" /* tokenizer_set_eos: the EOS set of a Llama 3 folder */

/* ---- Interactive prompts before batch work, once admitted too. ---- */

/* Token events of requests first..last so far. */
static int64_t tokens_of(const struct harness *h, uint64_t first, uint64_t last)
{
    int64_t n = 0;
    for (uint64_t id = first; id <= last; id++)
        for (int32_t k = 0; k < MIN(h->o.r[id].n, MAXN); k++)
            n += h->o.r[id].seq[k].n_tok;
    return n;
}

/* Replace h's scheduler (made by h_open, still empty) with one made with o. */
static bool h_reopen(struct harness *h, const struct sched_opts *o)
{
    CHECK(sched_idle(h->s) && h->o.step == 0);
    sched_destroy(h->s);
    h->so = *o;
    h->s = sched_create(h->m, &h->pool, &h->so, on_event, &h->o);
    if (!h->s) TEST_FAIL("sched_create: %s", err_msg());
    return h->s != NULL;
}

/*
 * Four batch requests decode (max_batched_tokens 16) when an interactive request of
 * 40 prompt tokens arrives. While its prompt is prefilled it has the steps to
 * itself: 16, 16 and 8 tokens, so its first token comes 3 steps after it was added
 * (beside the 4 batch decodes it would take ceil(40 / 12) = 4 steps), no batch
 * sequence gets a token in those steps and no batch request that arrived with it is
 * admitted. Then the batch sequences go on, and every
 * sequence's tokens are exactly those of the same requests run without the other
 * class: sitting a step out changes nothing but when.
 */
TEST(interactive_prompt_steps_carry_no_batch)
{
    enum { NB = 4, PB = 8, TB = 24, PI = 40, TI = 6, MBT = 16, ID_I = 10 };
    struct harness h;
    if (!h_open(&h, 64, 8, MBT, 16)) return;
    for (uint64_t id = 1; id <= NB; id++)
        h_add(&h, mkreq(id, PB, TB, 1, REQ_PRIO_BATCH, spec_full(), id));
    while (h.o.n_decoding < NB && h.o.step < 10) h_step(&h);
    EXPECT_EQ(h.o.n_decoding, NB);
    h_add(&h, mkreq(ID_I, PI, TI, 1, REQ_PRIO_INTERACTIVE, spec_full(), 99));
    /* A batch request that arrives meanwhile is not admitted in those steps. */
    h_add(&h, mkreq(NB + 1, PB, TB, 1, REQ_PRIO_BATCH, spec_full(), NB + 1));
    const int64_t batch0 = tokens_of(&h, 1, NB);
    const int32_t want_n[3] = {MBT, MBT, PI - 2 * MBT};
    for (int32_t k = 0; k < 3; k++) {
        EXPECT_EQ(h_step(&h), want_n[k]);
        EXPECT_EQ(tokens_of(&h, 1, NB), batch0);
        EXPECT_EQ(h_stats(&h).n_waiting, 1);
    }
    EXPECT_EQ(h.o.r[ID_I].first_token_step - h.o.r[ID_I].add_step, 3);
    /* The prompt is in: every sequence decodes again in the next step, and the new
     * batch prompt joins it. */
    EXPECT_EQ(h_step(&h), NB + 1 + PB);
    EXPECT_EQ(tokens_of(&h, 1, NB + 1), batch0 + NB + 1);
    h_run_idle(&h, 1000);
    h_check_all_answered(&h);

    struct harness ref;
    if (!h_open(&ref, 64, 8, MBT, 16)) return;
    for (uint64_t id = 1; id <= NB + 1; id++)
        h_add(&ref, mkreq(id, PB, TB, 1, REQ_PRIO_BATCH, spec_full(), id));
    h_run_idle(&ref, 1000);
    h_add(&ref, mkreq(ID_I, PI, TI, 1, REQ_PRIO_INTERACTIVE, spec_full(), 99));
    h_run_idle(&ref, 1000);
    h_check_all_answered(&ref);
    for (uint64_t id = 1; id <= ID_I; id++) {
        const struct seq_obs *a = &h.o.r[id].seq[0], *b = &ref.o.r[id].seq[0];
        if (!h.o.r[id].added) continue;
        EXPECT_EQ(a->n_tok, id == ID_I ? (int32_t)TI : (int32_t)TB);
        if (a->tok_hash != b->tok_hash || a->text_hash != b->text_hash)
            TEST_FAIL("req %llu: its tokens depend on the other class's requests",
                      (unsigned long long)id);
    }
    h_close(&ref);
    h_close(&h);
}

/*
 * Batch sequences are slowed, never starved: an interactive prompt of a whole step
 * (32 tokens, max_tokens 1) arrives before each of 150 steps, so every step has
 * interactive prompt work. The two decoding batch requests sit out 4 steps in a
 * row, then get a step: one token every fifth step, so their 20 tokens take about
 * 100 steps, and they finish while the stream still runs.
 */
TEST(batch_not_starved_by_interactive_prompts)
{
    enum { PB = 8, TB = 20, PI = 32, STREAM = 150, MBT = 32 };
    struct harness h;
    if (!h_open(&h, 64, 8, MBT, 3 + STREAM)) return;
    h_add(&h, mkreq(1, PB, TB, 1, REQ_PRIO_BATCH, spec_full(), 1));
    h_add(&h, mkreq(2, PB, TB, 1, REQ_PRIO_BATCH, spec_full(), 2));
    h_step(&h); /* both prompts fit one step: both decode from now on */
    EXPECT_EQ(h.o.n_decoding, 2);
    const int64_t start = h.o.step;
    int32_t gap = 0, max_gap = 0, sat_out = 0;
    for (int32_t t = 0; t < STREAM; t++) {
        h_add(&h, mkreq(3 + (uint64_t)t, PI, 1, 1, REQ_PRIO_INTERACTIVE, spec_full(),
                        3 + (uint64_t)t));
        const int64_t before = tokens_of(&h, 1, 2);
        const bool batch_live = h.o.r[1].n_fin + h.o.r[2].n_fin < 2;
        h_step(&h);
        if (batch_live && tokens_of(&h, 1, 2) == before) {
            sat_out++;
            gap++;
            max_gap = MAX(max_gap, gap);
        } else {
            gap = 0;
        }
    }
    printf("# batch sat out %d steps, at most %d in a row; finished %lld and %lld steps "
           "into the stream\n",
           sat_out, max_gap, (long long)(h.o.r[1].finish_step - start),
           (long long)(h.o.r[2].finish_step - start));
    EXPECT_EQ(max_gap, 4);
    for (uint64_t id = 1; id <= 2; id++) {
        EXPECT(h.o.r[id].finish_step > 0);
        EXPECT(h.o.r[id].finish_step - start <= 5 * TB);
    }
    h_run_idle(&h, 1000);
    h_check_all_answered(&h);
    h_close(&h);
}

/* Prompt tokens the scheduler processed in the next step. */
static int64_t step_prompt_tokens(struct harness *h)
{
    const int64_t before = h_stats(h).prompt_tokens;
    h_step(h);
    return h_stats(h).prompt_tokens - before;
}

/*
 * A step carries at most batch_prompt_tokens batch prompt tokens (0: no cap but
 * max_batched_tokens), so the step an interactive request arrives during is short;
 * interactive prompts are not capped. max_batched_tokens 64: eight batch prompts of
 * 30 tokens enter 64, 20 or 8 tokens a step; an interactive prompt of 60 tokens
 * that arrives meanwhile is prefilled in one step.
 */
TEST(batch_prompt_tokens_per_step)
{
    enum { N = 8, PB = 30, TB = 4, PI = 60, MBT = 64 };
    const int32_t caps[3] = {0, 20, 8};
    for (int32_t c = 0; c < 3; c++) {
        const int32_t cap = caps[c];
        struct harness h;
        if (!h_open(&h, 128, 16, MBT, 16)) return;
        const struct sched_opts o = {
            .max_num_seqs = 16, .max_batched_tokens = MBT, .batch_prompt_tokens = cap};
        if (!h_reopen(&h, &o)) {
            h_close(&h);
            return;
        }
        const int64_t want = cap ? cap : MBT;
        for (uint64_t id = 1; id <= N; id++)
            h_add(&h, mkreq(id, PB, TB, 1, REQ_PRIO_BATCH, spec_full(), id));
        int64_t most = 0, n;
        for (int32_t k = 0; k < 4; k++) {
            n = step_prompt_tokens(&h); /* not inside MAX(), which evaluates twice */
            most = MAX(most, n);
        }
        h_add(&h, mkreq(11, PI, TB, 1, REQ_PRIO_INTERACTIVE, spec_full(), 11));
        EXPECT_EQ(step_prompt_tokens(&h), PI);
        EXPECT_EQ(h.o.r[11].first_token_step, h.o.step);
        while (!sched_idle(h.s)) {
            n = step_prompt_tokens(&h);
            most = MAX(most, n);
        }
        printf("# batch_prompt_tokens %d: at most %lld batch prompt tokens a step\n", cap,
               (long long)most);
        EXPECT_EQ(most, want);
        h_check_all_answered(&h);
        h_close(&h);
    }
}


/* ---- Sampling on the device. ---- */

/*
 * Sampling on the "device" (device_state: the CPU backend keeps the logits and runs
 * the sampler's device half, be_ops.sample) gives what the host sampler gives, bit
 * for bit: random draws with top-k, top-p and temperature, presence and frequency
 * penalties, logit_bias, logprobs with alternatives, and n = 2 completions sampled
 * from one prompt row. (test_prompt_logprobs covers the steps that need host
 * logits.)
 */
TEST(sampling_on_the_device_matches_the_host)
{
    enum { P = 24, T = 20, N_REQ = 5 };
    static const int32_t bias_ids[] = {7, 11, 300};
    static const float bias_vals[] = {2.5f, -100.0f, 1.25f};
    uint64_t tok[2][N_REQ][2], lp[2][N_REQ][2], text[2][N_REQ][2];
    for (int dev = 0; dev < 2; dev++) {
        struct harness h;
        if (!h_open_ex(&h, 96, 10, 48, N_REQ, dev == 1)) return;
        for (int32_t c = 0; c < N_REQ; c++) {
            const struct kv_spec kv = spec_abs(c % 2 ? KV_POLICY_H2O : KV_POLICY_FULL, 4, 5);
            struct req *r = mkreq((uint64_t)c, P, T, 2, REQ_PRIO_INTERACTIVE, kv, 40 + c);
            r->seed = 1000 + (uint64_t)c;
            r->sp.temperature = 0.3f + 0.4f * (float)c;
            r->sp.top_k = c == 1 ? 30 : 0;
            r->sp.top_p = c == 2 ? 0.85f : 1.0f;
            r->sp.presence_penalty = c >= 3 ? 0.7f : 0.0f;
            r->sp.frequency_penalty = c >= 3 ? 0.4f : 0.0f;
            r->sp.n_logprobs = c % 3 == 0 ? 3 : -1;
            if (c == 4) {
                r->bias_ids = xmalloc(sizeof bias_ids);
                r->bias_vals = xmalloc(sizeof bias_vals);
                memcpy(r->bias_ids, bias_ids, sizeof bias_ids);
                memcpy(r->bias_vals, bias_vals, sizeof bias_vals);
                r->sp.bias_ids = r->bias_ids;
                r->sp.bias_vals = r->bias_vals;
                r->sp.n_bias = (int32_t)ARRAY_LEN(bias_ids);
            }
            h_add(&h, r);
        }
        h_run_idle(&h, 1000);
        h_check_all_answered(&h);
        for (int32_t c = 0; c < N_REQ; c++)
            for (int32_t k = 0; k < 2; k++) {
                EXPECT_EQ(h.o.r[c].seq[k].n_tok, T);
                tok[dev][c][k] = h.o.r[c].seq[k].tok_hash;
                lp[dev][c][k] = h.o.r[c].seq[k].lp_hash;
                text[dev][c][k] = h.o.r[c].seq[k].text_hash;
            }
        h_close(&h);
    }
    for (int32_t c = 0; c < N_REQ; c++) {
        if (tok[0][c][0] == tok[0][c][1]) TEST_FAIL("req %d: the two samples are alike", c);
        for (int32_t k = 0; k < 2; k++)
            if (tok[1][c][k] != tok[0][c][k] || lp[1][c][k] != lp[0][c][k] ||
                text[1][c][k] != text[0][c][k])
                TEST_FAIL("req %d seq %d: device sampling differs from the host's", c, k);
    }
}

/* ---- Every EOS id ends a sequence. ---- */

struct eos_seen {
    struct harness *h;
    int32_t n_tok, last_tok;
    enum req_finish fin;
};

static void eos_event(void *arg, struct req_event *ev)
{
    struct eos_seen *e = arg;
    if (ev->token >= 0) {
        e->n_tok++;
        e->last_tok = ev->token;
        e->h->o.n_token_events++; /* what h_step's stats check counts */
    }
    if (ev->finish != REQ_FINISH_NONE) e->fin = ev->finish;
    req_event_free(ev);
}

/*
 * A tokenizer with several EOS ids (Llama 3 Instruct: <|end_of_text|>, <|eom_id|>,
 * <|eot_id|>) ends a sequence at any of them, not only at the config's eos_token_id:
 * a logit bias makes token 300 or 301 the greedy choice; with the EOS set {2, 300}
 * the first makes one token and stops, the second runs to max_tokens, and ignore_eos
 * still runs to max_tokens.
 */
TEST(any_eos_id_of_the_tokenizer_stops)
{
    struct harness h;
    if (!h_open(&h, 64, 4, 64, 8)) return;
    struct eos_seen e = {.h = &h};
    sched_destroy(h.s);
    h.s = sched_create(h.m, &h.pool, &h.so, eos_event, &e);
    CHECK(h.s);
    tokenizer_set_eos(h.m->tok, (const int32_t[]){2, 300}, 2);
    EXPECT(tokenizer_is_eos(h.m->tok, 300) && h.m->cfg.eos_id != 300);
    static const struct {
        int32_t forced;
        bool ignore_eos;
        int32_t n_tok;
        enum req_finish fin;
    } cases[] = {{300, false, 1, REQ_FINISH_STOP},
                 {301, false, 5, REQ_FINISH_LENGTH},
                 {300, true, 5, REQ_FINISH_LENGTH}};
    for (size_t c = 0; c < ARRAY_LEN(cases); c++) {
        struct req *r = mkreq(c + 1, 6, 5, 1, REQ_PRIO_INTERACTIVE, spec_full(), c);
        r->ignore_eos = cases[c].ignore_eos;
        r->bias_ids = xmalloc(sizeof(int32_t));
        r->bias_vals = xmalloc(sizeof(float));
        r->bias_ids[0] = cases[c].forced;
        r->bias_vals[0] = 100.0f;
        r->sp.bias_ids = r->bias_ids;
        r->sp.bias_vals = r->bias_vals;
        r->sp.n_bias = 1;
        e.n_tok = 0;
        e.fin = REQ_FINISH_NONE;
        sched_add(h.s, r);
        h_run_idle(&h, 100);
        EXPECT_EQ(e.n_tok, cases[c].n_tok);
        EXPECT_EQ(e.last_tok, cases[c].forced);
        EXPECT_EQ(e.fin, cases[c].fin);
    }
    h_close(&h);
}

int main(void)
{
    RUN(interactive_prompt_steps_carry_no_batch);
    RUN(batch_not_starved_by_interactive_prompts);
    RUN(batch_prompt_tokens_per_step);
    RUN(sampling_on_the_device_matches_the_host);
    RUN(any_eos_id_of_the_tokenizer_stops);
    return test_done();
}
