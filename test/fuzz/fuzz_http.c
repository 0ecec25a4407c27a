/* Fuzz target: bytes into the example HTTP server (examples/http_server.c),
 * run in this process on a wheel with a manual clock, as
 * examples/test_http_timeouts.c runs it, with clients on the same loop over
 * 127.0.0.1.
 *
 * The input's first byte chooses the server's limits and timeouts (Node's
 * defaults, or small limits, no keep-alive, no headers timeout, no grace,
 * a failed allocation at the first accept). Then each step takes an action
 * byte and its arguments: send the next bytes of the input on one of two
 * clients (the input says where each write ends, so a request arrives cut
 * anywhere), move the server's clock by some milliseconds or to its next
 * timeout, close a client and connect a new one, or half-close a client.
 * After each step the loop runs until nothing moves on the sockets. At the
 * end the server shuts down (its clock moved on until its wheel closes) and
 * the loop must close with nothing left open.
 *
 * Checked:
 *   - every response a client receives is well-formed HTTP/1.1: a status
 *     line with a status the server sends, header lines, one
 *     Content-Length, a body of that length (none for 1xx, none for an
 *     answer to HEAD); a connection the server ends cleanly before its
 *     shutdown ends on a response boundary;
 *   - no timer outlives its connection: with no connection open the server
 *     counts no connection timer armed, and its wheel holds at most its two
 *     own timers (accept retry, shutdown grace);
 *   - no timeout fires before its deadline (the server's early_fires);
 *   - the server's wheel keeps its invariants: uvtw__check (src/internal.h,
 *     in builds with -Dchecks) after every step and every move of the
 *     clock at the shutdown, at the top level (outside its callbacks);
 *   - nothing leaks and nothing is used after it is freed (ASan and LSan in
 *     the libFuzzer build), and uv_loop_close finds nothing open. */
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "fuzz.h"
#include "http_server.h"
#include "uvtw.h"
#ifdef UVTW_CHECKS
#include "internal.h" /* uvtw__check */
#endif

enum {
  CLIENTS = 2,
  KEEP_MAX = 4 << 20, /* bytes of answers kept per client; beyond, only counted */
  QUIET_RUNS = 4,     /* loop iterations without progress that end a wait */
};

typedef struct client_s {
  uv_tcp_t tcp;
  uv_connect_t connect_req;
  uv_shutdown_t shutdown_req;
  bool open; /* the handle is initialized and not closing */
  bool connected;
  bool ended;      /* EOF or an error from the server */
  bool clean_eof;  /* the server's EOF, before its shutdown began */
  bool sent_head;  /* HEAD was sent: answers may lack their body */
  uint32_t window; /* the last four bytes sent, to see HEAD across writes */
  bool half_closed;
  bool closed; /* the close callback ran */
  char *data;  /* the answers received */
  size_t len, cap;
  size_t total;
} client_t;

typedef struct write_s {
  uv_write_t req;
  char data[];
} write_t;

static uv_loop_t loop;
static client_t clients[CLIENTS];
static fuzz_input_t *in;
static http_server_t *server;
static const http_server_counters_t *counters;
static bool shutting_down;
static uint64_t progress_events; /* callbacks of the clients, for settle() */

#define CHECK(cond, what) FUZZ_CHECK(in, cond, what)

/* ---- Running the loop ------------------------------------------------------- */

static uint64_t progress(void) {
  uint64_t p = progress_events + counters->received + counters->accepted + counters->open;
  for (int i = 0; i < CLIENTS; i++)
    p += clients[i].total;
  return p;
}

/* Runs the loop until QUIET_RUNS iterations in a row change nothing: on
 * loopback, bytes written are in the peer's socket when the write returns. */
static void settle(void) {
  for (int quiet = 0; quiet < QUIET_RUNS;) {
    uint64_t before = progress();
    uv_run(&loop, UV_RUN_NOWAIT);
    quiet = progress() == before ? quiet + 1 : 0;
  }
}

