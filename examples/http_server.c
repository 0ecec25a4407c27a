/* http_server: the example server itself (the library of http_server.h):
 * its configuration, listening, accepting (paused without a descriptor or
 * memory; the backlog taken in at shutdown), and the shutdown.
 * examples/README.md ("The server's files") draws how the files call each other. */
#include "http_routes.h"
#include "http_server_impl.h" /* first: uvtw.h asks for the POSIX uv.h needs */
#include "http_timer.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#define ACCEPT_RETRY_MS 50 /* after a failed allocation at accept, or no descriptor */
#define FD_BURST_MS 1000   /* running out of descriptors again within this is the same burst */

/* ---- Accepting ---------------------------------------------------------------- */

/* The server accepts on a uv_poll_t of its listening socket, not through
 * uv_listen, whose reserve descriptor takes and closes what waits in the
 * backlog once the process (any of its workers) runs out of descriptors.
 * A failed accept() leaves the connection in the backlog. */

static void on_listener_readable(uv_poll_t *handle, int status, int events);
static void on_accept_retry(uvtw_timer_t *timer);

/* Out of descriptors or memory: accepting pauses (the connections wait in
 * the backlog, nothing spins) and resumes ACCEPT_RETRY_MS later. */
static void accept_pause(http_server_t *s) {
  uv_poll_stop(&s->listener);
  if (!uvtw_timer_is_active(&s->accept_retry_timer))
    uvtw_timer_start(&s->accept_retry_timer, on_accept_retry, ACCEPT_RETRY_MS, 0);
}

/* A burst of exhaustion is counted and logged once in the process: it ends
 * FD_BURST_MS after the last time a descriptor was missing. */
static void out_of_descriptors(http_server_t *s, int err) {
  _Atomic uint64_t *end = s->config.fd_burst_end ? s->config.fd_burst_end : &s->fd_burst_end;
  uint64_t now = uv_hrtime() / 1000000;
  if (atomic_exchange(end, now + FD_BURST_MS) <= now)
    fprintf(stderr,
            "http_server: out of descriptors (%s): accepting paused (fd_exhausted=%" PRIu64 ")\n",
            strerror(err), ++s->counters.fd_exhausted);
}

static conn_t *accept_alloc(http_server_t *s) {
  if (s->config.bench_routes && s->config.fail_accept_allocs > 0) {
    s->config.fail_accept_allocs--; /* fault injection, for the tests */
    return NULL;
  }
  return calloc(1, sizeof(conn_t));
}

/* Accepts what waits in the backlog. A connection accepted without memory
 * for it waits in waiting_fd; at the shutdown (`draining`) it is closed
 * instead, counted in drain_dropped if its request arrived. Returns 0 once
 * the backlog is empty, -1 if accepting must pause. */
static int accept_pending(http_server_t *s, int draining) {
  for (;;) {
    conn_t *c;
    if (s->waiting_fd < 0 && (s->waiting_fd = accept(s->listen_fd, NULL, NULL)) < 0) {
      if (errno == EMFILE || errno == ENFILE) {
        out_of_descriptors(s, errno);
        return -1;
      }
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED)
        return 0;
      if (s->counters.accept_errors++ == 0) /* ENOBUFS, ENOMEM...: tried again later */
        fprintf(stderr, "http_server: accept: %s (counted in accept_errors)\n", strerror(errno));
      return -1;
    }
    c = accept_alloc(s);
    if (c == NULL) {
      s->counters.accept_nomem++;
      if (!draining)
        return -1;
      s->counters.drain_dropped += fd_bytes_waiting(s->waiting_fd);
      close(s->waiting_fd);
    } else {
      conn_open(s, c, s->waiting_fd);
      if (!draining && s->watch.paused > 0)
        loop_watch_wake(&s->watch); /* the lag is sampled while there is work */
    }
    s->waiting_fd = -1;
  }
}

