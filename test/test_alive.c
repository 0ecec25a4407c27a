/* Loop aliveness (include/uvtw.h, "The wheel" and the per-timer
 * references): a referenced wheel keeps uv_run(UV_RUN_DEFAULT) going exactly
 * while a referenced timer or a task is pending, like an active uv_timer_t;
 * an idle or unreferenced wheel never does. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"

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

/* An unreferenced wheel, pending timer or not, lets uv_run(DEFAULT)
 * return; referenced again (unref twice, ref once), it keeps uv_run going
 * until its timer ran. */
static void lv_unref_then_ref(fx_t *f) {
  uvtw_wheel_unref(f->wheel);
  uvtw_wheel_unref(f->wheel);
  probe_start(&lv_w, 100, 0);
  lv_arm_watch();
  uv_run(&f->loop, UV_RUN_DEFAULT);
  EXPECT_U64(
      (uint64_t)(lv_w.fires + lv_watch.fires), 0,
      "an unreferenced wheel with a pending timer does not keep uv_run(DEFAULT) from returning");
  EXPECT_U64((uint64_t)uvtw_timer_is_active(&lv_w.timer), 1, "... and the timer stays pending");

  uvtw_wheel_ref(f->wheel);
  lv_arm_watch();
  uv_run(&f->loop, UV_RUN_DEFAULT);
  EXPECT_U64(
      (uint64_t)lv_w.fires, 1,
      "once referenced again (unref twice, ref once), the wheel keeps uv_run until the timer ran");
  EXPECT_U64((uint64_t)lv_watch.fires, 0, "... and uv_run then returns by itself");
  tap_ok(lv_w.early == 0, "... not before its deadline");
}

/* Stopping the last pending timer lets uv_run return at once (`stopper`
 * stops it; the caller closes it). */
static void lv_stop_last_timer(fx_t *f, aux_t *stopper) {
  uint64_t t0;
  lv_w.fires = 0;
  t0 = uv_now(&f->loop);
  probe_start(&lv_w, 2000, 0);
  aux_init(&f->loop, stopper, lv_stop_w);
  aux_start(stopper, 10);
  lv_arm_watch();
  uv_run(&f->loop, UV_RUN_DEFAULT);
  if (!tap_ok(lv_w.fires == 0 && uv_now(&f->loop) - t0 < 2000 && lv_watch.fires == 0,
              "stopping the last pending timer lets uv_run return at once"))
    tap_diag("  expected return after ~10 ms with no callback, got %" PRIu64 " ms and %d callbacks",
             uv_now(&f->loop) - t0, lv_w.fires);
}

/* An unreferenced wheel still runs its timers while `keep` (the caller
 * closes it) keeps the loop alive. */
static void lv_unref_still_runs(fx_t *f, aux_t *keep) {
  uvtw_wheel_unref(f->wheel);
  probe_start(&lv_w, 20, 0);
  aux_init(&f->loop, keep, NULL);
  aux_start(keep, 60);
  lv_arm_watch();
  uv_run(&f->loop, UV_RUN_DEFAULT);
  EXPECT_U64((uint64_t)lv_w.fires, 1,
             "an unreferenced wheel still runs its timers while the loop is alive");
  tap_ok(lv_w.early == 0, "... not before their deadline");
  uvtw_wheel_ref(f->wheel);
}

static void test_loop_alive(void) {
  const char *T = "loop aliveness";
  fx_t f;
  uvtw_wheel_t *wheel;
  aux_t stopper, keep;

  if (!fx_open(&f, T, NULL))
    return;
  wheel = f.wheel;
  log_reset();
  aux_init(&f.loop, &lv_watch, lv_watch_fn);
  uv_unref((uv_handle_t *)&lv_watch.handle);
  probe_init(wheel, &lv_w, 'w', NULL);

  lv_arm_watch();
  uv_run(&f.loop, UV_RUN_DEFAULT);
  EXPECT_U64((uint64_t)lv_watch.fires, 0,
             "an empty referenced wheel does not keep uv_run(DEFAULT) from returning");

  lv_unref_then_ref(&f);
  lv_stop_last_timer(&f, &stopper);
  lv_unref_still_runs(&f, &keep);
  fx_close_handle(&stopper.handle);
  fx_close_handle(&keep.handle);
  fx_close_handle(&lv_watch.handle);
  fx_close(&f);
  log_reset();
}

