/*
 * backend.c - what every backend shares: destruction through the vtable.
 */
#include "backend.h"

void backend_destroy(struct backend *be)
{
    if (be->ops) be->ops->destroy(be->ctx);
    be->ops = NULL;
    be->ctx = NULL;
}
