/* idle_server: a TCP line server with an idle timeout per connection and a
 * deadline per request, on one uvtw wheel. The next step after hello.c.
 *
 *   idle_server [PORT [IDLE_MS]]   PORT 7000 by default, 0: any free port
 *                                  IDLE_MS 10000 by default
 *
 * Protocol, one line per request:
 *   any line    echoed at once
 *   SLOW <ms>   answered "DONE <ms>" after <ms>, or "TIMEOUT" if the request
 *               deadline (1000 ms) comes first
 * A connection with no request pending that sends nothing for IDLE_MS gets
 * "idle timeout" and is closed. SIGINT closes everything and exits 0.
 *
 * Try it: build/examples/idle_server 7000 5000, then nc 127.0.0.1 7000. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* uv.h needs POSIX types under -std=c11 */
#endif
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "uvtw.h"

#define REQUEST_DEADLINE_MS 1000
#define LINE_MAX_LEN 256

/* Every timer of a connection lives inside it: a uvtw_timer_t is 64 bytes,
 * allocates nothing, and its start, stop and restart are O(1) whatever the
 * number of connections, so 100 000 connections cost 100 000 embedded timers
 * and one uv_timer_t (the wheel's), armed only to the earliest deadline. */
typedef struct conn_s {
  uv_tcp_t tcp;
  uvtw_timer_t idle;     /* restarted on every read */
  uvtw_timer_t work;     /* the SLOW request's answer */
  uvtw_timer_t deadline; /* the request deadline: whichever fires first wins */
  uv_shutdown_t shutdown;
  struct conn_s *next, **prev; /* every open connection, for the shutdown */
  unsigned slow_ms;            /* the pending SLOW request, 0 if none */
  int closing;
  size_t len;
  char line[LINE_MAX_LEN];
} conn_t;

typedef struct {
  uv_write_t req;
  char data[LINE_MAX_LEN + 16];
} write_t;

static uvtw_wheel_t *wheel;
static uv_tcp_t listener;
static uv_signal_t sigint;
static conn_t *conns;
static uint64_t idle_ms = 10000;

static void on_written(uv_write_t *req, int status) {
  (void)status; /* UV_ECANCELED if the connection closed first: nothing to do */
  free(req);
}

static void reply(conn_t *c, const char *text) {
  write_t *w = malloc(sizeof *w);
  if (w == NULL)
    return;
  snprintf(w->data, sizeof w->data, "%s\n", text);
  uv_buf_t buf = uv_buf_init(w->data, (unsigned)strlen(w->data));
  if (uv_write(&w->req, (uv_stream_t *)&c->tcp, &buf, 1, on_written) != 0)
    free(w);
}

/* A connection's timers are all stopped before uv_close, and a stopped
 * uvtw_timer_t holds nothing (the wheel keeps no pointer to it), so the
 * memory that embeds them may be freed here, when libuv is done with tcp. */
static void on_closed(uv_handle_t *handle) {
  conn_t *c = handle->data;
  *c->prev = c->next;
  if (c->next != NULL)
    c->next->prev = c->prev;
  free(c);
}

static void stop_timers(conn_t *c) {
  c->closing = 1;
  uvtw_timer_stop(&c->idle); /* O(1) each, and a no-op on an inactive timer */
  uvtw_timer_stop(&c->work);
  uvtw_timer_stop(&c->deadline);
}

static void close_now(conn_t *c) {
  stop_timers(c);
  if (!uv_is_closing((uv_handle_t *)&c->tcp))
    uv_close((uv_handle_t *)&c->tcp, on_closed);
}

static void on_shutdown(uv_shutdown_t *req, int status) {
  (void)status;
  close_now(req->data);
}

/* Says why, then closes once the message is written (uv_shutdown waits for
 * pending writes, so the client reads the message before the FIN). */
static void close_with(conn_t *c, const char *why) {
  if (c->closing)
    return;
  stop_timers(c);
  uv_read_stop((uv_stream_t *)&c->tcp);
  reply(c, why);
  c->shutdown.data = c;
  if (uv_shutdown(&c->shutdown, (uv_stream_t *)&c->tcp, on_shutdown) == 0)
    return;
  close_now(c);
}

static void on_idle(uvtw_timer_t *t) {
  close_with(t->data, "idle timeout");
}

/* The request ends one way or the other: stop the timer that lost (a stopped
 * timer never fires), and the connection is idle again from now. */
static void end_request(conn_t *c, const char *answer) {
  uvtw_timer_stop(&c->work);
  uvtw_timer_stop(&c->deadline);
  c->slow_ms = 0;
  reply(c, answer);
  uvtw_timer_start(&c->idle, on_idle, idle_ms, 0);
}

static void on_work_done(uvtw_timer_t *t) {
  conn_t *c = t->data;
  char answer[32];
  snprintf(answer, sizeof answer, "DONE %u", c->slow_ms);
  end_request(c, answer);
}

