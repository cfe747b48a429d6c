/*
 * jobstore.c - the job store's front: the checks every backend would make the same
 * way, then a dispatch through the backend's table (jobstore_impl.h), and the small
 * things that need no backend (ids, statuses, the state machine, freeing).
 *
 * Why checks live here: a bad argument must be refused identically by SQLite and
 * PostgreSQL (the API tests run against both), and a check written once cannot
 * drift between them.
 * Thread: the store's owner only (jobstore.h); the functions that say "any" are pure.
 */
#include "jobstore_impl.h"

#include "err.h"
#include "util.h"

#include <cjson/cJSON.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

const char *const jobstore_status_names[] = {
    [JOBSTORE_VALIDATING] = "validating",   [JOBSTORE_FAILED] = "failed",
    [JOBSTORE_IN_PROGRESS] = "in_progress", [JOBSTORE_FINALIZING] = "finalizing",
    [JOBSTORE_COMPLETED] = "completed",     [JOBSTORE_EXPIRED] = "expired",
    [JOBSTORE_CANCELLING] = "cancelling",   [JOBSTORE_CANCELLED] = "cancelled",
};
#define N_STATUS ((int)JOBSTORE_CANCELLED + 1)

/* ---- small things ---- */

const char *jobstore_status_name(enum jobstore_status s)
{
    CHECK((unsigned)s < N_STATUS);
    return jobstore_status_names[s];
}

int jobstore_status_parse(const char *s, enum jobstore_status *out)
{
    for (int i = 0; i < N_STATUS; i++)
        if (s && strcmp(s, jobstore_status_names[i]) == 0) {
            *out = (enum jobstore_status)i;
            return 0;
        }
    return err_set(ENG_EINVAL, "unknown batch status '%s'", s ? s : "(null)");
}

int jobstore_new_id(const char *prefix, char *buf, size_t size)
{
    size_t p = strlen(prefix);
    if (size < p + 25) return err_set(ENG_EINVAL, "id buffer too small");
    unsigned char rnd[12];
    size_t got = 0;
    while (got < sizeof rnd) {
        ssize_t r = getrandom(rnd + got, sizeof rnd - got, 0);
        CHECK(r > 0 || errno == EINTR); /* getrandom cannot fail once the pool is up */
        if (r > 0) got += (size_t)r;
    }
    memcpy(buf, prefix, p);
    for (size_t i = 0; i < sizeof rnd; i++)
        snprintf(buf + p + 2 * i, 3, "%02x", rnd[i]);
    return 0;
}

bool jobstore_is_our_id(const char *s, const char *prefix)
{
    size_t p = strlen(prefix);
    if (strncmp(s, prefix, p) != 0 || strlen(s) != p + 24) return false;
    for (const char *c = s + p; *c; c++)
        if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f'))) return false;
    return true;
}

int64_t jobstore_now(const struct jobstore *js)
{
    return js->fixed_time ? js->fixed_time : (int64_t)time(NULL);
}

void jobstore_set_time(struct jobstore *js, int64_t t)
{
    js->fixed_time = t;
}

bool jobstore_transition_legal(enum jobstore_status from, enum jobstore_status to)
{
    switch (from) {
    case JOBSTORE_VALIDATING:
        return to == JOBSTORE_FAILED || to == JOBSTORE_IN_PROGRESS ||
               to == JOBSTORE_CANCELLING;
    /* in_progress or cancelling -> failed: its results could not be written (no
     * room); what was written is published like any end state's. */
    case JOBSTORE_IN_PROGRESS:
        return to == JOBSTORE_FINALIZING || to == JOBSTORE_CANCELLING ||
               to == JOBSTORE_EXPIRED || to == JOBSTORE_FAILED;
    case JOBSTORE_FINALIZING: return to == JOBSTORE_COMPLETED;
    case JOBSTORE_CANCELLING: return to == JOBSTORE_CANCELLED || to == JOBSTORE_FAILED;
    default: return false; /* failed, completed, expired, cancelled are final */
    }
}

