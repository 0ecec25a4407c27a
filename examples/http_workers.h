/* http_workers.h: the example server (http_server.h) on N loops, one per
 * thread, sharing one port; the process around the servers for the program
 * (http_server_main.c). See http_workers.c. */
#ifndef UVTW_EXAMPLES_HTTP_WORKERS_H
#define UVTW_EXAMPLES_HTTP_WORKERS_H

#include "http_server.h"

#define HTTP_WORKERS_MAX 64

/* Runs `workers` servers (1 to HTTP_WORKERS_MAX), each on its own thread,
 * loop and wheel (made from `wheel_options`), with its own socket bound to
 * config->host and config->port (SO_REUSEPORT when workers > 1; where the
 * platform lacks it, more than one worker is refused). Prints
 * "listening on HOST:PORT" to stdout once every worker listens. SIGTERM or
 * SIGINT drains every worker; when all are done it prints the shutdown line
 * and the final stats, summed over the workers, and returns 0; a second
 * signal drops what is in flight and returns 128 + the signal. Returns 1 if
 * a worker could not start. config->listen_fd, gather and stats_arg are
 * its own. */
int http_workers_run(const http_server_config_t *config, const uvtw_options_t *wheel_options,
                     unsigned workers);

#endif