static int alone_runs;

static void alone_cb(uvtw_timer_t *timer) {
  if (++alone_runs < 100)
    uvtw_timer_start(timer, alone_cb, 0, 0);
}

/* With nothing else in the loop, the restarted timer alone keeps it alive. */
static void test_self_restart_zero_alone(void) {
  const char *T = "self-restart with timeout 0, alone";
  fx_t f;
  uvtw_wheel_t *wheel;
  uvtw_timer_t timer;

  if (!fx_open(&f, T, NULL))
    return;
  wheel = f.wheel;
  alone_runs = 0;
  uvtw_timer_init(wheel, &timer);
  uvtw_timer_start(&timer, alone_cb, 0, 0);
  uv_run(&f.loop, UV_RUN_DEFAULT);
  EXPECT_U64((uint64_t)alone_runs, 100,
             "%s: a referenced wheel keeps uv_run going while its timer restarts itself", T);
  uvtw_timer_stop(&timer);
  fx_close(&f);
}

/* ---- Each uv_run mode against a uv_timer_t twin (issue 16) -----------------
 * A script of starts, references and uv_run calls drives wheel timers and
 * their uv_timer_t twins side by side on one loop: every step acts on both
 * at the same moment (a timer and its twin are started with no clock
 * update between, so with one deadline), and both then live through the
 * same loop iterations on the same clock, however slow the machine. An
 * unreferenced wheel is played by twins that are all uv_unref'd.
 *
 * What decides a loop's course is its aliveness, which uv_run checks at its
 * start and at the end of each iteration and returns. A loop holding one
 * kind alone is alive while an active referenced handle of that kind is
 * (for the wheel, one of its uv_timer_t and uv_async_t: any handle on the
 * loop that is not the test's; for the twins, a twin), or the script's
 * keeper, which both loops would hold. While the two kinds agree at each
 * of those checks, the shared loop runs as each loop alone would and each
 * uv_run returns what it returns with uv_timer_t twins alone; the first
 * point at which one kind alone would keep its loop going where the
 * other's returns, or the kinds' timers have fired differently, is the
 * difference. So they are compared at the start of every uv_run, before
 * and after the poll of every iteration (a prepare and a check handle:
 * libuv before 1.45 checks aliveness after the check phase, later ones
 * after the timers that end an iteration, before the next prepare), and
 * after every uv_run. No comparison depends on how fast the machine runs:
 * a slow step delays both kinds alike. */

typedef enum { KIND_WHEEL, KIND_UV, KINDS } alive_kind_t;

enum { AL_TIMERS = 2, AL_RUNS = 8 };

typedef struct alive_env_s {
  fx_t f;
  uvtw_timer_t wt[AL_TIMERS];
  uv_timer_t ut[AL_TIMERS];
  uv_timer_t stopper;   /* unreferenced: calls uv_stop */
  uv_timer_t keeper;    /* referenced: keeps the loop alive for a while */
  uv_prepare_t watch;   /* unreferenced: compare the kinds every iteration, */
  uv_check_t watch_end; /* before and after the poll */
  int timer_ref[AL_TIMERS];
  int wheel_ref;
  int stop_in_cb[AL_TIMERS];
  int fired[KINDS][AL_TIMERS];
  int runs;
  int run_mode[AL_RUNS];
  int run_result[AL_RUNS];
  int alive_after[AL_RUNS][KINDS];
  int fired_after[AL_RUNS][KINDS][AL_TIMERS];
  int iterations;  /* of the uv_run under way */
  char split[300]; /* where the kinds first differed; empty if never */
} alive_env_t;

