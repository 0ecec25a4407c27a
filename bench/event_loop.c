/* See event_loop.h. */
#define _GNU_SOURCE
#include "event_loop.h"

#include "bench.h"

#include <event2/event_struct.h>
#include <stdio.h>
#include <stdlib.h>

struct event_base *bench_base;
static struct event kick;
static void (*kick_fn)(void *);
static void *kick_arg;
static char version[64];

static void kick_cb(evutil_socket_t fd, short what, void *arg) {
  (void)fd;
  (void)what;
  (void)arg;
  kick_fn(kick_arg);
}

/* EVENT_BASE_FLAG_PRECISE_TIMER: by default libevent reads
 * CLOCK_MONOTONIC_COARSE (a jiffy, often 4 ms), which would make it fire
 * several ms late; with the flag its timers are as precise as the others. */
int backend_init(void) {
  struct event_config *cfg = event_config_new();
  if (cfg == NULL)
    return -1;
  event_config_set_flag(cfg, EVENT_BASE_FLAG_PRECISE_TIMER);
  bench_base = event_base_new_with_config(cfg);
  event_config_free(cfg);
  if (bench_base == NULL)
    return -1;
  return evtimer_assign(&kick, bench_base, kick_cb, NULL);
}

void backend_fini(void) {
  event_base_free(bench_base);
}

const char *backend_version(void) {
  snprintf(version, sizeof version, "libevent %s", event_get_version());
  return version;
}

_Static_assert(sizeof(void *) >= 8, "the libevent backends pack two 32-bit values in a pointer");
void *bench_event_arg(size_t i, uint32_t note) {
  return (void *)(uintptr_t)(((uint64_t)i << 32) | note);
}

void bench_event_cb(evutil_socket_t fd, short what, void *arg) {
  (void)fd;
  (void)what;
  uint64_t v = (uint64_t)(uintptr_t)arg;
  bench_fired((size_t)(v >> 32), (uint32_t)v);
}

struct timeval bench_ms_to_tv(uint64_t ms) {
  struct timeval tv;
  tv.tv_sec = (time_t)(ms / 1000);
  tv.tv_usec = (suseconds_t)(ms % 1000) * 1000;
  return tv;
}

double backend_now_ms(void) {
  struct timeval tv;
  event_base_gettimeofday_cached(bench_base, &tv);
  return (double)tv.tv_sec * 1e3 + (double)tv.tv_usec * 1e-3;
}

void backend_defer(uint64_t delay_ms, void (*fn)(void *), void *arg) {
  struct timeval tv = bench_ms_to_tv(delay_ms);
  kick_fn = fn;
  kick_arg = arg;
  evtimer_add(&kick, &tv);
}

void backend_run_once(void) {
  event_base_loop(bench_base, EVLOOP_ONCE);
}

void backend_run(void) {
  event_base_dispatch(bench_base);
}

int backend_wheel_stats(bench_wheel_stats_t *out) {
  (void)out;
  return -1;
}

/* ---- the timers, one struct event each (both backends) ------------------ */

struct event *bench_timers;

int backend_timers_alloc(size_t n) {
  bench_timers = bench_timers_memory(n * sizeof *bench_timers);
  return bench_timers ? 0 : -1;
}

void backend_timer_init(size_t i) {
  evtimer_assign(&bench_timers[i], bench_base, bench_event_cb, bench_event_arg(i, 0));
}

void backend_set_note(size_t i, uint32_t note) {
  evtimer_assign(&bench_timers[i], bench_base, bench_event_cb, bench_event_arg(i, note));
}

void backend_timers_close(void) {}

void backend_timers_free(void) {
  free(bench_timers);
  bench_timers = NULL;
}

void backend_stop(size_t i) {
  evtimer_del(&bench_timers[i]);
}

int backend_active(size_t i) {
  return evtimer_pending(&bench_timers[i], NULL);
}
