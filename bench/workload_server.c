/* The server workload: a server's connections with timeouts of three durations (see harness.c). */
#define _GNU_SOURCE
#include "workload.h"

#include <stdio.h>
#include <stdlib.h>

/* ---- server ------------------------------------------------------------- */

/* A server's connections, each with one pending timeout of one of three
 * durations: 5, 10 and 30 server seconds (keep-alive, request headers,
 * request body). A server second is --server-second ms of loop time: 1000
 * by default, so the durations are real; 20 in --quick runs, so that the
 * firing phase waits 100 ms rather than 5 s (as expire and cancel use
 * timeouts of at most 2 s to see their timers fire).
 *
 *   open      N starts, connection i with a random duration, in index order
 *   activity  2N restarts of random connections with their own duration
 *   phases    N/2 random connections stopped and started with another of
 *             the durations (a request moving to its next phase)
 *   close     N/4 random connections stopped (closed by their peer)
 *   idle cut  the connections still pending at 5 s fire; the 10 and 30 s
 *             ones stay pending meanwhile (last repeat only)
 *
 * activity, phases and close run in 16 batches each, >= 1 ms of loop time
 * apart (as bump). Which connection and which duration come from the PRNG
 * before the timed region; the harness simulates the operations to know,
 * for every connection, its duration, the batch that armed it last and the
 * rank of that arming, so the callbacks log only (connection, loop clock)
 * and lateness and order are computed afterwards. */
enum { SERVER_CLASSES = 3, SERVER_BATCHES = 1 + 3 * STEP_BATCHES, CLASS_CLOSED = 0xff };
static const uint32_t server_units[SERVER_CLASSES] = {5, 10, 30};
uint64_t server_second_ms = 1000;

static uint8_t *conn_class; /* duration class of the last arming, or CLASS_CLOSED */
static uint8_t *conn_batch; /* batch of the last arming (0: open) */
static uint32_t *conn_rank; /* rank of the last arming among all armings */
static uint32_t *open_ms;   /* per connection: the timeout of its open */
static uint32_t *op_conn;   /* activity, then phases, then close */
static uint32_t *op_ms;     /* the timeout each arming operation passes */
static double server_batch_ms[SERVER_BATCHES]; /* loop clock of each batch */
static size_t server_batch;                    /* batches run in this repeat */
static uint32_t *log_conn;                     /* idle cut: who fired, in order */
static float *log_ms;                          /* and when, from the open batch */
static size_t server_meanwhile;                /* fires outside the idle cut */

static uint32_t server_ms(unsigned cls) {
  return (uint32_t)(server_units[cls] * server_second_ms);
}

static void server_open(void *arg) {
  (void)arg;
  server_batch_ms[server_batch++] = backend_now_ms();
  uint64_t t0 = cpu_ns();
  for (size_t i = 0; i < n_timers; i++)
    backend_start(i, open_ms[i]);
  cpu_spent = cpu_ns() - t0;
}

static void server_restarts(void *arg) {
  (void)arg;
  server_batch_ms[server_batch++] = backend_now_ms();
  uint64_t t0 = cpu_ns();
  for (size_t k = op_begin; k < op_end; k++)
    backend_restart(op_conn[k], op_ms[k]);
  cpu_spent = cpu_ns() - t0;
}

static void server_phases(void *arg) {
  (void)arg;
  server_batch_ms[server_batch++] = backend_now_ms();
  uint64_t t0 = cpu_ns();
  for (size_t k = op_begin; k < op_end; k++) {
    backend_stop(op_conn[k]);
    backend_start(op_conn[k], op_ms[k]);
  }
  cpu_spent = cpu_ns() - t0;
}

static void server_closes(void *arg) {
  (void)arg;
  server_batch_ms[server_batch++] = backend_now_ms();
  uint64_t t0 = cpu_ns();
  for (size_t k = op_begin; k < op_end; k++)
    backend_stop(op_conn[k]);
  cpu_spent = cpu_ns() - t0;
}

static void fire_server_meanwhile(size_t i, uint32_t note) {
  (void)i;
  (void)note;
  server_meanwhile++;
}

static void nothing(void *arg) {
  (void)arg;
}

/* Once the last connection of the cut has fired, a 0 ms deferral keeps this
 * loop iteration from going on to wait for the next timer (libuv's
 * UV_RUN_ONCE runs the timers again after its poll): the 10 s connections
 * stay pending. */
