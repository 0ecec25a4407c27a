/* http_server: an HTTP/1.1 keep-alive server on libuv TCP that keeps the
 * promises of Node's http.Server, with every per-connection timeout a timer
 * on a uvtw wheel. Run it with --help for the options and how it differs
 * from Node (the usage text is in http_server_main.c).
 *
 * A connection is under a timer in every state:
 *
 *   READING    a request is awaited or arriving: headersTimeout (the head,
 *              the slowloris defence) and requestTimeout (the whole request)
 *   IDLE       between requests: keepAliveTimeout + keepAliveTimeoutBuffer
 *   HANDLING   the answer is being prepared (/delay): the answer's own task
 *   WRITING    the answer is queued because the client does not read: the
 *              send timeout; bytes the client pipelines meanwhile are kept up
 *              to PENDING_MAX, then reading pauses
 *   DRAINING   the last answer is queued: the send timeout
 *   LINGERING  the write side is shut down; what the client still sends is
 *              read and discarded until its EOF or LINGER_MS, so that closing
 *              does not reset the connection before it read the answer
 *
 * Requests on one connection are answered one at a time, in order.
 *
 * The server is a library (http_server.h) whose state is one struct per
 * loop, http_server_t: http_workers.c runs one per thread for the program,
 * and test_http_timeouts.c runs one on a manual clock.
 *
 * Parser: llhttp (Node's own), from Debian's node-llhttp sources. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* uv.h needs POSIX types under -std=c11 */
#endif
#include <assert.h>
#include <inttypes.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <uv.h>

#include "http_server.h"

#include "http_loop_watch.h"
#include "http_metrics.h"
#include "http_parse.h"
#include "http_stats.h"
#include "http_timer.h"

#define container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

/* ---- Limits --------------------------------------------------------------- */

#define LINGER_MS 2000          /* lingering close: the longest wait for the client's EOF */
#define ACCEPT_RETRY_MS 50      /* after a failed allocation at accept */
#define PENDING_MAX (64 * 1024) /* bytes kept while a request is answered */
#define BYTES_MAX (1024 * 1024) /* the largest /bytes?n=N answer */
#define SPIN_MAX 10000          /* the longest /spin?ms=N, in ms */

/* ---- The server ------------------------------------------------------------- */

typedef struct conn_s conn_t;

struct http_server_s {
  http_server_config_t config;
  http_server_counters_t counters;
  uv_loop_t *loop;
  uvtw_wheel_t *wheel;      /* NULL once closed */
  uvtw_stats_t wheel_final; /* the wheel's statistics just before it closed */
  uv_tcp_t listener;
  uvtw_timer_t accept_retry_timer, grace_timer;
  http_limits_t limits; /* the config's, for the parser */
  loop_watch_t watch;   /* the lag: the last completed second, shedding */
  int accept_waiting;   /* a connection waits in the listener for memory */
  conn_t *connections;  /* list head */
  int shutting_down, wheel_closing;
  int listening_port;
  char read_buffer[64 * 1024]; /* one loop thread: reads are parsed at once */
};

/* ---- Connections ------------------------------------------------------------ */

enum conn_state {
  ST_READING,
  ST_IDLE,
  ST_HANDLING,
  ST_WRITING,
  ST_DRAINING,
  ST_LINGERING,
  ST_CLOSING
};

typedef struct delay_job_s delay_job_t;

/* sizeof(conn_t), rounded up to where its timers can start. */
#define CONN_SIZE                                                                                  \
  ((sizeof(conn_t) + _Alignof(max_align_t) - 1) / _Alignof(max_align_t) * _Alignof(max_align_t))

struct conn_s {
  http_server_t *server;
  uv_tcp_t tcp;
  http_request_t request;
  struct conn_s *prev, *next; /* all open connections, for shutdown */
  delay_job_t *job;           /* the /delay answer in progress, if any */
  char *pending;              /* bytes received while answering: [pending_off, pending_len) */
  uint32_t pending_len, pending_off;
  uint32_t pending_cap; /* bytes allocated for pending */
  uint8_t state;
  uint8_t keep_alive; /* the request being answered allows another */
  uint8_t reading;
  uint8_t peer_ended;      /* EOF from the client: answer what it sent, then close */
  uint8_t request_started; /* a byte of the current request has arrived */
  uint8_t shed;            /* its first byte came while the server was shedding */
  uint8_t close_reason;
  uint8_t handles_open; /* close callbacks still to come; freed at 0 */
  /* Then its CONN_TIMERS timers, http_timer_size bytes each: conn_timer(). */
};

/* A connection's timeouts: headersTimeout, requestTimeout, and the one of
 * its state: keep-alive (IDLE), send (WRITING, DRAINING) or linger. */
enum { T_HEADERS, T_REQUEST, T_IO, CONN_TIMERS };

static http_timer_t *conn_timer(conn_t *c, int which) {
  return (http_timer_t *)((char *)c + CONN_SIZE + (size_t)which * http_timer_size);
}

/* A /delay answer: rendered on a worker thread, sent when its task is due.
 * The loop thread owns it. Two things hold it: the thread pool, from
 * delay_start until delay_after_work, and the wheel, from delay_start until
 * the answer's task has run, or its cancel has won, or it is known never to
 * have been scheduled. delay_drop gives back one hold; the last frees the
 * job, in the one place that does. */
struct delay_job_s {
  uv_work_t work;
  http_server_t *server;    /* loop thread only */
  uvtw_wheel_t *wheel;      /* the server's: the worker schedules the answer on it */
  conn_t *conn;             /* loop thread only; NULL once answered or the connection closed */
  uint64_t delay_ms;        /* set before queueing; read by the worker */
  uint64_t requested_ns;    /* uv_hrtime() when the request was complete */
  uvtw_ticket_t *scheduled; /* written by the worker; the loop reads it in delay_after_work */
  int schedule_status;      /* likewise */
  uvtw_ticket_t *ticket;    /* loop thread: `scheduled`, once delay_after_work has run */
  int holds;                /* loop thread: 2, 1, then freed */
  size_t body_len;
  char body[64]; /* written by the worker before uvtw_schedule */
};

