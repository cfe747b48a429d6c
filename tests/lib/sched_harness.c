/*
 * sched_harness.c - the scheduler harness of sched_harness.h: the observer that checks
 * every event as it arrives, the harness around a scheduler on dummy:tiny, and the
 * request builders.
 */
#include "sched_harness.h"

#include "test.h"

#include <stdarg.h>

void violation(struct obs *o, const char *fmt, ...)
{
    test_cur_failed = 1;
    if (o->n_violations++ >= 20) return;
    va_list ap;
    va_start(ap, fmt);
    printf("# step %lld: ", (long long)o->step);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
}

void on_event(void *arg, struct req_event *ev)
{
    struct obs *o = arg;
    const uint64_t id = ev->req_id;
    if (id >= (uint64_t)o->cap || !o->r[id].added) {
        violation(o, "event for request %llu, which was never added",
                  (unsigned long long)id);
        req_event_free(ev);
        return;
    }
    struct req_obs *q = &o->r[id];
    if (q->cancelled && o->in_cancel != id + 1)
        violation(o, "req %llu: an event after sched_cancel returned",
                  (unsigned long long)id);
    q->n_events++;
    if (ev->seq == -1) {
        q->n_err++;
        if (ev->finish != REQ_FINISH_ERROR || ev->token != -1 || !ev->error ||
            !ev->error[0] || ev->error_code == 0)
            violation(o,
                      "req %llu: a seq -1 event must be an error with a message and a code "
                      "(finish %s, token %d, code %d)",
                      (unsigned long long)id, req_finish_name(ev->finish), ev->token,
                      ev->error_code);
        if (q->n_events != 1)
            violation(o, "req %llu: its error event is not its only event",
                      (unsigned long long)id);
        if (!q->expect_error)
            violation(o, "req %llu: unexpected error: %s", (unsigned long long)id,
                      ev->error ? ev->error : "(null)");
        snprintf(q->err_msg, sizeof q->err_msg, "%s", ev->error ? ev->error : "");
        req_event_free(ev);
        return;
    }
    if (q->n_err)
        violation(o, "req %llu: an event after its error", (unsigned long long)id);
    if (ev->seq < 0 || ev->seq >= MIN(q->n, MAXN)) {
        violation(o, "req %llu: seq %d out of range (n %d)", (unsigned long long)id,
                  ev->seq, q->n);
        req_event_free(ev);
        return;
    }
    struct seq_obs *so = &q->seq[ev->seq];
    if (so->n_fin)
        violation(o, "req %llu seq %d: an event after its finishing event",
                  (unsigned long long)id, ev->seq);
    if (ev->text_offset != so->text_len)
        violation(o, "req %llu seq %d: text_offset %zu, but %zu bytes came before",
                  (unsigned long long)id, ev->seq, ev->text_offset, so->text_len);
    so->text_len += ev->text_len;
    if (ev->text_len) so->text_hash = hash_mix(so->text_hash, ev->text, ev->text_len);
    if (ev->token >= 0) {
        o->n_token_events++;
        if (so->n_tok == 0) o->n_decoding++;
        so->n_tok++;
        so->tok_hash = hash_mix(so->tok_hash ? so->tok_hash : 14695981039346656037ull,
                                &ev->token, sizeof ev->token);
        so->lp_hash = hash_mix(so->lp_hash, &ev->logprob, sizeof ev->logprob);
        so->lp_hash = hash_mix(so->lp_hash, &ev->n_top, sizeof ev->n_top);
        so->lp_hash = hash_mix(so->lp_hash, ev->top_ids, sizeof ev->top_ids);
        so->lp_hash = hash_mix(so->lp_hash, ev->top_logprobs, sizeof ev->top_logprobs);
        so->last_blocks = ev->kv_blocks;
        if (q->first_token_step < 0) {
            q->first_token_step = o->step;
            o->first_order[o->n_first++] = (int32_t)id;
        }
        if (ev->token >= VOCAB)
            violation(o, "req %llu: token %d is not in the vocabulary",
                      (unsigned long long)id, ev->token);
        if (ev->kv_budget_blocks > 0 && ev->kv_blocks > ev->kv_budget_blocks)
            violation(o, "req %llu seq %d: holds %d KV blocks, over its H2O budget of %d",
                      (unsigned long long)id, ev->seq, ev->kv_blocks, ev->kv_budget_blocks);
        if (ev->kv_budget_blocks == 0 && ev->kv_evicted != 0)
            violation(o, "req %llu seq %d: the full policy evicted %lld tokens",
                      (unsigned long long)id, ev->seq, (long long)ev->kv_evicted);
        o->max_kv_blocks = MAX(o->max_kv_blocks, ev->kv_blocks);
        o->max_budget_blocks = MAX(o->max_budget_blocks, ev->kv_budget_blocks);
        if (ev->finish == REQ_FINISH_NONE && so->n_tok >= q->max_tokens)
            violation(o, "req %llu seq %d: token %d of max_tokens %d does not finish",
                      (unsigned long long)id, ev->seq, so->n_tok, q->max_tokens);
    } else if (ev->finish == REQ_FINISH_NONE) {
        violation(o, "req %llu seq %d: an event with neither a token nor a finish",
                  (unsigned long long)id, ev->seq);
    }
    if (ev->completion_tokens != so->n_tok)
        violation(o, "req %llu seq %d: completion_tokens %d after %d token events",
                  (unsigned long long)id, ev->seq, ev->completion_tokens, so->n_tok);
    if (ev->finish != REQ_FINISH_NONE) {
        if (so->n_tok > 0) o->n_decoding--;
        so->n_fin++;
        so->fin = ev->finish;
        if (ev->prompt_tokens != q->n_prompt)
            violation(o, "req %llu seq %d: prompt_tokens %d, the prompt has %d",
                      (unsigned long long)id, ev->seq, ev->prompt_tokens, q->n_prompt);
        switch (ev->finish) {
        case REQ_FINISH_LENGTH:
            if (so->n_tok != q->max_tokens)
                violation(o, "req %llu seq %d: finished by length after %d of %d tokens",
                          (unsigned long long)id, ev->seq, so->n_tok, q->max_tokens);
            break;
        case REQ_FINISH_CANCELLED:
            if (o->in_cancel != id + 1 && !o->in_cancel_all)
                violation(o, "req %llu seq %d: cancelled outside sched_cancel",
                          (unsigned long long)id, ev->seq);
            break;
        default: /* ignore_eos and no stop strings: only length or cancel end a sequence */
            violation(o, "req %llu seq %d: finish %s", (unsigned long long)id, ev->seq,
                      req_finish_name(ev->finish));
        }
        if (++q->n_fin == q->n) {
            q->finish_step = o->step;
            o->fin_order[o->n_fin_order++] = (int32_t)id;
        }
    }
    req_event_free(ev);
}