/* ---- Answers -------------------------------------------------------------------- */

static bool is_status(int status) {
  static const int sent[] = {100, 200, 400, 404, 405, 408, 413, 417, 431, 503};
  for (size_t i = 0; i < sizeof sent / sizeof sent[0]; i++)
    if (status == sent[i])
      return true;
  return false;
}

/* The end of the line starting at p (its \r), or NULL if [p, end) holds no
 * CRLF. */
static const char *line_end(const char *p, const char *end) {
  for (; p + 1 < end; p++)
    if (p[0] == '\r' && p[1] == '\n')
      return p;
  return NULL;
}

/* Checks the answer at *p; moves *p past it. Returns false if the answer is
 * cut short by the end of the data (what came of it is well-formed). */
static bool check_answer(const client_t *c, const char **p, const char *end) {
  static const char version[] = "HTTP/1.1 ";
  const char *at = *p;
  size_t have = (size_t)(end - at);
  CHECK(memcmp(at, version, have < 9 ? have : 9) == 0, "an answer starts with HTTP/1.1");
  const char *eol = line_end(at, end);
  if (eol == NULL)
    return false;
  CHECK(eol - at > 13 && at[12] == ' ', "a status line: HTTP/1.1, a status, a reason");
  int status = (at[9] - '0') * 100 + (at[10] - '0') * 10 + (at[11] - '0');
  CHECK(is_status(status), "a status the server sends");
  long length = -1;
  for (at = eol + 2;; at = eol + 2) {
    eol = line_end(at, end);
    if (eol == NULL)
      return false;
    if (eol == at)
      break; /* the blank line */
    const char *colon = memchr(at, ':', (size_t)(eol - at));
    CHECK(colon != NULL && colon > at && colon[1] == ' ', "a header line: a name, ': ', a value");
    if ((size_t)(colon - at) == 14 && memcmp(at, "Content-Length", 14) == 0) {
      CHECK(length < 0, "one Content-Length");
      char *digits_end;
      length = strtol(colon + 2, &digits_end, 10);
      CHECK(digits_end == eol && length >= 0, "Content-Length: a number");
    }
  }
  at = eol + 2;
  if (status < 200) {
    CHECK(length < 0, "an interim answer has no Content-Length");
    *p = at;
    return true;
  }
  CHECK(length >= 0, "a final answer has a Content-Length");
  bool next_follows = end - at >= 9 && memcmp(at, version, 9) == 0;
  if (c->sent_head && (at == end || next_follows)) { /* an answer to HEAD: no body */
    *p = at;
    return true;
  }
  if (end - at < length)
    return false;
  *p = at + length;
  return true;
}

/* Checks every answer the client received; `whole`: the data must end on
 * an answer's boundary. */
static void check_answers(const client_t *c, bool whole) {
  if (c->len == 0 || c->total > c->len)
    return; /* nothing, or not all kept */
  const char *p = c->data, *end = c->data + c->len;
  while (p < end)
    if (!check_answer(c, &p, end)) {
      CHECK(!whole, "a connection the server ends cleanly ends on an answer's boundary");
      return;
    }
}

/* ---- Clients ------------------------------------------------------------------- */

static void client_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buf) {
  client_t *c = handle->data;
  (void)suggested;
  if (c->cap - c->len < 65536 && c->cap < KEEP_MAX) {
    size_t cap = c->cap == 0 ? 65536 : c->cap * 2;
    char *data = realloc(c->data, cap);
    CHECK(data != NULL, "memory for a client's answers");
    c->data = data;
    c->cap = cap;
  }
  static char discard[65536];
  if (c->cap - c->len >= 65536)
    *buf = uv_buf_init(c->data + c->len, 65536);
  else
    *buf = uv_buf_init(discard, sizeof discard);
}