static void conn_close(conn_t *c, enum http_close_reason reason);
static void conn_feed(conn_t *c, const char *data, size_t len);
static void conn_resume(conn_t *c);
static int conn_read_start(conn_t *c);
static void maybe_finish_shutdown(http_server_t *s);

/* ---- Timeouts ------------------------------------------------------------- */

/* Arms (or re-arms) a timeout; ms == 0 leaves it disarmed (disabled). */
static void timeout_start(conn_t *c, int which, http_timer_cb cb, uint64_t ms) {
  http_server_t *s = c->server;
  http_timer_t *t = conn_timer(c, which);
  int was_active = http_timer_active(t);
  int r;
  if (ms == 0)
    return;
  r = http_timer_start(t, cb, ms);
  if (r != 0) {
    fprintf(stderr, "http_server: timer start: %s\n", uv_strerror(r));
    return;
  }
  if (!was_active && ++s->counters.timers_armed > s->counters.timers_armed_peak)
    s->counters.timers_armed_peak = s->counters.timers_armed;
}

static void timeout_stop(conn_t *c, int which) {
  http_timer_t *t = conn_timer(c, which);
  if (!http_timer_active(t))
    return;
  http_timer_stop(t);
  c->server->counters.timers_armed--;
}

/* Bookkeeping at the top of every timeout callback (the timer is one-shot,
 * so it is already inactive). Returns its connection. */
static conn_t *timeout_fired(http_timer_t *t) {
  conn_t *c = http_timer_data(t);
  http_server_t *s = c->server;
  s->counters.timers_armed--;
  http_timer_fired(t, &s->counters.early_fires, &s->counters.late_max_ms);
  return c;
}

/* ---- Stats ---------------------------------------------------------------- */

void http_server_stats(const http_server_t *s, http_server_stats_t *stats) {
  stats->counters = s->counters;
  if (s->wheel != NULL)
    uvtw_wheel_stats(s->wheel, &stats->wheel);
  else
    stats->wheel = s->wheel_final;
  stats->second_start = s->watch.second_start;
  stats->second_end = s->watch.second_end;
}

/* One line of key=value pairs (no newline). */
size_t http_server_format_stats(const http_server_t *s, const http_server_stats_t *stats, char *out,
                                size_t size) {
  http_server_stats_t own;
  if (stats == NULL) {
    http_server_stats(s, &own);
    stats = &own;
  }
  return http_stats_format(stats, &s->config, CONN_SIZE + CONN_TIMERS * http_timer_size,
                           http_timer_size, out, size);
}

/* ---- Writing responses ---------------------------------------------------- */

typedef struct write_req_s {
  uv_write_t req;
  conn_t *conn;
  int interim; /* 100 Continue: not the answer */
  size_t len;
  char data[];
} write_req_t;

static void on_send_timeout(http_timer_t *timer);
static void on_linger_timeout(http_timer_t *timer);
static void on_keep_alive_timeout(http_timer_t *timer);

static void on_shutdown(uv_shutdown_t *req, int status) {
  (void)status;
  free(req); /* the linger timer or the client's EOF ends the connection */
}

/* The last answer is written: close, after the client's EOF if it may still
 * be sending (closing with unread bytes would reset the connection and could
 * destroy the answer before the client read it). */
static void conn_finish(conn_t *c) {
  uv_shutdown_t *req;
  if (c->peer_ended) {
    conn_close(c, (enum http_close_reason)c->close_reason);
    return;
  }
  req = malloc(sizeof *req);
  if (req == NULL || uv_shutdown(req, (uv_stream_t *)&c->tcp, on_shutdown) != 0) {
    free(req);
    conn_close(c, (enum http_close_reason)c->close_reason);
    return;
  }
  c->state = ST_LINGERING;
  timeout_start(c, T_IO, on_linger_timeout, LINGER_MS);
  if (!c->reading && conn_read_start(c) != 0)
    conn_close(c, (enum http_close_reason)c->close_reason);
}

static void on_write(uv_write_t *req, int status) {
  write_req_t *w = container_of(req, write_req_t, req);
  conn_t *c = w->conn;
  http_server_t *s = c->server;
  int interim = w->interim;
  s->counters.buffered -= w->len;
  free(w);
  if (c->state == ST_CLOSING)
    return; /* cancelled by uv_close */
  if (status < 0) {
    conn_close(c, CLOSE_PEER);
    return;
  }
  if (interim)
    return;
  timeout_stop(c, T_IO); /* the send timeout */
  s->counters.requests++;
  if (s->shutting_down)
    s->counters.drain_answered++;
  if (c->state == ST_DRAINING) {
    conn_finish(c);
    return;
  }
  assert(c->state == ST_WRITING);
  conn_resume(c);
}

static void buffered_add(http_server_t *s, size_t n) {
  s->counters.buffered += n;
  if (s->counters.buffered > s->counters.buffered_peak)
    s->counters.buffered_peak = s->counters.buffered;
}

static void pending_free(conn_t *c) {
  free(c->pending);
  c->server->counters.buffered -= c->pending_cap;
  c->pending = NULL;
  c->pending_len = c->pending_off = c->pending_cap = 0;
}

/* Queues bytes on the connection; a response that the kernel did not take at
 * once is under the send timeout. Returns 0 or closes the connection. */
