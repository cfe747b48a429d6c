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

/* The subcommand; argv[0] is "run-batch". Returns the exit code. Thread: main. */
int run_batch_main(int argc, char **argv);

#endif
