/* Backend: uvtw, one wheel on the loop, caller-allocated uvtw_timer_t. */
#define _GNU_SOURCE
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <uvtw.h>

const char *const backend_name = "uvtw";

static uv_loop_t *loop;
static uvtw_wheel_t *wheel;
static uvtw_timer_t *timers;
static size_t n_timers;
static uv_timer_t kick;
static void (*kick_fn)(void *);
static void *kick_arg;
static char version[96];

int backend_init(void) {
  loop = uv_default_loop();
  if (loop == NULL || uv_timer_init(loop, &kick) != 0)
    return -1;
  uv_unref((uv_handle_t *)&kick);
  return uvtw_wheel_new(loop, NULL, &wheel);
}

void backend_fini(void) {
  uvtw_wheel_close(wheel, NULL, NULL);
  uv_close((uv_handle_t *)&kick, NULL);
  uv_run(loop, UV_RUN_DEFAULT);
  uv_loop_close(loop);
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
  timers = malloc(n * sizeof *timers);
  n_timers = n;
  return timers ? 0 : -1;
}

void backend_timer_init(size_t i) {
  uvtw_timer_init(wheel, &timers[i]);
}

/* An inactive uvtw timer holds nothing: there is nothing to release. */
void backend_timers_close(void) {
}

void backend_timers_free(void) {
  free(timers);
  timers = NULL;
  n_timers = 0;
}

static void timer_cb(uvtw_timer_t *timer) {
  bench_fired((size_t)(timer - timers));
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

double backend_now_ms(void) {
  return (double)uv_now(loop);
}

/* As in backend_uv.c: uv_stop so that UV_RUN_ONCE returns without sleeping. */
static void kick_cb(uv_timer_t *handle) {
  uv_unref((uv_handle_t *)handle);
  kick_fn(kick_arg);
  uv_stop(loop);
}

void backend_defer(uint64_t delay_ms, void (*fn)(void *), void *arg) {
  kick_fn = fn;
  kick_arg = arg;
  uv_ref((uv_handle_t *)&kick);
  uv_timer_start(&kick, kick_cb, delay_ms, 0);
}

void backend_run_once(void) {
  uv_run(loop, UV_RUN_ONCE);
}

void backend_run(void) {
  uv_run(loop, UV_RUN_DEFAULT);
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
