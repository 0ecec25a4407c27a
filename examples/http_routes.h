/* http_routes: what the example server answers (http_routes.c), GET
 * /delay?ms=N among it (http_delay.c: uvtw's cross-thread side). */
#ifndef UVTW_EXAMPLES_HTTP_ROUTES_H
#define UVTW_EXAMPLES_HTTP_ROUTES_H

#include <stdint.h>

#include "http_server_impl.h"

/* Answers the complete request of `c` (the server's handle_request). */
void routes_handle(conn_t *c);

/* Answers `c` in `ms` (counted from now), or 503 if the wheel cannot take
 * the task; if the connection closes first, the answer is withdrawn. */
void delay_start(conn_t *c, uint64_t ms);

#endif
