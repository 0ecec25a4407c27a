/* The example server's timeouts at their exact moments, on a manual clock
 * (TAP). usage: test_http_timeouts [CASE...]  (cases whose name contains an
 * argument; none: all)
 *
 * The server (http_server.c, linked in as a library) runs in this process,
 * on this test's loop, with its wheel made with manual_clock = 1 and Node's
 * default timeouts: headers 60 s, request 300 s, keep-alive 5 s + 1 s of
 * buffer, send 30 s. Its clients are libuv TCP handles on the same loop
 * that talk to it over 127.0.0.1. The wheel's time moves only when the test
 * calls uvtw_wheel_advance, and every timeout of the server runs inside
 * that call: so the test can say "59 999 ms after the accept the
 * connection is open, at 60 000 ms it gets its 408", and a case that spans
 * five minutes of the server's time runs in milliseconds, without a sleep.
 *
 * Between advances the test runs the loop (uv_run UV_RUN_ONCE) until what
 * it waits for has happened over the sockets: a client connected, the
 * server has read the bytes sent (its `received` counter), an answer or an
 * EOF has arrived. A 2 s watchdog (a uv_timer_t) bounds each such wait, so
 * a broken server fails the check instead of hanging the test.
 *
 * The server's own counters give the exact moment: a timeout fires inside
 * uvtw_wheel_advance, so right after advance(deadline - 1 ms) it has not
 * fired (headers_timeouts, request_timeouts, closed_* unchanged) and right
 * after advance(1 ms) it has; the wheel's late_max_ms == 0 says it fired
 * at its deadline on the server's clock (the wheel never fires early).
 *
 * The last case runs the same server on a wheel on the loop's clock, with
 * short timeouts, to keep the real path honest next to the manual one. */
#include "http_server.h" /* first: uvtw.h asks for the POSIX uv.h needs */
#include "tap.h"

#include <inttypes.h>
#include <signal.h>
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
  http_server_format_stats(server, NULL, 0, line, sizeof line);
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

/* ---- headersTimeout ------------------------------------------------------------ */

/* A connection that sends nothing gets 408 at exactly headersTimeout after
 * the accept; the server then lingers LINGER_MS (2 s) for the client's EOF
 * and closes at exactly that. */
static void test_headers_timeout_silent(void) {
  const char *T = "headers_timeout_silent";
  client_t c;
  uint64_t t0;
  if (!setup(T, NULL, &c, 0, 1))
    return;
  t0 = now();
  advance(60000 - 1);
  settle();
  EXPECT_U64(counters->headers_timeouts, 0, "%s: not fired at 59 999 ms after the accept", T);
  tap_ok(c.total == 0 && c.ended == 0, "%s: the client has nothing and is connected at 59 999 ms",
         T);
  advance(1);
  EXPECT_U64(counters->headers_timeouts, 1, "%s: fired at exactly 60 000 ms", T);
  EXPECT_U64(now() - t0, 60000, "%s: the wheel's time is the accept + 60 000 ms", T);
  EXPECT_I64(client_answer(&c, 1), 408, "%s: the client gets 408 Request Timeout", T);
  run_until(client_has_ended, &c, "the server's EOF");
  wait_counter(&counters->requests, 1, "the server's write callback");
  tap_ok(c.ended == 1, "%s: then the server's EOF (got %s)", T, ended_name(c.ended));
  /* The client does not close: the server lingers 2 s, then closes. */
  advance(2000 - 1);
  EXPECT_U64(counters->linger_timeouts, 0, "%s: lingering 1 999 ms after the 408: open", T);
  EXPECT_U64(counters->closed[CLOSE_HEADERS_TIMEOUT], 0, "%s: ... not closed yet", T);
  advance(1);
  EXPECT_U64(counters->linger_timeouts, 1, "%s: closed at exactly 2 000 ms of lingering", T);
  EXPECT_U64(counters->closed[CLOSE_HEADERS_TIMEOUT], 1,
             "%s: ... counted as closed by the headers timeout", T);
  client_close(&c);
  server_stop(T, 1);
}

/* A head trickled one header line every 10 s (a slowloris) does not move
 * the deadline: 408 at exactly 60 000 ms after the accept. */
