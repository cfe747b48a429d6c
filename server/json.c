/*
 * json.c - the shared cJSON helpers (see json.h).
 */
#include "json.h"

#include "tokenizer.h"
#include "util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int json_type_error(struct api_error *e, const char *param, const char *expected,
                    const cJSON *got)
{
    return api_error_set(e, 400, API_ERR_INVALID, param, NULL,
                         "Invalid type for '%s': expected %s, but got %s instead.", param,
                         expected, json_type_name(got));
}

int json_read_bool(const cJSON *item, const char *param, bool *out, struct api_error *e)
{
    if (!item || cJSON_IsNull(item)) return 0;
    if (!cJSON_IsBool(item)) return json_type_error(e, param, "a boolean", item);
    *out = cJSON_IsTrue(item);
    return 0;
}

int json_model_check(const cJSON *item, const char *served_id, struct api_error *e)
{
    if (!item || cJSON_IsNull(item)) return 0;
    if (!cJSON_IsString(item)) return json_type_error(e, "model", "a string", item);
    if (strcmp(item->valuestring, served_id) == 0) return 0;
    return api_error_set(e, 404, API_ERR_INVALID, "model", "model_not_found",
                         "The model `%.*s` does not exist.",
                         json_clip_len(item->valuestring, 256), item->valuestring);
}

int json_read_token_ids(const cJSON *arr, int32_t vocab, const char *param, const char *name,
                       int32_t *ids, struct api_error *e)
{
    int32_t n = 0;
    for (const cJSON *c = arr->child; c; c = c->next, n++) {
        int64_t v = 0;
        if (!cJSON_IsNumber(c))
            return API_BAD_VALUE(e, param,
                                 "Invalid type for '%s[%d]': expected a token id "
                                 "(integer), but got %s instead.",
                                 name, n, json_type_name(c));
        if (!json_int_in(c, 0, vocab - 1, &v))
            return API_BAD_VALUE(e, param,
                                 "Invalid value for '%s[%d]': %.15g is not a token id in "
                                 "0..%d.",
                                 name, n, c->valuedouble, vocab - 1);
        ids[n] = (int32_t)v;
    }
    return n;
}

char *json_print(const cJSON *item, size_t *len)
{
    char *s = cJSON_PrintUnformatted(item);
    CHECK(s != NULL); /* cJSON fails only when malloc does */
    if (len) *len = strlen(s);
    return s;
}

char *json_sse(const cJSON *item, size_t *len)
{
    size_t n;
    char *body = json_print(item, &n);
    static const char pre[] = "data: ", post[] = "\n\n";
    const size_t total = sizeof pre - 1 + n + sizeof post - 1;
    char *out = xmalloc(total + 1);
    memcpy(out, pre, sizeof pre - 1);
    memcpy(out + sizeof pre - 1, body, n);
    memcpy(out + sizeof pre - 1 + n, post, sizeof post); /* with the NUL */
    free(body);
    if (len) *len = total;
    return out;
}

const cJSON *json_field(const cJSON *obj, const char *key)
{
    const cJSON *found = NULL;
    for (const cJSON *c = obj ? obj->child : NULL; c; c = c->next)
        if (c->string && strcmp(c->string, key) == 0) found = c;
    return found && !cJSON_IsNull(found) ? found : NULL;
}

const char *json_type_name(const cJSON *item)
{
    if (!item || cJSON_IsNull(item)) return "null";
    if (cJSON_IsBool(item)) return "a boolean";
    if (cJSON_IsNumber(item)) return "a number";
    if (cJSON_IsString(item)) return "a string";
    if (cJSON_IsArray(item)) return "an array";
    if (cJSON_IsObject(item)) return "an object";
    return "an unknown value";
}

bool json_int_in(const cJSON *item, int64_t lo, int64_t hi, int64_t *out)
{
    if (!cJSON_IsNumber(item)) return false;
    const double d = item->valuedouble;
    if (!isfinite(d) || d != floor(d)) return false;
    /* Doubles cannot hold every int64: 9223372036854775807 parses as 2^63, so 2^63
     * reads as INT64_MAX; anything further out is out of range for every caller. */
    const double two63 = 9223372036854775808.0;
    if (d < -two63 || d > two63) return false;
    const int64_t v = d >= two63 ? INT64_MAX : (int64_t)d;
    if (v < lo || v > hi) return false;
    *out = v;
    return true;
}

bool json_utf8_valid(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        if (p[i] < 0x80) { /* the common case: ASCII */
            i++;
            continue;
        }
        size_t len;
        if (tokenizer_utf8_next(p + i, n - i, &len) != TOKENIZER_UTF8_CHAR) return false;
        i += len;
    }
    return true;
}

/* ---- json_parse_checked: cJSON, then one pass over the text for what cJSON lets by ---- */

