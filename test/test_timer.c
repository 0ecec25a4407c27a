/* The loop-thread timer API (uvtw_wheel_* and uvtw_timer_*) against the
 * contract in include/uvtw.h: errors, start/restart/stop/again,
 * repeats and what a callback sees of its own timer, get_due_in, next_due,
 * saturated timeouts, stats, wakeups, tick_ms, and that an inactive timer
 * holds nothing. Order within a pass is in test_order.c, the comparison
 * with uv_timer_t in test_twin.c, loop aliveness in test_alive.c. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"

/* ---- Basics -------------------------------------------------------------- */

static uint64_t g_marker; /* something to point at */

/* The timer's size, and uvtw_wheel_new's argument errors. */
static void basics_wheel_new_errors(fx_t *f) {
  uvtw_wheel_t *sentinel = (uvtw_wheel_t *)(void *)&g_marker;
  uvtw_wheel_t *wheel = sentinel;
  if (sizeof(void *) == 8)
    EXPECT_U64(sizeof(uvtw_timer_t), 64, "sizeof(uvtw_timer_t) is 64 bytes on 64-bit targets");
  else if (!tap_ok(sizeof(uvtw_timer_t) <= 64, "sizeof(uvtw_timer_t) is at most 64 bytes"))
    tap_diag("  expected <= 64, got %zu", sizeof(uvtw_timer_t));

  EXPECT_ERR(uvtw_wheel_new(NULL, NULL, &wheel), UV_EINVAL,
             "uvtw_wheel_new(NULL loop) returns UV_EINVAL");
  tap_ok(wheel == sentinel, "a failed uvtw_wheel_new leaves *out untouched");
  EXPECT_ERR(uvtw_wheel_new(&f->loop, NULL, NULL), UV_EINVAL,
             "uvtw_wheel_new(loop, opts, NULL out) returns UV_EINVAL");
}

/* A new wheel: its loop, the version, all-zero stats, nothing pending. */
static void basics_new_wheel(fx_t *f, uvtw_wheel_t *wheel) {
  char version[32];
  uvtw_stats_t s;
  tap_ok(uvtw_wheel_loop(wheel) == &f->loop,
         "uvtw_wheel_loop returns the loop the wheel was made on");
  snprintf(version, sizeof version, "%d.%d.%d", UVTW_VERSION_MAJOR, UVTW_VERSION_MINOR,
           UVTW_VERSION_PATCH);
  if (!tap_ok(strcmp(uvtw_version_string(), version) == 0,
              "uvtw_version_string matches the UVTW_VERSION_* macros"))
    tap_diag("  expected \"%s\", got \"%s\"", version, uvtw_version_string());

  s = fx_stats(wheel);
  tap_ok(s.active == 0 && s.started == 0 && s.stopped == 0 && s.fired == 0 && s.cascaded == 0 &&
             s.wakeups == 0 && s.wasted_wakeups == 0 && s.remote_batches == 0 && s.late_max_ms == 0,
         "a new wheel's stats are all zero");
  EXPECT_I64(uvtw_wheel_next_due(wheel), -1,
             "uvtw_wheel_next_due of a new wheel is -1 (nothing pending)");
}

/* An initialised timer: inactive, its data alone, its repeat settable. */
static void basics_timer_init(uvtw_wheel_t *wheel) {
  uvtw_timer_t timer;
  timer.data = &g_marker;
  uvtw_timer_init(wheel, &timer);
  tap_ok(timer.data == &g_marker, "uvtw_timer_init leaves data alone");
  EXPECT_U64((uint64_t)uvtw_timer_is_active(&timer), 0, "an initialized timer is inactive");
  EXPECT_U64(uvtw_timer_get_due_in(&timer), 0,
             "get_due_in of an initialized timer is 0 (inactive)");
  EXPECT_U64(uvtw_timer_get_repeat(&timer), 0, "get_repeat of an initialized timer is 0");
  uvtw_timer_set_repeat(&timer, 123);
  EXPECT_U64(uvtw_timer_get_repeat(&timer), 123, "get_repeat returns what set_repeat set");
  EXPECT_U64((uint64_t)uvtw_timer_is_active(&timer), 0, "set_repeat does not arm a timer");
}

static void test_basics(void) {
  const char *T = "basics";
  fx_t f;
  uvtw_wheel_t *wheel;

  fx_open_loop(&f, T);
  basics_wheel_new_errors(&f);
  wheel = fx_wheel_new(&f, NULL);
  if (!wheel) {
    fx_close(&f);
    return;
  }
  f.wheel = wheel;
  basics_new_wheel(&f, wheel);
  basics_timer_init(wheel);
  fx_close(&f);
}

/* ---- Argument errors ----------------------------------------------------- */

static void test_argument_errors(void) {
  const char *T = "argument errors";
  fx_t f;
  uvtw_wheel_t *wheel;
  uvtw_timer_t timer;

  if (!fx_open(&f, T, NULL))
    return;
  wheel = f.wheel;
  uvtw_timer_init(wheel, &timer);
  EXPECT_ERR(uvtw_timer_start(&timer, NULL, 10, 0), UV_EINVAL,
             "start with a NULL callback returns UV_EINVAL");
  EXPECT_U64((uint64_t)uvtw_timer_is_active(&timer), 0,
             "a start that failed leaves the timer inactive");
  EXPECT_ERR(uvtw_timer_start(NULL, fx_noop_timer_cb, 10, 0), UV_EINVAL,
             "start of a NULL timer returns UV_EINVAL");
  EXPECT_ERR(uvtw_timer_again(&timer), UV_EINVAL,
             "again on a never-started timer returns UV_EINVAL");
  uvtw_timer_set_repeat(&timer, 10);
  EXPECT_ERR(uvtw_timer_again(&timer), UV_EINVAL,
             "again on a never-started timer returns UV_EINVAL even with a repeat set");
  EXPECT_U64((uint64_t)uvtw_timer_is_active(&timer), 0, "a failed again leaves the timer inactive");
  EXPECT_ERR(uvtw_timer_stop(&timer), 0, "stop on a never-started timer returns 0");
  fx_expect_counts(wheel, 0, 0, 0, 0, "after only failed calls and a no-op stop");
  EXPECT_I64(uvtw_wheel_next_due(wheel), -1, "failed calls leave nothing pending (next_due -1)");
  fx_close(&f);
}

/* ---- Restart, stop, again ------------------------------------------------ */

