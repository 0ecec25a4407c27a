/* Backend: libevent's evtimer (a binary min-heap of event pointers). Plain
 * timers, as a general timer user writes them; backend_event_common.c is
 * the same library with one common-timeout queue per duration. */
#define _GNU_SOURCE
#include "bench.h"
#include "event_loop.h"

#include <event2/event_struct.h>
#include <stdlib.h>

const char *const backend_name = "event";
const int backend_fixed_durations = 0;

static struct event *timers;
static size_t n_timers;

size_t backend_timer_bytes(const char **note) {
  *note = "sizeof(struct event) + 8-byte min-heap slot (a pointer)";
  return sizeof(struct event) + sizeof(struct event *);
}

int backend_timers_alloc(size_t n) {
  timers = malloc(n * sizeof *timers);
  n_timers = n;
  return timers ? 0 : -1;
}

void backend_timer_init(size_t i) {
  evtimer_assign(&timers[i], bench_base, bench_event_cb, bench_event_arg(i, 0));
}

void backend_set_note(size_t i, uint32_t note) {
  evtimer_assign(&timers[i], bench_base, bench_event_cb, bench_event_arg(i, note));
}

void backend_timers_close(void) {}

void backend_timers_free(void) {
  free(timers);
  timers = NULL;
  n_timers = 0;
}

void backend_start(size_t i, uint64_t timeout_ms) {
  struct timeval tv = bench_ms_to_tv(timeout_ms);
  evtimer_add(&timers[i], &tv);
}

void backend_restart(size_t i, uint64_t timeout_ms) {
  struct timeval tv = bench_ms_to_tv(timeout_ms);
  evtimer_add(&timers[i], &tv);
}

void backend_stop(size_t i) {
  evtimer_del(&timers[i]);
}

int backend_active(size_t i) {
  return evtimer_pending(&timers[i], NULL);
}
