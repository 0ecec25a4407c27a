/* The bump workload: idle timeouts pushed back (see harness.c). */
#define _GNU_SOURCE
#include "workload.h"

#include <stdio.h>
#include <stdlib.h>

/* ---- bump --------------------------------------------------------------- */

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

void run_bump(size_t n, unsigned repeats, uint64_t seed) {
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