static void test_restart(void) {
  const char *T = "restart";
  fx_t f;
  uvtw_wheel_t *wheel;
  probe_t a, b;
  uint64_t t0;

  if (!fx_open(&f, T, NULL))
    return;
  wheel = f.wheel;
  log_reset();
  probe_init(wheel, &a, 'a', NULL);
  probe_init(wheel, &b, 'b', NULL);
  t0 = uv_now(&f.loop);
  EXPECT_ERR(probe_start(&a, 10, 0), 0, "start returns 0");
  EXPECT_ERR(probe_start(&a, 20, 0), 0, "start on an active timer (restart) returns 0");
  EXPECT_U64(uvtw_timer_get_due_in(&a.timer), 20,
             "a restart replaces the deadline (due_in is the new timeout)");
  fx_expect_counts(wheel, 1, 2, 1, 0, "after start + restart");
  for (int i = 0; i < 1000; i++) {
    probe_start(&a, 5 + (uint64_t)(i % 50), 0);
    probe_start(&b, 50 - (uint64_t)(i % 50), 0);
  }
  probe_start(&a, 30, 0);
  probe_start(&b, 25, 0);
  /* starts: 2 + 2000 in the loop + 2; stops: 1 + (1000 + 999) + 2 (b's first was a start) */
  fx_expect_counts(wheel, 2, 2004, 2002, 0, "after 2000 more restarts of two timers");
  EXPECT_I64(uvtw_wheel_next_due(wheel), 25,
             "next_due follows the restarts (earliest is now 25 ms away)");
  uv_run(&f.loop, UV_RUN_DEFAULT);
  EXPECT_U64((uint64_t)a.fires, 1, "a timer restarted many times runs once");
  EXPECT_U64((uint64_t)b.fires, 1, "a second timer restarted many times runs once");
  if (!tap_ok(a.fires >= 1 && a.now[0] >= t0 + 30 && b.fires >= 1 && b.now[0] >= t0 + 25,
              "restarted timers run no earlier than their last deadline"))
    tap_diag("  expected a at >= %" PRIu64 " and b at >= %" PRIu64 ", got %" PRIu64 " and %" PRIu64,
             t0 + 30, t0 + 25, a.now[0], b.now[0]);
  tap_ok(strcmp(g_log, "ba") == 0, "the restarted timers ran in their final deadline order");
  fx_expect_counts(wheel, 0, 2004, 2002, 2, "after the restarted timers ran");
  fx_close(&f);
  log_reset();
}

static void test_stop(void) {
  const char *T = "stop";
  fx_t f;
  uvtw_wheel_t *wheel;
  probe_t a, b;
  aux_t keep;

  if (!fx_open(&f, T, NULL))
    return;
  wheel = f.wheel;
  log_reset();
  probe_init(wheel, &a, 'a', NULL);
  probe_init(wheel, &b, 'b', NULL);
  EXPECT_ERR(uvtw_timer_stop(&a.timer), 0, "stop on an inactive timer returns 0");
  fx_expect_counts(wheel, 0, 0, 0, 0, "after a stop of an inactive timer (not counted)");
  probe_start(&a, 20, 0);
  probe_start(&b, 30, 0);
  EXPECT_ERR(uvtw_timer_stop(&a.timer), 0, "stop on an active timer returns 0");
  EXPECT_U64((uint64_t)uvtw_timer_is_active(&a.timer), 0, "a stopped timer is inactive");
  EXPECT_U64(uvtw_timer_get_due_in(&a.timer), 0, "get_due_in of a stopped timer is 0");
  EXPECT_ERR(uvtw_timer_stop(&a.timer), 0, "a second stop returns 0");
  fx_expect_counts(wheel, 1, 2, 1, 0, "after stop + repeated stop (counted once)");
  EXPECT_I64(uvtw_wheel_next_due(wheel), 30, "next_due skips the stopped timer");
  aux_init(&f.loop, &keep, NULL);
  aux_start(&keep, 60); /* keep the loop running past both deadlines */
  uv_run(&f.loop, UV_RUN_DEFAULT);
  EXPECT_U64((uint64_t)a.fires, 0,
             "a stopped timer never runs, even when the loop passes its deadline");
  EXPECT_U64((uint64_t)b.fires, 1, "the other timer still runs");
  fx_expect_counts(wheel, 0, 2, 1, 1, "after the remaining timer ran");
  fx_close_handle(&keep.handle);
  fx_close(&f);
  log_reset();
}

static void again_stop_first(probe_t *p) {
  uvtw_timer_stop(&p->timer);
}

static void again_stop_second(probe_t *p) {
  if (p->fires >= 2)
    uvtw_timer_stop(&p->timer);
}

/* a: with repeat 0, again does nothing, as uv_timer_again does: an active
 * one-shot timer stays active, at its deadline */
static void again_with_repeat_zero(fx_t *f, probe_t *a) {
  uint64_t t0 = uv_now(&f->loop);
  probe_start(a, 50, 0);
  EXPECT_ERR(uvtw_timer_again(&a->timer), 0, "again with repeat 0 returns 0");
  EXPECT_U64((uint64_t)uvtw_timer_is_active(&a->timer), 1,
             "again with repeat 0 leaves an active one-shot timer active");
  EXPECT_U64(uvtw_timer_get_due_in(&a->timer), 50 - (uv_now(&f->loop) - t0), "... at its deadline");
  fx_expect_counts(f->wheel, 1, 1, 0, 0,
                   "after again with repeat 0 on an active timer (no change)");
  uvtw_timer_stop(&a->timer);
  EXPECT_ERR(uvtw_timer_again(&a->timer), 0, "again with repeat 0 on a stopped timer returns 0");
  EXPECT_U64((uint64_t)uvtw_timer_is_active(&a->timer), 0, "... and leaves it inactive");
  fx_expect_counts(f->wheel, 0, 1, 1, 0,
                   "after again with repeat 0 on an inactive timer (no change)");
}

/* b: again restarts an active repeating timer with timeout = repeat */
static void again_active_repeating(fx_t *f, probe_t *b) {
  uint64_t t0 = uv_now(&f->loop);
  probe_start(b, 1000, 30);
  EXPECT_ERR(uvtw_timer_again(&b->timer), 0, "again on an active repeating timer returns 0");
  EXPECT_U64((uint64_t)uvtw_timer_is_active(&b->timer), 1, "again keeps a repeating timer active");
  EXPECT_U64(uvtw_timer_get_due_in(&b->timer), 30,
             "again re-arms to timeout = repeat (due_in 30, not 1000)");
  b->deadline = t0 + 30;
  fx_expect_counts(f->wheel, 1, 3, 2, 0, "after again on an active repeating timer (a restart)");
}

/* c: again on a started-then-stopped timer arms it with the repeat */
static void again_stopped_with_repeat(fx_t *f, probe_t *c) {
  probe_start(c, 40, 0);
  uvtw_timer_stop(&c->timer);
  uvtw_timer_set_repeat(&c->timer, 20);
  EXPECT_ERR(uvtw_timer_again(&c->timer), 0,
             "again on a stopped timer with a repeat set returns 0");
  EXPECT_U64((uint64_t)uvtw_timer_is_active(&c->timer), 1,
             "again arms a stopped timer that has a repeat");
  EXPECT_U64(uvtw_timer_get_due_in(&c->timer), 20, "again arms it to timeout = repeat");
  c->deadline = uv_now(&f->loop) + 20;
  fx_expect_counts(f->wheel, 2, 5, 3, 0, "after again armed an inactive timer (a start, no stop)");
}

/* d: again on a one-shot that already ran */
static void again_after_oneshot_ran(fx_t *f, probe_t *d) {
  probe_start(d, 5, 0);
  while (d->fires == 0 && !f->watchdog_fired)
    uv_run(&f->loop, UV_RUN_ONCE);
  uvtw_timer_set_repeat(&d->timer, 15);
  d->deadline = uv_now(&f->loop) + 15;
  EXPECT_ERR(uvtw_timer_again(&d->timer), 0,
             "again on a one-shot timer that already ran returns 0");
  EXPECT_U64(uvtw_timer_get_due_in(&d->timer), 15, "... and re-arms it to timeout = repeat");
}