bool jobstore_result_parse(const char *s, size_t len, char **custom_id, int64_t *prompt,
                           int64_t *completion)
{
    cJSON *root = cJSON_ParseWithLength(s, len);
    const cJSON *cid = cJSON_GetObjectItemCaseSensitive(root, "custom_id");
    bool ok = cJSON_IsObject(root) && cJSON_IsString(cid);
    *custom_id = ok ? xstrdup(cid->valuestring) : NULL;
    *prompt = *completion = 0;
    const cJSON *resp = cJSON_GetObjectItemCaseSensitive(root, "response");
    const cJSON *body = cJSON_GetObjectItemCaseSensitive(resp, "body");
    const cJSON *usage = cJSON_GetObjectItemCaseSensitive(body, "usage");
    const cJSON *pt = cJSON_GetObjectItemCaseSensitive(usage, "prompt_tokens");
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(usage, "completion_tokens");
    if (cJSON_IsNumber(pt)) *prompt = (int64_t)pt->valuedouble;
    if (cJSON_IsNumber(ct)) *completion = (int64_t)ct->valuedouble;
    cJSON_Delete(root);
    return ok;
}

/* ---- open and close ---- */

/* A PostgreSQL connection URI, as libpq spells them. */
static bool is_pg_uri(const char *where)
{
    return strncmp(where, "postgresql://", 13) == 0 ||
           strncmp(where, "postgres://", 11) == 0;
}

int jobstore_open(struct jobstore **out, const char *where)
{
    *out = NULL;
    if (!where || !where[0]) return err_set(ENG_EINVAL, "job store: no location given");
    return is_pg_uri(where) ? jobstore_pg_open(out, where)
                            : jobstore_sqlite_open(out, where);
}

const char *jobstore_backend(const struct jobstore *js)
{
    return js->ops->name;
}

bool jobstore_shared(const struct jobstore *js)
{
    return js->ops->shared;
}

bool jobstore_release_reserve(struct jobstore *js)
{
    return js->ops->release_reserve ? js->ops->release_reserve(js) : false;
}

void jobstore_close(struct jobstore *js)
{
    if (js) js->ops->close(js);
}

/* ---- files ---- */

int jobstore_upload_begin(struct jobstore *js, struct jobstore_upload **out)
{
    *out = NULL;
    return js->ops->upload_begin(js, out);
}

int jobstore_upload_write(struct jobstore_upload *u, const void *data, size_t len)
{
    return u->js->ops->upload_write(u, data, len);
}

int jobstore_upload_commit(struct jobstore_upload *u, const char *filename,
                           const char *purpose, struct jobstore_file *out)
{
    if (!filename || !purpose || strlen(filename) > 4096 || strlen(purpose) >= 32) {
        int err = err_set(ENG_EINVAL, "file name or purpose missing or too long");
        jobstore_upload_abort(u);
        return err;
    }
    return u->js->ops->upload_commit(u, filename, purpose, out);
}

void jobstore_upload_abort(struct jobstore_upload *u)
{
    if (u) u->js->ops->upload_abort(u);
}

int jobstore_file_create(struct jobstore *js, const char *filename, const char *purpose,
                         const void *data, size_t len, struct jobstore_file *out)
{
    struct jobstore_upload *u;
    int err = jobstore_upload_begin(js, &u);
    if (err) return err;
    err = jobstore_upload_write(u, data, len);
    if (err) {
        jobstore_upload_abort(u);
        return err;
    }
    return jobstore_upload_commit(u, filename, purpose, out);
}

int jobstore_file_get(struct jobstore *js, const char *id, struct jobstore_file *out)
{
    if (!id) return err_set(ENG_ENOTFOUND, "no such file: (null)");
    return js->ops->file_get(js, id, out);
}

int jobstore_file_list(struct jobstore *js, const char *purpose, const char *after,
                       int limit, bool ascending, struct jobstore_file **out, int *n,
                       bool *has_more)
{
    *out = NULL;
    *n = 0;
    *has_more = false;
    if (limit < 1 || limit > JOBSTORE_LIST_MAX)
        return err_set(ENG_EINVAL, "limit out of range");
    return js->ops->file_list(js, purpose, after, limit, ascending, out, n, has_more);
}

int jobstore_file_delete(struct jobstore *js, const char *id)
{
    if (!id) return err_set(ENG_ENOTFOUND, "no such file: (null)");
    return js->ops->file_delete(js, id);
}

int jobstore_file_path(struct jobstore *js, const char *id, char **path)
{
    *path = NULL;
    if (!js->ops->file_path)
        return err_set(ENG_EUNSUPPORTED,
                       "the %s job store keeps file bodies in the database", js->ops->name);
    return js->ops->file_path(js, id, path);
}