static int conn_write(conn_t *c, write_req_t *w, size_t len) {
  uv_buf_t buf = uv_buf_init(w->data, (unsigned)len);
  int r;
  w->conn = c;
  r = uv_write(&w->req, (uv_stream_t *)&c->tcp, &buf, 1, on_write);
  if (r != 0) {
    free(w);
    conn_close(c, CLOSE_PEER);
    return r;
  }
  w->len = len;
  buffered_add(c->server, len);
  if (!w->interim && uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp) > 0)
    timeout_start(c, T_IO, on_send_timeout, c->server->config.send_timeout);
  return 0;
}

/* Writes one response, with the header lines `extra` ("" for none, each
 * ending in CRLF). `final` closes the connection once it is written. A
 * HEAD request gets the headers, Content-Length included, without the body. */
static void conn_respond_with(conn_t *c, int status, const char *reason, const char *type,
                              const char *extra, const char *body, size_t body_len, int final) {
  http_server_t *s = c->server;
  static const char fmt[] = "HTTP/1.1 %d %s\r\n"
                            "Content-Type: %s\r\n"
                            "Content-Length: %zu\r\n"
                            "%s%s\r\n";
  char conn_header[64];
  size_t cap, n;
  write_req_t *w;
  int send_body = c->request.method != HTTP_HEAD;
  /* While shutting down, or after the client's EOF, the answer to the last
   * request received closes the connection. */
  if ((s->shutting_down || c->peer_ended) && c->pending_off == c->pending_len)
    final = 1;
  if (!c->keep_alive)
    final = 1;
  if (final)
    snprintf(conn_header, sizeof conn_header, "Connection: close\r\n");
  else if (s->config.keep_alive_timeout > 0)
    snprintf(conn_header, sizeof conn_header,
             "Connection: keep-alive\r\nKeep-Alive: timeout=%" PRIu64 "\r\n",
             s->config.keep_alive_timeout / 1000);
  else
    snprintf(conn_header, sizeof conn_header, "Connection: keep-alive\r\n");
  cap = sizeof fmt + 32 + strlen(reason) + strlen(type) + strlen(extra) + strlen(conn_header) +
        body_len;
  w = malloc(sizeof *w + cap);
  if (w == NULL) {
    conn_close(c, CLOSE_NO_MEMORY);
    return;
  }
  w->interim = 0;
  n = (size_t)snprintf(w->data, cap, fmt, status, reason, type, body_len, extra, conn_header);
  if (status >= 100 && status < 600)
    s->counters.responses[status / 100 - 1]++;
  if (send_body) {
    memcpy(w->data + n, body, body_len);
    n += body_len;
  }
  if (final) {
    c->state = ST_DRAINING;
    if (c->close_reason == CLOSE_PEER) { /* the default: no timeout or error named one */
      if (s->shutting_down)
        c->close_reason = CLOSE_SHUTDOWN;
      else if (!c->keep_alive)
        c->close_reason = CLOSE_NOT_KEEPALIVE;
      else if (!c->peer_ended)
        c->close_reason = CLOSE_BAD_REQUEST; /* a 503 */
    }
  } else {
    c->state = ST_WRITING;
  }
  conn_write(c, w, n);
}

static void conn_respond(conn_t *c, int status, const char *reason, const char *body,
                         size_t body_len, int final) {
  conn_respond_with(c, status, reason, "text/plain", "", body, body_len, final);
}

/* An error response that ends the connection. */
static void conn_fail(conn_t *c, int status) {
  const char *reason;
  char body[64];
  int n;
  switch (status) {
  case 405:
    reason = "Method Not Allowed";
    break;
  case 408:
    reason = "Request Timeout";
    break;
  case 413:
    reason = "Payload Too Large";
    break;
  case 417:
    reason = "Expectation Failed";
    break;
  case 431:
    reason = "Request Header Fields Too Large";
    break;
  default:
    status = 400;
    reason = "Bad Request";
    break;
  }
  timeout_stop(c, T_HEADERS);
  timeout_stop(c, T_REQUEST);
  timeout_stop(c, T_IO);
  if (status != 408)
    c->close_reason = CLOSE_BAD_REQUEST;
  n = snprintf(body, sizeof body, "%d %s\n", status, reason);
  conn_respond(c, status, reason, body, (size_t)n, 1);
}

/* ---- Timeout callbacks ---------------------------------------------------- */

static void on_headers_timeout(http_timer_t *timer) {
  conn_t *c = timeout_fired(timer);
  http_server_t *s = c->server;
  s->counters.headers_timeouts++;
  c->close_reason = CLOSE_HEADERS_TIMEOUT;
  conn_fail(c, 408); /* like Node: 408 and close */
}

static void on_request_timeout(http_timer_t *timer) {
  conn_t *c = timeout_fired(timer);
  http_server_t *s = c->server;
  s->counters.request_timeouts++;
  c->close_reason = CLOSE_REQUEST_TIMEOUT;
  conn_fail(c, 408);
}

static void on_keep_alive_timeout(http_timer_t *timer) {
  conn_t *c = timeout_fired(timer);
  conn_close(c, CLOSE_KEEPALIVE_TIMEOUT);
}

static void on_send_timeout(http_timer_t *timer) {
  conn_t *c = timeout_fired(timer);
  conn_close(c, CLOSE_SEND_TIMEOUT);
}

static void on_linger_timeout(http_timer_t *timer) {
  conn_t *c = timeout_fired(timer);
  http_server_t *s = c->server;
  s->counters.linger_timeouts++;
  conn_close(c, (enum http_close_reason)c->close_reason);
}

/* ---- /delay: thread pool work + a cross-thread task ----------------------- */

/* Gives back `n` holds (0 to 2). */
static void delay_drop(delay_job_t *job, int n) {
  if ((job->holds -= n) > 0)
    return;
  if (job->ticket != NULL)
    uvtw_ticket_release(job->ticket); /* the only release of this ticket */
  free(job);
}

