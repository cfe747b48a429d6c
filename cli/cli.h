/*
 * cli.h - the h2oserve subcommands, one file each (cli_serve.c, cli_run_batch.c,
 * cli_generate.c, cli_bench_quality.c, cli_tokenize.c), dispatched by cli_main.c.
 * Every subcommand parses its flags through config/'s option table with its scope
 * (cli_parse), so the flags they share are spelled, checked, defaulted and
 * documented in one place.
 *
 * Each entry takes argv with argv[0] the subcommand's name ("generate", "quality")
 * and returns the exit status: 0, 1 when the work failed, 2 on a usage error.
 * Thread: the caller's (main), which becomes the engine thread where there is one.
 */
#ifndef H2O_CLI_H
#define H2O_CLI_H

#include "cfg.h"

#include <stdint.h>

/*
 * Defaults for `scope`, then argv through the table, then validation: returns -1
 * with *c filled for the command to run, or an exit status to return at once: 0
 * after --help (printed on stdout), 2 after a usage error (one line on stderr,
 * after `prefix`: "h2oserve"). `extra` ends the "unexpected argument" message
 * where the command has more to say. Owns: *c is the caller's to cfg_free whatever
 * the result. Thread: any.
 */
int cli_parse(struct cfg *c, unsigned scope, int argc, char **argv, const char *prefix,
              const char *extra);

/* `h2oserve serve [MODEL]`: the OpenAI-compatible HTTP server, until SIGINT or
 * SIGTERM. Owns: its configuration. Thread: main (the loop's; the engine gets its
 * own). */
int cli_serve(int argc, char **argv);

/* `h2oserve run-batch -i IN -o OUT [MODEL]`: an OpenAI Batch file, offline.
 * Owns: its configuration (run_batch_run takes it). Thread: main (the engine's). */
int cli_run_batch(int argc, char **argv);

/* `h2oserve generate --prompt TEXT ...`: completions on stdout. Owns: its
 * configuration and the model. Thread: main (the engine's). */
int cli_generate(int argc, char **argv);

/* `h2oserve bench quality --text FILE`: perplexity under KV policies; argv[0] is
 * "quality". Owns: its configuration and the model. Thread: main (the engine's). */
int cli_bench_quality(int argc, char **argv);

/* `h2oserve tokenize (--text TEXT | --decode IDS)`: ids as JSON, or text. Owns: its
 * configuration and the tokenizer. Thread: main. */
int cli_tokenize(int argc, char **argv);

/* ids[0..n) on stdout as one JSON array and a newline, as Python prints a list
 * ("[2, 404, 1000]"): tokenize's output and generate's --print-ids. Thread: any. */
void cli_print_ids(const int32_t *ids, int32_t n);

#endif
