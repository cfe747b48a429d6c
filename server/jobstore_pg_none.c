/*
 * jobstore_pg_none.c - the PostgreSQL job store's stand-in in a build without
 * libpq (meson -Dpostgresql=disabled, or auto where libpq-dev is missing): a
 * postgresql:// location is refused with the reason, so a server asked for it
 * stops at start rather than storing anywhere else.
 * Thread: any.
 */
#include "jobstore_impl.h"

#include "err.h"

int jobstore_pg_open(struct jobstore **out, const char *uri)
{
    (void)uri;
    *out = NULL;
    return err_set(ENG_EUNSUPPORTED, "this h2oserve was built without the PostgreSQL job "
                                     "store (-Dpostgresql=disabled, or no libpq-dev)");
}