static alive_env_t *al;

static void al_fired(alive_kind_t kind, int i) {
  al->fired[kind][i]++;
  if (al->stop_in_cb[i])
    uv_stop(&al->f.loop);
}

static void al_wheel_cb(uvtw_timer_t *timer) {
  al_fired(KIND_WHEEL, (int)(timer - al->wt));
}

static void al_uv_cb(uv_timer_t *handle) {
  al_fired(KIND_UV, (int)(handle - al->ut));
}

static void al_stopper_cb(uv_timer_t *handle) {
  uv_stop(handle->loop);
}

static void al_keeper_cb(uv_timer_t *handle) {
  (void)handle;
}

static bool al_keeps_alive(const void *handle) {
  const uv_handle_t *h = handle;
  return uv_is_active(h) && uv_has_ref(h) && !uv_is_closing(h);
}

static bool al_is_tests(const uv_handle_t *h) {
  if (h == (const uv_handle_t *)&al->f.prepare_ || h == (const uv_handle_t *)&al->f.watchdog_ ||
      h == (const uv_handle_t *)&al->stopper || h == (const uv_handle_t *)&al->keeper ||
      h == (const uv_handle_t *)&al->watch || h == (const uv_handle_t *)&al->watch_end)
    return true;
  for (int i = 0; i < AL_TIMERS; i++)
    if (h == (const uv_handle_t *)&al->ut[i])
      return true;
  return false;
}

static void al_walk_wheel(uv_handle_t *handle, void *arg) {
  if (!al_is_tests(handle) && al_keeps_alive(handle))
    *(bool *)arg = true;
}

/* Whether a loop holding only `kind` (and the keeper) would be alive. */
static int al_alive(alive_kind_t kind) {
  bool alive = al_keeps_alive(&al->keeper);
  if (kind == KIND_WHEEL)
    uv_walk(&al->f.loop, al_walk_wheel, &alive);
  else
    for (int i = 0; i < AL_TIMERS; i++)
      alive |= al_keeps_alive(&al->ut[i]);
  return alive;
}

/* Records where the kinds first differ, if they do now. */
static void al_compare_kinds(const char *where) {
  int w = al_alive(KIND_WHEEL), u = al_alive(KIND_UV);
  bool same = w == u;
  for (int i = 0; i < AL_TIMERS; i++)
    same &= al->fired[KIND_WHEEL][i] == al->fired[KIND_UV][i];
  if (same || al->split[0] != '\0')
    return;
  snprintf(al->split, sizeof al->split,
           "%s of uv_run %d: wheel alive %d fired[%d,%d], twins alive %d fired[%d,%d]", where,
           al->runs + 1, w, al->fired[KIND_WHEEL][0], al->fired[KIND_WHEEL][1], u,
           al->fired[KIND_UV][0], al->fired[KIND_UV][1]);
}

static void al_watch_cb(uv_prepare_t *handle) {
  (void)handle;
  char where[60];
  snprintf(where, sizeof where, "before the poll of iteration %d", ++al->iterations);
  al_compare_kinds(where);
}

static void al_watch_end_cb(uv_check_t *handle) {
  (void)handle;
  char where[60];
  snprintf(where, sizeof where, "after the poll of iteration %d", al->iterations);
  al_compare_kinds(where);
}

/* A twin is referenced when its timer is and the "wheel" is. */
static void al_apply_uv_ref(int i) {
  if (al->timer_ref[i] && al->wheel_ref)
    uv_ref((uv_handle_t *)&al->ut[i]);
  else
    uv_unref((uv_handle_t *)&al->ut[i]);
}

/* A wheel timer and its twin, at the same moment: one deadline. */
static void al_start(int i, uint64_t timeout) {
  uvtw_timer_start(&al->wt[i], al_wheel_cb, timeout, 0);
  uv_timer_start(&al->ut[i], al_uv_cb, timeout, 0);
  al_apply_uv_ref(i);
}