int jobstore_file_read(struct jobstore *js, const char *id, int64_t offset, void *buf,
                       size_t len, size_t *got)
{
    *got = 0;
    if (offset < 0) return err_set(ENG_EINVAL, "negative file offset");
    if (!len) return 0;
    return js->ops->file_read(js, id, offset, buf, len, got);
}

int jobstore_file_open(struct jobstore *js, const char *id, FILE **out, int64_t *bytes)
{
    *out = NULL;
    *bytes = 0;
    if (!id) return err_set(ENG_ENOTFOUND, "no such file: (null)");
    return js->ops->file_open(js, id, out, bytes);
}

void jobstore_file_deinit(struct jobstore_file *f)
{
    if (!f) return;
    free(f->filename);
    f->filename = NULL;
}

void jobstore_files_free(struct jobstore_file *fs, int n)
{
    for (int i = 0; i < n; i++)
        jobstore_file_deinit(&fs[i]);
    free(fs);
}

/* ---- batches ---- */

int jobstore_batch_create(struct jobstore *js, const char *input_file_id,
                          const char *endpoint, const char *completion_window,
                          const char *metadata, int64_t expires_in_s,
                          struct jobstore_batch *out)
{
    if (!input_file_id || !endpoint || !completion_window)
        return err_set(ENG_EINVAL, "batch: input_file_id, endpoint and "
                                   "completion_window are required");
    char *end;
    errno = 0;
    long hours = strtol(completion_window, &end, 10);
    if (completion_window[0] < '0' || completion_window[0] > '9' || strcmp(end, "h") != 0 ||
        errno || hours < 1 || hours > 24 * 365 || strlen(completion_window) >= 16)
        return err_set(ENG_EINVAL, "completion_window '%s' is not '<hours>h'",
                       completion_window);
    return js->ops->batch_create(js, input_file_id, endpoint, completion_window, hours,
                                 metadata, expires_in_s, out);
}

int jobstore_batch_get(struct jobstore *js, const char *id, struct jobstore_batch *out)
{
    if (!id) return err_set(ENG_ENOTFOUND, "no such batch: (null)");
    return js->ops->batch_get(js, id, out);
}

int jobstore_batch_list(struct jobstore *js, const char *after, int limit, bool ascending,
                        struct jobstore_batch **out, int *n, bool *has_more)
{
    *out = NULL;
    *n = 0;
    *has_more = false;
    if (limit < 1 || limit > JOBSTORE_LIST_MAX)
        return err_set(ENG_EINVAL, "limit out of range");
    return js->ops->batch_list(js, after, limit, ascending, out, n, has_more);
}

int jobstore_unfinished_batches(struct jobstore *js, struct jobstore_batch **out, int *n)
{
    *out = NULL;
    *n = 0;
    return js->ops->unfinished_batches(js, out, n);
}

int jobstore_batch_set_status(struct jobstore *js, const char *id, enum jobstore_status to,
                              const char *errors)
{
    if ((unsigned)to >= N_STATUS) return err_set(ENG_EINVAL, "unknown batch status %d", to);
    if (!id) return err_set(ENG_ENOTFOUND, "no such batch: (null)");
    return js->ops->batch_set_status(js, id, to, errors);
}

int jobstore_batch_add_requests(struct jobstore *js, const char *batch_id,
                                const struct jobstore_request *reqs, int n)
{
    if (n < 0) return err_set(ENG_EINVAL, "negative request count");
    for (int i = 0; i < n; i++)
        if (!reqs[i].custom_id || !reqs[i].body)
            return err_set(ENG_EINVAL, "line %lld: custom_id and body are required",
                           (long long)reqs[i].line);
    return js->ops->batch_add_requests(js, batch_id, reqs, n);
}

int jobstore_batch_pending(struct jobstore *js, const char *batch_id, int64_t after_line,
                           int max, struct jobstore_request **out, int *n)
{
    *out = NULL;
    *n = 0;
    if (max < 1) return err_set(ENG_EINVAL, "max must be positive");
    return js->ops->batch_pending(js, batch_id, after_line, max, out, n);
}

/* The checks of one result that need no database: a single line whose custom_id is
 * the result's, not twice in this call. Fills line i's usage. */
