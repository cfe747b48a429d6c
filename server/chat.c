/*
 * chat.c - the chat request (chat.h): messages through the template to token ids,
 * then the rest through cmpl_parse_json as a completions request.
 *
 * Why through cmpl_parse_json: every field the two endpoints share (n, temperature,
 * top_p, stop, seed, penalties, logit_bias, stream, kv_cache, ...) must mean and
 * refuse exactly the same, so the chat body is turned into a completions body (the
 * shared fields copied as they are, the prompt as ids) and parsed once. What is
 * chat's own is read here: messages, max_completion_tokens, logprobs as a boolean
 * with top_logprobs, add_generation_prompt (vLLM's), and what is refused.
 *
 * Decisions a client can see (docs/api.md):
 * - Without max_tokens / max_completion_tokens a chat completion may run to the end
 *   of the context (what vLLM and OpenAI's chat do), not 16 tokens as /v1/completions.
 * - Text parts of a content array are joined with "\n", as vLLM joins them.
 * - Fields chat does not know are ignored, as OpenAI's server ignores them; fields
 *   it knows and this server cannot honour (tools, images, audio, JSON modes, echo)
 *   are a 400 naming them, never silently dropped.
 * Thread: any.
 */
#include "chat.h"

#include "json.h"
#include "tokenizer.h"

#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The fields copied as they are into the completions body. */
static const char *const shared_fields[] = {
    "model",         "n",       "temperature",      "top_p",
    "top_k",         "stream",  "stream_options",   "stop",
    "seed",          "best_of", "presence_penalty", "frequency_penalty",
    "logit_bias",    "user",    "ignore_eos",       "kv_cache",
    "kv_min_budget",
};

static void free_messages(struct chat_message *msgs, int32_t n)
{
    for (int32_t i = 0; i < n; i++)
        free((char *)msgs[i].content); /* ours: heap copies */
    free(msgs);
}

/* messages[i].content: a string, or an array of {"type": "text", "text": ...}
 * parts, joined with "\n". */
static int read_content(const cJSON *c, int32_t i, char **out, struct api_error *err)
{
    char param[64];
    snprintf(param, sizeof param, "messages[%d].content", (int)i);
    if (cJSON_IsString(c)) {
        *out = xstrdup(c->valuestring);
        return 0;
    }
    if (!cJSON_IsArray(c))
        return json_type_error(err, param, "a string or an array of content parts", c);
    size_t len = 0, cap = 0;
    char *buf = NULL;
    int32_t k = 0;
    for (const cJSON *part = c->child; part; part = part->next, k++) {
        const cJSON *type = cJSON_IsObject(part) ? json_field(part, "type") : NULL;
        const cJSON *text = cJSON_IsObject(part) ? json_field(part, "text") : NULL;
        if (!cJSON_IsString(type)) {
            free(buf);
            return API_BAD_VALUE(err, param,
                                 "Invalid 'messages[%d].content[%d]': a content part is an "
                                 "object with a string 'type'.",
                                 (int)i, (int)k);
        }
        if (strcmp(type->valuestring, "text") != 0) {
            free(buf);
            return API_BAD_VALUE(
                err, param,
                "Content parts of type '%.*s' are not supported: this "
                "server serves text-only models (messages[%d].content[%d]).",
                json_clip_len(type->valuestring, 40), type->valuestring, (int)i, (int)k);
        }
        if (!cJSON_IsString(text)) {
            free(buf);
            return json_type_error(err, param, "text parts with a string 'text'", text);
        }
        const size_t n = strlen(text->valuestring);
        json_buf_reserve(&buf, &cap, len + n + 2);
        if (k > 0) buf[len++] = '\n';
        memcpy(buf + len, text->valuestring, n);
        len += n;
        buf[len] = '\0';
    }
    *out = buf ? buf : xstrdup("");
    return 0;
}

