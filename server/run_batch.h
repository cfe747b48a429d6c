/*
 * run_batch.h - `h2oserve run-batch -i in.jsonl -o out.jsonl`: an offline batch job.
 *
 * The OpenAI Batch input format, one request a line:
 *   {"custom_id":"r1","method":"POST","url":"/v1/completions","body":{...}}
 * and one output line per input line, in input order (as `vllm run-batch` does):
 *   {"id":"batch_req_...","custom_id":"r1","response":{"status_code":200,
 *    "request_id":"cmpl-...","body":{completion}},"error":null}
 * A bad line (not JSON, missing or duplicate custom_id, another method or url, an
 * invalid body) gets an output line with its error and does not stop the job.
 * Thread: main (it drives the scheduler itself).
 */
#ifndef H2O_RUN_BATCH_H
#define H2O_RUN_BATCH_H

#include "cfg.h"

/*
 * Run the job that c describes: c is parsed and validated (cli/cli_run_batch.c),
 * with c.run_batch.input_file and output_file set. Returns the exit code (0, or 1
 * when the job failed). Owns: c's strings are run_batch's now (freed before it
 * returns). Thread: main.
 */
int run_batch_run(struct cfg c);

#endif