static int check_result(const struct jobstore_result *rs, int i, int64_t *usage)
{
    const struct jobstore_result *r = &rs[i];
    if (!r->custom_id || !r->line || strchr(r->line, '\n'))
        return err_set(ENG_EINVAL, "result line missing or not a single line");
    char *line_cid;
    if (!jobstore_result_parse(r->line, strlen(r->line), &line_cid, &usage[2 * i],
                               &usage[2 * i + 1]))
        return err_set(ENG_EINVAL, "result line is not a JSON object with a custom_id");
    bool same = strcmp(line_cid, r->custom_id) == 0;
    free(line_cid);
    if (!same)
        return err_set(ENG_EINVAL, "result line's custom_id is not '%s'", r->custom_id);
    for (int k = 0; k < i; k++)
        if (strcmp(rs[k].custom_id, r->custom_id) == 0)
            return err_set(ENG_EINVAL, "custom_id '%s' is twice in one append",
                           r->custom_id);
    return 0;
}

int jobstore_batch_append_results(struct jobstore *js, const char *batch_id,
                                  const struct jobstore_result *rs, int n)
{
    if (n <= 0) return n == 0 ? 0 : err_set(ENG_EINVAL, "negative result count");
    int64_t *usage = xcalloc((size_t)n * 2, sizeof *usage);
    int err = 0;
    for (int i = 0; i < n && !err; i++)
        err = check_result(rs, i, usage);
    if (!err) err = js->ops->batch_append_results(js, batch_id, rs, usage, n);
    free(usage);
    return err;
}

int jobstore_batch_append_result(struct jobstore *js, const char *batch_id,
                                 const char *custom_id, bool ok, const char *json_line)
{
    const struct jobstore_result r = {.custom_id = custom_id, .ok = ok, .line = json_line};
    return jobstore_batch_append_results(js, batch_id, &r, 1);
}

int jobstore_batch_recover(struct jobstore *js, const char *batch_id)
{
    return js->ops->batch_recover(js, batch_id);
}

/* ---- claims ---- */

static int check_lease(const char *owner, int64_t lease_s)
{
    if (!owner || !owner[0] || strlen(owner) > JOBSTORE_OWNER_MAX)
        return err_set(ENG_EINVAL, "claim: the owner must be 1..%d characters",
                       JOBSTORE_OWNER_MAX);
    if (lease_s < 1 || lease_s > JOBSTORE_LEASE_MAX_S)
        return err_set(ENG_EINVAL, "claim: lease %lld s is outside 1..%d",
                       (long long)lease_s, JOBSTORE_LEASE_MAX_S);
    return 0;
}

int jobstore_batch_claim(struct jobstore *js, const char *batch_id, const char *owner,
                         int64_t lease_s, int max, struct jobstore_request **out, int *n)
{
    *out = NULL;
    *n = 0;
    int err = check_lease(owner, lease_s);
    if (err) return err;
    if (max < 1) return err_set(ENG_EINVAL, "claim: max must be positive");
    if (!batch_id) return err_set(ENG_ENOTFOUND, "no such batch: (null)");
    return js->ops->batch_claim(js, batch_id, owner, lease_s, max, out, n);
}

int jobstore_batch_renew(struct jobstore *js, const char *batch_id, const char *owner,
                         int64_t lease_s, int64_t *renewed, enum jobstore_status *status)
{
    *renewed = 0;
    int err = check_lease(owner, lease_s);
    if (err) return err;
    if (!batch_id) return err_set(ENG_ENOTFOUND, "no such batch: (null)");
    return js->ops->batch_renew(js, batch_id, owner, lease_s, renewed, status);
}

int jobstore_batch_release(struct jobstore *js, const char *batch_id, const char *owner,
                           int64_t *released)
{
    int64_t dummy;
    if (!released) released = &dummy;
    *released = 0;
    int err = check_lease(owner, 1);
    if (err) return err;
    if (!batch_id) return err_set(ENG_ENOTFOUND, "no such batch: (null)");
    return js->ops->batch_release(js, batch_id, owner, released);
}

void jobstore_requests_free(struct jobstore_request *reqs, int n)
{
    for (int i = 0; i < n; i++) {
        free(reqs[i].custom_id);
        free(reqs[i].body);
    }
    free(reqs);
}

void jobstore_batch_deinit(struct jobstore_batch *b)
{
    if (!b) return;
    free(b->endpoint);
    free(b->metadata);
    free(b->errors);
    b->endpoint = b->metadata = b->errors = NULL;
}

void jobstore_batches_free(struct jobstore_batch *bs, int n)
{
    for (int i = 0; i < n; i++)
        jobstore_batch_deinit(&bs[i]);
    free(bs);
}
