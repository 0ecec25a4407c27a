/* http_conn: one connection of the example server (see http_conn.h).
 * Requests on one connection are answered one at a time, in order: the
 * parser (http1.c) stops after each, and what the client pipelined waits
 * in `pending` until the answer is written. */
#include "http_server_impl.h" /* first: uvtw.h asks for the POSIX uv.h needs */

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#define LINGER_MS 2000          /* lingering close: the longest wait for the client's EOF */
#define PENDING_MAX (64 * 1024) /* bytes kept while a request is answered, each connection */

static void conn_feed(conn_t *c, const char *data, size_t len);
static void conn_resume(conn_t *c);
static int conn_read_start(conn_t *c);

/* ---- Timeouts ------------------------------------------------------------- */

static void on_headers_timeout(http_timer_t *timer) {
  conn_t *c = timeout_fired(timer);
  c->server->counters.headers_timeouts++;
  c->close_reason = CLOSE_HEADERS_TIMEOUT;
  conn_fail(c, 408); /* like Node: 408 and close */
}

static void on_request_timeout(http_timer_t *timer) {
  conn_t *c = timeout_fired(timer);
  c->server->counters.request_timeouts++;
  c->close_reason = CLOSE_REQUEST_TIMEOUT;
  conn_fail(c, 408);
}

static void on_keep_alive_timeout(http_timer_t *timer) {
  conn_close(timeout_fired(timer), CLOSE_KEEPALIVE_TIMEOUT);
}

static void on_send_timeout(http_timer_t *timer) {
  conn_close(timeout_fired(timer), CLOSE_SEND_TIMEOUT);
}

static void on_linger_timeout(http_timer_t *timer) {
  conn_t *c = timeout_fired(timer);
  c->server->counters.linger_timeouts++;
  conn_close(c, (enum http_close_reason)c->close_reason);
}

/* ---- Writing ---------------------------------------------------------------- */

typedef struct write_req_s {
  uv_write_t req;
  conn_t *conn;
  int interim; /* 100 Continue: not the answer */
  size_t len;
  char data[];
} write_req_t;

static void buffered_add(http_server_t *s, size_t n) {
  s->counters.buffered += n;
  if (s->counters.buffered > s->counters.buffered_peak)
    s->counters.buffered_peak = s->counters.buffered;
}

/* The bytes the server holds for a connection: what it pipelined, and its
 * answers not yet written. The server's total is counters.buffered. */
static uint64_t held(const conn_t *c) {
  return c->pending.cap + c->writing;
}

/* Cuts the connections that hold the most until the server is within its
 * caps: bytes pipelined (read ahead) by all within a quarter of
 * max_buffered, so that answers always have the rest (closed_read_ahead);
 * everything within max_buffered (closed_slow_reader). A client that reads
 * its answers as they come holds little and is not the one cut. */
static void caps_enforce(http_server_t *s) {
  for (;;) {
    int ahead = s->read_ahead > s->config.max_buffered / 4;
    conn_t *most = NULL;
    if (!ahead && s->counters.buffered <= s->config.max_buffered)
      return;
    for (conn_t *x = s->connections; x != NULL; x = x->next)
      if (most == NULL || (ahead ? x->pending.cap > most->pending.cap : held(x) > held(most)))
        most = x;
    if (most == NULL)
      return;
    conn_close(most, ahead ? CLOSE_READ_AHEAD : CLOSE_SLOW_READER);
  }
}

static void on_shutdown(uv_shutdown_t *req, int status) {
  (void)status;
  free(req); /* the linger timer or the client's EOF ends the connection */
}

/* The last answer is written: close, after the client's EOF if it may still
 * be sending (closing with unread bytes would reset the connection and could
 * destroy the answer before the client read it). */
static void conn_finish(conn_t *c) {
  uv_shutdown_t *req = c->peer_ended ? NULL : malloc(sizeof *req);
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
  write_req_t *w = (write_req_t *)req; /* its first member */
  conn_t *c = w->conn;
  http_server_t *s = c->server;
  int interim = w->interim;
  size_t len = w->len;
  free(w);
  if (c->state == ST_CLOSING)
    return; /* cancelled by uv_close; conn_close gave its bytes back */
  s->counters.buffered -= len;
  c->writing -= len;
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

/* Queues bytes on the connection; a response that the kernel did not take at
 * once is under the send timeout; then the caps hold (caps_enforce). Returns
 * 0, or an error if it closed the connection. */
static int conn_write(conn_t *c, write_req_t *w, size_t len) {
  http_server_t *s = c->server;
  uv_buf_t buf = uv_buf_init(w->data, (unsigned)len);
  size_t queued;
  int r;
  w->conn = c;
  r = uv_write(&w->req, (uv_stream_t *)&c->tcp, &buf, 1, on_write);
  if (r != 0) {
    free(w);
    conn_close(c, CLOSE_PEER);
    return r;
  }
  w->len = len;
  c->writing += len;
  buffered_add(s, len);
  queued = uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp);
  if (queued > s->config.max_conn_buffered)
    conn_close(c, CLOSE_SLOW_READER); /* uv_close gives the queued writes back */
  else
    caps_enforce(s);
  if (c->state == ST_CLOSING)
    return UV_ENOBUFS;
  if (!w->interim && queued > 0)
    timeout_start(c, T_IO, on_send_timeout, s->config.send_timeout);
  return 0;
}

