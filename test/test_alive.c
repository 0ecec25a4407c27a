/* Loop aliveness (../shared/spec/API.md, "The wheel" and the per-timer
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

static void test_loop_alive(void) {
  const char *T = "loop aliveness";
  fx_t f;
  uvtw_wheel_t *wheel;
  aux_t stopper, keep;
  uint64_t t0;

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

  uvtw_wheel_unref(wheel);
  uvtw_wheel_unref(wheel);
  probe_start(&lv_w, 100, 0);
  lv_arm_watch();
  uv_run(&f.loop, UV_RUN_DEFAULT);
  EXPECT_U64(
      (uint64_t)(lv_w.fires + lv_watch.fires), 0,
      "an unreferenced wheel with a pending timer does not keep uv_run(DEFAULT) from returning");
  EXPECT_U64((uint64_t)uvtw_timer_is_active(&lv_w.timer), 1, "... and the timer stays pending");

  uvtw_wheel_ref(wheel);
  lv_arm_watch();
  uv_run(&f.loop, UV_RUN_DEFAULT);
  EXPECT_U64(
      (uint64_t)lv_w.fires, 1,
      "once referenced again (unref twice, ref once), the wheel keeps uv_run until the timer ran");
  EXPECT_U64((uint64_t)lv_watch.fires, 0, "... and uv_run then returns by itself");
  tap_ok(lv_w.early == 0, "... not before its deadline");

  lv_w.fires = 0;
  t0 = uv_now(&f.loop);
  probe_start(&lv_w, 2000, 0);
  aux_init(&f.loop, &stopper, lv_stop_w);
  aux_start(&stopper, 10);
  lv_arm_watch();
  uv_run(&f.loop, UV_RUN_DEFAULT);
  if (!tap_ok(lv_w.fires == 0 && uv_now(&f.loop) - t0 < 2000 && lv_watch.fires == 0,
              "stopping the last pending timer lets uv_run return at once"))
    tap_diag("  expected return after ~10 ms with no callback, got %" PRIu64 " ms and %d callbacks",
             uv_now(&f.loop) - t0, lv_w.fires);

  uvtw_wheel_unref(wheel);
  probe_start(&lv_w, 20, 0);
  aux_init(&f.loop, &keep, NULL);
  aux_start(&keep, 60);
  lv_arm_watch();
  uv_run(&f.loop, UV_RUN_DEFAULT);
  EXPECT_U64((uint64_t)lv_w.fires, 1,
            "an unreferenced wheel still runs its timers while the loop is alive");
  tap_ok(lv_w.early == 0, "... not before their deadline");
  uvtw_wheel_ref(wheel);

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


static const tap_case_t cases[] = {
    TAP_CASE(loop_alive),
    TAP_CASE(self_restart_zero_alone),
};

FX_MAIN(cases)
