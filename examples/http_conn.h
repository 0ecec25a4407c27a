/* http_conn: one connection of the example server (http_conn.c), under a
 * timer in every state:
 *
 *   READING    a request is awaited or arriving: headersTimeout (the head,
 *              the slowloris defence) and requestTimeout (the whole request)
 *   IDLE       between requests: keepAliveTimeout + keepAliveTimeoutBuffer
 *   HANDLING   the answer is being prepared (/delay): the answer's own task
 *   WRITING    the answer is queued because the client does not read: the
 *              send timeout; bytes the client pipelines meanwhile (and while
 *              HANDLING) are kept up to PENDING_MAX, then reading pauses
 *   DRAINING   the last answer is queued: the send timeout
 *   LINGERING  the write side is shut down; what the client still sends is
 *              read and discarded until its EOF or LINGER_MS, so that closing
 *              does not reset the connection before it read the answer */
#ifndef UVTW_EXAMPLES_HTTP_CONN_H
#define UVTW_EXAMPLES_HTTP_CONN_H

#include <stddef.h>
#include <stdint.h>

#include "http1.h"
#include "http_server.h"
#include "http_timer.h"

typedef struct conn_s conn_t;

enum conn_state {
  ST_READING,
  ST_IDLE,
  ST_HANDLING,
  ST_WRITING,
  ST_DRAINING,
  ST_LINGERING,
  ST_CLOSING
};

enum { T_HEADERS, T_REQUEST, T_IO, CONN_TIMERS }; /* a connection's timers */

struct conn_s {
  http_server_t *server;
  uv_tcp_t tcp;
  http_request_t request;
  conn_t *prev, *next;        /* the server's open connections */
  void *job;                  /* work preparing the answer (/delay), if any */
  void (*abandon)(void *job); /* lets the job go when the connection closes first */
  http_pipeline_t pending;    /* bytes received while answering */
  uint64_t writing;           /* bytes of its answers queued, not yet written */
  uint8_t state;
  uint8_t keep_alive; /* the request being answered allows another */
  uint8_t reading;
  uint8_t peer_ended;      /* EOF from the client: the answers it may still get, then close */
  uint8_t request_started; /* a byte of the current request has arrived */
  uint8_t shed;            /* its first byte came while the server was shedding */
  uint8_t close_reason;
  uint8_t handles_open;             /* close callbacks still to come; freed at 0 */
  http_timer_t timers[CONN_TIMERS]; /* by T_* (http_conn_timers.c); T_IO: its state's */
};

void timers_init(conn_t *c);
int timers_close(conn_t *c, uv_close_cb cb); /* returns the close callbacks to come */
void timeout_start(conn_t *c, int which, http_timer_cb cb, uint64_t ms); /* ms 0: disabled */
void timeout_stop(conn_t *c, int which);
void timeouts_stop(conn_t *c);
/* At the top of every timeout callback (the timer is one-shot, so already
 * inactive): its bookkeeping. Returns the timer's connection. */
conn_t *timeout_fired(http_timer_t *timer);

/* Opens `c` on `s` for `fd`, taken from the listener's backlog. It reads, under the headers and
 * request timeouts; a complete request goes to s->handle_request, which answers it with
 * conn_respond. */
void conn_open(http_server_t *s, conn_t *c, int fd);

/* One response, with the header lines `extra` ("" for none, each ending in
 * CRLF). `final`: the connection closes once it is written (it does too
 * after the client's EOF or the shutdown, or without keep-alive). */
void conn_respond_with(conn_t *c, int status, const char *reason, const char *type,
                       const char *extra, const char *body, size_t body_len, int final);
void conn_respond(conn_t *c, int status, const char *reason, const char *body, size_t body_len,
                  int final);
void conn_fail(conn_t *c, int status); /* an error response, then the close */

/* A request has arrived (in part or in full) and has no answer written yet. */
int conn_in_flight(const conn_t *c);
/* Between requests, none begun: a shutdown closes it at once. */
int conn_idle(const conn_t *c);
/* Bytes from the client wait in the socket (of `c`, or `fd`), unread. */
int conn_bytes_waiting(const conn_t *c);
int fd_bytes_waiting(uv_os_fd_t fd);
void conn_close(conn_t *c, enum http_close_reason reason);

#endif