static int read_messages(const cJSON *arr, struct chat_message **out, int32_t *n_out,
                         struct api_error *err)
{
    if (!arr)
        return API_BAD_VALUE(err, "messages", "You must provide a messages parameter.");
    if (!cJSON_IsArray(arr))
        return json_type_error(err, "messages", "an array of messages", arr);
    const int n = cJSON_GetArraySize(arr);
    if (n < 1 || n > CHAT_MAX_MESSAGES)
        return API_BAD_VALUE(err, "messages",
                             "Invalid 'messages': give 1 to %d messages, not %d.",
                             CHAT_MAX_MESSAGES, n);
    struct chat_message *msgs = xcalloc((size_t)n, sizeof *msgs);
    int32_t i = 0;
    int rc = 0;
    for (const cJSON *m = arr->child; m && !rc; m = m->next, i++) {
        char param[64];
        snprintf(param, sizeof param, "messages[%d]", (int)i);
        if (!cJSON_IsObject(m)) {
            rc = json_type_error(err, param, "an object", m);
            break;
        }
        const cJSON *role = json_field(m, "role");
        snprintf(param, sizeof param, "messages[%d].role", (int)i);
        if (!cJSON_IsString(role)) {
            rc = json_type_error(err, param, "a string", role);
            break;
        }
        const char *r = role->valuestring;
        if (strcmp(r, "system") == 0 || strcmp(r, "developer") == 0) {
            msgs[i].role = "system"; /* OpenAI's newer name for the system message */
        } else if (strcmp(r, "user") == 0) {
            msgs[i].role = "user";
        } else if (strcmp(r, "assistant") == 0) {
            msgs[i].role = "assistant";
        } else if (strcmp(r, "tool") == 0 || strcmp(r, "function") == 0) {
            rc = API_BAD_VALUE(err, param,
                               "Messages with role '%s' are not supported: this server "
                               "does not call tools.",
                               r);
            break;
        } else {
            rc = API_BAD_VALUE(err, param,
                               "Invalid value for 'messages[%d].role': '%.*s'; supported "
                               "roles are system, developer, user and assistant.",
                               (int)i, json_clip_len(r, 40), r);
            break;
        }
        if (json_field(m, "tool_calls") || json_field(m, "function_call")) {
            snprintf(param, sizeof param, "messages[%d].tool_calls", (int)i);
            rc = API_BAD_VALUE(err, param,
                               "Tool calls are not supported: this server does not call "
                               "tools.");
            break;
        }
        const cJSON *content = json_field(m, "content");
        if (!content) {
            snprintf(param, sizeof param, "messages[%d].content", (int)i);
            rc = API_BAD_VALUE(err, param, "Missing required parameter: '%s'.", param);
            break;
        }
        char *text = NULL;
        rc = read_content(content, i, &text, err);
        msgs[i].content = text;
    }
    if (rc) {
        free_messages(msgs, n);
        return -1;
    }
    *out = msgs;
    *n_out = n;
    return 0;
}

/* What chat knows and this server cannot do: a 400 naming it. */
static int refuse_unsupported(const cJSON *root, struct api_error *err)
{
    const cJSON *tools = json_field(root, "tools");
    if (tools && !(cJSON_IsArray(tools) && cJSON_GetArraySize(tools) == 0))
        return API_BAD_VALUE(err, "tools",
                             "Tools are not supported: this server does not "
                             "call tools.");
    const cJSON *choice = json_field(root, "tool_choice");
    if (choice && !(cJSON_IsString(choice) && strcmp(choice->valuestring, "none") == 0))
        return API_BAD_VALUE(
            err, "tool_choice",
            "tool_choice other than \"none\" is not supported: this server "
            "does not call tools.");
    if (json_field(root, "functions") || json_field(root, "function_call"))
        return API_BAD_VALUE(
            err, "functions",
            "Functions are not supported: this server does not call tools.");
    const cJSON *rf = json_field(root, "response_format");
    if (rf) {
        const cJSON *type = cJSON_IsObject(rf) ? json_field(rf, "type") : NULL;
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") != 0)
            return API_BAD_VALUE(err, "response_format",
                                 "Only response_format {\"type\": \"text\"} is supported: "
                                 "this server has no JSON mode.");
    }
    const cJSON *modalities = json_field(root, "modalities");
    if (modalities) {
        bool text_only = cJSON_IsArray(modalities);
        for (const cJSON *m = text_only ? modalities->child : NULL; m; m = m->next)
            text_only &= cJSON_IsString(m) && strcmp(m->valuestring, "text") == 0;
        if (!text_only)
            return API_BAD_VALUE(err, "modalities",
                                 "Only the text modality is supported: modalities must be "
                                 "[\"text\"].");
    }
    if (json_field(root, "audio"))
        return API_BAD_VALUE(err, "audio", "Audio output is not supported.");
    if (json_field(root, "echo"))
        return API_BAD_VALUE(err, "echo", "echo is not supported on chat completions.");
    return 0;
}