/* Sends the answer, if the connection still waits for it. */
static void delay_answer(delay_job_t *job, int status, const char *body, size_t len) {
  conn_t *c = job->conn;
  if (c == NULL)
    return;
  c->job = NULL;
  job->conn = NULL;
  conn_respond(c, status, status == 200 ? "OK" : "Service Unavailable", body, len, status != 200);
}

/* Withdraws the answer's task, once the connection is gone. Returns the
 * holds this gives back: the wheel's if the cancel won (one that loses
 * found the task run, which gave it back). */
static int delay_withdraw(delay_job_t *job) {
  if (uvtw_ticket_cancel(job->ticket) != 0)
    return 0;
  job->server->counters.delay_cancelled++;
  return 1;
}

/* Loop thread, when the deadline is due (status 0) or the wheel closed
 * (UV_ECANCELED). May run before or after delay_after_work. */
static void delay_due(void *arg, int status) {
  delay_job_t *job = arg;
  if (status == 0) {
    job->server->counters.delay_fired++;
    delay_answer(job, 200, job->body, job->body_len);
  } else {
    delay_answer(job, 503, "shutting down\n", 14);
  }
  delay_drop(job, 1); /* the wheel's hold */
}

/* Worker thread: renders the answer and puts its deadline on the wheel. The
 * deadline counts from the request, not from when the pool got to it. */
static void delay_work(uv_work_t *req) {
  delay_job_t *job = container_of(req, delay_job_t, work);
  uint64_t waited_ms = (uv_hrtime() - job->requested_ns) / 1000000;
  uint64_t left = job->delay_ms > waited_ms ? job->delay_ms - waited_ms : 0;
  int n = snprintf(job->body, sizeof job->body, "delayed %" PRIu64 " ms\n", job->delay_ms);
  job->body_len = (size_t)n < sizeof job->body ? (size_t)n : sizeof job->body - 1;
  job->schedule_status = uvtw_schedule(job->wheel, left, delay_due, job, &job->scheduled);
}

/* Loop thread, once delay_work returned (or was cancelled by uv_cancel). */
static void delay_after_work(uv_work_t *req, int status) {
  delay_job_t *job = container_of(req, delay_job_t, work);
  http_server_t *s = job->server;
  int back = 1; /* the pool's hold */
  s->counters.delay_in_flight--;
  if (status == UV_ECANCELED || job->schedule_status != 0) {
    if (status == UV_ECANCELED)
      s->counters.delay_cancelled++; /* never ran: the connection is gone */
    else
      s->counters.delay_failed++;
    delay_answer(job, 503, "cannot schedule\n", 16);
    back++; /* and the wheel's: nothing was scheduled */
  } else {
    s->counters.delay_scheduled++;
    job->ticket = job->scheduled;
    if (job->conn == NULL)
      back += delay_withdraw(job); /* the connection closed, or the answer went, meanwhile */
  }
  delay_drop(job, back);
  maybe_finish_shutdown(s);
}

static void delay_start(conn_t *c, uint64_t ms) {
  http_server_t *s = c->server;
  delay_job_t *job = calloc(1, sizeof *job);
  int r;
  if (job == NULL) {
    conn_close(c, CLOSE_NO_MEMORY);
    return;
  }
  job->server = s;
  job->wheel = s->wheel;
  job->conn = c;
  job->delay_ms = ms;
  job->requested_ns = uv_hrtime();
  job->holds = 2;
  r = uv_queue_work(s->loop, &job->work, delay_work, delay_after_work);
  assert(r == 0); /* it fails only without a work callback */
  (void)r;
  s->counters.delay_in_flight++;
  c->job = job;
}

/* The connection is closing: its answer will never be sent. */
static void delay_abandon(delay_job_t *job) {
  job->conn = NULL;
  if (job->ticket == NULL)
    uv_cancel((uv_req_t *)&job->work); /* in the pool: delay_after_work withdraws it */
  else
    delay_drop(job, delay_withdraw(job));
}

/* ---- Requests --------------------------------------------------------------- */

static char filler[BYTES_MAX]; /* the body of /bytes: set once, then read only */

static void filler_setup(void) {
  memset(filler, 'x', sizeof filler);
}

/* A new request (its first byte came while the loop lagged): 503, and the
 * connection closes, so that the client retries later or elsewhere, as
 * under-pressure answers. */
static void conn_shed(conn_t *c) {
  static const char body[] = "loop delay over the limit\n";
  char retry[48];
  snprintf(retry, sizeof retry, "Retry-After: %" PRIu64 "\r\n", c->server->config.retry_after);
  c->server->counters.shed++;
  c->close_reason = CLOSE_SHED;
  conn_respond_with(c, 503, "Service Unavailable", "text/plain", retry, body, sizeof body - 1, 1);
}

/* A CPU-bound handler: blocks the loop for ms, then answers. The loop's
 * clock is updated after it, so that the answer's timeouts count from the
 * real time; the callbacks that fell due meanwhile run late, and the wheel
 * counts how late. */
static void spin(conn_t *c, uint64_t ms) {
  char body[64];
  int n = snprintf(body, sizeof body, "spun %" PRIu64 " ms\n", ms);
  uv_sleep((unsigned)ms);
  uv_update_time(c->server->loop);
  conn_respond(c, 200, "OK", body, (size_t)n, 0);
}

/* GET /metrics: the Prometheus page (http_metrics.c) of this server, or of
 * every worker through the config's hook. */
static void metrics(conn_t *c) {
  http_server_t *s = c->server;
  size_t len = 0;
  char *page;
  if (s->config.metrics != NULL) {
    page = s->config.metrics(s, s->config.stats_arg, &len);
  } else {
    http_server_stats_t stats;
    http_server_stats(s, &stats);
    page = http_metrics_format(&stats, 1, &len);
  }
  if (page == NULL) {
    conn_respond(c, 503, "Service Unavailable", "no memory\n", 10, 0);
    return;
  }
  conn_respond_with(c, 200, "OK", HTTP_METRICS_TYPE, "", page, len, 0);
  free(page);
}

