/*
 * cli_run_batch.c - `h2oserve run-batch -i IN.jsonl -o OUT.jsonl [MODEL]`: every
 * serve option (the same table rows and config files, scope CFG_RUN_BATCH) and the
 * two files; the job itself is server/run_batch.c.
 *
 * Owns: the configuration until run_batch_run takes it. Thread: main.
 */
#include "cli.h"

#include "err.h"
#include "run_batch.h"

#include <stdio.h>

int cli_run_batch(int argc, char **argv)
{
    struct cfg c;
    int rc = cli_parse(&c, CFG_RUN_BATCH, argc, argv, "h2oserve",
                       " (the one positional argument is the model)");
    if (rc >= 0) {
        cfg_free(&c);
        return rc;
    }
    if (!c.run_batch.input_file || !c.run_batch.output_file) {
        fprintf(stderr, "h2oserve: run-batch needs -i IN.jsonl and -o OUT.jsonl\n");
        cfg_free(&c);
        return 2;
    }
    return run_batch_run(c); /* frees c */
}
