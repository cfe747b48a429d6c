/*
 * cli_main.c - the h2oserve command line: `h2oserve COMMAND ...` dispatched to one
 * file per subcommand (cli.h): serve, run-batch, generate, bench quality and
 * tokenize; `--version` prints meson's project version (H2O_VERSION, as GET
 * /version does).
 *
 * Owns: the process; all configuration is parsed by the subcommands and passed
 * down. Thread: main.
 */
#include "cli.h"

#include <stdio.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f, "usage: h2oserve COMMAND [options]\n"
               "commands:\n"
               "  serve      the OpenAI-compatible HTTP server\n"
               "  run-batch  an OpenAI Batch JSONL file in, its results out (-i, -o)\n"
               "  generate   complete prompts and print the text\n"
               "  tokenize   text -> token ids, or --decode ids -> text\n"
               "  bench quality  perplexity of a text under KV policies (docs/quality.md)\n"
               "Run 'h2oserve COMMAND --help' for its options, and 'h2oserve --version'\n"
               "for the version.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "serve") == 0) return cli_serve(argc - 1, argv + 1);
    if (strcmp(cmd, "run-batch") == 0) return cli_run_batch(argc - 1, argv + 1);
    if (strcmp(cmd, "generate") == 0) return cli_generate(argc - 1, argv + 1);
    if (strcmp(cmd, "tokenize") == 0) return cli_tokenize(argc - 1, argv + 1);
    if (strcmp(cmd, "bench") == 0) {
        if (argc >= 3 && strcmp(argv[2], "quality") == 0)
            return cli_bench_quality(argc - 2, argv + 2);
        fprintf(stderr, "h2oserve bench: the benchmark is 'quality' (throughput is "
                        "build/bench/bench_throughput; docs/benchmarks.md)\n");
        return 2;
    }
    if (strcmp(cmd, "--version") == 0) {
        /* meson's project version (meson.build); GET /version says the same. */
        printf("h2oserve %s\n", H2O_VERSION);
        return 0;
    }
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "h2oserve: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}
