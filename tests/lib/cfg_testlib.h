/*
 * cfg_testlib.h - what the configuration tests share: a temporary folder for files,
 * cfg_parse_args (serve's) or cfg_parse_cmd (any subcommand's) on a list, the last
 * error's text, and raw field access through the option table (independent of
 * config/'s own accessors). Each test's main makes tmp_dir with mkdtemp.
 */
#ifndef H2O_TEST_CFG_TESTLIB_H
#define H2O_TEST_CFG_TESTLIB_H

#include "cfg.h"
#include "err.h"
#include "test.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Made by each test's main (mkdtemp), removed at its end. */
extern char tmp_dir[];

/* Write `text` (len bytes, or strlen) to tmp_dir/name; returns the path (static). */
const char *write_file(const char *name, const char *text, size_t len);

/* cfg_parse_args on a NULL-terminated list; argv[0] is "serve". */
int parse(struct cfg *c, int *next, const char *const *args);
#define PARSE(c, ...) parse((c), NULL, (const char *const[]){__VA_ARGS__, NULL})

/* cfg_parse_cmd of subcommand `scope` on a NULL-terminated list. */
int parse_cmd(struct cfg *c, unsigned scope, int *next, const char *const *args);
#define PARSE_CMD(c, scope, ...)                                                           \
    parse_cmd((c), (scope), NULL, (const char *const[]){__VA_ARGS__, NULL})

/* Every subcommand that parses through the table, by scope bit, and its name. */
#define N_SCOPES 5
extern const unsigned all_scopes[N_SCOPES];
extern const char *const scope_names[N_SCOPES];

/* Whether the last error message contains `needle`. */
int msg_has(const char *needle);

/* A field's raw value through the table (independent of cfg.c's accessors). */
int64_t field_int(const struct cfg *c, const struct cfg_opt *o);

double field_float(const struct cfg *c, const struct cfg_opt *o);

const char *field_str(const struct cfg *c, const struct cfg_opt *o);

/* The option's flag: "--" + o->flag where the row names it, else the key with '-'
 * for '_'. Returns buf. */
char *flag_of(const struct cfg_opt *o, char *buf, size_t len);

/* The row of `scope` other than o whose flag is `flag`, or NULL. */
const struct cfg_opt *flag_twin(const struct cfg_opt *o, const char *flag, unsigned scope);

/* A value of o that differs from its default, as flag text and as JSON. */
void other_value(const struct cfg *d, const struct cfg_opt *o, char *text, char *json,
                 size_t len);

/* o in c holds the value `text` stands for, and every other option its default. */
void expect_only_changed(const struct cfg *c, const struct cfg *d, const struct cfg_opt *o,
                         const char *text, const char *how);

#endif