static void fire_server(size_t i, uint32_t note) {
  (void)note;
  note_fire_iteration();
  log_conn[fired] = (uint32_t)i;
  log_ms[fired] = (float)(backend_now_ms() - server_batch_ms[0]);
  if (++fired == fire_target) {
    fire_done_cpu = cpu_ns();
    backend_defer(0, nothing, NULL);
  }
}

/* Ops [base, base + count) as STEP_BATCHES calls of fn, >= 1 ms of loop
 * time apart; ns per operation of each in out[b]. */
static void server_batches(size_t base, size_t count, void (*fn)(void *), double *out) {
  for (size_t b = 0; b < STEP_BATCHES; b++) {
    op_begin = base + count * b / STEP_BATCHES;
    op_end = base + count * (b + 1) / STEP_BATCHES;
    in_loop(1, fn, NULL);
    out[b] = (double)cpu_spent / (double)(op_end - op_begin);
  }
}

/* The operations of one repeat, and what they leave each connection at. */
static void server_generate(size_t n, size_t n_act, size_t n_phase, size_t n_close) {
  uint32_t rank = 0;
  for (size_t i = 0; i < n; i++) {
    conn_class[i] = (uint8_t)rng_below(SERVER_CLASSES);
    open_ms[i] = server_ms(conn_class[i]);
    conn_batch[i] = 0;
    conn_rank[i] = rank++;
  }
  for (size_t b = 0; b < STEP_BATCHES; b++)
    for (size_t k = n_act * b / STEP_BATCHES; k < n_act * (b + 1) / STEP_BATCHES; k++) {
      uint32_t c = rng_below((uint32_t)n);
      op_conn[k] = c;
      op_ms[k] = server_ms(conn_class[c]);
      conn_batch[c] = (uint8_t)(1 + b);
      conn_rank[c] = rank++;
    }
  for (size_t b = 0; b < STEP_BATCHES; b++)
    for (size_t k = n_phase * b / STEP_BATCHES; k < n_phase * (b + 1) / STEP_BATCHES; k++) {
      uint32_t c = rng_below((uint32_t)n);
      unsigned cls = (conn_class[c] + 1 + rng_below(SERVER_CLASSES - 1)) % SERVER_CLASSES;
      op_conn[n_act + k] = c;
      op_ms[n_act + k] = server_ms(cls);
      conn_class[c] = (uint8_t)cls;
      conn_batch[c] = (uint8_t)(1 + STEP_BATCHES + b);
      conn_rank[c] = rank++;
    }
  shuffle(log_conn, n); /* log_conn is free until the idle cut */
  for (size_t k = 0; k < n_close; k++) {
    uint32_t c = log_conn[k];
    op_conn[n_act + n_phase + k] = c;
    conn_class[c] = CLASS_CLOSED;
  }
}

/* The idle cut's figures, from its log and the simulated connections. */
typedef struct {
  double late99, late_max;
  size_t early, fifo_violations, others;
} server_check_t;

static server_check_t server_check(size_t n_fired, double cut_ms) {
  server_check_t r = {0};
  uint32_t last_rank[SERVER_CLASSES] = {0};
  int seen[SERVER_CLASSES] = {0};
  size_t n_late = 0;
  for (size_t k = 0; k < n_fired; k++) {
    uint32_t c = log_conn[k];
    unsigned cls = conn_class[c];
    if (cls >= SERVER_CLASSES) {
      r.others++; /* a closed connection fired: cannot happen */
      continue;
    }
    if (cls != 0)
      r.others++; /* a 10 or 30 s connection: the operations outlasted 5 s */
    double deadline = server_batch_ms[conn_batch[c]] - server_batch_ms[0] + server_ms(cls);
    double now = log_ms[k];
    if (now < deadline - EARLY_TOLERANCE_MS)
      r.early++;
    lateness[n_late++] = (float)(now - (deadline > cut_ms ? deadline : cut_ms));
    if (seen[cls] && conn_rank[c] < last_rank[cls])
      r.fifo_violations++;
    seen[cls] = 1;
    last_rank[cls] = conn_rank[c];
  }
  if (n_late > 0) {
    qsort(lateness, n_late, sizeof *lateness, cmp_float);
    r.late99 = lateness[(size_t)((double)(n_late - 1) * 0.99)];
    r.late_max = lateness[n_late - 1];
  }
  return r;
}