/* The close reason of a final answer that no timeout or error named. */
static uint8_t final_reason(const conn_t *c, int status) {
  if (c->server->shutting_down)
    return CLOSE_SHUTDOWN;
  if (!c->keep_alive)
    return CLOSE_NOT_KEEPALIVE;
  if (c->peer_ended)
    return CLOSE_PEER;
  return status == 503 ? CLOSE_UNAVAILABLE : CLOSE_BAD_REQUEST;
}

/* A HEAD request gets the headers, Content-Length included, without the body. */
void conn_respond_with(conn_t *c, int status, const char *reason, const char *type,
                       const char *extra, const char *body, size_t body_len, int final) {
  http_server_t *s = c->server;
  size_t cap = http_response_size(reason, type, extra, body_len);
  write_req_t *w = malloc(sizeof *w + cap);
  /* While shutting down, or after the client's EOF, the answer to the last
   * request received closes the connection. */
  if (((s->shutting_down || c->peer_ended) && c->pending.off == c->pending.len) || !c->keep_alive)
    final = 1;
  if (w == NULL) {
    conn_close(c, CLOSE_NO_MEMORY);
    return;
  }
  w->interim = 0;
  if (status >= 100 && status < 600)
    s->counters.responses[status / 100 - 1]++;
  if (final) {
    c->state = ST_DRAINING;
    if (c->close_reason == CLOSE_PEER) /* the default: no timeout or error named one */
      c->close_reason = final_reason(c, status);
  } else {
    c->state = ST_WRITING;
  }
  conn_write(c, w,
             http_response_format(w->data, cap, status, reason, type, extra, body, body_len,
                                  c->request.method != HTTP_HEAD, final,
                                  s->config.keep_alive_timeout));
}

void conn_respond(conn_t *c, int status, const char *reason, const char *body, size_t body_len,
                  int final) {
  conn_respond_with(c, status, reason, "text/plain", "", body, body_len, final);
}

void conn_fail(conn_t *c, int status) {
  const char *reason = http_reason(status);
  char body[64];
  int n;
  if (reason == NULL)
    reason = http_reason(status = 400);
  timeouts_stop(c);
  if (status != 408)
    c->close_reason = CLOSE_BAD_REQUEST;
  n = snprintf(body, sizeof body, "%d %s\n", status, reason);
  conn_respond(c, status, reason, body, (size_t)n, 1);
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

/* ---- Reading ---------------------------------------------------------------- */

/* Parses what arrived, and acts on what the parser saw: a request's first
 * byte (its timeouts start if the connection was idle), the end of its head
 * (100 Continue if the client waits for it), the end of the request, an
 * error (answered, then the close). */
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
  if (result == HTTP_PARSE_ERROR && c->state != ST_CLOSING)
    conn_fail(c, r->error_status);
  return result;
}

static void pending_free(conn_t *c) {
  c->server->counters.buffered -= c->pending.cap;
  c->server->read_ahead -= c->pending.cap;
  http_pipeline_free(&c->pending);
}

/* Keeps bytes that arrive while a request is answered. */
static void conn_keep_pending(conn_t *c, const char *data, size_t len) {
  size_t grown;
  if (len == 0)
    return;
  if (http_pipeline_keep(&c->pending, data, len, &grown) != 0) {
    conn_close(c, CLOSE_NO_MEMORY);
    return;
  }
  buffered_add(c->server, grown);
  c->server->read_ahead += grown;
  if (c->pending.len - c->pending.off >= PENDING_MAX && c->reading) {
    uv_read_stop((uv_stream_t *)&c->tcp); /* back-pressure until it is parsed */
    c->reading = 0;
  }
  caps_enforce(c->server);
}