static void on_deadline(uvtw_timer_t *t) {
  end_request(t->data, "TIMEOUT");
}

static void handle_line(conn_t *c, char *line) {
  unsigned ms;
  char extra;
  if (c->slow_ms != 0) {
    reply(c, "BUSY"); /* one request at a time: keeps the example short */
  } else if (sscanf(line, "SLOW %u%c", &ms, &extra) == 1 && ms > 0) {
    /* A request pending is not idleness: the idle timer waits for its end. */
    uvtw_timer_stop(&c->idle);
    c->slow_ms = ms;
    uvtw_timer_start(&c->work, on_work_done, ms, 0);
    uvtw_timer_start(&c->deadline, on_deadline, REQUEST_DEADLINE_MS, 0);
  } else {
    reply(c, line);
  }
}

static void on_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buf) {
  conn_t *c = handle->data;
  (void)suggested;
  *buf = uv_buf_init(c->line + c->len, (unsigned)(sizeof c->line - c->len));
}

static void on_read(uv_stream_t *stream, ssize_t n, const uv_buf_t *buf) {
  conn_t *c = stream->data;
  (void)buf;
  if (n < 0) { /* EOF or error: nothing more to say to this client */
    close_now(c);
    return;
  }
  if (n == 0)
    return;
  /* Activity: push the idle deadline back. Starting an active timer moves
   * it from one slot of the wheel to another, O(1), no allocation: cheap
   * enough to do on every read. Not while a request is pending. */
  if (c->slow_ms == 0)
    uvtw_timer_start(&c->idle, on_idle, idle_ms, 0);
  c->len += (size_t)n;
  char *start = c->line, *nl;
  while (!c->closing && (nl = memchr(start, '\n', c->len - (size_t)(start - c->line))) != NULL) {
    *nl = '\0';
    if (nl > start && nl[-1] == '\r')
      nl[-1] = '\0';
    handle_line(c, start);
    start = nl + 1;
  }
  c->len -= (size_t)(start - c->line);
  memmove(c->line, start, c->len);
  if (c->len == sizeof c->line)
    close_with(c, "line too long");
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
  c->next = conns; /* in the list first: on_closed unlinks */
  c->prev = &conns;
  if (conns != NULL)
    conns->prev = &c->next;
  conns = c;
  if (uv_accept(server, (uv_stream_t *)&c->tcp) != 0 ||
      uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) != 0) {
    close_now(c);
    return;
  }
  uvtw_timer_start(&c->idle, on_idle, idle_ms, 0);
}

static void on_wheel_closed(uvtw_wheel_t *w, void *arg) {
  (void)w;
  (void)arg;
  fprintf(stderr, "idle_server: closed\n");
}

/* The close order: stop accepting, close every connection (stopping its
 * timers), then the wheel, then this signal handle. With nothing left open
 * uv_run returns in main. */
static void on_sigint(uv_signal_t *sig, int signum) {
  (void)signum;
  uv_close((uv_handle_t *)&listener, NULL);
  for (conn_t *c = conns; c != NULL; c = c->next)
    close_now(c);
  uvtw_wheel_close(wheel, on_wheel_closed, NULL);
  uv_close((uv_handle_t *)sig, NULL);
}

int main(int argc, char **argv) {
  uv_loop_t *loop = uv_default_loop();
  int port = argc > 1 ? atoi(argv[1]) : 7000;
  if (argc > 2)
    idle_ms = strtoull(argv[2], NULL, 10);
  if (port < 0 || port > 65535 || idle_ms == 0) {
    fprintf(stderr, "usage: idle_server [PORT [IDLE_MS]]\n");
    return 2;
  }
#ifdef SIGPIPE
  signal(SIGPIPE, SIG_IGN); /* a write to a gone client is an error, not death */
#endif
  struct sockaddr_in addr;
  struct sockaddr_storage bound;
  int len = sizeof bound;
  int r = uvtw_wheel_new(loop, NULL, &wheel);
  if (r == 0 && (r = uv_ip4_addr("127.0.0.1", port, &addr)) == 0 &&
      (r = uv_tcp_init(loop, &listener)) == 0 &&
      (r = uv_tcp_bind(&listener, (const struct sockaddr *)&addr, 0)) == 0)
    r = uv_listen((uv_stream_t *)&listener, 128, on_connection);
  if (r != 0) {
    fprintf(stderr, "idle_server: %s\n", uv_strerror(r));
    return 1;
  }
  uv_tcp_getsockname(&listener, (struct sockaddr *)&bound, &len);
  printf("listening on 127.0.0.1:%d\n", ntohs(((struct sockaddr_in *)&bound)->sin_port));
  fflush(stdout);
  uv_signal_init(loop, &sigint);
  uv_signal_start(&sigint, on_sigint, SIGINT);

  uv_run(loop, UV_RUN_DEFAULT); /* returns once on_sigint closed everything */
  return uv_loop_close(loop) == 0 ? 0 : 1;
}