/* Member names kept for a fault's path: the first levels are enough to say where;
 * deeper levels are still walked (kind[] covers cJSON's whole nesting limit). */
#define SCAN_PATH_DEPTH 16
#define SCAN_MAX_DEPTH (CJSON_NESTING_LIMIT + 1)

struct scan {
    const char *s;
    size_t n;
    int depth;                          /* open containers */
    bool want_key;                      /* the next string in the top object is a name */
    unsigned char is_object[SCAN_MAX_DEPTH];
    const char *key[SCAN_PATH_DEPTH];   /* the member being read at each level (raw, */
    size_t key_len[SCAN_PATH_DEPTH];    /* escaped as in the text) */
    int64_t index[SCAN_PATH_DEPTH];     /* the element being read, for arrays */
};

static bool ws(unsigned char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* Append s[0..n) to out (capacity cap, NUL-terminated, length *len), cut on a
 * character boundary; false when it did not all fit. */
static bool path_add(char *out, size_t cap, size_t *len, const char *s, size_t n)
{
    size_t room = cap - 1 - *len, take = n <= room ? n : room;
    while (take < n && take > 0 && ((unsigned char)s[take] & 0xC0) == 0x80) take--;
    memcpy(out + *len, s, take);
    *len += take;
    out[*len] = '\0';
    return take == n;
}

/* The path of the member being read at levels 0..levels-1, into f->path. */
static void scan_path(const struct scan *sc, int levels, struct json_fault *f)
{
    static const char more[] = "...";
    const size_t cap = sizeof f->path - (sizeof more - 1);
    size_t len = 0;
    f->path[0] = '\0';
    for (int d = 0; d < levels; d++) {
        bool fits = true;
        if (d >= SCAN_PATH_DEPTH) {
            fits = false;
        } else if (sc->is_object[d]) {
            if (len) fits = path_add(f->path, cap, &len, ".", 1);
            fits = fits && path_add(f->path, cap, &len, sc->key[d], sc->key_len[d]);
        } else {
            char idx[24];
            int k = snprintf(idx, sizeof idx, "[%lld]", (long long)sc->index[d]);
            fits = path_add(f->path, cap, &len, idx, (size_t)k);
        }
        if (!fits) {
            memcpy(f->path + len, more, sizeof more);
            return;
        }
    }
}

static bool is_hex(unsigned char c)
{
    return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'f');
}

/* The string whose opening quote is at s[i]: check it and return the index of its
 * closing quote, or set *f (kind, at) and return n. Beyond UTF-8 and NUL it holds
 * cJSON to RFC 8259 where cJSON is loose (and Python's json, so OpenAI's server,
 * is strict): a control byte must be escaped, an escape is one of \" \\ \/ \b \f
 * \n \r \t or \u and four hex digits. cJSON reads "\u12G4" as U+0000, which would
 * cut the string short unseen. */
static size_t scan_string(const struct scan *sc, size_t i, struct json_fault *f)
{
    const unsigned char *u = (const unsigned char *)sc->s;
    const size_t n = sc->n;
    for (size_t j = i + 1; j < n;) {
        if (u[j] == '"') return j;
        if (u[j] == '\\') {
            const unsigned char e = j + 1 < n ? u[j + 1] : 0;
            if (e == 'u') {
                bool hex = j + 5 < n;
                for (size_t k = 2; hex && k < 6; k++)
                    hex = is_hex(u[j + k]);
                if (!hex) {
                    f->kind = JSON_FAULT_SYNTAX;
                    f->at = j;
                    return n;
                }
                if (memcmp(u + j + 2, "0000", 4) == 0) {
                    f->kind = JSON_FAULT_NUL;
                    f->at = j;
                    return n;
                }
                j += 6;
            } else if (e && strchr("\"\\/bfnrt", e)) {
                j += 2;
            } else {
                f->kind = JSON_FAULT_SYNTAX;
                f->at = j;
                return n;
            }
        } else if (u[j] == 0) {
            f->kind = JSON_FAULT_NUL;
            f->at = j;
            return n;
        } else if (u[j] < 0x20) {
            f->kind = JSON_FAULT_SYNTAX;
            f->at = j;
            return n;
        } else if (u[j] >= 0x80) {
            size_t l;
            if (tokenizer_utf8_next(u + j, n - j, &l) != TOKENIZER_UTF8_CHAR) {
                f->kind = JSON_FAULT_UTF8;
                f->at = j;
                return n;
            }
            j += l;
        } else {
            j++;
        }
    }
    f->kind = JSON_FAULT_SYNTAX; /* unterminated: cJSON would not have parsed it */
    f->at = n;
    return n;
}

static bool is_digit(unsigned char c)
{
    return c >= '0' && c <= '9';
}

