/* Backend: libev's ev_timer (a 4-ary heap with cached deadlines). */
#define _GNU_SOURCE
#include "bench.h"

#include <ev.h>
#include <stdio.h>
#include <stdlib.h>

const char *const backend_name = "ev";
const int backend_fixed_durations = 0;

static struct ev_loop *loop;
static ev_timer *timers;
static size_t n_timers;
static ev_timer kick;
static void (*kick_fn)(void *);
static void *kick_arg;
static char version[64];

int backend_init(void) {
  loop = ev_default_loop(EVFLAG_AUTO);
  return loop ? 0 : -1;
}

void backend_fini(void) {
  ev_loop_destroy(loop);
}

const char *backend_version(void) {
  snprintf(version, sizeof version, "libev %d.%d", ev_version_major(), ev_version_minor());
  return version;
}

size_t backend_timer_bytes(const char **note) {
  /* libev keeps one heap cell per active timer: the cached deadline and the
   * watcher pointer (EV_HEAP_CACHE_AT, on by default). The array grows by
   * doubling, so up to twice that is reserved. */
  *note = "sizeof(ev_timer) + 16-byte heap cell (ev_tstamp + pointer)";
  return sizeof(ev_timer) + sizeof(ev_tstamp) + sizeof(void *);
}

int backend_timers_alloc(size_t n) {
  timers = bench_timers_memory(n * sizeof *timers);
  n_timers = n;
  return timers ? 0 : -1;
}

static void timer_cb(struct ev_loop *l, ev_timer *w, int revents) {
  (void)revents;
  /* A timer restarted with ev_timer_again repeats; these are one-shot. */
  if (w->repeat != 0.)
    ev_timer_stop(l, w);
  bench_fired((size_t)(w - timers), (uint32_t)(uintptr_t)w->data);
}

void backend_timer_init(size_t i) {
  ev_timer_init(&timers[i], timer_cb, 0., 0.);
  timers[i].data = NULL;
}

void backend_set_note(size_t i, uint32_t note) {
  timers[i].data = (void *)(uintptr_t)note;
}

void backend_timers_close(void) {}

void backend_timers_free(void) {
  free(timers);
  timers = NULL;
  n_timers = 0;
}

void backend_start(size_t i, uint64_t timeout_ms) {
  ev_timer *w = &timers[i];
  if (ev_is_active(w))
    ev_timer_stop(loop, w);
  ev_timer_set(w, (ev_tstamp)timeout_ms * 1e-3, 0.);
  ev_timer_start(loop, w);
}

/* libev's idiom for pushing a timeout back: ev_timer_again moves the heap
 * cell in place instead of removing and re-inserting it. */
void backend_restart(size_t i, uint64_t timeout_ms) {
  ev_timer *w = &timers[i];
  w->repeat = (ev_tstamp)timeout_ms * 1e-3;
  ev_timer_again(loop, w);
}

void backend_stop(size_t i) {
  ev_timer_stop(loop, &timers[i]);
}

int backend_active(size_t i) {
  return ev_is_active(&timers[i]);
}

double backend_now_ms(void) {
  return ev_now(loop) * 1e3;
}

static void kick_cb(struct ev_loop *l, ev_timer *w, int revents) {
  (void)l;
  (void)w;
  (void)revents;
  kick_fn(kick_arg);
}

void backend_defer(uint64_t delay_ms, void (*fn)(void *), void *arg) {
  kick_fn = fn;
  kick_arg = arg;
  ev_timer_stop(loop, &kick); /* a pending deferral is replaced */
  ev_timer_init(&kick, kick_cb, (ev_tstamp)delay_ms * 1e-3, 0.);
  ev_timer_start(loop, &kick);
}

void backend_run_once(void) {
  ev_run(loop, EVRUN_ONCE);
}

void backend_run(void) {
  ev_run(loop, 0);
}

int backend_wheel_stats(bench_wheel_stats_t *out) {
  (void)out;
  return -1;
}
