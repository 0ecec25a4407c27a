/* Tests of the loop-thread timer part of the uvtw contract (spec/API.md):
 * uvtw_wheel_* and uvtw_timer_*. Tasks (uvtw_schedule, tickets) are tested
 * in test_tasks.c.
 *
 * Where the contract says "like uv_timer_t", the wheel is checked against
 * libuv's own uv_timer_t in the same loop: every wheel timer has a uv_timer_t
 * twin started at the same moment with the same timeout, and both record the
 * loop iteration they ran in.
 *
 * Loop iterations are counted by an unreferenced uv_prepare_t (g_iter): it
 * runs once per iteration and never keeps the loop alive. Every test uses its
 * own loop and ends with uv_loop_close() == 0, which also proves that the
 * wheel closed both of its handles. An unreferenced watchdog timer per loop
 * turns a hang into a failed check instead of a stuck test.
 *
 * Random choices come from a fixed seed, or UVTW_SEED if it is set; the
 * seed is printed so a failing run can be repeated. */

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <uv.h>

#include "tap.h"
#include "uvtw.h"

/* ---- Checks that say expected vs actual --------------------------------- */

#define CHECK_U64(actual, expected, ...) check_u64_(__LINE__, (actual), (expected), __VA_ARGS__)
#define CHECK_I64(actual, expected, ...) check_i64_(__LINE__, (actual), (expected), __VA_ARGS__)
#define CHECK_ERR(actual, expected, ...) check_err_(__LINE__, (actual), (expected), __VA_ARGS__)

