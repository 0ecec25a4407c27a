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
 * The server is a library (http_server.h): http_server_main.c is the
 * program, and test_http_timeouts.c runs it on a manual clock.
 *
 * Parser: llhttp (Node's own), from Debian's node-llhttp sources. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* uv.h needs POSIX types under -std=c11 */
#endif
#include <assert.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <unistd.h>

#include <llhttp.h>
#include <uv.h>

#include "http_server.h"

#define container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

/* ---- Options and counters ------------------------------------------------ */

static http_server_config_t config;
static http_server_counters_t counters;

#define LINGER_MS 2000      /* lingering close: the longest wait for the client's EOF */
#define ACCEPT_RETRY_MS 50  /* after a failed allocation at accept */
#define URL_MAX 64
#define PENDING_MAX (64 * 1024) /* bytes kept while a request is answered */
#define BYTES_MAX (1024 * 1024) /* the largest /bytes?n=N answer */

static const char *const close_reason_names[CLOSE_REASONS] = {
    "closed_headers_timeout", "closed_request_timeout", "closed_keepalive_timeout",
    "closed_send_timeout",    "closed_by_peer",         "closed_not_keepalive",
    "closed_bad_request",     "closed_no_memory",       "closed_shutdown"};

/* ---- The clock ------------------------------------------------------------ */

static uv_loop_t *loop;
static uvtw_wheel_t *wheel;

/* The time every timeout counts on: the wheel's. That is uv_now(loop) for a
 * wheel on the loop's clock (the program); under a manual clock (the tests)
 * it is the time the test has advanced the wheel to. */
static uint64_t now_ms(void) {
  return uvtw_wheel_now(wheel);
}

/* ---- Connection timers: the one seam between uvtw and uv_timer_t ----------
 * Built with -DUSE_UV_TIMER (http_server_uvtimer) each connection timer is a
 * uv_timer_t instead, for the benchmark's comparison; nothing else differs. */

#ifdef USE_UV_TIMER
typedef uv_timer_t conn_timer_t;
#define TIMER_IMPL "uv_timer"
static void ctimer_init(conn_timer_t *t, void *data) {
  uv_timer_init(loop, t);
  t->data = data;
}
static int ctimer_start(conn_timer_t *t, void (*cb)(conn_timer_t *), uint64_t ms) {
  return uv_timer_start(t, cb, ms, 0);
}
static void ctimer_stop(conn_timer_t *t) {
  uv_timer_stop(t);
}
static int ctimer_active(const conn_timer_t *t) {
  return uv_is_active((const uv_handle_t *)t);
}
/* Returns how many close callbacks will come for it (0 or 1). */
static int ctimer_close(conn_timer_t *t, uv_close_cb cb) {
  uv_close((uv_handle_t *)t, cb);
  return 1;
}
#else
typedef uvtw_timer_t conn_timer_t;
#define TIMER_IMPL "uvtw"
static void ctimer_init(conn_timer_t *t, void *data) {
  uvtw_timer_init(wheel, t);
  t->data = data;
}
static int ctimer_start(conn_timer_t *t, void (*cb)(conn_timer_t *), uint64_t ms) {
  return uvtw_timer_start(t, cb, ms, 0);
}
static void ctimer_stop(conn_timer_t *t) {
  uvtw_timer_stop(t);
}
static int ctimer_active(const conn_timer_t *t) {
  return uvtw_timer_is_active(t);
}
static int ctimer_close(conn_timer_t *t, uv_close_cb cb) {
  (void)cb;
  uvtw_timer_stop(t); /* an inactive uvtw timer holds nothing */
  return 0;
}
#endif

typedef struct timeout_s {
  conn_timer_t timer;
  uint64_t deadline; /* now_ms() + timeout at the last start: checks never-early */
} timeout_t;

/* ---- Connections ------------------------------------------------------------ */

enum conn_state { ST_READING, ST_IDLE, ST_HANDLING, ST_WRITING, ST_DRAINING, ST_LINGERING,
                  ST_CLOSING };

typedef struct delay_job_s delay_job_t;

typedef struct conn_s {
  uv_tcp_t tcp;
  llhttp_t parser;
  timeout_t headers_timeout, request_timeout;
  timeout_t io_timeout;       /* keep-alive (IDLE), send (WRITING, DRAINING), linger */
  struct conn_s *prev, *next; /* all open connections, for shutdown */
  delay_job_t *job;           /* the /delay answer in progress, if any */
  char *pending;              /* bytes received while answering: [pending_off, pending_len) */
  uint32_t pending_len, pending_off;
  uint32_t pending_cap;       /* bytes allocated for pending */
  uint32_t head_bytes;        /* URL, header names and values of the current head */
  uint32_t header_count;
  uint32_t body_bytes;
  uint8_t state;
  uint8_t keep_alive;         /* the request being answered allows another */
  uint8_t reading;
  uint8_t peer_ended;         /* EOF from the client: answer what it sent, then close */
  uint8_t request_started;    /* a byte of the current request has arrived */
  uint8_t method;             /* llhttp_method_t of the current request */
  uint8_t url_len;
  uint8_t url_flags;          /* URL_TRUNCATED, URL_SKIP_AUTHORITY */
  uint8_t expect_field;       /* matched length of "expect" in the header name; 0xff: no */
  uint8_t expect_value;       /* matched length of "100-continue" in its value; 0xff: no */
  uint8_t expect;             /* EXPECT_NONE, EXPECT_CONTINUE, EXPECT_OTHER */
  uint8_t close_reason;
  uint16_t error_status;      /* an error response decided inside a parser callback */
  uint8_t handles_open;       /* close callbacks still to come; freed at 0 */
  char url[URL_MAX];
} conn_t;

enum { URL_TRUNCATED = 1, URL_SKIP_AUTHORITY = 2 };
enum { EXPECT_NONE, EXPECT_CONTINUE, EXPECT_OTHER };

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

static uv_tcp_t server;
static uv_signal_t sigint_handle, sigterm_handle;
static uvtw_timer_t accept_retry_timer, grace_timer;
static int accept_waiting;      /* a connection waits in the listener for memory */
static conn_t *connections;     /* list head */
static uint64_t work_in_flight; /* delay jobs whose after_work has not run */
static int shutting_down, wheel_closing, exit_status;
static uint64_t shutdown_started_ms;
static llhttp_settings_t parser_settings;

static void conn_close(conn_t *c, enum http_close_reason reason);
static void conn_feed(conn_t *c, const char *data, size_t len);
static void conn_resume(conn_t *c);
static int conn_read_start(conn_t *c);
static void maybe_finish_shutdown(void);

/* ---- Timeouts ------------------------------------------------------------- */

static void timeout_init(conn_t *c, timeout_t *t) {
  ctimer_init(&t->timer, c);
  t->deadline = 0;
}

/* Arms (or re-arms) the timeout; ms == 0 leaves it disarmed (disabled). */
static void timeout_start(timeout_t *t, void (*cb)(conn_timer_t *), uint64_t ms) {
  int was_active = ctimer_active(&t->timer);
  int r;
  if (ms == 0)
    return;
  t->deadline = now_ms() + ms;
  r = ctimer_start(&t->timer, cb, ms);
  if (r != 0) {
    fprintf(stderr, "http_server: timer start: %s\n", uv_strerror(r));
    return;
  }
  if (!was_active && ++counters.timers_armed > counters.timers_armed_peak)
    counters.timers_armed_peak = counters.timers_armed;
}

static void timeout_stop(timeout_t *t) {
  if (!ctimer_active(&t->timer))
    return;
  ctimer_stop(&t->timer);
  counters.timers_armed--;
}

/* Bookkeeping at the top of every timeout callback (the timer is one-shot,
 * so it is already inactive). */
static void timeout_fired(timeout_t *t) {
  uint64_t now = now_ms();
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
  memset(&ws, 0, sizeof ws);
  if (wheel != NULL)
    uvtw_wheel_stats(wheel, &ws);
#define PUT(...)                                                                         \
  do {                                                                                   \
    int w_ = snprintf(out + n, n < size ? size - n : 0, __VA_ARGS__);                    \
    if (w_ > 0)                                                                          \
      n += (size_t)w_;                                                                   \
  } while (0)
  PUT("timers=%s parser=llhttp-%d.%d.%d", TIMER_IMPL, LLHTTP_VERSION_MAJOR,
      LLHTTP_VERSION_MINOR, LLHTTP_VERSION_PATCH);
  PUT(" headers_timeout_ms=%" PRIu64 " request_timeout_ms=%" PRIu64
      " keep_alive_timeout_ms=%" PRIu64 " keep_alive_timeout_buffer_ms=%" PRIu64
      " send_timeout_ms=%" PRIu64,
      config.headers_timeout, config.request_timeout, config.keep_alive_timeout,
      config.keep_alive_timeout_buffer, config.send_timeout);
  PUT(" accepted=%" PRIu64 " open=%" PRIu64 " open_peak=%" PRIu64 " accept_errors=%" PRIu64
      " accept_nomem=%" PRIu64 " requests=%" PRIu64,
      counters.accepted, counters.open, counters.open_peak, counters.accept_errors,
      counters.accept_nomem, counters.requests);
  for (i = 0; i < CLOSE_REASONS; i++)
    PUT(" %s=%" PRIu64, close_reason_names[i], counters.closed[i]);
  PUT(" received_bytes=%" PRIu64 " headers_timeouts=%" PRIu64 " request_timeouts=%" PRIu64,
      counters.received, counters.headers_timeouts, counters.request_timeouts);
  PUT(" linger_timeouts=%" PRIu64 " drain_answered=%" PRIu64 " drain_dropped=%" PRIu64
      " buffered_bytes=%" PRIu64 " buffered_bytes_peak=%" PRIu64,
      counters.linger_timeouts, counters.drain_answered, counters.drain_dropped,
      counters.buffered, counters.buffered_peak);
  PUT(" timers_armed=%" PRIu64 " timers_armed_peak=%" PRIu64 " early_fires=%" PRIu64
      " late_max_ms=%" PRIu64,
      counters.timers_armed, counters.timers_armed_peak, counters.early_fires,
      counters.late_max_ms);
  PUT(" delay_scheduled=%" PRIu64 " delay_fired=%" PRIu64 " delay_cancelled=%" PRIu64
      " delay_failed=%" PRIu64 " delay_in_flight=%" PRIu64,
      counters.delay_scheduled, counters.delay_fired, counters.delay_cancelled,
      counters.delay_failed, work_in_flight);
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
  int interim; /* 100 Continue: not the answer */
  size_t len;
  char data[];
} write_req_t;

static void on_send_timeout(conn_timer_t *timer);
static void on_linger_timeout(conn_timer_t *timer);
static void on_keep_alive_timeout(conn_timer_t *timer);

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
  timeout_start(&c->io_timeout, on_linger_timeout, LINGER_MS);
  if (!c->reading && conn_read_start(c) != 0)
    conn_close(c, (enum http_close_reason)c->close_reason);
}