struct model *tiny_model_ex(int32_t n_blocks, bool device_state)
{
    struct model_opts mo;
    model_opts_default(&mo);
    mo.dtype = DTYPE_F32;
    mo.n_threads = 1;
    mo.device_state = device_state;
    struct model *m = NULL;
    if (model_load(&m, "dummy:tiny", &mo)) {
        TEST_FAIL("model_load(dummy:tiny): %s", err_msg());
        return NULL;
    }
    CHECK(m->be.ops->kv_alloc(m->be.ctx, n_blocks, BS) == 0);
    return m;
}

struct model *tiny_model(int32_t n_blocks)
{
    return tiny_model_ex(n_blocks, false);
}

bool h_open_ex(struct harness *h, int32_t n_blocks, int32_t max_num_seqs,
               int32_t max_batched_tokens, int32_t n_ids, bool device_state)
{
    memset(h, 0, sizeof *h);
    h->m = tiny_model_ex(n_blocks, device_state);
    if (!h->m) return false;
    kv_pool_init(&h->pool, n_blocks, BS);
    h->o.cap = n_ids;
    h->o.r = xcalloc((size_t)n_ids, sizeof *h->o.r);
    for (int32_t i = 0; i < n_ids; i++)
        h->o.r[i].first_token_step = h->o.r[i].finish_step = -1;
    h->o.first_order = xcalloc((size_t)n_ids, sizeof *h->o.first_order);
    h->o.fin_order = xcalloc((size_t)n_ids, sizeof *h->o.fin_order);
    h->so = (struct sched_opts){.max_num_seqs = max_num_seqs,
                                .max_batched_tokens = max_batched_tokens};
    h->s = sched_create(h->m, &h->pool, &h->so, on_event, &h->o);
    if (!h->s) {
        TEST_FAIL("sched_create: %s", err_msg());
        kv_pool_deinit(&h->pool);
        model_destroy(h->m);
        return false;
    }
    return true;
}

