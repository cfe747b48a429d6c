/*
 * run_batch.c - the offline batch job (see run_batch.h).
 *
 * Owns: the engine core (engine_core.h: the model, a KV pool and a scheduler, set up
 * as the engine sets them up and driven on this thread), and one slot
 * per input line (its parsed request, response assembly and, once done, its output
 * line). Lines are fed to the scheduler a window at a time (bounded memory for
 * large files); outputs are written as soon as every earlier line is written, so
 * out.jsonl grows in input order while the job runs.
 */
#include "run_batch.h"

#include "batch_line.h"
#include "chat.h"
#include "chat_tmpl.h"
#include "cfg.h"
#include "cmpl_resp.h"
#include "engine.h"
#include "engine_core.h"
#include "err.h"
#include "model.h"
#include "sched.h"
#include "tokenizer.h"
#include "util.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Lines in flight at once: enough to keep every scheduler slot busy, few enough
 * that a 50,000-line file is never all in memory as parsed requests. */
#define RB_WINDOW 1024

struct rb_line {
    char *custom_id;
    struct cmpl_params *params;   /* NULL when the line failed before the engine */
    struct cmpl_resp *resp;
    char *out;                    /* the finished output line, without newline */
    int32_t n_prompts;
    uint64_t base_id;
};

struct rb {
    struct engine_core *core;
    struct model *m;              /* core->m */
    struct api_model am;
    struct chat_model chat;       /* am, and the chat template */
    struct chat_tmpl *tmpl;       /* the chat template (chat_tmpl.h), or NULL */
    struct sched *s;              /* core->sched */
    struct rb_line *lines;
    int32_t n_lines, cap_lines;
    int32_t next_write;           /* first line not yet written */
    int32_t n_done, n_ok, n_failed;
    uint64_t next_id;
    /* engine request id -> line: ids are handed out in line order, so a sorted
     * array of (base id, line) would do; a direct map from id offset is simpler. */
    int32_t *id_line;             /* [next_id] line of each engine id */
    int64_t cap_ids;
    FILE *out;
    uint64_t *cancel;             /* engine ids to cancel after the current step */
    int32_t n_cancel, cap_cancel;
    double t0, last_progress;
    bool tty;
    char fingerprint[24];         /* system_fingerprint of every body */
};

static char *output_line(const char *custom_id, int status, const char *request_id,
                         cJSON *body, const char *err_code, const char *err_msg,
                         uint64_t index)
{
    char id[64];
    snprintf(id, sizeof id, "batch_req_%06llu", (unsigned long long)index);
    return batch_line_output(id, custom_id, status, request_id, body, err_code, err_msg);
}

/* A line that failed with an HTTP-style error: the error body as the response. */
static void line_fail_api(struct rb *b, int32_t k, struct api_error *e)
{
    struct rb_line *l = &b->lines[k];
    cJSON *body = api_error_object(e);
    l->out = output_line(l->custom_id, e->status, NULL, body, NULL, NULL, (uint64_t)k);
    api_error_clear(e);
    b->n_failed++;
    b->n_done++;
}

/* A line that is not a request at all (no response, only an error). */
static void line_fail(struct rb *b, int32_t k, const char *code, const char *msg)
{
    struct rb_line *l = &b->lines[k];
    l->out = output_line(l->custom_id, 0, NULL, NULL, code, msg, (uint64_t)k);
    b->n_failed++;
    b->n_done++;
}

/* Parse input line k and hand its requests to the scheduler (or fail it). */
static void line_start(struct rb *b, int32_t k, const char *text, size_t len,
                       struct batch_line_idset *ids, uint64_t seed)
{
    struct rb_line *l = &b->lines[k];
    struct batch_line_error le;
    bool chat = false;
    cJSON *body = batch_line_parse(text, len, NULL, NULL, &l->custom_id, &chat, &le);
    /* A used custom_id is the line's fault whatever else is wrong with it. */
    if (l->custom_id && *l->custom_id && !batch_line_idset_add(ids, l->custom_id)) {
        cJSON_Delete(body);
        line_fail(b, k, "duplicate_custom_id", "custom_id is used by an earlier line");
        return;
    }
    if (!body) {
        line_fail(b, k, le.code, le.message);
        return;
    }
    /* The body as batch_line_parse checked it, through the API's own validation. */
    struct api_error e = {0};
    l->params = xcalloc(1, sizeof *l->params);
    int err = chat_parse_batch_body(body, chat, &b->chat, l->params, &e);
    cJSON_Delete(body);
    if (!err && l->params->stream)
        api_error_set(&e, 400, API_ERR_INVALID, "stream", NULL,
                      "stream is not supported in a batch"), err = -1;
    if (err) {
        cmpl_params_free(l->params);
        free(l->params);
        l->params = NULL;
        line_fail_api(b, k, &e);
        return;
    }
    char rid[64];
    snprintf(rid, sizeof rid, "%s-batch-%06d", chat ? "chatcmpl" : "cmpl", k);
    l->resp = cmpl_resp_create(l->params, b->m->tok, rid, (int64_t)time(NULL));
    cmpl_resp_set_fingerprint(l->resp, b->fingerprint);
    l->n_prompts = l->params->n_prompts;
    l->base_id = b->next_id;
    for (int32_t i = 0; i < l->n_prompts; i++) {
        uint64_t id = b->next_id++;
        if ((int64_t)id >= b->cap_ids) {
            b->cap_ids = MAX(2 * b->cap_ids, (int64_t)id + 1024);
            b->id_line = xrealloc(b->id_line, (size_t)b->cap_ids * sizeof *b->id_line);
        }
        b->id_line[id] = k;
        /* Per-line seeds: a line without a seed is still reproducible run to run. */
        uint64_t s = l->params->has_seed ? (uint64_t)l->params->seed
                                         : seed ^ ((uint64_t)k * 0x9e3779b97f4a7c15ull);
        struct req *r = cmpl_make_req(l->params, i, id, s + (uint64_t)i * 1000003u);
        r->prio = REQ_PRIO_BATCH;
        sched_add(b->s, r);
    }
}

