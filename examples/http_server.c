/* http_server: an HTTP/1.1 keep-alive server on libuv TCP with the three
 * timeouts of Node's http.Server, each one timer per connection on a uvtw
 * wheel (or, built with -DUSE_UV_TIMER, one uv_timer_t per timeout, for
 * comparison).
 *
 *   headersTimeout   (default 60 s)  the whole request head must arrive in
 *                                    time: a client trickling header bytes
 *                                    (slowloris) is cut off with a 408.
 *   requestTimeout   (default 300 s) the whole request, body included.
 *   keepAliveTimeout (default 5 s)   idle time allowed between requests.
 *
 * Both request timeouts count from the moment the connection is accepted
 * (first request) or from the first byte of the next request (keep-alive);
 * the keep-alive timeout counts from the moment the previous response was
 * written. 0 disables a timeout, as in Node.
 *
 * Routes:
 *   GET /              "hello\n"
 *   GET /delay?ms=N    answers after N ms. The delay runs on the thread pool:
 *                      a work item (uv_queue_work) renders the body on a
 *                      worker thread and schedules the answer's deadline on
 *                      the wheel from that thread (uvtw_schedule + ticket).
 *                      If the connection closes first the ticket is
 *                      cancelled; every ticket is released exactly once.
 *   GET /stats         the counters below as one line of key=value pairs
 *
 * SIGINT/SIGTERM: stop accepting, close every connection, wait for work
 * items in flight, print the counters (one `stats ...` line on stdout),
 * close the wheel and exit 0 with everything freed.
 *
 * Requests on one connection are handled one at a time, in order: bytes
 * that arrive while a request is being answered (pipelining) are kept and
 * parsed once the response is written.
 *
 * Parser: llhttp (Node's own parser) when built against Debian's
 * node-llhttp sources, else libhttp-parser; see the adapter below. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* uv.h needs POSIX types under -std=c11 */
#endif
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <uv.h>

#include "uvtw.h"

#ifdef HTTP_PARSER_LLHTTP
#include <llhttp.h>
#else
#include <http_parser.h>
#endif

#define container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

/* ---- Options and counters ------------------------------------------------ */

static struct {
  uint64_t headers_timeout;
  uint64_t request_timeout;
  uint64_t keep_alive_timeout;
  const char *host;
  int port;
} options = {60000, 300000, 5000, "127.0.0.1", 0};

enum close_reason {
  CLOSE_HEADERS_TIMEOUT,
  CLOSE_REQUEST_TIMEOUT,
  CLOSE_KEEPALIVE_TIMEOUT,
  CLOSE_PEER,           /* EOF or error from the client */
  CLOSE_NOT_KEEPALIVE,  /* Connection: close, HTTP/1.0 */
  CLOSE_BAD_REQUEST,    /* the parser refused the bytes */
  CLOSE_SHUTDOWN,       /* SIGINT/SIGTERM */
  CLOSE_REASONS
};

static const char *const close_reason_names[CLOSE_REASONS] = {
    "closed_headers_timeout", "closed_request_timeout", "closed_keepalive_timeout",
    "closed_by_peer",         "closed_not_keepalive",   "closed_bad_request",
    "closed_shutdown"};

static struct {
  uint64_t accepted, open, open_peak;
  uint64_t requests;       /* responses written in full */
  uint64_t closed[CLOSE_REASONS];
  uint64_t timers_armed, timers_armed_peak;
  uint64_t early_fires;    /* timeouts that fired before uv_now() reached their deadline */
  uint64_t late_max_ms;    /* largest uv_now() - deadline seen at a timeout */
  uint64_t delay_scheduled, delay_fired, delay_cancelled, delay_failed;
} counters;

/* ---- Per-connection timeouts: a uvtw timer, or a uv_timer_t --------------- */

#ifdef USE_UV_TIMER
typedef uv_timer_t conn_timer_t;
#define TIMER_IMPL "uv_timer"
#else
typedef uvtw_timer_t conn_timer_t;
#define TIMER_IMPL "uvtw"
#endif
typedef void (*conn_timer_cb)(conn_timer_t *timer);

typedef struct timeout_s {
  conn_timer_t handle;
  uint64_t deadline; /* uv_now() + timeout at the last start: checks never-early */
} timeout_t;

/* ---- HTTP parser adapter ---------------------------------------------------- */

