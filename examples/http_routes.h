/* http_routes: what the example server answers (http_routes.c). */
#ifndef UVTW_EXAMPLES_HTTP_ROUTES_H
#define UVTW_EXAMPLES_HTTP_ROUTES_H

#include "http_conn.h"

/* Answers the complete request of `c` (the server's handle_request). */
void routes_handle(conn_t *c);

#endif