static void line_finish(struct rb *b, int32_t k)
{
    struct rb_line *l = &b->lines[k];
    const struct api_error *err = cmpl_resp_error(l->resp);
    if (err) {
        struct api_error e = {0};
        api_error_set(&e, err->status, err->type, err->param, err->code, "%s", err->message);
        line_fail_api(b, k, &e);
    } else {
        size_t len;
        char *body = cmpl_resp_body(l->resp, &len);
        cJSON *bj = cJSON_ParseWithLength(body, len);
        free(body);
        char rid[64];
        snprintf(rid, sizeof rid, "%s-batch-%06d", l->params->chat ? "chatcmpl" : "cmpl",
                 k);
        l->out = output_line(l->custom_id, 200, rid, bj, NULL, NULL, (uint64_t)k);
        b->n_ok++;
        b->n_done++;
    }
    cmpl_resp_destroy(l->resp);
    l->resp = NULL;
    cmpl_params_free(l->params);
    free(l->params);
    l->params = NULL;
}

/* Engine events arrive inside sched_add / sched_step, where the scheduler must not
 * be changed under its feet: cancels are queued and done after the step. */
static void defer_cancel(struct rb *b, uint64_t id)
{
    if (b->n_cancel == b->cap_cancel) {
        b->cap_cancel = MAX(64, 2 * b->cap_cancel);
        b->cancel = xrealloc(b->cancel, (size_t)b->cap_cancel * sizeof *b->cancel);
    }
    b->cancel[b->n_cancel++] = id;
}

static void on_event(void *arg, struct req_event *ev)
{
    struct rb *b = arg;
    CHECK((int64_t)ev->req_id < b->cap_ids);
    int32_t k = b->id_line[ev->req_id];
    struct rb_line *l = &b->lines[k];
    if (l->resp) {
        char *chunk = cmpl_resp_event(l->resp, (int32_t)(ev->req_id - l->base_id), ev, NULL);
        free(chunk); /* not streaming: always NULL */
        if (cmpl_resp_done(l->resp) || cmpl_resp_error(l->resp)) {
            const bool failed = cmpl_resp_error(l->resp) != NULL;
            line_finish(b, k);
            /* One prompt failed: the line is answered; stop its other prompts. */
            for (int32_t i = 0; failed && i < l->n_prompts; i++)
                defer_cancel(b, l->base_id + (uint64_t)i);
        }
    }
    req_event_free(ev);
}

static void run_cancels(struct rb *b)
{
    for (int32_t i = 0; i < b->n_cancel; i++) sched_cancel(b->s, b->cancel[i]);
    b->n_cancel = 0;
}

static void write_ready(struct rb *b)
{
    while (b->next_write < b->n_lines && b->lines[b->next_write].out) {
        struct rb_line *l = &b->lines[b->next_write];
        fputs(l->out, b->out);
        fputc('\n', b->out);
        free(l->out);
        free(l->custom_id);
        l->out = NULL;
        l->custom_id = NULL;
        b->next_write++;
    }
}

static void progress(struct rb *b, bool final)
{
    double now = time_now(), dt = now - b->t0;
    if (!final && now - b->last_progress < (b->tty ? 0.2 : 5.0)) return;
    b->last_progress = now;
    double rate = dt > 0 ? b->n_done / dt : 0;
    double eta = rate > 0 ? (b->n_lines - b->n_done) / rate : 0;
    if (b->tty) {
        int width = 30, fill = b->n_lines ? (int)((int64_t)width * b->n_done / b->n_lines) : width;
        char bar[64];
        for (int i = 0; i < width; i++) bar[i] = i < fill ? '#' : '-';
        bar[width] = '\0';
        fprintf(stderr, "\r[%s] %d/%d  %.1f req/s  ETA %.0fs ", bar, b->n_done, b->n_lines,
                rate, eta);
        if (final) fputc('\n', stderr);
    } else {
        fprintf(stderr, "run-batch: %d/%d done, %.1f req/s, ETA %.0f s\n", b->n_done,
                b->n_lines, rate, eta);
    }
}

