/* Backend: libevent's common timeouts. event_base_init_common_timeout makes
 * one queue per duration, kept in arming order behind one internal event in
 * the heap, so an evtimer_add with that duration appends to a list instead
 * of sifting a heap (libevent's answer to many timeouts of few durations).
 * The durations come from the workload: the first start with a new timeout
 * makes its queue (before any timed start, in every workload it runs). */
#define _GNU_SOURCE
#include "bench.h"
#include "event_loop.h"

#include <event2/event_struct.h>
#include <stdio.h>
#include <stdlib.h>

const char *const backend_name = "event-common";
const int backend_fixed_durations = 1;

/* An application keeps the pointer of each of its durations where it needs
 * it; this table stands for that, a linear look-up among a few entries. */
enum { MAX_DURATIONS = 8 };
static struct {
  uint64_t ms;
  const struct timeval *common;
} durations[MAX_DURATIONS];
static size_t n_durations;

static const struct timeval *common_timeout(uint64_t ms) {
  for (size_t d = 0; d < n_durations; d++)
    if (durations[d].ms == ms)
      return durations[d].common;
  struct timeval tv = bench_ms_to_tv(ms);
  const struct timeval *common = NULL;
  if (n_durations < MAX_DURATIONS)
    common = event_base_init_common_timeout(bench_base, &tv);
  if (common == NULL) {
    fprintf(stderr, "bench event-common: no common timeout for %llu ms (%zu durations in use)\n",
            (unsigned long long)ms, n_durations);
    exit(2);
  }
  durations[n_durations].ms = ms;
  durations[n_durations].common = common;
  n_durations++;
  return common;
}

size_t backend_timer_bytes(const char **note) {
  *note = "sizeof(struct event) (its queue links are inside it); per duration one "
          "internal event";
  return sizeof(struct event);
}

void backend_start(size_t i, uint64_t timeout_ms) {
  evtimer_add(&bench_timers[i], common_timeout(timeout_ms));
}

/* evtimer_add on a pending event takes it off its queue and appends it. */
void backend_restart(size_t i, uint64_t timeout_ms) {
  evtimer_add(&bench_timers[i], common_timeout(timeout_ms));
}
