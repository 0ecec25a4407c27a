/* The benchmark harness: clocks, PRNG, statistics, output, running code
 * inside the loop, and the state the workloads share. The workloads are
 * workload_<name>.c; the command line, main.c.
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
#include "workload.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

void (*bench_fired)(size_t i, uint32_t note);

/* ---- Clocks, PRNG, statistics ------------------------------------------ */

uint64_t cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t wall_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* splitmix64: tiny, fast, good enough to pick timers and timeouts. */
static uint64_t rng_state;

void rng_seed(uint64_t seed, uint64_t workload, uint64_t repeat) {
  rng_state = seed ^ (workload * 0x9e3779b97f4a7c15u) ^ (repeat * 0xbf58476d1ce4e5b9u);
}

static uint64_t rng_next(void) {
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15u);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
  return z ^ (z >> 31);
}

/* Uniform in [0, bound), bound < 2^32, without a division. */
uint32_t rng_below(uint32_t bound) {
  return (uint32_t)(((rng_next() >> 32) * (uint64_t)bound) >> 32);
}

int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

double median(double *v, size_t n) {
  qsort(v, n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void *xmalloc(size_t size) {
  void *p = malloc(size ? size : 1);
  if (p == NULL) {
    fprintf(stderr, "bench: out of memory (%zu bytes)\n", size);
    exit(2);
  }
  return p;
}

void *bench_timers_memory(size_t size) {
  void *p = NULL;
  return posix_memalign(&p, 64, size ? size : 1) == 0 ? p : NULL;
}

void record(const char *workload, size_t n, const char *metric, double value) {
  printf("R %s %s %zu %s %.6g\n", backend_name, workload, n, metric, value);
  fflush(stdout);
}

/* ---- Running code inside the loop --------------------------------------- */

static void (*step_fn)(void *);
static int step_done;
uint64_t iterations; /* backend_run_once calls made while waiting for fires */

static void step_trampoline(void *arg) {
  step_fn(arg);
  step_done = 1;
}

/* Runs fn(arg) from a loop callback delay_ms from now and returns after it. */
void in_loop(uint64_t delay_ms, void (*fn)(void *), void *arg) {
  step_fn = fn;
  step_done = 0;
  backend_defer(delay_ms, step_trampoline, arg);
  while (!step_done)
    backend_run_once();
}

size_t fired;       /* timer callbacks seen by the current hook */
size_t fire_target; /* when `fired` reaches it, fire_done_cpu is taken */
uint64_t fire_done_cpu;
uint64_t fire_begin_cpu;   /* CPU time when the measured fire phase began */
size_t fired_before_begin; /* callbacks that ran before it (slow starts) */
uint64_t fire_iterations;  /* iterations that ran at least one timer */
static uint64_t last_fire_iteration;
size_t unexpected_fires;
/* The longest pass's own work (server's idle cut only): the process CPU
 * time from the start of a backend_run_once call to its first timer
 * callback. A pass takes what is due (cascades, sorts) before its first
 * callback; the blocking poll costs no CPU time. */
int measure_pass_work;
static uint64_t iteration_begin_cpu;
uint64_t pass_work_max_ns;

void note_fire_iteration(void) {
  if (last_fire_iteration != iterations + 1) {
    last_fire_iteration = iterations + 1;
    fire_iterations++;
    uint64_t work = measure_pass_work ? cpu_ns() - iteration_begin_cpu : 0;
    if (work > pass_work_max_ns)
      pass_work_max_ns = work;
  }
}

void wait_fired(size_t target) {
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

void fire_unexpected(size_t i, uint32_t note) {
  (void)i;
  (void)note;
  unexpected_fires++;
}

/* Shared state of one workload run. */
size_t n_timers;
uint32_t *timeouts; /* per timer, or per step */
uint32_t *order;    /* a permutation of timers, or random timer per step */
size_t op_begin, op_end;
uint64_t cpu_spent;
float *lateness; /* per callback, ms (expire, server) */

void stop_all(void *arg) {
  (void)arg;
  for (size_t i = 0; i < n_timers; i++)
    backend_stop(i);
}

void start_all_from_timeouts(void *arg) {
  (void)arg;
  for (size_t i = 0; i < n_timers; i++)
    backend_start(i, timeouts[i]);
}

void shuffle(uint32_t *v, size_t n) {
  for (size_t i = 0; i < n; i++)
    v[i] = (uint32_t)i;
  for (size_t i = n; i > 1; i--) {
    size_t j = rng_below((uint32_t)i);
    uint32_t t = v[i - 1];
    v[i - 1] = v[j];
    v[j] = t;
  }
}

int wheel_stats_delta(const bench_wheel_stats_t *before, bench_wheel_stats_t *delta) {
  bench_wheel_stats_t now;
  if (backend_wheel_stats(&now) != 0)
    return -1;
  delta->wakeups = now.wakeups - before->wakeups;
  delta->wasted_wakeups = now.wasted_wakeups - before->wasted_wakeups;
  delta->cascaded = now.cascaded - before->cascaded;
  delta->late_max_ms = now.late_max_ms;
  return 0;
}

/* bump and churn time each of their 16 batches on its own and report the
 * median over all batches of all repeats: runs `steps` operations as
 * STEP_BATCHES calls of `batch` (each over [op_begin, op_end)), >= 1 ms of
 * loop time apart, and stores each one's ns per operation in out[b]. */
void run_batches(size_t steps, void (*batch)(void *), double *out) {
  for (size_t b = 0; b < STEP_BATCHES; b++) {
    op_begin = steps * b / STEP_BATCHES;
    op_end = steps * (b + 1) / STEP_BATCHES;
    in_loop(1, batch, NULL);
    out[b] = (double)cpu_spent / (double)(op_end - op_begin);
  }
}
