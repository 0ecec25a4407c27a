/* The fixture and helpers declared in fixture.h. */
#include "fixture.h"

#include <errno.h>
#include <time.h>

fx_t *g_fx;
char g_log[512];

static size_t g_log_len;
static uint64_t rng_state;
static uv_thread_t main_thread;

/* ---- The fixture ------------------------------------------------------------ */

static void on_prepare(uv_prepare_t *handle) {
  ((fx_t *)handle->data)->iter++;
}

static void on_watchdog(uv_timer_t *handle) {
  fx_t *f = handle->data;
  f->watchdog_fired++;
  tap_diag("%s: watchdog: uv_run went on for %d ms; stopping it", f->name, FX_WATCHDOG_MS);
  uv_stop(handle->loop);
}

void fx_open_loop(fx_t *f, const char *name) {
  int r = uv_loop_init(&f->loop);
  if (r != 0) {
    printf("Bail out! uv_loop_init: %s\n", uv_strerror(r));
    exit(1);
  }
  f->wheel = NULL;
  memset(f->more, 0, sizeof f->more);
  f->name = name;
  f->iter = 0;
  f->watchdog_fired = 0;
  g_fx = f;
  uv_prepare_init(&f->loop, &f->prepare_);
  f->prepare_.data = f;
  uv_prepare_start(&f->prepare_, on_prepare);
  uv_unref((uv_handle_t *)&f->prepare_);
  uv_timer_init(&f->loop, &f->watchdog_);
  f->watchdog_.data = f;
  uv_timer_start(&f->watchdog_, on_watchdog, FX_WATCHDOG_MS, FX_WATCHDOG_MS);
  uv_unref((uv_handle_t *)&f->watchdog_);
}

uvtw_wheel_t *fx_wheel_new(fx_t *f, const uvtw_options_t *opts) {
  uvtw_wheel_t *wheel = NULL;
  int r = uvtw_wheel_new(&f->loop, opts, &wheel);
  if (r != 0 || wheel == NULL) {
    tap_ok(0, "%s: uvtw_wheel_new succeeds", f->name);
    tap_diag("  expected 0 and a wheel, got %s and %p", tap_err_name_(r), (void *)wheel);
    return NULL;
  }
  return wheel;
}

bool fx_open(fx_t *f, const char *name, const uvtw_options_t *opts) {
  fx_open_loop(f, name);
  f->wheel = fx_wheel_new(f, opts);
  if (f->wheel == NULL) {
    fx_close(f);
    return false;
  }
  return true;
}

bool fx_open_more(fx_t *f, const char *name, const uvtw_options_t *opts, int n,
                  const uvtw_options_t *more_opts) {
  if (!fx_open(f, name, opts))
    return false;
  for (int k = 0; k < n && k < FX_MORE_WHEELS; k++) {
    f->more[k] = fx_wheel_new(f, more_opts);
    if (f->more[k] == NULL) {
      fx_close(f);
      return false;
    }
  }
  return true;
}

void fx_iteration(fx_t *f) {
  uv_ref((uv_handle_t *)&f->prepare_); /* active: the loop is alive */
  uv_run(&f->loop, UV_RUN_NOWAIT);
  uv_unref((uv_handle_t *)&f->prepare_);
}

int fx_run(fx_t *f, uv_run_mode mode) {
  return uv_run(&f->loop, mode);
}

static void count_close(uvtw_wheel_t *wheel, void *arg) {
  (void)wheel;
  ++*(int *)arg;
}

void fx_wheel_close(fx_t *f, uvtw_wheel_t *wheel) {
  int calls = 0;
  uvtw_wheel_close(wheel, count_close, &calls);
  for (int i = 0; i < 5 && calls == 0; i++)
    uv_run(&f->loop, UV_RUN_NOWAIT);
  EXPECT_U64(calls, 1, "%s: uvtw_wheel_close calls its callback once", f->name);
  if (f->wheel == wheel)
    f->wheel = NULL;
  for (int k = 0; k < FX_MORE_WHEELS; k++)
    if (f->more[k] == wheel)
      f->more[k] = NULL;
}

static void close_any(uv_handle_t *handle, void *arg) {
  (void)arg;
  if (!uv_is_closing(handle))
    uv_close(handle, NULL);
}

void fx_close(fx_t *f) {
  int r;
  if (f->wheel != NULL)
    fx_wheel_close(f, f->wheel);
  for (int k = 0; k < FX_MORE_WHEELS; k++)
    if (f->more[k] != NULL)
      fx_wheel_close(f, f->more[k]);
  fx_close_handle(&f->prepare_);
  fx_close_handle(&f->watchdog_);
  for (int i = 0; i < 5; i++)
    uv_run(&f->loop, UV_RUN_NOWAIT);
  r = uv_loop_close(&f->loop);
  if (!tap_ok(r == 0 && f->watchdog_fired == 0,
              "%s: the loop never hung and closes cleanly (no handle left open)", f->name)) {
    tap_diag("  expected uv_loop_close() == 0 and no watchdog, got %s and %d watchdog firings",
             tap_err_name_(r), f->watchdog_fired);
    if (r != 0) {
      uv_print_all_handles(&f->loop, stdout);
      uv_walk(&f->loop, close_any, NULL);
      for (int i = 0; i < 5; i++)
        uv_run(&f->loop, UV_RUN_NOWAIT);
      uv_loop_close(&f->loop);
    }
  }
  if (g_fx == f)
    g_fx = NULL;
}

