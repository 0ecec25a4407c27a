/* loadgen: a libuv HTTP load generator for examples/http_server, shared by
 * the demo and the load test, and the server under test, which
 * test_idle_server.c starts too. Loopback only by intent: it drives a
 * server it spawned itself.
 *
 * A run is a set of clients, each of one kind (well-behaved keep-alive,
 * idle, slowloris, ...). They connect with a bounded number of connects in
 * flight, behave, and record what happened per kind: how many were cut off
 * by the server and how long after the relevant moment. All on one loop
 * thread; every time is uv_hrtime() nanoseconds. */
#ifndef UVTW_EXAMPLES_LOADGEN_H
#define UVTW_EXAMPLES_LOADGEN_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#define container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

/* ---- The server under test (lg_server.c) ------------------------------------ */

typedef struct lg_server_s {
  uv_process_t process;
  uv_pipe_t out; /* its stdout */
  int port;      /* from its `listening on HOST:PORT` line */
  char host[64];
  int exited;
  int64_t exit_status;
  int term_signal;
  int out_open;
  size_t out_len;
  char out_buf[8192]; /* everything it printed on stdout */
} lg_server_t;

/* Spawns `exe` with the space-separated words of `args` as its arguments
 * and stdout piped, and runs the loop until it prints `listening on
 * HOST:PORT` (or exits, or 10 s pass). If the environment has
 * HTTP_SERVER_WRAPPER (e.g. "valgrind -q --leak-check=full
 * --error-exitcode=1"), its words are put in front. */
int lg_server_start(uv_loop_t *loop, lg_server_t *server, const char *exe, const char *args);

/* Sends `signum` and runs the loop until the server exited and its stdout
 * is drained (at most timeout_ms; then SIGKILL). Returns 0 if it exited
 * with status 0 on its own. */
int lg_server_stop(uv_loop_t *loop, lg_server_t *server, int signum, uint64_t timeout_ms);

/* The server's resident set (VmRSS) in KiB, or -1. */
long lg_server_rss_kib(const lg_server_t *server);

/* The value of `key=` in a `k=v k=v` line, or -1 if absent. */
long long lg_stat(const char *line, const char *key);

/* Raises this process's descriptor limit (a server it spawns inherits it)
 * to `needed`. Returns NULL, or why it cannot. */
const char *lg_raise_fd_limit(unsigned long needed);

/* ---- Clients ---------------------------------------------------------------- */

enum lg_kind {
  LG_GOOD,        /* keep-alive requests with short think times, heads sometimes
                     split in two; must never be cut off */
  LG_IDLE,        /* one request, then idle until the server closes */
  LG_SILENT,      /* connects and sends nothing */
  LG_SLOWLORIS,   /* a head that never ends: one header line per trickle interval */
  LG_SLOW_BODY,   /* a complete head, then a body one byte per trickle interval */
  LG_DELAY_ABORT, /* GET /delay?ms=5000, resets the connection after abort_after_ms */
  LG_KINDS
};

extern const char *const lg_kind_names[LG_KINDS];

typedef struct lg_config_s {
  const char *host;
  int port;
  uint32_t connects_in_flight; /* at most this many connects pending (0: 256) */
  uint64_t stop_after_ms;      /* good clients finish, repeating clients stop */
  uint64_t think_max_ms;       /* good: pause between requests, 0..max */
  uint64_t split_gap_max_ms;   /* good: pause inside a split head, 0..max */
  uint64_t delay_max_ms;       /* good: every 4th request or so is /delay?ms=0..max */
  uint64_t trickle_ms;         /* slowloris and slow body: one piece per interval */
  uint64_t abort_after_ms;     /* delay-abort: hang up after this */
  int repeat;                  /* non-good clients reconnect after being closed,
                                  until stop_after_ms */
  uint64_t seed;
} lg_config_t;

/* What happened to the clients of one kind. Cut-off timing: `lower` is
 * measured from a moment before the server could have started its timeout
 * (connect call, or request sent for idle clients) and `upper` from a moment
 * after it (connect done, or response received). */
typedef struct lg_kind_stats_s {
  uint64_t clients;     /* clients of this kind */
  uint64_t connections; /* connections made (repeats included) */
  uint64_t connect_errors;
  uint64_t responses;        /* complete responses received */
  uint64_t bad_status;       /* responses whose status was not the expected one */
  uint64_t status_408;       /* 408 Request Timeout received */
  uint64_t closed_by_server; /* EOF or reset while the client still wanted the connection */
  uint64_t closed_by_client; /* the client hung up (done, aborting, or run over) */
  uint64_t lower_min_ns;     /* smallest close - lower reference (UINT64_MAX: none) */
  uint64_t upper_max_ns;     /* largest close - upper reference */
  uint64_t open, open_peak;  /* connections of this kind open now / at most */
} lg_kind_stats_t;

typedef struct lg_client_s lg_client_t;
typedef struct lg_s lg_t;

typedef void (*lg_tick_cb)(lg_t *lg);

struct lg_s {
  uv_loop_t *loop;
  lg_config_t config;
  lg_client_t *clients;
  size_t count;
  size_t next_to_connect;
  size_t connecting;
  size_t done;       /* clients finished for good */
  size_t extra_open; /* /stats fetches in progress */
  uint64_t started_ns;
  uint64_t deadline_ns;
  uint64_t rng;
  int stopping; /* past stop_after_ms: no new requests or repeats */
  int over;     /* past the run's deadline: everything is hung up */
  uv_timer_t tick;
  int tick_closed;
  lg_tick_cb on_tick; /* every 100 ms while running, may be NULL */
  void *data;         /* for the caller */
  uint64_t open, open_peak;
  lg_kind_stats_t kind[LG_KINDS];
};

/* Prepares count[k] clients of each kind k (count NULL: none). */
int lg_init(lg_t *lg, uv_loop_t *loop, const lg_config_t *config, const uint32_t *count);

/* Fetches GET /stats on a connection of its own into out: the body line,
 * or "" on failure. May be called before lg_run or from on_tick. */
void lg_fetch_stats(lg_t *lg, char *out, size_t size);

/* Runs until every client is done and every fetch answered, or max_ms pass
 * (then every client hangs up). Returns 0, or UV_ETIMEDOUT if it ran over. */
int lg_run(lg_t *lg, uint64_t max_ms);

/* Frees what lg_init allocated. */
void lg_free(lg_t *lg);

/* Milliseconds since lg_run started. */
double lg_elapsed_ms(const lg_t *lg);

#endif
