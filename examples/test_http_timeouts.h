/* The harness of test_http_timeouts.c, included by it alone (as tap.h is
 * by the tests): the server (http_server.c, linked in as a library) runs
 * on the test's loop, on a wheel made with manual_clock = 1 (or on the
 * loop's clock), and its clients are libuv TCP handles on the same loop
 * that talk to it over 127.0.0.1.
 *
 * Between advances of the clock the test runs the loop (uv_run
 * UV_RUN_ONCE) until what it waits for has happened over the sockets: a
 * client connected, the server has read the bytes sent (its `received`
 * counter), an answer or an EOF has arrived. A 2 s watchdog (a uv_timer_t)
 * bounds each such wait, so a broken server fails the check instead of
 * hanging the test. */
#ifndef UVTW_EXAMPLES_TEST_HTTP_TIMEOUTS_H
#define UVTW_EXAMPLES_TEST_HTTP_TIMEOUTS_H

#include "http_server.h" /* first: uvtw.h asks for the POSIX uv.h needs */
#include "tap.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#define WAIT_MS 2000 /* wall-time bound of every wait for the sockets */
#define HOST "127.0.0.1"

static uv_loop_t loop;
static http_server_t *server; /* the last one started; freed by the next start */
static const http_server_counters_t *counters;
static uint64_t wheel_late_max_ms; /* the wheel's, read by server_stop */
static uvtw_wheel_t *wheel;

/* ---- Running the loop ------------------------------------------------------ */

static uv_timer_t watchdog;
static int watchdog_fired;

static void on_watchdog(uv_timer_t *t) {
  (void)t;
  watchdog_fired = 1;
}

typedef int (*pred_fn)(const void *arg);

/* Runs the loop until pred(arg) holds, at most WAIT_MS of wall time.
 * Returns whether it holds; says what it waited for when it does not. */
static int run_until(pred_fn pred, const void *arg, const char *what) {
  int held;
  watchdog_fired = 0;
  uv_timer_start(&watchdog, on_watchdog, WAIT_MS, 0);
  while (!(held = pred(arg)) && !watchdog_fired)
    uv_run(&loop, UV_RUN_ONCE);
  uv_timer_stop(&watchdog);
  if (!held)
    tap_diag("  waited %d ms for %s: it did not happen", WAIT_MS, what);
  return held;
}

/* Lets the loop handle what is ready now (bytes in flight on loopback are
 * already in the peer's socket), without waiting for anything. */
static void settle(void) {
  for (int i = 0; i < 8; i++)
    uv_run(&loop, UV_RUN_NOWAIT);
}

/* The manual clock: the server's timeouts due on the way run inside. Only
 * a failure is a check of its own. */
static void advance(uint64_t ms) {
  int r = uvtw_wheel_advance(wheel, ms);
  if (r != 0)
    EXPECT_ERR(r, 0, "uvtw_wheel_advance(%" PRIu64 ")", ms);
}

typedef struct at_least_s {
  const uint64_t *counter;
  uint64_t value;
} at_least_t;

static int counter_reached(const void *arg) {
  const at_least_t *a = arg;
  return *a->counter >= a->value;
}

/* Runs the loop until one of the server's counters reaches `value`. */
static int wait_counter(const uint64_t *counter, uint64_t value, const char *what) {
  at_least_t a = {counter, value};
  return run_until(counter_reached, &a, what);
}

/* ---- Clients ------------------------------------------------------------------ */

#define CLIENT_KEEP 8192 /* bytes of the answers kept; more are only counted */

typedef struct client_s {
  uv_tcp_t tcp;
  uv_connect_t connect_req;
  int connected;          /* 1 once connected; a libuv error if the connect failed */
  int ended;              /* 1: EOF from the server; a libuv error (UV_ECONNRESET); 0: open */
  int closed;             /* the handle is closed */
  uint64_t accept_target; /* the server's accepted counter once it took this one */
  size_t total;           /* bytes received */
  size_t len;             /* bytes kept in data */
  char data[CLIENT_KEEP + 1];
} client_t;

