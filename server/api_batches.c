/* api_batches.c - placeholder while being written. */
#include "srv.h"

void batches_route(struct exch *x, const char *rest)
{
    (void)rest;
    reply_error(x, 501, NULL, "Batches API not built yet%s", "");
}
