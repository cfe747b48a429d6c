/*
 * cli_tokenize.c - `h2oserve tokenize`: text -> token ids as a JSON array (with BOS
 * unless --no-bos), or --decode ids -> text, with a model's tokenizer only (no
 * weights are loaded).
 *
 * Its four flags are its own (none is an engine option), so it keeps getopt rather
 * than config/'s table: --text here is a string, not bench quality's file.
 * Owns: the tokenizer, until it returns. Thread: main.
 */
#include "cli.h"

#include "err.h"
#include "model.h"
#include "tokenizer.h"
#include "util.h"

#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int cli_tokenize(int argc, char **argv)
{
    enum { O_MODEL = 256, O_TEXT, O_DECODE, O_NOBOS, O_HELP };
    static const struct option opts[] = {
        {"model", required_argument, 0, O_MODEL},   {"text", required_argument, 0, O_TEXT},
        {"decode", required_argument, 0, O_DECODE}, {"no-bos", no_argument, 0, O_NOBOS},
        {"help", no_argument, 0, O_HELP},           {0, 0, 0, 0},
    };
    const char *model_name = MODEL_DEFAULT, *text = NULL, *decode = NULL;
    bool bos = true;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case O_MODEL: model_name = optarg; break;
        case O_TEXT: text = optarg; break;
        case O_DECODE: decode = optarg; break;
        case O_NOBOS: bos = false; break;
        case O_HELP:
        default:
            fprintf(
                c == O_HELP ? stdout : stderr,
                "usage: h2oserve tokenize [--model DIR|dummy:NAME] (--text TEXT [--no-bos] "
                "| --decode IDS)\n  IDS: a JSON array or a comma/space separated list\n");
            return c == O_HELP ? 0 : 2;
        }
    }
    if (!text == !decode) {
        fprintf(stderr, "h2oserve: tokenize needs exactly one of --text and --decode\n");
        return 2;
    }
    struct tokenizer *tok = NULL;
    int err = model_load_tokenizer(&tok, NULL, model_name);
    if (err) {
        fprintf(stderr, "h2oserve: %s\n", err_msg());
        return 1;
    }
    int rc = 0;
    if (text) {
        int32_t *ids = NULL, n = 0;
        err = tokenizer_encode(tok, text, strlen(text), bos, &ids, &n);
        if (err) {
            fprintf(stderr, "h2oserve: %s\n", err_msg());
            rc = 1;
        } else {
            putchar('[');
            for (int32_t i = 0; i < n; i++)
                printf(i ? ", %d" : "%d", ids[i]);
            printf("]\n");
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