static void handle_request(conn_t *c) {
  static const char hello[] = "hello\n";
  static const char not_found[] = "not found\n";
  const char *url = c->request.url;
  int get = c->request.method == HTTP_GET || c->request.method == HTTP_HEAD;
  c->state = ST_HANDLING;
  if (c->shed && !(get && (strcmp(url, "/stats") == 0 || strcmp(url, "/metrics") == 0))) {
    conn_shed(c); /* /stats and /metrics are never refused: they show the lag */
  } else if (c->request.method == HTTP_CONNECT) {
    conn_fail(c, 405); /* not a proxy: an answer and a clean close */
  } else if (c->request.url_flags & HTTP_URL_TRUNCATED) {
    conn_respond(c, 404, "Not Found", not_found, sizeof not_found - 1, 0);
  } else if (get && strcmp(url, "/") == 0) {
    conn_respond(c, 200, "OK", hello, sizeof hello - 1, 0);
  } else if (get && strncmp(url, "/delay?ms=", 10) == 0) {
    char *end;
    unsigned long long ms = strtoull(url + 10, &end, 10);
    if (end == url + 10 || *end != '\0' || ms > 3600000)
      conn_respond(c, 400, "Bad Request", "bad ms\n", 7, 0);
    else
      delay_start(c, ms);
  } else if (get && strncmp(url, "/spin?ms=", 9) == 0) {
    char *end;
    unsigned long long ms = strtoull(url + 9, &end, 10);
    if (end == url + 9 || *end != '\0' || ms > SPIN_MAX)
      conn_respond(c, 400, "Bad Request", "bad ms\n", 7, 0);
    else
      spin(c, ms);
  } else if (get && strncmp(url, "/bytes?n=", 9) == 0) {
    static uv_once_t filler_once = UV_ONCE_INIT;
    char *end;
    unsigned long long n = strtoull(url + 9, &end, 10);
    if (end == url + 9 || *end != '\0' || n > BYTES_MAX) {
      conn_respond(c, 400, "Bad Request", "bad n\n", 6, 0);
    } else {
      uv_once(&filler_once, filler_setup);
      conn_respond(c, 200, "OK", filler, (size_t)n, 0);
    }
  } else if (get && strcmp(url, "/stats") == 0) {
    http_server_t *s = c->server;
    char body[2048];
    size_t n = s->config.stats_line != NULL
                   ? s->config.stats_line(s, s->config.stats_arg, body, sizeof body - 1)
                   : http_server_format_stats(s, NULL, body, sizeof body - 1);
    body[n++] = '\n';
    conn_respond(c, 200, "OK", body, n, 0);
  } else if (get && strcmp(url, "/metrics") == 0) {
    metrics(c);
  } else if (c->request.method == HTTP_POST && strcmp(url, "/upload") == 0) {
    char body[64];
    int n = snprintf(body, sizeof body, "received %" PRIu32 " bytes\n", c->request.body_bytes);
    conn_respond(c, 200, "OK", body, (size_t)n, 0);
  } else {
    conn_respond(c, 404, "Not Found", not_found, sizeof not_found - 1, 0);
  }
}

static void send_continue(conn_t *c) {
  static const char line[] = "HTTP/1.1 100 Continue\r\n\r\n";
  write_req_t *w = malloc(sizeof *w + sizeof line);
  if (w == NULL) {
    conn_close(c, CLOSE_NO_MEMORY);
    return;
  }
  w->interim = 1;
  memcpy(w->data, line, sizeof line - 1);
  conn_write(c, w, sizeof line - 1);
}

/* Parses what arrived, and acts on what the parser saw: a request's first
 * byte (its timeouts start if the connection was idle), the end of its head
 * (100 Continue if the client waits for it), the end of the request. */
static enum http_parse_result conn_parse(conn_t *c, const char *data, size_t len, size_t *used) {
  http_server_t *s = c->server;
  http_request_t *r = &c->request;
  enum http_parse_result result = http_parse(r, data, len, used);
  if (r->events & HTTP_BEGUN) {
    c->request_started = 1;
    c->shed = (uint8_t)(s->counters.shedding != 0); /* a request begun before is in flight */
    if (c->state == ST_IDLE) {                      /* first byte of the next request */
      timeout_stop(c, T_IO);
      timeout_start(c, T_HEADERS, on_headers_timeout, s->config.headers_timeout);
      timeout_start(c, T_REQUEST, on_request_timeout, s->config.request_timeout);
      c->state = ST_READING;
    }
  }
  if (r->events & HTTP_HEAD_DONE) {
    timeout_stop(c, T_HEADERS);
    if (r->wants_continue && result != HTTP_PARSE_ERROR)
      send_continue(c);
  }
  if (result == HTTP_PARSE_DONE && c->state != ST_CLOSING) {
    timeout_stop(c, T_REQUEST);
    c->keep_alive = r->keep_alive;
    c->request_started = 0;
    c->state = ST_HANDLING; /* the rest waits in c->pending */
  }
  return result;
}

/* Keeps bytes that arrive while a request is answered. */
static void conn_keep_pending(conn_t *c, const char *data, size_t len) {
  char *grown;
  if (len == 0)
    return;
  if (c->pending_off > 0) { /* drop what was parsed */
    memmove(c->pending, c->pending + c->pending_off, c->pending_len - c->pending_off);
    c->pending_len -= c->pending_off;
    c->pending_off = 0;
  }
  if (c->pending_len + len > c->pending_cap) {
    grown = realloc(c->pending, c->pending_len + len);
    if (grown == NULL) {
      conn_close(c, CLOSE_NO_MEMORY);
      return;
    }
    buffered_add(c->server, c->pending_len + len - c->pending_cap);
    c->pending_cap = (uint32_t)(c->pending_len + len);
    c->pending = grown;
  }
  memcpy(c->pending + c->pending_len, data, len);
  c->pending_len += (uint32_t)len;
  if (c->pending_len > PENDING_MAX && c->reading) {
    uv_read_stop((uv_stream_t *)&c->tcp); /* back-pressure until it is parsed */
    c->reading = 0;
  }
}