static void al_timer_unref(int i) {
  al->timer_ref[i] = 0;
  uvtw_timer_unref(&al->wt[i]);
  al_apply_uv_ref(i);
}

static void al_timer_ref(int i) {
  al->timer_ref[i] = 1;
  uvtw_timer_ref(&al->wt[i]);
  al_apply_uv_ref(i);
}

static void al_wheel_set_ref(int ref) {
  al->wheel_ref = ref;
  if (ref)
    uvtw_wheel_ref(al->f.wheel);
  else
    uvtw_wheel_unref(al->f.wheel);
  for (int i = 0; i < AL_TIMERS; i++)
    al_apply_uv_ref(i);
}

static void al_stop_at(uint64_t ms) {
  uv_timer_start(&al->stopper, al_stopper_cb, ms, 0);
}

static void al_keep_for(uint64_t ms) {
  uv_timer_start(&al->keeper, al_keeper_cb, ms, 0);
}

static void al_run(uv_run_mode mode) {
  int k = al->runs < AL_RUNS ? al->runs : AL_RUNS - 1;
  al->run_mode[k] = (int)mode;
  al->iterations = 0;
  al_compare_kinds("at the start");
  al->run_result[k] = uv_run(&al->f.loop, mode);
  al_compare_kinds("after the end");
  for (int kind = 0; kind < KINDS; kind++) {
    al->alive_after[k][kind] = al_alive((alive_kind_t)kind);
    for (int i = 0; i < AL_TIMERS; i++)
      al->fired_after[k][kind][i] = al->fired[kind][i];
  }
  al->runs++;
}

static const char *mode_name(int mode) {
  return mode == UV_RUN_DEFAULT ? "DEFAULT" : mode == UV_RUN_ONCE ? "ONCE" : "NOWAIT";
}

/* Each uv_run's mode and return value, and after it whether `kind` alone
 * would keep its loop alive and the fire counts of its timers 0 and 1. */
static void al_describe(const alive_env_t *e, alive_kind_t kind, const char *who) {
  char line[400];
  size_t used = 0;
  for (int k = 0; k < e->runs && k < AL_RUNS && used < sizeof line; k++)
    used += (size_t)snprintf(line + used, sizeof line - used, " %s->%d alive %d fired[%d,%d]",
                             mode_name(e->run_mode[k]), e->run_result[k], e->alive_after[k][kind],
                             e->fired_after[k][kind][0], e->fired_after[k][kind][1]);
  tap_diag("  %s:%s", who, used ? line : " no uv_run");
}

static bool al_play(alive_env_t *e, const char *T, void (*script)(void)) {
  memset(e, 0, sizeof *e);
  e->wheel_ref = 1;
  if (!fx_open(&e->f, T, NULL))
    return false;
  al = e;
  for (int i = 0; i < AL_TIMERS; i++) {
    e->timer_ref[i] = 1;
    uvtw_timer_init(e->f.wheel, &e->wt[i]);
    uv_timer_init(&e->f.loop, &e->ut[i]);
  }
  uv_timer_init(&e->f.loop, &e->stopper);
  uv_unref((uv_handle_t *)&e->stopper);
  uv_timer_init(&e->f.loop, &e->keeper);
  uv_prepare_init(&e->f.loop, &e->watch);
  uv_prepare_start(&e->watch, al_watch_cb);
  uv_unref((uv_handle_t *)&e->watch);
  uv_check_init(&e->f.loop, &e->watch_end);
  uv_check_start(&e->watch_end, al_watch_end_cb);
  uv_unref((uv_handle_t *)&e->watch_end);
  script();
  for (int i = 0; i < AL_TIMERS; i++) {
    uvtw_timer_stop(&e->wt[i]);
    fx_close_handle(&e->ut[i]);
  }
  fx_close_handle(&e->stopper);
  fx_close_handle(&e->keeper);
  fx_close_handle(&e->watch);
  fx_close_handle(&e->watch_end);
  if (!e->wheel_ref)
    uvtw_wheel_ref(e->f.wheel);
  fx_close(&e->f);
  al = NULL;
  return true;
}

