/* Backend: libevent's evtimer (a binary min-heap of event pointers). Plain
 * timers, as a general timer user writes them; backend_event_common.c is
 * the same library with one common-timeout queue per duration. */
#define _GNU_SOURCE
#include "bench.h"
#include "event_loop.h"

#include <event2/event_struct.h>

const char *const backend_name = "event";
const int backend_fixed_durations = 0;

size_t backend_timer_bytes(const char **note) {
  *note = "sizeof(struct event) + 8-byte min-heap slot (a pointer)";
  return sizeof(struct event) + sizeof(struct event *);
}

void backend_start(size_t i, uint64_t timeout_ms) {
  struct timeval tv = bench_ms_to_tv(timeout_ms);
  evtimer_add(&bench_timers[i], &tv);
}

void backend_restart(size_t i, uint64_t timeout_ms) {
  struct timeval tv = bench_ms_to_tv(timeout_ms);
  evtimer_add(&bench_timers[i], &tv);
}