static void conn_feed(conn_t *c, const char *data, size_t len) {
  size_t used;
  enum http_parse_result r;
  if (c->state != ST_READING && c->state != ST_IDLE) {
    if (c->state == ST_HANDLING || c->state == ST_WRITING)
      conn_keep_pending(c, data, len);
    return; /* DRAINING, LINGERING: discarded */
  }
  r = conn_parse(c, data, len, &used);
  if (c->state == ST_CLOSING)
    return;
  if (r == HTTP_PARSE_ERROR) {
    conn_fail(c, c->request.error_status);
    return;
  }
  if (r == HTTP_PARSE_DONE) {
    conn_keep_pending(c, data + used, len - used);
    if (c->state == ST_HANDLING)
      handle_request(c);
  }
}

/* The previous answer is written: wait for the next request, answering the
 * ones already received first (parsed in place, one at a time). After the
 * client's EOF or a shutdown signal only requests received in full are
 * answered. Reading resumes once the bytes kept are under PENDING_MAX. */
static void conn_resume(conn_t *c) {
  http_server_t *s = c->server;
  int closing = s->shutting_down || c->peer_ended;
  c->state = ST_IDLE;
  if (!closing && s->config.keep_alive_timeout > 0)
    timeout_start(c, T_IO, on_keep_alive_timeout,
                  s->config.keep_alive_timeout + s->config.keep_alive_timeout_buffer);
  while (c->pending_off < c->pending_len && (c->state == ST_IDLE || c->state == ST_READING)) {
    size_t used;
    enum http_parse_result r =
        conn_parse(c, c->pending + c->pending_off, c->pending_len - c->pending_off, &used);
    if (c->state == ST_CLOSING)
      return;
    if (r == HTTP_PARSE_ERROR) {
      conn_fail(c, c->request.error_status);
      break;
    }
    c->pending_off += (uint32_t)used;
    if (r == HTTP_PARSE_DONE && c->state == ST_HANDLING)
      handle_request(c);
  }
  if (c->state == ST_CLOSING)
    return;
  if (c->pending_off == c->pending_len)
    pending_free(c);
  if (closing) {
    if (c->state == ST_IDLE || c->state == ST_READING)
      conn_close(c, s->shutting_down ? CLOSE_SHUTDOWN : CLOSE_PEER);
    return;
  }
  if (!c->reading && c->pending_len - c->pending_off <= PENDING_MAX && conn_read_start(c) != 0)
    conn_close(c, CLOSE_PEER);
}

/* ---- Connections ------------------------------------------------------------ */

static void on_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buf) {
  conn_t *c = handle->data;
  (void)suggested;
  *buf = uv_buf_init(c->server->read_buffer, sizeof c->server->read_buffer);
}

/* The client shut down its side: answer what it asked for, then close. */
static void conn_on_eof(conn_t *c) {
  c->peer_ended = 1;
  c->reading = 0; /* libuv stopped reading */
  switch (c->state) {
  case ST_LINGERING:
    conn_close(c, (enum http_close_reason)c->close_reason);
    break;
  case ST_READING: /* a request cut short, or none */
  case ST_IDLE:
    conn_close(c, CLOSE_PEER);
    break;
  default: /* HANDLING, WRITING, DRAINING: the answers come, then the close */
    break;
  }
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf) {
  conn_t *c = stream->data;
  http_server_t *s = c->server;
  if (nread == UV_EOF) {
    conn_on_eof(c);
    return;
  }
  if (nread < 0) {
    conn_close(c, CLOSE_PEER);
    return;
  }
  s->counters.received += (uint64_t)nread;
  conn_feed(c, buf->base, (size_t)nread);
}

static int conn_read_start(conn_t *c) {
  int r;
  if (c->peer_ended)
    return 0;
  r = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
  c->reading = r == 0;
  return r;
}

static void on_handle_closed(uv_handle_t *handle) {
  conn_t *c = handle->data;
  http_server_t *s = c->server;
  if (--c->handles_open > 0)
    return;
  s->counters.open--;
  free(c);
  maybe_finish_shutdown(s);
}

static void conn_close(conn_t *c, enum http_close_reason reason) {
  http_server_t *s = c->server;
  if (c->state == ST_CLOSING)
    return;
  c->state = ST_CLOSING;
  s->counters.closed[reason]++;
  timeout_stop(c, T_HEADERS);
  timeout_stop(c, T_REQUEST);
  timeout_stop(c, T_IO);
  if (c->job != NULL) {
    delay_abandon(c->job);
    c->job = NULL;
  }
  pending_free(c);
  if (c->prev != NULL)
    c->prev->next = c->next;
  else
    s->connections = c->next;
  if (c->next != NULL)
    c->next->prev = c->prev;
  c->handles_open = 1;
  for (int i = 0; i < CONN_TIMERS; i++)
    c->handles_open =
        (uint8_t)(c->handles_open + http_timer_close(conn_timer(c, i), on_handle_closed));
  uv_close((uv_handle_t *)&c->tcp, on_handle_closed);
}

static void on_accept_retry(uvtw_timer_t *timer);

static conn_t *conn_alloc(http_server_t *s) {
  if (s->config.fail_accept_allocs > 0) {
    s->config.fail_accept_allocs--;
    return NULL;
  }
  return calloc(1, CONN_SIZE + CONN_TIMERS * http_timer_size);
}