/* Plays `script` with wheel timers and uv_timer_t twins on one loop; one
 * check. uv_run returns the loop's aliveness as it last checked it (at its
 * start, or at the end of an iteration): with the kinds alike at each of
 * those points, the shared loop's uv_run returns what it returns with
 * uv_timer_t twins alone. */
static void alive_compare(const char *T, void (*script)(void)) {
  static alive_env_t env;
  if (!al_play(&env, T, script))
    return;
  if (!tap_ok(env.split[0] == '\0' && env.runs <= AL_RUNS,
              "%s: every uv_run returns what it returns with uv_timer_t twins, and the same "
              "timers have fired after it (libuv %s)",
              T, uv_version_string())) {
    tap_diag("  the kinds differ %s", env.split);
    tap_diag("  after each uv_run (mode->return value, would the kind alone keep its loop "
             "alive, fire counts of timers 0 and 1):");
    al_describe(&env, KIND_UV, "expected (uv_timer_t)");
    al_describe(&env, KIND_WHEEL, "got (wheel)          ");
  }
}

static void script_default(void) {
  al_start(0, 5);
  al_run(UV_RUN_DEFAULT);
  al_run(UV_RUN_DEFAULT);
}

static void script_default_zero(void) {
  al_start(0, 0);
  al_run(UV_RUN_DEFAULT);
}

static void script_once(void) {
  al_start(0, 5);
  al_start(1, 30);
  al_run(UV_RUN_ONCE);
  al_run(UV_RUN_ONCE);
  al_run(UV_RUN_ONCE);
}

static void script_once_zero(void) {
  al_start(0, 0);
  al_run(UV_RUN_ONCE);
  al_run(UV_RUN_ONCE);
}

static void script_nowait(void) {
  al_start(0, 5);
  al_run(UV_RUN_NOWAIT);
  fx_sleep_ms(10);
  al_run(UV_RUN_NOWAIT);
  al_run(UV_RUN_NOWAIT);
}

static void script_nowait_zero(void) {
  al_start(0, 0);
  al_run(UV_RUN_NOWAIT);
  al_run(UV_RUN_NOWAIT);
}

static void script_stop_then_run(void) {
  al_start(0, 20);
  al_stop_at(5);
  al_run(UV_RUN_DEFAULT);
  al_run(UV_RUN_DEFAULT);
}

static void script_stop_in_callback(void) {
  al->stop_in_cb[0] = 1;
  al_start(0, 5);
  al_start(1, 15);
  al_run(UV_RUN_DEFAULT);
  al_run(UV_RUN_DEFAULT);
}

static void script_stop_in_callback_zero(void) {
  al->stop_in_cb[0] = 1;
  al_start(0, 0);
  al_start(1, 0);
  al_run(UV_RUN_DEFAULT);
  al_run(UV_RUN_DEFAULT);
}

static void script_stop_then_once(void) {
  al_start(0, 10);
  al_stop_at(3);
  al_run(UV_RUN_DEFAULT);
  al_run(UV_RUN_ONCE);
  al_run(UV_RUN_ONCE);
}

static void script_wheel_unref(void) {
  al_wheel_set_ref(0);
  al_start(0, 5);
  al_run(UV_RUN_DEFAULT);
  al_run(UV_RUN_ONCE);
  al_run(UV_RUN_NOWAIT);
  fx_sleep_ms(10);
  al_run(UV_RUN_NOWAIT);
  al_run(UV_RUN_DEFAULT);
}

static void script_wheel_unref_kept(void) {
  al_wheel_set_ref(0);
  al_start(0, 5);
  al_keep_for(20);
  al_run(UV_RUN_DEFAULT);
}