static void on_write(uv_write_t *req, int status) {
  write_req_t *w = container_of(req, write_req_t, req);
  conn_t *c = w->conn;
  int interim = w->interim;
  counters.buffered -= w->len;
  free(w);
  if (c->state == ST_CLOSING)
    return; /* cancelled by uv_close */
  if (status < 0) {
    conn_close(c, CLOSE_PEER);
    return;
  }
  if (interim)
    return;
  timeout_stop(&c->io_timeout); /* the send timeout */
  counters.requests++;
  if (shutting_down)
    counters.drain_answered++;
  if (c->state == ST_DRAINING) {
    conn_finish(c);
    return;
  }
  assert(c->state == ST_WRITING);
  conn_resume(c);
}

static void buffered_add(size_t n) {
  counters.buffered += n;
  if (counters.buffered > counters.buffered_peak)
    counters.buffered_peak = counters.buffered;
}

static void pending_free(conn_t *c) {
  free(c->pending);
  counters.buffered -= c->pending_cap;
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
  buffered_add(len);
  if (!w->interim && uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp) > 0)
    timeout_start(&c->io_timeout, on_send_timeout, config.send_timeout);
  return 0;
}

/* Writes one response. `final` closes the connection once it is written.
 * A HEAD request gets the headers, Content-Length included, without the body. */