/* Sets up a new connection: taken from the listener (fd < 0), or `fd`,
 * taken from its backlog at shutdown. */
static void conn_open(http_server_t *s, conn_t *c, int fd) {
  c->server = s;
  uv_tcp_init(s->loop, &c->tcp);
  c->tcp.data = c;
  s->counters.accepted++;
  if (++s->counters.open > s->counters.open_peak)
    s->counters.open_peak = s->counters.open;
  for (int i = 0; i < CONN_TIMERS; i++)
    http_timer_init(conn_timer(c, i), s->loop, s->wheel, c);
  http_request_init(&c->request, &s->limits);
  c->next = s->connections;
  if (s->connections != NULL)
    s->connections->prev = c;
  s->connections = c;
  c->state = ST_READING;
  c->close_reason = CLOSE_PEER;
  int r = fd < 0 ? uv_accept((uv_stream_t *)&s->listener, (uv_stream_t *)&c->tcp)
                 : uv_tcp_open(&c->tcp, fd);
  if (r != 0 && fd >= 0)
    close(fd); /* uv_tcp_open failed: the handle does not own it */
  if (r != 0 || conn_read_start(c) != 0) {
    conn_close(c, CLOSE_PEER);
    return;
  }
  uv_tcp_nodelay(&c->tcp, 1);
  /* libuv accepts in a loop on one cached uv_now(): a connection that came
   * in while a burst was being accepted would otherwise start its timeouts
   * a little before it existed. */
  uv_update_time(s->loop);
  timeout_start(c, T_HEADERS, on_headers_timeout, s->config.headers_timeout);
  timeout_start(c, T_REQUEST, on_request_timeout, s->config.request_timeout);
}

/* Takes the connection waiting in the listener. Without memory for it, the
 * connection stays in the listener (libuv stops polling it meanwhile, so
 * nothing spins) and the accept is tried again a little later. */
static void accept_one(http_server_t *s) {
  conn_t *c = conn_alloc(s);
  if (c == NULL) {
    s->counters.accept_nomem++;
    s->accept_waiting = 1;
    if (!uvtw_timer_is_active(&s->accept_retry_timer))
      uvtw_timer_start(&s->accept_retry_timer, on_accept_retry, ACCEPT_RETRY_MS, 0);
    return;
  }
  s->accept_waiting = 0;
  conn_open(s, c, -1);
}

/* Whether bytes from the client wait in the socket, unread. */
static int bytes_waiting(uv_os_fd_t fd) {
  int n = 0;
  return ioctl(fd, FIONREAD, &n) == 0 && n > 0;
}

static int conn_bytes_waiting(conn_t *c) {
  uv_os_fd_t fd;
  return uv_fileno((uv_handle_t *)&c->tcp, &fd) == 0 && bytes_waiting(fd);
}

/* At shutdown, before the listener closes: takes every connection still in
 * its backlog, whose clients connected, and may have sent a request, while
 * the loop was busy; closing the listener would reset them. One whose
 * request cannot be served for want of memory counts in drain_dropped. */
static void accept_backlog(http_server_t *s) {
  uv_os_fd_t listen_fd;
  int fd;
  if (s->accept_waiting)
    accept_one(s); /* the one libuv took from the backlog already */
  if (uv_fileno((uv_handle_t *)&s->listener, &listen_fd) != 0)
    return;
  while ((fd = accept(listen_fd, NULL, NULL)) >= 0) {
    conn_t *c = conn_alloc(s);
    if (c != NULL) {
      conn_open(s, c, fd);
      continue;
    }
    s->counters.accept_nomem++;
    s->counters.drain_dropped += bytes_waiting(fd);
    close(fd);
  }
}

static void on_accept_retry(uvtw_timer_t *timer) {
  http_server_t *s = timer->data;
  if (s->accept_waiting && !s->shutting_down)
    accept_one(s);
}

static void on_connection(uv_stream_t *listener, int status) {
  http_server_t *s = listener->data;
  if (status < 0) {
    /* EMFILE/ENFILE: libuv has already taken the connection and closed it
     * (its reserve descriptor), so the listener is clear. */
    if (s->counters.accept_errors++ == 0)
      fprintf(stderr, "http_server: accept: %s (counted in accept_errors)\n", uv_strerror(status));
    return;
  }
  accept_one(s);
}

/* ---- Shutdown --------------------------------------------------------------- */

static void on_wheel_closed(uvtw_wheel_t *w, void *arg) {
  http_server_t *s = arg;
  (void)w;
  s->wheel = NULL;
}

/* A request has arrived (in part or in full) and has no answer written yet. */
static int conn_in_flight(const conn_t *c) {
  return c->state == ST_HANDLING || c->state == ST_WRITING || c->state == ST_DRAINING ||
         (c->state == ST_READING && c->request_started);
}

/* Closes the wheel once no connection and no work item can touch it. */
static void maybe_finish_shutdown(http_server_t *s) {
  if (!s->shutting_down || s->wheel_closing || s->counters.open > 0 ||
      s->counters.delay_in_flight > 0)
    return;
  s->wheel_closing = 1;
  uvtw_timer_stop(&s->grace_timer);
  uvtw_timer_stop(&s->accept_retry_timer);
  loop_watch_stop(&s->watch);
  uvtw_wheel_stats(s->wheel, &s->wheel_final);
  uvtw_wheel_close(s->wheel, on_wheel_closed, s);
}

static void drop_all(http_server_t *s) {
  while (s->connections != NULL) {
    if (conn_in_flight(s->connections) || conn_bytes_waiting(s->connections))
      s->counters.drain_dropped++; /* a request arrived, read or not */
    conn_close(s->connections, CLOSE_SHUTDOWN);
  }
}

static void on_grace_over(uvtw_timer_t *timer) {
  http_server_t *s = timer->data;
  fprintf(stderr, "http_server: shutdown grace period (%" PRIu64 " ms) over\n",
          s->config.shutdown_grace);
  drop_all(s);
  maybe_finish_shutdown(s);
}