static void script_wheel_unref_then_ref(void) {
  al_wheel_set_ref(0);
  al_start(0, 5);
  al_run(UV_RUN_DEFAULT);
  al_wheel_set_ref(1);
  al_run(UV_RUN_DEFAULT);
}

static void test_alive_default(void) {
  alive_compare("uv_run(DEFAULT), timeout 5", script_default);
  alive_compare("uv_run(DEFAULT), timeout 0", script_default_zero);
}

static void test_alive_once(void) {
  alive_compare("uv_run(ONCE), timeouts 5 and 30", script_once);
  alive_compare("uv_run(ONCE), timeout 0", script_once_zero);
}

static void test_alive_nowait(void) {
  alive_compare("uv_run(NOWAIT), timeout 5", script_nowait);
  alive_compare("uv_run(NOWAIT), timeout 0", script_nowait_zero);
}

static void test_alive_stop(void) {
  alive_compare("uv_stop from a uv_timer_t, then uv_run(DEFAULT)", script_stop_then_run);
  alive_compare("uv_stop inside a timer callback, then uv_run(DEFAULT)", script_stop_in_callback);
  alive_compare("uv_stop inside a 0 ms timer's callback, then uv_run(DEFAULT)",
                script_stop_in_callback_zero);
  alive_compare("uv_stop from a uv_timer_t, then uv_run(ONCE)", script_stop_then_once);
}

static void test_alive_wheel_unref(void) {
  alive_compare("unreferenced wheel, every mode", script_wheel_unref);
  alive_compare("unreferenced wheel, loop kept alive by another handle", script_wheel_unref_kept);
  alive_compare("unreferenced wheel referenced again", script_wheel_unref_then_ref);
}

/* ---- Per-timer references ------------------------------------------------ */

static void script_timer_unref(void) {
  al_start(0, 5);
  al_timer_unref(0);
  al_run(UV_RUN_DEFAULT);
  al_run(UV_RUN_ONCE);
  fx_sleep_ms(10);
  al_run(UV_RUN_NOWAIT);
}

static void script_unref_before_start(void) {
  al_timer_unref(0);
  al_start(0, 5);
  al_run(UV_RUN_DEFAULT);
  al_keep_for(15);
  al_run(UV_RUN_DEFAULT);
}

static void script_unref_then_ref_mix(void) {
  al_start(0, 5);
  al_timer_unref(0);
  al_start(1, 15);
  al_run(UV_RUN_DEFAULT);
}

static void script_ref_then_unref_mix(void) {
  al_start(0, 5);
  al_start(1, 15);
  al_timer_unref(1);
  al_run(UV_RUN_DEFAULT);
  al_keep_for(30);
  al_run(UV_RUN_DEFAULT);
}

static void script_mix_once(void) {
  al_start(0, 5);
  al_timer_unref(0);
  al_start(1, 30);
  al_run(UV_RUN_ONCE);
  al_run(UV_RUN_ONCE);
  al_run(UV_RUN_ONCE);
}

static void script_mix_nowait(void) {
  al_start(0, 0);
  al_timer_unref(0);
  al_start(1, 10);
  al_run(UV_RUN_NOWAIT);
  fx_sleep_ms(15);
  al_run(UV_RUN_NOWAIT);
  al_run(UV_RUN_NOWAIT);
}

static void script_mix_stop(void) {
  al->stop_in_cb[0] = 1;
  al_start(0, 5);
  al_start(1, 15);
  al_timer_unref(1);
  al_run(UV_RUN_DEFAULT);
  al_run(UV_RUN_DEFAULT);
  al_timer_ref(1);
  al_run(UV_RUN_DEFAULT);
}

static void script_unref_wheel_ref_timer(void) {
  al_wheel_set_ref(0);
  al_start(0, 5);
  al_start(1, 10);
  al_timer_unref(1);
  al_run(UV_RUN_DEFAULT);
  al_wheel_set_ref(1);
  al_run(UV_RUN_DEFAULT);
  al_keep_for(20);
  al_run(UV_RUN_DEFAULT);
}