/* logprobs (a boolean) and top_logprobs (0..5 here) -> completions' logprobs:
 * -1 for none, else the number of alternatives. */
static int read_logprobs(const cJSON *root, int32_t *out, struct api_error *err)
{
    bool on = false;
    const cJSON *lp = json_field(root, "logprobs");
    if (lp && json_read_bool(lp, "logprobs", &on, err)) return -1;
    const cJSON *top = json_field(root, "top_logprobs");
    int64_t k = 0;
    if (top) {
        if (!json_int_in(top, 0, 20, &k))
            return API_BAD_VALUE(
                err, "top_logprobs",
                "Invalid 'top_logprobs': expected an integer from 0 to 20.");
        if (!on)
            return API_BAD_VALUE(err, "top_logprobs",
                                 "top_logprobs needs logprobs set to true.");
        if (k > CMPL_MAX_LOGPROBS)
            return API_BAD_VALUE(err, "top_logprobs",
                                 "Invalid 'top_logprobs': this server returns at most %d "
                                 "alternatives, not %lld.",
                                 CMPL_MAX_LOGPROBS, (long long)k);
    }
    *out = on ? (int32_t)k : -1;
    return 0;
}

/* The completions body of a chat request whose prompt is ids[0..n). */
static cJSON *completions_body(const cJSON *root, const struct api_model *m,
                               const int32_t *ids, int32_t n, int32_t logprobs)
{
    cJSON *b = cJSON_CreateObject();
    for (size_t i = 0; i < ARRAY_LEN(shared_fields); i++) {
        const cJSON *v = json_field(root, shared_fields[i]);
        if (v) cJSON_AddItemToObject(b, shared_fields[i], cJSON_Duplicate(v, true));
    }
    const cJSON *max = json_field(root, "max_completion_tokens");
    if (!max) max = json_field(root, "max_tokens");
    if (max)
        cJSON_AddItemToObject(b, "max_tokens", cJSON_Duplicate(max, true));
    else /* to the end of the context; a prompt that fills it fails the length check */
        cJSON_AddNumberToObject(b, "max_tokens", MAX(1, m->max_model_len - n));
    if (logprobs >= 0) cJSON_AddNumberToObject(b, "logprobs", logprobs);
    cJSON *prompt = cJSON_AddArrayToObject(b, "prompt");
    for (int32_t i = 0; i < n; i++)
        cJSON_AddItemToArray(prompt, cJSON_CreateNumber(ids[i]));
    return b;
}

int chat_no_template(struct api_error *err, const char *model_id)
{
    /* vLLM (through transformers) says: "As of transformers v4.44, default chat
     * template is no longer allowed, so you must provide a chat template if the
     * tokenizer does not define one." We take no template in the request, so the
     * advice is the completions endpoint instead. */
    return api_error_set(err, 400, API_ERR_INVALID, NULL, NULL,
                         "The model `%.*s` has no chat template, so it cannot serve chat "
                         "requests: as of transformers v4.44, default chat template is no "
                         "longer allowed, and this model's tokenizer does not define one. "
                         "Use /v1/completions with a text prompt instead.",
                         json_clip_len(model_id, 256), model_id);
}

