/* Backend: uvtw, one wheel on the loop, caller-allocated uvtw_timer_t. */
#define _GNU_SOURCE
#include "bench.h"
#include "uv_loop.h"

#include <stdio.h>
#include <stdlib.h>
#include <uvtw.h>

const char *const backend_name = "uvtw";
const int backend_fixed_durations = 0;

static uvtw_wheel_t *wheel;
static uvtw_timer_t *timers;
static size_t n_timers;
static char version[96];

int backend_init(void) {
  if (bench_loop_init() != 0)
    return -1;
  return uvtw_wheel_new(bench_loop, NULL, &wheel);
}

void backend_fini(void) {
  uvtw_wheel_close(wheel, NULL, NULL);
  bench_loop_fini();
}

const char *backend_version(void) {
  snprintf(version, sizeof version, "uvtw %s on libuv %s", uvtw_version_string(),
           uv_version_string());
  return version;
}

size_t backend_timer_bytes(const char **note) {
  *note = "sizeof(uvtw_timer_t); slots are intrusive lists, the wheel one fixed block";
  return sizeof(uvtw_timer_t);
}

int backend_timers_alloc(size_t n) {
  timers = bench_timers_memory(n * sizeof *timers);
  n_timers = n;
  return timers ? 0 : -1;
}

void backend_timer_init(size_t i) {
  uvtw_timer_init(wheel, &timers[i]);
  timers[i].data = NULL;
}

/* An inactive uvtw timer holds nothing: there is nothing to release. */
void backend_timers_close(void) {}

void backend_timers_free(void) {
  free(timers);
  timers = NULL;
  n_timers = 0;
}

void backend_set_note(size_t i, uint32_t note) {
  timers[i].data = (void *)(uintptr_t)note;
}

static void timer_cb(uvtw_timer_t *timer) {
  bench_fired((size_t)(timer - timers), (uint32_t)(uintptr_t)timer->data);
}

void backend_start(size_t i, uint64_t timeout_ms) {
  uvtw_timer_start(&timers[i], timer_cb, timeout_ms, 0);
}

void backend_restart(size_t i, uint64_t timeout_ms) {
  uvtw_timer_start(&timers[i], timer_cb, timeout_ms, 0);
}

void backend_stop(size_t i) {
  uvtw_timer_stop(&timers[i]);
}

int backend_active(size_t i) {
  return uvtw_timer_is_active(&timers[i]);
}

int backend_wheel_stats(bench_wheel_stats_t *out) {
  uvtw_stats_t s;
  uvtw_wheel_stats(wheel, &s);
  out->wakeups = s.wakeups;
  out->wasted_wakeups = s.wasted_wakeups;
  out->cascaded = s.cascaded;
  out->late_max_ms = s.late_max_ms;
  return 0;
}