static void on_accept_retry(uvtw_timer_t *timer) {
  http_server_t *s = timer->data;
  if (s->shutting_down)
    return;
  uv_poll_start(&s->listener, UV_READABLE, on_listener_readable);
  if (accept_pending(s, 0) != 0)
    accept_pause(s);
}

static void on_listener_readable(uv_poll_t *handle, int status, int events) {
  http_server_t *s = handle->data;
  (void)events;
  if (status < 0 || accept_pending(s, 0) != 0)
    accept_pause(s);
}

/* ---- Shutdown --------------------------------------------------------------- */

static void on_wheel_closed(uvtw_wheel_t *w, void *arg) {
  http_server_t *s = arg;
  (void)w;
  s->wheel = NULL;
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

void http_server_shutdown(http_server_t *s) {
  conn_t *c, *next;
  if (s->shutting_down)
    return;
  s->shutting_down = 1;
  if (s->listen_fd >= 0) {
    /* Takes every connection still in the backlog, whose clients connected,
     * and may have sent a request, while the loop was busy: closing the
     * listener would reset them. */
    accept_pending(s, 1);
    uv_close((uv_handle_t *)&s->listener, NULL); /* stops polling at once */
    close(s->listen_fd);
  }
  if (s->waiting_fd >= 0)
    close(s->waiting_fd); /* out of descriptors: what accept_pending left */
  uvtw_timer_stop(&s->accept_retry_timer);
  loop_watch_stop(&s->watch); /* it watches a server that takes no new requests */
  /* Idle connections close, but not one whose next request has reached
   * the machine and waits unread: it is answered. */
  for (c = s->connections; c != NULL; c = next) {
    next = c->next;
    if (conn_idle(c) && !conn_bytes_waiting(c))
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
  c->max_conn_buffered = 2 * 1048576;
  c->max_buffered = 64 * 1048576;
  c->sample_loop = 1;
  c->retry_after = 10;
  c->host = "127.0.0.1";
  c->listen_fd = -1;
}

/* Binds host:port, or takes the socket given, then listens. */
static int listen_on(http_server_t *s) {
  struct sockaddr_storage addr;
  socklen_t namelen = sizeof addr;
  int r = 0, one = 1, fd = s->config.listen_fd;
  if (fd < 0) {
    if (strchr(s->config.host, ':') != NULL)
      r = uv_ip6_addr(s->config.host, s->config.port, (struct sockaddr_in6 *)&addr);
    else
      r = uv_ip4_addr(s->config.host, s->config.port, (struct sockaddr_in *)&addr);
    if (r == 0 && ((fd = socket(addr.ss_family, SOCK_STREAM, 0)) < 0 ||
                   setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
                   bind(fd, (struct sockaddr *)&addr,
                        addr.ss_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                                   : sizeof(struct sockaddr_in)) != 0))
      r = uv_translate_sys_error(errno);
  }
  if (r == 0 && (ioctl(fd, FIONBIO, &one) != 0 || listen(fd, 4096) != 0 ||
                 getsockname(fd, (struct sockaddr *)&addr, &namelen) != 0))
    r = uv_translate_sys_error(errno);
  if (r == 0 && (r = uv_poll_init_socket(s->loop, &s->listener, fd)) == 0 &&
      (r = uv_poll_start(&s->listener, UV_READABLE, on_listener_readable)) != 0)
    uv_close((uv_handle_t *)&s->listener, NULL);
  if (r != 0) {
    fprintf(stderr, "http_server: cannot listen on %s:%d: %s\n", s->config.host, s->config.port,
            uv_strerror(r));
    if (fd >= 0)
      close(fd); /* the server owns it, failure included */
    return r;
  }
  s->listen_fd = fd;
  s->listener.data = s;
  s->listening_port = ntohs(addr.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&addr)->sin6_port
                                                       : ((struct sockaddr_in *)&addr)->sin_port);
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
                   &s->counters.shedding, &s->counters.open);
  s->handle_request = routes_handle;
  s->released = maybe_finish_shutdown;
  s->listen_fd = s->waiting_fd = -1;
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