/* The number token at s[i] (a byte of [-+.0-9]): the index past it when it is an
 * RFC 8259 number, -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?, else n. cJSON
 * hands strtod whatever it finds, so it takes "+1", ".5", "01" and "1." too. */
static size_t scan_number(const unsigned char *u, size_t i, size_t n)
{
    size_t j = i;
    if (j < n && u[j] == '-') j++;
    if (j < n && u[j] == '0') {
        j++;
    } else if (j < n && u[j] >= '1' && u[j] <= '9') {
        while (j < n && is_digit(u[j]))
            j++;
    } else {
        return n;
    }
    if (j < n && u[j] == '.') {
        if (++j >= n || !is_digit(u[j])) return n;
        while (j < n && is_digit(u[j]))
            j++;
    }
    if (j < n && (u[j] == 'e' || u[j] == 'E')) {
        j++;
        if (j < n && (u[j] == '+' || u[j] == '-')) j++;
        if (j >= n || !is_digit(u[j])) return n;
        while (j < n && is_digit(u[j]))
            j++;
    }
    /* What follows must end the token: a digit or a sign here means "01" or "1-2". */
    if (j < n && (is_digit(u[j]) || u[j] == '.' || u[j] == '+' || u[j] == '-' ||
                  u[j] == 'e' || u[j] == 'E'))
        return n;
    return j;
}

/* Walk text that cJSON parsed (so its structure is sound) for the first string that
 * is not UTF-8, holds a NUL or breaks RFC 8259's string rules, for numbers outside
 * its grammar, and for control bytes between tokens, which cJSON skips as if they
 * were spaces. Returns true when clean, else fills *f. */
static bool scan_text(const char *s, size_t n, struct json_fault *f)
{
    struct scan *sc = xcalloc(1, sizeof *sc); /* ~1 KB of levels: off the stack */
    sc->s = s;
    sc->n = n;
    bool ok = true;
    for (size_t i = 0; i < n && ok; i++) {
        const unsigned char c = (unsigned char)s[i];
        const int top = sc->depth - 1;
        if (c == '"') {
            const bool is_key = top >= 0 && sc->is_object[top] && sc->want_key;
            const size_t end = scan_string(sc, i, f);
            if (end == n) {
                /* A bad name is the object's fault; a bad value its member's. */
                f->in_key = is_key;
                scan_path(sc, is_key ? top : sc->depth, f);
                ok = false;
            } else if (is_key) {
                if (top < SCAN_PATH_DEPTH) {
                    sc->key[top] = s + i + 1;
                    sc->key_len[top] = end - i - 1;
                }
                sc->want_key = false;
            }
            i = end;
        } else if (c == '{' || c == '[') {
            CHECK(sc->depth < SCAN_MAX_DEPTH); /* cJSON refuses deeper nesting */
            sc->is_object[sc->depth] = c == '{';
            if (sc->depth < SCAN_PATH_DEPTH) {
                sc->key[sc->depth] = "";
                sc->key_len[sc->depth] = 0;
                sc->index[sc->depth] = 0;
            }
            sc->depth++;
            sc->want_key = c == '{';
        } else if (c == '}' || c == ']') {
            sc->depth--;
            sc->want_key = false;
        } else if (c == ',') {
            if (top >= 0 && sc->is_object[top]) sc->want_key = true;
            else if (top >= 0 && top < SCAN_PATH_DEPTH) sc->index[top]++;
        } else if (c == '-' || c == '+' || c == '.' || is_digit(c)) {
            const size_t end = scan_number((const unsigned char *)s, i, n);
            if (end == n) {
                f->kind = JSON_FAULT_SYNTAX;
                f->at = i;
                ok = false;
            } else {
                i = end - 1;
            }
        } else if (c < 0x20 && !ws(c)) {
            f->kind = JSON_FAULT_SYNTAX;
            f->at = i;
            ok = false;
        }
    }
    free(sc);
    return ok;
}

