/*
 * cli_parse.c - the one way a subcommand reads its command line (see cli.h): the
 * defaults of its scope, cfg_parse_cmd, a stray argument refused, cfg_validate_cmd,
 * and --help or the error printed the same way for every subcommand.
 *
 * Owns: nothing. Thread: any.
 */
#include "cli.h"

#include "err.h"

#include <stdio.h>

int cli_parse(struct cfg *c, unsigned scope, int argc, char **argv, const char *prefix,
              const char *extra)
{
    cfg_defaults_cmd(c, scope);
    int next = argc;
    int err = cfg_parse_cmd(c, scope, argc, argv, &next);
    if (err == CFG_HELP) {
        /* argv[0] is "quality" for bench quality: the table's name says it whole. */
        cfg_usage(stdout, scope == CFG_BENCH_QUALITY ? "bench quality" : argv[0]);
        return 0;
    }
    if (!err && next < argc)
        err = err_set(ENG_EINVAL, "unexpected argument '%s'%s", argv[next],
                      extra ? extra : "");
    if (!err) err = cfg_validate_cmd(c, scope);
    if (err) {
        fprintf(stderr, "%s: %s\n", prefix, err_msg());
        return 2;
    }
    return -1;
}
