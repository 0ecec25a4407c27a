/* http_server.h: the example HTTP/1.1 server (http_server.c) as a library.
 *
 * A server lives on one loop and is called on that loop's thread only; any
 * number of servers may run in one process, each on its own loop. Every
 * timeout is a timer on the server's wheel and every deadline it checks
 * reads the wheel's time (uvtw_wheel_now), so the server runs the same on
 * a wheel on the loop's clock (the program) and on a manual one (the
 * tests). */
#ifndef UVTW_EXAMPLES_HTTP_SERVER_H
#define UVTW_EXAMPLES_HTTP_SERVER_H

#include "uvtw.h" /* first: under -std=c11 it asks for the POSIX that uv.h needs */

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

typedef struct http_server_s http_server_t;
typedef struct http_server_stats_s http_server_stats_t; /* below */

typedef struct http_server_config_s {
  uint64_t headers_timeout;           /* ms; Node's headersTimeout; 0 disables */
  uint64_t request_timeout;           /* ms; Node's requestTimeout */
  uint64_t keep_alive_timeout;        /* ms; Node's keepAliveTimeout */
  uint64_t keep_alive_timeout_buffer; /* ms; Node's keepAliveTimeoutBuffer */
  uint64_t send_timeout;              /* ms a queued answer may wait for the client */
  uint64_t shutdown_grace;            /* ms left to requests in flight at shutdown */
  uint64_t max_header_size;    /* bytes of the head (431 beyond), then of a body's chunk extensions
                                  and trailers with it (413 beyond) */
  uint64_t max_headers_count;  /* 431 beyond */
  uint64_t max_body_size;      /* bytes, at most UINT32_MAX; 413 beyond */
  uint64_t max_conn_buffered;  /* bytes of answers a client leaves unread; cut beyond */
  uint64_t max_buffered;       /* bytes the server holds for all (a quarter at most for pipelined
                                  requests); beyond, the client holding the most is cut */
  int allow_half_open;         /* --allow-half-open; 0: a client's EOF ends its request */
  int bench_routes;            /* tests and benchmarks only: /spin, /bytes, fail_accept_allocs */
  uint64_t fail_accept_allocs; /* fault injection: the first N connections get no memory */
  uint64_t max_loop_delay;     /* ms; 0 (the default): never shed (--max-loop-delay) */
  /* 1 (the default): sample the loop every 10 ms while a connection is open.
   * Ignored on a manual clock (max_loop_delay samples still). */
  int sample_loop;
  uint64_t retry_after; /* s; the Retry-After of those 503s */
  const char *host;     /* listen address */
  int port;             /* 0: a free port (http_server_port() tells which) */
  /* -1: the server binds host:port itself. Else a bound socket it listens
   * on and owns from http_server_start on, failure included (host and port
   * then only name it in messages): several servers share a port this way,
   * each with its own socket (SO_REUSEPORT, http_workers.c). */
  int listen_fd;
  /* NULL: GET /stats and /metrics show this server's stats. Else they show
   * the *count servers' stats that gather returns (a malloc'd array, NULL
   * without memory), called on the server's loop thread with stats_arg: a
   * program running several servers answers for all of them. */
  http_server_stats_t *(*gather)(http_server_t *server, void *arg, unsigned *count);
  void *stats_arg;
  /* When a burst of running out of descriptors ends (uv_hrtime in ms), so
   * that it is counted and logged once: NULL, the server's own; else shared
   * by the servers of one process, whose descriptors they share. */
  _Atomic uint64_t *fd_burst_end;
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
  CLOSE_SHED,          /* a 503 while the loop lags (max_loop_delay) */
  CLOSE_UNAVAILABLE,   /* another 503: /delay could not be scheduled */
  CLOSE_SLOW_READER,   /* answers queued beyond max_conn_buffered, or held the most beyond
                          max_buffered */
  CLOSE_READ_AHEAD,    /* held the most pipelined bytes beyond a quarter of max_buffered */
  CLOSE_CLIENT_GONE,   /* EOF while a request was pending (not allow_half_open) */
  CLOSE_REASONS
};

