/* The tests' fixture: a loop with a wheel, and the helpers every test of
 * the public API shares. The contract under test is include/uvtw.h, with
 * the guarantees README.md states.
 *
 *   fx_t f;
 *   if (!fx_open(&f, "name", &opts))   // a loop, a wheel on it (opts NULL:
 *     return;                          // defaults), an iteration counter
 *   ... start timers, fx_run(&f, UV_RUN_DEFAULT) ...
 *   fx_close(&f);                      // closes the wheel (its callback
 *                                      // must run once), the helpers and the
 *                                      // loop: uv_loop_close must return 0
 *
 * fx_open_more(&f, "name", &opts, 2, &more_opts) opens the same with two
 * more wheels on the loop, f.more[0] and f.more[1], which fx_close closes
 * too.
 *
 * Loop iterations are counted by an unreferenced uv_prepare_t (f.iter): it
 * runs once per iteration and never keeps the loop alive. An unreferenced
 * watchdog uv_timer_t stops any uv_run that goes on for FX_WATCHDOG_MS, so
 * a hang becomes a failed check instead of a stuck test. g_fx is the fixture
 * opened last, for callbacks.
 *
 * Every binary's main is FX_MAIN(cases): it prints the libuv and uvtw
 * versions it runs on and the random seed (UVTW_SEED repeats a run), then
 * runs the cases named on the command line, or all. */
#ifndef UVTW_TEST_FIXTURE_H
#define UVTW_TEST_FIXTURE_H

#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "tap.h"
#include "uvtw.h"

enum { FX_WATCHDOG_MS = 10000, FX_MORE_WHEELS = 4 };

typedef struct fx_s {
  uv_loop_t loop;
  uvtw_wheel_t *wheel; /* NULL once closed by the test itself, or for fx_open_loop */
  /* fx_open_more's wheels; a test that closes one itself, other than with
   * fx_wheel_close, sets it to NULL */
  uvtw_wheel_t *more[FX_MORE_WHEELS];
  const char *name;
  uint64_t iter; /* loop iterations so far */
  int watchdog_fired;
  uv_prepare_t prepare_;
  uv_timer_t watchdog_;
} fx_t;

extern fx_t *g_fx;

/* A loop with the iteration counter and the watchdog, no wheel. Bails out
 * if the loop cannot be made. */
void fx_open_loop(fx_t *f, const char *name);
/* fx_open_loop, then a wheel made with `opts`. If the wheel cannot be made,
 * reports a failed check, closes the loop and returns false. */
bool fx_open(fx_t *f, const char *name, const uvtw_options_t *opts);
/* fx_open, then `n` (<= FX_MORE_WHEELS) more wheels made with `more_opts`
 * in f->more[0..n-1]. If one cannot be made, reports a failed check,
 * closes all and returns false. */
bool fx_open_more(fx_t *f, const char *name, const uvtw_options_t *opts, int n,
                  const uvtw_options_t *more_opts);
/* Another wheel on the fixture's loop; NULL (and a failed check) if none. */
uvtw_wheel_t *fx_wheel_new(fx_t *f, const uvtw_options_t *opts);
/* Runs one loop iteration (UV_RUN_NOWAIT) even if nothing keeps the loop
 * alive: in its poll phase the wheel takes in every task queued so far,
 * from any thread, the loop's own included (outside the wheel's callbacks
 * a schedule or a cancel only queues, on every thread). After the loop's
 * first iteration such a task keeps the loop alive only once taken in, so
 * a test that schedules at top level and then runs uv_run(DEFAULT) calls
 * this first ("Any-thread tasks" in include/uvtw.h). */
void fx_iteration(fx_t *f);
/* Closes `wheel` and runs the loop until its close callback ran; checks that
 * it ran once. A wheel of the fixture's (f->wheel, f->more) is forgotten:
 * fx_close does not close it again. */
void fx_wheel_close(fx_t *f, uvtw_wheel_t *wheel);
/* Closes f->wheel and f->more's wheels if set, the helpers and the loop; checks that the watchdog
 * never fired and that uv_loop_close returns 0 (nothing left open). */
void fx_close(fx_t *f);
int fx_run(fx_t *f, uv_run_mode mode);

/* ---- Helpers --------------------------------------------------------------- */

void fx_sleep_ms(unsigned ms);
void fx_close_handle(void *handle); /* uv_close unless closing already */
bool fx_on_loop_thread(void);       /* the thread that runs main */
uint64_t fx_rng_below(uint64_t n);  /* seeded, xorshift64* */
uvtw_stats_t fx_stats(const uvtw_wheel_t *wheel);
/* One check: the four counters the timer calls define exactly. */
void fx_expect_counts(const uvtw_wheel_t *wheel, uint64_t active, uint64_t started,
                      uint64_t stopped, uint64_t fired, const char *when);
void fx_noop_timer_cb(uvtw_timer_t *timer);
void *fx_xcalloc(size_t n, size_t size); /* bails out when out of memory */

/* ---- Probes: wheel timers that record how they ran ------------------------- */

enum { PROBE_FIRES_KEPT = 8 };

typedef struct probe_s probe_t;
typedef void (*probe_action)(probe_t *self);

struct probe_s {
  uvtw_timer_t timer;
  char name;
  int fires;
  uint64_t deadline;               /* of the start made through probe_start */
  int early;                       /* callbacks with the wheel's now < deadline */
  uint64_t now[PROBE_FIRES_KEPT];  /* uvtw_wheel_now() at each callback */
  uint64_t iter[PROBE_FIRES_KEPT]; /* loop iteration of each callback */
  int active_in_cb[PROBE_FIRES_KEPT];
  uint64_t due_in_in_cb[PROBE_FIRES_KEPT];
  uint64_t repeat_in_cb[PROBE_FIRES_KEPT];
  probe_action action;
  uvtw_wheel_t *wheel;
};

/* Names of the probes in the order they ran. */
extern char g_log[512];
void log_reset(void);

void probe_init(uvtw_wheel_t *wheel, probe_t *p, char name, probe_action action);
/* Starts the probe's timer; records the deadline it should run at. */
int probe_start(probe_t *p, uint64_t timeout, uint64_t repeat);
void probe_cb(uvtw_timer_t *timer);

/* A uv_timer_t helper: keeps the loop alive or acts at a given time. */
typedef struct aux_s aux_t;
struct aux_s {
  uv_timer_t handle;
  int fires;
  uint64_t now;
  void (*fn)(aux_t *self);
};

void aux_init(uv_loop_t *loop, aux_t *a, void (*fn)(aux_t *));
void aux_start(aux_t *a, uint64_t timeout);
void aux_cb(uv_timer_t *handle);

/* ---- Task probes: task arguments that record what happened to them -------- */

typedef struct task_probe_s {
  int calls;
  int status;
  int wrong_thread; /* callbacks off the loop thread */
  uint64_t ran_ns;  /* uv_hrtime() at the last callback */
} task_probe_t;

void task_probe_cb(void *arg, int status);

/* An address no ticket can have: a ticket variable preset to it proves that
 * a failed call left it untouched. */
extern char fx_sentinel_storage;
#define SENTINEL ((uvtw_ticket_t *)(void *)&fx_sentinel_storage)

/* ---- main ------------------------------------------------------------------ */

int fx_main(int argc, char **argv, const tap_case_t *cases, size_t n);
#define FX_MAIN(cases)                                                                             \
  int main(int argc, char **argv) {                                                                \
    return fx_main(argc, argv, cases, sizeof cases / sizeof cases[0]);                             \
  }

#endif