#ifdef HTTP_PARSER_LLHTTP
typedef llhttp_t parser_t;
#define PARSER_NAME "llhttp"
#else
typedef http_parser parser_t;
#define PARSER_NAME "http_parser"
#endif

enum conn_state {
  ST_READING,  /* waiting for (the rest of) a request; headers/request timeouts armed */
  ST_IDLE,     /* between requests; keep-alive timeout armed */
  ST_HANDLING, /* request complete, answer not yet ready (/delay) */
  ST_WRITING,  /* answer being written; connection stays open */
  ST_DRAINING, /* last answer being written; then close */
  ST_CLOSING   /* uv_close called */
};

#define URL_MAX 64
#define PENDING_MAX (64 * 1024) /* bytes kept while a request is answered */

typedef struct delay_job_s delay_job_t;

typedef struct conn_s {
  uv_tcp_t tcp;
  parser_t parser;
  timeout_t headers_timeout, request_timeout, keep_alive_timeout;
  struct conn_s *prev, *next; /* all open connections, for shutdown */
  delay_job_t *job;           /* the /delay answer in progress, if any */
  char *pending;              /* unparsed bytes received while answering */
  uint32_t pending_len;
  uint8_t state;
  uint8_t keep_alive;         /* the request being answered allows another */
  uint8_t reading;
  uint8_t url_len;
  char url[URL_MAX];
  enum close_reason close_reason;
#ifdef USE_UV_TIMER
  int handles_open; /* tcp + three timers; freed when all are closed */
#endif
} conn_t;

/* A /delay answer: rendered on a worker thread, sent when its task is due. */
struct delay_job_s {
  uv_work_t work;
  conn_t *conn;            /* loop thread only; NULL once the connection closed */
  uint64_t delay_ms;       /* set before queueing; read by the worker */
  uint64_t requested_ns;   /* uv_hrtime() when the request was complete */
  uvtw_ticket_t *ticket;   /* written by the worker, read by the loop only after after_work */
  int schedule_status;     /* likewise */
  int work_done;           /* loop thread: after_work ran */
  int task_done;           /* loop thread: the task callback ran */
  size_t body_len;
  char body[64];           /* written by the worker before uvtw_schedule */
};

static uv_loop_t *loop;
static uvtw_wheel_t *wheel;
static uv_tcp_t server;
static uv_signal_t sigint_handle, sigterm_handle;
static conn_t *connections;     /* list head */
static uint64_t work_in_flight; /* delay jobs whose after_work has not run */
static int shutting_down, wheel_closing;

static void conn_close(conn_t *c, enum close_reason reason);
static void conn_feed(conn_t *c, const char *data, size_t len);
static void maybe_finish_shutdown(void);

/* ---- Timeouts ------------------------------------------------------------- */

static void timeout_init(conn_t *c, timeout_t *t) {
#ifdef USE_UV_TIMER
  uv_timer_init(loop, &t->handle);
#else
  uvtw_timer_init(wheel, &t->handle);
#endif
  t->handle.data = c;
  t->deadline = 0;
}

static int timeout_active(const timeout_t *t) {
#ifdef USE_UV_TIMER
  return uv_is_active((const uv_handle_t *)&t->handle);
#else
  return uvtw_timer_is_active(&t->handle);
#endif
}

/* Arms (or re-arms) the timeout; ms == 0 leaves it disarmed (disabled). */
static void timeout_start(timeout_t *t, conn_timer_cb cb, uint64_t ms) {
  int was_active = timeout_active(t);
  int r;
  if (ms == 0)
    return;
  t->deadline = uv_now(loop) + ms;
#ifdef USE_UV_TIMER
  r = uv_timer_start(&t->handle, cb, ms, 0);
#else
  r = uvtw_timer_start(&t->handle, cb, ms, 0);
#endif
  if (r != 0) {
    fprintf(stderr, "http_server: timer start: %s\n", uv_strerror(r));
    return;
  }
  if (!was_active && ++counters.timers_armed > counters.timers_armed_peak)
    counters.timers_armed_peak = counters.timers_armed;
}

static void timeout_stop(timeout_t *t) {
  if (!timeout_active(t))
    return;
#ifdef USE_UV_TIMER
  uv_timer_stop(&t->handle);
#else
  uvtw_timer_stop(&t->handle);
#endif
  counters.timers_armed--;
}

/* Bookkeeping at the top of every timeout callback (the timer is one-shot,
 * so it is already inactive). */
