/* idle_server: a TCP line server on one uvtw wheel, the step after hello.c.
 * idle_server [PORT [IDLE_MS]]: 7000 and 10000 by default; port 0 picks one.
 * A line is echoed at once; "SLOW <ms>" is answered "DONE" after <ms>, or
 * "TIMEOUT" if the request deadline (1000 ms) comes first. A connection with
 * no request pending that sends nothing for IDLE_MS is told "idle timeout"
 * and closed. SIGINT closes everything, exit 0. Try: nc 127.0.0.1 7000 */
#include "uvtw.h" /* first: under -std=c11 it asks for the POSIX that uv.h needs */

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REQUEST_DEADLINE_MS 1000

/* Every timer of a connection lives inside it: a uvtw_timer_t is 64 bytes,
 * allocates nothing, and its start, stop and restart are O(1) whatever the
 * number of connections, so 100 000 connections cost 100 000 embedded timers
 * and one uv_timer_t (the wheel's), armed only to the earliest deadline. */
typedef struct {
  uv_tcp_t tcp;
  uvtw_timer_t idle;     /* restarted on every read */
  uvtw_timer_t work;     /* the SLOW request's answer */
  uvtw_timer_t deadline; /* the request deadline: whichever fires first wins */
  uv_shutdown_t shutdown;
  size_t len;
  char line[256];
} conn_t;

static uvtw_wheel_t *wheel;
static uv_tcp_t listener;
static uv_signal_t sigint;
static uint64_t idle_ms = 10000;

static void on_written(uv_write_t *req, int status) {
  (void)status; /* UV_ECANCELED if the connection closed first: nothing to do */
  free(req);
}

/* One allocation per reply: the write request, then the bytes it sends. */
static void reply(conn_t *c, const char *text) {
  size_t n = strlen(text);
  uv_write_t *req = malloc(sizeof *req + n + 1);
  if (req == NULL)
    return;
  char *data = memcpy(req + 1, text, n);
  data[n] = '\n';
  uv_buf_t buf = uv_buf_init(data, (unsigned)n + 1);
  if (uv_write(req, (uv_stream_t *)&c->tcp, &buf, 1, on_written) != 0)
    free(req);
}

/* A connection's timers are all stopped before uv_close, and a stopped
 * uvtw_timer_t holds nothing (the wheel keeps no pointer to it), so the
 * memory that embeds them may be freed here, when libuv is done with tcp. */
static void on_closed(uv_handle_t *handle) {
  free(handle->data);
}

static void on_shutdown(uv_shutdown_t *req, int status) {
  (void)status; /* UV_ECANCELED if SIGINT closed the connection meanwhile */
  if (!uv_is_closing((uv_handle_t *)req->handle))
    uv_close((uv_handle_t *)req->handle, on_closed);
}

/* Closes the connection; with `why`, tells the client first and closes once
 * that is written (uv_shutdown waits for pending writes, then sends a FIN). */
static void conn_close(conn_t *c, const char *why) {
  uvtw_timer_stop(&c->idle); /* O(1) each, and a no-op on an inactive timer */
  uvtw_timer_stop(&c->work);
  uvtw_timer_stop(&c->deadline);
  uv_read_stop((uv_stream_t *)&c->tcp); /* no read may start a timer again */
  if (why != NULL) {
    reply(c, why);
    if (uv_shutdown(&c->shutdown, (uv_stream_t *)&c->tcp, on_shutdown) == 0)
      return;
  }
  if (!uv_is_closing((uv_handle_t *)&c->tcp))
    uv_close((uv_handle_t *)&c->tcp, on_closed);
}

static void on_idle(uvtw_timer_t *t) {
  conn_close(t->data, "idle timeout");
}

/* The SLOW request's work or its deadline fired, whichever came first. The
 * other is stopped (O(1); it never fires now); the connection is idle again. */
static void on_request_end(uvtw_timer_t *t) {
  conn_t *c = t->data;
  uvtw_timer_stop(&c->work);
  uvtw_timer_stop(&c->deadline);
  reply(c, t == &c->work ? "DONE" : "TIMEOUT");
  uvtw_timer_start(&c->idle, on_idle, idle_ms, 0);
}

static void handle_line(conn_t *c, char *line) {
  unsigned ms;
  if (uvtw_timer_is_active(&c->deadline)) /* one request at a time; the timer is the state */
    reply(c, "BUSY");
  else if (sscanf(line, "SLOW %u", &ms) == 1 && ms > 0) {
    /* A request pending is not idleness: the idle timer waits for its end. */
    uvtw_timer_stop(&c->idle);
    uvtw_timer_start(&c->work, on_request_end, ms, 0);
    uvtw_timer_start(&c->deadline, on_request_end, REQUEST_DEADLINE_MS, 0);
  } else
    reply(c, line);
}

