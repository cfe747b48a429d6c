/*
 * cli_tokenize.c - `h2oserve tokenize`: text -> token ids as a JSON array (with BOS
 * unless --no-bos), or --decode ids -> text, with a model's tokenizer only (no
 * weights are loaded).
 *
 * Its flags come from config/'s table like every subcommand's (scope CFG_TOKENIZE:
 * --model, --text, --decode, --[no-]bos); its --text is a row of its own that shares
 * bench quality's flag, as here it is the text itself, there a file.
 * Owns: the tokenizer, until it returns. Thread: main.
 */
#include "cli.h"

#include "err.h"
#include "model.h"
#include "tokenizer.h"
#include "util.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cli_print_ids(const int32_t *ids, int32_t n)
{
    putchar('[');
    for (int32_t i = 0; i < n; i++)
        printf(i ? ", %d" : "%d", ids[i]);
    printf("]\n");
}

/* Parse "[2, 31414, 232]" or "2,31414 232" into ids. Returns count or -1. */
static int parse_ids(const char *s, int32_t **out)
{
    int32_t *ids = NULL;
    int n = 0, cap = 0;
    const char *p = s;
    while (*p) {
        if (strchr("[], \t\n", *p)) {
            p++;
            continue;
        }
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX) {
            free(ids);
            return -1;
        }
        if (n == cap) ids = xrealloc(ids, (size_t)(cap = cap ? 2 * cap : 16) * sizeof *ids);
        ids[n++] = (int32_t)v;
        p = end;
    }
    *out = ids;
    return n;
}

/* The work of `tokenize` once its flags are parsed: the exit status. */
static int tokenize_run(const struct cfg *c)
{
    const char *text = c->tokenize.text, *decode = c->tokenize.decode;
    if (!text == !decode) {
        fprintf(stderr, "h2oserve: tokenize needs exactly one of --text and --decode\n");
        return 2;
    }
    struct tokenizer *tok = NULL;
    int err = model_load_tokenizer(&tok, NULL, c->model);
    if (err) {
        fprintf(stderr, "h2oserve: %s\n", err_msg());
        return 1;
    }
    int rc = 0;
    if (!tokenizer_has_text(tok)) {
        fprintf(stderr,
                "h2oserve: %s has no tokenizer (no tokenizer.json or vocab.json + "
                "merges.txt): nothing to encode or decode with\n",
                c->model);
        tokenizer_destroy(tok);
        return 1;
    }
    if (text) {
        int32_t *ids = NULL, n = 0;
        err = tokenizer_encode(tok, text, strlen(text), c->tokenize.bos, &ids, &n);
        if (err) {
            fprintf(stderr, "h2oserve: %s\n", err_msg());
            rc = 1;
        } else {
            cli_print_ids(ids, n);
        }
        free(ids);
    } else {
        int32_t *ids = NULL;
        int n = parse_ids(decode, &ids);
        char *out = NULL;
        size_t len = 0;
        if (n < 0) {
            fprintf(stderr, "h2oserve: --decode wants token ids, got '%s'\n", decode);
            rc = 2;
        } else if ((err = tokenizer_decode(tok, ids, n, true, &out, &len))) {
            fprintf(stderr, "h2oserve: %s\n", err_msg());
            rc = 1;
        } else {
            fwrite(out, 1, len, stdout);
            putchar('\n');
        }
        free(ids);
        free(out);
    }
    tokenizer_destroy(tok);
    return rc;
}

int cli_tokenize(int argc, char **argv)
{
    struct cfg c;
    int rc = cli_parse(&c, CFG_TOKENIZE, argc, argv, "h2oserve", NULL);
    if (rc < 0) rc = tokenize_run(&c);
    cfg_free(&c);
    return rc;
}