static void conn_feed(conn_t *c, const char *data, size_t len) {
  size_t used;
  if (c->state != ST_READING && c->state != ST_IDLE) {
    if (c->state == ST_HANDLING || c->state == ST_WRITING)
      conn_keep_pending(c, data, len);
    return; /* DRAINING, LINGERING: discarded */
  }
  if (conn_parse(c, data, len, &used) == HTTP_PARSE_DONE && c->state != ST_CLOSING) {
    conn_keep_pending(c, data + used, len - used);
    if (c->state == ST_HANDLING)
      c->server->handle_request(c);
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
  while (c->pending.off < c->pending.len && (c->state == ST_IDLE || c->state == ST_READING)) {
    size_t used;
    enum http_parse_result r =
        conn_parse(c, c->pending.data + c->pending.off, c->pending.len - c->pending.off, &used);
    if (c->state == ST_CLOSING)
      return;
    if (r == HTTP_PARSE_ERROR)
      break;
    c->pending.off += (uint32_t)used;
    if (r == HTTP_PARSE_DONE && c->state == ST_HANDLING)
      s->handle_request(c);
  }
  if (c->state == ST_CLOSING)
    return;
  if (c->pending.off == c->pending.len)
    pending_free(c);
  if (closing) {
    if (c->state == ST_IDLE || c->state == ST_READING)
      conn_close(c, s->shutting_down ? CLOSE_SHUTDOWN : CLOSE_PEER);
    return;
  }
  if (!c->reading && c->pending.len - c->pending.off < PENDING_MAX && conn_read_start(c) != 0)
    conn_close(c, CLOSE_PEER);
}

static void on_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buf) {
  conn_t *c = handle->data;
  size_t room = sizeof c->server->read_buffer;
  (void)suggested;
  if (c->state == ST_HANDLING || c->state == ST_WRITING) /* read ahead: up to PENDING_MAX kept */
    room = PENDING_MAX - (c->pending.len - c->pending.off);
  *buf = uv_buf_init(c->server->read_buffer, (unsigned)room);
}

/* The client shut down its side. By default that ends what it asked for:
 * an answer being prepared is let go (its work cancelled) and the
 * connection closed at once; one being written is sent, requests kept
 * behind it dropped. With allow_half_open the answers come, then the
 * close. */
static void conn_on_eof(conn_t *c) {
  int half_open = c->server->config.allow_half_open;
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
  case ST_HANDLING:
    if (!half_open)
      conn_close(c, CLOSE_CLIENT_GONE);
    break;
  default: /* WRITING, DRAINING: the answer queued is sent, then the close */
    if (!half_open)
      c->pending.off = c->pending.len;
    break;
  }
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf) {
  conn_t *c = stream->data;
  if (nread == UV_EOF) {
    conn_on_eof(c);
    return;
  }
  if (nread == UV_ENOBUFS) { /* PENDING_MAX kept: read again once it is parsed */
    uv_read_stop(stream);
    c->reading = 0;
    return;
  }
  if (nread < 0) {
    conn_close(c, CLOSE_PEER);
    return;
  }
  c->server->counters.received += (uint64_t)nread;
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

/* ---- State ----------------------------------------------------------------- */

int conn_in_flight(const conn_t *c) {
  return c->state == ST_HANDLING || c->state == ST_WRITING || c->state == ST_DRAINING ||
         (c->state == ST_READING && c->request_started);
}

int conn_idle(const conn_t *c) {
  return c->state == ST_IDLE || (c->state == ST_READING && !c->request_started);
}

int fd_bytes_waiting(uv_os_fd_t fd) {
  int n = 0;
  return ioctl(fd, FIONREAD, &n) == 0 && n > 0;
}

int conn_bytes_waiting(const conn_t *c) {
  uv_os_fd_t fd;
  return uv_fileno((const uv_handle_t *)&c->tcp, &fd) == 0 && fd_bytes_waiting(fd);
}

/* ---- Opening and closing ---------------------------------------------------- */

static void on_handle_closed(uv_handle_t *handle) {
  conn_t *c = handle->data;
  http_server_t *s = c->server;
  if (--c->handles_open > 0)
    return;
  s->counters.open--;
  free(c);
  s->released(s);
}

void conn_close(conn_t *c, enum http_close_reason reason) {
  http_server_t *s = c->server;
  if (c->state == ST_CLOSING)
    return;
  c->state = ST_CLOSING;
  s->counters.closed[reason]++;
  timeouts_stop(c);
  if (c->job != NULL) {
    c->abandon(c->job);
    c->job = NULL;
  }
  pending_free(c);
  s->counters.buffered -= c->writing; /* uv_close cancels the writes */
  c->writing = 0;
  if (c->prev != NULL)
    c->prev->next = c->next;
  else
    s->connections = c->next;
  if (c->next != NULL)
    c->next->prev = c->prev;
  c->handles_open = (uint8_t)(1 + timers_close(c, on_handle_closed));
  uv_close((uv_handle_t *)&c->tcp, on_handle_closed);
}

void conn_open(http_server_t *s, conn_t *c, int fd) {
  int r;
  c->server = s;
  uv_tcp_init(s->loop, &c->tcp);
  c->tcp.data = c;
  s->counters.accepted++;
  if (++s->counters.open > s->counters.open_peak)
    s->counters.open_peak = s->counters.open;
  timers_init(c);
  http_request_init(&c->request, &s->limits);
  c->next = s->connections;
  if (s->connections != NULL)
    s->connections->prev = c;
  s->connections = c;
  c->state = ST_READING;
  c->close_reason = CLOSE_PEER;
  r = uv_tcp_open(&c->tcp, fd);
  if (r != 0)
    close(fd); /* the handle does not own it */
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