bool h_open(struct harness *h, int32_t n_blocks, int32_t max_num_seqs,
            int32_t max_batched_tokens, int32_t n_ids)
{
    return h_open_ex(h, n_blocks, max_num_seqs, max_batched_tokens, n_ids, false);
}

struct sched_stats h_stats(const struct harness *h)
{
    struct sched_stats st;
    sched_get_stats(h->s, &st);
    return st;
}

void h_check_stats(struct harness *h)
{
    struct sched_stats st = h_stats(h);
    if (st.blocks_used != h->pool.n_blocks - h->pool.n_free ||
        st.blocks_total != h->pool.n_blocks || st.blocks_used > st.blocks_reserved ||
        st.blocks_reserved > st.blocks_total || st.n_seqs > h->so.max_num_seqs ||
        st.n_waiting < 0 || st.n_running < 0)
        violation(&h->o,
                  "inconsistent stats: used %d reserved %d total %d (pool %d free of %d) "
                  "seqs %d (max %d) waiting %d running %d",
                  st.blocks_used, st.blocks_reserved, st.blocks_total, h->pool.n_free,
                  h->pool.n_blocks, st.n_seqs, h->so.max_num_seqs, st.n_waiting,
                  st.n_running);
    if (st.generation_tokens != h->o.n_token_events)
        violation(&h->o, "stats generation_tokens %lld, token events %lld",
                  (long long)st.generation_tokens, (long long)h->o.n_token_events);
    h->max_n_seqs = MAX(h->max_n_seqs, st.n_seqs);
}

int h_step(struct harness *h)
{
    h->o.step++;
    int n = sched_step(h->s);
    if (n < 0) TEST_FAIL("sched_step: %d (%s)", n, err_msg());
    if (n > h->so.max_batched_tokens)
        violation(&h->o, "a forward of %d tokens, max_batched_tokens %d", n,
                  h->so.max_batched_tokens);
    if (n > 0) h->n_forwards++;
    h_check_stats(h);
    return n;
}

int64_t h_run_idle(struct harness *h, int64_t max_steps)
{
    int64_t k = 0;
    while (!sched_idle(h->s)) {
        if (k == max_steps) {
            TEST_FAIL("still busy after %lld steps", (long long)max_steps);
            break;
        }
        if (h_step(h) <= 0) {
            TEST_FAIL("sched_step did no work while requests were waiting or running");
            break;
        }
        k++;
    }
    return k;
}

void h_add(struct harness *h, struct req *r)
{
    CHECK(r->id < (uint64_t)h->o.cap && !h->o.r[r->id].added);
    struct req_obs *q = &h->o.r[r->id];
    q->added = true;
    q->n = r->n;
    q->max_tokens = r->max_tokens;
    if (!r->prompt) q->n_prompt = r->n_prompt_ids; /* text prompts: set by the test */
    q->add_step = h->o.step;
    sched_add(h->s, r);
    h_check_stats(h);
}

void h_cancel(struct harness *h, uint64_t id)
{
    h->o.in_cancel = id + 1;
    sched_cancel(h->s, id);
    h->o.in_cancel = 0;
    if (id < (uint64_t)h->o.cap && h->o.r[id].added) h->o.r[id].cancelled = true;
    h_check_stats(h);
}

void h_cancel_all(struct harness *h)
{
    h->o.in_cancel_all = true;
    sched_cancel_all(h->s);
    h->o.in_cancel_all = false;
    for (int32_t i = 0; i < h->o.cap; i++)
        if (h->o.r[i].added) h->o.r[i].cancelled = true;
    h_check_stats(h);
}

