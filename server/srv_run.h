/*
 * srv_run.h - the HTTP server's life (srv_run.c).
 * Thread: main (which becomes the loop thread).
 */
#ifndef H2O_SERVER_SRV_RUN_H
#define H2O_SERVER_SRV_RUN_H

#include "cfg.h"

/*
 * Run the server until SIGINT / SIGTERM and the drain finish. Prints
 * "listening on http://HOST:PORT" on stderr once bound (tests read the port from
 * there when --port 0). Returns the process exit code. Thread: main.
 */
int srv_run(const struct cfg *cfg);

#endif
