/* api_files.c - placeholder until the Files API lands (being written now). */
#include "srv.h"

void files_route(struct exch *x, const char *rest)
{
    (void)rest;
    reply_error(x, 501, NULL, "Files API not built yet%s", "");
}
