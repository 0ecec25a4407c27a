/* The expire workload: every timer fires; cost, lateness and order (see harness.c). */
#define _GNU_SOURCE
#include "workload.h"

#include <stdio.h>
#include <stdlib.h>

/* ---- expire ------------------------------------------------------------- */

static double expire_base_ms;  /* loop clock when the timers were started */
static double expire_first_ms; /* loop clock at the first callback, or < 0 */
static size_t early_fires, order_violations, fifo_violations;
static uint32_t last_timeout;
static size_t last_index;

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

void run_expire(size_t n, unsigned repeats, uint64_t seed) {
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