int chat_prompt_ids(const cJSON *root, const struct chat_model *cm, int32_t **ids,
                    int32_t *n_ids, struct api_error *err)
{
    const struct api_model *m = cm->m;
    *ids = NULL;
    *n_ids = 0;
    if (!cm->render) return chat_no_template(err, m->id);
    if (!tokenizer_has_text(m->tok))
        return api_error_set(err, 400, API_ERR_INVALID, NULL, NULL,
                             "The model `%.*s` has no tokenizer, so it cannot serve chat "
                             "requests: give /v1/completions token ids instead.",
                             json_clip_len(m->id, 256), m->id);
    bool gen_prompt = true;
    const cJSON *agp = json_field(root, "add_generation_prompt");
    if (agp && json_read_bool(agp, "add_generation_prompt", &gen_prompt, err)) return -1;
    struct chat_message *msgs = NULL;
    int32_t n_msgs = 0;
    if (read_messages(json_field(root, "messages"), &msgs, &n_msgs, err)) return -1;
    char *prompt = NULL, *why = NULL;
    int rc = -1;
    if (cm->render(cm->ctx, msgs, n_msgs, gen_prompt, &prompt, &why)) {
        API_BAD_VALUE(err, "messages", "The chat template refused the messages: %s",
                      why ? why : "no reason given");
    } else if (tokenizer_encode_flags(m->tok, prompt, strlen(prompt),
                                      TOKENIZER_ENCODE_SPECIAL, ids, n_ids)) {
        /* The template writes special tokens (and bos_token) as text: they are
         * parsed, and nothing of our own is added. */
        api_error_set(err, 500, API_ERR_SERVER, NULL, NULL, "tokenizing the prompt failed");
    } else if (*n_ids == 0) {
        API_BAD_VALUE(err, "messages", "The messages render to an empty prompt.");
    } else {
        rc = 0;
    }
    if (rc) {
        free(*ids);
        *ids = NULL;
        *n_ids = 0;
    }
    free(prompt);
    free(why);
    free_messages(msgs, n_msgs);
    return rc;
}

int chat_parse_json(const cJSON *root, const struct chat_model *cm, struct cmpl_params *out,
                    struct api_error *err)
{
    const struct api_model *m = cm->m;
    memset(out, 0, sizeof *out);
    if (json_model_check(json_field(root, "model"), m->id, err)) return -1;
    /* What chat cannot do is refused before the template runs. */
    if (cm->render && refuse_unsupported(root, err)) return -1;
    int32_t logprobs = -1;
    if (cm->render && read_logprobs(root, &logprobs, err)) return -1;
    int32_t *ids, n_ids;
    if (chat_prompt_ids(root, cm, &ids, &n_ids, err)) return -1;
    cJSON *body = completions_body(root, m, ids, n_ids, logprobs);
    free(ids);
    int rc = cmpl_parse_json(body, m, out, err);
    cJSON_Delete(body);
    if (rc == 0) {
        out->chat = true;
    } else if (err->param && strcmp(err->param, "prompt") == 0) {
        /* The prompt is the messages' rendering: point the client at them. */
        free(err->param);
        err->param = xstrdup("messages");
    }
    return rc;
}

int chat_parse_batch_body(const cJSON *body, bool chat, const struct chat_model *cm,
                          struct cmpl_params *out, struct api_error *err)
{
    return chat ? chat_parse_json(body, cm, out, err)
                : cmpl_parse_json(body, cm->m, out, err);
}

int chat_parse(const char *body, size_t len, const struct chat_model *cm,
               struct cmpl_params *out, struct api_error *err)
{
    memset(out, 0, sizeof *out);
    cJSON *root = json_parse_object(body, len, err);
    if (!root) return -1;
    const int rc = chat_parse_json(root, cm, out, err);
    cJSON_Delete(root);
    return rc;
}
