/* Backend: libuv's own uv_timer_t, one handle per timer (the baseline). */
#define _GNU_SOURCE
#include "bench.h"
#include "uv_loop.h"

#include <stdio.h>
#include <stdlib.h>
#include <uv.h>

const char *const backend_name = "uv";
const int backend_fixed_durations = 0;

static uv_timer_t *timers;
static size_t n_timers;
static char version[64];

int backend_init(void) {
  if (bench_loop_init() != 0)
    return -1;
  return 0;
}

void backend_fini(void) {
  bench_loop_fini();
}

const char *backend_version(void) {
  snprintf(version, sizeof version, "libuv %s", uv_version_string());
  return version;
}

size_t backend_timer_bytes(const char **note) {
  *note = "sizeof(uv_timer_t); the heap node is inside it";
  return sizeof(uv_timer_t);
}

int backend_timers_alloc(size_t n) {
  timers = bench_timers_memory(n * sizeof *timers);
  n_timers = n;
  return timers ? 0 : -1;
}

void backend_timer_init(size_t i) {
  uv_timer_init(bench_loop, &timers[i]);
  timers[i].data = NULL;
}

static void close_cb(uv_handle_t *handle) {
  (void)handle;
}

void backend_timers_close(void) {
  for (size_t i = 0; i < n_timers; i++)
    uv_close((uv_handle_t *)&timers[i], close_cb);
  uv_run(bench_loop, UV_RUN_DEFAULT);
}

void backend_timers_free(void) {
  free(timers);
  timers = NULL;
  n_timers = 0;
}

void backend_set_note(size_t i, uint32_t note) {
  timers[i].data = (void *)(uintptr_t)note;
}

static void timer_cb(uv_timer_t *handle) {
  bench_fired((size_t)(handle - timers), (uint32_t)(uintptr_t)handle->data);
}

void backend_start(size_t i, uint64_t timeout_ms) {
  uv_timer_start(&timers[i], timer_cb, timeout_ms, 0);
}

void backend_restart(size_t i, uint64_t timeout_ms) {
  uv_timer_start(&timers[i], timer_cb, timeout_ms, 0);
}

void backend_stop(size_t i) {
  uv_timer_stop(&timers[i]);
}

int backend_active(size_t i) {
  return uv_is_active((const uv_handle_t *)&timers[i]);
}

int backend_wheel_stats(bench_wheel_stats_t *out) {
  (void)out;
  return -1;
}