static void timeout_fired(timeout_t *t) {
  uint64_t now = uv_now(loop);
  counters.timers_armed--;
  if (now < t->deadline)
    counters.early_fires++;
  else if (now - t->deadline > counters.late_max_ms)
    counters.late_max_ms = now - t->deadline;
}

/* ---- Stats ---------------------------------------------------------------- */

static long rss_kib(void) {
  long pages = 0, resident = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (f == NULL)
    return -1;
  if (fscanf(f, "%ld %ld", &pages, &resident) != 2)
    resident = -1;
  fclose(f);
  return resident < 0 ? -1 : resident * (sysconf(_SC_PAGESIZE) / 1024);
}

/* One line of key=value pairs (no newline). */
static size_t format_stats(char *out, size_t size) {
  uvtw_stats_t ws;
  size_t n = 0;
  int i;
  uvtw_wheel_stats(wheel, &ws);
#define PUT(...)                                                                         \
  do {                                                                                   \
    int w_ = snprintf(out + n, n < size ? size - n : 0, __VA_ARGS__);                    \
    if (w_ > 0)                                                                          \
      n += (size_t)w_;                                                                   \
  } while (0)
  PUT("timers=%s parser=%s", TIMER_IMPL, PARSER_NAME);
  PUT(" headers_timeout_ms=%" PRIu64 " request_timeout_ms=%" PRIu64
      " keep_alive_timeout_ms=%" PRIu64,
      options.headers_timeout, options.request_timeout, options.keep_alive_timeout);
  PUT(" accepted=%" PRIu64 " open=%" PRIu64 " open_peak=%" PRIu64 " requests=%" PRIu64,
      counters.accepted, counters.open, counters.open_peak, counters.requests);
  for (i = 0; i < CLOSE_REASONS; i++)
    PUT(" %s=%" PRIu64, close_reason_names[i], counters.closed[i]);
  PUT(" timers_armed=%" PRIu64 " timers_armed_peak=%" PRIu64 " early_fires=%" PRIu64
      " late_max_ms=%" PRIu64,
      counters.timers_armed, counters.timers_armed_peak, counters.early_fires,
      counters.late_max_ms);
  PUT(" delay_scheduled=%" PRIu64 " delay_fired=%" PRIu64 " delay_cancelled=%" PRIu64
      " delay_failed=%" PRIu64,
      counters.delay_scheduled, counters.delay_fired, counters.delay_cancelled,
      counters.delay_failed);
  PUT(" conn_bytes=%zu timer_bytes=%zu rss_kib=%ld", sizeof(conn_t), sizeof(conn_timer_t),
      rss_kib());
  PUT(" wheel_active=%" PRIu64 " wheel_started=%" PRIu64 " wheel_stopped=%" PRIu64
      " wheel_fired=%" PRIu64 " wheel_cascaded=%" PRIu64 " wheel_wakeups=%" PRIu64
      " wheel_wasted_wakeups=%" PRIu64 " wheel_remote_batches=%" PRIu64
      " wheel_late_max_ms=%" PRIu64,
      ws.active, ws.started, ws.stopped, ws.fired, ws.cascaded, ws.wakeups,
      ws.wasted_wakeups, ws.remote_batches, ws.late_max_ms);
#undef PUT
  return n < size ? n : size - 1;
}

/* ---- Writing responses ---------------------------------------------------- */

typedef struct write_req_s {
  uv_write_t req;
  conn_t *conn;
  char data[];
} write_req_t;

static void conn_resume(conn_t *c);
static int conn_read_start(conn_t *c);

static void on_write(uv_write_t *req, int status) {
  write_req_t *w = container_of(req, write_req_t, req);
  conn_t *c = w->conn;
  free(w);
  if (c->state == ST_CLOSING)
    return; /* cancelled by uv_close */
  if (status < 0) {
    conn_close(c, CLOSE_PEER);
    return;
  }
  if (c->state == ST_DRAINING) {
    conn_close(c, c->close_reason);
    return;
  }
  assert(c->state == ST_WRITING);
  counters.requests++;
  if (!c->keep_alive) {
    conn_close(c, CLOSE_NOT_KEEPALIVE);
    return;
  }
  conn_resume(c);
}