int run_batch_run(struct cfg c)
{
    const char *in_path = c.run_batch.input_file, *out_path = c.run_batch.output_file;
    FILE *in = fopen(in_path, "r");
    if (!in) {
        fprintf(stderr, "h2oserve: cannot open %s\n", in_path);
        cfg_free(&c);
        return 1;
    }
    struct rb b = {0};
    struct batch_line_idset ids = {0};
    int rc = 1;
    struct engine_opts eo;
    cfg_engine_opts(&c, &eo);
    cfg_fingerprint(&c, b.fingerprint, sizeof b.fingerprint);
    eo.sched.batch_prompt_tokens = 0; /* nothing interactive waits beside this job */
    /* The model, the pool and the scheduler as serve's engine builds them: the same
     * options and the one pool size rule (a device's memory included). */
    struct engine_core_opts co;
    engine_opts_core(&eo, &co);
    co.emit = on_event;
    co.emit_arg = &b;
    if (engine_core_open(&co, &b.core)) {
        fprintf(stderr, "h2oserve: %s\n", err_msg());
        goto done;
    }
    b.m = b.core->m;
    b.s = b.core->sched;
    b.am.id = c.served_model_name ? c.served_model_name : c.model;
    /* Cannot fail: sched_create checked the same max_model_len. */
    CHECK(sched_context_len(eo.sched.max_model_len, &b.m->cfg, &b.am.max_model_len) == 0);
    b.am.vocab_size = b.m->cfg.vocab_size;
    b.am.tok = b.m->tok;
    b.am.kv_default = eo.kv_default;
    b.am.kv_dtype = dtype_name(b.m->kv_dtype);
    b.am.max_prompts = c.max_prompts_per_request;
    b.am.max_n = c.max_n;
    if (chat_tmpl_open_model(c.model, c.chat_template, b.m->tok, &b.tmpl)) {
        fprintf(stderr, "h2oserve: %s\n", err_msg());
        goto done;
    }
    b.chat = chat_tmpl_model(b.tmpl, &b.am);
    b.out = fopen(out_path, "w");
    if (!b.out) {
        fprintf(stderr, "h2oserve: cannot write %s\n", out_path);
        goto done;
    }
    b.tty = isatty(2);
    b.t0 = b.last_progress = time_now();
    const uint64_t seed = (uint64_t)c.dummy_seed * 0x9e3779b97f4a7c15ull + 1;
    char *line = NULL;
    size_t line_cap = 0;
    bool eof = false;
    while (!eof || b.next_write < b.n_lines) {
        /* Keep up to RB_WINDOW lines between reading and writing. */
        while (!eof && b.n_lines - b.next_write < RB_WINDOW) {
            ssize_t n = getline(&line, &line_cap, in);
            if (n < 0) {
                eof = true;
                break;
            }
            while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = '\0';
            if (batch_line_blank(line, (size_t)n)) continue; /* not requests */
            if (b.n_lines == b.cap_lines) {
                b.cap_lines = MAX(1024, 2 * b.cap_lines);
                b.lines = xrealloc(b.lines, (size_t)b.cap_lines * sizeof *b.lines);
            }
            memset(&b.lines[b.n_lines], 0, sizeof b.lines[0]);
            line_start(&b, b.n_lines++, line, (size_t)n, &ids, seed);
        }
        run_cancels(&b);
        write_ready(&b);
        if (!sched_idle(b.s)) {
            if (sched_step(b.s) < 0) {
                fprintf(stderr, "h2oserve: %s\n", err_msg());
                goto done;
            }
        } else if (b.next_write < b.n_lines && eof) {
            CHECK(!"idle scheduler with unfinished lines");
        }
        progress(&b, false);
    }
    write_ready(&b);
    progress(&b, true);
    double dt = time_now() - b.t0;
    fprintf(stderr, "run-batch: %d lines, %d ok, %d failed, %.1f s (%.1f req/s)\n", b.n_lines,
            b.n_ok, b.n_failed, dt, dt > 0 ? b.n_lines / dt : 0.0);
    rc = fflush(b.out) == 0 && !ferror(b.out) ? 0 : 1;
    if (rc) fprintf(stderr, "h2oserve: error writing %s\n", out_path);
    free(line);
done:
    if (b.out && fclose(b.out) != 0) rc = 1;
    fclose(in);
    for (int32_t k = 0; k < b.n_lines; k++) {
        free(b.lines[k].out);
        free(b.lines[k].custom_id);
        if (b.lines[k].resp) cmpl_resp_destroy(b.lines[k].resp);
        if (b.lines[k].params) {
            cmpl_params_free(b.lines[k].params);
            free(b.lines[k].params);
        }
    }
    free(b.lines);
    free(b.id_line);
    free(b.cancel);
    chat_tmpl_free(b.tmpl);
    batch_line_idset_free(&ids);
    /* Last: the responses above were made with the model's tokenizer. The scheduler
     * drops what an error left in it without events. */
    engine_core_close(b.core);
    cfg_free(&c);
    return rc;
}
