/*
 * chat_template.c - a model's chat template: found in its folder, compiled by jinja.c,
 * rendered with the variables transformers' apply_chat_template passes: messages,
 * tools (none), documents (none), add_generation_prompt, the tokenizer's special tokens
 * (bos_token, eos_token) and whatever extra ones the caller adds.
 *
 * Owns: the compiled template.
 * Thread: any; a compiled template is only read by renders.
 */
#include "chat_template.h"

#include "err.h"
#include "util.h"

#include <cJSON.h>

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct chat_template {
    struct jinja_template *jt;
};

static int ct_err(char **err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int ct_err(char **err, int code, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    *err = xstrdup(msg);
    return code;
}

static int file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* A token in tokenizer_config.json: "<s>" or {"content": "<s>", ...}. */
static char *ct_token(const cJSON *cfg, const char *key)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (cJSON_IsObject(t)) t = cJSON_GetObjectItemCaseSensitive(t, "content");
    return cJSON_IsString(t) ? xstrdup(t->valuestring) : NULL;
}

int chat_template_read_dir(const char *dir, struct chat_template_src *out, char **err)
{
    memset(out, 0, sizeof *out);
    *err = NULL;
    char *jpath = util_path_join(dir, "chat_template.jinja");
    char *cpath = util_path_join(dir, "tokenizer_config.json");
    char *buf = NULL;
    size_t len;
    int rc = 0;
    cJSON *cfg = NULL;
    if (file_exists(cpath)) {
        if (util_read_file(cpath, &buf, &len)) {
            rc = ct_err(err, ENG_EIO, "%s: cannot read it", cpath);
            goto done;
        }
        cfg = cJSON_ParseWithLength(buf, len);
        free(buf);
        buf = NULL;
        if (!cJSON_IsObject(cfg)) {
            rc = ct_err(err, ENG_EFORMAT, "%s: not a JSON object", cpath);
            goto done;
        }
        out->bos_token = ct_token(cfg, "bos_token");
        out->eos_token = ct_token(cfg, "eos_token");
    }
    if (file_exists(jpath)) {
        if (util_read_file(jpath, &buf, &len)) {
            rc = ct_err(err, ENG_EIO, "%s: cannot read it", jpath);
            goto done;
        }
        out->text = buf;
        out->origin = xstrdup("chat_template.jinja");
        goto done;
    }
    const cJSON *ct = cfg ? cJSON_GetObjectItemCaseSensitive(cfg, "chat_template") : NULL;
    if (cJSON_IsString(ct)) {
        out->text = xstrdup(ct->valuestring);
    } else if (cJSON_IsArray(ct)) {
        /* named templates (Cohere, Hermes: default, tool_use, rag): "default" is the one
         * apply_chat_template uses when the caller names none */
        const cJSON *e;
        cJSON_ArrayForEach(e, ct)
        {
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name");
            const cJSON *tpl = cJSON_GetObjectItemCaseSensitive(e, "template");
            if (!cJSON_IsString(name) || !cJSON_IsString(tpl)) {
                rc = ct_err(
                    err, ENG_EFORMAT,
                    "%s: chat_template entries must be {\"name\", \"template\"} strings",
                    cpath);
                goto done;
            }
            if (!strcmp(name->valuestring, "default"))
                out->text = xstrdup(tpl->valuestring);
        }
        if (!out->text) {
            rc = ct_err(err, ENG_EFORMAT,
                        "%s: several chat templates and none named \"default\"", cpath);
            goto done;
        }
    } else if (ct && !cJSON_IsNull(ct)) {
        rc = ct_err(err, ENG_EFORMAT, "%s: chat_template is neither a string nor a list",
                    cpath);
        goto done;
    } else {
        rc = ct_err(err, ENG_ENOTFOUND,
                    "%s has no chat template (no chat_template.jinja, no "
                    "chat_template in tokenizer_config.json)",
                    dir);
        goto done;
    }
    out->origin = xstrdup("tokenizer_config.json");
done:
    cJSON_Delete(cfg);
    free(jpath);
    free(cpath);
    if (rc) chat_template_src_clear(out);
    return rc;
}

void chat_template_src_clear(struct chat_template_src *src)
{
    free(src->text);
    free(src->origin);
    free(src->bos_token);
    free(src->eos_token);
    memset(src, 0, sizeof *src);
}

int chat_template_compile(const char *src, struct chat_template **out, char **err)
{
    struct jinja_template *jt;
    *out = NULL;
    int rc = jinja_compile(src, strlen(src), &jt, err);
    if (rc) return rc;
    *out = xcalloc(1, sizeof **out);
    (*out)->jt = jt;
    return 0;
}

void chat_template_free(struct chat_template *t)
{
    if (!t) return;
    jinja_free(t->jt);
    free(t);
}

int chat_template_render_json(const struct chat_template *t, const cJSON *messages,
                              const struct chat_render_opts *o, char **out, size_t *len,
                              char **err)
{
    struct chat_render_opts none = {0};
    if (!o) o = &none;
    *out = NULL;
    if (!cJSON_IsArray(messages)) return ct_err(err, ENG_EINVAL, "messages must be a list");
    if (o->extra && !cJSON_IsObject(o->extra))
        return ct_err(err, ENG_EINVAL, "extra template variables must be an object");
    /* The variables, in the order transformers passes them; `extra` may override any. */
    cJSON *vars = cJSON_CreateObject();
    cJSON_AddItemReferenceToObject(vars, "messages", (cJSON *)messages);
    cJSON_AddNullToObject(vars, "tools");
    cJSON_AddNullToObject(vars, "documents");
    cJSON_AddBoolToObject(vars, "add_generation_prompt", o->add_generation_prompt);
    if (o->bos_token) cJSON_AddStringToObject(vars, "bos_token", o->bos_token);
    if (o->eos_token) cJSON_AddStringToObject(vars, "eos_token", o->eos_token);
    const cJSON *e;
    if (o->extra) {
        cJSON_ArrayForEach(e, o->extra)
        {
            cJSON_DeleteItemFromObjectCaseSensitive(vars, e->string);
            cJSON_AddItemReferenceToObject(vars, e->string, (cJSON *)e);
        }
    }
    struct jinja_render_opts jo = {.limits = o->limits, .now = o->now};
    int rc = jinja_render(t->jt, vars, &jo, out, len, err);
    cJSON_Delete(vars); /* references only: the caller's trees stay */
    return rc;
}

int chat_template_render(const struct chat_template *t, const struct chat_message *msgs,
                         int n, const struct chat_render_opts *o, char **out, size_t *len,
                         char **err)
{
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; i < n; i++) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", msgs[i].role ? msgs[i].role : "");
        cJSON_AddStringToObject(m, "content", msgs[i].content ? msgs[i].content : "");
        cJSON_AddItemToArray(arr, m);
    }
    int rc = chat_template_render_json(t, arr, o, out, len, err);
    cJSON_Delete(arr);
    return rc;
}