/* Writes one response. `final` closes the connection once it is written. */
static void conn_respond(conn_t *c, int status, const char *reason, const char *body,
                         size_t body_len, int final) {
  static const char fmt[] = "HTTP/1.1 %d %s\r\n"
                            "Content-Type: text/plain\r\n"
                            "Content-Length: %zu\r\n"
                            "Connection: %s\r\n\r\n";
  size_t cap = sizeof fmt + 64 + strlen(reason) + body_len;
  write_req_t *w = malloc(sizeof *w + cap);
  uv_buf_t buf;
  int n, r;
  if (w == NULL) {
    conn_close(c, CLOSE_SHUTDOWN);
    return;
  }
  n = snprintf(w->data, cap, fmt, status, reason, body_len,
               final || !c->keep_alive ? "close" : "keep-alive");
  memcpy(w->data + n, body, body_len);
  w->conn = c;
  buf = uv_buf_init(w->data, (unsigned)(n + (int)body_len));
  if (final)
    c->state = ST_DRAINING;
  else
    c->state = ST_WRITING;
  r = uv_write(&w->req, (uv_stream_t *)&c->tcp, &buf, 1, on_write);
  if (r != 0) {
    free(w);
    conn_close(c, CLOSE_PEER);
  }
}

/* ---- Timeout callbacks ---------------------------------------------------- */

/* Headers or request timeout: like Node, answer 408 and close. */
static void request_timed_out(conn_t *c, enum close_reason reason) {
  static const char body[] = "request timeout\n";
  timeout_stop(&c->headers_timeout);
  timeout_stop(&c->request_timeout);
  c->close_reason = reason;
  if (c->reading) {
    uv_read_stop((uv_stream_t *)&c->tcp);
    c->reading = 0;
  }
  conn_respond(c, 408, "Request Timeout", body, sizeof body - 1, 1);
}

static void on_headers_timeout(conn_timer_t *timer) {
  conn_t *c = timer->data;
  timeout_fired(&c->headers_timeout);
  request_timed_out(c, CLOSE_HEADERS_TIMEOUT);
}

static void on_request_timeout(conn_timer_t *timer) {
  conn_t *c = timer->data;
  timeout_fired(&c->request_timeout);
  request_timed_out(c, CLOSE_REQUEST_TIMEOUT);
}

static void on_keep_alive_timeout(conn_timer_t *timer) {
  conn_t *c = timer->data;
  timeout_fired(&c->keep_alive_timeout);
  conn_close(c, CLOSE_KEEPALIVE_TIMEOUT);
}

/* ---- /delay: thread pool work + a cross-thread task ----------------------- */

static void delay_job_free(delay_job_t *job) {
  if (job->ticket != NULL)
    uvtw_ticket_release(job->ticket); /* the only release of this ticket */
  free(job);
}

/* Loop thread, when the deadline is due (status 0) or the wheel closed
 * (UV_ECANCELED). May run before or after delay_after_work. */
static void delay_due(void *arg, int status) {
  delay_job_t *job = arg;
  job->task_done = 1;
  if (status == 0)
    counters.delay_fired++;
  if (job->conn != NULL) {
    conn_t *c = job->conn;
    c->job = NULL;
    job->conn = NULL;
    if (status == 0)
      conn_respond(c, 200, "OK", job->body, job->body_len, 0);
    else
      conn_respond(c, 503, "Service Unavailable", "shutting down\n", 14, 1);
  }
  if (job->work_done)
    delay_job_free(job);
}

/* Worker thread: renders the answer and puts its deadline on the wheel. The
 * deadline counts from the request, not from when the pool got to it. */
static void delay_work(uv_work_t *req) {
  delay_job_t *job = container_of(req, delay_job_t, work);
  uint64_t waited_ms = (uv_hrtime() - job->requested_ns) / 1000000;
  uint64_t left = job->delay_ms > waited_ms ? job->delay_ms - waited_ms : 0;
  int n = snprintf(job->body, sizeof job->body, "delayed %" PRIu64 " ms\n", job->delay_ms);
  job->body_len = (size_t)n < sizeof job->body ? (size_t)n : sizeof job->body - 1;
  job->schedule_status = uvtw_schedule(wheel, left, delay_due, job, &job->ticket);
}

/* Loop thread, once delay_work returned (or was cancelled by uv_cancel). From
 * here on job->ticket may be read. */
