/* http_metrics: the example server's GET /metrics, in the Prometheus text
 * exposition format (version 0.0.4), from the stats of one server or of
 * every worker of the process. */
#ifndef HTTP_METRICS_H
#define HTTP_METRICS_H

#include <stddef.h>

#include "http_server.h"

/* The Content-Type of the page. */
#define HTTP_METRICS_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* The page for `count` servers' stats, each series labelled worker="i"
 * when count > 1, followed by the process's resident memory and open
 * descriptors. Returns a malloc'd string of *len bytes (not terminated),
 * or NULL without memory. Any thread; it reads only what it is given and
 * /proc/self. */
char *http_metrics_format(const http_server_stats_t *stats, unsigned count, size_t *len);

#endif