cJSON *json_parse_checked(const char *text, size_t len, struct json_fault *f)
{
    memset(f, 0, sizeof *f);
    size_t lead = 0;
    while (lead < len && ws((unsigned char)text[lead])) lead++;
    if (lead == len) {
        f->kind = JSON_FAULT_EMPTY;
        return NULL;
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, false);
    size_t at = end && end >= text && end <= text + len ? (size_t)(end - text) : 0;
    if (root) { /* cJSON stops after the value: only whitespace may follow */
        while (at < len && ws((unsigned char)text[at])) at++;
        if (at < len) {
            cJSON_Delete(root);
            root = NULL;
        }
    }
    if (!root) {
        /* Bytes that are not UTF-8 are what is wrong, wherever cJSON gave up. */
        f->kind = json_utf8_valid(text, len) ? JSON_FAULT_SYNTAX : JSON_FAULT_UTF8;
        f->at = at;
        return NULL;
    }
    if (!cJSON_IsObject(root)) {
        f->kind = JSON_FAULT_NOT_OBJECT;
        cJSON_Delete(root);
        return NULL;
    }
    if (!scan_text(text, len, f)) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

void json_fault_say(const struct json_fault *f, char *buf, size_t cap)
{
    const char *what = f->kind == JSON_FAULT_NUL
                           ? "contains U+0000 (NUL), which is not accepted"
                           : "is not valid UTF-8";
    if (!f->in_key)
        snprintf(buf, cap, "'%s' %s", f->path, what);
    else if (f->path[0])
        snprintf(buf, cap, "a member name in '%s' %s", f->path, what);
    else
        snprintf(buf, cap, "a member name %s", what);
}

cJSON *json_parse_object(const char *body, size_t len, struct api_error *e)
{
    struct json_fault f;
    cJSON *root = json_parse_checked(body, len, &f);
    if (root) return root;
    char say[sizeof f.path + 80];
    switch (f.kind) {
    case JSON_FAULT_EMPTY:
        api_error_set(e, 400, API_ERR_INVALID, NULL, NULL,
                      "The request body is empty; expected a JSON object.");
        break;
    case JSON_FAULT_NOT_OBJECT:
        /* Parsed once more to name what it is: only on this error path. */
        {
            cJSON *v = cJSON_ParseWithLength(body, len);
            api_error_set(e, 400, API_ERR_INVALID, NULL, NULL,
                          "The request body must be a JSON object, not %s.",
                          json_type_name(v));
            cJSON_Delete(v);
        }
        break;
    case JSON_FAULT_UTF8:
    case JSON_FAULT_NUL:
        if (f.path[0] || f.in_key) {
            json_fault_say(&f, say, sizeof say);
            api_error_set(e, 400, API_ERR_INVALID, f.path[0] ? f.path : NULL,
                          NULL, "Invalid request body: %s (byte %zu).", say, f.at);
        } else {
            api_error_set(e, 400, API_ERR_INVALID, NULL, NULL,
                          "The request body is not valid UTF-8 JSON (error near byte %zu).",
                          f.at);
        }
        break;
    default:
        api_error_set(e, 400, API_ERR_INVALID, NULL, NULL,
                      "We could not parse the JSON body of your request (error near byte "
                      "%zu).",
                      f.at);
    }
    return NULL;
}

int json_clip_len(const char *s, int max)
{
    int n = (int)strnlen(s, (size_t)max + 1);
    if (n <= max) return n;
    n = max;
    while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
        n--;
    return n;
}

void json_buf_reserve(char **buf, size_t *cap, size_t need)
{
    if (need <= *cap) return;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    *buf = xrealloc(*buf, c);
    *cap = c;
}

void json_utf8_append(char **buf, size_t *len, size_t *cap, const char *s, size_t n,
                      int64_t *n_chars)
{
    static const char repl[] = "\xEF\xBF\xBD";
    json_buf_reserve(buf, cap, *len + 3 * n + 1); /* a byte becomes at most U+FFFD */
    const unsigned char *u = (const unsigned char *)s;
    int64_t chars = 0;
    size_t i = 0;
    while (i < n) {
        size_t l = 1;
        if (u[i] >= 0x80 && tokenizer_utf8_next(u + i, n - i, &l) == TOKENIZER_UTF8_CHAR) {
            memcpy(*buf + *len, s + i, l);
            *len += l;
        } else if (u[i] >= 0x80 || u[i] == 0) {
            memcpy(*buf + *len, repl, 3);
            *len += 3;
        } else {
            (*buf)[(*len)++] = s[i];
        }
        i += l;
        chars++;
    }
    (*buf)[*len] = '\0';
    if (n_chars) *n_chars += chars;
}

cJSON *json_float(float f)
{
    if (!isfinite(f)) return cJSON_CreateNull(); /* what cJSON prints for them */
    if (f == 0.0f) return cJSON_CreateRaw("0"); /* -0 too, as cJSON printed it */
    char buf[32];
    for (int prec = 6; prec <= 9; prec++) { /* 9 significant digits always round-trip */
        snprintf(buf, sizeof buf, "%.*g", prec, (double)f);
        if (strtof(buf, NULL) == f) break;
    }
    /* The digits go out as they are. As a number, cJSON would print the double read
     * from them with %1.15g and read that back with sscanf to check it: the same
     * digits (9 or fewer survive a double), at three more conversions per number,
     * which were most of the time a large answer with logprobs holds the loop. From
     * 1e6 on, %g's exponent form is not cJSON's; no logprob is there. */
    if (fabsf(f) >= 1e6f) return cJSON_CreateNumber(strtod(buf, NULL));
    return cJSON_CreateRaw(buf);
}
