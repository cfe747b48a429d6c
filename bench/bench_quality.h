/*
 * bench_quality.h - `h2oserve bench quality`: streaming perplexity of a model on a
 * text under KV policies (bench/quality.h), as a table and JSON lines, with an
 * optional budget sweep and chart. docs/quality.md has the method and the numbers.
 */
#ifndef H2O_BENCH_QUALITY_CLI_H
#define H2O_BENCH_QUALITY_CLI_H

/* Run the command; argv[0] is "quality". Returns the exit status (0, 1 on a failed
 * run, 2 on bad arguments). Thread: the caller's, which becomes the engine thread. */
int bench_quality_main(int argc, char **argv);

#endif
