/* The workloads every backend runs, and main().
 *
 * Each workload makes exactly the same sequence of timer operations on every
 * backend: operation sequences come from a fixed-seed PRNG and are generated
 * before the timed region, timers are preallocated, and every timed
 * operation runs inside a loop callback (backend_defer). Cost is process CPU
 * time (CLOCK_PROCESS_CPUTIME_ID), so time the loop spends asleep is not
 * counted but the system calls it makes to wake up are; each figure is the
 * median over repeats (bump and churn: over their 16 batches of all repeats;
 * cancel's ns/fire: the last repeat only, to wait 2 s once).
 *
 *   cancel  request timeouts: N starts in [1000,2000) ms, 90% stopped in
 *           random order, the rest fire.      ns/start, ns/stop, ns/fire
 *   bump    idle timeouts pushed back: N timers at 5000 ms, 4N restarts of
 *           random timers, in 16 batches >= 1 ms of loop time apart so the
 *           deadlines really move.            ns/restart
 *   expire  N timers in [0,1000) ms, all fire. ns/fire, lateness, wakeups,
 *           early firings, order violations
 *   churn   steady state: N pending in [10,20) s, 4N stop+start steps of
 *           random timers, in 16 batches like bump.  ns/step
 *   server  N connections, each with one pending timeout of 5, 10 or 30 s:
 *           started, restarted, stopped and started with another duration,
 *           some closed, the idle ones cut (see run_server).
 *                                        ns/start, ns/restart, ns/phase,
 *                                        ns/stop, ns/fire, lateness, FIFO
 *   million_timers  the shape of libuv's benchmark of that name: init+start
 *           M timers from main() (timeout +1 ms every 1000 timers), uv_run
 *           until all fired, release them; wall seconds as libuv prints them,
 *           plus process CPU seconds and peak RSS. Run first, in a child
 *           process, so its peak RSS is its own.
 *
 * A backend with one list per duration (backend_fixed_durations: h2o,
 * event-common) runs bump and server only, the workloads whose timeouts come
 * from a fixed set, and says which it skipped (an I record).
 *
 * Output, on stdout, one record per line, for the driver (run_bench.py):
 *   R <backend> <workload> <n> <metric> <value>
 *   I <backend> <key> <text...>
 */
#define _GNU_SOURCE
#include "bench.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

void (*bench_fired)(size_t i, uint32_t note);

/* ---- Clocks, PRNG, statistics ------------------------------------------ */

static uint64_t cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t wall_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* splitmix64: tiny, fast, good enough to pick timers and timeouts. */
static uint64_t rng_state;

static void rng_seed(uint64_t seed, uint64_t workload, uint64_t repeat) {
  rng_state = seed ^ (workload * 0x9e3779b97f4a7c15u) ^ (repeat * 0xbf58476d1ce4e5b9u);
}

static uint64_t rng_next(void) {
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15u);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
  return z ^ (z >> 31);
}