static void test_alive_timer_unref(void) {
  alive_compare("unreferenced timer, every mode", script_timer_unref);
  alive_compare("timer unreferenced before its start", script_unref_before_start);
  alive_compare("unreferenced 5 ms and referenced 15 ms timers, DEFAULT",
                script_unref_then_ref_mix);
  alive_compare("referenced 5 ms and unreferenced 15 ms timers, DEFAULT",
                script_ref_then_unref_mix);
  alive_compare("unreferenced 5 ms and referenced 30 ms timers, ONCE", script_mix_once);
  alive_compare("unreferenced 0 ms and referenced 10 ms timers, NOWAIT", script_mix_nowait);
  alive_compare("uv_stop in a callback with an unreferenced timer pending", script_mix_stop);
  alive_compare("unreferenced wheel holding referenced and unreferenced timers",
                script_unref_wheel_ref_timer);
}

/* ---- uvtw_timer_ref / unref / has_ref ----------------------------------------- */

static int ref_fires;
static int ref_has_ref_in_cb;

static void ref_cb(uvtw_timer_t *timer) {
  ref_fires++;
  ref_has_ref_in_cb = uvtw_timer_has_ref(timer);
}

/* ref and unref: a setting, not a count, kept while inactive. */
static void ref_is_a_setting(fx_t *f, uvtw_timer_t *a) {
  const char *T = f->name;
  EXPECT_U64(!!uvtw_timer_has_ref(a), 1, "%s: init makes a timer referenced", T);
  tap_ok(a->data == f, "%s: init leaves data alone", T);
  uvtw_timer_unref(a);
  EXPECT_U64(!!uvtw_timer_has_ref(a), 0, "%s: unref makes it unreferenced", T);
  uvtw_timer_unref(a);
  EXPECT_U64(!!uvtw_timer_has_ref(a), 0, "%s: unref twice: still unreferenced", T);
  uvtw_timer_ref(a);
  EXPECT_U64(!!uvtw_timer_has_ref(a), 1,
             "%s: unref twice then ref once: referenced (not counted, like uv_ref)", T);
  uvtw_timer_ref(a);
  EXPECT_U64(!!uvtw_timer_has_ref(a), 1, "%s: ref twice: referenced", T);
}

/* An active timer's setting decides at once whether it keeps the loop
 * alive, through stops and starts. */
static void ref_of_an_active_timer(fx_t *f, uvtw_timer_t *a) {
  const char *T = f->name;
  uvtw_timer_unref(a);
  uvtw_timer_start(a, ref_cb, 100, 0);
  EXPECT_U64(!!uvtw_timer_has_ref(a), 0, "%s: the setting survives a start", T);
  EXPECT_U64(!!uv_loop_alive(&f->loop), 0,
             "%s: an active unreferenced timer alone does not keep the loop alive", T);
  uvtw_timer_stop(a);
  uvtw_timer_start(a, ref_cb, 100, 0);
  EXPECT_U64(!!uvtw_timer_has_ref(a), 0, "%s: the setting survives stop and start", T);
  EXPECT_U64(!!uv_loop_alive(&f->loop), 0, "%s: ... and the loop is still not kept alive", T);
  uvtw_timer_ref(a);
  EXPECT_U64(!!uv_loop_alive(&f->loop), 1,
             "%s: ref on the active timer makes it keep the loop alive at once", T);
  uvtw_timer_unref(a);
  EXPECT_U64(!!uv_loop_alive(&f->loop), 0, "%s: unref on the active timer undoes that at once", T);
}

/* Two timers: the loop is alive while any referenced timer is pending on a
 * referenced wheel. */
