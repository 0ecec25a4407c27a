/* The churn workload: steady state of stop + start steps (see harness.c). */
#define _GNU_SOURCE
#include "workload.h"

#include <stdio.h>
#include <stdlib.h>

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

void run_churn(size_t n, unsigned repeats, uint64_t seed) {
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
