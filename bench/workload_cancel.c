/* The cancel workload: request timeouts, most stopped before they fire (see harness.c). */
#define _GNU_SOURCE
#include "workload.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

void run_cancel(size_t n, unsigned repeats, uint64_t seed) {
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
