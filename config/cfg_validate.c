/*
 * cfg_validate.c - whether a struct cfg makes sense for a subcommand: every option
 * of its scope within its row's range (values put into the struct directly are
 * caught here too), and the rules that join options, each a one-line message that
 * names them (see cfg.h).
 *
 * Owns: nothing. Thread: any (no mutable state).
 */
#include "cfg.h"
#include "cfg_impl.h"

#include "err.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cfg_fractions(const char *s, float *out, int max)
{
    int n = 0;
    while (*s) {
        char *end;
        const double v = strtod(s, &end);
        if (end == s || !(v > 0.0 && v <= 1.0) || n == max || (*end && *end != ','))
            return -1;
        out[n++] = (float)v;
        s = *end ? end + 1 : end;
        if (*end && !*s) return -1; /* a trailing comma */
    }
    return n > 0 ? n : -1;
}

int cfg_validate(const struct cfg *c)
{
    return cfg_validate_cmd(c, CFG_SERVE);
}

int cfg_validate_cmd(const struct cfg *c, unsigned scope)
{
    size_t n_opts;
    const struct cfg_opt *t = cfg_opts(&n_opts);
    for (size_t i = 0; i < n_opts; i++) {
        const struct cfg_opt *o = &t[i];
        if (!(o->scopes & scope)) continue;
        const char *s;
        int64_t v;
        double f;
        switch (o->type) {
        case CFG_T_STR:
            s = cfg_str_get(c, o);
            if (o->flags & CFG_F_RAW) break; /* unset, "" or any text: all values */
            if (!s && (o->flags & CFG_F_NULLABLE)) break;
            if (!s || !s[0]) return err_set(ENG_EINVAL, "%s must not be empty", o->key);
            for (const char *p = s; *p; p++)
                if ((unsigned char)*p < 0x20 || *p == 0x7f)
                    return err_set(ENG_EINVAL, "%s must not contain control characters",
                                   o->key);
            break;
        case CFG_T_INT:
        case CFG_T_SIZE:
            v = cfg_int_get(c, o);
            if ((double)v < o->min || (double)v > o->max) {
                char got[32];
                snprintf(got, sizeof got, "%lld", (long long)v);
                return cfg_range_error(o, o->key, got);
            }
            break;
        case CFG_T_FLOAT:
            f = cfg_float_get(c, o);
            if (!(f >= o->min && f <= o->max)) {
                char got[32];
                snprintf(got, sizeof got, "%g", f);
                return cfg_range_error(o, o->key, got);
            }
            break;
        case CFG_T_ENUM:
            v = cfg_int_get(c, o);
            int n = 0;
            while (o->values[n])
                n++;
            if (v < 0 || v >= n)
                return err_set(ENG_EINVAL, "%s: bad value %lld", o->key, (long long)v);
            break;
        case CFG_T_BOOL:
        case CFG_T_LIST: break;
        }
    }
    const bool sched = scope & (CFG_SERVE | CFG_RUN_BATCH | CFG_GENERATE);
    /* generate's 0 is "as many as there are prompts"; a server has no such count. */
    if ((scope & (CFG_SERVE | CFG_RUN_BATCH)) && c->max_num_seqs < 1)
        return err_set(ENG_EINVAL, "max_num_seqs must be at least 1 (0, every prompt at "
                                   "once, is generate's)");
    /* The scheduler needs room for every running sequence's decode token plus at
     * least one prompt token in each step, or a waiting prompt could starve. */
    if (sched && c->max_batched_tokens <= MAX(c->max_num_seqs, 1))
        return err_set(ENG_EINVAL, "max_batched_tokens (%d) must exceed max_num_seqs (%d)",
                       c->max_batched_tokens, c->max_num_seqs);
    if (c->h2o_recent == 0)
        return err_set(ENG_EINVAL, "h2o_recent (--h2o-recent) must be -1 (use the ratio) "
                                   "or >= 1: the recent window includes the current token");
    if ((scope & (CFG_SERVE | CFG_RUN_BATCH)) && c->kv_cache_bytes > 0 &&
        c->kv_cache_blocks > 0)
        return err_set(ENG_EINVAL, "kv_cache_bytes and kv_cache_blocks both size the KV "
                                   "pool; set one of them (the other 0)");
    /* Anything else would be taken for a data dir by jobstore_open. */
    if ((scope & CFG_SERVE) && c->job_store &&
        strncmp(c->job_store, "postgresql://", 13) != 0 &&
        strncmp(c->job_store, "postgres://", 11) != 0)
        return err_set(ENG_EINVAL, "job_store must be a postgresql:// URI (data_dir is "
                                   "SQLite's)");
    if (scope & CFG_BENCH_QUALITY) {
        const struct cfg_bench_quality *q = &c->bench_quality;
        float f[CFG_SWEEP_MAX];
        if (q->sweep && cfg_fractions(q->sweep, f, CFG_SWEEP_MAX) < 0)
            return err_set(ENG_EINVAL,
                           "--sweep wants up to %d fractions in (0, 1] "
                           "separated by commas, got '%.64s'",
                           CFG_SWEEP_MAX, q->sweep);
        if (q->plot && !q->sweep) return err_set(ENG_EINVAL, "--plot draws a --sweep");
    }
    return 0;
}
