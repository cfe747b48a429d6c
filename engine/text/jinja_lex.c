/*
 * jinja_lex.c - splits a template into text and the tokens inside its tags.
 *
 * Owns: nothing past the call; the tokens point into a normalized copy of the source
 * that the caller (jinja_parse.c) keeps in the template's arena.
 * Whitespace is decided here, once, as Jinja's own lexer decides it with transformers'
 * settings: newlines normalized to "\n" and one trailing newline dropped
 * (keep_trailing_newline=False), `{%-` / `-%}` (also on `{{ }}` and `{# #}`) strip all
 * whitespace on that side, trim_blocks drops the first newline after a block or comment
 * tag, lstrip_blocks drops the spaces and tabs before a block or comment tag that
 * starts its line, and `{%+` / `+%}` turn those two off for the tag.
 * Thread: any.
 */
#include "jinja_lex.h"

#include "err.h"
#include "util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct lexer {
    const char *src;
    size_t n, pos;
    int line, col;
    struct jtok *toks;
    size_t n_toks, cap;
    struct jinja_arena *ar;
    char *err;
    int code;
    size_t w_pos; /* lex_where's cursor: src[w_pos] is at w_line, w_col */
    int w_line, w_col;
};

static int lex_err(struct lexer *L, int line, int col, int code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static int lex_err(struct lexer *L, int line, int col, int code, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    size_t need = strlen(msg) + 64;
    L->err = xmalloc(need);
    snprintf(L->err, need, "line %d, column %d: %s", line, col, msg);
    L->code = code;
    return -1;
}

/* Line and column (1-based, columns in code points) of src[pos]. Tokens come in order,
 * so the scan goes on from the last position asked (a template of n bytes costs O(n)). */
static void lex_where(struct lexer *L, size_t pos, int *line, int *col)
{
    if (pos < L->w_pos) L->w_pos = 0, L->w_line = 1, L->w_col = 1;
    for (size_t i = L->w_pos; i < pos && i < L->n; i++) {
        if (L->src[i] == '\n')
            L->w_line++, L->w_col = 1;
        else if (((unsigned char)L->src[i] & 0xC0) != 0x80)
            L->w_col++;
    }
    L->w_pos = MAX(L->w_pos, MIN(pos, L->n));
    *line = L->w_line;
    *col = L->w_col;
}

static struct jtok *lex_push(struct lexer *L, enum jtok_kind k, size_t at)
{
    if (L->n_toks == L->cap) {
        L->cap = L->cap ? L->cap * 2 : 64;
        L->toks = xrealloc(L->toks, L->cap * sizeof *L->toks);
    }
    struct jtok *t = &L->toks[L->n_toks++];
    memset(t, 0, sizeof *t);
    t->kind = k;
    lex_where(L, at, &t->line, &t->col);
    return t;
}

static int is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

static int is_name0(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* Decode one string literal at src[pos] (a quote) into the arena, Python's escapes. */
static int lex_string(struct lexer *L, size_t *pos, struct jtok *t)
{
    char q = L->src[*pos];
    size_t i = *pos + 1;
    char *buf = jinja_alloc(L->ar, L->n - i + 1), *o = buf;
    for (;;) {
        if (i >= L->n) return lex_err(L, t->line, t->col, ENG_EFORMAT, "unclosed string");
        char c = L->src[i++];
        if (c == q) break;
        if (c != '\\' || i >= L->n) {
            *o++ = c;
            continue;
        }
        char e = L->src[i++];
        unsigned long cp;
        int nhex = 0;
        switch (e) {
        case 'n': *o++ = '\n'; break;
        case 't': *o++ = '\t'; break;
        case 'r': *o++ = '\r'; break;
        case '0': *o++ = '\0'; break;
        case 'a': *o++ = '\a'; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'v': *o++ = '\v'; break;
        case '\\':
        case '\'':
        case '"': *o++ = e; break;
        case '\n': break; /* a backslash-newline continues the line, as in Python */
        case 'x': nhex = 2; break;
        case 'u': nhex = 4; break;
        case 'U': nhex = 8; break;
        default: /* Python keeps an unknown escape as written */ *o++ = '\\'; *o++ = e;
        }
        if (!nhex) continue;
        cp = 0;
        for (int k = 0; k < nhex; k++, i++) {
            char h = i < L->n ? L->src[i] : 0;
            int d = is_digit(h)              ? h - '0'
                    : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                    : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                             : -1;
            if (d < 0)
                return lex_err(L, t->line, t->col, ENG_EFORMAT,
                               "bad \\%c escape in a string", e);
            cp = cp * 16 + (unsigned long)d;
        }
        if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return lex_err(L, t->line, t->col, ENG_EFORMAT, "bad code point in a string");
        /* UTF-8 encode (the \x escapes give code points too, as in Python 3) */
        if (cp < 0x80)
            *o++ = (char)cp;
        else if (cp < 0x800)
            *o++ = (char)(0xC0 | cp >> 6), *o++ = (char)(0x80 | (cp & 63));
        else if (cp < 0x10000)
            *o++ = (char)(0xE0 | cp >> 12), *o++ = (char)(0x80 | ((cp >> 6) & 63)),
            *o++ = (char)(0x80 | (cp & 63));
        else
            *o++ = (char)(0xF0 | cp >> 18), *o++ = (char)(0x80 | ((cp >> 12) & 63)),
            *o++ = (char)(0x80 | ((cp >> 6) & 63)), *o++ = (char)(0x80 | (cp & 63));
    }
    t->s = buf;
    t->n = (size_t)(o - buf);
    *pos = i;
    return 0;
}

static const char *const lex_ops2[] = {"//", "**", "==", "!=", "<=", ">="};
static const char lex_ops1[] = "+-*/%~<>()[]{},.:|=";

/* The tokens of one `{{ }}` or `{% %}` tag from L->pos (just past the opener and its
 * '-' / '+'); stops past the closer. *strip_after: the closer had a '-'; *plus: '+'. */
static int lex_tag(struct lexer *L, int block, int *strip_after, int *plus)
{
    int depth = 0; /* open brackets: a '}' inside a dict literal does not close the tag */
    char close = block ? '%' : '}';
    for (;;) {
        while (L->pos < L->n && is_ws(L->src[L->pos]))
            L->pos++;
        if (L->pos >= L->n) {
            int ln, c;
            lex_where(L, L->pos, &ln, &c);
            return lex_err(L, ln, c, ENG_EFORMAT, "unclosed %s tag", block ? "{%" : "{{");
        }
        const char *p = L->src + L->pos;
        size_t left = L->n - L->pos;
        if (depth == 0) {
            int sign = (p[0] == '-' || p[0] == '+') ? 1 : 0;
            if (left >= (size_t)(2 + sign) && p[sign] == close && p[sign + 1] == '}') {
                *strip_after = p[0] == '-';
                *plus = p[0] == '+';
                L->pos += (size_t)(2 + sign);
                lex_push(L, block ? JT_BLOCK_END : JT_VAR_END, L->pos);
                return 0;
            }
        }
        size_t at = L->pos;
        if (is_name0(p[0])) {
            size_t k = 1;
            while (k < left && (is_name0(p[k]) || is_digit(p[k])))
                k++;
            struct jtok *t = lex_push(L, JT_NAME, at);
            t->s = p;
            t->n = k;
            L->pos += k;
        } else if (is_digit(p[0])) {
            size_t k = 0;
            int flt = 0;
            while (k < left && (is_digit(p[k]) || p[k] == '_'))
                k++;
            if (k + 1 < left && p[k] == '.' && is_digit(p[k + 1])) {
                flt = 1;
                k++;
                while (k < left && is_digit(p[k]))
                    k++;
            }
            if (k < left && (p[k] == 'e' || p[k] == 'E')) {
                size_t e = k + 1;
                if (e < left && (p[e] == '+' || p[e] == '-')) e++;
                if (e < left && is_digit(p[e])) {
                    flt = 1;
                    k = e;
                    while (k < left && is_digit(p[k]))
                        k++;
                }
            }
            struct jtok *t = lex_push(L, flt ? JT_FLOAT : JT_INT, at);
            t->s = p;
            t->n = k;
            L->pos += k;
        } else if (p[0] == '\'' || p[0] == '"') {
            struct jtok *t = lex_push(L, JT_STR, at);
            if (lex_string(L, &L->pos, t)) return -1;
        } else {
            struct jtok *t = NULL;
            for (size_t k = 0; k < ARRAY_LEN(lex_ops2); k++)
                if (left >= 2 && !memcmp(p, lex_ops2[k], 2)) {
                    t = lex_push(L, JT_OP, at);
                    memcpy(t->op, p, 2);
                    L->pos += 2;
                    break;
                }
            if (!t) {
                if (!p[0] || !strchr(lex_ops1, p[0])) {
                    struct jtok tmp;
                    lex_where(L, at, &tmp.line, &tmp.col);
                    return lex_err(L, tmp.line, tmp.col, ENG_EFORMAT,
                                   "unexpected character '%c'", p[0]);
                }
                t = lex_push(L, JT_OP, at);
                t->op[0] = p[0];
                L->pos++;
                if (strchr("([{", p[0])) depth++;
                if (strchr(")]}", p[0]) && depth > 0) depth--;
            }
        }
    }
}

/* Emit src[s..e) as text after the whitespace rules of the tags on either side. */
static void lex_text(struct lexer *L, size_t s, size_t e, int strip_lead, int trim_nl,
                     int next_kind, int next_mod)
{
    if (strip_lead) {
        while (s < e && is_ws(L->src[s]))
            s++;
    } else if (trim_nl && s < e && L->src[s] == '\n') {
        s++;
    }
    if (next_mod == '-') {
        while (e > s && is_ws(L->src[e - 1]))
            e--;
    } else if (next_mod != '+' && (next_kind == '%' || next_kind == '#')) {
        /* lstrip_blocks: only when nothing but spaces and tabs precede the tag on its
         * line (Jinja's lstrip_unless_re / line_starting check). */
        size_t l = e;
        while (l > s && (L->src[l - 1] == ' ' || L->src[l - 1] == '\t'))
            l--;
        if ((l > s && L->src[l - 1] == '\n') ||
            (l == s && (s == 0 || L->src[s - 1] == '\n')))
            e = l;
    }
    if (e > s) {
        struct jtok *t = lex_push(L, JT_TEXT, s);
        t->s = L->src + s;
        t->n = e - s;
    }
}

int jinja_lex(struct jinja_arena *ar, const char *src0, size_t n0, struct jtok **toks,
              size_t *n_toks, char **err)
{
    /* Normalize newlines and drop one trailing newline, as Jinja's lexer does. */
    char *src = jinja_alloc(ar, n0 + 1);
    size_t n = 0;
    for (size_t i = 0; i < n0; i++) {
        if (src0[i] == '\r') {
            src[n++] = '\n';
            if (i + 1 < n0 && src0[i + 1] == '\n') i++;
        } else {
            src[n++] = src0[i];
        }
    }
    if (n && src[n - 1] == '\n') n--;
    src[n] = 0;

    struct lexer L = {.src = src, .n = n, .ar = ar, .w_line = 1, .w_col = 1};
    int strip_lead = 0, trim_nl = 0;
    while (L.pos <= n) {
        size_t ts = L.pos;
        while (ts + 1 < n && !(src[ts] == '{' && src[ts + 1] && strchr("{%#", src[ts + 1])))
            ts++;
        if (ts + 1 >= n) {
            lex_text(&L, L.pos, n, strip_lead, trim_nl, 0, 0);
            break;
        }
        char kind = src[ts + 1];
        char mod = ts + 2 < n ? src[ts + 2] : 0;
        if (mod != '-' && mod != '+') mod = 0;
        lex_text(&L, L.pos, ts, strip_lead, trim_nl, kind, mod);
        strip_lead = trim_nl = 0;
        size_t body = ts + 2 + (mod ? 1 : 0);
        if (kind == '#') {
            const char *end = NULL;
            for (size_t i = body; i + 1 < n; i++)
                if (src[i] == '#' && src[i + 1] == '}') {
                    end = src + i;
                    break;
                }
            if (!end) {
                int ln, c;
                lex_where(&L, ts, &ln, &c);
                lex_err(&L, ln, c, ENG_EFORMAT, "unclosed comment");
                break;
            }
            size_t e = (size_t)(end - src);
            if (e > body && src[e - 1] == '-')
                strip_lead = 1;
            else if (!(e > body && src[e - 1] == '+'))
                trim_nl = 1;
            L.pos = e + 2;
            continue;
        }
        lex_push(&L, kind == '%' ? JT_BLOCK_BEGIN : JT_VAR_BEGIN, ts);
        L.pos = body;
        int strip_after = 0, plus = 0;
        if (lex_tag(&L, kind == '%', &strip_after, &plus)) break;
        if (strip_after)
            strip_lead = 1;
        else if (kind == '%' && !plus)
            trim_nl = 1;
    }
    if (L.err) {
        free(L.toks);
        *err = L.err;
        return L.code;
    }
    lex_push(&L, JT_EOF, n);
    *toks = L.toks;
    *n_toks = L.n_toks;
    return 0;
}
