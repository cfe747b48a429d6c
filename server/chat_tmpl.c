/*
 * chat_tmpl.c - the served model's chat template (chat_tmpl.h).
 */
#include "chat_tmpl.h"

#include "chat_template.h"
#include "err.h"
#include "model.h"
#include "tokenizer.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct chat_tmpl {
    struct chat_template *t; /* NULL when it failed to compile: why says why */
    char *why;
    char *origin; /* where it came from, for messages */
    char *bos, *eos;
};

static char *token_name(const struct tokenizer *tok, int32_t id)
{
    return id >= 0 ? xstrdup(tokenizer_token_name(tok, id)) : NULL;
}

int chat_tmpl_open(const char *model_dir, const char *file, const struct tokenizer *tok,
                   struct chat_tmpl **out)
{
    *out = NULL;
    struct chat_template_src src = {0};
    char *err = NULL;
    int rc = ENG_ENOTFOUND;
    if (model_dir) rc = chat_template_read_dir(model_dir, &src, &err);
    if (rc && rc != ENG_ENOTFOUND) {
        rc = err_set(rc, "%s", err ? err : "cannot read the chat template");
        free(err);
        return rc;
    }
    free(err);
    err = NULL;
    if (file) { /* the flag wins over the folder's template; its tokens stay */
        size_t len;
        char *text = NULL;
        if (util_read_file(file, &text, &len)) {
            chat_template_src_clear(&src);
            return err_set(ENG_EIO, "--chat-template %s: %s", file, err_msg());
        }
        free(src.text);
        free(src.origin);
        src.text = text;
        src.origin = xstrdup(file);
    } else if (rc == ENG_ENOTFOUND) {
        return 0; /* no template: chat requests get the no-template 400 */
    }
    struct chat_tmpl *t = xcalloc(1, sizeof *t);
    t->origin = src.origin ? src.origin : xstrdup("the chat template");
    t->bos = src.bos_token ? src.bos_token : token_name(tok, tokenizer_bos(tok));
    t->eos = src.eos_token ? src.eos_token : token_name(tok, tokenizer_eos(tok));
    const int bad = chat_template_compile(src.text, &t->t, &err);
    free(src.text); /* the rest of src is t's now */
    if (bad && file) {
        int e = err_set(ENG_EFORMAT, "--chat-template %s: %s", file,
                        err ? err : "cannot compile");
        free(err);
        chat_tmpl_free(t);
        return e;
    }
    if (bad) {
        t->why = err ? err : xstrdup("cannot compile");
        log_warn("the chat template in %s/%s cannot be used (%s): chat requests will be "
                 "refused",
                 model_dir, t->origin, t->why);
    }
    *out = t;
    return 0;
}

int chat_tmpl_open_model(const char *name, const char *file, const struct tokenizer *tok,
                         struct chat_tmpl **out)
{
    char buf[4096];
    const char *dir;
    int err = model_resolve(name, buf, sizeof buf, &dir);
    if (err) return err;
    return chat_tmpl_open(strncmp(dir, "dummy:", 6) == 0 ? NULL : dir, file, tok, out);
}

void chat_tmpl_free(struct chat_tmpl *t)
{
    if (!t) return;
    chat_template_free(t->t);
    free(t->why);
    free(t->origin);
    free(t->bos);
    free(t->eos);
    free(t);
}

/* chat_render_fn over a chat_tmpl. */
static int render(const void *ctx, const struct chat_message *msgs, int32_t n,
                  bool add_generation_prompt, char **prompt, char **error)
{
    const struct chat_tmpl *t = ctx;
    if (!t->t) {
        size_t cap = strlen(t->origin) + strlen(t->why) + 64;
        *error = xmalloc(cap);
        snprintf(*error, cap, "the model's chat template (%s) cannot be used: %s",
                 t->origin, t->why);
        return -1;
    }
    struct chat_render_opts o = {.bos_token = t->bos,
                                 .eos_token = t->eos,
                                 .add_generation_prompt = add_generation_prompt};
    size_t len;
    return chat_template_render(t->t, msgs, (int)n, &o, prompt, &len, error) ? -1 : 0;
}

struct chat_model chat_tmpl_model(const struct chat_tmpl *t, const struct api_model *m)
{
    return (struct chat_model){.m = m, .render = t ? render : NULL, .ctx = t};
}
