/*
 * cfg_impl.h - what the files of config/ share: cfg_table.c (the table and the
 * subcommands), cfg_value.c (values in and out), cfg_validate.c, cfg_io.c (files,
 * argv, JSON output) and cfg_usage.c (--help). Not for other modules: they use
 * cfg.h.
 * Thread: any.
 */
#ifndef H2O_CFG_IMPL_H
#define H2O_CFG_IMPL_H

#include "cfg.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A value on its way into a field: s for strings (NULL = unset), f for every number
 * (integers too, so that range checks see huge inputs before any cast), i for bools
 * and enum indexes. */
struct cfg_val {
    const char *s;
    double f;
    int64_t i;
};

/* A subcommand that parses through the table: its scope bit, its name as typed
 * after "h2oserve", the arguments it requires (for the usage line, or NULL), and
 * whether it takes the positional model and --config files. */
struct cfg_cmd {
    unsigned scope;
    const char *name;
    const char *required;
    bool positional, config;
};

/* The subcommand of one scope bit, or NULL. */
const struct cfg_cmd *cfg_cmd_of(unsigned scope);

/* Every scope, for cfg_find_n. */
#define CFG_ANY_SCOPE (~0u)

/* The first option of `scopes` (a mask; CFG_ANY_SCOPE) whose key (flag = false) or
 * flag name without "--" (flag = true; cfg_opt.flag where set) is the len bytes at
 * name, or NULL. */
const struct cfg_opt *cfg_find_n(const char *name, size_t len, bool flag, unsigned scopes);

/* Check v against o's type and range and store it (strings copied). Returns 0 or
 * ENG_EINVAL with a message that starts with `who` ("--port", "f.json: key 'port'");
 * on error *c is unchanged. */
int cfg_opt_set(struct cfg *c, const struct cfg_opt *o, const struct cfg_val *v,
                const char *who);

/* As cfg_opt_set, from command-line text ("512M", "true", "h2o"). */
int cfg_opt_set_text(struct cfg *c, const struct cfg_opt *o, const char *s,
                     const char *who);

/* "WHO wants an integer in [LO, HI], got GOT" (a size, a number) as ENG_EINVAL. */
int cfg_range_error(const struct cfg_opt *o, const char *who, const char *got);

/* Enum name -> index, or ENG_EINVAL naming `who` and the allowed names. */
int cfg_enum_parse(const struct cfg_opt *o, const char *s, const char *who, int64_t *out);

/* Field access through the table. */
char **cfg_str_field(struct cfg *c, const struct cfg_opt *o);
const char *cfg_str_get(const struct cfg *c, const struct cfg_opt *o);
int64_t cfg_int_get(const struct cfg *c,
                    const struct cfg_opt *o); /* int, size, bool, enum */
double cfg_float_get(const struct cfg *c, const struct cfg_opt *o);
const struct cfg_list *cfg_list_get(const struct cfg *c, const struct cfg_opt *o);

/* A deep copy (strings duplicated): dst is overwritten, not freed. */
void cfg_copy(struct cfg *dst, const struct cfg *src);

/* Bytes as the shortest exact "32M", "16K", "2G", "1T" or "12345". */
void cfg_format_size(int64_t v, char *buf, size_t len);

/* The option of the positional argument (CFG_F_POSITIONAL), or NULL. */
const struct cfg_opt *cfg_positional_opt(void);

/* "--max-num-seqs" for key "max_num_seqs". */
void cfg_flag_of_key(const char *key, char *buf, size_t len);

/* The flag of option o: "--" + o->flag where set, else cfg_flag_of_key's. */
void cfg_flag_of(const struct cfg_opt *o, char *buf, size_t len);

#endif
