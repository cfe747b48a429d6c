/*
 * jinja.h - the subset of Jinja2 that Hugging Face chat templates use, in C.
 *
 * Compiled as transformers compiles a chat template: trim_blocks and lstrip_blocks on,
 * no autoescape, the loopcontrols extension (break / continue), an undefined name
 * prints as nothing; tojson is transformers' own (ensure_ascii off). What is and is not
 * supported is listed in docs/chat-templates.md. A construct outside the subset is an
 * error naming it and its line and column, at compile time when it can be seen there
 * (statements, filters, tests), else at render time (methods, types). Never a guess.
 *
 * Thread: a compiled template is read-only and may be rendered from any number of
 * threads at once; each render has its own state.
 */
#ifndef H2O_JINJA_H
#define H2O_JINJA_H

#include <stddef.h>
#include <stdint.h>

struct cJSON;
struct jinja_template;

/* Bounds that keep a hostile template from taking the server down. 0 = the default. */
struct jinja_limits {
    size_t max_output; /* bytes rendered (default 8 MiB) */
    size_t max_memory; /* bytes of values a render may create, its input included
                        * (default 256 MiB) */
    long max_steps;    /* expression and statement evaluations (default 10 million) */
    int max_depth;     /* nested evaluation and macro calls (default 200) */
};

struct jinja_render_opts {
    struct jinja_limits limits;
    /* strftime_now's clock: seconds since the epoch, formatted in local time as
     * Python's datetime.now() is; 0 = time(NULL). Tests inject it. */
    int64_t now;
};

/*
 * Compile `src` (len bytes, UTF-8). Returns 0 with *out owned by the caller
 * (jinja_free), or ENG_EFORMAT (a syntax error) / ENG_EUNSUPPORTED (a construct outside
 * the subset) with *err a malloc'd message "line L, column C: ..." the caller frees.
 * Thread: any.
 */
int jinja_compile(const char *src, size_t len, struct jinja_template **out, char **err);

/* Free a compiled template (NULL is fine). Thread: any, once no render uses it. */
void jinja_free(struct jinja_template *t);

/*
 * Render `t` with the members of the JSON object `vars` as variables (messages, bos_token,
 * ...); `o` may be NULL. Returns 0 with *out a malloc'd NUL-terminated string of *len
 * bytes (caller frees), or an error with *err malloc'd (caller frees): ENG_EINVAL when
 * the template called raise_exception (*err is its message, verbatim) or an operation
 * failed on these values (a type error, an undefined attribute: the message names it and
 * the line), ENG_EUNSUPPORTED for a method or argument outside the subset, ENG_ENOSPC
 * when a limit was reached. Thread: any; `t` is only read.
 */
int jinja_render(const struct jinja_template *t, const struct cJSON *vars,
                 const struct jinja_render_opts *o, char **out, size_t *len, char **err);

#endif