static void delay_after_work(uv_work_t *req, int status) {
  delay_job_t *job = container_of(req, delay_job_t, work);
  job->work_done = 1;
  work_in_flight--;
  if (status == UV_ECANCELED) { /* never ran: no ticket; the connection is gone */
    assert(job->conn == NULL);
    counters.delay_cancelled++;
    delay_job_free(job);
  } else if (job->schedule_status != 0) {
    counters.delay_failed++;
    if (job->conn != NULL) {
      conn_t *c = job->conn;
      c->job = NULL;
      conn_respond(c, 503, "Service Unavailable", "cannot schedule\n", 16, 1);
    }
    delay_job_free(job);
  } else {
    counters.delay_scheduled++;
    if (job->task_done) {
      delay_job_free(job);
    } else if (job->conn == NULL) {
      /* The connection closed while the worker ran: withdraw the task. The
       * callback runs on this thread, so it cannot have started. */
      int r = uvtw_ticket_cancel(job->ticket);
      assert(r == 0);
      (void)r;
      counters.delay_cancelled++;
      delay_job_free(job);
    }
    /* else delay_due answers and frees it. */
  }
  maybe_finish_shutdown();
}

static void delay_start(conn_t *c, uint64_t ms) {
  delay_job_t *job = calloc(1, sizeof *job);
  int r;
  if (job == NULL) {
    conn_respond(c, 503, "Service Unavailable", "no memory\n", 10, 1);
    return;
  }
  job->conn = c;
  job->delay_ms = ms;
  job->requested_ns = uv_hrtime();
  r = uv_queue_work(loop, &job->work, delay_work, delay_after_work);
  if (r != 0) {
    free(job);
    conn_respond(c, 503, "Service Unavailable", "cannot queue\n", 13, 1);
    return;
  }
  work_in_flight++;
  c->job = job;
}

/* The connection is closing: its answer will never be sent. */
static void delay_abandon(delay_job_t *job) {
  job->conn = NULL;
  if (!job->work_done) {
    uv_cancel((uv_req_t *)&job->work); /* after_work sees UV_ECANCELED or cancels the ticket */
  } else if (!job->task_done) {
    int r = uvtw_ticket_cancel(job->ticket);
    assert(r == 0); /* the callback would have run on this thread */
    (void)r;
    counters.delay_cancelled++;
    delay_job_free(job);
  }
}

/* ---- Requests --------------------------------------------------------------- */

static void handle_request(conn_t *c) {
  static const char hello[] = "hello\n";
  static const char not_found[] = "not found\n";
  const char *url = c->url;
  if (strcmp(url, "/") == 0) {
    conn_respond(c, 200, "OK", hello, sizeof hello - 1, 0);
  } else if (strncmp(url, "/delay?ms=", 10) == 0) {
    char *end;
    unsigned long long ms = strtoull(url + 10, &end, 10);
    if (end == url + 10 || *end != '\0' || ms > 3600000)
      conn_respond(c, 400, "Bad Request", "bad ms\n", 7, 0);
    else
      delay_start(c, ms);
  } else if (strcmp(url, "/stats") == 0) {
    char body[2048];
    size_t n = format_stats(body, sizeof body - 1);
    body[n++] = '\n';
    conn_respond(c, 200, "OK", body, n, 0);
  } else {
    conn_respond(c, 404, "Not Found", not_found, sizeof not_found - 1, 0);
  }
}

static int on_message_begin(parser_t *p) {
  conn_t *c = p->data;
  c->url_len = 0;
  c->url[0] = '\0';
  if (c->state == ST_IDLE) { /* first byte of the next request */
    timeout_stop(&c->keep_alive_timeout);
    timeout_start(&c->headers_timeout, on_headers_timeout, options.headers_timeout);
    timeout_start(&c->request_timeout, on_request_timeout, options.request_timeout);
    c->state = ST_READING;
  }
  return 0;
}

static int on_url(parser_t *p, const char *at, size_t len) {
  conn_t *c = p->data;
  size_t room = URL_MAX - 1 - c->url_len;
  if (len > room)
    len = room; /* a truncated URL just does not match a route */
  memcpy(c->url + c->url_len, at, len);
  c->url_len = (uint8_t)(c->url_len + len);
  c->url[c->url_len] = '\0';
  return 0;
}

static int on_headers_complete(parser_t *p) {
  conn_t *c = p->data;
  timeout_stop(&c->headers_timeout);
  return 0;
}

#ifdef HTTP_PARSER_LLHTTP
static int on_message_complete(parser_t *p) {
  conn_t *c = p->data;
  timeout_stop(&c->request_timeout);
  c->keep_alive = (uint8_t)llhttp_should_keep_alive(p);
  c->state = ST_HANDLING;
  return HPE_PAUSED; /* one request at a time: the rest waits in c->pending */
}

