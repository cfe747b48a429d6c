/*
 * jobstore_impl.h - the job store's one interface with two implementations behind
 * it (issue 22): SQLite under a data dir (jobstore_sqlite*.c, the embedded
 * default) and PostgreSQL (jobstore_pg*.c, many replicas sharing one database).
 *
 * A backend is a table of function pointers plus its own struct, whose first
 * member is struct jobstore (ggml's backend shape). jobstore.c is the only caller
 * of the table: it checks the arguments every backend would check the same way
 * (limits, the completion window, the shape of a result line), then dispatches, so
 * a backend sees only calls that passed those checks. An entry that may be NULL
 * says so; jobstore.c supplies the fallback.
 *
 * Private to the job store's files; the rest of the server sees jobstore.h only.
 */
#ifndef H2O_JOBSTORE_IMPL_H
#define H2O_JOBSTORE_IMPL_H

#include "jobstore.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Lists return at most this many rows (jobstore_file_list, jobstore_batch_list). */
#define JOBSTORE_LIST_MAX 10000

struct jobstore_ops {
    const char *name; /* "sqlite", "postgresql": for messages */
    bool shared;      /* jobstore_shared */

    void (*close)(struct jobstore *js);
    /* May be NULL (nothing reserved): jobstore_release_reserve returns false. */
    bool (*release_reserve)(struct jobstore *js);

    int (*upload_begin)(struct jobstore *js, struct jobstore_upload **out);
    int (*upload_write)(struct jobstore_upload *u, const void *data, size_t len);
    /* filename and purpose are checked (present, not too long) by jobstore.c. */
    int (*upload_commit)(struct jobstore_upload *u, const char *filename,
                         const char *purpose, struct jobstore_file *out);
    void (*upload_abort)(struct jobstore_upload *u);

    int (*file_get)(struct jobstore *js, const char *id, struct jobstore_file *out);
    /* limit is in 1..JOBSTORE_LIST_MAX; *out, *n, *has_more are zeroed already. */
    int (*file_list)(struct jobstore *js, const char *purpose, const char *after, int limit,
                     bool ascending, struct jobstore_file **out, int *n, bool *has_more);
    int (*file_delete)(struct jobstore *js, const char *id);
    /* May be NULL (bodies are not files): jobstore_file_path is ENG_EUNSUPPORTED. */
    int (*file_path)(struct jobstore *js, const char *id, char **path);
    int (*file_read)(struct jobstore *js, const char *id, int64_t offset, void *buf,
                     size_t len, size_t *got);
    int (*file_open)(struct jobstore *js, const char *id, FILE **out, int64_t *bytes);

    /* completion_window is "<hours>h", already parsed into `hours`. */
    int (*batch_create)(struct jobstore *js, const char *input_file_id,
                        const char *endpoint, const char *completion_window, int64_t hours,
                        const char *metadata, int64_t expires_in_s,
                        struct jobstore_batch *out);
    int (*batch_get)(struct jobstore *js, const char *id, struct jobstore_batch *out);
    int (*batch_list)(struct jobstore *js, const char *after, int limit, bool ascending,
                      struct jobstore_batch **out, int *n, bool *has_more);
    int (*unfinished_batches)(struct jobstore *js, struct jobstore_batch **out, int *n);
    /* `to` is a valid status; the state machine is the backend's to check, inside
     * its transaction (jobstore_transition_legal). */
    int (*batch_set_status)(struct jobstore *js, const char *id, enum jobstore_status to,
                            const char *errors);
    /* n >= 0; every request has its custom_id and body. */
    int (*batch_add_requests)(struct jobstore *js, const char *batch_id,
                              const struct jobstore_request *reqs, int n);
    /* max >= 1; *out and *n are zeroed already. */
    int (*batch_pending)(struct jobstore *js, const char *batch_id, int64_t after_line,
                         int max, struct jobstore_request **out, int *n);
    /* n >= 1; every line is one JSON object whose custom_id is its result's, no
     * custom_id twice (jobstore.c checks them); usage[2i], usage[2i+1] are line i's
     * prompt and completion tokens. Whether each is still unanswered is the
     * backend's to check, inside its transaction. */
    int (*batch_append_results)(struct jobstore *js, const char *batch_id,
                                const struct jobstore_result *rs, const int64_t *usage,
                                int n);
    int (*batch_recover)(struct jobstore *js, const char *batch_id);
    /* owner, lease_s and max are checked; now is jobstore_now. */
    int (*batch_claim)(struct jobstore *js, const char *batch_id, const char *owner,
                       int64_t lease_s, int max, struct jobstore_request **out, int *n);
    int (*batch_renew)(struct jobstore *js, const char *batch_id, const char *owner,
                       int64_t lease_s, int64_t *renewed, enum jobstore_status *status);
    int (*batch_release)(struct jobstore *js, const char *batch_id, const char *owner,
                         int64_t *released);
};

/* What every backend's struct starts with. */
struct jobstore {
    const struct jobstore_ops *ops;
    int64_t fixed_time; /* jobstore_set_time; 0 = the real clock */
};

/* What every backend's upload starts with. */
struct jobstore_upload {
    struct jobstore *js;
};

/* OpenAI's status strings, indexed by enum jobstore_status (jobstore.c). */
extern const char *const jobstore_status_names[];

/* The store's clock: Unix seconds, or the time jobstore_set_time fixed. */
int64_t jobstore_now(const struct jobstore *js);

/* Does the Batch state machine (jobstore.h) allow from -> to? Thread: any. */
bool jobstore_transition_legal(enum jobstore_status from, enum jobstore_status to);

/*
 * Read custom_id and the usage (response.body.usage) of one result line of `len`
 * bytes; false when it is not a JSON object with a string custom_id. *custom_id
 * is a heap string the caller frees (NULL on false). Thread: any.
 */
bool jobstore_result_parse(const char *s, size_t len, char **custom_id, int64_t *prompt,
                           int64_t *completion);

/*
 * Is `s` one of our ids: `prefix` + 24 lowercase hex digits? Only such names are
 * ever deleted by a backend's garbage collection. Thread: any.
 */
bool jobstore_is_our_id(const char *s, const char *prefix);

/* The backends' open functions, which jobstore_open picks between. */
int jobstore_sqlite_open(struct jobstore **out, const char *data_dir);
int jobstore_pg_open(struct jobstore **out, const char *uri);

#endif
