/*
 * batch_create.c - the POST /v1/batches body check (batch_create.h).
 */
#include "batch_create.h"

#include "batch_line.h"
#include "json.h"

#include "util.h"

#include <stdlib.h>
#include <string.h>

/* Characters (code points) of a string json_parse_checked accepted: UTF-8 bytes
 * that do not continue a character. OpenAI's limits count characters, not bytes. */
static size_t utf8_chars(const char *s)
{
    size_t n = 0;
    for (; *s; s++)
        n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

/* Whether metadata (already through json_parse_checked: valid UTF-8, no NUL) is null
 * or absent (m NULL) or an object within OpenAI's limits; else a 400 in e. Metadata
 * is stored and shown in every listing, so a string that is not clean here would
 * spoil GET /v1/batches for good. */
static bool metadata_ok(const cJSON *m, struct api_error *e)
{
    if (!m) return true;
    if (!cJSON_IsObject(m))
        return json_type_error(e, "metadata", "an object of strings", m), false;
    int n = 0;
    for (const cJSON *kv = m->child; kv; kv = kv->next, n++) {
        const char *bad = NULL;
        if (n == BATCH_CREATE_META_PAIRS)
            bad = "metadata may have at most 16 keys";
        else if (utf8_chars(kv->string) > BATCH_CREATE_META_KEY)
            bad = "metadata keys are at most 64 characters";
        else if (!cJSON_IsString(kv))
            bad = "metadata values must be strings";
        else if (utf8_chars(kv->valuestring) > BATCH_CREATE_META_VALUE)
            bad = "metadata values are at most 512 characters";
        if (bad) return API_BAD_VALUE(e, "metadata", "%s", bad), false;
    }
    return true;
}

int batch_create_parse(const char *body, size_t len, struct batch_create *out,
                       struct api_error *e)
{
    memset(out, 0, sizeof *out);
    cJSON *j = json_parse_object(body ? body : "", body ? len : 0, e);
    if (!j) return -1;
    const cJSON *file = json_field(j, "input_file_id");
    const cJSON *endpoint = json_field(j, "endpoint");
    const cJSON *window = json_field(j, "completion_window");
    const cJSON *meta = json_field(j, "metadata");
    int rc = -1;
    if (!cJSON_IsString(file) || !*file->valuestring)
        API_BAD_VALUE(e, "input_file_id", "input_file_id is required (a string)");
    else if (!cJSON_IsString(endpoint))
        API_BAD_VALUE(e, "endpoint", "endpoint is required (a string)");
    else if (strcmp(endpoint->valuestring, BATCH_LINE_COMPLETIONS) != 0 &&
             strcmp(endpoint->valuestring, BATCH_LINE_CHAT) != 0)
        API_BAD_VALUE(e, "endpoint",
                      "endpoint must be /v1/completions or /v1/chat/completions, the "
                      "endpoints this server batches");
    else if (!cJSON_IsString(window) || strcmp(window->valuestring, "24h") != 0)
        API_BAD_VALUE(e, "completion_window", "completion_window must be \"24h\"");
    else if (metadata_ok(meta, e))
        rc = 0;
    if (rc == 0) {
        out->input_file_id = xstrdup(file->valuestring);
        out->endpoint = xstrdup(endpoint->valuestring);
        out->metadata = meta ? json_print(meta, NULL) : NULL;
    }
    cJSON_Delete(j);
    return rc;
}

void batch_create_free(struct batch_create *b)
{
    free(b->input_file_id);
    free(b->endpoint);
    free(b->metadata);
    memset(b, 0, sizeof *b);
}