static void client_on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf) {
  client_t *c = stream->data;
  progress_events++;
  if (nread < 0) {
    c->ended = true;
    c->clean_eof = nread == UV_EOF && !shutting_down;
    uv_read_stop(stream);
    return;
  }
  if (nread > 0 && buf->base == c->data + c->len && c->total == c->len)
    c->len += (size_t)nread;
  c->total += (size_t)nread;
}

static void client_on_connect(uv_connect_t *req, int status) {
  client_t *c = req->data;
  progress_events++;
  if (status == 0 && c->open) {
    c->connected = true;
    uv_read_start((uv_stream_t *)&c->tcp, client_alloc, client_on_read);
  }
}

static void client_open(client_t *c) {
  struct sockaddr_in addr;
  memset(c, 0, sizeof *c);
  CHECK(uv_ip4_addr("127.0.0.1", http_server_port(server), &addr) == 0, "the server's address");
  CHECK(uv_tcp_init(&loop, &c->tcp) == 0, "a client handle");
  c->open = true;
  c->tcp.data = c;
  c->connect_req.data = c;
  CHECK(uv_tcp_connect(&c->connect_req, &c->tcp, (const struct sockaddr *)&addr,
                       client_on_connect) == 0,
        "a client connects");
}

static void client_on_close(uv_handle_t *handle) {
  client_t *c = handle->data;
  progress_events++;
  free(c->data);
  c->data = NULL;
  c->len = c->cap = c->total = 0;
  c->closed = true;
}

/* Checks what the client received, then closes it. */
static void client_close(client_t *c) {
  if (!c->open)
    return;
  check_answers(c, c->ended && c->clean_eof);
  c->open = false;
  uv_close((uv_handle_t *)&c->tcp, client_on_close);
}

static void on_write(uv_write_t *req, int status) {
  (void)status; /* a write to a connection the server closed may fail */
  progress_events++;
  free(req->data);
}

static void client_send(client_t *c, const uint8_t *bytes, size_t len) {
  if (!c->open || !c->connected || c->half_closed || len == 0)
    return;
  write_t *w = malloc(sizeof *w + len);
  CHECK(w != NULL, "memory for a write");
  memcpy(w->data, bytes, len);
  w->req.data = w;
  for (size_t i = 0; i < len; i++) {
    c->window = c->window << 8 | bytes[i];
    c->sent_head |= c->window == ((uint32_t)'H' << 24 | (uint32_t)'E' << 16 | 'A' << 8 | 'D');
  }
  uv_buf_t buf = uv_buf_init(w->data, (unsigned)len);
  if (uv_write(&w->req, (uv_stream_t *)&c->tcp, &buf, 1, on_write) != 0)
    free(w);
}

static void on_shutdown(uv_shutdown_t *req, int status) {
  (void)req;
  (void)status;
  progress_events++;
}

static void client_half_close(client_t *c) {
  if (c->open && c->connected && !c->half_closed &&
      uv_shutdown(&c->shutdown_req, (uv_stream_t *)&c->tcp, on_shutdown) == 0)
    c->half_closed = true;
}

/* ---- The server ---------------------------------------------------------------- */

/* The invariant checker on the server's wheel (if it has not closed yet),
 * where the build has it. */
static void check_wheel(void) {
#ifdef UVTW_CHECKS
  uvtw_wheel_t *wheel = http_server_wheel(server);
  const char *error = wheel != NULL ? uvtw__check(wheel) : NULL;
  char what[256];
  if (error != NULL)
    snprintf(what, sizeof what, "uvtw__check on the server's wheel: %s", error);
  CHECK(error == NULL, what);
#endif
}

/* The wheel's invariants, and with no connection open: no connection timer
 * armed, nothing on the wheel but the server's own two timers. */
