/* http_server_impl: the state of one example server, shared by the files
 * that make it (README.md, "The server's files"); a program uses
 * http_server.h. http_server.c owns it; the connections, the routes and
 * /delay read its configuration and count in its counters, and reach back
 * up only through the two callbacks it sets. */
#ifndef UVTW_EXAMPLES_HTTP_SERVER_IMPL_H
#define UVTW_EXAMPLES_HTTP_SERVER_IMPL_H

#include "http_conn.h" /* first: uvtw.h asks for the POSIX uv.h needs */
#include "http_loop_watch.h"

struct http_server_s {
  http_server_config_t config;
  http_server_counters_t counters;
  uv_loop_t *loop;
  uvtw_wheel_t *wheel;      /* NULL once closed */
  uvtw_stats_t wheel_final; /* the wheel's statistics just before it closed */
  http_limits_t limits;     /* the config's, for the parser */
  loop_watch_t watch;       /* the lag: the last completed second, shedding */
  conn_t *connections;      /* every open connection, for the shutdown */
  uint64_t read_ahead;      /* bytes the connections keep in `pending` */
  int shutting_down;
  void (*handle_request)(conn_t *c);  /* a request is complete: answer it (the routes) */
  void (*released)(http_server_t *s); /* a connection or a job is gone: the shutdown may end */
  /* http_server.c's own: */
  uv_poll_t listener; /* of listen_fd, while accepting */
  int listen_fd;      /* -1: none */
  int waiting_fd;     /* accepted, waiting for memory for its connection; -1: none */
  uvtw_timer_t accept_retry_timer, grace_timer;
  _Atomic uint64_t fd_burst_end; /* config.fd_burst_end's, when that is NULL */
  int wheel_closing;
  int listening_port;
  char read_buffer[64 * 1024]; /* one loop thread: reads are parsed at once */
};

#endif