static llhttp_settings_t parser_settings;

static void parser_setup(void) {
  llhttp_settings_init(&parser_settings);
  parser_settings.on_message_begin = on_message_begin;
  parser_settings.on_url = on_url;
  parser_settings.on_headers_complete = on_headers_complete;
  parser_settings.on_message_complete = on_message_complete;
}

static void parser_init(conn_t *c) {
  llhttp_init(&c->parser, HTTP_REQUEST, &parser_settings);
  c->parser.data = c;
}

/* Parses up to one complete request. Returns 1 when a request completed
 * (*used: bytes it took), 0 when all bytes were taken, -1 on a parse error. */
static int parser_feed(conn_t *c, const char *data, size_t len, size_t *used) {
  llhttp_errno_t e = llhttp_execute(&c->parser, data, len);
  if (e == HPE_OK) {
    *used = len;
    return 0;
  }
  if (e == HPE_PAUSED) {
    *used = (size_t)(llhttp_get_error_pos(&c->parser) - data);
    llhttp_resume(&c->parser);
    return 1;
  }
  return -1;
}
#else
static int on_message_complete(parser_t *p) {
  conn_t *c = p->data;
  timeout_stop(&c->request_timeout);
  c->keep_alive = (uint8_t)http_should_keep_alive(p);
  c->state = ST_HANDLING;
  http_parser_pause(p, 1);
  return 0;
}

static http_parser_settings parser_settings;

static void parser_setup(void) {
  http_parser_settings_init(&parser_settings);
  parser_settings.on_message_begin = on_message_begin;
  parser_settings.on_url = on_url;
  parser_settings.on_headers_complete = on_headers_complete;
  parser_settings.on_message_complete = on_message_complete;
}

static void parser_init(conn_t *c) {
  http_parser_init(&c->parser, HTTP_REQUEST);
  c->parser.data = c;
}

static int parser_feed(conn_t *c, const char *data, size_t len, size_t *used) {
  *used = http_parser_execute(&c->parser, &parser_settings, data, len);
  if (HTTP_PARSER_ERRNO(&c->parser) == HPE_PAUSED) {
    http_parser_pause(&c->parser, 0);
    return 1;
  }
  return HTTP_PARSER_ERRNO(&c->parser) == HPE_OK ? 0 : -1;
}
#endif

/* Keeps bytes that arrive while a request is answered. */
static void conn_keep_pending(conn_t *c, const char *data, size_t len) {
  char *grown;
  if (len == 0)
    return;
  grown = realloc(c->pending, c->pending_len + len);
  if (grown == NULL) {
    conn_close(c, CLOSE_SHUTDOWN);
    return;
  }
  memcpy(grown + c->pending_len, data, len);
  c->pending = grown;
  c->pending_len += (uint32_t)len;
  if (c->pending_len > PENDING_MAX && c->reading) {
    uv_read_stop((uv_stream_t *)&c->tcp); /* back-pressure until it is parsed */
    c->reading = 0;
  }
}

static void conn_feed(conn_t *c, const char *data, size_t len) {
  size_t used;
  int r;
  if (c->state != ST_READING && c->state != ST_IDLE) {
    if (c->state != ST_CLOSING && c->state != ST_DRAINING)
      conn_keep_pending(c, data, len);
    return;
  }
  r = parser_feed(c, data, len, &used);
  if (r < 0) {
    static const char body[] = "bad request\n";
    timeout_stop(&c->headers_timeout);
    timeout_stop(&c->request_timeout);
    timeout_stop(&c->keep_alive_timeout);
    c->close_reason = CLOSE_BAD_REQUEST;
    conn_respond(c, 400, "Bad Request", body, sizeof body - 1, 1);
    return;
  }
  if (r == 1) {
    conn_keep_pending(c, data + used, len - used);
    if (c->state == ST_HANDLING)
      handle_request(c);
  }
}

/* The previous answer is written: wait for the next request. */
static void conn_resume(conn_t *c) {
  char *pending = c->pending;
  uint32_t pending_len = c->pending_len;
  c->state = ST_IDLE;
  timeout_start(&c->keep_alive_timeout, on_keep_alive_timeout, options.keep_alive_timeout);
  if (!c->reading && conn_read_start(c) != 0) {
    conn_close(c, CLOSE_PEER);
    return;
  }
  c->pending = NULL;
  c->pending_len = 0;
  if (pending != NULL) {
    conn_feed(c, pending, pending_len);
    free(pending);
  }
}