static void test_headers_timeout_slowloris(void) {
  const char *T = "headers_timeout_slowloris";
  client_t c;
  uint64_t t0;
  int sent = 1;
  if (!setup(T, NULL, &c, 0, 1))
    return;
  t0 = now();
  sent = client_send(&c, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n");
  for (int i = 0; i < 5 && sent; i++) {
    advance(10000);
    sent = client_send(&c, "X-Slow: 1\r\n");
  }
  advance(9999);
  sent = sent && client_send(&c, "X-Slow: 2\r\n");
  tap_ok(sent, "%s: a header line every 10 s reached the server", T);
  EXPECT_U64(now() - t0, 59999, "%s: the last one at 59 999 ms", T);
  EXPECT_U64(counters->headers_timeouts, 0, "%s: no 408 at 59 999 ms", T);
  advance(1);
  EXPECT_U64(counters->headers_timeouts, 1, "%s: 408 at exactly 60 000 ms", T);
  EXPECT_I64(client_answer(&c, 1), 408, "%s: the client gets 408 Request Timeout", T);
  run_until(client_has_ended, &c, "the server's EOF");
  client_close(&c);
  wait_counter(&counters->closed[CLOSE_HEADERS_TIMEOUT], 1, "the server's close");
  EXPECT_U64(counters->closed[CLOSE_HEADERS_TIMEOUT], 1,
             "%s: closed by the headers timeout once the client closed", T);
  server_stop(T, 1);
}

/* A head completed 1 ms before the deadline is answered; nothing fires at
 * the deadline. */
static void test_headers_in_time(void) {
  const char *T = "headers_in_time";
  client_t c;
  if (!setup(T, NULL, &c, 0, 1))
    return;
  advance(60000 - 1);
  client_send(&c, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  EXPECT_I64(client_answer(&c, 1), 200, "%s: a head complete at 59 999 ms gets 200", T);
  advance(1);
  settle();
  EXPECT_U64(counters->headers_timeouts, 0, "%s: no 408 at 60 000 ms", T);
  EXPECT_U64(counters->open, 1, "%s: the connection is open at 60 000 ms", T);
  tap_ok(c.ended == 0, "%s: the client is connected (%s)", T, ended_name(c.ended));
  client_close(&c);
  server_stop(T, 1);
}

/* On a keep-alive connection the next request's headersTimeout counts from
 * its first byte, which also ends the keep-alive wait. */
static void test_headers_timeout_next_request(void) {
  const char *T = "headers_timeout_next_request";
  client_t c;
  uint64_t t1;
  if (!setup(T, NULL, &c, 0, 1))
    return;
  client_send(&c, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  EXPECT_I64(client_answer(&c, 1), 200, "%s: the first request gets 200", T);
  wait_counter(&counters->requests, 1, "the server's write callback");
  advance(3000);
  client_send(&c, "G");
  t1 = now();
  advance(60000 - 1);
  settle();
  EXPECT_U64(counters->closed[CLOSE_KEEPALIVE_TIMEOUT], 0,
             "%s: the first byte ended the keep-alive wait (no close at 6 s)", T);
  EXPECT_U64(counters->headers_timeouts, 0, "%s: no 408 59 999 ms after the first byte", T);
  advance(1);
  EXPECT_U64(counters->headers_timeouts, 1, "%s: 408 at exactly 60 000 ms after it", T);
  EXPECT_U64(now() - t1, 60000, "%s: the wheel's time is the first byte + 60 000 ms", T);
  EXPECT_I64(client_answer(&c, 2), 408, "%s: the client gets 408 Request Timeout", T);
  client_close(&c);
  server_stop(T, 1);
}

/* ---- requestTimeout ------------------------------------------------------------ */

/* A complete head whose body never completes: no 408 at headersTimeout (the
 * head came in time); 408 at exactly requestTimeout after the accept. */
static void test_request_timeout(void) {
  const char *T = "request_timeout";
  client_t c;
  uint64_t t0;
  if (!setup(T, NULL, &c, 0, 1))
    return;
  t0 = now();
  advance(1000);
  client_send(&c, "POST /upload HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 10\r\n\r\n12345");
  advance(60000 - 1000);
  EXPECT_U64(counters->headers_timeouts, 0, "%s: no headers timeout: the head came at 1 s", T);
  for (int i = 0; i < 3; i++) { /* a byte of the body every minute, never all of it */
    advance(60000);
    client_send(&c, "6");
  }
  advance(300000 - 4 * 60000 - 1);
  EXPECT_U64(now() - t0, 299999, "%s: 299 999 ms after the accept", T);
  EXPECT_U64(counters->request_timeouts, 0, "%s: no 408 at 299 999 ms", T);
  tap_ok(c.total == 0, "%s: the client has no answer at 299 999 ms", T);
  advance(1);
  EXPECT_U64(counters->request_timeouts, 1, "%s: 408 at exactly 300 000 ms after the accept", T);
  EXPECT_I64(client_answer(&c, 1), 408, "%s: the client gets 408 Request Timeout", T);
  run_until(client_has_ended, &c, "the server's EOF");
  client_close(&c);
  wait_counter(&counters->closed[CLOSE_REQUEST_TIMEOUT], 1, "the server's close");
  EXPECT_U64(counters->closed[CLOSE_REQUEST_TIMEOUT], 1,
             "%s: closed by the request timeout once the client closed", T);
  server_stop(T, 1);
}

/* ---- keepAliveTimeout ------------------------------------------------------------ */

/* An idle keep-alive connection closes at exactly keepAliveTimeout +
 * keepAliveTimeoutBuffer after the answer was written, with a FIN; a request
 * 1 ms before is answered and starts the wait again. */
static void keepalive_case(const char *T, uint64_t buffer) {
  http_server_config_t config;
  const uint64_t closes_at = 5000 + buffer;
  client_t c;
  uint64_t t1;
  http_server_config_init(&config);
  config.keep_alive_timeout_buffer = buffer;
  if (!setup(T, &config, &c, 0, 1))
    return;
  client_send(&c, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  EXPECT_I64(client_answer(&c, 1), 200, "%s: the first request gets 200", T);
  wait_counter(&counters->requests, 1, "the server's write callback");
  tap_ok(strstr(c.data, "\r\nKeep-Alive: timeout=5\r\n") != NULL,
         "%s: the answer advertises Keep-Alive: timeout=5", T);
  advance(closes_at - 1);
  EXPECT_U64(counters->closed[CLOSE_KEEPALIVE_TIMEOUT], 0, "%s: idle %" PRIu64 " ms: open", T,
             closes_at - 1);
  client_send(&c, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  EXPECT_I64(client_answer(&c, 2), 200, "%s: a request then gets 200", T);
  wait_counter(&counters->requests, 2, "the server's write callback");
  t1 = now();
  advance(closes_at - 1);
  settle();
  EXPECT_U64(counters->closed[CLOSE_KEEPALIVE_TIMEOUT], 0,
             "%s: idle %" PRIu64 " ms after that answer: open", T, closes_at - 1);
  tap_ok(c.ended == 0, "%s: ... and the client is connected (%s)", T, ended_name(c.ended));
  advance(1);
  EXPECT_U64(counters->closed[CLOSE_KEEPALIVE_TIMEOUT], 1,
             "%s: closed at exactly %" PRIu64 " ms (keepAliveTimeout 5000 + buffer %" PRIu64 ")", T,
             closes_at, buffer);
  EXPECT_U64(now() - t1, closes_at, "%s: the wheel's time is the answer + %" PRIu64 " ms", T,
             closes_at);
  run_until(client_has_ended, &c, "the server's close");
  tap_ok(c.ended == 1, "%s: the client sees a FIN, not a reset (got %s)", T, ended_name(c.ended));
  EXPECT_I64(count_answers(c.data, NULL), 2, "%s: and no other answer", T);
  client_close(&c);
  server_stop(T, 1);
}

static void test_keepalive_timeout_default_buffer(void) {
  keepalive_case("keepalive_timeout_default_buffer", 1000);
}

static void test_keepalive_timeout_no_buffer(void) {
  keepalive_case("keepalive_timeout_no_buffer", 0);
}

/* ---- send timeout ---------------------------------------------------------------- */

/* Answers that surely do not fit in the kernel's buffers: the server's
 * socket may buffer up to tcp_wmem's maximum, the client's little (4 KiB
 * asked, the client does not read). */
static int stalling_answers(void) {
  unsigned long lo, def, max = 4194304;
  FILE *f = fopen("/proc/sys/net/ipv4/tcp_wmem", "r");
  if (f != NULL) {
    if (fscanf(f, "%lu %lu %lu", &lo, &def, &max) != 3)
      max = 4194304;
    fclose(f);
  }
  max = max / (1024 * 1024) + 3;
  return max > 64 ? 64 : (int)max;
}

/* Runs the loop until the server writes no more answers. */
static int run_until_stalled(void) {
  uint64_t before;
  uint64_t start = uv_hrtime();
  do {
    before = counters->requests;
    settle();
  } while (counters->requests != before && uv_hrtime() - start < WAIT_MS * 1000000ull);
  return counters->requests == before;
}

/* A client that pipelines requests for 1 MiB answers and does not read:
 * the kernel's buffers fill, an answer waits in the server's send queue,
 * and the connection closes at exactly the send timeout (30 s) after it was
 * queued. The wheel's time does not move while the answers before it are
 * written, so that is the time of the requests. */
static void test_send_timeout(void) {
  const char *T = "send_timeout";
  static const char get[] = "GET /bytes?n=1048576 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  char requests[64 * sizeof get];
  int n = stalling_answers();
  client_t c;
  uint64_t t0, written;
  if (!setup(T, NULL, &c, 4096, 0))
    return;
  requests[0] = '\0';
  for (int i = 0; i < n; i++)
    strcat(requests, get);
  client_send(&c, requests);
  t0 = now();
  tap_ok(run_until_stalled() && counters->requests < (uint64_t)n &&
             counters->buffered >= 1024 * 1024,
         "%s: of %d answers of 1 MiB the server wrote %" PRIu64 ", then one stays queued "
         "(server holds %" PRIu64 " bytes)",
         T, n, counters->requests, counters->buffered);
  written = counters->requests;
  advance(30000 - 1);
  settle();
  EXPECT_U64(counters->closed[CLOSE_SEND_TIMEOUT], 0, "%s: 29 999 ms after it was queued: open", T);
  EXPECT_U64(counters->requests, written, "%s: ... and the answer still waits", T);
  advance(1);
  EXPECT_U64(counters->closed[CLOSE_SEND_TIMEOUT], 1, "%s: closed at exactly 30 000 ms", T);
  EXPECT_U64(now() - t0, 30000, "%s: the wheel's time is the requests' + 30 000 ms", T);
  client_read_start(&c);
  run_until(client_has_ended, &c, "the close to reach the client");
  tap_ok(c.ended != 0 && c.total < (size_t)n * 1024 * 1024,
         "%s: the client, reading now, finds the answers cut short (%zu bytes, then %s)", T,
         c.total, ended_name(c.ended));
  settle();
  EXPECT_U64(counters->buffered, 0, "%s: the server freed what it held", T);
  client_close(&c);
  server_stop(T, 1);
}

/* ---- shutdown grace ---------------------------------------------------------------- */

/* A request in flight at the shutdown has shutdown_grace (10 s) to be
 * answered: a /delay answer due in an hour (a task a worker thread put on
 * the wheel) is dropped, and its task cancelled, at exactly 10 000 ms. */
static void test_shutdown_grace(void) {
  const char *T = "shutdown_grace";
  client_t c;
  if (!setup(T, NULL, &c, 0, 1))
    return;
  client_send(&c, "GET /delay?ms=3600000 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  tap_ok(wait_counter(&counters->delay_scheduled, 1, "the worker to schedule the answer"),
         "%s: a worker thread scheduled the answer on the wheel", T);
  http_server_shutdown(server);
  advance(10000 - 1);
  EXPECT_U64(counters->drain_dropped, 0, "%s: 9 999 ms after the shutdown: still in flight", T);
  EXPECT_U64(counters->open, 1, "%s: ... and its connection open", T);
  advance(1);
  EXPECT_U64(counters->drain_dropped, 1, "%s: dropped at exactly 10 000 ms", T);
  EXPECT_U64(counters->delay_cancelled, 1, "%s: ... and its task on the wheel cancelled", T);
  run_until(client_has_ended, &c, "the close to reach the client");
  tap_ok(c.ended != 0 && c.total == 0, "%s: the client sees the close, no answer (%s)", T,
         ended_name(c.ended));
  client_close(&c);
  tap_ok(run_until(server_is_down, NULL, "the server to shut down"),
         "%s: then the server closes its wheel", T);
  server_stop(T, 1);
}

/* ---- The loop's clock ---------------------------------------------------------------- */

/* The same server on a wheel on the loop's clock, with short timeouts: an
 * idle keep-alive connection closes keepAliveTimeout after its answer and a
 * silent one gets 408 headersTimeout after the connect, never before (1 ms
 * of uv_now truncation) and at most SLACK_MS after. */
#define SLACK_MS 150
static void test_real_clock(void) {
  const char *T = "real_clock";
  http_server_config_t config;
  client_t idle, silent;
  uint64_t t_connect, t_answer, idle_ms, silent_ms;
  http_server_config_init(&config);
  config.keep_alive_timeout = 100;
  config.keep_alive_timeout_buffer = 0;
  config.sample_loop = 0; /* the lateness checked is the connections' */
  config.headers_timeout = 200;
  if (!server_start(&config, 0))
    return;
  t_connect = uv_hrtime();
  if (!client_open(&silent, 0, 1)) {
    server_stop(T, 0);
    return;
  }
  if (!client_open(&idle, 0, 1)) {
    client_close(&silent);
    server_stop(T, 0);
    return;
  }
  client_send(&idle, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  EXPECT_I64(client_answer(&idle, 1), 200, "%s: the idle client's request gets 200", T);
  t_answer = uv_hrtime();
  run_until(client_has_ended, &idle, "the keep-alive close");
  idle_ms = (uv_hrtime() - t_answer) / 1000000;
  run_until(client_has_ended, &silent, "the 408");
  silent_ms = (uv_hrtime() - t_connect) / 1000000;
  tap_ok(idle.ended == 1 && idle_ms + 1 >= 100 && idle_ms <= 100 + SLACK_MS,
         "%s: idle keep-alive closed %" PRIu64 " ms after its answer (100 ms, at most %d late)", T,
         idle_ms, SLACK_MS);
  EXPECT_I64(client_answer(&silent, 1), 408, "%s: the silent client gets 408", T);
  tap_ok(silent_ms + 1 >= 200 && silent_ms <= 200 + SLACK_MS,
         "%s: ... %" PRIu64 " ms after the connect (200 ms, at most %d late)", T, silent_ms,
         SLACK_MS);
  client_close(&idle);
  client_close(&silent);
  EXPECT_U64(counters->closed[CLOSE_KEEPALIVE_TIMEOUT], 1, "%s: one keep-alive close", T);
  EXPECT_U64(counters->headers_timeouts, 1, "%s: one headers timeout", T);
  server_stop(T, 0);
  tap_ok(wheel_late_max_ms <= SLACK_MS,
         "%s: the server saw its timeouts at most %d ms late (%" PRIu64 " ms)", T, SLACK_MS,
         wheel_late_max_ms);
}

int main(int argc, char **argv) {
  static const tap_case_t cases[] = {
      TAP_CASE(headers_timeout_silent),
      TAP_CASE(headers_timeout_slowloris),
      TAP_CASE(headers_in_time),
      TAP_CASE(headers_timeout_next_request),
      TAP_CASE(request_timeout),
      TAP_CASE(keepalive_timeout_default_buffer),
      TAP_CASE(keepalive_timeout_no_buffer),
      TAP_CASE(send_timeout),
      TAP_CASE(shutdown_grace),
      TAP_CASE(real_clock),
  };
  uint64_t t0 = uv_hrtime();
  int status;
  signal(SIGPIPE, SIG_IGN); /* as the program: a client gone is an error code */
  uv_loop_init(&loop);
  uv_timer_init(&loop, &watchdog); /* referenced only while a wait runs */
  status = tap_run_cases(argc, argv, cases, sizeof cases / sizeof cases[0]);
  tap_diag("wall time %.1f ms", (double)(uv_hrtime() - t0) / 1e6);
  if (server != NULL && http_server_wheel(server) == NULL)
    http_server_free(server);
  uv_close((uv_handle_t *)&watchdog, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  if (uv_loop_close(&loop) != 0) {
    fprintf(stderr, "test_http_timeouts: a handle was left open on the loop\n");
    status = 1;
  }
  return status;
}