static int check_u64_(int line, uint64_t actual, uint64_t expected, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int check_u64_(int line, uint64_t actual, uint64_t expected, const char *fmt, ...) {
  char name[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(name, sizeof name, fmt, ap);
  va_end(ap);
  if (!tap_ok(actual == expected, "%s", name))
    tap_diag("  expected %" PRIu64 ", got %" PRIu64 " (line %d)", expected, actual, line);
  return actual == expected;
}

static int check_i64_(int line, int64_t actual, int64_t expected, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int check_i64_(int line, int64_t actual, int64_t expected, const char *fmt, ...) {
  char name[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(name, sizeof name, fmt, ap);
  va_end(ap);
  if (!tap_ok(actual == expected, "%s", name))
    tap_diag("  expected %" PRId64 ", got %" PRId64 " (line %d)", expected, actual, line);
  return actual == expected;
}

static const char *err_name(int err) {
  return err == 0 ? "0" : uv_err_name(err);
}

static int check_err_(int line, int actual, int expected, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int check_err_(int line, int actual, int expected, const char *fmt, ...) {
  char name[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(name, sizeof name, fmt, ap);
  va_end(ap);
  if (!tap_ok(actual == expected, "%s", name))
    tap_diag("  expected %s, got %s (%d) (line %d)", err_name(expected), err_name(actual), actual,
             line);
  return actual == expected;
}

/* ---- Random numbers (xorshift64*) --------------------------------------- */

static uint64_t rng_state;

static void rng_init(void) {
  const char *env = getenv("UVTW_SEED");
  uint64_t seed = env ? strtoull(env, NULL, 0) : UINT64_C(0x75767477);
  if (seed == 0)
    seed = 0x9E3779B97F4A7C15u;
  rng_state = seed;
  tap_diag("seed %" PRIu64 " (set UVTW_SEED to repeat)", seed);
}

static uint64_t rng_below(uint64_t n) {
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return (rng_state * 0x2545F4914F6CDD1Du >> 11) % n;
}

/* ---- Loop, iteration counter, watchdog ---------------------------------- */

enum { WATCHDOG_MS = 10000 };

static uv_loop_t *g_loop;
static uint64_t g_iter; /* loop iterations so far (prepare callbacks) */
static uv_prepare_t g_prepare;
static uv_timer_t g_watchdog;
static int g_watchdog_fired;

static void sleep_ms(unsigned ms) {
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
  }
}

static void on_prepare(uv_prepare_t *handle) {
  (void)handle;
  g_iter++;
}

static void on_watchdog(uv_timer_t *handle) {
  g_watchdog_fired++;
  tap_diag("watchdog: uv_run went on for %d ms; stopping it", WATCHDOG_MS);
  uv_stop(handle->loop);
}

static void loop_open(uv_loop_t *loop) {
  int r = uv_loop_init(loop);
  if (r != 0) {
    printf("Bail out! uv_loop_init: %s\n", uv_strerror(r));
    exit(1);
  }
  g_loop = loop;
  g_iter = 0;
  g_watchdog_fired = 0;
  uv_prepare_init(loop, &g_prepare);
  uv_prepare_start(&g_prepare, on_prepare);
  uv_unref((uv_handle_t *)&g_prepare);
  uv_timer_init(loop, &g_watchdog);
  uv_timer_start(&g_watchdog, on_watchdog, WATCHDOG_MS, WATCHDOG_MS); /* rescues every uv_run */
  uv_unref((uv_handle_t *)&g_watchdog);
}

static void close_any(uv_handle_t *handle, void *arg) {
  (void)arg;
  if (!uv_is_closing(handle))
    uv_close(handle, NULL);
}

static void close_handle(void *handle) {
  if (!uv_is_closing((uv_handle_t *)handle))
    uv_close((uv_handle_t *)handle, NULL);
}

/* Closes the test's own helpers and proves nothing else is left open. */
static void loop_finish(uv_loop_t *loop, const char *test) {
  int r;
  close_handle(&g_prepare);
  close_handle(&g_watchdog);
  for (int i = 0; i < 5; i++)
    uv_run(loop, UV_RUN_NOWAIT);
  r = uv_loop_close(loop);
  if (!tap_ok(r == 0 && g_watchdog_fired == 0,
              "%s: the loop never hung and closes cleanly (no handle left open)", test)) {
    tap_diag("  expected uv_loop_close() == 0 and no watchdog, got %s and %d watchdog firings",
             err_name(r), g_watchdog_fired);
    if (r != 0) {
      uv_walk(loop, close_any, NULL);
      for (int i = 0; i < 5; i++)
        uv_run(loop, UV_RUN_NOWAIT);
      uv_loop_close(loop);
    }
  }
  g_loop = NULL;
}

static uvtw_wheel_t *wheel_open(uv_loop_t *loop, const uvtw_options_t *opts, const char *test) {
  uvtw_wheel_t *wheel = NULL;
  int r = uvtw_wheel_new(loop, opts, &wheel);
  if (r != 0 || wheel == NULL) {
    tap_ok(0, "%s: uvtw_wheel_new succeeds", test);
    tap_diag("  expected 0 and a wheel, got %s and %p", err_name(r), (void *)wheel);
    return NULL;
  }
  return wheel;
}

/* loop_open + wheel_open; if the wheel cannot be made, finishes the loop
 * (its checks still count) and returns NULL: the test then returns. */
static uvtw_wheel_t *loop_and_wheel_open(uv_loop_t *loop, const uvtw_options_t *opts,
                                         const char *test) {
  loop_open(loop);
  uvtw_wheel_t *wheel = wheel_open(loop, opts, test);
  if (wheel == NULL)
    loop_finish(loop, test);
  return wheel;
}

typedef struct close_rec_s {
  int calls;
  uvtw_wheel_t *wheel;
  int start_result; /* of a start tried inside the close callback */
  uvtw_timer_t *try_start;
  uvtw_stats_t stats; /* read inside the close callback */
} close_rec_t;

static void noop_timer_cb(uvtw_timer_t *timer) {
  (void)timer;
}

static void on_wheel_closed(uvtw_wheel_t *wheel, void *arg) {
  close_rec_t *rec = arg;
  rec->calls++;
  rec->wheel = wheel;
  uvtw_wheel_stats(wheel, &rec->stats);
  if (rec->try_start)
    rec->start_result = uvtw_timer_start(rec->try_start, noop_timer_cb, 1, 0);
}

/* Closes the wheel and runs the loop until its close callback ran. */
static void wheel_close_wait(uvtw_wheel_t *wheel, uv_loop_t *loop, const char *test) {
  close_rec_t rec;
  memset(&rec, 0, sizeof rec);
  uvtw_wheel_close(wheel, on_wheel_closed, &rec);
  for (int i = 0; i < 5 && rec.calls == 0; i++)
    uv_run(loop, UV_RUN_NOWAIT);
  if (!tap_ok(rec.calls == 1, "%s: uvtw_wheel_close calls its callback once", test))
    tap_diag("  expected 1 call, got %d", rec.calls);
}

static uvtw_stats_t stats_of(const uvtw_wheel_t *wheel) {
  uvtw_stats_t s;
  memset(&s, 0xff, sizeof s);
  uvtw_wheel_stats(wheel, &s);
  return s;
}

/* One check: the four counters that the timer calls define exactly. */
static void expect_counts(const uvtw_wheel_t *wheel, uint64_t active, uint64_t started,
                          uint64_t stopped, uint64_t fired, const char *when) {
  uvtw_stats_t s = stats_of(wheel);
  int ok = s.active == active && s.started == started && s.stopped == stopped && s.fired == fired;
  if (!tap_ok(ok, "stats %s: active/started/stopped/fired match their definitions", when))
    tap_diag("  expected %" PRIu64 "/%" PRIu64 "/%" PRIu64 "/%" PRIu64 ", got %" PRIu64 "/%" PRIu64
             "/%" PRIu64 "/%" PRIu64,
             active, started, stopped, fired, s.active, s.started, s.stopped, s.fired);
}

/* ---- Probes: wheel timers that record how they ran ---------------------- */

enum { PROBE_FIRES_KEPT = 8 };

typedef struct probe_s probe_t;
typedef void (*probe_action)(probe_t *self);

struct probe_s {
  uvtw_timer_t timer;
  char name;
  int fires;
  uint64_t deadline;               /* of the start made through probe_start */
  int early;                       /* callbacks with uv_now() < deadline */
  uint64_t now[PROBE_FIRES_KEPT];  /* uv_now() at each callback */
  uint64_t iter[PROBE_FIRES_KEPT]; /* loop iteration of each callback */
  int active_in_cb[PROBE_FIRES_KEPT];
  uint64_t due_in_in_cb[PROBE_FIRES_KEPT];
  uint64_t repeat_in_cb[PROBE_FIRES_KEPT];
  probe_action action;
};

static char g_log[512]; /* names of the probes in the order they ran */
static size_t g_log_len;

static void log_reset(void) {
  g_log_len = 0;
  g_log[0] = '\0';
}

static void probe_cb(uvtw_timer_t *timer) {
  probe_t *p = timer->data;
  uint64_t now = uv_now(g_loop);
  int k = p->fires < PROBE_FIRES_KEPT ? p->fires : PROBE_FIRES_KEPT - 1;
  p->fires++;
  p->now[k] = now;
  p->iter[k] = g_iter;
  p->active_in_cb[k] = uvtw_timer_is_active(timer);
  p->due_in_in_cb[k] = uvtw_timer_get_due_in(timer);
  p->repeat_in_cb[k] = uvtw_timer_get_repeat(timer);
  if (now < p->deadline)
    p->early++;
  if (g_log_len + 1 < sizeof g_log) {
    g_log[g_log_len++] = p->name;
    g_log[g_log_len] = '\0';
  }
  if (p->action)
    p->action(p);
}

static void probe_init(uvtw_wheel_t *wheel, probe_t *p, char name, probe_action action) {
  memset(p, 0, sizeof *p);
  uvtw_timer_init(wheel, &p->timer);
  p->timer.data = p;
  p->name = name;
  p->action = action;
}

static int probe_start(probe_t *p, uint64_t timeout, uint64_t repeat) {
  p->deadline = uv_now(g_loop) + timeout;
  return uvtw_timer_start(&p->timer, probe_cb, timeout, repeat);
}

/* A uv_timer_t helper: keeps the loop alive or acts at a given time. */
typedef struct aux_s aux_t;
struct aux_s {
  uv_timer_t handle;
  int fires;
  uint64_t now;
  void (*fn)(aux_t *self);
};

static void aux_cb(uv_timer_t *handle) {
  aux_t *a = handle->data;
  a->fires++;
  a->now = uv_now(handle->loop);
  if (a->fn)
    a->fn(a);
}

static void aux_init(uv_loop_t *loop, aux_t *a, void (*fn)(aux_t *)) {
  memset(a, 0, sizeof *a);
  uv_timer_init(loop, &a->handle);
  a->handle.data = a;
  a->fn = fn;
}

static void aux_start(aux_t *a, uint64_t timeout) {
  uv_timer_start(&a->handle, aux_cb, timeout, 0);
}

/* ---- Basics -------------------------------------------------------------- */

static uint64_t g_marker; /* something to point at */

static void test_basics(void) {
  const char *T = "basics";
  uv_loop_t loop;
  uvtw_wheel_t *sentinel = (uvtw_wheel_t *)(void *)&g_marker;
  uvtw_wheel_t *wheel = sentinel;
  uvtw_timer_t timer;
  uvtw_stats_t s;
  char version[32];

  loop_open(&loop);
  if (!tap_ok(sizeof(uvtw_timer_t) <= 56, "sizeof(uvtw_timer_t) is at most 56 bytes"))
    tap_diag("  expected <= 56, got %zu", sizeof(uvtw_timer_t));

  CHECK_ERR(uvtw_wheel_new(NULL, NULL, &wheel), UV_EINVAL,
            "uvtw_wheel_new(NULL loop) returns UV_EINVAL");
  tap_ok(wheel == sentinel, "a failed uvtw_wheel_new leaves *out untouched");
  CHECK_ERR(uvtw_wheel_new(&loop, NULL, NULL), UV_EINVAL,
            "uvtw_wheel_new(loop, opts, NULL out) returns UV_EINVAL");

  wheel = wheel_open(&loop, NULL, T);
  if (!wheel) {
    loop_finish(&loop, T);
    return;
  }
  tap_ok(uvtw_wheel_loop(wheel) == &loop, "uvtw_wheel_loop returns the loop the wheel was made on");
  snprintf(version, sizeof version, "%d.%d.%d", UVTW_VERSION_MAJOR, UVTW_VERSION_MINOR,
           UVTW_VERSION_PATCH);
  if (!tap_ok(strcmp(uvtw_version_string(), version) == 0,
              "uvtw_version_string matches the UVTW_VERSION_* macros"))
    tap_diag("  expected \"%s\", got \"%s\"", version, uvtw_version_string());

  s = stats_of(wheel);
  tap_ok(s.active == 0 && s.started == 0 && s.stopped == 0 && s.fired == 0 && s.cascaded == 0 &&
             s.wakeups == 0 && s.wasted_wakeups == 0 && s.remote_batches == 0 && s.late_max_ms == 0,
         "a new wheel's stats are all zero");
  CHECK_I64(uvtw_wheel_next_due(wheel), -1,
            "uvtw_wheel_next_due of a new wheel is -1 (nothing pending)");

  timer.data = &g_marker;
  uvtw_timer_init(wheel, &timer);
  tap_ok(timer.data == &g_marker, "uvtw_timer_init leaves data alone");
  CHECK_U64((uint64_t)uvtw_timer_is_active(&timer), 0, "an initialized timer is inactive");
  CHECK_U64(uvtw_timer_get_due_in(&timer), 0, "get_due_in of an initialized timer is 0 (inactive)");
  CHECK_U64(uvtw_timer_get_repeat(&timer), 0, "get_repeat of an initialized timer is 0");
  uvtw_timer_set_repeat(&timer, 123);
  CHECK_U64(uvtw_timer_get_repeat(&timer), 123, "get_repeat returns what set_repeat set");
  CHECK_U64((uint64_t)uvtw_timer_is_active(&timer), 0, "set_repeat does not arm a timer");

  wheel_close_wait(wheel, &loop, T);
  loop_finish(&loop, T);
}

/* ---- Argument errors ----------------------------------------------------- */

static void test_argument_errors(void) {
  const char *T = "argument errors";
  uv_loop_t loop;
  uvtw_wheel_t *wheel;
  uvtw_timer_t timer;

  wheel = loop_and_wheel_open(&loop, NULL, T);
  if (!wheel)
    return;
  uvtw_timer_init(wheel, &timer);
  CHECK_ERR(uvtw_timer_start(&timer, NULL, 10, 0), UV_EINVAL,
            "start with a NULL callback returns UV_EINVAL");
  CHECK_U64((uint64_t)uvtw_timer_is_active(&timer), 0,
            "a start that failed leaves the timer inactive");
  CHECK_ERR(uvtw_timer_start(NULL, noop_timer_cb, 10, 0), UV_EINVAL,
            "start of a NULL timer returns UV_EINVAL");
  CHECK_ERR(uvtw_timer_again(&timer), UV_EINVAL,
            "again on a never-started timer returns UV_EINVAL");
  uvtw_timer_set_repeat(&timer, 10);
  CHECK_ERR(uvtw_timer_again(&timer), UV_EINVAL,
            "again on a never-started timer returns UV_EINVAL even with a repeat set");
  CHECK_U64((uint64_t)uvtw_timer_is_active(&timer), 0, "a failed again leaves the timer inactive");
  CHECK_ERR(uvtw_timer_stop(&timer), 0, "stop on a never-started timer returns 0");
  expect_counts(wheel, 0, 0, 0, 0, "after only failed calls and a no-op stop");
  CHECK_I64(uvtw_wheel_next_due(wheel), -1, "failed calls leave nothing pending (next_due -1)");
  wheel_close_wait(wheel, &loop, T);
  loop_finish(&loop, T);
}

/* ---- Same loop iteration as uv_timer_t, order, never early --------------- */

typedef struct pair_s {
  uvtw_timer_t w;
  uv_timer_t u;
  uint64_t timeout;
  uint64_t deadline; /* uv_now() at the latest start + timeout */
  uint64_t seq;      /* order of the latest start among all starts */
  uint64_t w_iter, u_iter, w_now;
  int w_fires, u_fires;
  unsigned block_w_ms, block_u_ms; /* sleep this long inside the callback */
  int stopped;
} pair_t;

static struct {
  uv_loop_t *loop;
  uvtw_wheel_t *wheel;
  pair_t *pairs;
  size_t used, cap;
  size_t *order; /* pair index of each wheel callback, in the order they ran */
  size_t norder, order_cap;
  uint64_t next_seq;
  uint64_t starts, stops; /* successful wheel starts; stops and restarts of active timers */
  int start_failures;
  int last_start_error;
  /* staggered driver */
  uv_timer_t driver;
  int step, steps;
  uint64_t t0;
} eq;

static void eq_w_cb(uvtw_timer_t *timer) {
  pair_t *p = timer->data;
  p->w_fires++;
  p->w_iter = g_iter;
  p->w_now = uv_now(eq.loop);
  if (eq.norder < eq.order_cap)
    eq.order[eq.norder++] = (size_t)(p - eq.pairs);
  if (p->block_w_ms)
    sleep_ms(p->block_w_ms);
}

static void eq_u_cb(uv_timer_t *handle) {
  pair_t *p = handle->data;
  p->u_fires++;
  p->u_iter = g_iter;
  if (p->block_u_ms)
    sleep_ms(p->block_u_ms);
}

static void eq_reset(uv_loop_t *loop, uvtw_wheel_t *wheel, size_t cap) {
  memset(&eq, 0, sizeof eq);
  eq.loop = loop;
  eq.wheel = wheel;
  eq.cap = cap;
  eq.pairs = calloc(cap, sizeof *eq.pairs);
  eq.order_cap = 2 * cap;
  eq.order = calloc(eq.order_cap, sizeof *eq.order);
  if (!eq.pairs || !eq.order) {
    printf("Bail out! out of memory\n");
    exit(1);
  }
}

static pair_t *eq_new_pair(void) {
  pair_t *p;
  if (eq.used == eq.cap)
    return NULL;
  p = &eq.pairs[eq.used++];
  uvtw_timer_init(eq.wheel, &p->w);
  p->w.data = p;
  uv_timer_init(eq.loop, &p->u);
  p->u.data = p;
  return p;
}

/* Starts (or restarts) the wheel timer and its uv_timer_t twin at the same
 * moment with the same timeout. */
static void eq_start(pair_t *p, uint64_t timeout) {
  int active = uvtw_timer_is_active(&p->w);
  int r = uvtw_timer_start(&p->w, eq_w_cb, timeout, 0);
  uv_timer_start(&p->u, eq_u_cb, timeout, 0);
  if (r != 0) {
    eq.start_failures++;
    eq.last_start_error = r;
    return;
  }
  if (active)
    eq.stops++;
  eq.starts++;
  p->timeout = timeout;
  p->deadline = uv_now(eq.loop) + timeout;
  p->seq = eq.next_seq++;
}

static void eq_stop(pair_t *p) {
  if (uvtw_timer_is_active(&p->w))
    eq.stops++;
  uvtw_timer_stop(&p->w);
  uv_timer_stop(&p->u);
  p->stopped = 1;
}

static int eq_before(const pair_t *a, const pair_t *b) {
  return a->deadline < b->deadline || (a->deadline == b->deadline && a->seq < b->seq);
}

/* Checks everything the pairs recorded; returns the largest lateness seen. */
static uint64_t eq_verify(const char *test) {
  size_t bad_fires = 0, bad_iter = 0, early = 0, bad_order = 0, compared = 0;
  uint64_t late_max = 0;

  if (!tap_ok(eq.start_failures == 0, "%s: every uvtw_timer_start returned 0", test))
    tap_diag("  expected 0 failures, got %d (last %s)", eq.start_failures,
             err_name(eq.last_start_error));
  for (size_t i = 0; i < eq.used; i++) {
    pair_t *p = &eq.pairs[i];
    int want = p->stopped ? 0 : 1;
    if (p->w_fires != want || p->u_fires != want) {
      if (bad_fires++ < 5)
        tap_diag("  timer %zu (timeout %" PRIu64 ", %s): wheel timer ran %d times, its "
                 "uv_timer_t twin %d times, expected %d each",
                 i, p->timeout, p->stopped ? "stopped" : "not stopped", p->w_fires, p->u_fires,
                 want);
    }
    if (p->w_fires >= 1 && p->u_fires >= 1) {
      compared++;
      if (p->w_iter != p->u_iter && bad_iter++ < 5)
        tap_diag("  timer %zu (timeout %" PRIu64 ", deadline %" PRIu64 "): wheel timer ran in "
                 "loop iteration %" PRIu64 ", its uv_timer_t twin in iteration %" PRIu64,
                 i, p->timeout, p->deadline, p->w_iter, p->u_iter);
    }
    if (p->w_fires >= 1) {
      if (p->w_now < p->deadline) {
        if (early++ < 5)
          tap_diag("  timer %zu ran at uv_now %" PRIu64 ", before its deadline %" PRIu64, i,
                   p->w_now, p->deadline);
      } else if (p->w_now - p->deadline > late_max) {
        late_max = p->w_now - p->deadline;
      }
    }
  }
  for (size_t k = 1; k < eq.norder; k++) {
    const pair_t *a = &eq.pairs[eq.order[k - 1]];
    const pair_t *b = &eq.pairs[eq.order[k]];
    if (eq_before(b, a) && bad_order++ < 5)
      tap_diag("  callback %zu ran timer %zu (deadline %" PRIu64 ", start #%" PRIu64
               ") after timer %zu (deadline %" PRIu64 ", start #%" PRIu64 ")",
               k, eq.order[k], b->deadline, b->seq, eq.order[k - 1], a->deadline, a->seq);
  }
  if (!tap_ok(bad_fires == 0,
              "%s: every started wheel timer (and uv_timer_t twin) ran exactly once, every stopped "
              "one never",
              test))
    tap_diag("  expected 0 timers with a wrong number of callbacks, got %zu of %zu", bad_fires,
             eq.used);
  if (!tap_ok(bad_iter == 0 && compared > 0,
              "%s: each wheel timer ran in the same loop iteration as its uv_timer_t twin", test))
    tap_diag("  expected 0 of %zu to differ, got %zu", compared, bad_iter);
  if (!tap_ok(early == 0, "%s: no wheel callback ran with uv_now() below its deadline", test))
    tap_diag("  expected 0 early callbacks, got %zu", early);
  if (!tap_ok(bad_order == 0,
              "%s: callbacks ran in nondecreasing deadline order, equal deadlines in start order",
              test))
    tap_diag("  expected 0 out-of-order callbacks, got %zu of %zu", bad_order, eq.norder);
  return late_max;
}

static void eq_close_twins(void) {
  for (size_t i = 0; i < eq.used; i++)
    close_handle(&eq.pairs[i].u);
}

static void eq_free(void) {
  free(eq.pairs);
  free(eq.order);
  eq.pairs = NULL;
  eq.order = NULL;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static size_t eq_distinct_deadlines(void) {
  uint64_t *d = malloc((eq.used + 1) * sizeof *d);
  size_t n = 0, distinct = 0;
  if (!d)
    return 0;
  for (size_t i = 0; i < eq.used; i++)
    if (!eq.pairs[i].stopped)
      d[n++] = eq.pairs[i].deadline;
  qsort(d, n, sizeof *d, cmp_u64);
  for (size_t i = 0; i < n; i++)
    if (i == 0 || d[i] != d[i - 1])
      distinct++;
  free(d);
  return distinct;
}

/* With nothing stopped: no wasted wakeups, and at least one wakeup but no
 * more than one per distinct deadline. Returns the wheel's stats. */
static uvtw_stats_t eq_check_wakeups(const uvtw_wheel_t *wheel, const char *T, const char *why) {
  uvtw_stats_t s = stats_of(wheel);
  size_t distinct = eq_distinct_deadlines();
  CHECK_U64(s.wasted_wakeups, 0, "%s: no wasted wakeups when nothing was stopped", T);
  if (!tap_ok(s.wakeups >= 1 && s.wakeups <= distinct, "%s: %s", T, why))
    tap_diag("  expected 1..%zu wakeups, got %" PRIu64, distinct, s.wakeups);
  return s;
}

/* Closes the twins, the wheel and the loop of an eq_* test. */
static void eq_finish(uvtw_wheel_t *wheel, uv_loop_t *loop, const char *T) {
  eq_close_twins();
  wheel_close_wait(wheel, loop, T);
  loop_finish(loop, T);
  eq_free();
}

enum { STATIC_PAIRS = 3000 };

/* Thousands of timers started together, many with equal timeouts; one
 * uv_timer_t callback and one wheel callback block the loop, so that many
 * deadlines are overdue when it wakes. No stops: so no wasted wakeups. */
static void test_same_iteration_as_uv_timer(void) {
  const char *T = "same iteration as uv_timer_t";
  uv_loop_t loop;
  uvtw_wheel_t *wheel;
  uvtw_stats_t s;
  uint64_t late_max;

  wheel = loop_and_wheel_open(&loop, NULL, T);
  if (!wheel)
    return;
  eq_reset(&loop, wheel, STATIC_PAIRS);
  for (size_t i = 0; i < STATIC_PAIRS; i++) {
    pair_t *p = eq_new_pair();
    uint64_t kind = rng_below(10);
    uint64_t timeout = kind == 0 ? 0 : kind < 7 ? rng_below(60) * 5 : rng_below(400);
    if (i == 0) { /* a uv_timer_t callback blocks the loop at 60 ms */
      timeout = 60;
      p->block_u_ms = 70;
    }
    if (i == STATIC_PAIRS / 2) { /* a wheel callback blocks it at 150 ms */
      timeout = 150;
      p->block_w_ms = 80;
    }
    eq_start(p, timeout);
  }
  CHECK_U64(stats_of(wheel).active, STATIC_PAIRS, "%s: stats.active counts every armed timer", T);
  uv_run(&loop, UV_RUN_DEFAULT);

  late_max = eq_verify(T);
  if (!tap_ok(late_max >= 50, "%s: the blocked callbacks left timers overdue (test precondition)",
              T))
    tap_diag("  expected some callback >= 50 ms late, the latest was %" PRIu64 " ms", late_max);
  expect_counts(wheel, 0, eq.starts, eq.stops, eq.starts, "after thousands of one-shot timers ran");
  s = eq_check_wakeups(wheel, T,
                       "the wheel woke only for due callbacks (1 <= wakeups <= distinct deadlines)");
  CHECK_U64(s.late_max_ms, late_max,
            "%s: stats.late_max_ms is the largest uv_now() - deadline seen", T);
  eq_finish(wheel, &loop, T);
}

enum {
  STAGGER_STEPS = 40,
  STAGGER_NEW = 30,
  STAGGER_RESTARTS = 6,
  STAGGER_STOPS = 3,
  STAGGER_STOP_STARTS = 4
};

/* Absolute deadlines (ms after the test began) that timers started at
 * different times aim at, so that equal deadlines arrive through different
 * timeouts and so through different levels of the wheel. */
static const uint64_t stagger_targets[] = {64, 90, 128, 192, 200, 257, 300};

static uint64_t stagger_timeout(uint64_t now) {
  uint64_t target;
  if (rng_below(3) == 0)
    return rng_below(70);
  target = eq.t0 + stagger_targets[rng_below(sizeof stagger_targets / sizeof stagger_targets[0])];
  return target > now ? target - now : 0;
}

/* A timer that neither ran nor was stopped, and whose twin has not run yet
 * (deadline in the future), so that touching both keeps them in step. */
static pair_t *stagger_pick_pending(uint64_t now) {
  for (int tries = 0; tries < 20 && eq.used > 0; tries++) {
    pair_t *p = &eq.pairs[rng_below(eq.used)];
    if (!p->stopped && p->deadline > now && p->w_fires == 0 && uvtw_timer_is_active(&p->w))
      return p;
  }
  return NULL;
}

static void stagger_step(uv_timer_t *handle) {
  uint64_t now = uv_now(eq.loop);
  for (int k = 0; k < STAGGER_NEW; k++) {
    pair_t *p = eq_new_pair();
    if (p)
      eq_start(p, stagger_timeout(now));
  }
  for (int k = 0; k < STAGGER_RESTARTS; k++) {
    pair_t *p = stagger_pick_pending(now);
    if (p)
      eq_start(p, stagger_timeout(now));
  }
  for (int k = 0; k < STAGGER_STOPS; k++) {
    pair_t *p = stagger_pick_pending(now);
    if (p)
      eq_stop(p);
  }
  for (int k = 0; k < STAGGER_STOP_STARTS; k++) { /* a stop, then at once a start */
    pair_t *p = stagger_pick_pending(now);
    if (p) {
      eq_stop(p);
      p->stopped = 0;
      eq_start(p, stagger_timeout(now));
    }
  }
  if (eq.step == STAGGER_STEPS / 2)
    sleep_ms(60);
  if (++eq.step == eq.steps)
    uv_timer_stop(handle);
}

/* Timers started, restarted, stopped, and stopped and started again at
 * once, at many different moments (from a uv_timer_t callback), each with
 * a uv_timer_t twin treated the same way. */
static void test_staggered_starts_like_uv_timer(void) {
  const char *T = "staggered starts, restarts and stops";
  uv_loop_t loop;
  uvtw_wheel_t *wheel;

  wheel = loop_and_wheel_open(&loop, NULL, T);
  if (!wheel)
    return;
  eq_reset(&loop, wheel, STAGGER_STEPS * STAGGER_NEW);
  eq.steps = STAGGER_STEPS;
  eq.t0 = uv_now(&loop);
  uv_timer_init(&loop, &eq.driver);
  uv_timer_start(&eq.driver, stagger_step, 1, 5);
  uv_run(&loop, UV_RUN_DEFAULT);

  eq_verify(T);
  expect_counts(wheel, 0, eq.starts, eq.stops, eq.starts - eq.stops,
                "after staggered starts, restarts and stops");
  close_handle(&eq.driver);
  eq_finish(wheel, &loop, T);
}

/* ---- Restart, stop, again ------------------------------------------------ */

static void test_restart_no_duplicate(void) {
  const char *T = "restart";
  uv_loop_t loop;
  uvtw_wheel_t *wheel;
  probe_t a, b;
  uint64_t t0;

  wheel = loop_and_wheel_open(&loop, NULL, T);
  if (!wheel)
    return;
  log_reset();
  probe_init(wheel, &a, 'a', NULL);
  probe_init(wheel, &b, 'b', NULL);
  t0 = uv_now(&loop);
  CHECK_ERR(probe_start(&a, 10, 0), 0, "start returns 0");
  CHECK_ERR(probe_start(&a, 20, 0), 0, "start on an active timer (restart) returns 0");
  CHECK_U64(uvtw_timer_get_due_in(&a.timer), 20,
            "a restart replaces the deadline (due_in is the new timeout)");
  expect_counts(wheel, 1, 2, 1, 0, "after start + restart");
  for (int i = 0; i < 1000; i++) {
    probe_start(&a, 5 + (uint64_t)(i % 50), 0);
    probe_start(&b, 50 - (uint64_t)(i % 50), 0);
  }
  probe_start(&a, 30, 0);
  probe_start(&b, 25, 0);
  /* starts: 2 + 2000 in the loop + 2; stops: 1 + (1000 + 999) + 2 (b's first was a start) */
  expect_counts(wheel, 2, 2004, 2002, 0, "after 2000 more restarts of two timers");
  CHECK_I64(uvtw_wheel_next_due(wheel), 25,
            "next_due follows the restarts (earliest is now 25 ms away)");
  uv_run(&loop, UV_RUN_DEFAULT);
  CHECK_U64((uint64_t)a.fires, 1, "a timer restarted many times runs once");
  CHECK_U64((uint64_t)b.fires, 1, "a second timer restarted many times runs once");
  if (!tap_ok(a.fires >= 1 && a.now[0] >= t0 + 30 && b.fires >= 1 && b.now[0] >= t0 + 25,
              "restarted timers run no earlier than their last deadline"))
    tap_diag("  expected a at >= %" PRIu64 " and b at >= %" PRIu64 ", got %" PRIu64 " and %" PRIu64,
             t0 + 30, t0 + 25, a.now[0], b.now[0]);
  tap_ok(strcmp(g_log, "ba") == 0, "the restarted timers ran in their final deadline order");
  expect_counts(wheel, 0, 2004, 2002, 2, "after the restarted timers ran");
  wheel_close_wait(wheel, &loop, T);
  loop_finish(&loop, T);
  log_reset();
}

static void test_stop(void) {
  const char *T = "stop";
  uv_loop_t loop;
  uvtw_wheel_t *wheel;
  probe_t a, b;
  aux_t keep;

  wheel = loop_and_wheel_open(&loop, NULL, T);
  if (!wheel)
    return;
  log_reset();
  probe_init(wheel, &a, 'a', NULL);
  probe_init(wheel, &b, 'b', NULL);
  CHECK_ERR(uvtw_timer_stop(&a.timer), 0, "stop on an inactive timer returns 0");
  expect_counts(wheel, 0, 0, 0, 0, "after a stop of an inactive timer (not counted)");
  probe_start(&a, 20, 0);
  probe_start(&b, 30, 0);
  CHECK_ERR(uvtw_timer_stop(&a.timer), 0, "stop on an active timer returns 0");
  CHECK_U64((uint64_t)uvtw_timer_is_active(&a.timer), 0, "a stopped timer is inactive");
  CHECK_U64(uvtw_timer_get_due_in(&a.timer), 0, "get_due_in of a stopped timer is 0");
  CHECK_ERR(uvtw_timer_stop(&a.timer), 0, "a second stop returns 0");
  expect_counts(wheel, 1, 2, 1, 0, "after stop + repeated stop (counted once)");
  CHECK_I64(uvtw_wheel_next_due(wheel), 30, "next_due skips the stopped timer");
  aux_init(&loop, &keep, NULL);
  aux_start(&keep, 60); /* keep the loop running past both deadlines */
  uv_run(&loop, UV_RUN_DEFAULT);
  CHECK_U64((uint64_t)a.fires, 0,
            "a stopped timer never runs, even when the loop passes its deadline");
  CHECK_U64((uint64_t)b.fires, 1, "the other timer still runs");
  expect_counts(wheel, 0, 2, 1, 1, "after the remaining timer ran");
  close_handle(&keep.handle);
  wheel_close_wait(wheel, &loop, T);
  loop_finish(&loop, T);
  log_reset();
}

static void again_stop_first(probe_t *p) {
  uvtw_timer_stop(&p->timer);
}

static void again_stop_second(probe_t *p) {
  if (p->fires >= 2)
    uvtw_timer_stop(&p->timer);
}

static void test_again(void) {
  const char *T = "again";
  uv_loop_t loop;
  uvtw_wheel_t *wheel;
  probe_t a, b, c, d;
  uint64_t t0;

  wheel = loop_and_wheel_open(&loop, NULL, T);
  if (!wheel)
    return;
  log_reset();
  probe_init(wheel, &a, 'a', NULL);
  probe_init(wheel, &b, 'b', again_stop_first);
  probe_init(wheel, &c, 'c', again_stop_first);
  probe_init(wheel, &d, 'd', again_stop_second);

  /* a: with repeat 0, again stops an active timer */
  probe_start(&a, 50, 0);
  CHECK_ERR(uvtw_timer_again(&a.timer), 0, "again with repeat 0 returns 0");
  CHECK_U64((uint64_t)uvtw_timer_is_active(&a.timer), 0,
            "again with repeat 0 stops an active timer");
  expect_counts(wheel, 0, 1, 1, 0, "after again with repeat 0 stopped an active timer");
  CHECK_ERR(uvtw_timer_again(&a.timer), 0, "again with repeat 0 on a stopped timer returns 0");
  CHECK_U64((uint64_t)uvtw_timer_is_active(&a.timer), 0, "... and leaves it inactive");
  expect_counts(wheel, 0, 1, 1, 0, "after again with repeat 0 on an inactive timer (no change)");

  /* b: again restarts an active repeating timer with timeout = repeat */
  t0 = uv_now(&loop);
  probe_start(&b, 1000, 30);
  CHECK_ERR(uvtw_timer_again(&b.timer), 0, "again on an active repeating timer returns 0");
  CHECK_U64((uint64_t)uvtw_timer_is_active(&b.timer), 1, "again keeps a repeating timer active");
  CHECK_U64(uvtw_timer_get_due_in(&b.timer), 30,
            "again re-arms to timeout = repeat (due_in 30, not 1000)");
  b.deadline = t0 + 30;
  expect_counts(wheel, 1, 3, 2, 0, "after again on an active repeating timer (a restart)");

  /* c: again on a started-then-stopped timer arms it with the repeat */
  probe_start(&c, 40, 0);
  uvtw_timer_stop(&c.timer);
  uvtw_timer_set_repeat(&c.timer, 20);
  CHECK_ERR(uvtw_timer_again(&c.timer), 0, "again on a stopped timer with a repeat set returns 0");
  CHECK_U64((uint64_t)uvtw_timer_is_active(&c.timer), 1,
            "again arms a stopped timer that has a repeat");
  CHECK_U64(uvtw_timer_get_due_in(&c.timer), 20, "again arms it to timeout = repeat");
  c.deadline = uv_now(&loop) + 20;
  expect_counts(wheel, 2, 5, 3, 0, "after again armed an inactive timer (a start, no stop)");

  /* d: again on a one-shot that already ran */
  probe_start(&d, 5, 0);
  while (d.fires == 0 && !g_watchdog_fired)
    uv_run(&loop, UV_RUN_ONCE);
  uvtw_timer_set_repeat(&d.timer, 15);
  d.deadline = uv_now(&loop) + 15;
  CHECK_ERR(uvtw_timer_again(&d.timer), 0, "again on a one-shot timer that already ran returns 0");
  CHECK_U64(uvtw_timer_get_due_in(&d.timer), 15, "... and re-arms it to timeout = repeat");
  uv_run(&loop, UV_RUN_DEFAULT);
  CHECK_U64((uint64_t)b.fires, 1,
            "the timer re-armed by again ran (once: its callback stopped it)");
  CHECK_U64((uint64_t)c.fires, 1, "the stopped timer armed by again ran");
  CHECK_U64((uint64_t)d.fires, 2,
            "again on a one-shot that ran makes it run again (then its callback stopped it)");
  tap_ok(b.early == 0 && c.early == 0 && d.early == 0, "timers armed by again never run early");
  CHECK_U64((uint64_t)a.fires, 0, "a timer stopped by again never runs");
  wheel_close_wait(wheel, &loop, T);
  loop_finish(&loop, T);
  log_reset();
}

/* ---- Repeat and the callback's view of its own timer --------------------- */

static probe_t rp_main, rp_start, rp_again, rp_stop, rp_norepeat, rp_oneshot, rp_late;
static int rp_stop_result, rp_again_result;
static uint64_t rp_due_after_start, rp_repeat_after_start, rp_due_after_again;
static int rp_active_after_stop;

static void rp_main_action(probe_t *p) {
  if (p->fires == 4)
    uvtw_timer_stop(&p->timer);
}

static void rp_start_action(probe_t *p) {
  if (p->fires == 1) {
    probe_start(p, 40, 0);
    rp_due_after_start = uvtw_timer_get_due_in(&p->timer);
    rp_repeat_after_start = uvtw_timer_get_repeat(&p->timer);
  }
}

static void rp_again_action(probe_t *p) {
  if (p->fires == 1) {
    uvtw_timer_set_repeat(&p->timer, 25);
    rp_again_result = uvtw_timer_again(&p->timer);
    rp_due_after_again = uvtw_timer_get_due_in(&p->timer);
    p->deadline = p->now[0] + 25;
  } else {
    uvtw_timer_stop(&p->timer);
  }
}

static void rp_stop_action(probe_t *p) {
  rp_stop_result = uvtw_timer_stop(&p->timer);
  rp_active_after_stop = uvtw_timer_is_active(&p->timer);
}

static void rp_late_action(probe_t *p) {
  if (p->fires == 2)
    uvtw_timer_stop(&p->timer);
}

static void rp_norepeat_action(probe_t *p) {
  if (p->fires == 1)
    uvtw_timer_set_repeat(&p->timer, 0);
}

static void check_intervals(const probe_t *p, uint64_t interval, const char *what) {
  int ok = 1;
  int n = p->fires < PROBE_FIRES_KEPT ? p->fires : PROBE_FIRES_KEPT;
  for (int k = 1; k < n; k++) {
    if (p->now[k] < p->now[k - 1] + interval) {
      ok = 0;
      tap_diag("  run %d at uv_now %" PRIu64 ", expected >= %" PRIu64, k + 1, p->now[k],
               p->now[k - 1] + interval);
    }
  }
  tap_ok(ok && n >= 2, "%s", what);
}

static void test_repeat(void) {
  const char *T = "repeat";
  uv_loop_t loop;
  uvtw_wheel_t *wheel;
  uint64_t t0;
  int all_active = 1, all_due = 1, all_repeat = 1;

  wheel = loop_and_wheel_open(&loop, NULL, T);
  if (!wheel)
    return;
  log_reset();
  probe_init(wheel, &rp_main, 'm', rp_main_action);
  probe_init(wheel, &rp_start, 's', rp_start_action);
  probe_init(wheel, &rp_again, 'a', rp_again_action);
  probe_init(wheel, &rp_stop, 'x', rp_stop_action);
  probe_init(wheel, &rp_norepeat, 'n', rp_norepeat_action);
  probe_init(wheel, &rp_oneshot, 'o', NULL);
  t0 = uv_now(&loop);
  probe_start(&rp_main, 10, 15);
  CHECK_U64(uvtw_timer_get_repeat(&rp_main.timer), 15, "start sets the repeat");
  probe_start(&rp_start, 10, 15);
  probe_start(&rp_again, 10, 15);
  probe_start(&rp_stop, 10, 15);
  probe_start(&rp_norepeat, 10, 15);
  probe_start(&rp_oneshot, 5, 0);
  probe_init(wheel, &rp_late, 'l', rp_late_action);
  probe_start(&rp_late, 5, 20);
  sleep_ms(30); /* every first run is late; rp_late by >= 25 ms, more than its repeat */
  uv_run(&loop, UV_RUN_DEFAULT);

  CHECK_U64((uint64_t)rp_main.fires, 4,
            "a repeating timer runs until its callback stops it (4 runs)");
  if (!tap_ok(rp_main.fires >= 1 && rp_main.now[0] >= t0 + 10,
              "the first run waits for the timeout"))
    tap_diag("  expected uv_now >= %" PRIu64 ", got %" PRIu64, t0 + 10, rp_main.now[0]);
  check_intervals(&rp_main, 15, "each repeat runs >= repeat ms after the previous callback");
  for (int k = 0; k < rp_main.fires && k < PROBE_FIRES_KEPT; k++) {
    all_active &= rp_main.active_in_cb[k] != 0;
    all_due &= rp_main.due_in_in_cb[k] == 15;
    all_repeat &= rp_main.repeat_in_cb[k] == 15;
    if (rp_main.due_in_in_cb[k] != 15)
      tap_diag("  run %d: expected get_due_in 15 inside the callback, got %" PRIu64, k + 1,
               rp_main.due_in_in_cb[k]);
  }
  tap_ok(all_active, "a repeating timer is active inside its callback");
  tap_ok(all_due,
         "it is re-armed to uv_now + repeat before its callback (due_in == repeat inside it)");
  tap_ok(all_repeat, "get_repeat inside the callback returns the repeat");

  CHECK_U64((uint64_t)rp_start.fires, 2,
            "start inside the callback overrides the re-arm (runs twice, not repeating)");
  CHECK_U64(rp_due_after_start, 40, "start inside the callback sets due_in to its own timeout");
  CHECK_U64(rp_repeat_after_start, 0, "start inside the callback sets its own repeat");
  if (rp_start.fires >= 2)
    check_intervals(&rp_start, 40,
                    "the timer restarted in its callback runs after the new timeout");
  else
    tap_ok(0, "the timer restarted in its callback runs after the new timeout");
  CHECK_U64((uint64_t)(rp_start.fires >= 2 ? rp_start.active_in_cb[1] : -1), 0,
            "after the restart as one-shot it is inactive in its next callback");

  CHECK_ERR(rp_again_result, 0, "again inside the callback returns 0");
  CHECK_U64(rp_due_after_again, 25, "again inside the callback re-arms with the new repeat");
  CHECK_U64((uint64_t)rp_again.fires, 2, "again inside the callback: runs once more, then stopped");
  if (rp_again.fires >= 2)
    check_intervals(&rp_again, 25, "the timer re-armed by again runs after the new repeat");
  else
    tap_ok(0, "the timer re-armed by again runs after the new repeat");

  CHECK_U64((uint64_t)rp_stop.fires, 1,
            "stop inside the callback overrides the re-arm (never runs again)");
  CHECK_ERR(rp_stop_result, 0, "stop inside the callback of a repeating timer returns 0");
  CHECK_U64((uint64_t)rp_active_after_stop, 0, "the timer is inactive after that stop");

  CHECK_U64(
      (uint64_t)rp_norepeat.fires, 2,
      "set_repeat(0) inside the callback keeps the re-arm already made, then stops repeating");
  CHECK_U64((uint64_t)(rp_norepeat.fires >= 2 ? rp_norepeat.active_in_cb[1] : -1), 0,
            "with repeat 0 the next callback sees its timer inactive");

  CHECK_U64((uint64_t)rp_oneshot.fires, 1, "a one-shot timer runs once");
  CHECK_U64((uint64_t)rp_oneshot.active_in_cb[0], 0,
            "a one-shot timer is inactive inside its callback");
  CHECK_U64(rp_oneshot.due_in_in_cb[0], 0, "get_due_in of a one-shot inside its callback is 0");

  CHECK_U64((uint64_t)rp_late.fires, 2, "a late repeating timer runs until stopped (2 runs)");
  CHECK_U64(
      rp_late.due_in_in_cb[0], 20,
      "a repeating timer that ran late is re-armed to uv_now + repeat, not deadline + repeat");
  check_intervals(&rp_late, 20, "after a late run the next one still waits repeat ms");
  tap_ok(rp_main.early + rp_start.early + rp_again.early + rp_stop.early + rp_norepeat.early +
                 rp_oneshot.early ==
             0,
         "no repeat or first run came before its deadline");
  /* started: 7 starts + re-arms (m 4, s 1, a 2, x 1, n 1, l 2) + start in s + again in a = 20.
   * stopped: m's stop, s's restart, a's again and stop, x's stop, l's stop = 6 (all active). */
  expect_counts(wheel, 0, 20, 6, 14, "after the repeat scenarios");
  wheel_close_wait(wheel, &loop, T);
  loop_finish(&loop, T);
  log_reset();
}

/* ---- get_due_in ---------------------------------------------------------- */

static probe_t due_probe;
static uint64_t due_seen_at_30, due_expected_at_30;

static uint64_t ms_until(uint64_t deadline) {
  uint64_t now = uv_now(g_loop);
  return deadline > now ? deadline - now : 0;
}

static void due_check_at_30(aux_t *a) {
  (void)a;
  due_seen_at_30 = uvtw_timer_get_due_in(&due_probe.timer);
  due_expected_at_30 = ms_until(due_probe.deadline);
}

static void test_get_due_in(void) {
  const char *T = "get_due_in";
  uv_loop_t loop;
  uvtw_wheel_t *wheel;
  aux_t at30;
  probe_t over;

  wheel = loop_and_wheel_open(&loop, NULL, T);
  if (!wheel)
    return;
  log_reset();
  probe_init(wheel, &due_probe, 'd', NULL);
  probe_init(wheel, &over, 'o', NULL);
  CHECK_U64(uvtw_timer_get_due_in(&due_probe.timer), 0, "get_due_in of an inactive timer is 0");
  probe_start(&due_probe, 100, 0);
  CHECK_U64(uvtw_timer_get_due_in(&due_probe.timer), 100,
            "get_due_in right after start is the timeout");
  aux_init(&loop, &at30, due_check_at_30);
  aux_start(&at30, 30);
  uv_run(&loop, UV_RUN_DEFAULT);
  CHECK_U64(due_seen_at_30, due_expected_at_30,
            "get_due_in counts down with uv_now() (deadline - now)");
  CHECK_U64((uint64_t)due_probe.fires, 1, "the timer ran");
  CHECK_U64(uvtw_timer_get_due_in(&due_probe.timer), 0, "get_due_in after a one-shot ran is 0");

  probe_start(&over, 5, 0);
  sleep_ms(20);
  uv_update_time(&loop);
  CHECK_U64(uvtw_timer_get_due_in(&over.timer), 0, "get_due_in of an overdue timer is 0");
  CHECK_I64(uvtw_wheel_next_due(wheel), 0, "next_due is 0 when a timer is overdue");
  uv_run(&loop, UV_RUN_DEFAULT);
  CHECK_U64((uint64_t)over.fires, 1, "the overdue timer runs");
  tap_ok(over.early == 0 && due_probe.early == 0, "neither ran before its deadline");
  close_handle(&at30.handle);
  wheel_close_wait(wheel, &loop, T);
  loop_finish(&loop, T);
  log_reset();
}

/* ---- Huge timeouts --------------------------------------------------------- */

static probe_t huge_a, huge_b, huge_r;
static int64_t huge_next_due_in_cb;
static int huge_active_at_stop, huge_stop_results;

static uvtw_wheel_t *huge_wheel;

static void huge_r_action_real(probe_t *p) {
  (void)p;
  huge_next_due_in_cb = uvtw_wheel_next_due(huge_wheel);
}

static void huge_stop_all(aux_t *a) {
  (void)a;
  huge_active_at_stop = uvtw_timer_is_active(&huge_a.timer) &&
                        uvtw_timer_is_active(&huge_b.timer) && uvtw_timer_is_active(&huge_r.timer);
  huge_stop_results = uvtw_timer_stop(&huge_a.timer) | uvtw_timer_stop(&huge_b.timer) |
                      uvtw_timer_stop(&huge_r.timer);
}

static void test_huge_timeouts(void) {
  const char *T = "huge timeouts";
  uv_loop_t loop;
  aux_t stopper, watch;
  uvtw_stats_t s;
  uint64_t far = (uint64_t)INT64_MAX + 1000;

  huge_wheel = loop_and_wheel_open(&loop, NULL, T);
  if (!huge_wheel)
    return;
  log_reset();
  probe_init(huge_wheel, &huge_a, 'A', NULL);
  probe_init(huge_wheel, &huge_b, 'B', NULL);
  probe_init(huge_wheel, &huge_r, 'r', huge_r_action_real);

  CHECK_ERR(uvtw_timer_start(&huge_a.timer, probe_cb, UINT64_MAX, 0), 0,
            "start with timeout UINT64_MAX (deadline overflows) returns 0");
  huge_a.deadline = UINT64_MAX;
  CHECK_U64((uint64_t)uvtw_timer_is_active(&huge_a.timer), 1, "a saturated timer is active");
  CHECK_I64(uvtw_wheel_next_due(huge_wheel), INT64_MAX,
            "next_due is INT64_MAX when only a saturated timer is pending");
  if (!tap_ok(uvtw_timer_get_due_in(&huge_a.timer) >= (uint64_t)INT64_MAX,
              "get_due_in of a saturated timer is huge (>= INT64_MAX)"))
    tap_diag("  got %" PRIu64, uvtw_timer_get_due_in(&huge_a.timer));
  CHECK_ERR(uvtw_timer_start(&huge_b.timer, probe_cb, far, 0), 0,
            "start with timeout INT64_MAX + 1000 returns 0");
  huge_b.deadline = UINT64_MAX;
  CHECK_I64(uvtw_wheel_next_due(huge_wheel), INT64_MAX,
            "next_due is INT64_MAX when the earliest entry is further away than that");
  CHECK_ERR(probe_start(&huge_r, 20, UINT64_MAX), 0, "start with a UINT64_MAX repeat returns 0");
  CHECK_I64(uvtw_wheel_next_due(huge_wheel), 20,
            "next_due is exact with a normal timer before the huge ones");

  aux_init(&loop, &stopper, huge_stop_all);
  aux_start(&stopper, 60);
  uv_run(&loop, UV_RUN_DEFAULT);
  CHECK_U64((uint64_t)huge_r.fires, 1, "a timer with a saturating repeat runs once");
  CHECK_U64((uint64_t)huge_r.active_in_cb[0], 1,
            "... and stays active inside its callback (re-armed, saturated)");
  CHECK_I64(huge_next_due_in_cb, INT64_MAX,
            "next_due is INT64_MAX once only saturated timers are left");
  CHECK_U64((uint64_t)(huge_a.fires + huge_b.fires), 0, "saturated timers never run");
  CHECK_U64((uint64_t)huge_active_at_stop, 1, "saturated timers are still active 60 ms later");
  CHECK_ERR(huge_stop_results, 0, "saturated timers are stoppable (stop returns 0)");
  tap_ok(!uvtw_timer_is_active(&huge_a.timer) && !uvtw_timer_is_active(&huge_b.timer) &&
             !uvtw_timer_is_active(&huge_r.timer),
         "stopped saturated timers are inactive");
  CHECK_I64(uvtw_wheel_next_due(huge_wheel), -1, "next_due is -1 after they were stopped");
  s = stats_of(huge_wheel);
  CHECK_U64(s.wakeups, 1, "saturated timers cost no wakeups (one wakeup, for the normal timer)");
  expect_counts(huge_wheel, 0, 4, 3, 1, "after saturated timers were stopped");

  /* Like a uv_timer_t with timeout UINT64_MAX, a referenced wheel holding
   * only a saturated timer keeps uv_run going; an unreferenced helper timer
   * runs then and stops it. */
  probe_start(&huge_a, UINT64_MAX, 0);
  aux_init(&loop, &watch, huge_stop_all);
  aux_start(&watch, 30);
  uv_unref((uv_handle_t *)&watch.handle);
  probe_start(&huge_b, UINT64_MAX - 1, 0);
  probe_start(&huge_r, UINT64_MAX, 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  CHECK_U64((uint64_t)watch.fires, 1,
            "a referenced wheel whose pending timers are saturated keeps the loop alive, like "
            "uv_timer_t");
  CHECK_U64((uint64_t)(huge_a.fires + huge_b.fires + huge_r.fires), 1,
            "saturated timers never ran (only the normal one, earlier)");
  if (!watch.fires) {
    uvtw_timer_stop(&huge_a.timer);
    uvtw_timer_stop(&huge_b.timer);
    uvtw_timer_stop(&huge_r.timer);
  }
  close_handle(&stopper.handle);
  close_handle(&watch.handle);
  wheel_close_wait(huge_wheel, &loop, T);
  loop_finish(&loop, T);
  log_reset();
}

/* ---- Callbacks that touch other timers due in the same pass -------------- */

static probe_t sp_a, sp_b, sp_c, sp_d, sp_e, sp_s, sp_f, sp_g, sp_w;
static int sp_stop_b, sp_active_b, sp_start_c, sp_start_d, sp_start_e, sp_stop_g;
static uint64_t sp_due_c;
static int sp_s_stop_result, sp_s_again_result, sp_s_active_after_again;

static void sp_a_action(probe_t *p) {
  (void)p;
  sp_stop_b = uvtw_timer_stop(&sp_b.timer); /* due in this pass: must not run */
  sp_active_b = uvtw_timer_is_active(&sp_b.timer);
  sp_start_c = probe_start(&sp_c, 30, 0); /* due in this pass: moves to later */
  sp_due_c = uvtw_timer_get_due_in(&sp_c.timer);
  sp_start_d = probe_start(&sp_d, 0, 0);    /* due in this pass, restarted as due */
  sp_start_e = probe_start(&sp_e, 0, 0);    /* new, already due */
  sp_stop_g = uvtw_timer_stop(&sp_g.timer); /* due later: must not run */
  sleep_ms(3);                              /* so W (1 ms after A) is due too when D and E run */
}

static void sp_s_action(probe_t *p) {
  if (p->fires == 1) {
    sp_s_stop_result = uvtw_timer_stop(&p->timer);
    probe_start(p, 10, 0);
  } else {
    sp_s_again_result = uvtw_timer_again(&p->timer);
    sp_s_active_after_again = uvtw_timer_is_active(&p->timer);
  }
}

static void test_callbacks_touch_same_pass(void) {
  const char *T = "same pass";
  uv_loop_t loop;
  uvtw_wheel_t *wheel;
  const char *expect_log;
  int w_in_first_pass;

  wheel = loop_and_wheel_open(&loop, NULL, T);
  if (!wheel)
    return;
  log_reset();
  probe_init(wheel, &sp_a, 'A', sp_a_action);
  probe_init(wheel, &sp_b, 'B', NULL);
  probe_init(wheel, &sp_c, 'C', NULL);
  probe_init(wheel, &sp_d, 'D', NULL);
  probe_init(wheel, &sp_e, 'E', NULL);
  probe_init(wheel, &sp_s, 'S', sp_s_action);
  probe_init(wheel, &sp_f, 'F', NULL);
  probe_init(wheel, &sp_g, 'G', NULL);
  probe_init(wheel, &sp_w, 'W', NULL);
  /* All due together, started in this order: A B C D S F; W and G a bit later. */
  probe_start(&sp_a, 20, 0);
  probe_start(&sp_b, 20, 0);
  probe_start(&sp_c, 20, 0);
  probe_start(&sp_d, 20, 0);
  probe_start(&sp_s, 20, 0);
  probe_start(&sp_f, 20, 0);
  probe_start(&sp_g, 25, 0);
  probe_start(&sp_w, 21, 0);
  uv_run(&loop, UV_RUN_DEFAULT);

  /* W is due 1 ms after A: normally in the next iteration, after the due
   * restarted D and E (deadline order); if the loop first woke late, in
   * A's own pass after F. */
  w_in_first_pass = sp_a.fires >= 1 && sp_a.now[0] >= sp_w.deadline;
  expect_log = w_in_first_pass ? "ASFWDESC" : "ASFDEWSC";
  if (!tap_ok(
          strcmp(g_log, expect_log) == 0,
          "callbacks ran in deadline then start order: A S F (pass 1), D E (next iteration), S, C; "
          "W where its deadline puts it"))
    tap_diag("  expected \"%s\", got \"%s\"", expect_log, g_log);
  CHECK_ERR(sp_stop_b, 0, "stopping a timer due in the same pass returns 0");
  CHECK_U64((uint64_t)sp_active_b, 0, "... and makes it inactive");
  CHECK_U64((uint64_t)sp_b.fires, 0,
            "a timer stopped by another callback of the same pass never runs");
  CHECK_U64((uint64_t)sp_g.fires, 0,
            "a timer stopped from a callback before its deadline never runs");
  CHECK_ERR(sp_stop_g, 0, "that stop returns 0");
  CHECK_ERR(sp_start_c, 0, "restarting a timer due in the same pass returns 0");
  CHECK_U64(sp_due_c, 30, "the restarted timer is due after its new timeout");
  CHECK_U64((uint64_t)sp_c.fires, 1, "a timer restarted later from the same pass runs once, later");
  if (!tap_ok(sp_c.fires >= 1 && sp_a.fires >= 1 && sp_c.now[0] >= sp_a.now[0] + 30,
              "... no earlier than its new deadline"))
    tap_diag("  expected uv_now >= %" PRIu64 ", got %" PRIu64, sp_a.now[0] + 30, sp_c.now[0]);
  CHECK_U64((uint64_t)sp_f.fires, 1, "the pass goes on after a callback touched other timers");
  CHECK_U64(sp_f.iter[0], sp_a.iter[0], "... in the same loop iteration");
  CHECK_U64((uint64_t)sp_d.fires, 1, "a timer due in this pass and restarted as due runs once");
  CHECK_U64(sp_d.iter[0], sp_a.iter[0] + 1, "... in the next loop iteration, not in the same pass");
  CHECK_ERR(sp_start_e, 0, "starting a timer from a callback returns 0");
  CHECK_U64((uint64_t)sp_e.fires, 1, "a timer started already due from a callback runs once");
  CHECK_U64(sp_e.iter[0], sp_a.iter[0] + 1, "... in the next loop iteration, not in the same pass");
  CHECK_U64((uint64_t)sp_s.fires, 2, "a one-shot that restarts itself in its callback runs again");
  CHECK_U64((uint64_t)sp_s.active_in_cb[0], 0, "... and was inactive on entry to its callback");
  CHECK_ERR(sp_s_stop_result, 0, "stop of itself inside its one-shot callback returns 0");
  if (!tap_ok(sp_s.fires >= 2 && sp_s.now[1] >= sp_s.now[0] + 10,
              "the self-restarted timer runs no earlier than its new deadline"))
    tap_diag("  expected uv_now >= %" PRIu64 ", got %" PRIu64, sp_s.now[0] + 10, sp_s.now[1]);
  CHECK_ERR(sp_s_again_result, 0, "again on itself with repeat 0 inside its callback returns 0");
  CHECK_U64((uint64_t)sp_s_active_after_again, 0, "... and leaves it inactive");
  CHECK_U64((uint64_t)sp_w.fires, 1, "a timer due 1 ms after the pass runs once");
  CHECK_U64(sp_w.iter[0], sp_a.iter[0] + !w_in_first_pass,
            "... in the first iteration in which it is due");
  tap_ok(sp_a.early + sp_c.early + sp_d.early + sp_e.early + sp_s.early + sp_f.early + sp_w.early ==
             0,
         "no callback of the same-pass scenario ran early");
  wheel_close_wait(wheel, &loop, T);
  loop_finish(&loop, T);
  log_reset();
}

/* ---- A timer restarting itself with timeout 0 cannot starve the loop ----- */

enum { SELF_MIN_RUNS = 200, SELF_MAX_RUNS = 100000, SELF_RECURSION_LIMIT = 50 };

static struct {
  uvtw_timer_t timer;
  uv_idle_t idle;
  uv_check_t check;
  uv_timer_t other;
  uint64_t fires, last_iter, idle_runs, check_runs, idle_at_last, check_at_last;
  uint64_t same_iteration, gaps, idle_not_between, check_not_between;
  int other_fired, active_when_other_fired, restart_failures;
} self0;

static void self0_idle_cb(uv_idle_t *h) {
  (void)h;
  self0.idle_runs++;
}

static void self0_check_cb(uv_check_t *h) {
  (void)h;
  self0.check_runs++;
}

static void self0_other_cb(uv_timer_t *h) {
  (void)h;
  self0.other_fired++;
  self0.active_when_other_fired = uvtw_timer_is_active(&self0.timer);
}

static void self0_cb(uvtw_timer_t *timer) {
  int done;
  self0.fires++;
  if (self0.fires > 1) {
    if (g_iter == self0.last_iter)
      self0.same_iteration++;
    else if (g_iter != self0.last_iter + 1)
      self0.gaps++;
    if (self0.idle_runs == self0.idle_at_last)
      self0.idle_not_between++;
    if (self0.check_runs == self0.check_at_last)
      self0.check_not_between++;
  }
  self0.last_iter = g_iter;
  self0.idle_at_last = self0.idle_runs;
  self0.check_at_last = self0.check_runs;
  done = (self0.fires >= SELF_MIN_RUNS && self0.other_fired) || self0.fires >= SELF_MAX_RUNS ||
         self0.same_iteration >= SELF_RECURSION_LIMIT;
  if (done) {
    uv_idle_stop(&self0.idle);
    uv_timer_stop(&self0.other);
    return;
  }
  if (uvtw_timer_start(timer, self0_cb, 0, 0) != 0)
    self0.restart_failures++;
}

static void test_self_restart_zero_does_not_starve(void) {
  const char *T = "self-restart with timeout 0";
  uv_loop_t loop;
  uvtw_wheel_t *wheel;

  wheel = loop_and_wheel_open(&loop, NULL, T);
  if (!wheel)
    return;
  memset(&self0, 0, sizeof self0);
  uvtw_timer_init(wheel, &self0.timer);
  uv_idle_init(&loop, &self0.idle);
  uv_idle_start(&self0.idle, self0_idle_cb);
  uv_check_init(&loop, &self0.check);
  uv_check_start(&self0.check, self0_check_cb);
  uv_unref((uv_handle_t *)&self0.check);
  uv_timer_init(&loop, &self0.other);
  uv_timer_start(&self0.other, self0_other_cb, 3, 0);
  uvtw_timer_start(&self0.timer, self0_cb, 0, 0);
  uv_run(&loop, UV_RUN_DEFAULT);

  CHECK_U64(self0.restart_failures, 0, "%s: every restart returned 0", T);
  CHECK_U64(self0.same_iteration, 0, "%s: never runs twice in one loop iteration (not recursively)",
            T);
  CHECK_U64(self0.idle_not_between + self0.check_not_between, 0,
            "%s: idle and check handles run between any two of its callbacks", T);
  CHECK_U64((uint64_t)self0.other_fired, 1, "%s: a uv_timer_t due meanwhile still runs", T);
  CHECK_U64((uint64_t)self0.active_when_other_fired, 1,
            "%s: ... while the wheel timer keeps restarting", T);
  CHECK_U64(self0.gaps, 0, "%s: each restart runs in the very next loop iteration", T);
  if (!tap_ok(self0.fires >= SELF_MIN_RUNS && self0.fires < SELF_MAX_RUNS,
              "%s: it kept running, once per iteration, until told to stop", T))
    tap_diag("  expected %d..%d runs, got %" PRIu64, SELF_MIN_RUNS, SELF_MAX_RUNS - 1, self0.fires);
  close_handle(&self0.idle);
  close_handle(&self0.check);
  close_handle(&self0.other);
  wheel_close_wait(wheel, &loop, T);
  loop_finish(&loop, T);
}

static int alone_runs;

static void alone_cb(uvtw_timer_t *timer) {
  if (++alone_runs < 100)
    uvtw_timer_start(timer, alone_cb, 0, 0);
}

/* With nothing else in the loop, the restarted timer alone keeps it alive. */
static void test_self_restart_zero_keeps_loop_alive(void) {
  const char *T = "self-restart with timeout 0, alone";
  uv_loop_t loop;
  uvtw_wheel_t *wheel;
  uvtw_timer_t timer;

  wheel = loop_and_wheel_open(&loop, NULL, T);
  if (!wheel)
    return;
  alone_runs = 0;
  uvtw_timer_init(wheel, &timer);
  uvtw_timer_start(&timer, alone_cb, 0, 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  CHECK_U64((uint64_t)alone_runs, 100,
            "%s: a referenced wheel keeps uv_run going while its timer restarts itself", T);
  uvtw_timer_stop(&timer);
  wheel_close_wait(wheel, &loop, T);
  loop_finish(&loop, T);
}

/* ---- Close ---------------------------------------------------------------- */

static void test_close_with_pending_timers(void) {
  const char *T = "close with pending timers";
  uv_loop_t loop;
  uvtw_wheel_t *wheel;
  probe_t p1, p2, p3, p4, fresh;
  close_rec_t rec, rec2;
  aux_t keep;
  uvtw_stats_t before, after;

  wheel = loop_and_wheel_open(&loop, NULL, T);
  if (!wheel)
    return;
  log_reset();
  probe_init(wheel, &p1, '1', NULL);
  probe_init(wheel, &p2, '2', NULL);
  probe_init(wheel, &p3, '3', NULL);
  probe_init(wheel, &p4, '4', NULL);
  probe_init(wheel, &fresh, 'f', NULL);
  probe_start(&p1, 10, 0);
  probe_start(&p2, 20, 5);
  probe_start(&p3, 1000, 0);
  probe_start(&p4, UINT64_MAX, 0);
  uvtw_timer_stop(&p3.timer);
  probe_start(&p3, 1000, 0);
  before = stats_of(wheel);

  memset(&rec, 0, sizeof rec);
  memset(&rec2, 0, sizeof rec2);
  rec.try_start = &fresh.timer;
  uvtw_wheel_close(wheel, on_wheel_closed, &rec);
  tap_ok(!uvtw_timer_is_active(&p1.timer) && !uvtw_timer_is_active(&p2.timer) &&
             !uvtw_timer_is_active(&p3.timer) && !uvtw_timer_is_active(&p4.timer),
         "uvtw_wheel_close makes every pending timer inactive at once");
  CHECK_U64(uvtw_timer_get_due_in(&p1.timer), 0, "a timer dropped by close has due_in 0");
  CHECK_I64(uvtw_wheel_next_due(wheel), -1, "after close nothing is pending (next_due -1)");
  CHECK_ERR(probe_start(&p1, 5, 0), UV_ECANCELED, "start on a closing wheel returns UV_ECANCELED");
  CHECK_U64((uint64_t)uvtw_timer_is_active(&p1.timer), 0, "... and leaves the timer inactive");
  CHECK_ERR(uvtw_timer_again(&p2.timer), UV_ECANCELED,
            "again on a closing wheel returns UV_ECANCELED");
  CHECK_ERR(uvtw_timer_stop(&p3.timer), 0, "stop of a dropped timer returns 0");
  uvtw_timer_init(wheel, &fresh.timer);
  CHECK_ERR(uvtw_timer_start(&fresh.timer, probe_cb, 1, 0), UV_ECANCELED,
            "start of a timer initialized on a closing wheel returns UV_ECANCELED");
  after = stats_of(wheel);
  CHECK_U64(after.active, 0, "stats.active is 0 after close");
  if (!tap_ok(after.stopped == before.stopped && after.started == before.started &&
                  after.fired == before.fired,
              "timers dropped by close count as neither stopped nor fired (nor started by failed "
              "starts)"))
    tap_diag("  expected started/stopped/fired %" PRIu64 "/%" PRIu64 "/%" PRIu64 ", got %" PRIu64
             "/%" PRIu64 "/%" PRIu64,
             before.started, before.stopped, before.fired, after.started, after.stopped,
             after.fired);
  uvtw_wheel_close(wheel, on_wheel_closed, &rec2); /* a second close is ignored */

  aux_init(&loop, &keep, NULL);
  aux_start(&keep, 40); /* run the loop past the short deadlines */
  uv_run(&loop, UV_RUN_DEFAULT);
  CHECK_U64((uint64_t)rec.calls, 1, "the close callback runs once");
  tap_ok(rec.wheel == wheel, "the close callback gets the wheel");
  CHECK_U64((uint64_t)rec2.calls, 0,
            "a second uvtw_wheel_close is ignored (its callback never runs)");
  CHECK_ERR(rec.start_result, UV_ECANCELED, "start inside the close callback returns UV_ECANCELED");
  CHECK_U64(rec.stats.active, 0, "stats read in the close callback: nothing active");
  if (!tap_ok(strcmp(g_log, "") == 0, "timers pending at close never run"))
    tap_diag("  expected no callbacks, got \"%s\"", g_log);
  close_handle(&keep.handle);
  loop_finish(&loop, T);
  log_reset();
}

static uvtw_wheel_t *cc_wheel;
static close_rec_t cc_rec;
static probe_t cc_a, cc_b, cc_c, cc_r, cc_x;
static int cc_start_x, cc_b_active, cc_again_r, cc_r_active;

static void cc_a_action(probe_t *p) {
  (void)p;
  uvtw_wheel_close(cc_wheel, on_wheel_closed, &cc_rec);
  cc_start_x = probe_start(&cc_x, 5, 0);
  cc_b_active = uvtw_timer_is_active(&cc_b.timer);
}

static void cc_r_action(probe_t *p) {
  uvtw_wheel_close(cc_wheel, on_wheel_closed, &cc_rec);
  cc_r_active = uvtw_timer_is_active(&p->timer);
  cc_again_r = uvtw_timer_again(&p->timer);
}

static void test_close_from_callback(void) {
  const char *T = "close from a callback";
  uv_loop_t loop;
  aux_t keep;

  /* A one-shot closes the wheel; B is due in the same pass, C later. */
  cc_wheel = loop_and_wheel_open(&loop, NULL, T);
  if (!cc_wheel)
    return;
  log_reset();
  memset(&cc_rec, 0, sizeof cc_rec);
  probe_init(cc_wheel, &cc_a, 'A', cc_a_action);
  probe_init(cc_wheel, &cc_b, 'B', NULL);
  probe_init(cc_wheel, &cc_c, 'C', NULL);
  probe_init(cc_wheel, &cc_x, 'X', NULL);
  probe_start(&cc_a, 10, 0);
  probe_start(&cc_b, 10, 0);
  probe_start(&cc_c, 30, 0);
  aux_init(&loop, &keep, NULL);
  aux_start(&keep, 60);
  uv_run(&loop, UV_RUN_DEFAULT);
  if (!tap_ok(strcmp(g_log, "A") == 0,
              "after a callback closes the wheel, no other timer runs (same pass or later)"))
    tap_diag("  expected \"A\", got \"%s\"", g_log);
  CHECK_U64((uint64_t)cc_b_active, 0,
            "a timer due in the same pass is inactive right after the close");
  CHECK_ERR(cc_start_x, UV_ECANCELED, "start inside the callback after close returns UV_ECANCELED");
  CHECK_U64((uint64_t)cc_rec.calls, 1, "closing from a callback: the close callback runs once");
  close_handle(&keep.handle);
  loop_finish(&loop, T);

  /* A repeating timer (already re-armed) closes the wheel in its callback. */
  cc_wheel = loop_and_wheel_open(&loop, NULL, T);
  if (!cc_wheel)
    return;
  log_reset();
  memset(&cc_rec, 0, sizeof cc_rec);
  probe_init(cc_wheel, &cc_r, 'R', cc_r_action);
  probe_start(&cc_r, 10, 10);
  aux_init(&loop, &keep, NULL);
  aux_start(&keep, 60);
  uv_run(&loop, UV_RUN_DEFAULT);
  CHECK_U64((uint64_t)cc_r.fires, 1,
            "a repeating timer that closes the wheel in its callback never runs again");
  CHECK_U64((uint64_t)cc_r.active_in_cb[0], 1, "(it was active in its callback before the close)");
  CHECK_U64((uint64_t)cc_r_active, 0,
            "the close makes the re-armed timer inactive inside its own callback");
  CHECK_ERR(cc_again_r, UV_ECANCELED, "again inside the callback after close returns UV_ECANCELED");
  CHECK_U64((uint64_t)cc_rec.calls, 1, "the close callback runs once");
  close_handle(&keep.handle);
  loop_finish(&loop, T);
  log_reset();

  /* Close with a NULL callback still closes both handles. */
  cc_wheel = loop_and_wheel_open(&loop, NULL, T);
  if (!cc_wheel)
    return;
  probe_init(cc_wheel, &cc_a, 'a', NULL);
  probe_start(&cc_a, 10, 0);
  uvtw_wheel_close(cc_wheel, NULL, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  CHECK_U64((uint64_t)cc_a.fires, 0, "close with a NULL callback: the pending timer never runs");
  loop_finish(&loop, "close with a NULL callback");
}

/* ---- Keeping the loop alive ---------------------------------------------- */

static aux_t lv_watch;
static probe_t lv_w;

static void lv_watch_fn(aux_t *a) {
  uv_stop(a->handle.loop);
}

static void lv_stop_w(aux_t *a) {
  (void)a;
  uvtw_timer_stop(&lv_w.timer);
}

static void lv_arm_watch(void) {
  lv_watch.fires = 0;
  uv_timer_start(&lv_watch.handle, aux_cb, 3000, 0);
}

static void test_loop_alive(void) {
  const char *T = "loop aliveness";
  uv_loop_t loop;
  uvtw_wheel_t *wheel;
  aux_t stopper, keep;
  uint64_t t0;

  wheel = loop_and_wheel_open(&loop, NULL, T);
  if (!wheel)
    return;
  log_reset();
  aux_init(&loop, &lv_watch, lv_watch_fn);
  uv_unref((uv_handle_t *)&lv_watch.handle);
  probe_init(wheel, &lv_w, 'w', NULL);

  lv_arm_watch();
  uv_run(&loop, UV_RUN_DEFAULT);
  CHECK_U64((uint64_t)lv_watch.fires, 0,
            "an empty referenced wheel does not keep uv_run(DEFAULT) from returning");

  uvtw_wheel_unref(wheel);
  uvtw_wheel_unref(wheel);
  probe_start(&lv_w, 100, 0);
  lv_arm_watch();
  uv_run(&loop, UV_RUN_DEFAULT);
  CHECK_U64(
      (uint64_t)(lv_w.fires + lv_watch.fires), 0,
      "an unreferenced wheel with a pending timer does not keep uv_run(DEFAULT) from returning");
  CHECK_U64((uint64_t)uvtw_timer_is_active(&lv_w.timer), 1, "... and the timer stays pending");

  uvtw_wheel_ref(wheel);
  lv_arm_watch();
  uv_run(&loop, UV_RUN_DEFAULT);
  CHECK_U64(
      (uint64_t)lv_w.fires, 1,
      "once referenced again (unref twice, ref once), the wheel keeps uv_run until the timer ran");
  CHECK_U64((uint64_t)lv_watch.fires, 0, "... and uv_run then returns by itself");
  tap_ok(lv_w.early == 0, "... not before its deadline");

  lv_w.fires = 0;
  t0 = uv_now(&loop);
  probe_start(&lv_w, 2000, 0);
  aux_init(&loop, &stopper, lv_stop_w);
  aux_start(&stopper, 10);
  lv_arm_watch();
  uv_run(&loop, UV_RUN_DEFAULT);
  if (!tap_ok(lv_w.fires == 0 && uv_now(&loop) - t0 < 2000 && lv_watch.fires == 0,
              "stopping the last pending timer lets uv_run return at once"))
    tap_diag("  expected return after ~10 ms with no callback, got %" PRIu64 " ms and %d callbacks",
             uv_now(&loop) - t0, lv_w.fires);

  uvtw_wheel_unref(wheel);
  probe_start(&lv_w, 20, 0);
  aux_init(&loop, &keep, NULL);
  aux_start(&keep, 60);
  lv_arm_watch();
  uv_run(&loop, UV_RUN_DEFAULT);
  CHECK_U64((uint64_t)lv_w.fires, 1,
            "an unreferenced wheel still runs its timers while the loop is alive");
  tap_ok(lv_w.early == 0, "... not before their deadline");
  uvtw_wheel_ref(wheel);

  close_handle(&stopper.handle);
  close_handle(&keep.handle);
  close_handle(&lv_watch.handle);
  wheel_close_wait(wheel, &loop, T);
  loop_finish(&loop, T);
  log_reset();
}

/* ---- Wakeups ----------------------------------------------------------- */

static probe_t wk_r;

static void wk_restart_later(aux_t *a) {
  (void)a;
  probe_start(&wk_r, 50, 0);
}

static void test_wakeups(void) {
  const char *T = "wakeups";
  uv_loop_t loop;
  uvtw_wheel_t *wheel;
  aux_t keep, restarter;
  probe_t w;
  uvtw_stats_t s;

  wheel = loop_and_wheel_open(&loop, NULL, T);
  if (!wheel)
    return;
  log_reset();
  aux_init(&loop, &keep, NULL);
  aux_start(&keep, 80);
  uv_run(&loop, UV_RUN_DEFAULT);
  s = stats_of(wheel);
  CHECK_U64(s.wakeups, 0, "an empty wheel makes no wakeups over 80 ms of loop time");

  probe_init(wheel, &w, 'w', NULL);
  probe_start(&w, 30, 0);
  uvtw_timer_stop(&w.timer);
  aux_start(&keep, 80);
  uv_run(&loop, UV_RUN_DEFAULT);
  s = stats_of(wheel);
  CHECK_U64(s.wakeups, 0, "a wheel whose only timer was stopped makes no wakeups");

  probe_start(&w, 20, 0);
  aux_start(&keep, 100);
  uv_run(&loop, UV_RUN_DEFAULT);
  s = stats_of(wheel);
  CHECK_U64((uint64_t)w.fires, 1, "one timer ran");
  CHECK_U64(s.wakeups, 1, "one timer costs one wakeup, and none after it ran");
  CHECK_U64(s.wasted_wakeups, 0, "... which was not wasted");

  probe_init(wheel, &wk_r, 'r', NULL);
  probe_start(&wk_r, 30, 0);
  aux_init(&loop, &restarter, wk_restart_later);
  aux_start(&restarter, 10);
  uv_run(&loop, UV_RUN_DEFAULT);
  s = stats_of(wheel);
  CHECK_U64((uint64_t)wk_r.fires, 1, "a timer pushed later by a restart runs once");
  if (!tap_ok(s.wakeups - s.wasted_wakeups == 2 && s.wasted_wakeups <= 1,
              "after a restart, wakeups - wasted_wakeups counts only wakeups that ran callbacks"))
    tap_diag("  expected wakeups - wasted == 2 with wasted <= 1, got %" PRIu64 " - %" PRIu64,
             s.wakeups, s.wasted_wakeups);
  tap_ok(w.early == 0 && wk_r.early == 0, "none of them ran early");
  close_handle(&keep.handle);
  close_handle(&restarter.handle);
  wheel_close_wait(wheel, &loop, T);
  loop_finish(&loop, T);
  log_reset();
}

enum { LEVEL_TIMERS = 400 };

/* Timeouts from 1 ms to ~1.1 s cross several level boundaries of a 64-slot
 * wheel; moving them between levels must not cost wakeups of its own. */
static void test_no_wasted_wakeups_across_levels(void) {
  const char *T = "no wasted wakeups across levels";
  uv_loop_t loop;
  uvtw_wheel_t *wheel;
  uvtw_stats_t s;

  wheel = loop_and_wheel_open(&loop, NULL, T);
  if (!wheel)
    return;
  eq_reset(&loop, wheel, LEVEL_TIMERS);
  for (size_t i = 0; i < LEVEL_TIMERS; i++) {
    pair_t *p = eq_new_pair();
    uint64_t kind = rng_below(4);
    uint64_t timeout = kind == 0   ? 1 + rng_below(64)
                       : kind == 1 ? 64 * (1 + rng_below(16)) + rng_below(3)
                                   : 1 + rng_below(1100);
    eq_start(p, timeout);
  }
  uv_run(&loop, UV_RUN_DEFAULT);
  eq_verify(T);
  s = eq_check_wakeups(wheel, T, "at most one wakeup per distinct deadline (cascades cost none)");
  tap_diag("%s: %" PRIu64 " wakeups for %zu deadlines, %" PRIu64 " cascaded", T, s.wakeups,
           eq_distinct_deadlines(), s.cascaded);
  expect_counts(wheel, 0, LEVEL_TIMERS, 0, LEVEL_TIMERS, "after timers across levels ran");
  eq_finish(wheel, &loop, T);
}

/* ---- Stats counters and late_max_ms --------------------------------------- */

static void test_stats(void) {
  const char *T = "stats";
  uv_loop_t loop;
  uvtw_wheel_t *wheel;
  probe_t a, b, c, l;
  uvtw_stats_t s;
  uint64_t late_l, late_a;

  wheel = loop_and_wheel_open(&loop, NULL, T);
  if (!wheel)
    return;
  log_reset();
  probe_init(wheel, &a, 'a', NULL);
  probe_init(wheel, &b, 'b', NULL);
  probe_init(wheel, &c, 'c', NULL);
  probe_init(wheel, &l, 'l', NULL);
  expect_counts(wheel, 0, 0, 0, 0, "of a new wheel");
  probe_start(&a, 50, 0);
  expect_counts(wheel, 1, 1, 0, 0, "after one start");
  probe_start(&b, 60, 0);
  expect_counts(wheel, 2, 2, 0, 0, "after two starts");
  probe_start(&a, 70, 0);
  expect_counts(wheel, 2, 3, 1, 0, "after a restart (counts one start and one stop)");
  uvtw_timer_stop(&b.timer);
  expect_counts(wheel, 1, 3, 2, 0, "after a stop");
  uvtw_timer_stop(&b.timer);
  expect_counts(wheel, 1, 3, 2, 0, "after a stop of an inactive timer (not counted)");
  uvtw_timer_start(&b.timer, NULL, 10, 0);
  uvtw_timer_again(&c.timer);
  expect_counts(wheel, 1, 3, 2, 0, "after a failed start and a failed again (not counted)");
  probe_start(&l, 5, 0);
  expect_counts(wheel, 2, 4, 2, 0, "after a fourth start");
  sleep_ms(30); /* l will be ~25 ms late */
  uv_run(&loop, UV_RUN_DEFAULT);
  s = stats_of(wheel);
  expect_counts(wheel, 0, 4, 2, 2, "after both timers ran");
  late_l = l.fires ? l.now[0] - l.deadline : 0;
  late_a = a.fires ? a.now[0] - a.deadline : 0;
  if (!tap_ok(l.fires == 1 && a.fires == 1 && l.early == 0 && a.early == 0,
              "%s: both ran once, on time or late", T))
    tap_diag("  got %d and %d runs, %d and %d early", l.fires, a.fires, l.early, a.early);
  CHECK_U64(s.late_max_ms, late_l > late_a ? late_l : late_a,
            "stats.late_max_ms is the largest uv_now() - deadline seen at a callback");
  if (!tap_ok(late_l >= 20, "%s: the blocked loop made the timer late (test precondition)", T))
    tap_diag("  expected >= 20 ms late, got %" PRIu64, late_l);
  /* A restart and a stop happened before the loop ran, so up to two wakeups
   * may be wasted (armed for entries that were stopped); the two callbacks
   * need one or two wakeups of their own. */
  if (!tap_ok(
          s.wakeups - s.wasted_wakeups >= 1 && s.wakeups - s.wasted_wakeups <= 2 &&
              s.wasted_wakeups <= 2,
          "stats.wakeups counts the wheel's timer firings (1..2 that ran callbacks, <= 2 wasted)"))
    tap_diag("  got %" PRIu64 " wakeups, %" PRIu64 " wasted", s.wakeups, s.wasted_wakeups);
  wheel_close_wait(wheel, &loop, T);
  loop_finish(&loop, T);
  log_reset();
}

/* ---- next_due -------------------------------------------------------------- */

static uvtw_wheel_t *nd_wheel;
static probe_t nd_x, nd_y, nd_z;
static int64_t nd_after_x, nd_after_y;
static uint64_t nd_expect_after_x, nd_expect_after_y;

static void nd_x_action(probe_t *p) {
  (void)p;
  nd_after_x = uvtw_wheel_next_due(nd_wheel);
  nd_expect_after_x = ms_until(nd_y.deadline);
}

static void nd_y_action(probe_t *p) {
  (void)p;
  nd_after_y = uvtw_wheel_next_due(nd_wheel);
  nd_expect_after_y = ms_until(nd_z.deadline);
  uvtw_timer_stop(&nd_z.timer);
}

enum { ND_SLOT_TIMERS = 64 };

static void test_next_due(void) {
  const char *T = "next_due";
  uv_loop_t loop;
  probe_t a, b, o;
  uvtw_timer_t *slot;
  aux_t keep;
  size_t wrong = 0;

  nd_wheel = loop_and_wheel_open(&loop, NULL, T);
  if (!nd_wheel)
    return;
  log_reset();
  probe_init(nd_wheel, &a, 'a', NULL);
  probe_init(nd_wheel, &b, 'b', NULL);
  probe_init(nd_wheel, &o, 'o', NULL);
  CHECK_I64(uvtw_wheel_next_due(nd_wheel), -1, "next_due of an empty wheel is -1");
  probe_start(&a, 100, 0);
  CHECK_I64(uvtw_wheel_next_due(nd_wheel), 100, "next_due is the only timer's timeout");
  probe_start(&b, 30, 0);
  CHECK_I64(uvtw_wheel_next_due(nd_wheel), 30, "next_due follows an earlier timer");
  uvtw_timer_stop(&b.timer);
  CHECK_I64(uvtw_wheel_next_due(nd_wheel), 100,
            "next_due is exact after the earliest timer was stopped");
  probe_start(&a, 50, 0);
  CHECK_I64(uvtw_wheel_next_due(nd_wheel), 50, "next_due follows a restart");
  uvtw_timer_stop(&a.timer);
  CHECK_I64(uvtw_wheel_next_due(nd_wheel), -1, "next_due is -1 after the last timer was stopped");

  /* Many deadlines close together (sharing coarse slots), stopped earliest first. */
  slot = calloc(ND_SLOT_TIMERS, sizeof *slot);
  if (!slot) {
    printf("Bail out! out of memory\n");
    exit(1);
  }
  for (int i = 0; i < ND_SLOT_TIMERS; i++) {
    uvtw_timer_init(nd_wheel, &slot[i]);
    uvtw_timer_start(&slot[i], noop_timer_cb, 200 + (uint64_t)i * 3, 0);
  }
  for (int i = 0; i < ND_SLOT_TIMERS; i++) {
    int64_t expect = i + 1 < ND_SLOT_TIMERS ? 200 + (int64_t)(i + 1) * 3 : -1;
    int64_t got;
    uvtw_timer_stop(&slot[i]);
    got = uvtw_wheel_next_due(nd_wheel);
    if (got != expect && wrong++ < 3)
      tap_diag("  after stopping the timer at %d ms: expected %" PRId64 ", got %" PRId64,
               200 + i * 3, expect, got);
  }
  CHECK_U64(wrong, 0, "next_due stays exact while nearby deadlines are stopped earliest first");
  free(slot);

  probe_start(&a, 5000, 0);
  CHECK_I64(uvtw_wheel_next_due(nd_wheel), 5000, "next_due is exact for a deadline 5 s away");
  probe_start(&b, 300000, 0);
  CHECK_I64(uvtw_wheel_next_due(nd_wheel), 5000, "a later deadline does not change it");
  probe_start(&o, (uint64_t)1 << 40, 0);
  uvtw_timer_stop(&a.timer);
  CHECK_I64(uvtw_wheel_next_due(nd_wheel), 300000, "next_due is exact for a deadline 5 min away");
  uvtw_timer_stop(&b.timer);
  CHECK_I64(uvtw_wheel_next_due(nd_wheel), (int64_t)1 << 40,
            "next_due is exact for a deadline 2^40 ms away");
  uvtw_timer_stop(&o.timer);
  CHECK_I64(uvtw_wheel_next_due(nd_wheel), -1, "next_due is -1 when all were stopped");

  probe_start(&o, 5, 0);
  sleep_ms(20);
  uv_update_time(&loop);
  CHECK_I64(uvtw_wheel_next_due(nd_wheel), 0, "next_due is 0 when a timer is overdue");
  uvtw_timer_stop(&o.timer);

  /* The loop clock moves on while the wheel is idle; then deadlines count from the new now. */
  aux_init(&loop, &keep, NULL);
  aux_start(&keep, 150);
  uv_run(&loop, UV_RUN_DEFAULT);
  probe_init(nd_wheel, &nd_x, 'x', nd_x_action);
  probe_init(nd_wheel, &nd_y, 'y', nd_y_action);
  probe_init(nd_wheel, &nd_z, 'z', NULL);
  probe_start(&nd_z, 5000, 0);
  probe_start(&nd_y, 70, 0);
  probe_start(&nd_x, 10, 0);
  CHECK_I64(uvtw_wheel_next_due(nd_wheel), 10,
            "after the wheel was idle while the clock moved on, next_due is exact");
  uv_run(&loop, UV_RUN_DEFAULT);
  if (!tap_ok(strcmp(g_log, "xy") == 0 && nd_x.early == 0 && nd_y.early == 0,
              "timers started after an idle stretch run in order and not early"))
    tap_diag("  expected \"xy\" with none early, got \"%s\"", g_log);
  CHECK_I64(nd_after_x, (int64_t)nd_expect_after_x,
            "next_due inside a callback is exact (next timer)");
  CHECK_I64(nd_after_y, (int64_t)nd_expect_after_y,
            "next_due inside a callback is exact (a far timer)");
  CHECK_I64(uvtw_wheel_next_due(nd_wheel), -1,
            "next_due is -1 after the last timer ran or was stopped");
  close_handle(&keep.handle);
  wheel_close_wait(nd_wheel, &loop, T);
  loop_finish(&loop, T);
  log_reset();
}

/* ---- tick_ms > 1 ------------------------------------------------------------ */

enum { TICK = 16, TICK_PROBES = 14 };

static uint64_t round_up(uint64_t v, uint64_t tick) {
  return (v + tick - 1) / tick * tick;
}

static void tick_repeat_action(probe_t *p) {
  if (p->fires == 3)
    uvtw_timer_stop(&p->timer);
}

static void test_tick(void) {
  const char *T = "tick_ms 16";
  uv_loop_t loop;
  uvtw_wheel_t *wheel;
  uvtw_options_t opts = {TICK, 0};
  probe_t p[TICK_PROBES], rep;
  uint64_t timeouts[TICK_PROBES];
  uint64_t want[TICK_PROBES];
  uint64_t now, min_want = UINT64_MAX, to_multiple, bucket_top;
  size_t bad_due = 0, bad_fire = 0, bad_order = 0, pos[TICK_PROBES];
  int n = 0, ok_rep = 1;

  wheel = loop_and_wheel_open(&loop, &opts, T);
  if (!wheel)
    return;
  log_reset();
  now = uv_now(&loop);
  to_multiple = round_up(now, TICK) - now;    /* 0 if now is on a multiple */
  bucket_top = round_up(now + 1, TICK) - now; /* timeouts 1..bucket_top share a deadline */
  {
    /* The first two share a rounded deadline although the second one's timeout is smaller:
     * FIFO says the first runs first. */
    const uint64_t list[TICK_PROBES] = {
        bucket_top, 1, 0, 5, 15, 16, 17, 31, 33, 47, to_multiple, to_multiple + TICK, 100, 200};
    memcpy(timeouts, list, sizeof list);
  }
  for (n = 0; n < TICK_PROBES; n++) {
    probe_init(wheel, &p[n], (char)('a' + n), NULL);
    want[n] = round_up(now + timeouts[n], TICK);
    probe_start(&p[n], timeouts[n], 0);
    p[n].deadline = want[n];
    if (uvtw_timer_get_due_in(&p[n].timer) != want[n] - now && bad_due++ < 5)
      tap_diag("  timeout %" PRIu64 " at uv_now %" PRIu64 ": expected due_in %" PRIu64
               ", got %" PRIu64,
               timeouts[n], now, want[n] - now, uvtw_timer_get_due_in(&p[n].timer));
    if (want[n] < min_want)
      min_want = want[n];
  }
  CHECK_U64(
      bad_due, 0,
      "%s: deadlines round up to a multiple of tick_ms of uv_now() (get_due_in), multiples stay",
      T);
  CHECK_I64(uvtw_wheel_next_due(wheel), (int64_t)(min_want - now),
            "%s: next_due is the rounded earliest deadline", T);
  probe_init(wheel, &rep, 'R', tick_repeat_action);
  probe_start(&rep, 3, 5);
  rep.deadline = round_up(now + 3, TICK);
  uv_run(&loop, UV_RUN_DEFAULT);

  for (int i = 0; i < TICK_PROBES; i++) {
    if ((p[i].fires != 1 || p[i].early) && bad_fire++ < 5)
      tap_diag("  timeout %" PRIu64 ": ran %d times, first at uv_now %" PRIu64
               ", rounded deadline %" PRIu64,
               timeouts[i], p[i].fires, p[i].now[0], want[i]);
  }
  CHECK_U64(bad_fire, 0, "%s: each timer ran once, never before its rounded deadline", T);
  /* Order: by rounded deadline, then start order. */
  for (int i = 0; i < TICK_PROBES; i++) {
    const char *at = strchr(g_log, 'a' + i);
    pos[i] = at ? (size_t)(at - g_log) : SIZE_MAX;
  }
  for (int i = 0; i < TICK_PROBES; i++)
    for (int j = 0; j < TICK_PROBES; j++)
      if ((want[i] < want[j] || (want[i] == want[j] && i < j)) && pos[i] > pos[j] &&
          bad_order++ < 3)
        tap_diag("  timer %c (deadline %" PRIu64 ") ran after %c (deadline %" PRIu64 ")", 'a' + i,
                 want[i], 'a' + j, want[j]);
  CHECK_U64(bad_order, 0,
            "%s: callbacks run in rounded-deadline order, equal rounded deadlines FIFO", T);

  CHECK_U64((uint64_t)rep.fires, 3, "%s: a repeating timer runs until stopped", T);
  for (int k = 0; k < rep.fires && k < PROBE_FIRES_KEPT; k++) {
    uint64_t expect_due = round_up(rep.now[k] + 5, TICK) - rep.now[k];
    if (rep.due_in_in_cb[k] != expect_due) {
      ok_rep = 0;
      tap_diag("  run %d at %" PRIu64 ": expected due_in %" PRIu64 ", got %" PRIu64, k + 1,
               rep.now[k], expect_due, rep.due_in_in_cb[k]);
    }
    if (k > 0 && rep.now[k] < round_up(rep.now[k - 1] + 5, TICK)) {
      ok_rep = 0;
      tap_diag("  run %d at %" PRIu64 ", before the rounded re-arm %" PRIu64, k + 1, rep.now[k],
               round_up(rep.now[k - 1] + 5, TICK));
    }
  }
  tap_ok(ok_rep && rep.early == 0,
         "%s: re-arms round up too (uv_now + repeat, to the tick) and never run early", T);
  wheel_close_wait(wheel, &loop, T);
  loop_finish(&loop, T);
  log_reset();

  /* tick_ms 0 means 1 ms, exact. */
  loop_open(&loop);
  opts.tick_ms = 0;
  wheel = wheel_open(&loop, &opts, "tick_ms 0");
  if (!wheel) {
    loop_finish(&loop, "tick_ms 0");
    return;
  }
  probe_init(wheel, &rep, 'r', NULL);
  probe_start(&rep, 7, 0);
  CHECK_U64(uvtw_timer_get_due_in(&rep.timer), 7, "tick_ms 0: deadlines are exact (1 ms ticks)");
  CHECK_I64(uvtw_wheel_next_due(wheel), 7, "tick_ms 0: next_due is exact");
  uv_run(&loop, UV_RUN_DEFAULT);
  tap_ok(rep.fires == 1 && rep.early == 0, "tick_ms 0: the timer runs once, not early");
  wheel_close_wait(wheel, &loop, "tick_ms 0");
  loop_finish(&loop, "tick_ms 0");
  log_reset();
}

/* ---- Inactive timers hold nothing ------------------------------------------ */

static probe_t *fr_b;
static int fr_b_runs, fr_stop_b;

static void fr_b_cb(uvtw_timer_t *timer) {
  (void)timer; /* its memory may be gone: touch nothing */
  fr_b_runs++;
}

static void fr_a_action(probe_t *p) {
  (void)p;
  fr_stop_b = uvtw_timer_stop(&fr_b->timer);
  memset(fr_b, 0xA5, sizeof *fr_b);
  free(fr_b);
  fr_b = NULL;
}

static void test_inactive_timer_memory(void) {
  const char *T = "inactive timers hold nothing";
  uv_loop_t loop;
  uvtw_wheel_t *w1, *w2;
  probe_t a, e, *c, *d;

  loop_open(&loop);
  log_reset();
  w1 = wheel_open(&loop, NULL, T);
  w2 = wheel_open(&loop, NULL, T);
  if (!w1 || !w2) {
    if (w1)
      wheel_close_wait(w1, &loop, T);
    if (w2)
      wheel_close_wait(w2, &loop, T);
    loop_finish(&loop, T);
    return;
  }
  fr_b_runs = 0;
  probe_init(w1, &a, 'a', fr_a_action);
  fr_b = malloc(sizeof *fr_b);
  c = malloc(sizeof *c);
  if (!fr_b || !c) {
    printf("Bail out! out of memory\n");
    exit(1);
  }
  probe_init(w1, fr_b, 'b', NULL);
  probe_start(&a, 10, 0);
  uvtw_timer_start(&fr_b->timer, fr_b_cb, 10, 0); /* same deadline, runs after a */

  probe_init(w1, c, 'c', NULL);
  probe_start(c, 5, 0);
  uvtw_timer_stop(&c->timer);
  memset(c, 0x5A, sizeof *c);
  free(c);
  d = malloc(sizeof *d);
  if (!d) {
    printf("Bail out! out of memory\n");
    exit(1);
  }
  probe_init(w1, d, 'd', NULL);
  probe_start(d, 15, 0);

  probe_init(w1, &e, 'e', NULL);
  probe_start(&e, 30, 0);
  uvtw_timer_stop(&e.timer);
  uvtw_timer_init(w2, &e.timer); /* reuse the stopped timer on another wheel */
  probe_start(&e, 20, 0);

  uv_run(&loop, UV_RUN_DEFAULT);
  CHECK_ERR(fr_stop_b, 0, "stopping a timer due in the same pass from another callback returns 0");
  CHECK_U64((uint64_t)fr_b_runs, 0,
            "a timer stopped and freed by another callback of the same pass never runs");
  CHECK_U64((uint64_t)a.fires, 1, "the callback that freed it ran once");
  CHECK_U64((uint64_t)d->fires, 1, "a timer in memory of a freed stopped timer runs normally");
  CHECK_U64((uint64_t)e.fires, 1, "a stopped timer re-initialized on another wheel runs there");
  expect_counts(w1, 0, 5, 3, 2, "of the first wheel (a b c d e started; b c e stopped; a d ran)");
  expect_counts(w2, 0, 1, 0, 1, "of the second wheel (e started and ran)");
  if (!tap_ok(strcmp(g_log, "ade") == 0, "the remaining timers ran in deadline order"))
    tap_diag("  expected \"ade\", got \"%s\"", g_log);
  free(d);
  wheel_close_wait(w1, &loop, T);
  wheel_close_wait(w2, &loop, T);
  loop_finish(&loop, T);
  log_reset();
}

/* A pass that leaves an entry due for the next iteration, followed in the
 * same iteration (before the poll phase) by a start of a much later timer:
 * the due entry must still run in the next iteration, not at the later
 * timer's deadline. */
typedef struct {
  uvtw_timer_t due;
  uvtw_timer_t later;
  uv_prepare_t prepare;
  int due_runs;
  uint64_t due_iter[2];
  int later_starts;
} kick_case_t;

static kick_case_t g_kick;

static void kick_due_cb(uvtw_timer_t *timer) {
  g_kick.due_iter[g_kick.due_runs < 2 ? g_kick.due_runs : 1] = g_iter;
  if (++g_kick.due_runs == 1)
    uvtw_timer_start(timer, kick_due_cb, 0, 0); /* due again: next iteration */
}

static void kick_prepare_cb(uv_prepare_t *handle) {
  /* Runs after the timer phase and before poll: between the pass and the
   * wheel's own async callback. */
  if (g_kick.due_runs == 1 && g_kick.later_starts == 0) {
    g_kick.later_starts++;
    uvtw_timer_start(&g_kick.later, noop_timer_cb, 1000, 0);
  }
  if (g_kick.due_runs >= 2)
    uv_prepare_stop(handle);
}

static void test_due_entry_not_delayed_by_later_start(void) {
  const char *T = "due entry not delayed by a later start";
  uv_loop_t loop;
  uvtw_wheel_t *wheel;

  wheel = loop_and_wheel_open(&loop, NULL, T);
  if (!wheel)
    return;
  memset(&g_kick, 0, sizeof g_kick);
  uvtw_timer_init(wheel, &g_kick.due);
  uvtw_timer_init(wheel, &g_kick.later);
  uv_prepare_init(&loop, &g_kick.prepare);
  uv_prepare_start(&g_kick.prepare, kick_prepare_cb);
  uvtw_timer_start(&g_kick.due, kick_due_cb, 5, 0);
  uint64_t t0 = uv_now(&loop);
  while (g_kick.due_runs < 2 && uv_now(&loop) - t0 < 3000 && g_watchdog_fired == 0)
    uv_run(&loop, UV_RUN_ONCE);
  uint64_t waited = uv_now(&loop) - t0;
  if (!tap_ok(g_kick.due_runs == 2 && g_kick.later_starts == 1 && waited < 500,
              "%s: a timer restarted as due inside its callback runs again promptly even "
              "when a 1000 ms timer is started before the poll phase",
              T))
    tap_diag("  expected 2 runs within 500 ms, got %d runs after %" PRIu64 " ms (later starts %d)",
             g_kick.due_runs, waited, g_kick.later_starts);
  if (!tap_ok(g_kick.due_runs == 2 && g_kick.due_iter[1] == g_kick.due_iter[0] + 1,
              "%s: it runs in the very next loop iteration", T))
    tap_diag("  expected iteration %" PRIu64 ", got %" PRIu64, g_kick.due_iter[0] + 1,
             g_kick.due_iter[1]);
  uvtw_timer_stop(&g_kick.later);
  close_handle(&g_kick.prepare);
  wheel_close_wait(wheel, &loop, T);
  loop_finish(&loop, T);
}

/* Equal deadlines run in the order of the last (re)start, across the
 * batches in which restarts are applied (64 at a time): 300 timers, first
 * started in index order, are restarted in a shuffled order to one equal
 * deadline; some are stopped meanwhile, some restarted twice; fresh starts
 * to that deadline come after. */
enum { RO_N = 300 };
static uvtw_timer_t ro_timers[RO_N];
static int ro_order[RO_N + 8], ro_fired;

static void ro_cb(uvtw_timer_t *timer) {
  if (ro_fired < RO_N + 8)
    ro_order[ro_fired] = (int)(timer - ro_timers);
  ro_fired++;
}

/* Checks that timers fired as `expect` says (n of them, ids). */
static void check_fire_order(const char *T, const char *what, const int *got, int n_got,
                             const int *expect, int n_expect) {
  CHECK_U64((uint64_t)n_got, (uint64_t)n_expect, "%s: every timer still started ran once", T);
  int first_bad = -1;
  for (int k = 0; k < n_expect && k < n_got; k++)
    if (got[k] != expect[k]) {
      first_bad = k;
      break;
    }
  if (!tap_ok(first_bad < 0, "%s: %s", T, what))
    tap_diag("  first difference at position %d: expected timer %d, got %d", first_bad,
             expect[first_bad], got[first_bad]);
}

static void test_restart_order_equal_deadlines(void) {
  const char *T = "restart order";
  uv_loop_t loop;
  uvtw_wheel_t *wheel;
  int expect[RO_N], n_expect = 0, perm[RO_N];
  bool stopped[RO_N] = {false};

  wheel = loop_and_wheel_open(&loop, NULL, T);
  if (!wheel)
    return;
  ro_fired = 0;
  for (int i = 0; i < RO_N; i++) {
    perm[i] = i;
    uvtw_timer_init(wheel, &ro_timers[i]);
  }
  /* The last 20 are started only at the end, to the same deadline. */
  for (int i = 0; i < RO_N - 20; i++)
    uvtw_timer_start(&ro_timers[i], ro_cb, 30, 0);
  uint32_t seed = 12345;
  for (int i = RO_N - 21; i > 0; i--) { /* Fisher-Yates over the first 280 */
    seed = seed * 1103515245u + 12345u;
    int j = (int)((seed >> 8) % (uint32_t)(i + 1));
    int tmp = perm[i];
    perm[i] = perm[j];
    perm[j] = tmp;
  }
  uv_update_time(&loop);
  for (int k = 0; k < RO_N - 20; k++) {
    int i = perm[k];
    uvtw_timer_start(&ro_timers[i], ro_cb, 60, 0); /* to one equal deadline */
    if (k % 7 == 3) { /* stop an earlier-restarted one: its record must go */
      int victim = perm[k / 2];
      if (!stopped[victim]) {
        uvtw_timer_stop(&ro_timers[victim]);
        stopped[victim] = true;
      }
    }
  }
  for (int k = 0; k < RO_N - 20; k += 9) { /* restarted twice: moves to the end */
    int i = perm[k];
    if (!stopped[i])
      uvtw_timer_start(&ro_timers[i], ro_cb, 60, 0);
  }
  for (int i = RO_N - 20; i < RO_N; i++) /* fresh starts, after every restart */
    uvtw_timer_start(&ro_timers[i], ro_cb, 60, 0);
  /* The expected order: first restarts (minus the restarted-twice and the
   * stopped), then the second restarts, then the fresh starts. */
  for (int k = 0; k < RO_N - 20; k++)
    if (!stopped[perm[k]] && k % 9 != 0)
      expect[n_expect++] = perm[k];
  for (int k = 0; k < RO_N - 20; k += 9)
    if (!stopped[perm[k]])
      expect[n_expect++] = perm[k];
  for (int i = RO_N - 20; i < RO_N; i++)
    expect[n_expect++] = i;
  uv_run(&loop, UV_RUN_DEFAULT);
  check_fire_order(T, "equal deadlines ran in the order of their last start", ro_order,
                   ro_fired < RO_N + 8 ? ro_fired : RO_N + 8, expect, n_expect);
  wheel_close_wait(wheel, &loop, T);
  loop_finish(&loop, T);
}

/* Timers of two wheels on one loop, operated on in random interleaving:
 * each operation must reach its own timer's wheel (the library remembers
 * the last wheel used on the thread, and must notice every switch). */
enum { TW_TIMERS = 200, TW_OPS = 4000 };
static int tw_fires[2][TW_TIMERS];
static uvtw_timer_t tw_timer[2][TW_TIMERS];

static void tw_cb(uvtw_timer_t *timer) {
  int which = timer >= tw_timer[1] && timer < tw_timer[1] + TW_TIMERS;
  tw_fires[which][timer - tw_timer[which]]++;
}

static void test_two_wheels_interleaved(void) {
  const char *T = "two wheels, operations interleaved";
  uv_loop_t loop;
  uvtw_wheel_t *w[2];
  bool active[2][TW_TIMERS] = {{false}};
  uint64_t started[2] = {0}, stopped[2] = {0}, n_active[2] = {0};
  int bad_returns = 0;

  loop_open(&loop);
  w[0] = wheel_open(&loop, NULL, T);
  w[1] = wheel_open(&loop, NULL, T);
  if (!w[0] || !w[1]) {
    for (int k = 0; k < 2; k++)
      if (w[k])
        wheel_close_wait(w[k], &loop, T);
    loop_finish(&loop, T);
    return;
  }
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < TW_TIMERS; i++) {
      uvtw_timer_init(w[k], &tw_timer[k][i]);
      tw_fires[k][i] = 0;
    }
  for (int op = 0; op < TW_OPS; op++) {
    int k = (int)rng_below(2), i = (int)rng_below(TW_TIMERS);
    if (rng_below(3) == 0) {
      bad_returns += uvtw_timer_stop(&tw_timer[k][i]) != 0;
      if (active[k][i]) {
        stopped[k]++;
        n_active[k]--;
      }
      active[k][i] = false;
    } else {
      uint64_t timeout = 1 + rng_below(45); /* short: what is tested is the routing */
      bad_returns += uvtw_timer_start(&tw_timer[k][i], tw_cb, timeout, 0) != 0;
      started[k]++;
      if (active[k][i])
        stopped[k]++; /* a restart counts one stop */
      else
        n_active[k]++;
      active[k][i] = true;
    }
  }
  CHECK_U64((uint64_t)bad_returns, 0, "every start and stop on either wheel returned 0");
  for (int k = 0; k < 2; k++) {
    uint64_t linked = 0;
    for (int i = 0; i < TW_TIMERS; i++)
      linked += uvtw_timer_is_active(&tw_timer[k][i]) == (active[k][i] ? 1 : 0);
    CHECK_U64(linked, TW_TIMERS, k == 0 ? "the first wheel's timers are active exactly as started"
                                        : "the second wheel's timers are active exactly as started");
    expect_counts(w[k], n_active[k], started[k], stopped[k], 0,
                  k == 0 ? "of the first wheel after the interleaved operations"
                         : "of the second wheel after the interleaved operations");
  }
  uv_run(&loop, UV_RUN_DEFAULT);
  for (int k = 0; k < 2; k++) {
    uint64_t right = 0;
    for (int i = 0; i < TW_TIMERS; i++)
      right += tw_fires[k][i] == (active[k][i] ? 1 : 0);
    CHECK_U64(right, TW_TIMERS,
              k == 0 ? "each of the first wheel's timers ran once if left active, else never"
                     : "each of the second wheel's timers ran once if left active, else never");
    expect_counts(w[k], 0, started[k], stopped[k], n_active[k],
                  k == 0 ? "of the first wheel once all ran" : "of the second wheel once all ran");
  }
  for (int k = 0; k < 2; k++)
    wheel_close_wait(w[k], &loop, T);
  loop_finish(&loop, T);
}

/* Before a ring slot fires, the wheel walks the next occupied slots and
 * keeps their entries' addresses, to prefetch from them when each fires.
 * Those are hints only: here the first callback stops and frees every timer
 * of the next two slots (so their addresses are stale, or reused by the
 * replacements malloc hands back) and starts replacements there. Nothing
 * freed may be read (ASan and Valgrind run this too), the freed timers never
 * run, and the replacements run in order. */
enum { PF_PER_SLOT = 40 };
static uvtw_timer_t *pf_timer[2][PF_PER_SLOT];
static uvtw_timer_t *pf_new[2 * PF_PER_SLOT]; /* freed after the run */
static int pf_freed_runs, pf_new_runs, pf_new_order_bad, pf_first_runs;
static uint64_t pf_last_seq;
static uvtw_timer_t pf_first;

static void pf_new_cb(uvtw_timer_t *t) {
  uint64_t seq = (uint64_t)(uintptr_t)t->data;
  if (seq < pf_last_seq)
    pf_new_order_bad++;
  pf_last_seq = seq;
  pf_new_runs++;
}

static void pf_old_cb(uvtw_timer_t *t) {
  (void)t;
  pf_freed_runs++; /* must not happen: it was stopped and freed */
}

static void pf_first_cb(uvtw_timer_t *t) {
  uvtw_wheel_t *wheel = (uvtw_wheel_t *)t->data;
  pf_first_runs++;
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < PF_PER_SLOT; i++) {
      uvtw_timer_stop(pf_timer[k][i]);
      memset(pf_timer[k][i], 0x5A, sizeof *pf_timer[k][i]);
      free(pf_timer[k][i]);
    }
  uint64_t seq = 1;
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < PF_PER_SLOT; i++) {
      uvtw_timer_t *n = malloc(sizeof *n);
      if (n == NULL) {
        printf("Bail out! out of memory\n");
        exit(1);
      }
      uvtw_timer_init(wheel, n);
      pf_new[seq - 1] = n;
      n->data = (void *)(uintptr_t)seq++;
      uvtw_timer_start(n, pf_new_cb, (uint64_t)(1 + k), 0); /* the slots just freed */
    }
}

static void test_prefetch_hints_to_freed_timers(void) {
  const char *T = "prefetch hints to freed timers";
  uv_loop_t loop;
  uvtw_wheel_t *wheel = loop_and_wheel_open(&loop, NULL, T);
  if (wheel == NULL)
    return;
  pf_freed_runs = pf_new_runs = pf_new_order_bad = pf_first_runs = 0;
  pf_last_seq = 0;
  uv_update_time(&loop);
  uvtw_timer_init(wheel, &pf_first);
  pf_first.data = wheel;
  uvtw_timer_start(&pf_first, pf_first_cb, 10, 0);
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < PF_PER_SLOT; i++) {
      pf_timer[k][i] = malloc(sizeof *pf_timer[k][i]);
      if (pf_timer[k][i] == NULL) {
        printf("Bail out! out of memory\n");
        exit(1);
      }
      uvtw_timer_init(wheel, pf_timer[k][i]);
      uvtw_timer_start(pf_timer[k][i], pf_old_cb, (uint64_t)(11 + k), 0);
    }
  uv_run(&loop, UV_RUN_DEFAULT);
  CHECK_U64((uint64_t)pf_first_runs, 1, "the callback that frees the next slots' timers ran once");
  CHECK_U64((uint64_t)pf_freed_runs, 0, "timers stopped and freed after their slot was walked never run");
  CHECK_U64((uint64_t)pf_new_runs, 2 * PF_PER_SLOT, "every replacement started into those slots ran");
  CHECK_U64((uint64_t)pf_new_order_bad, 0, "the replacements ran in deadline order, FIFO within one");
  expect_counts(wheel, 0, 1 + 4 * PF_PER_SLOT, 2 * PF_PER_SLOT, 1 + 2 * PF_PER_SLOT,
                "after the slots were emptied and refilled");
  for (int i = 0; i < 2 * PF_PER_SLOT && pf_first_runs == 1; i++)
    free(pf_new[i]);
  wheel_close_wait(wheel, &loop, T);
  loop_finish(&loop, T);
}

/* The same order rules past the ring (timeouts over 4.1 s), where a
 * restart to a later deadline leaves the entry in place, and so does a
 * stop followed by a start of the same timer; the stops' memory is
 * scribbled over and freed at once (ASan and Valgrind see any later use).
 * Takes about 4.3 s of loop time. */
enum { IP_N = 240 };
static uvtw_timer_t *ip_timers[IP_N];

/* Records the order callbacks ran in, by the index each timer carries in
 * `data` (the in-place and stop+start tests). */
enum { ORDER_CAP = IP_N + 8 };
static int order_log[ORDER_CAP], order_n;

static void order_cb(uvtw_timer_t *timer) {
  if (order_n < ORDER_CAP)
    order_log[order_n] = (int)(intptr_t)timer->data;
  order_n++;
}

static void test_in_place_order_past_the_ring(void) {
  const char *T = "in-place restarts";
  uv_loop_t loop;
  uvtw_wheel_t *wheel;
  int expect[IP_N], n_expect = 0;
  bool freed[IP_N] = {false};

  wheel = loop_and_wheel_open(&loop, NULL, T);
  if (!wheel)
    return;
  order_n = 0;
  uv_update_time(&loop);
  for (int i = 0; i < IP_N; i++) {
    ip_timers[i] = malloc(sizeof(uvtw_timer_t));
    if (ip_timers[i] == NULL) {
      printf("Bail out! out of memory\n");
      exit(1);
    }
    uvtw_timer_init(wheel, ip_timers[i]);
    ip_timers[i]->data = (void *)(intptr_t)i;
    uvtw_timer_start(ip_timers[i], order_cb, 4200 + (uint64_t)(i % 7) * 10, 0);
  }
  /* From the middle out, so that list order and start order differ:
   * restarts, stop+start pairs, and stops whose memory is freed at once,
   * all to (or from) one deadline, 4300 ms. */
  for (int k = 0; k < IP_N; k++) {
    int i = (k % 2 == 0 ? IP_N / 2 + k / 2 : IP_N / 2 - 1 - k / 2);
    switch (k % 4) {
    case 0:
      uvtw_timer_start(ip_timers[i], order_cb, 4300, 0);
      break;
    case 1:
    case 2:
      uvtw_timer_stop(ip_timers[i]);
      uvtw_timer_start(ip_timers[i], order_cb, 4300, 0);
      break;
    default:
      uvtw_timer_stop(ip_timers[i]);
      memset(ip_timers[i], 0x5A, sizeof(uvtw_timer_t));
      free(ip_timers[i]);
      ip_timers[i] = NULL;
      freed[i] = true;
      continue;
    }
    expect[n_expect++] = i;
  }
  /* Restarted again: to the end of the order. One pulled earlier. */
  int again[3] = {IP_N / 2, IP_N / 2 + 10, IP_N / 2 - 7};
  for (int a = 0; a < 3; a++) {
    int i = again[a];
    if (freed[i])
      continue;
    if (a == 1)
      uvtw_timer_stop(ip_timers[i]);
    uvtw_timer_start(ip_timers[i], order_cb, 4300, 0);
    for (int k = 0; k < n_expect; k++)
      if (expect[k] == i) {
        memmove(&expect[k], &expect[k + 1], (size_t)(n_expect - k - 1) * sizeof expect[0]);
        expect[n_expect - 1] = i;
        break;
      }
  }
  int early = expect[5];
  uvtw_timer_start(ip_timers[early], order_cb, 4250, 0); /* earlier: moves, fires first */
  memmove(&expect[1], &expect[0], 5 * sizeof expect[0]);
  expect[0] = early;
  uv_run(&loop, UV_RUN_DEFAULT);
  check_fire_order(T, "deadlines in order, equal ones in the order of their last start", order_log,
                   order_n < ORDER_CAP ? order_n : ORDER_CAP, expect, n_expect);
  uvtw_stats_t st;
  uvtw_wheel_stats(wheel, &st);
  CHECK_U64(st.active, 0, "%s: nothing left active", T);
  for (int i = 0; i < IP_N; i++)
    free(ip_timers[i]);
  wheel_close_wait(wheel, &loop, T);
  loop_finish(&loop, T);
}

/* A stop and start that makes a timer the earliest re-arms the wheel's
 * uv_timer_t, so it runs on time, not at the deadline armed before; and a
 * batch of stop+start pairs past the ring, to earlier and to later
 * deadlines, more than the restart log holds, runs in deadline order. */
static uv_loop_t *ss_loop;
static uint64_t ss_t0, ss_early_at;

static void ss_early_cb(uvtw_timer_t *timer) {
  (void)timer;
  ss_early_at = uv_now(ss_loop) - ss_t0;
}

static void test_stop_start_moves_earlier(void) {
  const char *T = "stop+start to an earlier deadline";
  uv_loop_t loop;
  uvtw_wheel_t *wheel;
  static uvtw_timer_t a, b, many[150];

  wheel = loop_and_wheel_open(&loop, NULL, T);
  if (!wheel)
    return;
  ss_loop = &loop;
  uv_update_time(&loop);
  ss_t0 = uv_now(&loop);
  ss_early_at = UINT64_MAX;
  order_n = 0;
  /* 150 timers at 4200..4349 ms (past the ring's first 4096 ms); each
   * stopped and started again, in turn, to 4500 - i (even i: earlier, from
   * i = 150 on) or 4500 + i (odd i: later). */
  for (int i = 0; i < 150; i++) {
    uvtw_timer_init(wheel, &many[i]);
    many[i].data = (void *)(intptr_t)i;
    uvtw_timer_start(&many[i], order_cb, 4200 + (uint64_t)i, 0);
  }
  for (int i = 0; i < 150; i++) {
    uvtw_timer_stop(&many[i]);
    uvtw_timer_start(&many[i], order_cb, i % 2 == 0 ? 4500 - (uint64_t)i : 4500 + (uint64_t)i, 0);
  }
  int expect[150], n = 0;
  for (int i = 148; i >= 0; i -= 2)
    expect[n++] = i;
  for (int i = 1; i < 150; i += 2)
    expect[n++] = i;

  uvtw_timer_init(wheel, &a);
  uvtw_timer_init(wheel, &b);
  uvtw_timer_start(&a, noop_timer_cb, 3000, 0);
  uvtw_timer_start(&b, ss_early_cb, 9000, 0);
  uvtw_timer_stop(&a);
  uvtw_timer_stop(&b);
  uvtw_timer_start(&b, ss_early_cb, 30, 0);
  CHECK_I64(uvtw_wheel_next_due(wheel), 30, "%s: next_due sees the new deadline", T);
  uv_run(&loop, UV_RUN_DEFAULT);
  tap_ok(ss_early_at >= 30 && ss_early_at < 1000,
         "%s: it ran at %" PRIu64 " ms, not at a deadline armed before (3000 or later)", T,
         ss_early_at);
  check_fire_order(T, "the batch: earlier and later deadlines, in deadline order", order_log,
                   order_n < 150 ? order_n : 150, expect, n);
  CHECK_U64((uint64_t)order_n, 150, "%s: each of the batch ran once", T);
  wheel_close_wait(wheel, &loop, T);
  loop_finish(&loop, T);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  rng_init();
  tap_diag("libuv %s, uvtw %s", uv_version_string(), uvtw_version_string());
  test_basics();
  test_argument_errors();
  test_same_iteration_as_uv_timer();
  test_staggered_starts_like_uv_timer();
  test_restart_no_duplicate();
  test_stop();
  test_again();
  test_repeat();
  test_get_due_in();
  test_huge_timeouts();
  test_callbacks_touch_same_pass();
  test_self_restart_zero_does_not_starve();
  test_self_restart_zero_keeps_loop_alive();
  test_close_with_pending_timers();
  test_close_from_callback();
  test_loop_alive();
  test_wakeups();
  test_no_wasted_wakeups_across_levels();
  test_stats();
  test_next_due();
  test_tick();
  test_inactive_timer_memory();
  test_due_entry_not_delayed_by_later_start();
  test_restart_order_equal_deadlines();
  test_two_wheels_interleaved();
  test_prefetch_hints_to_freed_timers();
  test_in_place_order_past_the_ring();
  test_stop_start_moves_earlier();
  return tap_done();
}
