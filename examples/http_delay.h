/* http_delay: GET /delay?ms=N, the answer prepared on the thread pool and
 * sent when a task it puts on the server's wheel from there is due (see
 * http_delay.c): uvtw's cross-thread side, readable on its own. */
#ifndef UVTW_EXAMPLES_HTTP_DELAY_H
#define UVTW_EXAMPLES_HTTP_DELAY_H

#include <stdint.h>

#include "http_conn.h"

/* Answers `c` in `ms` (counted from now), or 503 if the wheel cannot take
 * the task; if the connection closes first, the answer is withdrawn. */
void delay_start(conn_t *c, uint64_t ms);

#endif