/* ---- Connections ------------------------------------------------------------ */

static char read_buffer[64 * 1024]; /* one loop thread: reads are parsed at once */

static void on_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buf) {
  (void)handle;
  (void)suggested;
  *buf = uv_buf_init(read_buffer, sizeof read_buffer);
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf) {
  conn_t *c = stream->data;
  if (nread < 0) {
    conn_close(c, CLOSE_PEER);
    return;
  }
  conn_feed(c, buf->base, (size_t)nread);
}

static int conn_read_start(conn_t *c) {
  int r = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
  c->reading = r == 0;
  return r;
}

static void conn_free(conn_t *c) {
  counters.open--;
  free(c);
  maybe_finish_shutdown();
}

#ifdef USE_UV_TIMER
static void on_handle_closed(uv_handle_t *handle) {
  conn_t *c = handle->data;
  if (--c->handles_open == 0)
    conn_free(c);
}
#else
static void on_handle_closed(uv_handle_t *handle) {
  conn_free(handle->data);
}
#endif

static void conn_close(conn_t *c, enum close_reason reason) {
  if (c->state == ST_CLOSING)
    return;
  c->state = ST_CLOSING;
  counters.closed[reason]++;
  timeout_stop(&c->headers_timeout);
  timeout_stop(&c->request_timeout);
  timeout_stop(&c->keep_alive_timeout);
  if (c->job != NULL) {
    delay_abandon(c->job);
    c->job = NULL;
  }
  free(c->pending);
  c->pending = NULL;
  if (c->prev != NULL)
    c->prev->next = c->next;
  else
    connections = c->next;
  if (c->next != NULL)
    c->next->prev = c->prev;
#ifdef USE_UV_TIMER
  c->handles_open = 4;
  uv_close((uv_handle_t *)&c->headers_timeout.handle, on_handle_closed);
  uv_close((uv_handle_t *)&c->request_timeout.handle, on_handle_closed);
  uv_close((uv_handle_t *)&c->keep_alive_timeout.handle, on_handle_closed);
#endif
  uv_close((uv_handle_t *)&c->tcp, on_handle_closed);
}

static void on_connection(uv_stream_t *listener, int status) {
  conn_t *c;
  if (status < 0) {
    fprintf(stderr, "http_server: accept: %s\n", uv_strerror(status));
    return;
  }
  c = calloc(1, sizeof *c);
  if (c == NULL)
    return;
  uv_tcp_init(loop, &c->tcp);
  c->tcp.data = c;
  counters.accepted++;
  if (++counters.open > counters.open_peak)
    counters.open_peak = counters.open;
  timeout_init(c, &c->headers_timeout);
  timeout_init(c, &c->request_timeout);
  timeout_init(c, &c->keep_alive_timeout);
  parser_init(c);
  c->next = connections;
  if (connections != NULL)
    connections->prev = c;
  connections = c;
  c->state = ST_READING;
  if (uv_accept(listener, (uv_stream_t *)&c->tcp) != 0 || conn_read_start(c) != 0) {
    conn_close(c, CLOSE_PEER);
    return;
  }
  uv_tcp_nodelay(&c->tcp, 1);
  /* libuv accepts in a loop on one cached uv_now(): a connection that came
   * in while a burst was being accepted would otherwise start its timeouts
   * a little before it existed. */
  uv_update_time(loop);
  timeout_start(&c->headers_timeout, on_headers_timeout, options.headers_timeout);
  timeout_start(&c->request_timeout, on_request_timeout, options.request_timeout);
}

/* ---- Shutdown --------------------------------------------------------------- */

static void on_wheel_closed(uvtw_wheel_t *w, void *arg) {
  (void)w;
  (void)arg;
  wheel = NULL;
}

/* Closes the wheel once no connection and no work item can touch it. */
static void maybe_finish_shutdown(void) {
  char line[2048];
  if (!shutting_down || wheel_closing || counters.open > 0 || work_in_flight > 0)
    return;
  wheel_closing = 1;
  format_stats(line, sizeof line);
  printf("stats %s\n", line);
  fflush(stdout);
  uvtw_wheel_close(wheel, on_wheel_closed, NULL);
}

