/*
 * cli_serve.c - `h2oserve serve [MODEL]`: the OpenAI-compatible HTTP server, its
 * flags and the positional model from config/'s table (scope CFG_SERVE).
 *
 * Owns: the configuration, until srv_run returns. Thread: main.
 */
#include "cli.h"

#include "srv_run.h"

int cli_serve(int argc, char **argv)
{
    struct cfg c;
    int rc = cli_parse(&c, CFG_SERVE, argc, argv, "h2oserve",
                       " (the one positional argument is the model: serve MODEL)");
    if (rc < 0) rc = srv_run(&c);
    cfg_free(&c);
    return rc;
}