void h_check_all_answered(struct harness *h)
{
    int32_t bad = 0;
    for (int32_t i = 0; i < h->o.cap; i++) {
        const struct req_obs *q = &h->o.r[i];
        if (!q->added) continue;
        bool ok;
        if (q->expect_error) {
            ok = q->n_err == 1 && q->n_events == 1;
        } else {
            ok = q->n_err == 0 && q->n_fin == q->n;
            for (int32_t k = 0; k < MIN(q->n, MAXN); k++)
                ok = ok && q->seq[k].n_fin == 1;
        }
        if (!ok && bad++ < 10)
            TEST_FAIL("req %d (n %d%s): %d error events, %d finishing events", i, q->n,
                      q->expect_error ? ", expected to fail" : "", q->n_err, q->n_fin);
    }
}

void h_close(struct harness *h)
{
    if (!h->s) return;
    struct sched_stats st = h_stats(h);
    if (sched_idle(h->s)) {
        EXPECT_EQ(st.n_waiting, 0);
        EXPECT_EQ(st.n_running, 0);
        EXPECT_EQ(st.n_seqs, 0);
        EXPECT_EQ(st.blocks_used, 0);
        EXPECT_EQ(st.blocks_reserved, 0);
    }
    EXPECT_EQ(st.generation_tokens, h->o.n_token_events);
    EXPECT_EQ(st.steps, h->n_forwards);
    sched_destroy(h->s);
    h->s = NULL;
    EXPECT_EQ(h->pool.n_free, h->pool.n_blocks);
    kv_pool_deinit(&h->pool);
    model_destroy(h->m);
    free(h->o.r);
    free(h->o.first_order);
    free(h->o.fin_order);
}

struct kv_spec spec_full(void)
{
    struct kv_spec k;
    kv_budget_spec_default(&k);
    k.policy = KV_POLICY_FULL;
    return k;
}

struct kv_spec spec_ratio(enum kv_policy p, float heavy, float recent)
{
    struct kv_spec k;
    kv_budget_spec_default(&k);
    k.policy = p;
    k.heavy_ratio = heavy;
    k.recent_ratio = recent;
    k.min_budget = 0; /* the budget asked for, not the server's floor */
    return k;
}

struct kv_spec spec_abs(enum kv_policy p, int32_t heavy, int32_t recent)
{
    struct kv_spec k;
    kv_budget_spec_default(&k);
    k.policy = p;
    k.heavy = heavy;
    k.recent = recent;
    k.min_budget = 0;
    return k;
}

struct req *mkreq(uint64_t id, int32_t P, int32_t max_tokens, int32_t n,
                  enum req_priority prio, struct kv_spec kv, uint64_t seed)
{
    struct req *r = req_new(id, &kv);
    r->prompt_ids = xmalloc((size_t)MAX(P, 1) * sizeof *r->prompt_ids);
    for (int32_t i = 0; i < P; i++)
        r->prompt_ids[i] = lcg_range(&seed, 4, VOCAB - 1);
    r->n_prompt_ids = P;
    r->n = n;
    r->max_tokens = max_tokens;
    r->prio = prio;
    r->ignore_eos = true;
    r->sp.temperature = 0;
    return r;
}

int32_t decode_blocks(const struct kv_spec *kv, int32_t P, int32_t max_tokens)
{
    struct kv_budget b;
    CHECK(kv_budget_resolve(kv, P, max_tokens, &b) == 0);
    int64_t slots = (int64_t)P + max_tokens;
    if (b.policy != KV_POLICY_FULL) slots = MIN(slots, (int64_t)kv_budget_slots(&b));
    return (int32_t)CEIL_DIV(slots, BS);
}

int32_t admit_blocks(const struct kv_spec *kv, int32_t P, int32_t max_tokens, int32_t n)
{
    return MAX(CEIL_DIV(P, BS), n * decode_blocks(kv, P, max_tokens));
}

void expect_order(const int32_t *got, const int32_t *want, int32_t n, const char *what)
{
    for (int32_t i = 0; i < n; i++)
        if (got[i] != want[i]) {
            char g[256] = "", w[256] = "";
            for (int32_t k = 0; k < n; k++) {
                snprintf(g + strlen(g), sizeof g - strlen(g), " %d", got[k]);
                snprintf(w + strlen(w), sizeof w - strlen(w), " %d", want[k]);
            }
            TEST_FAIL("%s:%s, expected%s", what, g, w);
            return;
        }
}