static void on_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buf) {
  conn_t *c = handle->data;
  (void)suggested;
  *buf = uv_buf_init(c->line + c->len, (unsigned)(sizeof c->line - c->len));
}

static void on_read(uv_stream_t *stream, ssize_t n, const uv_buf_t *buf) {
  conn_t *c = stream->data;
  (void)buf;
  if (n < 0) /* EOF or error: nothing more to say to this client */
    conn_close(c, NULL);
  if (n <= 0)
    return;
  /* Activity: push the idle deadline back. Starting an active timer moves
   * it from one slot of the wheel to another, O(1), no allocation: cheap
   * enough to do on every read. Not while a request is pending. */
  if (!uvtw_timer_is_active(&c->deadline))
    uvtw_timer_start(&c->idle, on_idle, idle_ms, 0);
  c->len += (size_t)n;
  char *start = c->line, *nl;
  for (; (nl = memchr(start, '\n', c->len - (size_t)(start - c->line))) != NULL; start = nl + 1) {
    *nl = '\0';
    handle_line(c, start);
  }
  c->len -= (size_t)(start - c->line);
  memmove(c->line, start, c->len);
  if (c->len == sizeof c->line)
    conn_close(c, "line too long");
}

static void on_connection(uv_stream_t *server, int status) {
  conn_t *c;
  if (status != 0 || (c = calloc(1, sizeof *c)) == NULL)
    return;
  uv_tcp_init(server->loop, &c->tcp);
  c->tcp.data = c->idle.data = c->work.data = c->deadline.data = c;
  uvtw_timer_init(wheel, &c->idle);
  uvtw_timer_init(wheel, &c->work);
  uvtw_timer_init(wheel, &c->deadline);
  if (uv_accept(server, (uv_stream_t *)&c->tcp) != 0 ||
      uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) != 0)
    conn_close(c, NULL);
  else
    uvtw_timer_start(&c->idle, on_idle, idle_ms, 0);
}

static void on_wheel_closed(uvtw_wheel_t *w, void *arg) {
  (void)w; /* its timers are all inactive, its handles closed */
  fprintf(stderr, "idle_server: %s\n", (const char *)arg);
}

/* For uv_walk: the connections are the TCP handles with data (no listener). */
static void close_conn(uv_handle_t *handle, void *arg) {
  (void)arg;
  if (handle->type == UV_TCP && handle->data != NULL)
    conn_close(handle->data, NULL);
}

/* The close order: stop accepting, close every connection (stopping its
 * timers), then the wheel (its own handles), then this signal handle. With
 * nothing left open uv_run returns in main. */
static void on_sigint(uv_signal_t *sig, int signum) {
  (void)signum;
  uv_close((uv_handle_t *)&listener, NULL);
  uv_walk(sig->loop, close_conn, NULL);
  uvtw_wheel_close(wheel, on_wheel_closed, "wheel closed");
  uv_close((uv_handle_t *)sig, NULL);
}

int main(int argc, char **argv) {
  uv_loop_t *loop = uv_default_loop();
  int port = argc > 1 ? atoi(argv[1]) : 7000;
  idle_ms = argc > 2 ? strtoull(argv[2], NULL, 10) : idle_ms;
  signal(SIGPIPE, SIG_IGN); /* a write to a gone client is an error, not death */
  struct sockaddr_in addr, bound;
  int len = sizeof bound;
  int r = port < 0 || port > 65535 || idle_ms == 0 ? UV_EINVAL : uvtw_wheel_new(loop, NULL, &wheel);
  if (r == 0 && (r = uv_signal_init(loop, &sigint)) == 0 &&
      (r = uv_signal_start(&sigint, on_sigint, SIGINT)) == 0 &&
      (r = uv_ip4_addr("127.0.0.1", port, &addr)) == 0 && (r = uv_tcp_init(loop, &listener)) == 0 &&
      (r = uv_tcp_bind(&listener, (const struct sockaddr *)&addr, 0)) == 0)
    r = uv_listen((uv_stream_t *)&listener, 128, on_connection);
  if (r != 0) {
    fprintf(stderr, "idle_server [PORT [IDLE_MS]]: %s\n", uv_strerror(r));
    return 1;
  }
  uv_tcp_getsockname(&listener, (struct sockaddr *)&bound, &len);
  printf("listening on 127.0.0.1:%d\n", ntohs(bound.sin_port));
  fflush(stdout);
  uv_run(loop, UV_RUN_DEFAULT); /* returns once on_sigint closed everything */
  return uv_loop_close(loop) == 0 ? 0 : 1;
}