/* What /stats shows, as numbers. */
typedef struct http_server_counters_s {
  uint64_t accepted, open, open_peak;
  uint64_t accept_errors; /* accept failed (ENOBUFS...): retried later */
  uint64_t fd_exhausted;  /* times accepting paused for want of descriptors */
  uint64_t accept_nomem;  /* no memory for a connection: accept retried later */
  uint64_t requests;      /* responses written in full */
  uint64_t responses[5];  /* responses queued, by status class 1xx..5xx (not 100 Continue) */
  uint64_t received;      /* bytes read from clients */
  uint64_t headers_timeouts, request_timeouts; /* fired: a 408 is sent, then the close */
  uint64_t closed[CLOSE_REASONS];
  uint64_t linger_timeouts; /* lingering closes that ended without the client's EOF */
  uint64_t timers_armed, timers_armed_peak;
  uint64_t early_fires; /* timeouts that fired before their deadline */
  uint64_t late_max_ms; /* largest now - deadline seen at a timeout */
  uint64_t delay_scheduled, delay_fired, delay_cancelled, delay_failed;
  uint64_t delay_in_flight; /* /delay work items whose after_work has not run */
  uint64_t drain_answered;  /* responses written after the shutdown began */
  uint64_t drain_dropped;   /* connections with a request in flight closed by the shutdown */
  uint64_t buffered, buffered_peak; /* bytes held for connections: kept requests, queued answers */
  uint64_t shed;                    /* requests answered 503 because the loop lagged */
  uint64_t shedding;                /* 1 while the server sheds (summed: the servers shedding) */
} http_server_counters_t;

/* What /stats shows: the counters, and the wheel's statistics (the last
 * ones taken before it closed, once the server has shut down). The server
 * copies its wheel's statistics once a second: the last completed second
 * is the window from second_start to second_end (empty before the first
 * second has passed), whose lateness quantiles /stats shows. */
struct http_server_stats_s {
  http_server_counters_t counters;
  uvtw_stats_t wheel;
  uvtw_stats_t second_start, second_end;
};

/* Node's defaults (headers 60 s, request 300 s, keep-alive 5 s + 1 s, send
 * 30 s), 127.0.0.1, a free port, no socket given, /stats for this server. */
void http_server_config_init(http_server_config_t *config);

/* Makes a server on `loop`, with its wheel made from `wheel_options` (NULL:
 * the defaults; manual_clock = 1 for tests), and starts listening. The loop
 * then runs it: it has shut down once http_server_wheel() is NULL, and is
 * then freed with http_server_free. Returns 0, or a libuv error (printed to
 * stderr); *server is NULL if nothing was opened, else the server, which
 * after a failed listen is already shutting down: the loop still has to run
 * to close what was opened. The uv_timer_t build (http_server_uvtimer)
 * refuses a manual clock with UV_ENOTSUP: its connection timers run on the
 * loop's clock. */
int http_server_start(http_server_t **server, uv_loop_t *loop, const http_server_config_t *config,
                      const uvtw_options_t *wheel_options);

/* Stop accepting, close idle connections, answer the requests in flight
 * within shutdown_grace, then close the wheel. A second call does nothing. */
void http_server_shutdown(http_server_t *server);

/* Shuts down at once: as http_server_shutdown, then every connection still
 * open is closed, requests in flight included (counted in drain_dropped). */
void http_server_shutdown_now(http_server_t *server);

/* Once it has shut down (http_server_wheel() is NULL). */
void http_server_free(http_server_t *server);

int http_server_port(const http_server_t *server);            /* the port it listens on */
uvtw_wheel_t *http_server_wheel(const http_server_t *server); /* NULL once it has shut down */
const http_server_counters_t *http_server_counters(const http_server_t *server);

/* A copy of its counters and its wheel's statistics; on the loop thread. */
void http_server_stats(const http_server_t *server, http_server_stats_t *stats);

/* Adds `more` into `sum`, for a process with several servers: counts,
 * peaks and lateness histograms add up (the quantiles of the sum are those
 * of every server's callbacks), the largest lateness is the largest. */
void http_server_stats_add(http_server_stats_t *sum, const http_server_stats_t *more);

/* The /stats key=value pairs (no final newline), with the server's
 * configuration: of its own stats (each NULL), or of the sum of `count`
 * servers' stats followed by workers=N and worker_accepted=A,B,... On one
 * line, or with `lines` one a line under "# " headings (GET /stats).
 * Returns its length, less than size. */
size_t http_server_format_stats(const http_server_t *server, const http_server_stats_t *each,
                                unsigned count, int lines, char *out, size_t size);

/* GET /metrics (http_stats.c): the Prometheus text exposition format,
 * version 0.0.4, of `count` servers' stats, each series labelled
 * worker="i" when count > 1, followed by the process's resident memory and
 * open descriptors. Returns a malloc'd string of *len bytes (not
 * terminated), or NULL without memory. Any thread: it reads only what it
 * is given and /proc/self. */
#define HTTP_METRICS_TYPE "text/plain; version=0.0.4; charset=utf-8" /* its Content-Type */
char *http_metrics_format(const http_server_stats_t *stats, unsigned count, size_t *len);

#endif
