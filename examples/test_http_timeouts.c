/* The example server's timeouts at their exact moments, on a manual clock
 * (TAP). usage: test_http_timeouts [CASE...]  (cases whose name contains an
 * argument; none: all). examples/README.md, "Testing timeouts on a manual
 * clock", says how; the harness is test_http_timeouts.h.
 *
 * The server runs in this process with Node's default timeouts: headers
 * 60 s, request 300 s, keep-alive 5 s + 1 s of buffer, send 30 s. A case
 * that spans five minutes of the server's time runs in milliseconds,
 * without a sleep. The server's own counters give the exact moment: a
 * timeout fires inside uvtw_wheel_advance, so right after
 * advance(deadline - 1 ms) it has not fired (headers_timeouts,
 * request_timeouts, closed_* unchanged) and right after advance(1 ms) it
 * has; the wheel's late_max_ms == 0 says it fired at its deadline on the
 * server's clock (the wheel never fires early).
 *
 * The last case runs the same server on a wheel on the loop's clock, with
 * short timeouts, to keep the real path honest next to the manual one. */
#include "test_http_timeouts.h" /* first: uvtw.h asks for the POSIX uv.h needs */

#include <signal.h>

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
