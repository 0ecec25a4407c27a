/* Backend: libevent's evtimer (a binary min-heap of event pointers). Plain
 * timers: the "common timeout" queues of event_base_init_common_timeout are
 * not used, as a general timer user would not know its timeouts in advance. */
#define _GNU_SOURCE
#include "bench.h"

#include <event2/event.h>
#include <event2/event_struct.h>
#include <stdio.h>
#include <stdlib.h>

const char *const backend_name = "event";

static struct event_base *base;
static struct event *timers;
static size_t n_timers;
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
  base = event_base_new_with_config(cfg);
  event_config_free(cfg);
  if (base == NULL)
    return -1;
  return evtimer_assign(&kick, base, kick_cb, NULL);
}

void backend_fini(void) {
  event_base_free(base);
}

const char *backend_version(void) {
  snprintf(version, sizeof version, "libevent %s", event_get_version());
  return version;
}

size_t backend_timer_bytes(const char **note) {
  *note = "sizeof(struct event) + 8-byte min-heap slot (a pointer)";
  return sizeof(struct event) + sizeof(struct event *);
}

int backend_timers_alloc(size_t n) {
  timers = malloc(n * sizeof *timers);
  n_timers = n;
  return timers ? 0 : -1;
}

/* The callback argument: the timer's index in the high 32 bits, its note
 * in the low ones. */
_Static_assert(sizeof(void *) >= 8, "the libevent backend packs two 32-bit values in a pointer");
static void timer_cb(evutil_socket_t fd, short what, void *arg) {
  (void)fd;
  (void)what;
  uint64_t v = (uint64_t)(uintptr_t)arg;
  bench_fired((size_t)(v >> 32), (uint32_t)v);
}

static void assign(size_t i, uint32_t note) {
  evtimer_assign(&timers[i], base, timer_cb, (void *)(uintptr_t)(((uint64_t)i << 32) | note));
}

void backend_timer_init(size_t i) {
  assign(i, 0);
}

void backend_set_note(size_t i, uint32_t note) {
  assign(i, note);
}

void backend_timers_close(void) {}

void backend_timers_free(void) {
  free(timers);
  timers = NULL;
  n_timers = 0;
}

static struct timeval ms_to_tv(uint64_t ms) {
  struct timeval tv;
  tv.tv_sec = (time_t)(ms / 1000);
  tv.tv_usec = (suseconds_t)(ms % 1000) * 1000;
  return tv;
}

void backend_start(size_t i, uint64_t timeout_ms) {
  struct timeval tv = ms_to_tv(timeout_ms);
  evtimer_add(&timers[i], &tv);
}

void backend_restart(size_t i, uint64_t timeout_ms) {
  struct timeval tv = ms_to_tv(timeout_ms);
  evtimer_add(&timers[i], &tv);
}

void backend_stop(size_t i) {
  evtimer_del(&timers[i]);
}

double backend_now_ms(void) {
  struct timeval tv;
  event_base_gettimeofday_cached(base, &tv);
  return (double)tv.tv_sec * 1e3 + (double)tv.tv_usec * 1e-3;
}

void backend_defer(uint64_t delay_ms, void (*fn)(void *), void *arg) {
  struct timeval tv = ms_to_tv(delay_ms);
  kick_fn = fn;
  kick_arg = arg;
  evtimer_add(&kick, &tv);
}

void backend_run_once(void) {
  event_base_loop(base, EVLOOP_ONCE);
}

void backend_run(void) {
  event_base_dispatch(base);
}

int backend_wheel_stats(bench_wheel_stats_t *out) {
  (void)out;
  return -1;
}