static void client_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  static char chunk[64 * 1024];
  (void)h;
  (void)suggested;
  *buf = uv_buf_init(chunk, sizeof chunk);
}

static void client_on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  client_t *c = s->data;
  if (nread < 0) {
    c->ended = nread == UV_EOF ? 1 : (int)nread;
    uv_read_stop(s);
    return;
  }
  c->total += (size_t)nread;
  if (c->len < CLIENT_KEEP) {
    size_t n = (size_t)nread < CLIENT_KEEP - c->len ? (size_t)nread : CLIENT_KEEP - c->len;
    memcpy(c->data + c->len, buf->base, n);
    c->len += n;
    c->data[c->len] = '\0';
  }
}

static void client_read_start(client_t *c) {
  uv_read_start((uv_stream_t *)&c->tcp, client_alloc, client_on_read);
}

static void client_on_connect(uv_connect_t *req, int status) {
  client_t *c = req->data;
  c->connected = status == 0 ? 1 : status;
}

static int client_connected(const void *arg) {
  const client_t *c = arg;
  return c->connected < 0 || (c->connected == 1 && counters->accepted >= c->accept_target);
}

/* Connects to the server and waits until it has accepted. `rcvbuf`, if not
 * 0, is the client's receive buffer (small: a client that does not read
 * stalls the server's answer sooner). `reads`: the client reads what comes. */
static void client_close(client_t *c);

static int client_open(client_t *c, int rcvbuf, int reads) {
  struct sockaddr_in addr;
  int r;
  memset(c, 0, sizeof *c);
  c->accept_target = counters->accepted + 1;
  uv_ip4_addr(HOST, http_server_port(server), &addr);
  r = uv_tcp_init_ex(&loop, &c->tcp, AF_INET);
  if (r != 0) {
    tap_ok(0, "a client connects: uv_tcp_init_ex: %s", uv_strerror(r));
    c->closed = 1;
    return 0;
  }
  c->tcp.data = c;
  c->connect_req.data = c;
  if (rcvbuf > 0)
    uv_recv_buffer_size((uv_handle_t *)&c->tcp, &rcvbuf);
  r = uv_tcp_connect(&c->connect_req, &c->tcp, (const struct sockaddr *)&addr, client_on_connect);
  if (r != 0)
    c->connected = r;
  run_until(client_connected, c, "the connect");
  if (!tap_ok(c->connected == 1 && counters->accepted == c->accept_target,
              "a client connects and the server accepts it")) {
    tap_diag("  connect: %s; the server accepted %" PRIu64 ", expected %" PRIu64,
             c->connected == 1   ? "done"
             : c->connected == 0 ? "pending"
                                 : uv_strerror(c->connected),
             counters->accepted, c->accept_target);
    client_close(c);
    return 0;
  }
  if (reads)
    client_read_start(c);
  return 1;
}

static void client_on_close(uv_handle_t *h) {
  ((client_t *)h->data)->closed = 1;
}

static int client_is_closed(const void *arg) {
  return ((const client_t *)arg)->closed;
}

static void client_close(client_t *c) {
  if (!uv_is_closing((uv_handle_t *)&c->tcp))
    uv_close((uv_handle_t *)&c->tcp, client_on_close);
  run_until(client_is_closed, c, "the client's handle to close");
}

/* Sends `text` and waits until the server has read it: what the server
 * does with it then happens at the wheel's present time. */
static int client_send(client_t *c, const char *text) {
  uv_buf_t buf = uv_buf_init((char *)text, (unsigned)strlen(text));
  uint64_t want = counters->received + buf.len;
  int r = uv_try_write((uv_stream_t *)&c->tcp, &buf, 1);
  if (r != (int)buf.len) {
    tap_diag("  uv_try_write: %s", r < 0 ? uv_strerror(r) : "partial");
    return 0;
  }
  return wait_counter(&counters->received, want, "the server to read what was sent");
}

/* ---- Answers ------------------------------------------------------------------- */