/* Uniform in [0, bound), bound < 2^32, without a division. */
static uint32_t rng_below(uint32_t bound) {
  return (uint32_t)(((rng_next() >> 32) * (uint64_t)bound) >> 32);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

static double median(double *v, size_t n) {
  qsort(v, n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void *xmalloc(size_t size) {
  void *p = malloc(size ? size : 1);
  if (p == NULL) {
    fprintf(stderr, "bench: out of memory (%zu bytes)\n", size);
    exit(2);
  }
  return p;
}

static void record(const char *workload, size_t n, const char *metric, double value) {
  printf("R %s %s %zu %s %.6g\n", backend_name, workload, n, metric, value);
  fflush(stdout);
}

/* ---- Running code inside the loop --------------------------------------- */

static void (*step_fn)(void *);
static int step_done;
static uint64_t iterations; /* backend_run_once calls made while waiting for fires */

static void step_trampoline(void *arg) {
  step_fn(arg);
  step_done = 1;
}

/* Runs fn(arg) from a loop callback delay_ms from now and returns after it. */
static void in_loop(uint64_t delay_ms, void (*fn)(void *), void *arg) {
  step_fn = fn;
  step_done = 0;
  backend_defer(delay_ms, step_trampoline, arg);
  while (!step_done)
    backend_run_once();
}

static size_t fired;       /* timer callbacks seen by the current hook */
static size_t fire_target; /* when `fired` reaches it, fire_done_cpu is taken */
static uint64_t fire_done_cpu;
static uint64_t fire_begin_cpu;   /* CPU time when the measured fire phase began */
static size_t fired_before_begin; /* callbacks that ran before it (slow starts) */
static uint64_t fire_iterations;  /* iterations that ran at least one timer */
static uint64_t last_fire_iteration;
static size_t unexpected_fires;
/* The longest pass's own work (server's idle cut only): the process CPU
 * time from the start of a backend_run_once call to its first timer
 * callback. A pass takes what is due (cascades, sorts) before its first
 * callback; the blocking poll costs no CPU time. */
static int measure_pass_work;
static uint64_t iteration_begin_cpu;
static uint64_t pass_work_max_ns;

static void note_fire_iteration(void) {
  if (last_fire_iteration != iterations + 1) {
    last_fire_iteration = iterations + 1;
    fire_iterations++;
    uint64_t work = measure_pass_work ? cpu_ns() - iteration_begin_cpu : 0;
    if (work > pass_work_max_ns)
      pass_work_max_ns = work;
  }
}

static void wait_fired(size_t target) {
  iterations = 0;
  fire_iterations = 0;
  last_fire_iteration = 0;
  while (fired < target) {
    if (measure_pass_work)
      iteration_begin_cpu = cpu_ns();
    backend_run_once();
    iterations++;
  }
}

static void fire_unexpected(size_t i, uint32_t note) {
  (void)i;
  (void)note;
  unexpected_fires++;
}

/* Shared state of one workload run. */
static size_t n_timers;
static uint32_t *timeouts; /* per timer, or per step */
static uint32_t *order;    /* a permutation of timers, or random timer per step */
static size_t op_begin, op_end;
static uint64_t cpu_spent;

static void stop_all(void *arg) {
  (void)arg;
  for (size_t i = 0; i < n_timers; i++)
    backend_stop(i);
}

static void start_all_from_timeouts(void *arg) {
  (void)arg;
  for (size_t i = 0; i < n_timers; i++)
    backend_start(i, timeouts[i]);
}

static void shuffle(uint32_t *v, size_t n) {
  for (size_t i = 0; i < n; i++)
    v[i] = (uint32_t)i;
  for (size_t i = n; i > 1; i--) {
    size_t j = rng_below((uint32_t)i);
    uint32_t t = v[i - 1];
    v[i - 1] = v[j];
    v[j] = t;
  }
}

static int wheel_stats_delta(const bench_wheel_stats_t *before, bench_wheel_stats_t *delta) {
  bench_wheel_stats_t now;
  if (backend_wheel_stats(&now) != 0)
    return -1;
  delta->wakeups = now.wakeups - before->wakeups;
  delta->wasted_wakeups = now.wasted_wakeups - before->wasted_wakeups;
  delta->cascaded = now.cascaded - before->cascaded;
  delta->late_max_ms = now.late_max_ms;
  return 0;
}

enum { WL_CANCEL = 1, WL_BUMP, WL_EXPIRE, WL_CHURN, WL_SERVER };

/* ---- cancel ------------------------------------------------------------- */

static uint8_t *fired_flag; /* per timer: its callback ran in this repeat */

static void fire_cancel(size_t i, uint32_t note) {
  (void)note;
  fired_flag[i] = 1;
  note_fire_iteration();
  if (++fired == fire_target)
    fire_done_cpu = cpu_ns();
}

static void cancel_starts(void *arg) {
  (void)arg;
  uint64_t t0 = cpu_ns();
  for (size_t i = 0; i < n_timers; i++)
    backend_start(i, timeouts[i]);
  cpu_spent = cpu_ns() - t0;
}

static void cancel_stops(void *arg) {
  (void)arg;
  uint64_t t0 = cpu_ns();
  for (size_t k = op_begin; k < op_end; k++)
    backend_stop(order[k]);
  uint64_t t1 = cpu_ns();
  cpu_spent = t1 - t0;
  fire_begin_cpu = t1; /* the fire phase starts here */
  fired_before_begin = fired;
}

static void run_cancel(size_t n, unsigned repeats, uint64_t seed) {
  double *start_ns = xmalloc(repeats * sizeof(double));
  double *stop_ns = xmalloc(repeats * sizeof(double));
  size_t n_stop = n - n / 10;
  size_t n_fire = n - n_stop;
  size_t early = 0;
  double fire_ns = 0;
  bench_wheel_stats_t ws0 = {0}, wsd = {0};
  int have_ws = 0;
  uint64_t fire_iters = 0, fire_wakeups = 0;

  timeouts = xmalloc(n * sizeof *timeouts);
  order = xmalloc(n * sizeof *order);
  fired_flag = xmalloc(n);
  bench_fired = fire_cancel;
  for (unsigned r = 0; r < repeats; r++) {
    rng_seed(seed, WL_CANCEL, r);
    for (size_t i = 0; i < n; i++)
      timeouts[i] = 1000 + rng_below(1000);
    shuffle(order, n);
    memset(fired_flag, 0, n);
    fired = 0;
    fire_target = (size_t)-1;

    in_loop(0, cancel_starts, NULL);
    start_ns[r] = (double)cpu_spent / (double)n;
    op_begin = 0;
    op_end = n_stop;
    in_loop(0, cancel_stops, NULL);
    stop_ns[r] = (double)cpu_spent / (double)n_stop;
    /* Normally 0. A backend whose N starts outlast the shortest timeout
     * (1 s; N = 10^7) fires some before the stops run, some of them timers
     * the stops were meant for. */
    early += fired_before_begin;

    /* Only the last repeat waits up to 2 s for the rest to fire; the others
     * stop the rest off the clock. */
    if (r + 1 == repeats && n_fire > 0) {
      size_t remaining = 0;
      for (size_t k = n_stop; k < n; k++)
        remaining += !fired_flag[order[k]];
      have_ws = backend_wheel_stats(&ws0) == 0;
      fire_target = fired + remaining;
      if (remaining > 0)
        wait_fired(fire_target);
      else
        fire_done_cpu = cpu_ns();
      if (fire_target > fired_before_begin)
        fire_ns =
            (double)(fire_done_cpu - fire_begin_cpu) / (double)(fire_target - fired_before_begin);
      fire_iters = iterations;
      fire_wakeups = fire_iterations;
      if (have_ws)
        wheel_stats_delta(&ws0, &wsd);
    } else {
      op_begin = n_stop;
      op_end = n;
      in_loop(0, cancel_stops, NULL);
    }
  }
  if (early)
    fprintf(stderr,
            "bench %s: cancel: %zu timers fired before the stops ran (the starts "
            "outlasted 1 s)\n",
            backend_name, early);
  record("cancel", n, "ns_start", median(start_ns, repeats));
  record("cancel", n, "ns_stop", median(stop_ns, repeats));
  record("cancel", n, "ns_fire", fire_ns);
  record("cancel", n, "fired_before_stops", (double)early);
  record("cancel", n, "loop_iterations", (double)fire_iters);
  record("cancel", n, "wasted_iterations", (double)(fire_iters - fire_wakeups));
  if (have_ws) {
    record("cancel", n, "wakeups", (double)wsd.wakeups);
    record("cancel", n, "wasted_wakeups", (double)wsd.wasted_wakeups);
  }
  free(timeouts);
  free(order);
  free(fired_flag);
  free(start_ns);
  free(stop_ns);
}

/* ---- bump --------------------------------------------------------------- */

enum { STEP_BATCHES = 16 };

static void start_all_bump(void *arg) {
  (void)arg;
  for (size_t i = 0; i < n_timers; i++)
    backend_start(i, 5000);
}

static void bump_batch(void *arg) {
  (void)arg;
  uint64_t t0 = cpu_ns();
  for (size_t k = op_begin; k < op_end; k++)
    backend_restart(order[k], 5000);
  cpu_spent = cpu_ns() - t0;
}

/* bump and churn time each of their 16 batches on its own and report the
 * median over all batches of all repeats: runs `steps` operations as
 * STEP_BATCHES calls of `batch` (each over [op_begin, op_end)), >= 1 ms of
 * loop time apart, and stores each one's ns per operation in out[b]. */
static void run_batches(size_t steps, void (*batch)(void *), double *out) {
  for (size_t b = 0; b < STEP_BATCHES; b++) {
    op_begin = steps * b / STEP_BATCHES;
    op_end = steps * (b + 1) / STEP_BATCHES;
    in_loop(1, batch, NULL);
    out[b] = (double)cpu_spent / (double)(op_end - op_begin);
  }
}

static void run_bump(size_t n, unsigned repeats, uint64_t seed) {
  double *restart_ns = xmalloc(repeats * STEP_BATCHES * sizeof(double));
  size_t steps = 4 * n;

  order = xmalloc(steps * sizeof *order);
  unexpected_fires = 0;
  bench_fired = fire_unexpected;
  for (unsigned r = 0; r < repeats; r++) {
    rng_seed(seed, WL_BUMP, r);
    for (size_t k = 0; k < steps; k++)
      order[k] = rng_below((uint32_t)n);
    in_loop(0, start_all_bump, NULL);
    run_batches(steps, bump_batch, &restart_ns[r * STEP_BATCHES]);
    in_loop(0, stop_all, NULL);
  }
  if (unexpected_fires)
    fprintf(stderr, "bench %s: bump: %zu timers fired (the run outlasted their 5000 ms)\n",
            backend_name, unexpected_fires);
  record("bump", n, "ns_restart", median(restart_ns, repeats * STEP_BATCHES));
  record("bump", n, "fired_meanwhile", (double)unexpected_fires);
  free(order);
  free(restart_ns);
}

/* ---- expire ------------------------------------------------------------- */

static double expire_base_ms;  /* loop clock when the timers were started */
static double expire_first_ms; /* loop clock at the first callback, or < 0 */
static float *lateness;        /* per callback, ms */
static size_t early_fires, order_violations, fifo_violations;
static uint32_t last_timeout;
static size_t last_index;

/* Loop clocks that are not integer milliseconds (libev's double seconds,
 * libevent's microseconds converted through wall-clock time) may round a hair
 * below the deadline; beyond this it counts as early. */
#define EARLY_TOLERANCE_MS 0.01

static void expire_starts(void *arg) {
  (void)arg;
  expire_base_ms = backend_now_ms();
  expire_first_ms = -1;
  start_all_from_timeouts(NULL);
  fire_begin_cpu = cpu_ns();
}

/* Lateness is counted from the later of the deadline and the first callback:
 * deadlines that passed while the N starts themselves were running cannot be
 * met by any backend, and they fall in the first loop iteration after the
 * starts. Early firings are counted against the deadline itself. */
static void fire_expire(size_t i, uint32_t t) {
  double now = backend_now_ms();
  double deadline = expire_base_ms + t; /* t: the timer's timeout, its note */

  note_fire_iteration();
  if (expire_first_ms < 0)
    expire_first_ms = now;
  if (now < deadline - EARLY_TOLERANCE_MS)
    early_fires++;
  lateness[fired] = (float)(now - (deadline > expire_first_ms ? deadline : expire_first_ms));
  if (t < last_timeout)
    order_violations++;
  else if (t == last_timeout && i < last_index)
    fifo_violations++;
  last_timeout = t;
  last_index = i;
  if (++fired == fire_target)
    fire_done_cpu = cpu_ns();
}

static void run_expire(size_t n, unsigned repeats, uint64_t seed) {
  double *fire_ns = xmalloc(repeats * sizeof(double));
  double *late50 = xmalloc(repeats * sizeof(double));
  double *late99 = xmalloc(repeats * sizeof(double));
  double *wake = xmalloc(repeats * sizeof(double));
  double *wasted = xmalloc(repeats * sizeof(double));
  double *iters = xmalloc(repeats * sizeof(double));
  double *wasted_iters = xmalloc(repeats * sizeof(double));
  double late_max = 0;
  int have_ws = 0;

  timeouts = xmalloc(n * sizeof *timeouts);
  lateness = xmalloc(n * sizeof *lateness);
  early_fires = order_violations = fifo_violations = 0;
  bench_fired = fire_expire;
  for (unsigned r = 0; r < repeats; r++) {
    bench_wheel_stats_t ws0 = {0}, wsd = {0};
    rng_seed(seed, WL_EXPIRE, r);
    for (size_t i = 0; i < n; i++) {
      timeouts[i] = rng_below(1000);
      backend_set_note(i, timeouts[i]);
    }
    fired = 0;
    fire_target = n;
    last_timeout = 0;
    last_index = 0;
    have_ws = backend_wheel_stats(&ws0) == 0;
    in_loop(0, expire_starts, NULL);
    wait_fired(n);
    fire_ns[r] = (double)(fire_done_cpu - fire_begin_cpu) / (double)n;
    iters[r] = (double)iterations;
    wasted_iters[r] = (double)(iterations - fire_iterations);
    if (have_ws) {
      wheel_stats_delta(&ws0, &wsd);
      wake[r] = (double)wsd.wakeups;
      wasted[r] = (double)wsd.wasted_wakeups;
    }
    qsort(lateness, n, sizeof *lateness, cmp_float);
    late50[r] = lateness[(n - 1) / 2];
    late99[r] = lateness[(size_t)((double)(n - 1) * 0.99)];
    if (lateness[n - 1] > late_max)
      late_max = lateness[n - 1];
  }
  record("expire", n, "ns_fire", median(fire_ns, repeats));
  record("expire", n, "late_p50_ms", median(late50, repeats));
  record("expire", n, "late_p99_ms", median(late99, repeats));
  record("expire", n, "late_max_ms", late_max);
  record("expire", n, "early_fires", (double)early_fires);
  record("expire", n, "order_violations", (double)order_violations);
  record("expire", n, "fifo_violations", (double)fifo_violations);
  record("expire", n, "loop_iterations", median(iters, repeats));
  record("expire", n, "wasted_iterations", median(wasted_iters, repeats));
  if (have_ws) {
    record("expire", n, "wakeups", median(wake, repeats));
    record("expire", n, "wasted_wakeups", median(wasted, repeats));
  }
  free(timeouts);
  free(lateness);
  free(fire_ns);
  free(late50);
  free(late99);
  free(wake);
  free(wasted);
  free(iters);
  free(wasted_iters);
}

/* ---- churn -------------------------------------------------------------- */

static uint32_t *step_timeouts;

/* Churn timeouts are [10,20) s, long enough that a run of 4N steps rarely
 * outlasts them; a timer that fires anyway stays inactive until a step starts
 * it again (restarting it here could keep a slow backend busy firing for
 * ever at N = 10^7). */
static void fire_churn(size_t i, uint32_t note) {
  (void)i;
  (void)note;
  fired++;
}

static void churn_batch(void *arg) {
  (void)arg;
  uint64_t t0 = cpu_ns();
  for (size_t k = op_begin; k < op_end; k++) {
    backend_stop(order[k]);
    backend_start(order[k], step_timeouts[k]);
  }
  cpu_spent = cpu_ns() - t0;
}

static void run_churn(size_t n, unsigned repeats, uint64_t seed) {
  double *step_ns = xmalloc(repeats * STEP_BATCHES * sizeof(double));
  size_t steps = 4 * n;

  timeouts = xmalloc(n * sizeof *timeouts);
  order = xmalloc(steps * sizeof *order);
  step_timeouts = xmalloc(steps * sizeof *step_timeouts);
  bench_fired = fire_churn;
  fired = 0;
  for (unsigned r = 0; r < repeats; r++) {
    rng_seed(seed, WL_CHURN, r);
    for (size_t i = 0; i < n; i++)
      timeouts[i] = 10000 + rng_below(10000);
    for (size_t k = 0; k < steps; k++) {
      order[k] = rng_below((uint32_t)n);
      step_timeouts[k] = 10000 + rng_below(10000);
    }
    in_loop(0, start_all_from_timeouts, NULL);
    run_batches(steps, churn_batch, &step_ns[r * STEP_BATCHES]);
    in_loop(0, stop_all, NULL);
  }
  record("churn", n, "ns_step", median(step_ns, repeats * STEP_BATCHES));
  record("churn", n, "fired_meanwhile", (double)fired);
  free(timeouts);
  free(order);
  free(step_timeouts);
  free(step_ns);
}

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
static uint64_t server_second_ms = 1000;

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

static void run_server(size_t n, unsigned repeats, uint64_t seed) {
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

/* ---- memory: what the machine charges for touching N timers --------------- */

/* Not a backend measurement: a yardstick for the others. With N records of
 * one cache line each, in the same random order the workloads use: the cost
 * of touching one record (independent accesses, which the CPU overlaps, as
 * it does a stop's first access), and of one dependent miss (a pointer chase
 * through a random cycle, as a walk along a linked list or down a heap).
 * And the floor of any timer kept on intrusive doubly linked lists: with N
 * records of 56 bytes (a uvtw_timer_t's size) on 5 lists, 4N times take a
 * random record off its list and append it to a random one, inline, with no
 * bookkeeping and no call: the memory work of a churn step (stop + start)
 * or of a restart, and nothing else. */
typedef struct line_s {
  struct line_s *next;
  uint64_t value;
  char pad[48];
} line_t;

static const line_t *volatile chase_end;

typedef struct node_s {
  struct node_s *next, *prev;
  uint64_t rest[5]; /* 56 bytes in all, like a uvtw_timer_t */
} node_t;

/* ns per unlink + append of a random record (see above). */
static double list_move_ns(size_t n, const uint32_t *pick, size_t steps) {
  enum { LISTS = 5 };
  node_t *nodes = xmalloc(n * sizeof *nodes);
  node_t heads[LISTS];
  for (unsigned l = 0; l < LISTS; l++)
    heads[l].next = heads[l].prev = &heads[l];
  for (size_t i = 0; i < n; i++) {
    node_t *h = &heads[i % LISTS], *tail = h->prev;
    nodes[i].next = h;
    nodes[i].prev = tail;
    nodes[i].rest[0] = i;
    tail->next = &nodes[i];
    h->prev = &nodes[i];
  }
  uint64_t t0 = cpu_ns();
  for (size_t k = 0; k < steps; k++) {
    node_t *e = &nodes[pick[k]];
    e->prev->next = e->next;
    e->next->prev = e->prev;
    node_t *h = &heads[pick[steps - 1 - k] % LISTS], *tail = h->prev;
    e->next = h;
    e->prev = tail;
    e->rest[0] = k;
    tail->next = e;
    h->prev = e;
  }
  uint64_t t1 = cpu_ns();
  chase_end = (const line_t *)(const void *)heads[0].next; /* keeps the loop */
  free(nodes);
  return (double)(t1 - t0) / (double)steps;
}

static void run_memory(size_t n, uint64_t seed) {
  line_t *lines = xmalloc(n * sizeof *lines);
  uint32_t *perm = xmalloc(n * sizeof *perm);
  size_t steps = 4 * n;
  uint32_t *pick = xmalloc(steps * sizeof *pick);

  rng_seed(seed, WL_CHURN, 0);
  for (size_t k = 0; k < steps; k++)
    pick[k] = rng_below((uint32_t)n);
  shuffle(perm, n);
  for (size_t i = 0; i < n; i++) {
    lines[perm[i]].next = &lines[perm[(i + 1) % n]];
    lines[perm[i]].value = i;
  }
  uint64_t t0 = cpu_ns();
  for (size_t k = 0; k < steps; k++)
    lines[pick[k]].value++;
  uint64_t t1 = cpu_ns();
  const line_t *at = &lines[perm[0]];
  for (size_t k = 0; k < n; k++)
    at = at->next;
  uint64_t t2 = cpu_ns();
  chase_end = at; /* keeps the chase from being optimized away */
  record("memory", n, "ns_random_touch", (double)(t1 - t0) / (double)steps);
  record("memory", n, "ns_dependent_miss", (double)(t2 - t1) / (double)n);
  free(lines);
  record("memory", n, "ns_list_move", list_move_ns(n, pick, steps));
  free(perm);
  free(pick);
}

/* ---- million_timers ------------------------------------------------------ */

static void fire_million(size_t i, uint32_t note) {
  (void)i;
  (void)note;
  fired++;
}

static int run_million_timers(size_t n) {
  uint64_t before_all, before_run, after_run, after_all, cpu0, cpu1;
  uint64_t timeout = 0;
  struct rusage ru;

  if (backend_timers_alloc(n) != 0)
    return -1;
  bench_fired = fire_million;
  fired = 0;
  cpu0 = cpu_ns();
  before_all = wall_ns();
  for (size_t i = 0; i < n; i++) {
    if (i % 1000 == 0)
      timeout++;
    backend_timer_init(i);
    backend_start(i, timeout);
  }
  before_run = wall_ns();
  backend_run();
  after_run = wall_ns();
  backend_timers_close();
  after_all = wall_ns();
  cpu1 = cpu_ns();
  if (fired != n) {
    fprintf(stderr, "bench %s: million_timers: %zu of %zu fired\n", backend_name, fired, n);
    return -1;
  }
  getrusage(RUSAGE_SELF, &ru);
  backend_timers_free();

  fprintf(stderr, "%s: %.2f seconds total\n", backend_name, (double)(after_all - before_all) / 1e9);
  fprintf(stderr, "%s: %.2f seconds init\n", backend_name, (double)(before_run - before_all) / 1e9);
  fprintf(stderr, "%s: %.2f seconds dispatch\n", backend_name,
          (double)(after_run - before_run) / 1e9);
  fprintf(stderr, "%s: %.2f seconds cleanup\n", backend_name,
          (double)(after_all - after_run) / 1e9);
  record("million_timers", n, "init_s", (double)(before_run - before_all) / 1e9);
  record("million_timers", n, "dispatch_s", (double)(after_run - before_run) / 1e9);
  record("million_timers", n, "cleanup_s", (double)(after_all - after_run) / 1e9);
  record("million_timers", n, "total_s", (double)(after_all - before_all) / 1e9);
  record("million_timers", n, "cpu_s", (double)(cpu1 - cpu0) / 1e9);
  record("million_timers", n, "peak_rss_mib", (double)ru.ru_maxrss / 1024.0);
  return 0;
}

/* ---- main ---------------------------------------------------------------- */

static void usage(FILE *f, const char *argv0) {
  fprintf(f,
          "usage: %s [--quick] [--big] [--n N[,N...]] [--workloads LIST] [--repeats R]\n"
          "          [--seed S] [--mt-timers M] [--server-second MS]\n"
          "  --quick        N=10^4, one repeat, million_timers with 10^5 timers, a server\n"
          "                 second of 20 ms (CI smoke run)\n"
          "  --big          also N=10^7\n"
          "  --n LIST       timer counts, e.g. 1e4,1e5 (overrides --quick/--big)\n"
          "  --workloads L  any of cancel,bump,expire,churn,server,million_timers,memory\n"
          "                 (default: all but memory, a yardstick of the machine's memory)\n"
          "  --repeats R    repeats per workload (default: 5, 3 at N>=10^6, fewer at 10^7)\n"
          "  --seed S       PRNG seed (default 42)\n"
          "  --mt-timers M  timers in million_timers (default 10^7)\n"
          "  --server-second MS  loop ms per server second in server (default 1000)\n"
          "Prints one record per line: R backend workload n metric value.\n",
          argv0);
}

static int parse_count(const char *s, size_t *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || (*end && *end != ',') || v < 1 || v > 4e9)
    return -1;
  *out = (size_t)(v + 0.5);
  return 0;
}

static int has_word(const char *list, const char *word) {
  size_t len = strlen(word);
  for (const char *p = list; (p = strstr(p, word)) != NULL; p += len)
    if ((p == list || p[-1] == ',') && (p[len] == ',' || p[len] == '\0'))
      return 1;
  return 0;
}

/* million_timers runs in a child forked before anything big is allocated, so
 * the peak RSS it reports is its own. */
static int million_timers_in_child(size_t m) {
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0)
    return -1;
  if (pid == 0) {
    int rc = backend_init() != 0 || run_million_timers(m) != 0;
    fflush(stdout);
    _exit(rc);
  }
  int status;
  if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return -1;
  return 0;
}

int main(int argc, char **argv) {
  size_t ns[16];
  size_t n_count = 0;
  int quick = 0, big = 0;
  const char *workloads = "cancel,bump,expire,churn,server,million_timers";
  unsigned repeats = 0;
  uint64_t seed = 42;
  size_t mt_timers = 0;
  uint64_t server_second = 0;
  const char *n_list = NULL;

  for (int a = 1; a < argc; a++) {
    const char *arg = argv[a];
    const char *val = a + 1 < argc ? argv[a + 1] : NULL;
    if (!strcmp(arg, "--quick"))
      quick = 1;
    else if (!strcmp(arg, "--big"))
      big = 1;
    else if (!strcmp(arg, "--n") && val)
      n_list = argv[++a];
    else if (!strcmp(arg, "--workloads") && val)
      workloads = argv[++a];
    else if (!strcmp(arg, "--repeats") && val)
      repeats = (unsigned)strtoul(argv[++a], NULL, 10);
    else if (!strcmp(arg, "--seed") && val)
      seed = strtoull(argv[++a], NULL, 0);
    else if (!strcmp(arg, "--mt-timers") && val) {
      if (parse_count(argv[++a], &mt_timers) != 0) {
        usage(stderr, argv[0]);
        return 2;
      }
    } else if (!strcmp(arg, "--server-second") && val) {
      server_second = strtoull(argv[++a], NULL, 10);
      if (server_second == 0 || server_second > 100000) {
        usage(stderr, argv[0]);
        return 2;
      }
    } else if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
      usage(stdout, argv[0]);
      return 0;
    } else {
      usage(stderr, argv[0]);
      return 2;
    }
  }
  if (n_list) {
    for (const char *p = n_list; *p && n_count < 16; p = strchr(p, ',') ? strchr(p, ',') + 1 : "") {
      if (parse_count(p, &ns[n_count++]) != 0) {
        usage(stderr, argv[0]);
        return 2;
      }
    }
  } else if (quick) {
    ns[n_count++] = 10000;
  } else {
    ns[n_count++] = 10000;
    ns[n_count++] = 100000;
    ns[n_count++] = 1000000;
    if (big)
      ns[n_count++] = 10000000;
  }
  if (mt_timers == 0)
    mt_timers = quick ? 100000 : 10000000;
  server_second_ms = server_second ? server_second : quick ? 20 : 1000;

  const char *note;
  size_t bytes = backend_timer_bytes(&note);
  printf("I %s version %s\n", backend_name, backend_version());
  printf("I %s timer_bytes %zu %s\n", backend_name, bytes, note);
  if (backend_fixed_durations) {
    /* Timeouts drawn from a range (or, in million_timers, one more ms every
     * 1000 timers) would need a list each. */
    printf("I %s skipped cancel,expire,churn,million_timers (one list per duration: fixed "
           "durations only)\n",
           backend_name);
    static char kept[64];
    snprintf(kept, sizeof kept, "%s%s%s", has_word(workloads, "bump") ? "bump," : "",
             has_word(workloads, "server") ? "server," : "",
             has_word(workloads, "memory") ? "memory" : "");
    workloads = kept;
  }
  fflush(stdout);

  if (has_word(workloads, "million_timers")) {
    fprintf(stderr, "bench %s: million_timers, %zu timers\n", backend_name, mt_timers);
    if (million_timers_in_child(mt_timers) != 0) {
      fprintf(stderr, "bench %s: million_timers failed\n", backend_name);
      return 1;
    }
  }

  if (backend_init() != 0) {
    fprintf(stderr, "bench %s: cannot create the loop\n", backend_name);
    return 1;
  }
  for (size_t k = 0; k < n_count; k++) {
    size_t n = ns[k];
    unsigned rep = repeats ? repeats : quick ? 1 : n >= 10000000 ? 1 : n >= 1000000 ? 3 : 5;
    unsigned rep_steps = repeats ? repeats : quick || n >= 1000000 ? 1 : 3;
    unsigned rep_expire = repeats ? repeats : quick ? 1 : n >= 1000000 ? 1 : 3;
    n_timers = n;
    if (backend_timers_alloc(n) != 0) {
      fprintf(stderr, "bench %s: cannot allocate %zu timers\n", backend_name, n);
      return 1;
    }
    for (size_t i = 0; i < n; i++)
      backend_timer_init(i);
    record("info", n, "bytes_per_timer", (double)bytes);
    if (has_word(workloads, "memory"))
      run_memory(n, seed);
    const struct {
      const char *name;
      void (*run)(size_t n, unsigned repeats, uint64_t seed);
      unsigned repeats;
    } runs[] = {{"cancel", run_cancel, rep},
                {"bump", run_bump, rep_steps},
                {"expire", run_expire, rep_expire},
                {"churn", run_churn, rep_steps},
                {"server", run_server, rep_steps}};
    for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
      if (!has_word(workloads, runs[k].name))
        continue;
      fprintf(stderr, "bench %s: %s, N=%zu, %u repeats\n", backend_name, runs[k].name, n,
              runs[k].repeats);
      runs[k].run(n, runs[k].repeats, seed);
    }
    backend_timers_close();
    backend_timers_free();
  }
  backend_fini();
  return 0;
}