static void check_timers(void) {
  uvtw_wheel_t *wheel = http_server_wheel(server);
  check_wheel();
  CHECK(counters->early_fires == 0, "no timeout fires before its deadline");
  if (counters->open != 0 || wheel == NULL)
    return;
  uvtw_stats_t stats;
  uvtw_wheel_stats(wheel, &stats);
  CHECK(counters->timers_armed == 0, "no connection timer outlives its connection");
  CHECK(stats.active <= 2, "with no connection, the wheel holds at most the server's own timers");
}

static void server_config(http_server_config_t *config, uint8_t choice) {
  http_server_config_init(config);
  config->bench_routes = 1; /* every route, and fail_accept_allocs */
  if (choice & 1) {
    config->max_header_size = 256;
    config->max_headers_count = 8;
    config->max_body_size = 64;
  }
  if (choice & 2)
    config->keep_alive_timeout = 0;
  if (choice & 4)
    config->headers_timeout = 0;
  if (choice & 8)
    config->shutdown_grace = 0;
  if (choice & 16)
    config->fail_accept_allocs = 1;
}

/* Shuts the server down, moving its clock on until its wheel has closed. */
static void server_stop(void) {
  shutting_down = true;
  http_server_shutdown(server);
  for (int i = 0; i < 1000; i++) {
    settle();
    check_wheel();
    uvtw_wheel_t *wheel = http_server_wheel(server);
    if (wheel == NULL)
      break;
    if (uvtw_wheel_advance_next(wheel) == UV_EAGAIN)
      uv_run(&loop, UV_RUN_ONCE); /* the thread pool answers a /delay request */
  }
  CHECK(http_server_wheel(server) == NULL, "the server shuts down and closes its wheel");
  http_server_free(server);
  server = NULL;
  counters = NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_input_t input = {data, size, 0};
  http_server_config_t config;
  uvtw_options_t options = {.manual_clock = 1};
  in = &input;
  signal(SIGPIPE, SIG_IGN); /* as the program: a client gone is an error code */
  shutting_down = false;
  progress_events = 0;
  memset(clients, 0, sizeof clients);
  server_config(&config, fuzz_byte(in));
  CHECK(uv_loop_init(&loop) == 0, "a loop");
  CHECK(http_server_start(&server, &loop, &config, &options) == 0, "the server starts");
  counters = http_server_counters(server);
  for (int i = 0; i < CLIENTS; i++)
    client_open(&clients[i]);
  settle();

  while (fuzz_more(in)) {
    uint8_t action = fuzz_byte(in);
    client_t *c = &clients[(action >> 3) & 1];
    uvtw_wheel_t *wheel = http_server_wheel(server);
    switch (action % 8) {
    case 0:
    case 1:
    case 2: { /* the next bytes, one write */
      size_t len = fuzz_byte(in);
      if (action & 0x80)
        len *= 64;
      if (len > in->size - in->at)
        len = in->size - in->at;
      client_send(c, in->data + in->at, len);
      in->at += len;
      break;
    }
    case 3: {
      uint64_t ms = fuzz_uint(in, 2) * (action & 0x80 ? 100 : 1);
      CHECK(uvtw_wheel_advance(wheel, ms) == 0, "the server's clock moves");
      break;
    }
    case 4:
      CHECK(uvtw_wheel_advance_next(wheel) >= UV_EAGAIN,
            "the server's clock moves to its next timeout");
      break;
    case 5:
      client_close(c);
      settle();
      CHECK(c->closed, "a client's handle closes");
      client_open(c);
      break;
    case 6:
      client_half_close(c);
      break;
    default:
      CHECK(uvtw_wheel_advance(wheel, 1) == 0, "the server's clock moves");
      break;
    }
    settle();
    check_timers();
  }

  server_stop();
  for (int i = 0; i < CLIENTS; i++)
    client_close(&clients[i]);
  uv_run(&loop, UV_RUN_DEFAULT);
  CHECK(uv_loop_close(&loop) == 0, "the loop closes with nothing left open");
  return 0;
}