static void test_again(void) {
  const char *T = "again";
  fx_t f;
  probe_t a, b, c, d;

  if (!fx_open(&f, T, NULL))
    return;
  log_reset();
  probe_init(f.wheel, &a, 'a', NULL);
  probe_init(f.wheel, &b, 'b', again_stop_first);
  probe_init(f.wheel, &c, 'c', again_stop_first);
  probe_init(f.wheel, &d, 'd', again_stop_second);
  again_with_repeat_zero(&f, &a);
  again_active_repeating(&f, &b);
  again_stopped_with_repeat(&f, &c);
  again_after_oneshot_ran(&f, &d);
  uv_run(&f.loop, UV_RUN_DEFAULT);
  EXPECT_U64((uint64_t)b.fires, 1,
             "the timer re-armed by again ran (once: its callback stopped it)");
  EXPECT_U64((uint64_t)c.fires, 1, "the stopped timer armed by again ran");
  EXPECT_U64((uint64_t)d.fires, 2,
             "again on a one-shot that ran makes it run again (then its callback stopped it)");
  tap_ok(b.early == 0 && c.early == 0 && d.early == 0, "timers armed by again never run early");
  EXPECT_U64((uint64_t)a.fires, 0, "a timer stopped, then given again with repeat 0, never runs");
  fx_close(&f);
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

/* rp_main: repeats until its callback stops it, active and re-armed to
 * uv_now + repeat inside each callback. */
static void expect_repeats_until_stopped(uint64_t t0) {
  int all_active = 1, all_due = 1, all_repeat = 1;
  EXPECT_U64((uint64_t)rp_main.fires, 4,
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
}

/* rp_start, rp_again, rp_stop: a start, an again or a stop inside the
 * callback overrides the re-arm. */
static void expect_cb_call_overrides_rearm(void) {
  EXPECT_U64((uint64_t)rp_start.fires, 2,
             "start inside the callback overrides the re-arm (runs twice, not repeating)");
  EXPECT_U64(rp_due_after_start, 40, "start inside the callback sets due_in to its own timeout");
  EXPECT_U64(rp_repeat_after_start, 0, "start inside the callback sets its own repeat");
  if (rp_start.fires >= 2)
    check_intervals(&rp_start, 40,
                    "the timer restarted in its callback runs after the new timeout");
  else
    tap_ok(0, "the timer restarted in its callback runs after the new timeout");
  EXPECT_U64((uint64_t)(rp_start.fires >= 2 ? rp_start.active_in_cb[1] : -1), 0,
             "after the restart as one-shot it is inactive in its next callback");

  EXPECT_ERR(rp_again_result, 0, "again inside the callback returns 0");
  EXPECT_U64(rp_due_after_again, 25, "again inside the callback re-arms with the new repeat");
  EXPECT_U64((uint64_t)rp_again.fires, 2,
             "again inside the callback: runs once more, then stopped");
  if (rp_again.fires >= 2)
    check_intervals(&rp_again, 25, "the timer re-armed by again runs after the new repeat");
  else
    tap_ok(0, "the timer re-armed by again runs after the new repeat");

  EXPECT_U64((uint64_t)rp_stop.fires, 1,
             "stop inside the callback overrides the re-arm (never runs again)");
  EXPECT_ERR(rp_stop_result, 0, "stop inside the callback of a repeating timer returns 0");
  EXPECT_U64((uint64_t)rp_active_after_stop, 0, "the timer is inactive after that stop");
}

/* rp_norepeat, rp_oneshot, rp_late: repeat 0 set inside the callback, a
 * one-shot, and a repeating timer whose first run was late. */
static void expect_norepeat_oneshot_late(void) {
  EXPECT_U64(
      (uint64_t)rp_norepeat.fires, 2,
      "set_repeat(0) inside the callback keeps the re-arm already made, then stops repeating");
  EXPECT_U64((uint64_t)(rp_norepeat.fires >= 2 ? rp_norepeat.active_in_cb[1] : -1), 0,
             "with repeat 0 the next callback sees its timer inactive");

  EXPECT_U64((uint64_t)rp_oneshot.fires, 1, "a one-shot timer runs once");
  EXPECT_U64((uint64_t)rp_oneshot.active_in_cb[0], 0,
             "a one-shot timer is inactive inside its callback");
  EXPECT_U64(rp_oneshot.due_in_in_cb[0], 0, "get_due_in of a one-shot inside its callback is 0");

  EXPECT_U64((uint64_t)rp_late.fires, 2, "a late repeating timer runs until stopped (2 runs)");
  EXPECT_U64(
      rp_late.due_in_in_cb[0], 20,
      "a repeating timer that ran late is re-armed to uv_now + repeat, not deadline + repeat");
  check_intervals(&rp_late, 20, "after a late run the next one still waits repeat ms");
}

static void test_repeat(void) {
  const char *T = "repeat";
  fx_t f;
  uvtw_wheel_t *wheel;
  uint64_t t0;

  if (!fx_open(&f, T, NULL))
    return;
  wheel = f.wheel;
  log_reset();
  probe_init(wheel, &rp_main, 'm', rp_main_action);
  probe_init(wheel, &rp_start, 's', rp_start_action);
  probe_init(wheel, &rp_again, 'a', rp_again_action);
  probe_init(wheel, &rp_stop, 'x', rp_stop_action);
  probe_init(wheel, &rp_norepeat, 'n', rp_norepeat_action);
  probe_init(wheel, &rp_oneshot, 'o', NULL);
  t0 = uv_now(&f.loop);
  probe_start(&rp_main, 10, 15);
  EXPECT_U64(uvtw_timer_get_repeat(&rp_main.timer), 15, "start sets the repeat");
  probe_start(&rp_start, 10, 15);
  probe_start(&rp_again, 10, 15);
  probe_start(&rp_stop, 10, 15);
  probe_start(&rp_norepeat, 10, 15);
  probe_start(&rp_oneshot, 5, 0);
  probe_init(wheel, &rp_late, 'l', rp_late_action);
  probe_start(&rp_late, 5, 20);
  fx_sleep_ms(30); /* every first run is late; rp_late by >= 25 ms, more than its repeat */
  uv_run(&f.loop, UV_RUN_DEFAULT);

  expect_repeats_until_stopped(t0);
  expect_cb_call_overrides_rearm();
  expect_norepeat_oneshot_late();
  tap_ok(rp_main.early + rp_start.early + rp_again.early + rp_stop.early + rp_norepeat.early +
                 rp_oneshot.early ==
             0,
         "no repeat or first run came before its deadline");
  /* started: 7 starts + re-arms (m 4, s 1, a 2, x 1, n 1, l 2) + start in s + again in a = 20.
   * stopped: m's stop, s's restart, a's again and stop, x's stop, l's stop = 6 (all active). */
  fx_expect_counts(wheel, 0, 20, 6, 14, "after the repeat scenarios");
  fx_close(&f);
  log_reset();
}

/* ---- get_due_in ---------------------------------------------------------- */

static probe_t due_probe;
static uint64_t due_seen_at_30, due_expected_at_30;

static uint64_t ms_until(uint64_t deadline) {
  uint64_t now = uv_now(&g_fx->loop);
  return deadline > now ? deadline - now : 0;
}

static void due_check_at_30(aux_t *a) {
  (void)a;
  due_seen_at_30 = uvtw_timer_get_due_in(&due_probe.timer);
  due_expected_at_30 = ms_until(due_probe.deadline);
}

static void test_get_due_in(void) {
  const char *T = "get_due_in";
  fx_t f;
  uvtw_wheel_t *wheel;
  aux_t at30;
  probe_t over;

  if (!fx_open(&f, T, NULL))
    return;
  wheel = f.wheel;
  log_reset();
  probe_init(wheel, &due_probe, 'd', NULL);
  probe_init(wheel, &over, 'o', NULL);
  EXPECT_U64(uvtw_timer_get_due_in(&due_probe.timer), 0, "get_due_in of an inactive timer is 0");
  probe_start(&due_probe, 100, 0);
  EXPECT_U64(uvtw_timer_get_due_in(&due_probe.timer), 100,
             "get_due_in right after start is the timeout");
  aux_init(&f.loop, &at30, due_check_at_30);
  aux_start(&at30, 30);
  uv_run(&f.loop, UV_RUN_DEFAULT);
  EXPECT_U64(due_seen_at_30, due_expected_at_30,
             "get_due_in counts down with uv_now() (deadline - now)");
  EXPECT_U64((uint64_t)due_probe.fires, 1, "the timer ran");
  EXPECT_U64(uvtw_timer_get_due_in(&due_probe.timer), 0, "get_due_in after a one-shot ran is 0");

  probe_start(&over, 5, 0);
  fx_sleep_ms(20);
  uv_update_time(&f.loop);
  EXPECT_U64(uvtw_timer_get_due_in(&over.timer), 0, "get_due_in of an overdue timer is 0");
  EXPECT_I64(uvtw_wheel_next_due(wheel), 0, "next_due is 0 when a timer is overdue");
  uv_run(&f.loop, UV_RUN_DEFAULT);
  EXPECT_U64((uint64_t)over.fires, 1, "the overdue timer runs");
  tap_ok(over.early == 0 && due_probe.early == 0, "neither ran before its deadline");
  fx_close_handle(&at30.handle);
  fx_close(&f);
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

/* Like a uv_timer_t with timeout UINT64_MAX, a referenced wheel holding
 * only a saturated timer keeps uv_run going; an unreferenced helper timer
 * runs then and stops it. */
static void huge_keeps_loop_alive(fx_t *f, aux_t *watch) {
  probe_start(&huge_a, UINT64_MAX, 0);
  aux_init(&f->loop, watch, huge_stop_all);
  aux_start(watch, 30);
  uv_unref((uv_handle_t *)&watch->handle);
  probe_start(&huge_b, UINT64_MAX - 1, 0);
  probe_start(&huge_r, UINT64_MAX, 0);
  uv_run(&f->loop, UV_RUN_DEFAULT);
  EXPECT_U64((uint64_t)watch->fires, 1,
             "a referenced wheel whose pending timers are saturated keeps the loop alive, like "
             "uv_timer_t");
  EXPECT_U64((uint64_t)(huge_a.fires + huge_b.fires + huge_r.fires), 1,
             "saturated timers never ran (only the normal one, earlier)");
  if (!watch->fires) {
    uvtw_timer_stop(&huge_a.timer);
    uvtw_timer_stop(&huge_b.timer);
    uvtw_timer_stop(&huge_r.timer);
  }
}

static void test_huge_timeouts(void) {
  const char *T = "huge timeouts";
  fx_t f;
  aux_t stopper, watch;
  uvtw_stats_t s;
  uint64_t beyond_int64 = (uint64_t)INT64_MAX + 1000;

  if (!fx_open(&f, T, NULL))
    return;
  huge_wheel = f.wheel;
  log_reset();
  probe_init(huge_wheel, &huge_a, 'A', NULL);
  probe_init(huge_wheel, &huge_b, 'B', NULL);
  probe_init(huge_wheel, &huge_r, 'r', huge_r_action_real);

  EXPECT_ERR(uvtw_timer_start(&huge_a.timer, probe_cb, UINT64_MAX, 0), 0,
             "start with timeout UINT64_MAX (deadline overflows) returns 0");
  huge_a.deadline = UINT64_MAX;
  EXPECT_U64((uint64_t)uvtw_timer_is_active(&huge_a.timer), 1, "a saturated timer is active");
  EXPECT_I64(uvtw_wheel_next_due(huge_wheel), INT64_MAX,
             "next_due is INT64_MAX when only a saturated timer is pending");
  if (!tap_ok(uvtw_timer_get_due_in(&huge_a.timer) >= (uint64_t)INT64_MAX,
              "get_due_in of a saturated timer is huge (>= INT64_MAX)"))
    tap_diag("  got %" PRIu64, uvtw_timer_get_due_in(&huge_a.timer));
  EXPECT_ERR(uvtw_timer_start(&huge_b.timer, probe_cb, beyond_int64, 0), 0,
             "start with timeout INT64_MAX + 1000 returns 0");
  huge_b.deadline = UINT64_MAX;
  EXPECT_I64(uvtw_wheel_next_due(huge_wheel), INT64_MAX,
             "next_due is INT64_MAX when the earliest entry is further away than that");
  EXPECT_ERR(probe_start(&huge_r, 20, UINT64_MAX), 0, "start with a UINT64_MAX repeat returns 0");
  EXPECT_I64(uvtw_wheel_next_due(huge_wheel), 20,
             "next_due is exact with a normal timer before the huge ones");

  aux_init(&f.loop, &stopper, huge_stop_all);
  aux_start(&stopper, 60);
  uv_run(&f.loop, UV_RUN_DEFAULT);
  EXPECT_U64((uint64_t)huge_r.fires, 1, "a timer with a saturating repeat runs once");
  EXPECT_U64((uint64_t)huge_r.active_in_cb[0], 1,
             "... and stays active inside its callback (re-armed, saturated)");
  EXPECT_I64(huge_next_due_in_cb, INT64_MAX,
             "next_due is INT64_MAX once only saturated timers are left");
  EXPECT_U64((uint64_t)(huge_a.fires + huge_b.fires), 0, "saturated timers never run");
  EXPECT_U64((uint64_t)huge_active_at_stop, 1, "saturated timers are still active 60 ms later");
  EXPECT_ERR(huge_stop_results, 0, "saturated timers are stoppable (stop returns 0)");
  tap_ok(!uvtw_timer_is_active(&huge_a.timer) && !uvtw_timer_is_active(&huge_b.timer) &&
             !uvtw_timer_is_active(&huge_r.timer),
         "stopped saturated timers are inactive");
  EXPECT_I64(uvtw_wheel_next_due(huge_wheel), -1, "next_due is -1 after they were stopped");
  s = fx_stats(huge_wheel);
  EXPECT_U64(s.wakeups, 1, "saturated timers cost no wakeups (one wakeup, for the normal timer)");
  fx_expect_counts(huge_wheel, 0, 4, 3, 1, "after saturated timers were stopped");

  huge_keeps_loop_alive(&f, &watch);
  fx_close_handle(&stopper.handle);
  fx_close_handle(&watch.handle);
  fx_close(&f);
  log_reset();
}

/* ---- Wakeups ----------------------------------------------------------- */

static probe_t wk_r;

static void wk_restart_later(aux_t *a) {
  (void)a;
  probe_start(&wk_r, 50, 0);
}

/* An empty wheel, then one whose only timer was stopped, make no wakeups
 * while `keep` (the caller closes it) runs the loop; one timer makes one. */
static void wakeups_idle_and_one(fx_t *f, aux_t *keep, probe_t *w) {
  uvtw_wheel_t *wheel = f->wheel;
  uvtw_stats_t s;
  aux_init(&f->loop, keep, NULL);
  aux_start(keep, 80);
  uv_run(&f->loop, UV_RUN_DEFAULT);
  s = fx_stats(wheel);
  EXPECT_U64(s.wakeups, 0, "an empty wheel makes no wakeups over 80 ms of loop time");

  probe_init(wheel, w, 'w', NULL);
  probe_start(w, 30, 0);
  uvtw_timer_stop(&w->timer);
  aux_start(keep, 80);
  uv_run(&f->loop, UV_RUN_DEFAULT);
  s = fx_stats(wheel);
  EXPECT_U64(s.wakeups, 0, "a wheel whose only timer was stopped makes no wakeups");

  probe_start(w, 20, 0);
  aux_start(keep, 100);
  uv_run(&f->loop, UV_RUN_DEFAULT);
  s = fx_stats(wheel);
  EXPECT_U64((uint64_t)w->fires, 1, "one timer ran");
  EXPECT_U64(s.wakeups, 1, "one timer costs one wakeup, and none after it ran");
  EXPECT_U64(s.wasted_wakeups, 0, "... which was not wasted");
}

/* A timer pushed later by a restart (`restarter`, closed by the caller):
 * the wakeup armed for its first deadline may be wasted. */
static void wakeups_after_restart(fx_t *f, aux_t *restarter) {
  uvtw_wheel_t *wheel = f->wheel;
  uvtw_stats_t s;
  probe_init(wheel, &wk_r, 'r', NULL);
  probe_start(&wk_r, 30, 0);
  aux_init(&f->loop, restarter, wk_restart_later);
  aux_start(restarter, 10);
  uv_run(&f->loop, UV_RUN_DEFAULT);
  s = fx_stats(wheel);
  EXPECT_U64((uint64_t)wk_r.fires, 1, "a timer pushed later by a restart runs once");
  if (!tap_ok(s.wakeups - s.wasted_wakeups == 2 && s.wasted_wakeups <= 1,
              "after a restart, wakeups - wasted_wakeups counts only wakeups that ran callbacks"))
    tap_diag("  expected wakeups - wasted == 2 with wasted <= 1, got %" PRIu64 " - %" PRIu64,
             s.wakeups, s.wasted_wakeups);
}

static void test_wakeups(void) {
  const char *T = "wakeups";
  fx_t f;
  aux_t keep, restarter;
  probe_t w;

  if (!fx_open(&f, T, NULL))
    return;
  log_reset();
  wakeups_idle_and_one(&f, &keep, &w);
  wakeups_after_restart(&f, &restarter);
  tap_ok(w.early == 0 && wk_r.early == 0, "none of them ran early");
  fx_close_handle(&keep.handle);
  fx_close_handle(&restarter.handle);
  fx_close(&f);
  log_reset();
}

/* ---- Stats counters and late_max_ms --------------------------------------- */

/* The four counters after each kind of call, failed ones included. */
static void stats_count_calls(uvtw_wheel_t *wheel, probe_t *a, probe_t *b, probe_t *c, probe_t *l) {
  fx_expect_counts(wheel, 0, 0, 0, 0, "of a new wheel");
  probe_start(a, 50, 0);
  fx_expect_counts(wheel, 1, 1, 0, 0, "after one start");
  probe_start(b, 60, 0);
  fx_expect_counts(wheel, 2, 2, 0, 0, "after two starts");
  probe_start(a, 70, 0);
  fx_expect_counts(wheel, 2, 3, 1, 0, "after a restart (counts one start and one stop)");
  uvtw_timer_stop(&b->timer);
  fx_expect_counts(wheel, 1, 3, 2, 0, "after a stop");
  uvtw_timer_stop(&b->timer);
  fx_expect_counts(wheel, 1, 3, 2, 0, "after a stop of an inactive timer (not counted)");
  uvtw_timer_start(&b->timer, NULL, 10, 0);
  uvtw_timer_again(&c->timer);
  fx_expect_counts(wheel, 1, 3, 2, 0, "after a failed start and a failed again (not counted)");
  probe_start(l, 5, 0);
  fx_expect_counts(wheel, 2, 4, 2, 0, "after a fourth start");
}

/* After the run: late_max_ms and the wakeups, `l` made late on purpose. */
static void stats_expect_lateness(const char *T, const uvtw_stats_t *s, const probe_t *a,
                                  const probe_t *l) {
  uint64_t late_l, late_a;
  late_l = l->fires ? l->now[0] - l->deadline : 0;
  late_a = a->fires ? a->now[0] - a->deadline : 0;
  if (!tap_ok(l->fires == 1 && a->fires == 1 && l->early == 0 && a->early == 0,
              "%s: both ran once, on time or late", T))
    tap_diag("  got %d and %d runs, %d and %d early", l->fires, a->fires, l->early, a->early);
  EXPECT_U64(s->late_max_ms, late_l > late_a ? late_l : late_a,
             "stats.late_max_ms is the largest uv_now() - deadline seen at a callback");
  if (!tap_ok(late_l >= 20, "%s: the blocked loop made the timer late (test precondition)", T))
    tap_diag("  expected >= 20 ms late, got %" PRIu64, late_l);
  /* A restart and a stop happened before the loop ran, so up to two wakeups
   * may be wasted (armed for entries that were stopped); the two callbacks
   * need one or two wakeups of their own. */
  if (!tap_ok(
          s->wakeups - s->wasted_wakeups >= 1 && s->wakeups - s->wasted_wakeups <= 2 &&
              s->wasted_wakeups <= 2,
          "stats.wakeups counts the wheel's timer firings (1..2 that ran callbacks, <= 2 wasted)"))
    tap_diag("  got %" PRIu64 " wakeups, %" PRIu64 " wasted", s->wakeups, s->wasted_wakeups);
}

static void test_stats(void) {
  const char *T = "stats";
  fx_t f;
  uvtw_wheel_t *wheel;
  probe_t a, b, c, l;
  uvtw_stats_t s;

  if (!fx_open(&f, T, NULL))
    return;
  wheel = f.wheel;
  log_reset();
  probe_init(wheel, &a, 'a', NULL);
  probe_init(wheel, &b, 'b', NULL);
  probe_init(wheel, &c, 'c', NULL);
  probe_init(wheel, &l, 'l', NULL);
  stats_count_calls(wheel, &a, &b, &c, &l);
  fx_sleep_ms(30); /* l will be ~25 ms late */
  uv_run(&f.loop, UV_RUN_DEFAULT);
  s = fx_stats(wheel);
  fx_expect_counts(wheel, 0, 4, 2, 2, "after both timers ran");
  stats_expect_lateness(T, &s, &a, &l);
  fx_close(&f);
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

/* Many deadlines close together (sharing coarse slots), stopped earliest
 * first. */
static void nd_nearby_stopped_earliest_first(void) {
  size_t wrong = 0;
  uvtw_timer_t *slot = fx_xcalloc(ND_SLOT_TIMERS, sizeof *slot);
  for (int i = 0; i < ND_SLOT_TIMERS; i++) {
    uvtw_timer_init(nd_wheel, &slot[i]);
    uvtw_timer_start(&slot[i], fx_noop_timer_cb, 200 + (uint64_t)i * 3, 0);
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
  EXPECT_U64(wrong, 0, "next_due stays exact while nearby deadlines are stopped earliest first");
  free(slot);
}

/* Deadlines on upper levels, then one overdue. */
static void nd_far_and_overdue(fx_t *f, probe_t *a, probe_t *b, probe_t *o) {
  probe_start(a, 5000, 0);
  EXPECT_I64(uvtw_wheel_next_due(nd_wheel), 5000, "next_due is exact for a deadline 5 s away");
  probe_start(b, 300000, 0);
  EXPECT_I64(uvtw_wheel_next_due(nd_wheel), 5000, "a later deadline does not change it");
  probe_start(o, (uint64_t)1 << 40, 0);
  uvtw_timer_stop(&a->timer);
  EXPECT_I64(uvtw_wheel_next_due(nd_wheel), 300000, "next_due is exact for a deadline 5 min away");
  uvtw_timer_stop(&b->timer);
  EXPECT_I64(uvtw_wheel_next_due(nd_wheel), (int64_t)1 << 40,
             "next_due is exact for a deadline 2^40 ms away");
  uvtw_timer_stop(&o->timer);
  EXPECT_I64(uvtw_wheel_next_due(nd_wheel), -1, "next_due is -1 when all were stopped");

  probe_start(o, 5, 0);
  fx_sleep_ms(20);
  uv_update_time(&f->loop);
  EXPECT_I64(uvtw_wheel_next_due(nd_wheel), 0, "next_due is 0 when a timer is overdue");
  uvtw_timer_stop(&o->timer);
}

/* The loop clock moves on while the wheel is idle (`keep`, which the
 * caller closes, keeps the loop running); then deadlines count from the
 * new now. */
static void nd_after_idle_stretch(fx_t *f, aux_t *keep) {
  aux_init(&f->loop, keep, NULL);
  aux_start(keep, 150);
  uv_run(&f->loop, UV_RUN_DEFAULT);
  probe_init(nd_wheel, &nd_x, 'x', nd_x_action);
  probe_init(nd_wheel, &nd_y, 'y', nd_y_action);
  probe_init(nd_wheel, &nd_z, 'z', NULL);
  probe_start(&nd_z, 5000, 0);
  probe_start(&nd_y, 70, 0);
  probe_start(&nd_x, 10, 0);
  EXPECT_I64(uvtw_wheel_next_due(nd_wheel), 10,
             "after the wheel was idle while the clock moved on, next_due is exact");
  uv_run(&f->loop, UV_RUN_DEFAULT);
  if (!tap_ok(strcmp(g_log, "xy") == 0 && nd_x.early == 0 && nd_y.early == 0,
              "timers started after an idle stretch run in order and not early"))
    tap_diag("  expected \"xy\" with none early, got \"%s\"", g_log);
  EXPECT_I64(nd_after_x, (int64_t)nd_expect_after_x,
             "next_due inside a callback is exact (next timer)");
  EXPECT_I64(nd_after_y, (int64_t)nd_expect_after_y,
             "next_due inside a callback is exact (a far timer)");
  EXPECT_I64(uvtw_wheel_next_due(nd_wheel), -1,
             "next_due is -1 after the last timer ran or was stopped");
}

static void test_next_due(void) {
  const char *T = "next_due";
  fx_t f;
  probe_t a, b, o;
  aux_t keep;

  if (!fx_open(&f, T, NULL))
    return;
  nd_wheel = f.wheel;
  log_reset();
  probe_init(nd_wheel, &a, 'a', NULL);
  probe_init(nd_wheel, &b, 'b', NULL);
  probe_init(nd_wheel, &o, 'o', NULL);
  EXPECT_I64(uvtw_wheel_next_due(nd_wheel), -1, "next_due of an empty wheel is -1");
  probe_start(&a, 100, 0);
  EXPECT_I64(uvtw_wheel_next_due(nd_wheel), 100, "next_due is the only timer's timeout");
  probe_start(&b, 30, 0);
  EXPECT_I64(uvtw_wheel_next_due(nd_wheel), 30, "next_due follows an earlier timer");
  uvtw_timer_stop(&b.timer);
  EXPECT_I64(uvtw_wheel_next_due(nd_wheel), 100,
             "next_due is exact after the earliest timer was stopped");
  probe_start(&a, 50, 0);
  EXPECT_I64(uvtw_wheel_next_due(nd_wheel), 50, "next_due follows a restart");
  uvtw_timer_stop(&a.timer);
  EXPECT_I64(uvtw_wheel_next_due(nd_wheel), -1, "next_due is -1 after the last timer was stopped");

  nd_nearby_stopped_earliest_first();
  nd_far_and_overdue(&f, &a, &b, &o);
  nd_after_idle_stretch(&f, &keep);
  fx_close_handle(&keep.handle);
  fx_close(&f);
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

/* The probes ran by rounded deadline, then in start order. */
static void tick_expect_order(const char *T, const uint64_t want[TICK_PROBES]) {
  size_t bad_order = 0, pos[TICK_PROBES];
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
  EXPECT_U64(bad_order, 0,
             "%s: callbacks run in rounded-deadline order, equal rounded deadlines FIFO", T);
}

/* `rep` (repeat 5 ms) was re-armed to the tick after uv_now + repeat. */
static void tick_expect_repeat(const char *T, const probe_t *rep) {
  int ok_rep = 1;
  EXPECT_U64((uint64_t)rep->fires, 3, "%s: a repeating timer runs until stopped", T);
  for (int k = 0; k < rep->fires && k < PROBE_FIRES_KEPT; k++) {
    uint64_t expect_due = round_up(rep->now[k] + 5, TICK) - rep->now[k];
    if (rep->due_in_in_cb[k] != expect_due) {
      ok_rep = 0;
      tap_diag("  run %d at %" PRIu64 ": expected due_in %" PRIu64 ", got %" PRIu64, k + 1,
               rep->now[k], expect_due, rep->due_in_in_cb[k]);
    }
    if (k > 0 && rep->now[k] < round_up(rep->now[k - 1] + 5, TICK)) {
      ok_rep = 0;
      tap_diag("  run %d at %" PRIu64 ", before the rounded re-arm %" PRIu64, k + 1, rep->now[k],
               round_up(rep->now[k - 1] + 5, TICK));
    }
  }
  tap_ok(ok_rep && rep->early == 0,
         "%s: re-arms round up too (uv_now + repeat, to the tick) and never run early", T);
}

/* tick_ms 0 means 1 ms, exact. */
static void tick_zero_is_exact(void) {
  uvtw_options_t opts = {.tick_ms = 0};
  fx_t f;
  probe_t p;
  if (!fx_open(&f, "tick_ms 0", &opts))
    return;
  probe_init(f.wheel, &p, 'r', NULL);
  probe_start(&p, 7, 0);
  EXPECT_U64(uvtw_timer_get_due_in(&p.timer), 7, "tick_ms 0: deadlines are exact (1 ms ticks)");
  EXPECT_I64(uvtw_wheel_next_due(f.wheel), 7, "tick_ms 0: next_due is exact");
  uv_run(&f.loop, UV_RUN_DEFAULT);
  tap_ok(p.fires == 1 && p.early == 0, "tick_ms 0: the timer runs once, not early");
  fx_close(&f);
  log_reset();
}

static void test_tick(void) {
  const char *T = "tick_ms 16";
  fx_t f;
  uvtw_options_t opts = {.tick_ms = TICK};
  probe_t p[TICK_PROBES], rep;
  uint64_t want[TICK_PROBES];
  uint64_t now, min_want = UINT64_MAX, to_multiple, bucket_top;
  size_t bad_due = 0, bad_fire = 0;

  if (!fx_open(&f, T, &opts))
    return;
  log_reset();
  now = uv_now(&f.loop);
  to_multiple = round_up(now, TICK) - now;    /* 0 if now is on a multiple */
  bucket_top = round_up(now + 1, TICK) - now; /* timeouts 1..bucket_top share a deadline */
  /* The first two share a rounded deadline although the second one's
   * timeout is smaller: FIFO says the first runs first. */
  const uint64_t timeouts[TICK_PROBES] = {
      bucket_top, 1, 0, 5, 15, 16, 17, 31, 33, 47, to_multiple, to_multiple + TICK, 100, 200};
  for (int n = 0; n < TICK_PROBES; n++) {
    probe_init(f.wheel, &p[n], (char)('a' + n), NULL);
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
  EXPECT_U64(
      bad_due, 0,
      "%s: deadlines round up to a multiple of tick_ms of uv_now() (get_due_in), multiples stay",
      T);
  EXPECT_I64(uvtw_wheel_next_due(f.wheel), (int64_t)(min_want - now),
             "%s: next_due is the rounded earliest deadline", T);
  probe_init(f.wheel, &rep, 'R', tick_repeat_action);
  probe_start(&rep, 3, 5);
  rep.deadline = round_up(now + 3, TICK);
  uv_run(&f.loop, UV_RUN_DEFAULT);

  for (int i = 0; i < TICK_PROBES; i++) {
    if ((p[i].fires != 1 || p[i].early) && bad_fire++ < 5)
      tap_diag("  timeout %" PRIu64 ": ran %d times, first at uv_now %" PRIu64
               ", rounded deadline %" PRIu64,
               timeouts[i], p[i].fires, p[i].now[0], want[i]);
  }
  EXPECT_U64(bad_fire, 0, "%s: each timer ran once, never before its rounded deadline", T);
  tick_expect_order(T, want);
  tick_expect_repeat(T, &rep);
  fx_close(&f);
  log_reset();
  tick_zero_is_exact();
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
  fx_t f;
  uvtw_wheel_t *w1, *w2;
  probe_t a, e, *c, *d;

  if (!fx_open_more(&f, T, NULL, 1, NULL))
    return;
  w1 = f.wheel;
  w2 = f.more[0];
  log_reset();
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

  uv_run(&f.loop, UV_RUN_DEFAULT);
  EXPECT_ERR(fr_stop_b, 0, "stopping a timer due in the same pass from another callback returns 0");
  EXPECT_U64((uint64_t)fr_b_runs, 0,
             "a timer stopped and freed by another callback of the same pass never runs");
  EXPECT_U64((uint64_t)a.fires, 1, "the callback that freed it ran once");
  EXPECT_U64((uint64_t)d->fires, 1, "a timer in memory of a freed stopped timer runs normally");
  EXPECT_U64((uint64_t)e.fires, 1, "a stopped timer re-initialized on another wheel runs there");
  fx_expect_counts(w1, 0, 5, 3, 2,
                   "of the first wheel (a b c d e started; b c e stopped; a d ran)");
  fx_expect_counts(w2, 0, 1, 0, 1, "of the second wheel (e started and ran)");
  if (!tap_ok(strcmp(g_log, "ade") == 0, "the remaining timers ran in deadline order"))
    tap_diag("  expected \"ade\", got \"%s\"", g_log);
  free(d);
  fx_close(&f);
  log_reset();
}

/* Timers of two wheels on one loop, operated on in random interleaving:
 * each operation must reach its own timer's wheel and count in its stats. */
enum { TW_TIMERS = 200, TW_OPS = 4000 };
static int tw_fires[2][TW_TIMERS];
static uvtw_timer_t tw_timer[2][TW_TIMERS];

static void tw_cb(uvtw_timer_t *timer) {
  int which = timer >= tw_timer[1] && timer < tw_timer[1] + TW_TIMERS;
  tw_fires[which][timer - tw_timer[which]]++;
}

/* What the operations left: per wheel, which timers are active, and the
 * counters their stats must show. */
typedef struct tw_model_s {
  bool active[2][TW_TIMERS];
  uint64_t started[2], stopped[2], n_active[2];
} tw_model_t;

/* TW_OPS random starts and stops on either wheel; returns how many did not
 * return 0. */
static int tw_random_ops(tw_model_t *m) {
  int bad_returns = 0;
  for (int op = 0; op < TW_OPS; op++) {
    int k = (int)fx_rng_below(2), i = (int)fx_rng_below(TW_TIMERS);
    if (fx_rng_below(3) == 0) {
      bad_returns += uvtw_timer_stop(&tw_timer[k][i]) != 0;
      if (m->active[k][i]) {
        m->stopped[k]++;
        m->n_active[k]--;
      }
      m->active[k][i] = false;
    } else {
      uint64_t timeout = 1 + fx_rng_below(45); /* short: what is tested is the routing */
      bad_returns += uvtw_timer_start(&tw_timer[k][i], tw_cb, timeout, 0) != 0;
      m->started[k]++;
      if (m->active[k][i])
        m->stopped[k]++; /* a restart counts one stop */
      else
        m->n_active[k]++;
      m->active[k][i] = true;
    }
  }
  return bad_returns;
}

static void test_two_wheels_interleaved(void) {
  const char *T = "two wheels, operations interleaved";
  fx_t f;
  uvtw_wheel_t *w[2];
  tw_model_t m;

  if (!fx_open_more(&f, T, NULL, 1, NULL))
    return;
  w[0] = f.wheel;
  w[1] = f.more[0];
  memset(&m, 0, sizeof m);
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < TW_TIMERS; i++) {
      uvtw_timer_init(w[k], &tw_timer[k][i]);
      tw_fires[k][i] = 0;
    }
  EXPECT_U64((uint64_t)tw_random_ops(&m), 0, "every start and stop on either wheel returned 0");
  for (int k = 0; k < 2; k++) {
    uint64_t linked = 0;
    for (int i = 0; i < TW_TIMERS; i++)
      linked += uvtw_timer_is_active(&tw_timer[k][i]) == (m.active[k][i] ? 1 : 0);
    EXPECT_U64(linked, TW_TIMERS,
               k == 0 ? "the first wheel's timers are active exactly as started"
                      : "the second wheel's timers are active exactly as started");
    fx_expect_counts(w[k], m.n_active[k], m.started[k], m.stopped[k], 0,
                     k == 0 ? "of the first wheel after the interleaved operations"
                            : "of the second wheel after the interleaved operations");
  }
  uv_run(&f.loop, UV_RUN_DEFAULT);
  for (int k = 0; k < 2; k++) {
    uint64_t right = 0;
    for (int i = 0; i < TW_TIMERS; i++)
      right += tw_fires[k][i] == (m.active[k][i] ? 1 : 0);
    EXPECT_U64(right, TW_TIMERS,
               k == 0 ? "each of the first wheel's timers ran once if left active, else never"
                      : "each of the second wheel's timers ran once if left active, else never");
    fx_expect_counts(w[k], 0, m.started[k], m.stopped[k], m.n_active[k],
                     k == 0 ? "of the first wheel once all ran"
                            : "of the second wheel once all ran");
  }
  fx_close(&f);
}

/* ---- Wheels made and freed, operations on the right one ------------------ */

static int wr_fires[2];

static void wr_count_cb(uvtw_timer_t *timer) {
  wr_fires[(uintptr_t)timer->data]++;
}

/* A start, a restart and a stop of `timer` on `wheel`: true if each shows
 * in that wheel's stats as it should. */
static bool ops_reach(uvtw_wheel_t *wheel, uvtw_timer_t *timer) {
  uvtw_stats_t s;
  if (uvtw_timer_start(timer, wr_count_cb, 1000, 0) != 0)
    return false;
  uvtw_wheel_stats(wheel, &s);
  if (s.active != 1 || s.started != 1)
    return false;
  if (uvtw_timer_start(timer, wr_count_cb, 2000, 0) != 0)
    return false;
  uvtw_wheel_stats(wheel, &s);
  if (s.active != 1 || s.started != 2 || s.stopped != 1)
    return false;
  if (uvtw_timer_stop(timer) != 0 || uvtw_timer_is_active(timer))
    return false;
  uvtw_wheel_stats(wheel, &s);
  return s.active == 0 && s.stopped == 2 && uvtw_wheel_next_due(wheel) == -1;
}

/* Wheels come and go, and malloc often hands a new wheel the address of the
 * one just freed: a start or stop never reaches a freed wheel, nor the wrong
 * live one. 2000 wheels are each made, used and freed in turn; then two live
 * wheels are used alternately and a timer of each fires on its own wheel.
 * ASan and Valgrind see any use of a freed wheel. */
/* 2000 wheels, each made, used and freed in turn. */
static void wheels_made_after_free(fx_t *f, uvtw_wheel_t *first) {
  size_t failed = 0, at_last = 0;
  uintptr_t last = (uintptr_t)first;
  for (int k = 0; k < 2000; k++) {
    uvtw_wheel_t *w = fx_wheel_new(f, NULL);
    uvtw_timer_t tw;
    if (w == NULL) {
      failed++;
      break;
    }
    if ((uintptr_t)w == last)
      at_last++;
    uvtw_timer_init(w, &tw);
    if (!ops_reach(w, &tw))
      failed++;
    last = (uintptr_t)w;
    uvtw_wheel_close(w, NULL, NULL);
    for (int i = 0; i < 3; i++)
      uv_run(&f->loop, UV_RUN_NOWAIT);
  }
  tap_diag("of 2000 wheels, %zu were made at the address of the wheel just freed", at_last);
  EXPECT_U64(failed, 0,
             "each of 2000 wheels made after the last one used was freed gets its own timer's "
             "start, restart and stop");
}

/* Two live wheels, the thread switching between them: `t` on the first. */
static void two_live_wheels(fx_t *f, uvtw_wheel_t *first, uvtw_timer_t *t) {
  uvtw_timer_t tb, tr;
  bool ok = true;
  uvtw_wheel_t *b = fx_wheel_new(f, NULL);
  if (b == NULL)
    return;
  uvtw_timer_init(b, &tb);
  t->data = (void *)0;
  tb.data = (void *)1;
  uvtw_timer_init(first, &tr); /* a second timer on the first wheel */
  tr.data = (void *)0;
  wr_fires[0] = wr_fires[1] = 0;
  for (int k = 0; k < 100; k++) {
    ok &= uvtw_timer_start(t, wr_count_cb, (uint64_t)(5 + k % 3), 0) == 0;
    ok &= uvtw_timer_start(&tb, wr_count_cb, (uint64_t)(5 + k % 5), 0) == 0;
    ok &= uvtw_timer_stop(t) == 0;
    ok &= uvtw_timer_start(&tr, wr_count_cb, 3, 0) == 0;
    ok &= uvtw_timer_stop(&tr) == 0;
  }
  ok &= uvtw_timer_start(t, wr_count_cb, 4, 0) == 0;
  EXPECT_U64(ok, 1, "starts and stops alternating between the two wheels succeed");
  uvtw_stats_t sa = fx_stats(first), sb = fx_stats(b);
  EXPECT_U64(sa.active, 1, "the first wheel holds its one timer");
  EXPECT_U64(sa.started, 2 + 201, "... and counts its own starts only");
  EXPECT_U64(sb.active, 1, "the other wheel holds its one timer");
  EXPECT_U64(sb.started, 100, "... and counts its own starts only");
  uv_run(&f->loop, UV_RUN_DEFAULT);
  EXPECT_U64(wr_fires[0], 1, "the timer on the first wheel fired once");
  EXPECT_U64(wr_fires[1], 1, "the timer on the other wheel fired once");
  EXPECT_U64(fx_stats(first).fired, 1, "it fired on its own wheel");
  EXPECT_U64(fx_stats(b).fired, 1, "and the other on its own");
  fx_wheel_close(f, b);
}

static void test_wheels_reused(void) {
  const char *T = "wheels reused";
  fx_t f;
  uvtw_timer_t t;

  if (!fx_open(&f, T, NULL))
    return;
  uvtw_timer_init(f.wheel, &t);
  EXPECT_U64(ops_reach(f.wheel, &t), 1, "start, restart and stop on a wheel reach that wheel");
  wheels_made_after_free(&f, f.wheel);
  two_live_wheels(&f, f.wheel, &t);
  fx_close(&f);
}

/* ---- Connections freed inside their own timeout callbacks ----------------- */

enum { CONNS = 64 };

/* As real libuv programs use the wheel, against include/uvtw.h and
 * README.md:
 *
 *   freed_in_callback ....... connections freed inside their own timeout
 *                             callbacks, one-shot and repeating (ASan, Valgrind)
 */

typedef struct conn_s {
  uvtw_timer_t timeout;
  int *freed;
  char buffer[200]; /* what a connection holds besides its timer */
} conn_t;

static void conn_timeout_cb(uvtw_timer_t *timer) {
  conn_t *c = timer->data;
  if (uvtw_timer_get_repeat(timer) != 0)
    uvtw_timer_stop(timer); /* a repeating timer is active in its callback */
  ++*c->freed;
  free(c);
}

static void test_freed_in_callback(void) {
  const char *T = "freed_in_callback";
  fx_t f;
  int freed = 0;
  if (!fx_open(&f, T, NULL))
    return;
  for (int i = 0; i < CONNS; i++) {
    conn_t *c = fx_xcalloc(1, sizeof *c);
    c->freed = &freed;
    uvtw_timer_init(f.wheel, &c->timeout);
    c->timeout.data = c;
    /* Equal deadlines in groups, so one pass frees several neighbours;
     * every fourth repeats. */
    uvtw_timer_start(&c->timeout, conn_timeout_cb, 1 + (uint64_t)(i % 4), i % 4 == 3 ? 2 : 0);
  }
  uv_run(&f.loop, UV_RUN_DEFAULT);
  EXPECT_U64(freed, CONNS, "%s: every connection timed out once and freed itself", T);
  uvtw_stats_t stats = fx_stats(f.wheel);
  EXPECT_U64(stats.active, 0, "%s: nothing is left in the wheel", T);
  EXPECT_U64(stats.fired, CONNS, "%s: stats.fired counts each once", T);
  fx_close(&f);
}

/* ---- uv_walk shutdowns ---------------------------------------------------- */

static const tap_case_t cases[] = {
    TAP_CASE(basics),
    TAP_CASE(argument_errors),
    TAP_CASE(restart),
    TAP_CASE(stop),
    TAP_CASE(again),
    TAP_CASE(repeat),
    TAP_CASE(get_due_in),
    TAP_CASE(huge_timeouts),
    TAP_CASE(wakeups),
    TAP_CASE(stats),
    TAP_CASE(next_due),
    TAP_CASE(tick),
    TAP_CASE(inactive_timer_memory),
    TAP_CASE(two_wheels_interleaved),
    TAP_CASE(wheels_reused),
    TAP_CASE(freed_in_callback),
};

FX_MAIN(cases)
