/* http_server.h: the example HTTP/1.1 server (http_server.c) as a library.
 * http_server_main.c is its command line; test_http_timeouts.c runs it in
 * its own process, on a wheel with a manual clock, to test its timeouts.
 *
 * One server per process at a time, on the loop thread. Every timeout is a
 * timer on the server's wheel and every deadline it checks reads the
 * wheel's time (uvtw_wheel_now), so the server runs the same on a wheel on
 * the loop's clock (the program) and on a manual one (the tests). */
#ifndef UVTW_EXAMPLES_HTTP_SERVER_H
#define UVTW_EXAMPLES_HTTP_SERVER_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <uv.h>

#include "uvtw.h"

typedef struct http_server_config_s {
  uint64_t headers_timeout;           /* ms; Node's headersTimeout; 0 disables */
  uint64_t request_timeout;           /* ms; Node's requestTimeout */
  uint64_t keep_alive_timeout;        /* ms; Node's keepAliveTimeout */
  uint64_t keep_alive_timeout_buffer; /* ms; Node's keepAliveTimeoutBuffer */
  uint64_t send_timeout;              /* ms a queued answer may wait for the client */
  uint64_t shutdown_grace;            /* ms left to requests in flight at shutdown */
  uint64_t max_header_size;           /* bytes; 431 beyond */
  uint64_t max_headers_count;         /* 431 beyond */
  uint64_t max_body_size;             /* bytes, at most UINT32_MAX; 413 beyond */
  uint64_t fail_accept_allocs;        /* fault injection: the first N connections get no memory */
  const char *host;                   /* listen address */
  int port;                           /* 0: a free port (http_server_port() tells which) */
  int handle_signals;                 /* SIGINT/SIGTERM shut the server down (the program) */
  FILE *out; /* 'listening on HOST:PORT', the shutdown line and the final stats; NULL: none */
} http_server_config_t;

enum http_close_reason {
  CLOSE_HEADERS_TIMEOUT,
  CLOSE_REQUEST_TIMEOUT,
  CLOSE_KEEPALIVE_TIMEOUT,
  CLOSE_SEND_TIMEOUT,  /* the client did not take a queued response */
  CLOSE_PEER,          /* EOF or error from the client */
  CLOSE_NOT_KEEPALIVE, /* Connection: close, HTTP/1.0 */
  CLOSE_BAD_REQUEST,   /* an error response (400, 405, 413, 417, 431) */
  CLOSE_NO_MEMORY,     /* an allocation failed */
  CLOSE_SHUTDOWN,      /* SIGINT/SIGTERM, http_server_shutdown */
  CLOSE_REASONS
};

/* What /stats shows, as numbers. */
typedef struct http_server_counters_s {
  uint64_t accepted, open, open_peak;
  uint64_t accept_errors; /* accept failed (EMFILE...): libuv dropped the connection */
  uint64_t accept_nomem;  /* no memory for a connection: accept retried later */
  uint64_t requests;      /* responses written in full */
  uint64_t received;      /* bytes read from clients */
  uint64_t headers_timeouts, request_timeouts; /* fired: a 408 is sent, then the close */
  uint64_t closed[CLOSE_REASONS];
  uint64_t linger_timeouts; /* lingering closes that ended without the client's EOF */
  uint64_t timers_armed, timers_armed_peak;
  uint64_t early_fires; /* timeouts that fired before their deadline */
  uint64_t late_max_ms; /* largest now - deadline seen at a timeout */
  uint64_t delay_scheduled, delay_fired, delay_cancelled, delay_failed;
  uint64_t drain_answered; /* responses written after the shutdown began */
  uint64_t drain_dropped;  /* connections with a request in flight closed by the shutdown */
  uint64_t buffered, buffered_peak; /* bytes held for connections: kept requests, queued answers */
} http_server_counters_t;

/* Node's defaults (headers 60 s, request 300 s, keep-alive 5 s + 1 s, send
 * 30 s), 127.0.0.1, a free port, no signals, no output. */
void http_server_config_init(http_server_config_t *config);

/* Makes the server's wheel on `loop` from `wheel_options` (NULL: the
 * defaults; manual_clock = 1 for tests) and starts listening. The loop then
 * runs it: the server has shut down once http_server_wheel() is NULL.
 * Returns 0, or a libuv error (printed to stderr); after a failed listen the
 * loop still has to run to close what was opened. The uv_timer_t build
 * (http_server_uvtimer) refuses a manual clock with UV_ENOTSUP: its
 * connection timers run on the loop's clock. */
int http_server_start(uv_loop_t *loop, const http_server_config_t *config,
                      const uvtw_options_t *wheel_options);

/* http_server_start, then runs `loop` until the server has shut down, then
 * closes the loop. Returns the program's exit status. */
int http_server_run(uv_loop_t *loop, const http_server_config_t *config,
                    const uvtw_options_t *wheel_options);

/* As the first SIGTERM: stop accepting, close idle connections, answer the
 * requests in flight within shutdown_grace, then close the wheel. */
void http_server_shutdown(void);

int http_server_port(void);            /* the port it listens on */
uvtw_wheel_t *http_server_wheel(void); /* NULL once it has shut down */
const http_server_counters_t *http_server_counters(void);
size_t http_server_format_stats(char *out, size_t size); /* the /stats line, no newline */

#endif
