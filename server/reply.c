/*
 * reply.c - the small response helpers every route handler uses: OpenAI error
 * bodies, JSON bodies, and the mapping from job store errors to HTTP statuses.
 * Thread: loop.
 */
#include "reply.h"

#include "jobstore.h"
#include "json.h"

#include "err.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

void reply_error(struct exch *x, int status, const char *code, const char *fmt,
                 const char *arg)
{
    struct api_error e = {0};
    api_error_set(&e, status, status >= 500 ? API_ERR_SERVER : API_ERR_INVALID, NULL, code, fmt,
                  arg ? arg : "");
    conn_error(x, &e);
}

void reply_json(struct exch *x, cJSON *obj)
{
    size_t len;
    char *body = json_print(obj, &len);
    conn_respond(x, 200, "application/json", body, len, NULL);
    free(body);
    cJSON_Delete(obj);
}

void reply_store_error(struct exch *x, int err)
{
    /* No room is the one disk failure the client can act on (wait, or delete
     * files), so it gets its own status, 507 Insufficient Storage (docs/batch.md
     * says why not 413 or 500), and the cause in words; the paths stay in the log. */
    if (err == JOBSTORE_EFULL) {
        log_error("job store: %s", err_msg());
        reply_error(x, 507, "insufficient_storage",
                    "The server has no space left to store this (no space left on device in "
                    "its data directory); nothing was changed. Try again once space is "
                    "freed%s", "");
        return;
    }
    /* A database that is out of reach (a shared store) comes back by itself: the
     * client is told to try again, as for an overloaded server. */
    if (err == ENG_EUNAVAILABLE) {
        log_error("job store: %s", err_msg());
        reply_error(x, 503, NULL,
                    "The job store's database cannot be reached right now; try again "
                    "shortly%s",
                    "");
        return;
    }
    /* Not-found and invalid come from the user's ids and fields; anything else is
     * the disk or the database, whose message (paths included) is for the
     * operator's log, not for the client. */
    if (err != ENG_ENOTFOUND && err != ENG_EINVAL) {
        log_error("job store: %s", err_msg());
        reply_error(x, 500, NULL, "The job store failed (the server log has the cause)%s", "");
        return;
    }
    reply_error(x, err == ENG_ENOTFOUND ? 404 : 400, err == ENG_ENOTFOUND ? "not_found" : NULL,
                "%s", err_msg());
}

void reply_store_closed(struct exch *x)
{
    reply_error(x, 503, "insufficient_storage",
                "The file and batch store is not open: the server's data directory had no "
                "space left on device when it started. It opens by itself once space is "
                "freed; completions are served meanwhile%s", "");
}

bool reply_method_is(struct exch *x, const char *method)
{
    if (strcmp(x->req->method, method) == 0) return true;
    reply_error(x, 405, NULL, "Method %s not allowed here", x->req->method);
    return false;
}