void run_server(size_t n, unsigned repeats, uint64_t seed) {
  size_t n_act = 2 * n, n_phase = n / 2, n_close = n / 4;
  size_t n_ops = n_act + n_phase + n_close;
  double *start_ns = xmalloc(repeats * sizeof(double));
  double *restart_ns = xmalloc(repeats * STEP_BATCHES * sizeof(double));
  double *phase_ns = xmalloc(repeats * STEP_BATCHES * sizeof(double));
  double *stop_ns = xmalloc(repeats * STEP_BATCHES * sizeof(double));
  double fire_ns = 0, cut_iters = 0, cut_wasted_iters = 0;
  size_t target = 0;
  server_check_t check = {0};
  bench_wheel_stats_t ws0 = {0}, wsd = {0};
  int have_ws = 0;

  conn_class = xmalloc(n);
  conn_batch = xmalloc(n);
  conn_rank = xmalloc(n * sizeof *conn_rank);
  open_ms = xmalloc(n * sizeof *open_ms);
  op_conn = xmalloc(n_ops * sizeof *op_conn);
  op_ms = xmalloc((n_act + n_phase) * sizeof *op_ms);
  log_conn = xmalloc(n * sizeof *log_conn);
  log_ms = xmalloc(n * sizeof *log_ms);
  lateness = xmalloc(n * sizeof *lateness);
  server_meanwhile = 0;
  for (unsigned r = 0; r < repeats; r++) {
    rng_seed(seed, WL_SERVER, r);
    server_generate(n, n_act, n_phase, n_close);
    bench_fired = fire_server_meanwhile;
    server_batch = 0;
    in_loop(0, server_open, NULL);
    start_ns[r] = (double)cpu_spent / (double)n;
    server_batches(0, n_act, server_restarts, &restart_ns[r * STEP_BATCHES]);
    server_batches(n_act, n_phase, server_phases, &phase_ns[r * STEP_BATCHES]);
    server_batches(n_act + n_phase, n_close, server_closes, &stop_ns[r * STEP_BATCHES]);
    if (r + 1 == repeats) {
      /* The idle cut: every 5 s connection still pending fires (one that
       * fired during the operations and was not armed again is not). */
      target = 0;
      for (size_t i = 0; i < n; i++)
        target += conn_class[i] == 0 && backend_active(i);
      have_ws = backend_wheel_stats(&ws0) == 0;
      bench_fired = fire_server;
      fired = 0;
      fire_target = target;
      measure_pass_work = 1;
      pass_work_max_ns = 0;
      fire_begin_cpu = cpu_ns();
      if (target > 0) {
        wait_fired(target);
        fire_ns = (double)(fire_done_cpu - fire_begin_cpu) / (double)target;
      }
      measure_pass_work = 0;
      cut_iters = (double)iterations;
      cut_wasted_iters = (double)(iterations - fire_iterations);
      if (have_ws)
        wheel_stats_delta(&ws0, &wsd);
      check = server_check(fired, server_batch_ms[server_batch - 1] - server_batch_ms[0]);
    }
    bench_fired = fire_server_meanwhile;
    in_loop(0, stop_all, NULL);
  }
  record("server", n, "ns_start", median(start_ns, repeats));
  record("server", n, "ns_restart", median(restart_ns, repeats * STEP_BATCHES));
  record("server", n, "ns_phase", median(phase_ns, repeats * STEP_BATCHES));
  record("server", n, "ns_stop", median(stop_ns, repeats * STEP_BATCHES));
  record("server", n, "ns_fire", fire_ns);
  record("server", n, "fired", (double)target);
  record("server", n, "late_p99_ms", check.late99);
  record("server", n, "late_max_ms", check.late_max);
  record("server", n, "pass_work_max_ms", (double)pass_work_max_ns / 1e6);
  record("server", n, "early_fires", (double)check.early);
  record("server", n, "fifo_violations", (double)check.fifo_violations);
  record("server", n, "fired_meanwhile", (double)(server_meanwhile + check.others));
  record("server", n, "loop_iterations", cut_iters);
  record("server", n, "wasted_iterations", cut_wasted_iters);
  if (have_ws) {
    record("server", n, "wakeups", (double)wsd.wakeups);
    record("server", n, "wasted_wakeups", (double)wsd.wasted_wakeups);
  }
  if (server_meanwhile + check.others)
    fprintf(stderr,
            "bench %s: server: %zu connections fired outside the idle cut (the operations "
            "outlasted %u server seconds)\n",
            backend_name, server_meanwhile + check.others, server_units[0]);
  free(conn_class);
  free(conn_batch);
  free(conn_rank);
  free(open_ms);
  free(op_conn);
  free(op_ms);
  free(log_conn);
  free(log_ms);
  free(lateness);
  free(start_ns);
  free(restart_ns);
  free(phase_ns);
  free(stop_ns);
}
