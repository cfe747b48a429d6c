/*
 * fuzz_batch_line.c - libFuzzer target for Batch input files: JSONL lines through
 * batch_line_parse, their bodies through cmpl_parse_json or, for chat lines,
 * chat_parse_json (messages through Llama 3's chat template) against OPT (the path of
 * `h2oserve run-batch` and the Batches API), duplicate custom_ids through the id
 * set, and every outcome written back as an output line.
 *
 * Input: the first byte picks whether the lines must name the served model (bit 0)
 * and whether they must all name /v1/completions, as a Batches API batch of that
 * endpoint, or may name either endpoint, as run-batch (bit 1); the rest is the file,
 * split at LF.
 * Checks beyond the sanitizers: every output line is one JSON object in valid
 * UTF-8, whatever bytes the input held; a refused line names a code.
 */
#include "batch_line.h"
#include "fuzz_opt.h"
#include "fuzz_util.h"

#include <stdio.h>

static void line_out(const char *custom_id, int status, cJSON *body, const char *code,
                     const char *message)
{
    char *out = batch_line_output("batch_req_fuzz", custom_id, status,
                                  body ? "cmpl-fuzz" : NULL, body, code, message);
    fuzz_require_json(out, strlen(out));
    free(out);
}

static void one_line(const char *text, size_t len, bool named, bool any_url,
                     struct batch_line_idset *ids)
{
    const struct api_model *m = fuzz_opt_model();
    if (batch_line_blank(text, len)) return;
    char *cid = NULL;
    struct batch_line_error le;
    memset(&le, 0, sizeof le);
    bool chat = false;
    cJSON *body = batch_line_parse(text, len, any_url ? NULL : "/v1/completions",
                                   named ? m->id : NULL, &cid, &chat, &le);
    if (!body) {
        REQUIRE(le.code && *le.code && le.message[0]);
        line_out(cid, 0, NULL, le.code, le.message);
        free(cid);
        return;
    }
    REQUIRE(cid && *cid && cJSON_IsObject(body));
    if (!batch_line_idset_add(ids, cid)) {
        cJSON_Delete(body);
        line_out(cid, 0, NULL, "duplicate_custom_id", "custom_id is not unique");
        free(cid);
        return;
    }
    struct cmpl_params p;
    struct api_error e = {0};
    REQUIRE(!chat || any_url);
    if (chat_parse_batch_body(body, chat, fuzz_opt_chat(), &p, &e)) {
        REQUIRE(e.status == 400 || e.status == 404);
        line_out(cid, e.status, api_error_object(&e), NULL, NULL);
        api_error_clear(&e);
    } else {
        REQUIRE(p.n_prompts >= 1 && p.chat == chat);
        /* A finished line's body is the response's; here a stand-in with the
         * prompt's text, which came from the input. */
        cJSON *resp = cJSON_CreateObject();
        if (p.prompts[0].text) cJSON_AddStringToObject(resp, "text", p.prompts[0].text);
        line_out(cid, 200, resp, NULL, NULL);
        cmpl_params_free(&p);
    }
    cJSON_Delete(body);
    free(cid);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    (void)fuzz_opt_model();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0) return 0;
    const bool named = data[0] & 1, any_url = data[0] & 2;
    struct batch_line_idset ids = {0};
    size_t at = 1;
    while (at < size) {
        const uint8_t *lf = memchr(data + at, '\n', size - at);
        const size_t n = lf ? (size_t)(lf - (data + at)) : size - at;
        /* Each line in its own exact-size buffer, as the readers hand them over. */
        char *line = malloc(n ? n : 1);
        memcpy(line, data + at, n);
        one_line(line, n, named, any_url, &ids);
        free(line);
        at += n + 1;
    }
    batch_line_idset_free(&ids);
    return 0;
}
