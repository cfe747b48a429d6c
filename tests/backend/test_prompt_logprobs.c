/*
 * test_prompt_logprobs.c - prompt-token scores (req.prompt_logprobs, what echo with
 * logprobs reports) against Hugging Face transformers.
 *
 * The golden fixtures hold transformers' logits at every prompt position; the
 * logprob of prompt token p must be log_softmax(logits[p - 1])[token p] within 1e-4
 * and the top alternatives must be the largest of those, whether the prompt runs in
 * one chunk or many, and alone or beside other requests; and with max_tokens 0 (the
 * prompt scored, nothing generated), as OpenAI's echo + logprobs + max_tokens 0 asks.
 */
#include "test.h"

#include "golden.h"
#include "req.h"
#include "sched.h"

struct seen {
    int32_t n_prompt_events;
    double worst;
    const struct golden_prompt *gp;
    int32_t vocab;
    int32_t bad_order; /* prompt events after a generated token */
    bool generated;
    int32_t last_pos;
    int32_t n_finished;       /* finishing events of request 1 */
    enum req_finish finish;   /* the last one's reason */
    int32_t completion_tokens; /* the last one's */
};

static void on_event(void *arg, struct req_event *ev)
{
    struct seen *s = arg;
    if (ev->req_id == 1 && ev->prompt_pos > 0) {
        const struct golden_prompt *gp = s->gp;
        const int32_t V = s->vocab, p = ev->prompt_pos;
        const float *row = gp->prefill + (int64_t)(p - 1) * V;
        double m = row[0], sum = 0;
        for (int32_t j = 1; j < V; j++) m = row[j] > m ? row[j] : m;
        for (int32_t j = 0; j < V; j++) sum += exp((double)row[j] - m);
        double want = (double)row[gp->tokens[p]] - m - log(sum);
        double d = fabs(want - ev->logprob);
        s->worst = d > s->worst ? d : s->worst;
        if (ev->token != gp->tokens[p]) TEST_FAIL("event %d carries token %d", p, ev->token);
        if (ev->n_top != 2 || ev->top_ids[0] != argmax(row, V))
            TEST_FAIL("position %d: top %d, argmax %d", p, ev->top_ids[0], argmax(row, V));
        if (p != s->last_pos + 1) TEST_FAIL("position %d after %d", p, s->last_pos);
        s->last_pos = p;
        if (s->generated) s->bad_order++;
        s->n_prompt_events++;
    } else if (ev->req_id == 1 && ev->token >= 0) {
        s->generated = true;
    }
    if (ev->req_id == 1 && ev->finish != REQ_FINISH_NONE) {
        s->n_finished++;
        s->finish = ev->finish;
        s->completion_tokens = ev->completion_tokens;
    }
    req_event_free(ev);
}

static void check_n(int32_t max_batched, bool with_neighbour, bool device_state,
                    int32_t max_tokens, int32_t n)
{
    struct golden g;
    golden_load(&g, "tiny-opt");
    const struct golden_prompt *gp = &g.p[2]; /* the 40-token prompt */
    struct model *m = NULL;
    struct model_opts mo;
    model_opts_default(&mo);
    mo.dtype = DTYPE_F32;
    mo.device_state = device_state; /* sampling on the "device" beside host rows */
    CHECK(model_load(&m, test_data("golden/tiny-opt"), &mo) == 0);
    CHECK(m->be.ops->kv_alloc(m->be.ctx, 64, 16) == 0);
    struct kv_pool pool;
    kv_pool_init(&pool, 64, 16);
    struct seen s = {.gp = gp, .vocab = g.vocab};
    struct sched_opts o = {.max_num_seqs = 4, .max_batched_tokens = max_batched};
    struct sched *sc = sched_create(m, &pool, &o, on_event, &s);
    CHECK(sc);
    struct kv_spec full = {.policy = KV_POLICY_FULL};
    if (with_neighbour) {
        struct req *r0 = req_new(0, &full);
        r0->prompt_ids = xmalloc(9 * sizeof *r0->prompt_ids);
        memcpy(r0->prompt_ids, g.p[1].tokens, 9 * sizeof *r0->prompt_ids);
        r0->n_prompt_ids = 9;
        r0->max_tokens = 10;
        sched_add(sc, r0);
    }
    struct req *r = req_new(1, &full);
    r->prompt_ids = xmalloc((size_t)gp->n_tok * sizeof *r->prompt_ids);
    memcpy(r->prompt_ids, gp->tokens, (size_t)gp->n_tok * sizeof *r->prompt_ids);
    r->n_prompt_ids = gp->n_tok;
    r->max_tokens = max_tokens;
    r->n = n;
    r->sp.temperature = 0;
    r->sp.n_logprobs = 2;
    r->prompt_logprobs = true;
    sched_add(sc, r);
    while (!sched_idle(sc)) CHECK(sched_step(sc) >= 0);
    sched_destroy(sc);
    EXPECT_EQ(s.n_prompt_events, gp->n_tok - 1);
    EXPECT_EQ(s.bad_order, 0);
    EXPECT_EQ(s.n_finished, n);
    EXPECT_EQ(s.finish, REQ_FINISH_LENGTH);
    EXPECT_EQ(s.completion_tokens, max_tokens);
    if (max_tokens == 0) EXPECT(!s.generated);
    printf("# max_batched %d%s%s: %d prompt tokens scored, max |logprob - transformers| "
           "%.3g\n", max_batched, with_neighbour ? " beside another request" : "",
           device_state ? " (device sampling)" : "", s.n_prompt_events, s.worst);
    if (!(s.worst <= 1e-4)) TEST_FAIL("logprob error %g", s.worst);
    EXPECT_EQ(pool.n_free, pool.n_blocks);
    kv_pool_deinit(&pool);
    model_destroy(m);
    golden_free(&g);
}

static void check(int32_t max_batched, bool with_neighbour, bool device_state)
{
    check_n(max_batched, with_neighbour, device_state, 2, 1);
}

TEST(one_chunk) { check(2048, false, false); }
/* max_tokens 0: the prompt is prefilled and scored, then every sequence finishes
 * (length) without sampling; its blocks go back (checked in check_n). */
TEST(max_tokens_0_scores_the_prompt) { check_n(7, true, false, 0, 1); }
TEST(max_tokens_0_with_n_2) { check_n(2048, false, false, 0, 2); }
TEST(many_chunks) { check(7, false, false); }
TEST(beside_another_request) { check(16, true, false); }
/* With a backend that samples on its device, the steps that score a prompt keep
 * their logits on the host and sample there; the others sample on the device. */
TEST(beside_another_request_device_sampling) { check(16, true, true); }

int main(void)
{
    RUN(one_chunk);
    RUN(max_tokens_0_scores_the_prompt);
    RUN(max_tokens_0_with_n_2);
    RUN(many_chunks);
    RUN(beside_another_request);
    RUN(beside_another_request_device_sampling);
    return test_done();
}