/* ---- Helpers ------------------------------------------------------------------ */

void fx_sleep_ms(unsigned ms) {
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
  }
}

void fx_close_handle(void *handle) {
  if (!uv_is_closing((uv_handle_t *)handle))
    uv_close((uv_handle_t *)handle, NULL);
}

bool fx_on_loop_thread(void) {
  uv_thread_t self = uv_thread_self();
  return uv_thread_equal(&self, &main_thread) != 0;
}

uint64_t fx_rng_below(uint64_t n) {
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return (rng_state * 0x2545F4914F6CDD1Du >> 11) % n;
}

uvtw_stats_t fx_stats(const uvtw_wheel_t *wheel) {
  uvtw_stats_t s;
  memset(&s, 0xff, sizeof s);
  uvtw_wheel_stats(wheel, &s);
  return s;
}

void fx_expect_counts(const uvtw_wheel_t *wheel, uint64_t active, uint64_t started,
                      uint64_t stopped, uint64_t fired, const char *when) {
  uvtw_stats_t s = fx_stats(wheel);
  int ok = s.active == active && s.started == started && s.stopped == stopped && s.fired == fired;
  if (!tap_ok(ok, "stats %s: active/started/stopped/fired match their definitions", when))
    tap_diag("  expected %" PRIu64 "/%" PRIu64 "/%" PRIu64 "/%" PRIu64 ", got %" PRIu64 "/%" PRIu64
             "/%" PRIu64 "/%" PRIu64,
             active, started, stopped, fired, s.active, s.started, s.stopped, s.fired);
}

void fx_noop_timer_cb(uvtw_timer_t *timer) {
  (void)timer;
}

void *fx_xcalloc(size_t n, size_t size) {
  void *p = calloc(n, size);
  if (p == NULL) {
    printf("Bail out! out of memory\n");
    exit(1);
  }
  return p;
}

/* ---- Probes ------------------------------------------------------------------- */

void log_reset(void) {
  g_log_len = 0;
  g_log[0] = '\0';
}

void probe_cb(uvtw_timer_t *timer) {
  probe_t *p = timer->data;
  uint64_t now = uvtw_wheel_now(p->wheel);
  int k = p->fires < PROBE_FIRES_KEPT ? p->fires : PROBE_FIRES_KEPT - 1;
  p->fires++;
  p->now[k] = now;
  p->iter[k] = g_fx ? g_fx->iter : 0;
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

void probe_init(uvtw_wheel_t *wheel, probe_t *p, char name, probe_action action) {
  memset(p, 0, sizeof *p);
  uvtw_timer_init(wheel, &p->timer);
  p->timer.data = p;
  p->name = name;
  p->action = action;
  p->wheel = wheel;
}

int probe_start(probe_t *p, uint64_t timeout, uint64_t repeat) {
  p->deadline = uvtw_wheel_now(p->wheel) + timeout;
  return uvtw_timer_start(&p->timer, probe_cb, timeout, repeat);
}

void aux_cb(uv_timer_t *handle) {
  aux_t *a = handle->data;
  a->fires++;
  a->now = uv_now(handle->loop);
  if (a->fn)
    a->fn(a);
}

void aux_init(uv_loop_t *loop, aux_t *a, void (*fn)(aux_t *)) {
  memset(a, 0, sizeof *a);
  uv_timer_init(loop, &a->handle);
  a->handle.data = a;
  a->fn = fn;
}

void aux_start(aux_t *a, uint64_t timeout) {
  uv_timer_start(&a->handle, aux_cb, timeout, 0);
}

/* ---- Task probes -------------------------------------------------------------- */

char fx_sentinel_storage;

void task_probe_cb(void *arg, int status) {
  task_probe_t *p = arg;
  p->calls++;
  p->status = status;
  p->ran_ns = uv_hrtime();
  if (!fx_on_loop_thread())
    p->wrong_thread++;
}

/* ---- main ----------------------------------------------------------------------- */

int fx_main(int argc, char **argv, const tap_case_t *cases, size_t n) {
  const char *env = getenv("UVTW_SEED");
  uint64_t seed = env ? strtoull(env, NULL, 0) : UINT64_C(0x75767477);
  setvbuf(stdout, NULL, _IOLBF, 0);
  main_thread = uv_thread_self();
  if (seed == 0)
    seed = 0x9E3779B97F4A7C15u;
  rng_state = seed;
  tap_diag("libuv %s, uvtw %s", uv_version_string(), uvtw_version_string());
  tap_diag("seed %" PRIu64 " (set UVTW_SEED to repeat)", seed);
  return tap_run_cases(argc, argv, cases, n);
}
