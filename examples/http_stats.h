/* http_stats: the example server's statistics as GET /stats shows them: one
 * line of key=value pairs, summed over servers (workers) field by field
 * through one table (http_stats.c). http_server.h declares the functions
 * the program calls; this is what the server's own files share. */
#ifndef UVTW_EXAMPLES_HTTP_STATS_H
#define UVTW_EXAMPLES_HTTP_STATS_H

#include <stddef.h>

#include "http_server.h"

/* The /stats line of `stats`, with the configuration `config` and the
 * memory a connection takes (its struct and its timers). */
size_t http_stats_format(const http_server_stats_t *stats, const http_server_config_t *config,
                         size_t conn_bytes, size_t timer_bytes, char *out, size_t size);

#endif
