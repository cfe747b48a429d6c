/*
 * cli_run_batch.c - `h2oserve run-batch -i IN.jsonl -o OUT.jsonl [MODEL]`: the job
 * and its flags are server/run_batch.c's.
 *
 * Owns: nothing. Thread: main.
 */
#include "cli.h"

#include "run_batch.h"

int cli_run_batch(int argc, char **argv)
{
    return run_batch_main(argc, argv);
}