/* Stop accepting, close idle connections, let requests in flight finish
 * within the grace period. */
void http_server_shutdown(http_server_t *s) {
  conn_t *c, *next;
  if (s->shutting_down)
    return;
  s->shutting_down = 1;
  accept_backlog(s);
  uv_close((uv_handle_t *)&s->listener, NULL);
  uvtw_timer_stop(&s->accept_retry_timer);
  loop_watch_stop(&s->watch); /* it watches a server that takes no new requests */
  /* Idle connections close, but not one whose next request has reached
   * the machine and waits unread: it is answered. */
  for (c = s->connections; c != NULL; c = next) {
    next = c->next;
    if ((c->state == ST_IDLE || (c->state == ST_READING && !c->request_started)) &&
        !conn_bytes_waiting(c))
      conn_close(c, CLOSE_SHUTDOWN);
  }
  if (s->config.shutdown_grace > 0)
    uvtw_timer_start(&s->grace_timer, on_grace_over, s->config.shutdown_grace, 0);
  else
    drop_all(s);
  maybe_finish_shutdown(s);
}

void http_server_shutdown_now(http_server_t *s) {
  http_server_shutdown(s);
  if (s->wheel_closing)
    return;
  drop_all(s);
  maybe_finish_shutdown(s);
}

/* ---- Starting --------------------------------------------------------------- */

void http_server_config_init(http_server_config_t *c) {
  memset(c, 0, sizeof *c);
  c->headers_timeout = 60000;
  c->request_timeout = 300000;
  c->keep_alive_timeout = 5000;
  c->keep_alive_timeout_buffer = 1000;
  c->send_timeout = 30000;
  c->shutdown_grace = 10000;
  c->max_header_size = 16384;
  c->max_headers_count = 2000;
  c->max_body_size = 1048576;
  c->sample_loop = 1;
  c->retry_after = 10;
  c->host = "127.0.0.1";
  c->listen_fd = -1;
}

/* Binds host:port, or opens the socket given, then listens. */
static int listen_on(http_server_t *s) {
  struct sockaddr_storage addr;
  int namelen = sizeof addr;
  int r;
  if (s->config.listen_fd >= 0) {
    r = uv_tcp_open(&s->listener, (uv_os_sock_t)s->config.listen_fd);
    if (r != 0)
      close(s->config.listen_fd); /* the server owns it, failure included */
  } else {
    if (strchr(s->config.host, ':') != NULL)
      r = uv_ip6_addr(s->config.host, s->config.port, (struct sockaddr_in6 *)&addr);
    else
      r = uv_ip4_addr(s->config.host, s->config.port, (struct sockaddr_in *)&addr);
    if (r == 0)
      r = uv_tcp_bind(&s->listener, (const struct sockaddr *)&addr, 0);
  }
  s->listener.data = s;
  if (r == 0)
    r = uv_listen((uv_stream_t *)&s->listener, 4096, on_connection);
  if (r == 0)
    r = uv_tcp_getsockname(&s->listener, (struct sockaddr *)&addr, &namelen);
  if (r != 0) {
    fprintf(stderr, "http_server: cannot listen on %s:%d: %s\n", s->config.host, s->config.port,
            uv_strerror(r));
    return r;
  }
  if (addr.ss_family == AF_INET6)
    s->listening_port = ntohs(((struct sockaddr_in6 *)&addr)->sin6_port);
  else
    s->listening_port = ntohs(((struct sockaddr_in *)&addr)->sin_port);
  return 0;
}

int http_server_start(http_server_t **server, uv_loop_t *loop, const http_server_config_t *config,
                      const uvtw_options_t *wheel_options) {
  http_server_t *s;
  int r, manual;
  *server = NULL;
  if (http_timer_check(wheel_options) != 0) {
    if (config->listen_fd >= 0)
      close(config->listen_fd);
    return UV_ENOTSUP; /* the connection timers would run on the loop's clock */
  }
  s = calloc(1, sizeof *s);
  if (s == NULL) {
    r = UV_ENOMEM;
  } else {
    s->loop = loop;
    s->config = *config;
    r = uvtw_wheel_new(loop, wheel_options, &s->wheel);
  }
  if (r != 0) {
    fprintf(stderr, "http_server: cannot start: %s\n", uv_strerror(r));
    if (config->listen_fd >= 0)
      close(config->listen_fd);
    free(s);
    return r;
  }
  s->limits.max_header_size = config->max_header_size;
  s->limits.max_headers_count = config->max_headers_count;
  s->limits.max_body_size = config->max_body_size;
  uvtw_timer_init(s->wheel, &s->accept_retry_timer);
  uvtw_timer_init(s->wheel, &s->grace_timer);
  s->accept_retry_timer.data = s;
  s->grace_timer.data = s;
  manual = wheel_options != NULL && wheel_options->manual_clock;
  loop_watch_start(&s->watch, s->wheel, config->max_loop_delay,
                   config->max_loop_delay > 0 || (config->sample_loop && !manual),
                   &s->counters.shedding);
  signal(SIGPIPE, SIG_IGN); /* a peer that went away is an error code, not a signal */
  uv_tcp_init(loop, &s->listener);
  *server = s;
  r = listen_on(s);
  if (r != 0)
    http_server_shutdown(s); /* the same orderly teardown, run by the loop */
  return r;
}

void http_server_free(http_server_t *s) {
  assert(s == NULL || s->wheel == NULL);
  free(s);
}

int http_server_port(const http_server_t *s) {
  return s->listening_port;
}

uvtw_wheel_t *http_server_wheel(const http_server_t *s) {
  return s->wheel;
}

const http_server_counters_t *http_server_counters(const http_server_t *s) {
  return &s->counters;
}