/* Counts the complete answers in `data`; *last_status: the status of the last. */
static int count_answers(const char *data, int *last_status) {
  int n = 0;
  const char *p = data;
  for (;;) {
    const char *end = strstr(p, "\r\n\r\n");
    const char *cl;
    unsigned long len = 0;
    if (end == NULL || strncmp(p, "HTTP/1.1 ", 9) != 0)
      return n;
    cl = strstr(p, "Content-Length: ");
    if (cl != NULL && cl < end)
      len = strtoul(cl + 16, NULL, 10);
    if (strlen(end + 4) < len)
      return n;
    if (last_status != NULL)
      *last_status = atoi(p + 9);
    n++;
    p = end + 4 + len;
  }
}

typedef struct answers_s {
  const client_t *c;
  int n;
} answers_t;

static int client_has_answers(const void *arg) {
  const answers_t *a = arg;
  return count_answers(a->c->data, NULL) >= a->n || a->c->ended != 0;
}

/* Waits for the client's n-th answer; returns its status (0: none). */
static int client_answer(const client_t *c, int n) {
  answers_t a = {c, n};
  int status = 0;
  run_until(client_has_answers, &a, "an answer");
  return count_answers(c->data, &status) >= n ? status : 0;
}

static int client_has_ended(const void *arg) {
  return ((const client_t *)arg)->ended != 0;
}

static const char *ended_name(int ended) {
  return ended == 1 ? "EOF" : ended == 0 ? "still open" : uv_err_name(ended);
}

/* ---- The server ------------------------------------------------------------- */

static int server_is_down(const void *arg) {
  (void)arg;
  return http_server_wheel(server) == NULL;
}

/* Starts the server on this loop with Node's default timeouts, changed by
 * `config` if not NULL, on a wheel with a manual clock (or the loop's). */
static int server_start(const http_server_config_t *config, int manual) {
  http_server_config_t defaults;
  uvtw_options_t options;
  int r;
  if (config == NULL) {
    http_server_config_init(&defaults);
    defaults.bench_routes = 1; /* GET /bytes, for the send timeout */
    config = &defaults;
  }
  memset(&options, 0, sizeof options);
  options.manual_clock = manual ? 1 : 0;
  if (server != NULL && http_server_wheel(server) == NULL)
    http_server_free(server); /* else a failed case left it running: it leaks */
  r = http_server_start(&server, &loop, config, &options);
  if (server == NULL) {
    tap_ok(0, "server started: %s", uv_strerror(r));
    return 0;
  }
  wheel = http_server_wheel(server);
  counters = http_server_counters(server);
  if (!tap_ok(r == 0, "server started on 127.0.0.1:%d (%s clock)", http_server_port(server),
              manual ? "manual" : "the loop's")) {
    tap_diag("  http_server_start: %s", uv_strerror(r));
    if (http_server_wheel(server) != NULL) /* it listens on nothing and is shutting down */
      run_until(server_is_down, NULL, "the server to shut down");
    return 0;
  }
  return 1;
}

/* Checks the server never fired early or late, then shuts it down and
 * waits until it has closed everything. */
static void server_stop(const char *T, int exact) {
  char line[4096];
  http_server_stats_t stats;
  http_server_format_stats(server, NULL, 0, 0, line, sizeof line);
  tap_diag("  server: %s", line);
  http_server_stats(server, &stats); /* the wheel's, its last ones once it closed */
  wheel_late_max_ms = stats.wheel.late_max_ms;
  EXPECT_U64(counters->early_fires, 0, "%s: no timeout fired before its deadline", T);
  if (exact)
    EXPECT_U64(wheel_late_max_ms, 0,
               "%s: every timeout fired at its deadline on the server's clock", T);
  http_server_shutdown(server);
  tap_ok(run_until(server_is_down, NULL, "the server to shut down"),
         "%s: the server shut down and closed its wheel", T);
}

/* Starts the server (manual clock) and connects one client to it. */
static int setup(const char *T, const http_server_config_t *config, client_t *c, int rcvbuf,
                 int reads) {
  if (!server_start(config, 1))
    return 0;
  if (!client_open(c, rcvbuf, reads)) {
    server_stop(T, 0);
    return 0;
  }
  return 1;
}

static uint64_t now(void) {
  return uvtw_wheel_now(wheel);
}

#endif