static void on_signal(uv_signal_t *handle, int signum) {
  (void)handle;
  (void)signum;
  if (shutting_down)
    return;
  shutting_down = 1;
  uv_close((uv_handle_t *)&server, NULL);
  uv_close((uv_handle_t *)&sigint_handle, NULL);
  uv_close((uv_handle_t *)&sigterm_handle, NULL);
  while (connections != NULL)
    conn_close(connections, CLOSE_SHUTDOWN);
  maybe_finish_shutdown();
}

/* ---- main ------------------------------------------------------------------- */

static void usage(void) {
  fprintf(stderr, "usage: http_server [--port N] [--host ADDR] [--headers-timeout MS]\n"
                  "                   [--request-timeout MS] [--keep-alive-timeout MS]\n");
  exit(2);
}

static uint64_t parse_ms(const char *s) {
  char *end;
  unsigned long long v;
  if (s == NULL)
    usage();
  errno = 0;
  v = strtoull(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0')
    usage();
  return v;
}

static void parse_args(int argc, char **argv) {
  int i;
  for (i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--headers-timeout") == 0)
      options.headers_timeout = parse_ms(v);
    else if (strcmp(a, "--request-timeout") == 0)
      options.request_timeout = parse_ms(v);
    else if (strcmp(a, "--keep-alive-timeout") == 0)
      options.keep_alive_timeout = parse_ms(v);
    else if (strcmp(a, "--port") == 0) {
      uint64_t port = parse_ms(v);
      if (port > 65535)
        usage();
      options.port = (int)port;
    } else if (strcmp(a, "--host") == 0 && v != NULL)
      options.host = v;
    else
      usage();
    i++;
  }
}

/* Best effort: many idle connections need many descriptors. */
static void raise_fd_limit(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

static int listen_on(void) {
  struct sockaddr_storage addr;
  int namelen = sizeof addr;
  char host[INET6_ADDRSTRLEN];
  int port, r;
  if (strchr(options.host, ':') != NULL)
    r = uv_ip6_addr(options.host, options.port, (struct sockaddr_in6 *)&addr);
  else
    r = uv_ip4_addr(options.host, options.port, (struct sockaddr_in *)&addr);
  if (r == 0)
    r = uv_tcp_bind(&server, (const struct sockaddr *)&addr, 0);
  if (r == 0)
    r = uv_listen((uv_stream_t *)&server, 4096, on_connection);
  if (r == 0)
    r = uv_tcp_getsockname(&server, (struct sockaddr *)&addr, &namelen);
  if (r != 0) {
    fprintf(stderr, "http_server: cannot listen on %s:%d: %s\n", options.host, options.port,
            uv_strerror(r));
    return r;
  }
  if (addr.ss_family == AF_INET6) {
    uv_ip6_name((struct sockaddr_in6 *)&addr, host, sizeof host);
    port = ntohs(((struct sockaddr_in6 *)&addr)->sin6_port);
    printf("listening on [%s]:%d\n", host, port);
  } else {
    uv_ip4_name((struct sockaddr_in *)&addr, host, sizeof host);
    port = ntohs(((struct sockaddr_in *)&addr)->sin_port);
    printf("listening on %s:%d\n", host, port);
  }
  fflush(stdout);
  return 0;
}

int main(int argc, char **argv) {
  int r;
  parse_args(argc, argv);
  raise_fd_limit();
  loop = uv_default_loop();
  parser_setup();
  r = uvtw_wheel_new(loop, NULL, &wheel);
  if (r != 0) {
    fprintf(stderr, "http_server: uvtw_wheel_new: %s\n", uv_strerror(r));
    return 1;
  }
  signal(SIGPIPE, SIG_IGN); /* a peer that went away is an error code, not a signal */
  uv_tcp_init(loop, &server);
  uv_signal_init(loop, &sigint_handle);
  uv_signal_init(loop, &sigterm_handle);
  uv_signal_start(&sigint_handle, on_signal, SIGINT);
  uv_signal_start(&sigterm_handle, on_signal, SIGTERM);
  if (listen_on() != 0) {
    on_signal(NULL, 0); /* same orderly teardown */
    uv_run(loop, UV_RUN_DEFAULT);
    uv_loop_close(loop);
    return 1;
  }
  uv_run(loop, UV_RUN_DEFAULT);
  r = uv_loop_close(loop);
  if (r != 0) {
    fprintf(stderr, "http_server: uv_loop_close: %s\n", uv_strerror(r));
    return 1;
  }
  return 0;
}
