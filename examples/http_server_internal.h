/* http_server_internal: the state of one example server, shared by the
 * files that make it (examples/README.md, "The server's files").
 * http_server.c owns it; the connections, the routes and /delay read its
 * configuration and count in its counters, and reach back up only through
 * the two callbacks it sets. */
#ifndef UVTW_EXAMPLES_HTTP_SERVER_INTERNAL_H
#define UVTW_EXAMPLES_HTTP_SERVER_INTERNAL_H

#include "http1.h"
#include "http_loop_watch.h"
#include "http_server.h"

typedef struct conn_s conn_t;

struct http_server_s {
  http_server_config_t config;
  http_server_counters_t counters;
  uv_loop_t *loop;
  uvtw_wheel_t *wheel;      /* NULL once closed */
  uvtw_stats_t wheel_final; /* the wheel's statistics just before it closed */
  http_limits_t limits;     /* the config's, for the parser */
  loop_watch_t watch;       /* the lag: the last completed second, shedding */
  conn_t *connections;      /* every open connection, for the shutdown */
  int shutting_down;
  void (*handle_request)(conn_t *c);  /* a request is complete: answer it (the routes) */
  void (*released)(http_server_t *s); /* a connection or a job is gone: the shutdown may end */
  /* http_server.c's own: */
  uv_tcp_t listener;
  uvtw_timer_t accept_retry_timer, grace_timer;
  int accept_waiting;    /* a connection waits in the listener for memory or a descriptor */
  uint64_t fd_burst_end; /* wheel time: out of descriptors after it is a new burst */
  int wheel_closing;
  int listening_port;
  char read_buffer[64 * 1024]; /* one loop thread: reads are parsed at once */
};

#endif