static void conn_respond(conn_t *c, int status, const char *reason, const char *body,
                         size_t body_len, int final) {
  static const char fmt[] = "HTTP/1.1 %d %s\r\n"
                            "Content-Type: text/plain\r\n"
                            "Content-Length: %zu\r\n"
                            "%s\r\n";
  char conn_header[64];
  size_t cap, n;
  write_req_t *w;
  int send_body = c->method != HTTP_HEAD;
  /* While shutting down, or after the client's EOF, the answer to the last
   * request received closes the connection. */
  if ((shutting_down || c->peer_ended) && c->pending_off == c->pending_len)
    final = 1;
  if (!c->keep_alive)
    final = 1;
  if (final)
    snprintf(conn_header, sizeof conn_header, "Connection: close\r\n");
  else if (config.keep_alive_timeout > 0)
    snprintf(conn_header, sizeof conn_header,
             "Connection: keep-alive\r\nKeep-Alive: timeout=%" PRIu64 "\r\n",
             config.keep_alive_timeout / 1000);
  else
    snprintf(conn_header, sizeof conn_header, "Connection: keep-alive\r\n");
  cap = sizeof fmt + 32 + strlen(reason) + strlen(conn_header) + body_len;
  w = malloc(sizeof *w + cap);
  if (w == NULL) {
    conn_close(c, CLOSE_NO_MEMORY);
    return;
  }
  w->interim = 0;
  n = (size_t)snprintf(w->data, cap, fmt, status, reason, body_len, conn_header);
  if (send_body) {
    memcpy(w->data + n, body, body_len);
    n += body_len;
  }
  if (final) {
    c->state = ST_DRAINING;
    if (c->close_reason == CLOSE_PEER) { /* the default: no timeout or error named one */
      if (shutting_down)
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

/* An error response that ends the connection. */
static void conn_fail(conn_t *c, int status) {
  const char *reason;
  char body[64];
  int n;
  switch (status) {
  case 405: reason = "Method Not Allowed"; break;
  case 408: reason = "Request Timeout"; break;
  case 413: reason = "Payload Too Large"; break;
  case 417: reason = "Expectation Failed"; break;
  case 431: reason = "Request Header Fields Too Large"; break;
  default: status = 400; reason = "Bad Request"; break;
  }
  timeout_stop(&c->headers_timeout);
  timeout_stop(&c->request_timeout);
  timeout_stop(&c->io_timeout);
  if (status != 408)
    c->close_reason = CLOSE_BAD_REQUEST;
  n = snprintf(body, sizeof body, "%d %s\n", status, reason);
  conn_respond(c, status, reason, body, (size_t)n, 1);
}

/* ---- Timeout callbacks ---------------------------------------------------- */

static void on_headers_timeout(conn_timer_t *timer) {
  conn_t *c = timer->data;
  timeout_fired(&c->headers_timeout);
  counters.headers_timeouts++;
  c->close_reason = CLOSE_HEADERS_TIMEOUT;
  conn_fail(c, 408); /* like Node: 408 and close */
}

static void on_request_timeout(conn_timer_t *timer) {
  conn_t *c = timer->data;
  timeout_fired(&c->request_timeout);
  counters.request_timeouts++;
  c->close_reason = CLOSE_REQUEST_TIMEOUT;
  conn_fail(c, 408);
}

static void on_keep_alive_timeout(conn_timer_t *timer) {
  conn_t *c = timer->data;
  timeout_fired(&c->io_timeout);
  conn_close(c, CLOSE_KEEPALIVE_TIMEOUT);
}

static void on_send_timeout(conn_timer_t *timer) {
  conn_t *c = timer->data;
  timeout_fired(&c->io_timeout);
  conn_close(c, CLOSE_SEND_TIMEOUT);
}

static void on_linger_timeout(conn_timer_t *timer) {
  conn_t *c = timer->data;
  timeout_fired(&c->io_timeout);
  counters.linger_timeouts++;
  conn_close(c, (enum http_close_reason)c->close_reason);
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
    conn_close(c, CLOSE_NO_MEMORY);
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
  int get = c->method == HTTP_GET || c->method == HTTP_HEAD;
  c->state = ST_HANDLING;
  if (c->method == HTTP_CONNECT) {
    conn_fail(c, 405); /* not a proxy: an answer and a clean close */
  } else if (c->url_flags & URL_TRUNCATED) {
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
  } else if (get && strncmp(url, "/bytes?n=", 9) == 0) {
    static char filler[BYTES_MAX];
    char *end;
    unsigned long long n = strtoull(url + 9, &end, 10);
    if (end == url + 9 || *end != '\0' || n > BYTES_MAX) {
      conn_respond(c, 400, "Bad Request", "bad n\n", 6, 0);
    } else {
      if (filler[0] == '\0')
        memset(filler, 'x', sizeof filler);
      conn_respond(c, 200, "OK", filler, (size_t)n, 0);
    }
  } else if (get && strcmp(url, "/stats") == 0) {
    char body[2048];
    size_t n = format_stats(body, sizeof body - 1);
    body[n++] = '\n';
    conn_respond(c, 200, "OK", body, n, 0);
  } else if (c->method == HTTP_POST && strcmp(url, "/upload") == 0) {
    char body[64];
    int n = snprintf(body, sizeof body, "received %" PRIu32 " bytes\n", c->body_bytes);
    conn_respond(c, 200, "OK", body, (size_t)n, 0);
  } else {
    conn_respond(c, 404, "Not Found", not_found, sizeof not_found - 1, 0);
  }
}

/* Counts the bytes of the head; beyond the limit the request gets 431. */
static int head_grow(conn_t *c, size_t len) {
  c->head_bytes += (uint32_t)(len < UINT32_MAX - c->head_bytes ? len : UINT32_MAX - c->head_bytes);
  if (c->head_bytes > config.max_header_size) {
    c->error_status = 431;
    return HPE_USER;
  }
  return 0;
}

static int on_message_begin(llhttp_t *p) {
  conn_t *c = p->data;
  c->url_len = 0;
  c->url[0] = '\0';
  c->url_flags = 0;
  c->head_bytes = 0;
  c->header_count = 0;
  c->body_bytes = 0;
  c->expect = EXPECT_NONE;
  c->expect_field = 0;
  c->expect_value = 0;
  c->error_status = 0;
  c->request_started = 1;
  if (c->state == ST_IDLE) { /* first byte of the next request */
    timeout_stop(&c->io_timeout);
    timeout_start(&c->headers_timeout, on_headers_timeout, config.headers_timeout);
    timeout_start(&c->request_timeout, on_request_timeout, config.request_timeout);
    c->state = ST_READING;
  }
  return 0;
}

static int on_method(llhttp_t *p, const char *at, size_t len) {
  (void)at;
  return head_grow(p->data, len);
}

/* Keeps the path (an absolute-form target, "http://host/path", routes by its
 * path); a URL longer than URL_MAX matches no route. */
static int on_url(llhttp_t *p, const char *at, size_t len) {
  conn_t *c = p->data;
  size_t i;
  for (i = 0; i < len; i++) {
    char ch = at[i];
    if (c->url_flags & URL_SKIP_AUTHORITY) {
      if (ch != '/')
        continue;
      c->url_flags &= (uint8_t)~URL_SKIP_AUTHORITY;
    }
    if (c->url_len == URL_MAX - 1) {
      c->url_flags |= URL_TRUNCATED;
      break;
    }
    c->url[c->url_len++] = ch;
    c->url[c->url_len] = '\0';
    if ((c->url_len == 7 && strncmp(c->url, "http://", 7) == 0) ||
        (c->url_len == 8 && strncmp(c->url, "https://", 8) == 0)) {
      c->url_len = 0;
      c->url[0] = '\0';
      c->url_flags |= URL_SKIP_AUTHORITY;
    }
  }
  return head_grow(c, len);
}

static int on_version(llhttp_t *p, const char *at, size_t len) {
  (void)at;
  return head_grow(p->data, len);
}

/* Matches `s` against `word` incrementally, case-insensitively; *pos is the
 * length matched so far, 0xff once it cannot match. */
static void match_word(uint8_t *pos, const char *word, const char *s, size_t len) {
  size_t i, wl = strlen(word);
  for (i = 0; i < len && *pos != 0xff; i++) {
    char ch = s[i];
    if (ch >= 'A' && ch <= 'Z')
      ch = (char)(ch - 'A' + 'a');
    if (*pos >= wl || word[*pos] != ch)
      *pos = 0xff;
    else
      (*pos)++;
  }
}

static int on_header_field(llhttp_t *p, const char *at, size_t len) {
  conn_t *c = p->data;
  match_word(&c->expect_field, "expect", at, len);
  return head_grow(c, len);
}

static int on_header_field_complete(llhttp_t *p) {
  conn_t *c = p->data;
  if (++c->header_count > config.max_headers_count) {
    c->error_status = 431;
    return HPE_USER;
  }
  return 0;
}

static int on_header_value(llhttp_t *p, const char *at, size_t len) {
  conn_t *c = p->data;
  if (c->expect_field == 6)
    match_word(&c->expect_value, "100-continue", at, len);
  return head_grow(c, len);
}

static int on_header_value_complete(llhttp_t *p) {
  conn_t *c = p->data;
  if (c->expect_field == 6)
    c->expect = c->expect_value == 12 ? EXPECT_CONTINUE : EXPECT_OTHER;
  c->expect_field = 0;
  c->expect_value = 0;
  return 0;
}

static void send_continue(conn_t *c) {
  static const char line[] = "HTTP/1.1 100 Continue\r\n\r\n";
  write_req_t *w = malloc(sizeof *w + sizeof line);
  if (w == NULL) {
    c->error_status = 0;
    conn_close(c, CLOSE_NO_MEMORY);
    return;
  }
  w->interim = 1;
  memcpy(w->data, line, sizeof line - 1);
  conn_write(c, w, sizeof line - 1);
}

static int on_headers_complete(llhttp_t *p) {
  conn_t *c = p->data;
  int has_body = (p->flags & F_CHUNKED) || p->content_length > 0;
  timeout_stop(&c->headers_timeout);
  c->method = p->method;
  /* Upgrade is ignored (RFC 9110 7.8 allows it): the request is answered as
   * HTTP/1.1. A CONNECT is answered 405 once it is complete. */
  p->upgrade = 0;
  if (c->expect == EXPECT_OTHER) {
    c->error_status = 417; /* as Node: an expectation it cannot meet */
    return HPE_USER;
  }
  if (p->content_length > config.max_body_size) {
    c->error_status = c->expect == EXPECT_CONTINUE ? 417 : 413;
    return HPE_USER;
  }
  if (c->expect == EXPECT_CONTINUE && has_body && p->http_major == 1 && p->http_minor >= 1)
    send_continue(c);
  return c->state == ST_CLOSING ? HPE_USER : 0;
}

static int on_body(llhttp_t *p, const char *at, size_t len) {
  conn_t *c = p->data;
  (void)at;
  if (len > config.max_body_size - c->body_bytes) {
    c->error_status = 413;
    return HPE_USER;
  }
  c->body_bytes += (uint32_t)len;
  return 0;
}

static int on_message_complete(llhttp_t *p) {
  conn_t *c = p->data;
  timeout_stop(&c->request_timeout);
  c->keep_alive = (uint8_t)llhttp_should_keep_alive(p);
  c->request_started = 0;
  if (c->url_flags & URL_SKIP_AUTHORITY) { /* "http://host" alone: the root */
    c->url[0] = '/';
    c->url[1] = '\0';
    c->url_len = 1;
  }
  c->state = ST_HANDLING;
  return HPE_PAUSED; /* one request at a time: the rest waits in c->pending */
}

static void parser_setup(void) {
  llhttp_settings_init(&parser_settings);
  parser_settings.on_message_begin = on_message_begin;
  parser_settings.on_method = on_method;
  parser_settings.on_url = on_url;
  parser_settings.on_version = on_version;
  parser_settings.on_header_field = on_header_field;
  parser_settings.on_header_field_complete = on_header_field_complete;
  parser_settings.on_header_value = on_header_value;
  parser_settings.on_header_value_complete = on_header_value_complete;
  parser_settings.on_headers_complete = on_headers_complete;
  parser_settings.on_body = on_body;
  parser_settings.on_message_complete = on_message_complete;
}

/* Parses up to one complete request. Returns 1 when a request completed
 * (*used: bytes it took), 0 when all bytes were taken, -1 on an error. */
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
    buffered_add(c->pending_len + len - c->pending_cap);
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
  int r;
  if (c->state != ST_READING && c->state != ST_IDLE) {
    if (c->state == ST_HANDLING || c->state == ST_WRITING)
      conn_keep_pending(c, data, len);
    return; /* DRAINING, LINGERING: discarded */
  }
  r = parser_feed(c, data, len, &used);
  if (c->state == ST_CLOSING)
    return;
  if (r < 0) {
    conn_fail(c, c->error_status != 0 ? c->error_status : 400);
    return;
  }
  if (r == 1) {
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
  int closing = shutting_down || c->peer_ended;
  c->state = ST_IDLE;
  if (!closing && config.keep_alive_timeout > 0)
    timeout_start(&c->io_timeout, on_keep_alive_timeout,
                  config.keep_alive_timeout + config.keep_alive_timeout_buffer);
  while (c->pending_off < c->pending_len && (c->state == ST_IDLE || c->state == ST_READING)) {
    size_t used;
    int r = parser_feed(c, c->pending + c->pending_off, c->pending_len - c->pending_off, &used);
    if (c->state == ST_CLOSING)
      return;
    if (r < 0) {
      conn_fail(c, c->error_status != 0 ? c->error_status : 400);
      break;
    }
    c->pending_off += (uint32_t)used;
    if (r == 1 && c->state == ST_HANDLING)
      handle_request(c);
  }
  if (c->state == ST_CLOSING)
    return;
  if (c->pending_off == c->pending_len)
    pending_free(c);
  if (closing) {
    if (c->state == ST_IDLE || c->state == ST_READING)
      conn_close(c, shutting_down ? CLOSE_SHUTDOWN : CLOSE_PEER);
    return;
  }
  if (!c->reading && c->pending_len - c->pending_off <= PENDING_MAX && conn_read_start(c) != 0)
    conn_close(c, CLOSE_PEER);
}

/* ---- Connections ------------------------------------------------------------ */

static char read_buffer[64 * 1024]; /* one loop thread: reads are parsed at once */

static void on_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buf) {
  (void)handle;
  (void)suggested;
  *buf = uv_buf_init(read_buffer, sizeof read_buffer);
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
  if (nread == UV_EOF) {
    conn_on_eof(c);
    return;
  }
  if (nread < 0) {
    conn_close(c, CLOSE_PEER);
    return;
  }
  counters.received += (uint64_t)nread;
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
  if (--c->handles_open > 0)
    return;
  counters.open--;
  free(c);
  maybe_finish_shutdown();
}

static void conn_close(conn_t *c, enum http_close_reason reason) {
  if (c->state == ST_CLOSING)
    return;
  c->state = ST_CLOSING;
  counters.closed[reason]++;
  timeout_stop(&c->headers_timeout);
  timeout_stop(&c->request_timeout);
  timeout_stop(&c->io_timeout);
  if (c->job != NULL) {
    delay_abandon(c->job);
    c->job = NULL;
  }
  pending_free(c);
  if (c->prev != NULL)
    c->prev->next = c->next;
  else
    connections = c->next;
  if (c->next != NULL)
    c->next->prev = c->prev;
  c->handles_open = 1;
  c->handles_open = (uint8_t)(c->handles_open +
                              ctimer_close(&c->headers_timeout.timer, on_handle_closed) +
                              ctimer_close(&c->request_timeout.timer, on_handle_closed) +
                              ctimer_close(&c->io_timeout.timer, on_handle_closed));
  uv_close((uv_handle_t *)&c->tcp, on_handle_closed);
}

static void on_accept_retry(uvtw_timer_t *timer);

static conn_t *conn_alloc(void) {
  if (config.fail_accept_allocs > 0) {
    config.fail_accept_allocs--;
    return NULL;
  }
  return calloc(1, sizeof(conn_t));
}

/* Takes the connection waiting in the listener. Without memory for it, the
 * connection stays in the listener (libuv stops polling it meanwhile, so
 * nothing spins) and the accept is tried again a little later. */
static void accept_one(void) {
  conn_t *c = conn_alloc();
  if (c == NULL) {
    counters.accept_nomem++;
    accept_waiting = 1;
    if (!uvtw_timer_is_active(&accept_retry_timer))
      uvtw_timer_start(&accept_retry_timer, on_accept_retry, ACCEPT_RETRY_MS, 0);
    return;
  }
  accept_waiting = 0;
  uv_tcp_init(loop, &c->tcp);
  c->tcp.data = c;
  counters.accepted++;
  if (++counters.open > counters.open_peak)
    counters.open_peak = counters.open;
  timeout_init(c, &c->headers_timeout);
  timeout_init(c, &c->request_timeout);
  timeout_init(c, &c->io_timeout);
  llhttp_init(&c->parser, HTTP_REQUEST, &parser_settings);
  c->parser.data = c;
  c->next = connections;
  if (connections != NULL)
    connections->prev = c;
  connections = c;
  c->state = ST_READING;
  c->close_reason = CLOSE_PEER;
  if (uv_accept((uv_stream_t *)&server, (uv_stream_t *)&c->tcp) != 0 ||
      conn_read_start(c) != 0) {
    conn_close(c, CLOSE_PEER);
    return;
  }
  uv_tcp_nodelay(&c->tcp, 1);
  /* libuv accepts in a loop on one cached uv_now(): a connection that came
   * in while a burst was being accepted would otherwise start its timeouts
   * a little before it existed. */
  uv_update_time(loop);
  timeout_start(&c->headers_timeout, on_headers_timeout, config.headers_timeout);
  timeout_start(&c->request_timeout, on_request_timeout, config.request_timeout);
}

static void on_accept_retry(uvtw_timer_t *timer) {
  (void)timer;
  if (accept_waiting && !shutting_down)
    accept_one();
}

static void on_connection(uv_stream_t *listener, int status) {
  (void)listener;
  if (status < 0) {
    /* EMFILE/ENFILE: libuv has already taken the connection and closed it
     * (its reserve descriptor), so the listener is clear. */
    if (counters.accept_errors++ == 0)
      fprintf(stderr, "http_server: accept: %s (counted in accept_errors)\n",
              uv_strerror(status));
    return;
  }
  accept_one();
}

/* ---- Shutdown --------------------------------------------------------------- */

static void on_wheel_closed(uvtw_wheel_t *w, void *arg) {
  (void)w;
  (void)arg;
  wheel = NULL;
}

/* A request has arrived (in part or in full) and has no answer written yet. */
static int conn_in_flight(const conn_t *c) {
  return c->state == ST_HANDLING || c->state == ST_WRITING || c->state == ST_DRAINING ||
         (c->state == ST_READING && c->request_started);
}

/* Closes the wheel once no connection and no work item can touch it. */
static void maybe_finish_shutdown(void) {
  char line[2048];
  if (!shutting_down || wheel_closing || counters.open > 0 || work_in_flight > 0)
    return;
  wheel_closing = 1;
  uvtw_timer_stop(&grace_timer);
  uvtw_timer_stop(&accept_retry_timer);
  if (config.out != NULL) {
    fprintf(config.out,
            "shutdown: answered %" PRIu64 " requests in flight, dropped %" PRIu64
            " connections with a request in flight, after %" PRIu64 " ms\n",
            counters.drain_answered, counters.drain_dropped, now_ms() - shutdown_started_ms);
    format_stats(line, sizeof line);
    fprintf(config.out, "stats %s\n", line);
    fflush(config.out);
  }
  if (config.handle_signals) {
    uv_close((uv_handle_t *)&sigint_handle, NULL);
    uv_close((uv_handle_t *)&sigterm_handle, NULL);
  }
  uvtw_wheel_close(wheel, on_wheel_closed, NULL);
}

static void drop_all(void) {
  while (connections != NULL) {
    if (conn_in_flight(connections))
      counters.drain_dropped++;
    conn_close(connections, CLOSE_SHUTDOWN);
  }
}

static void on_grace_over(uvtw_timer_t *timer) {
  (void)timer;
  fprintf(stderr, "http_server: shutdown grace period (%" PRIu64 " ms) over\n",
          config.shutdown_grace);
  drop_all();
  maybe_finish_shutdown();
}

/* Stop accepting, close idle connections, let requests in flight finish
 * within the grace period. */
void http_server_shutdown(void) {
  conn_t *c, *next;
  if (shutting_down)
    return;
  shutting_down = 1;
  shutdown_started_ms = now_ms();
  uv_close((uv_handle_t *)&server, NULL);
  uvtw_timer_stop(&accept_retry_timer);
  /* The signal handles stay for a second signal, without keeping the loop. */
  if (config.handle_signals) {
    uv_unref((uv_handle_t *)&sigint_handle);
    uv_unref((uv_handle_t *)&sigterm_handle);
  }
  for (c = connections; c != NULL; c = next) {
    next = c->next;
    if (c->state == ST_IDLE || (c->state == ST_READING && !c->request_started))
      conn_close(c, CLOSE_SHUTDOWN);
  }
  if (config.shutdown_grace > 0)
    uvtw_timer_start(&grace_timer, on_grace_over, config.shutdown_grace, 0);
  else
    drop_all();
  maybe_finish_shutdown();
}

/* First signal: the shutdown. Second signal: drop what is in flight and
 * exit at once. */
static void on_signal(uv_signal_t *handle, int signum) {
  (void)handle;
  if (!shutting_down) {
    http_server_shutdown();
  } else if (!wheel_closing) {
    fprintf(stderr, "http_server: second signal: exiting at once\n");
    exit_status = 128 + signum;
    drop_all();
    maybe_finish_shutdown();
  }
}

/* ---- Starting and running ------------------------------------------------------ */

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
  c->host = "127.0.0.1";
}

static int listening_port;

static int listen_on(void) {
  struct sockaddr_storage addr;
  int namelen = sizeof addr;
  char host[INET6_ADDRSTRLEN];
  int port, r;
  if (strchr(config.host, ':') != NULL)
    r = uv_ip6_addr(config.host, config.port, (struct sockaddr_in6 *)&addr);
  else
    r = uv_ip4_addr(config.host, config.port, (struct sockaddr_in *)&addr);
  if (r == 0)
    r = uv_tcp_bind(&server, (const struct sockaddr *)&addr, 0);
  if (r == 0)
    r = uv_listen((uv_stream_t *)&server, 4096, on_connection);
  if (r == 0)
    r = uv_tcp_getsockname(&server, (struct sockaddr *)&addr, &namelen);
  if (r != 0) {
    fprintf(stderr, "http_server: cannot listen on %s:%d: %s\n", config.host, config.port,
            uv_strerror(r));
    return r;
  }
  if (addr.ss_family == AF_INET6) {
    uv_ip6_name((struct sockaddr_in6 *)&addr, host, sizeof host);
    port = ntohs(((struct sockaddr_in6 *)&addr)->sin6_port);
  } else {
    uv_ip4_name((struct sockaddr_in *)&addr, host, sizeof host);
    port = ntohs(((struct sockaddr_in *)&addr)->sin_port);
  }
  listening_port = port;
  if (config.out != NULL) {
    fprintf(config.out, addr.ss_family == AF_INET6 ? "listening on [%s]:%d\n"
                                                   : "listening on %s:%d\n",
            host, port);
    fflush(config.out);
  }
  return 0;
}

int http_server_start(uv_loop_t *server_loop, const http_server_config_t *server_config,
                      const uvtw_options_t *wheel_options) {
  int r;
#ifdef USE_UV_TIMER
  if (wheel_options != NULL && wheel_options->manual_clock)
    return UV_ENOTSUP; /* the connection timers would run on the loop's clock */
#endif
  loop = server_loop;
  config = *server_config;
  memset(&counters, 0, sizeof counters);
  connections = NULL;
  work_in_flight = 0;
  accept_waiting = shutting_down = wheel_closing = exit_status = 0;
  listening_port = 0;
  parser_setup();
  r = uvtw_wheel_new(loop, wheel_options, &wheel);
  if (r != 0) {
    fprintf(stderr, "http_server: uvtw_wheel_new: %s\n", uv_strerror(r));
    wheel = NULL;
    return r;
  }
  uvtw_timer_init(wheel, &accept_retry_timer);
  uvtw_timer_init(wheel, &grace_timer);
  signal(SIGPIPE, SIG_IGN); /* a peer that went away is an error code, not a signal */
  uv_tcp_init(loop, &server);
  if (config.handle_signals) {
    uv_signal_init(loop, &sigint_handle);
    uv_signal_init(loop, &sigterm_handle);
    uv_signal_start(&sigint_handle, on_signal, SIGINT);
    uv_signal_start(&sigterm_handle, on_signal, SIGTERM);
  }
  r = listen_on();
  if (r != 0)
    http_server_shutdown(); /* the same orderly teardown, run by the loop */
  return r;
}

int http_server_run(uv_loop_t *server_loop, const http_server_config_t *server_config,
                    const uvtw_options_t *wheel_options) {
  int r = http_server_start(server_loop, server_config, wheel_options);
  if (r != 0 && wheel == NULL)
    return 1; /* no wheel: nothing was opened */
  uv_run(loop, UV_RUN_DEFAULT);
  if (r != 0) {
    uv_loop_close(loop);
    return 1;
  }
  r = uv_loop_close(loop);
  if (r != 0) {
    fprintf(stderr, "http_server: uv_loop_close: %s\n", uv_strerror(r));
    return 1;
  }
  return exit_status;
}

int http_server_port(void) {
  return listening_port;
}

uvtw_wheel_t *http_server_wheel(void) {
  return wheel;
}

const http_server_counters_t *http_server_counters(void) {
  return &counters;
}

size_t http_server_format_stats(char *out, size_t size) {
  return format_stats(out, size);
}