static void ref_of_two_timers(fx_t *f, uvtw_timer_t *a, uvtw_timer_t *b) {
  const char *T = f->name;
  uvtw_timer_start(b, ref_cb, 200, 0);
  EXPECT_U64(!!uv_loop_alive(&f->loop), 1,
             "%s: a referenced timer beside an unreferenced one keeps the loop alive", T);
  uvtw_timer_stop(b);
  EXPECT_U64(!!uv_loop_alive(&f->loop), 0,
             "%s: stopping the referenced one leaves only the unreferenced one: not alive", T);
  uvtw_timer_start(b, ref_cb, 50, 0);
  uvtw_timer_unref(b);
  EXPECT_U64(!!uv_loop_alive(&f->loop), 0,
             "%s: both unreferenced (the earlier one unreferenced after its start): not alive", T);
  uvtw_timer_ref(a);
  EXPECT_U64(!!uv_loop_alive(&f->loop), 1,
             "%s: the later timer referenced again: alive (whichever is earliest)", T);
  uvtw_wheel_unref(f->wheel);
  EXPECT_U64(!!uv_loop_alive(&f->loop), 0,
             "%s: an unreferenced wheel never keeps the loop alive, whatever its timers say", T);
  uvtw_wheel_ref(f->wheel);
  EXPECT_U64(!!uv_loop_alive(&f->loop), 1, "%s: the wheel referenced again: alive", T);
  uvtw_timer_stop(a);
  uvtw_timer_stop(b);
  EXPECT_U64(!!uv_loop_alive(&f->loop), 0, "%s: nothing pending: not alive", T);
  EXPECT_U64(!!uvtw_timer_has_ref(b), 0, "%s: a stopped timer keeps its setting", T);
  uvtw_timer_init(f->wheel, b);
  EXPECT_U64(!!uvtw_timer_has_ref(b), 1, "%s: init of an inactive timer makes it referenced", T);
}

/* An unreferenced repeating timer fires while something else keeps the
 * loop alive, stays unreferenced through its re-arms, and lets uv_run
 * return when the other handle is done. */
static void unref_repeating_timer(fx_t *f, uvtw_timer_t *a, aux_t *keep) {
  const char *T = f->name;
  ref_fires = 0;
  ref_has_ref_in_cb = -1;
  uvtw_timer_start(a, ref_cb, 5, 5);
  uvtw_timer_unref(a);
  aux_init(&f->loop, keep, NULL);
  aux_start(keep, 40);
  EXPECT_I64(uv_run(&f->loop, UV_RUN_DEFAULT), 0,
             "%s: uv_run(DEFAULT) returns once the referenced helper is done", T);
  tap_ok(ref_fires >= 2, "%s: the unreferenced repeating timer fired while the loop ran (%d)", T,
         ref_fires);
  EXPECT_U64(ref_has_ref_in_cb, 0, "%s: it is still unreferenced after its re-arms", T);
  EXPECT_U64(!!uvtw_timer_is_active(a), 1, "%s: and still active after uv_run returned", T);
  EXPECT_U64(f->watchdog_fired, 0, "%s: uv_run did not need the watchdog", T);
}

static void test_timer_ref_semantics(void) {
  const char *T = "timer ref/unref";
  fx_t f;
  uvtw_timer_t a, b;
  aux_t keep;

  if (!fx_open(&f, T, NULL))
    return;
  a.data = &f;
  uvtw_timer_init(f.wheel, &a);
  uvtw_timer_init(f.wheel, &b);
  ref_is_a_setting(&f, &a);
  ref_of_an_active_timer(&f, &a);
  ref_of_two_timers(&f, &a, &b);
  unref_repeating_timer(&f, &a, &keep);
  uvtw_timer_stop(&a);
  fx_close_handle(&keep.handle);
  fx_close(&f);
}

static const tap_case_t cases[] = {
    TAP_CASE(loop_alive),          TAP_CASE(self_restart_zero_alone),
    TAP_CASE(alive_default),       TAP_CASE(alive_once),
    TAP_CASE(alive_nowait),        TAP_CASE(alive_stop),
    TAP_CASE(alive_wheel_unref),   TAP_CASE(alive_timer_unref),
    TAP_CASE(timer_ref_semantics),
};

FX_MAIN(cases)
