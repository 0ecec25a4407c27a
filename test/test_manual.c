/* The manual clock (include/uvtw.h, "Manual clock", and the header's
 * "Manual clock" section): a wheel made with manual_clock = 1 keeps its own
 * time, which starts at uv_now(loop) and moves only with uvtw_wheel_advance
 * and uvtw_wheel_advance_next; its callbacks run only inside those calls.
 *
 * One pass: the wheel's time is set to some T and every callback due at T
 * when the pass begins runs, seeing uvtw_wheel_now() == T. An entry made
 * due during a pass waits for the next pass: the same call's pass at T + 1
 * if the call goes that far, else the next call. */
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"

static const uvtw_options_t manual_opts = {.manual_clock = 1};

/* ---- Errors ------------------------------------------------------------------ */

static uvtw_wheel_t *busy_wheel, *busy_other;
static int busy_advance, busy_next, busy_other_advance, busy_task_advance;
static int64_t busy_task_next;

static void busy_timer_cb(uvtw_timer_t *timer) {
  (void)timer;
  busy_advance = uvtw_wheel_advance(busy_wheel, 1);
  busy_next = (int)uvtw_wheel_advance_next(busy_wheel);
  busy_other_advance = uvtw_wheel_advance(busy_other, 1);
}

static void busy_task_cb(void *arg, int status) {
  (void)arg;
  (void)status;
  busy_task_advance = uvtw_wheel_advance(busy_wheel, 1);
  busy_task_next = uvtw_wheel_advance_next(busy_wheel);
}

static int closing_advance = 1;
static int64_t closing_next = 1;

static void closing_cb(uvtw_wheel_t *wheel, void *arg) {
  (void)arg;
  closing_advance = uvtw_wheel_advance(wheel, 1);
  closing_next = uvtw_wheel_advance_next(wheel);
}

/* Argument errors, and a manual call on a wheel on the loop's clock. */
static void manual_errors_arguments(fx_t *f) {
  const char *T = f->name;
  uvtw_wheel_t *bad = NULL;
  uvtw_options_t two = {.manual_clock = 2};
  EXPECT_ERR(uvtw_wheel_new(&f->loop, &two, &bad), UV_EINVAL,
             "%s: manual_clock other than 0 or 1 is UV_EINVAL", T);
  tap_ok(bad == NULL, "%s: ... and leaves *out untouched", T);
  EXPECT_ERR(uvtw_wheel_advance(NULL, 1), UV_EINVAL, "%s: advance(NULL) is UV_EINVAL", T);
  EXPECT_I64(uvtw_wheel_advance_next(NULL), UV_EINVAL, "%s: advance_next(NULL) is UV_EINVAL", T);
  EXPECT_ERR(uvtw_wheel_advance(f->wheel, 1), UV_EINVAL,
             "%s: advance on a wheel on the loop's clock is UV_EINVAL", T);
  EXPECT_I64(uvtw_wheel_advance_next(f->wheel), UV_EINVAL,
             "%s: advance_next on a wheel on the loop's clock is UV_EINVAL", T);
  EXPECT_U64(uvtw_wheel_now(f->wheel), uv_now(&f->loop),
             "%s: uvtw_wheel_now of a loop-clock wheel is uv_now(loop)", T);
}

/* Inside one of the wheel's callbacks an advance is UV_EBUSY; another
 * manual wheel may advance. */
static void manual_errors_busy(fx_t *f, uvtw_wheel_t *manual, uvtw_wheel_t *other,
                               uvtw_timer_t *timer) {
  const char *T = f->name;
  busy_wheel = manual;
  busy_other = other;
  busy_advance = busy_next = busy_other_advance = busy_task_advance = 1;
  busy_task_next = 1;
  uvtw_timer_init(manual, timer);
  uvtw_timer_start(timer, busy_timer_cb, 5, 0);
  EXPECT_ERR(uvtw_schedule(manual, 5, busy_task_cb, NULL, NULL), 0,
             "%s: a loop-thread task on a manual wheel is scheduled", T);
  EXPECT_ERR(uvtw_wheel_advance(manual, 10), 0, "%s: advance returns 0", T);
  EXPECT_ERR(busy_advance, UV_EBUSY,
             "%s: advance inside one of the wheel's timer callbacks is UV_EBUSY", T);
  EXPECT_I64(busy_next, UV_EBUSY,
             "%s: advance_next inside one of the wheel's timer callbacks is UV_EBUSY", T);
  EXPECT_ERR(busy_task_advance, UV_EBUSY,
             "%s: advance inside one of the wheel's task callbacks is UV_EBUSY", T);
  EXPECT_I64(busy_task_next, UV_EBUSY,
             "%s: advance_next inside one of the wheel's task callbacks is UV_EBUSY", T);
  EXPECT_ERR(busy_other_advance, 0,
             "%s: advancing another manual wheel from inside a callback is allowed", T);
}

/* Once the wheel is closing, and inside its close callback, an advance is
 * UV_ECANCELED. */
static void manual_errors_closing(fx_t *f, uvtw_wheel_t *manual, uvtw_timer_t *timer) {
  const char *T = f->name;
  uvtw_timer_start(timer, busy_timer_cb, 5, 0);
  uvtw_wheel_close(manual, closing_cb, NULL); /* its close callback is under test */
  f->more[0] = NULL;
  EXPECT_ERR(uvtw_wheel_advance(manual, 1), UV_ECANCELED,
             "%s: advance once the wheel is closing is UV_ECANCELED", T);
  EXPECT_I64(uvtw_wheel_advance_next(manual), UV_ECANCELED,
             "%s: advance_next once the wheel is closing is UV_ECANCELED", T);
  for (int i = 0; i < 5 && closing_advance == 1; i++)
    uv_run(&f->loop, UV_RUN_NOWAIT);
  EXPECT_ERR(closing_advance, UV_ECANCELED, "%s: advance inside the close callback is UV_ECANCELED",
             T);
  EXPECT_I64(closing_next, UV_ECANCELED,
             "%s: advance_next inside the close callback is UV_ECANCELED", T);
}

static void test_manual_errors(void) {
  const char *T = "manual clock errors";
  fx_t f;
  uvtw_wheel_t *manual, *other;
  uvtw_timer_t timer;

  if (!fx_open_more(&f, T, NULL, 2, &manual_opts))
    return;
  manual = f.more[0];
  other = f.more[1];
  manual_errors_arguments(&f);
  manual_errors_busy(&f, manual, other, &timer);
  manual_errors_closing(&f, manual, &timer);
  fx_close(&f);
}

/* ---- The wheel's own time ------------------------------------------------------- */

static void test_manual_now(void) {
  const char *T = "manual clock time";
  fx_t f;
  uvtw_timer_t timer;
  aux_t keep;

  fx_open_loop(&f, T);
  uv_update_time(&f.loop);
  uint64_t t0 = uv_now(&f.loop);
  f.wheel = fx_wheel_new(&f, &manual_opts);
  if (f.wheel == NULL) {
    fx_close(&f);
    return;
  }
  EXPECT_U64(uvtw_wheel_now(f.wheel), t0, "%s: starts at uv_now(loop)", T);
  aux_init(&f.loop, &keep, NULL);
  aux_start(&keep, 20);
  uv_run(&f.loop, UV_RUN_DEFAULT);
  tap_ok(uv_now(&f.loop) >= t0 + 20, "%s: (the loop's clock moved 20 ms)", T);
  EXPECT_U64(uvtw_wheel_now(f.wheel), t0, "%s: does not move with the loop's clock", T);
  EXPECT_ERR(uvtw_wheel_advance(f.wheel, 0), 0, "%s: advance(0) returns 0", T);
  EXPECT_U64(uvtw_wheel_now(f.wheel), t0, "%s: advance(0) leaves it", T);
  EXPECT_ERR(uvtw_wheel_advance(f.wheel, 25), 0, "%s: advance(25) returns 0", T);
  EXPECT_U64(uvtw_wheel_now(f.wheel), t0 + 25, "%s: advance(25) moves it by 25 ms", T);
  EXPECT_I64(uvtw_wheel_advance_next(f.wheel), UV_EAGAIN,
             "%s: advance_next with nothing pending is UV_EAGAIN", T);
  EXPECT_U64(uvtw_wheel_now(f.wheel), t0 + 25, "%s: ... and does not move it", T);
  uvtw_timer_init(f.wheel, &timer);
  uvtw_timer_start(&timer, fx_noop_timer_cb, 40, 0);
  EXPECT_U64(uvtw_timer_get_due_in(&timer), 40, "%s: get_due_in counts on the wheel's time", T);
  EXPECT_I64(uvtw_wheel_next_due(f.wheel), 40, "%s: next_due counts on the wheel's time", T);
  uvtw_wheel_advance(f.wheel, 15);
  EXPECT_U64(uvtw_timer_get_due_in(&timer), 25, "%s: get_due_in after advance(15)", T);
  EXPECT_I64(uvtw_wheel_next_due(f.wheel), 25, "%s: next_due after advance(15)", T);
  uvtw_timer_stop(&timer);
  uvtw_timer_start(&timer, fx_noop_timer_cb, UINT64_MAX, 0);
  EXPECT_I64(uvtw_wheel_advance_next(f.wheel), UV_EAGAIN,
             "%s: advance_next with only a saturated timer pending is UV_EAGAIN", T);
  EXPECT_ERR(uvtw_wheel_advance(f.wheel, UINT64_MAX), 0, "%s: advance(UINT64_MAX) returns 0", T);
  EXPECT_U64(uvtw_timer_is_active(&timer), 1, "%s: a saturated timer never fires, even then", T);
  uvtw_timer_stop(&timer);
  fx_close_handle(&keep.handle);
  fx_close(&f);
}

/* ---- Deadline order, FIFO, what each callback sees -------------------------- */

enum { ORD_TIMERS = 24 };

/* The names of the ORD_TIMERS probes but `skip` in the order they must
 * run: by deadline, then by start (an insertion sort). */
static void manual_expected_order(const uint64_t deadline[ORD_TIMERS],
                                  const uint64_t seq[ORD_TIMERS], int skip,
                                  char expect[ORD_TIMERS + 1]) {
  int idx[ORD_TIMERS], n = 0;
  for (int i = 0; i < ORD_TIMERS; i++) {
    if (i == skip)
      continue;
    int k = n++;
    while (k > 0 && (deadline[idx[k - 1]] > deadline[i] ||
                     (deadline[idx[k - 1]] == deadline[i] && seq[idx[k - 1]] > seq[i]))) {
      idx[k] = idx[k - 1];
      k--;
    }
    idx[k] = i;
  }
  for (int k = 0; k < n; k++)
    expect[k] = (char)('A' + idx[k]);
  expect[n] = '\0';
}

/* Each probe but `stopped` ran once, seeing the wheel's time equal to its
 * deadline; `stopped` never ran. */
static void manual_expect_ran_at_deadline(const char *T, const probe_t p[ORD_TIMERS],
                                          const uint64_t deadline[ORD_TIMERS], int stopped) {
  int wrong_fires = 0, not_at_deadline = 0;
  for (int i = 0; i < ORD_TIMERS; i++) {
    if (i == stopped)
      continue;
    if (p[i].fires >= 1 && p[i].now[0] != deadline[i] && not_at_deadline++ < 3)
      tap_diag("  timer %c: deadline %" PRIu64 ", ran seeing now %" PRIu64, 'A' + i, deadline[i],
               p[i].now[0]);
    wrong_fires += p[i].fires != 1;
  }
  EXPECT_U64(wrong_fires, 0, "%s: every timer left started ran once", T);
  EXPECT_U64(p[stopped].fires, 0, "%s: the stopped timer never ran", T);
  EXPECT_U64(not_at_deadline, 0, "%s: each callback saw uvtw_wheel_now() equal to its deadline", T);
}

static void test_manual_order(void) {
  const char *T = "manual clock order";
  fx_t f;
  probe_t p[ORD_TIMERS];
  /* Equal deadlines reached through different timeouts, far ones across
   * the wheel's levels, a restart and a stop. */
  const uint64_t timeouts[ORD_TIMERS] = {30,   10,   30,    0,    64,    65, 10, 300,
                                         4096, 4097, 70000, 63,   30,    1,  2,  0,
                                         128,  256,  1000,  5000, 65536, 3,  30, 10};
  enum { RESTARTED = 8, STOPPED = 19 };
  uint64_t deadline[ORD_TIMERS], seq[ORD_TIMERS];
  char expect[ORD_TIMERS + 1];

  if (!fx_open(&f, T, &manual_opts))
    return;
  log_reset();
  uint64_t t0 = uvtw_wheel_now(f.wheel);
  for (int i = 0; i < ORD_TIMERS; i++) {
    probe_init(f.wheel, &p[i], (char)('A' + i), NULL);
    probe_start(&p[i], timeouts[i], 0);
    deadline[i] = t0 + timeouts[i];
    seq[i] = (uint64_t)i;
  }
  uvtw_wheel_advance(f.wheel, 7);
  probe_start(&p[RESTARTED], 23, 0); /* deadline t0 + 30, after the other 30s */
  deadline[RESTARTED] = t0 + 30;
  seq[RESTARTED] = ORD_TIMERS;
  uvtw_timer_stop(&p[STOPPED].timer);
  EXPECT_ERR(uvtw_wheel_advance(f.wheel, 80000), 0, "%s: advance returns 0", T);
  EXPECT_U64(uvtw_wheel_now(f.wheel), t0 + 80007, "%s: the wheel's time is where advance put it",
             T);
  manual_expected_order(deadline, seq, STOPPED, expect);
  if (!tap_ok(strcmp(g_log, expect) == 0,
              "%s: callbacks ran in deadline order, equal deadlines in start order", T))
    tap_diag("  expected \"%s\", got \"%s\"", expect, g_log);
  manual_expect_ran_at_deadline(T, p, deadline, STOPPED);
  uvtw_stats_t s = fx_stats(f.wheel);
  EXPECT_U64(s.wakeups, 0, "%s: a manual wheel never arms its uv_timer_t (no wakeups)", T);
  EXPECT_U64(s.late_max_ms, 0, "%s: nothing ran late", T);
  fx_close(&f);
}

/* ---- Repeats re-arm on the wheel's time --------------------------------------- */

static void repeat_stop_at_5(probe_t *p) {
  if (p->fires == 5)
    uvtw_timer_stop(&p->timer);
}

static void test_manual_repeat(void) {
  const char *T = "manual clock repeat";
  fx_t f;
  probe_t r;
  int bad = 0;

  if (!fx_open(&f, T, &manual_opts))
    return;
  uint64_t t0 = uvtw_wheel_now(f.wheel);
  probe_init(f.wheel, &r, 'r', repeat_stop_at_5);
  probe_start(&r, 10, 7);
  EXPECT_ERR(uvtw_wheel_advance(f.wheel, 100), 0, "%s: advance returns 0", T);
  EXPECT_U64(r.fires, 5, "%s: a repeating timer ran until its callback stopped it", T);
  for (int k = 0; k < r.fires && k < PROBE_FIRES_KEPT; k++) {
    if (r.now[k] == t0 + 10 + 7 * (uint64_t)k && r.due_in_in_cb[k] == 7 && r.active_in_cb[k])
      continue;
    if (bad++ == 0)
      tap_diag("  run %d: now %" PRIu64 " (expected %" PRIu64 "), due_in %" PRIu64 ", active %d",
               k + 1, r.now[k], t0 + 10 + 7 * (uint64_t)k, r.due_in_in_cb[k], r.active_in_cb[k]);
  }
  EXPECT_U64(bad, 0,
             "%s: re-armed to the wheel's now + repeat before each callback (at 10, 17, 24, ...)",
             T);
  fx_close(&f);
}

/* ---- Cascades ------------------------------------------------------------------- */

/* uvtw_stats_t.cascaded counts entries moved from a coarser level to a
 * finer one, each move of each entry once. The layout (src/wheel.h,
 * wheel.c): level 0 is the lowest 12 bits of the time (4096 one-ms slots),
 * each level above one more 6-bit digit. An entry due in the wheel's own
 * 4,096-tick block is filed on level 0, one due in the 63 blocks after it
 * on level 1, any other on the level of the highest digit in which its
 * deadline and the wheel's time differ; when the wheel's time reaches the
 * start of its slot, it is filed again against that time: one move, which
 * may skip levels. A level-1 slot keeps up to four runs, each filed in
 * deadline order, which are not moved: their entries fire from them, or
 * expire whole when all are due. A restart unlinks an entry and files
 * it again, which is no cascade. The case first moves the clock to T0, a
 * multiple of 2^30, so that a deadline T0 + x (x < 2^30) differs from T0
 * in x's digits alone:
 *
 *   timer  deadline - T0               filed on       moves, at
 *   a      4095                        level 0        none
 *   b      4096                        level 1        none: one run
 *   c d e  5000, 5001, 8191            level 1        none: b's run
 *   i      4200 (started at 4000)      level 1        none: a second run
 *   j      9000, stopped at 100        level 1        none
 *   k      2^18 = 262144               level 2        to 0 at 2^18
 *   f      2^18 + 7                    level 2        to 0 at 2^18 (skips 1)
 *   g      2^18 + 3 * 4096 + 5         level 2        to 1 at 2^18, fires
 *                                                     from there
 *   p      5000, restarted at 100 to   level 2        to 1 at 2^18, fires
 *          300100                                     from there
 *   h      2^24 + 2 * 2^18 + 4096 + 1  level 3        to 2 at 2^24, to 1 at
 *                                                     2^24 + 2 * 2^18, then
 *                                                     expires whole: the
 *                                                     clock jumps past it
 *
 * 6 moves in all; counting per slot instead of per entry gives 1 at 2^18,
 * not 4. A level-1 run that is all due when the wheel's time reaches it
 * joins the expired list without a move; a slot of level 2 and up always
 * cascades. */
enum { CASCADE_ALIGN = 30 };

/* The first deadline of levels 1, 2 and 3. */
enum { CS_L1 = 1 << 12, CS_L2 = 1 << 18, CS_L3 = 1 << 24 };
static uvtw_timer_t cs_a, cs_b, cs_c, cs_d, cs_e, cs_i, cs_j, cs_k, cs_fl, cs_g, cs_p, cs_h;

/* Files entries on levels 0 to 3 (the wheel's time on a multiple of
 * 2^CASCADE_ALIGN). */
static void cascade_start_all(fx_t *f) {
  const char *T = f->name;
  uvtw_timer_t *all[] = {&cs_a, &cs_b, &cs_c,  &cs_d, &cs_e, &cs_i,
                         &cs_j, &cs_k, &cs_fl, &cs_g, &cs_p, &cs_h};
  for (size_t n = 0; n < sizeof all / sizeof all[0]; n++)
    uvtw_timer_init(f->wheel, all[n]);
  uvtw_timer_start(&cs_a, fx_noop_timer_cb, CS_L1 - 1, 0);
  uvtw_timer_start(&cs_b, fx_noop_timer_cb, CS_L1, 0);
  uvtw_timer_start(&cs_c, fx_noop_timer_cb, 5000, 0);
  uvtw_timer_start(&cs_d, fx_noop_timer_cb, 5001, 0);
  uvtw_timer_start(&cs_e, fx_noop_timer_cb, 8191, 0);
  uvtw_timer_start(&cs_j, fx_noop_timer_cb, 9000, 0);
  uvtw_timer_start(&cs_k, fx_noop_timer_cb, CS_L2, 0);
  uvtw_timer_start(&cs_fl, fx_noop_timer_cb, CS_L2 + 7, 0);
  uvtw_timer_start(&cs_g, fx_noop_timer_cb, CS_L2 + 3 * CS_L1 + 5, 0);
  uvtw_timer_start(&cs_p, fx_noop_timer_cb, 5000, 0);
  uvtw_timer_start(&cs_h, fx_noop_timer_cb, CS_L3 + 2 * CS_L2 + CS_L1 + 1, 0);
  EXPECT_U64(fx_stats(f->wheel).cascaded, 0, "%s: starting files entries, moves none", T);
}

static void test_manual_cascades(void) {
  const char *T = "manual clock cascades";
  fx_t f;

  if (!fx_open(&f, T, &manual_opts))
    return;
  uint64_t rotation = (uint64_t)1 << CASCADE_ALIGN;
  uint64_t now = uvtw_wheel_now(f.wheel);
  uvtw_wheel_advance(f.wheel, (rotation - now % rotation) % rotation);
  uint64_t t0 = uvtw_wheel_now(f.wheel);
  if (!EXPECT_U64(t0 % rotation, 0, "%s: the clock moves to a multiple of 2^%d", T,
                  CASCADE_ALIGN)) {
    fx_close(&f);
    return;
  }
  cascade_start_all(&f);
  uvtw_wheel_advance(f.wheel, 100);
  uvtw_timer_stop(&cs_j);
  uvtw_timer_start(&cs_p, fx_noop_timer_cb, 300000, 0); /* due at 300100 */
  uvtw_wheel_advance(f.wheel, 3900);
  uvtw_timer_start(&cs_i, fx_noop_timer_cb, 200, 0); /* at 4000: due at 4200, on level 1 */
  uvtw_wheel_advance(f.wheel, 95);
  EXPECT_U64(uvtw_wheel_now(f.wheel) - t0, CS_L1 - 1, "%s: (at T0 + 4095)", T);
  EXPECT_U64(fx_stats(f.wheel).cascaded, 0,
             "%s: a level-0 entry (4095) fires unmoved; a stopped one is never moved", T);

  uvtw_wheel_advance(f.wheel, 8191 - (CS_L1 - 1));
  EXPECT_U64(fx_stats(f.wheel).cascaded, 0,
             "%s: the five entries of the level-1 slot of 4096 .. 8191 fired from its two runs, "
             "unmoved; the one restarted to level 2 is no cascade",
             T);
  uvtw_wheel_advance(f.wheel, CS_L2 + 7 - 8191);
  EXPECT_U64(fx_stats(f.wheel).cascaded, 4,
             "%s: at 2^18 the four entries of a level-2 slot moved once each (two to level 0, "
             "skipping level 1; two to level 1)",
             T);
  uvtw_wheel_advance(f.wheel, 5 + 3 * CS_L1 - 7);
  EXPECT_U64(fx_stats(f.wheel).cascaded, 4,
             "%s: 2^18 + 12293 fired from its level-1 slot, after one move", T);
  uvtw_wheel_advance(f.wheel, 300100 - (CS_L2 + 3 * CS_L1 + 5));
  EXPECT_U64(fx_stats(f.wheel).cascaded, 4,
             "%s: the restarted entry fired from its level-1 slot, after one move", T);
  uvtw_wheel_advance(f.wheel, CS_L3 + 2 * CS_L2 + CS_L1 + 1 - 300100);
  EXPECT_U64(uvtw_wheel_now(f.wheel) - t0, CS_L3 + 2 * CS_L2 + CS_L1 + 1, "%s: (at T0 + 17305601)",
             T);
  EXPECT_U64(fx_stats(f.wheel).cascaded, 6,
             "%s: a level-3 entry reached in one jump moved to level 2, then 1: 6 moves in all", T);
  uvtw_stats_t s = fx_stats(f.wheel);
  EXPECT_U64(s.fired, 11, "%s: every timer but the stopped one fired", T);
  EXPECT_U64(s.active, 0, "%s: nothing is left pending", T);
  fx_close(&f);
}

/* ---- Timeout 0 from inside a pass ---------------------------------------------- */

static probe_t zp_a, zp_b;

static void zp_start_b(probe_t *p) {
  (void)p;
  probe_start(&zp_b, 0, 0);
}

static void test_manual_zero_in_pass(void) {
  const char *T = "manual clock, 0 ms from a callback";
  fx_t f;

  if (!fx_open(&f, T, &manual_opts))
    return;
  uint64_t t0 = uvtw_wheel_now(f.wheel);
  probe_init(f.wheel, &zp_a, 'a', zp_start_b);
  probe_init(f.wheel, &zp_b, 'b', NULL);

  /* The call goes past the pass: the next pass of the same call, at T + 1. */
  probe_start(&zp_a, 10, 0);
  uvtw_wheel_advance(f.wheel, 20);
  EXPECT_U64(zp_b.fires, 1, "%s: a timer started with 0 in a pass at T runs in the same call", T);
  EXPECT_U64(zp_b.now[0], t0 + 11, "%s: ... in its pass at T + 1, seeing now == T + 1", T);

  /* The call ends at T: the next call runs it, at T. */
  zp_a.fires = zp_b.fires = 0;
  uint64_t t1 = uvtw_wheel_now(f.wheel);
  probe_start(&zp_a, 10, 0);
  uvtw_wheel_advance(f.wheel, 10);
  EXPECT_U64(zp_a.fires, 1, "%s: the call that ends at T runs the pass at T", T);
  EXPECT_U64(zp_b.fires, 0, "%s: ... but not what that pass made due", T);
  EXPECT_U64(uvtw_timer_is_active(&zp_b.timer), 1, "%s: which is still pending", T);
  EXPECT_I64(uvtw_wheel_next_due(f.wheel), 0, "%s: and due (next_due 0)", T);
  EXPECT_ERR(uvtw_wheel_advance(f.wheel, 0), 0, "%s: advance(0) returns 0", T);
  EXPECT_U64(zp_b.fires, 1, "%s: the next call, advance(0), runs it", T);
  EXPECT_U64(zp_b.now[0], t1 + 10, "%s: ... at T, the time did not move", T);

  /* advance_next: already due, so the time does not move. */
  zp_a.fires = zp_b.fires = 0;
  probe_start(&zp_a, 5, 0);
  EXPECT_I64(uvtw_wheel_advance_next(f.wheel), 5, "%s: advance_next moves to the deadline (5 ms)",
             T);
  EXPECT_U64(zp_b.fires, 0, "%s: one pass only: the 0 ms start waits", T);
  EXPECT_I64(uvtw_wheel_advance_next(f.wheel), 0,
             "%s: advance_next with something due moves 0 ms and runs it", T);
  EXPECT_U64(zp_b.fires, 1, "%s: ... and runs it", T);
  EXPECT_I64(uvtw_wheel_advance_next(f.wheel), UV_EAGAIN, "%s: then nothing is pending", T);
  fx_close(&f);
}

/* ---- A timer that always restarts itself with 0 ---------------------------- */

static int self_fires, self_not_stepping;
static uint64_t self_last_now;
static uvtw_wheel_t *self_wheel;

static void self_cb(uvtw_timer_t *timer) {
  uint64_t now = uvtw_wheel_now(self_wheel);
  if (self_fires > 0 && now != self_last_now + 1)
    self_not_stepping++;
  self_last_now = now;
  self_fires++;
  uvtw_timer_start(timer, self_cb, 0, 0);
}

static void test_manual_self_restart(void) {
  const char *T = "manual clock, self-restart with 0";
  fx_t f;
  uvtw_timer_t timer;

  if (!fx_open(&f, T, &manual_opts))
    return;
  self_wheel = f.wheel;
  self_fires = self_not_stepping = 0;
  uvtw_timer_init(f.wheel, &timer);
  uvtw_timer_start(&timer, self_cb, 0, 0);
  EXPECT_ERR(uvtw_wheel_advance(f.wheel, 50), 0, "%s: advance(50) returns", T);
  EXPECT_U64(self_fires, 51, "%s: one pass per millisecond: 51 runs over 0..50 ms", T);
  EXPECT_U64(self_not_stepping, 0, "%s: each run one millisecond after the previous", T);
  EXPECT_I64(uvtw_wheel_advance_next(f.wheel), 0, "%s: advance_next returns (0 ms moved)", T);
  EXPECT_U64(self_fires, 52, "%s: ... after one pass", T);
  uvtw_timer_stop(&timer);
  EXPECT_I64(uvtw_wheel_advance_next(f.wheel), UV_EAGAIN, "%s: stopped: nothing pending", T);
  fx_close(&f);
}

/* ---- advance_next ----------------------------------------------------------------- */

/* tick_ms > 1: deadlines round up to the tick of the wheel's clock; a
 * deadline below UINT64_MAX ms whose round-up passes it saturates. */
static void advance_next_tick_16(void) {
  uvtw_options_t ticked = {.tick_ms = 16, .manual_clock = 1};
  fx_t f;
  probe_t a;
  if (!fx_open(&f, "manual clock, tick_ms 16", &ticked))
    return;
  uint64_t t0 = uvtw_wheel_now(f.wheel);
  probe_init(f.wheel, &a, 'a', NULL);
  probe_start(&a, 5, 0);
  uint64_t want = (t0 + 5 + 15) / 16 * 16;
  EXPECT_U64(uvtw_timer_get_due_in(&a.timer), want - t0,
             "manual clock, tick_ms 16: the deadline rounds up to a multiple of 16");
  EXPECT_I64(uvtw_wheel_advance_next(f.wheel), (int64_t)(want - t0),
             "manual clock, tick_ms 16: advance_next moves to the rounded deadline");
  EXPECT_U64(a.fires, 1, "manual clock, tick_ms 16: the timer ran");
  EXPECT_U64(a.fires ? a.now[0] : 0, want, "manual clock, tick_ms 16: seeing the rounded time");

  uint64_t now = uvtw_wheel_now(f.wheel);
  probe_start(&a, UINT64_MAX - 5 - now, 0);
  EXPECT_I64(uvtw_wheel_next_due(f.wheel), INT64_MAX,
             "manual clock, tick_ms 16: a deadline rounded up past UINT64_MAX ms saturates");
  EXPECT_I64(uvtw_wheel_advance_next(f.wheel), UV_EAGAIN,
             "manual clock, tick_ms 16: ...so advance_next finds nothing that can fire");
  EXPECT_U64(a.fires, 1, "manual clock, tick_ms 16: ...and it never fires");
  EXPECT_U64(!!uvtw_timer_is_active(&a.timer), 1, "manual clock, tick_ms 16: ...but stays active");
  fx_close(&f);
}

/* tick_ms 5 divides UINT64_MAX: a deadline rounded up to exactly
 * UINT64_MAX ms is the saturated one. */
static void advance_next_tick_5(void) {
  uvtw_options_t ticked = {.tick_ms = 5, .manual_clock = 1};
  fx_t f;
  probe_t a;
  if (!fx_open(&f, "manual clock, tick_ms 5", &ticked))
    return;
  probe_init(f.wheel, &a, 'a', NULL);
  probe_start(&a, UINT64_MAX - 2 - uvtw_wheel_now(f.wheel), 0);
  EXPECT_I64(uvtw_wheel_advance_next(f.wheel), UV_EAGAIN,
             "manual clock, tick_ms 5: a deadline rounded up to exactly UINT64_MAX ms never fires");
  EXPECT_U64(a.fires, 0, "manual clock, tick_ms 5: ...it did not");
  fx_close(&f);
}

/* A move of more than INT64_MAX ms reads as INT64_MAX, never as an error. */
static void advance_next_long_move(void) {
  fx_t f;
  probe_t a;
  if (!fx_open(&f, "manual clock, a long move", &manual_opts))
    return;
  probe_init(f.wheel, &a, 'a', NULL);
  probe_start(&a, UINT64_MAX - 1 - uvtw_wheel_now(f.wheel), 0);
  EXPECT_I64(uvtw_wheel_advance_next(f.wheel), INT64_MAX,
             "manual clock: advance_next past INT64_MAX ms returns INT64_MAX (>= 0)");
  EXPECT_U64(a.fires, 1, "manual clock: ...and ran the timer due there");
  fx_close(&f);
}

static void test_manual_advance_next(void) {
  const char *T = "manual clock advance_next";
  fx_t f;
  probe_t a, b, c;
  int64_t moved[4];
  int steps = 0;

  if (!fx_open(&f, T, &manual_opts))
    return;
  log_reset();
  uint64_t t0 = uvtw_wheel_now(f.wheel);
  probe_init(f.wheel, &a, 'a', NULL);
  probe_init(f.wheel, &b, 'b', NULL);
  probe_init(f.wheel, &c, 'c', NULL);
  probe_start(&a, 30, 0);
  probe_start(&b, 50, 0);
  probe_start(&c, 30, 0);
  int64_t r;
  while ((r = uvtw_wheel_advance_next(f.wheel)) >= 0 && steps < 4)
    moved[steps++] = r;
  EXPECT_U64(steps, 2, "%s: two passes (at 30 and at 50), then nothing pending", T);
  EXPECT_I64(r, UV_EAGAIN, "%s: the loop ends on UV_EAGAIN", T);
  EXPECT_I64(steps >= 1 ? moved[0] : -1, 30, "%s: the first moved 30 ms", T);
  EXPECT_I64(steps >= 2 ? moved[1] : -1, 20, "%s: the second 20 ms", T);
  if (!tap_ok(strcmp(g_log, "acb") == 0, "%s: in deadline order, FIFO", T))
    tap_diag("  expected \"acb\", got \"%s\"", g_log);
  EXPECT_U64(uvtw_wheel_now(f.wheel), t0 + 50, "%s: the wheel's time is the last deadline", T);
  fx_close(&f);
  advance_next_tick_16();
  advance_next_tick_5();
  advance_next_long_move();
}

/* ---- Tasks ----------------------------------------------------------------------- */

typedef struct remote_job_s {
  uvtw_wheel_t *wheel;
  uint64_t timeout;
  task_probe_t *probe;
  uvtw_ticket_t *ticket;
  int rc;
} remote_job_t;

static void remote_schedule(void *arg) {
  remote_job_t *j = arg;
  j->rc = uvtw_schedule(j->wheel, j->timeout, task_probe_cb, j->probe, &j->ticket);
}

static uint64_t task_seen_now;
static uvtw_wheel_t *task_wheel;

static void task_now_cb(void *arg, int status) {
  task_probe_cb(arg, status);
  task_seen_now = uvtw_wheel_now(task_wheel);
}

/* A loop-thread task runs when the wheel's time reaches its deadline; a
 * cancelled one never. */
static void manual_task_loop_thread(fx_t *f, uint64_t t0, task_probe_t *local) {
  const char *T = f->name;
  task_probe_t cancelled = {0};
  uvtw_ticket_t *ticket = NULL, *cticket = NULL;
  EXPECT_ERR(uvtw_schedule(f->wheel, 20, task_now_cb, local, &ticket), 0,
             "%s: a loop-thread task is scheduled", T);
  EXPECT_ERR(uvtw_schedule(f->wheel, 10, task_probe_cb, &cancelled, &cticket), 0,
             "%s: a second one, to cancel", T);
  EXPECT_ERR(uvtw_ticket_cancel(cticket), 0, "%s: its cancel wins", T);
  uvtw_ticket_release(cticket);
  uvtw_wheel_advance(f->wheel, 19);
  EXPECT_U64(local->calls, 0, "%s: not run before its deadline (the wheel's time + 20)", T);
  uvtw_wheel_advance(f->wheel, 1);
  EXPECT_U64(local->calls, 1, "%s: run when the wheel's time reaches it", T);
  EXPECT_U64(task_seen_now, t0 + 20, "%s: seeing uvtw_wheel_now() == its deadline", T);
  EXPECT_ERR(local->status, 0, "%s: with status 0", T);
  EXPECT_U64(cancelled.calls, 0, "%s: the cancelled task never ran", T);
  EXPECT_ERR(uvtw_ticket_cancel(ticket), UV_EALREADY, "%s: cancel after it ran is UV_EALREADY", T);
  uvtw_ticket_release(ticket);
}

/* From another thread: the deadline counts from when the wheel takes the
 * task in (at t0 + 20), not from the call. */
static void manual_task_other_thread(fx_t *f, uint64_t t0, task_probe_t *remote) {
  const char *T = f->name;
  uv_thread_t thread;
  remote_job_t job = {.wheel = f->wheel, .timeout = 20, .probe = remote};
  uv_thread_create(&thread, remote_schedule, &job);
  uv_thread_join(&thread);
  EXPECT_ERR(job.rc, 0, "%s: another thread schedules a 20 ms task", T);
  uvtw_wheel_advance(f->wheel, 5); /* takes it in at t0 + 20, then moves to t0 + 25 */
  uint64_t taken_in = t0 + 20;
  EXPECT_U64(remote->calls, 0, "%s: taken in by advance, not yet due", T);
  uvtw_wheel_advance(f->wheel, 14);
  EXPECT_U64(remote->calls, 0, "%s: not due 19 ms after it was taken in", T);
  uvtw_wheel_advance(f->wheel, 1);
  EXPECT_U64(remote->calls, 1, "%s: due 20 ms after the wheel took it in", T);
  EXPECT_U64(uvtw_wheel_now(f->wheel), taken_in + 20,
             "%s: (the wheel's time is then 20 ms after the take-in)", T);
  uvtw_ticket_release(job.ticket);
}

/* A 0 ms task from another thread: uv_run may take it in, never runs it. */
static void manual_task_zero_other_thread(fx_t *f) {
  const char *T = f->name;
  uv_thread_t thread;
  task_probe_t zero = {0};
  remote_job_t job = {.wheel = f->wheel, .timeout = 0, .probe = &zero};
  uv_thread_create(&thread, remote_schedule, &job);
  uv_thread_join(&thread);
  for (int i = 0; i < 5; i++)
    uv_run(&f->loop, UV_RUN_NOWAIT);
  fx_sleep_ms(2);
  uv_run(&f->loop, UV_RUN_NOWAIT);
  EXPECT_U64(zero.calls, 0, "%s: uv_run never runs a manual wheel's task, even a due one", T);
  EXPECT_ERR(uvtw_wheel_advance(f->wheel, 0), 0, "%s: advance(0) returns 0", T);
  EXPECT_U64(zero.calls, 1, "%s: advance(0) runs the due task", T);
  uvtw_ticket_release(job.ticket);
}

static void test_manual_tasks(void) {
  const char *T = "manual clock tasks";
  fx_t f;
  task_probe_t local = {0}, remote = {0};

  if (!fx_open(&f, T, &manual_opts))
    return;
  task_wheel = f.wheel;
  uint64_t t0 = uvtw_wheel_now(f.wheel);
  manual_task_loop_thread(&f, t0, &local);
  manual_task_other_thread(&f, t0, &remote);
  tap_ok(!remote.wrong_thread && !local.wrong_thread, "%s: callbacks ran on the loop thread", T);
  manual_task_zero_other_thread(&f);
  fx_close(&f);
}

/* ---- Close ---------------------------------------------------------------------- */

static task_probe_t mc_probes[3];
static int mc_calls_at_close_cb[3];
static int mc_close_cb_runs;

static void mc_close_cb(uvtw_wheel_t *wheel, void *arg) {
  (void)wheel;
  (void)arg;
  mc_close_cb_runs++;
  for (int i = 0; i < 3; i++)
    mc_calls_at_close_cb[i] = mc_probes[i].calls;
}

static void test_manual_close(void) {
  const char *T = "manual clock close";
  fx_t f;
  uvtw_timer_t timer;
  uvtw_ticket_t *ticket = NULL;
  uv_thread_t thread;

  if (!fx_open(&f, T, &manual_opts))
    return;
  memset(mc_probes, 0, sizeof mc_probes);
  mc_close_cb_runs = 0;
  uvtw_timer_init(f.wheel, &timer);
  uvtw_timer_start(&timer, fx_noop_timer_cb, 5, 0);
  EXPECT_ERR(uvtw_schedule(f.wheel, 5, task_probe_cb, &mc_probes[0], &ticket), 0,
             "%s: a loop-thread task with a ticket", T);
  EXPECT_ERR(uvtw_schedule(f.wheel, 0, task_probe_cb, &mc_probes[1], NULL), 0,
             "%s: a due fire-and-forget task", T);
  remote_job_t job = {.wheel = f.wheel, .timeout = 0, .probe = &mc_probes[2]};
  uv_thread_create(&thread, remote_schedule, &job);
  uv_thread_join(&thread);
  EXPECT_ERR(job.rc, 0, "%s: another thread's task, still queued", T);
  uvtw_wheel_close(f.wheel, mc_close_cb, NULL);
  EXPECT_U64(uvtw_timer_is_active(&timer), 0, "%s: the pending timer is inactive at once", T);
  EXPECT_ERR(uvtw_wheel_advance(f.wheel, 10), UV_ECANCELED,
             "%s: advance after close is UV_ECANCELED", T);
  for (int i = 0; i < 5 && mc_close_cb_runs == 0; i++)
    uv_run(&f.loop, UV_RUN_NOWAIT);
  EXPECT_U64(mc_close_cb_runs, 1, "%s: the close callback ran once", T);
  int ok = 1;
  for (int i = 0; i < 3; i++)
    ok &= mc_calls_at_close_cb[i] == 1 && mc_probes[i].calls == 1 &&
          mc_probes[i].status == UV_ECANCELED;
  if (!tap_ok(ok, "%s: every pending task ran once with UV_ECANCELED before the close callback", T))
    for (int i = 0; i < 3; i++)
      tap_diag("  task %d: calls at close cb %d, calls %d, status %s", i, mc_calls_at_close_cb[i],
               mc_probes[i].calls, tap_err_name_(mc_probes[i].status));
  EXPECT_ERR(uvtw_ticket_cancel(ticket), UV_EALREADY, "%s: cancel after close is UV_EALREADY", T);
  EXPECT_ERR(uvtw_ticket_cancel(job.ticket), UV_EALREADY,
             "%s: ... also for the task that was still queued", T);
  uvtw_ticket_release(ticket);
  uvtw_ticket_release(job.ticket);
  f.wheel = NULL; /* closed above */
  fx_close(&f);
}

/* ---- The loop does not run a manual wheel ------------------------------------------ */

static void test_manual_loop_never_alive(void) {
  const char *T = "manual clock and uv_run";
  fx_t f;
  probe_t a, b;
  task_probe_t task = {0};
  aux_t keep;

  if (!fx_open(&f, T, &manual_opts))
    return;
  probe_init(f.wheel, &a, 'a', NULL);
  probe_init(f.wheel, &b, 'b', NULL);
  probe_start(&a, 0, 0);
  probe_start(&b, 5, 1);
  EXPECT_ERR(uvtw_schedule(f.wheel, 0, task_probe_cb, &task, NULL), 0,
             "%s: a loop-thread task is scheduled", T);
  EXPECT_U64(!!uv_loop_alive(&f.loop), 0,
             "%s: pending timers and tasks of a manual wheel do not keep the loop alive", T);
  uint64_t t0 = uv_hrtime();
  EXPECT_I64(uv_run(&f.loop, UV_RUN_DEFAULT), 0, "%s: uv_run(DEFAULT) returns 0", T);
  tap_ok(uv_hrtime() - t0 < 500 * UINT64_C(1000000), "%s: ... at once", T);
  aux_init(&f.loop, &keep, NULL);
  aux_start(&keep, 20);
  uv_run(&f.loop, UV_RUN_DEFAULT);
  uv_run(&f.loop, UV_RUN_NOWAIT);
  EXPECT_U64(a.fires + b.fires + task.calls, 0,
             "%s: its callbacks never run from uv_run, even with the loop alive 20 ms", T);
  uvtw_stats_t s = fx_stats(f.wheel);
  EXPECT_U64(s.wakeups, 0, "%s: it never arms its uv_timer_t", T);
  EXPECT_ERR(uvtw_wheel_advance(f.wheel, 5), 0, "%s: advance returns 0", T);
  EXPECT_U64(a.fires, 1, "%s: advance runs the due timer", T);
  EXPECT_U64(task.calls, 1, "%s: ... and the due task", T);
  EXPECT_U64(b.fires, 1, "%s: ... and the one due at 5", T);
  uvtw_timer_stop(&b.timer);
  fx_close_handle(&keep.handle);
  fx_close(&f);
}

/* ---- A 30-second idle timeout, tested in milliseconds ------------------------------ */

/* A connection closed after 30 s without activity; each activity restarts
 * the idle timer. */
typedef struct conn_s {
  uvtw_timer_t idle;
  uvtw_wheel_t *wheel;
  int closed;
  uint64_t closed_at;
} conn_t;

static void conn_idle_cb(uvtw_timer_t *timer) {
  conn_t *c = timer->data;
  c->closed++;
  c->closed_at = uvtw_wheel_now(c->wheel);
}

static void conn_activity(conn_t *c) {
  uvtw_timer_start(&c->idle, conn_idle_cb, 30000, 0);
}

static void test_manual_idle_timeout_30s(void) {
  const char *T = "a 30 s idle timeout";
  fx_t f;
  conn_t c = {0};

  uint64_t wall0 = uv_hrtime();
  if (!fx_open(&f, T, &manual_opts))
    return;
  uint64_t t0 = uvtw_wheel_now(f.wheel);
  c.wheel = f.wheel;
  uvtw_timer_init(f.wheel, &c.idle);
  c.idle.data = &c;
  conn_activity(&c);
  uvtw_wheel_advance(f.wheel, 10000);
  conn_activity(&c); /* activity at 10 s: the timeout moves to 40 s */
  uvtw_wheel_advance(f.wheel, 29999);
  EXPECT_U64(c.closed, 0, "%s: still open 29.999 s after the last activity", T);
  uvtw_wheel_advance(f.wheel, 1);
  EXPECT_U64(c.closed, 1, "%s: closed 30 s after the last activity", T);
  EXPECT_U64(c.closed_at, t0 + 40000, "%s: at 40 s on the wheel's clock", T);
  uvtw_wheel_advance(f.wheel, 60000);
  EXPECT_U64(c.closed, 1, "%s: once", T);
  fx_close(&f);
  uint64_t wall_ms = (uv_hrtime() - wall0) / 1000000;
  if (!tap_ok(wall_ms < 500, "%s: tested in well under a second of wall time", T))
    tap_diag("  took %" PRIu64 " ms", wall_ms);
}

/* ---- The same schedule on a manual and on a real clock ---------------------------- */

/* A fixed schedule of one-shot timers started together: equal deadlines
 * reached in different start orders, restarts and stops before the run.
 * The real-clock wheel's loop runs until all have fired; the manual wheel
 * is advanced 1 ms at a time for as long. Same timers, same order. */
enum { MODEL_TIMERS = 40 };

typedef struct model_s {
  uvtw_timer_t timers[MODEL_TIMERS];
  int order[MODEL_TIMERS + 8];
  int n;
} model_t;

static void model_cb(uvtw_timer_t *timer) {
  model_t *m = timer->data;
  if (m->n < MODEL_TIMERS + 8)
    m->order[m->n] = (int)(timer - m->timers);
  m->n++;
}

static uint64_t model_schedule(uvtw_wheel_t *wheel, model_t *m) {
  uint64_t last = 0;
  m->n = 0;
  for (int i = 0; i < MODEL_TIMERS; i++) {
    uvtw_timer_init(wheel, &m->timers[i]);
    m->timers[i].data = m;
  }
  for (int i = 0; i < MODEL_TIMERS; i++) {
    uint64_t timeout = (uint64_t)((i * 37) % 23) * 3 + (uint64_t)(i % 3); /* 0..68 ms */
    uvtw_timer_start(&m->timers[i], model_cb, timeout, 0);
    if (timeout > last)
      last = timeout;
  }
  for (int i = 0; i < MODEL_TIMERS; i += 7) /* restarted: to the end of their deadline */
    uvtw_timer_start(&m->timers[i], model_cb, 30, 0);
  for (int i = 3; i < MODEL_TIMERS; i += 11)
    uvtw_timer_stop(&m->timers[i]);
  return last;
}

/* ---- the model test under the manual clock --------------------------------
 * Random starts, restarts, stops, advances and advance_next calls on a
 * manual wheel, against a reference that orders pending timers by
 * (deadline, start order): every callback must be the reference's next due
 * timer and see uvtw_wheel_now() equal to its deadline; after every call,
 * nothing due is left and the counts agree. */
enum { MM_TIMERS = 200, MM_STEPS = 200000 };

static struct {
  uvtw_timer_t timer[MM_TIMERS];
  bool pending[MM_TIMERS];
  uint64_t deadline[MM_TIMERS], seq[MM_TIMERS];
  uint64_t next_seq, limit, fired, pending_count;
  int wrong_timer, wrong_now;
  uvtw_wheel_t *wheel;
} mm;

/* The reference's next timer due by `limit`, or -1. */
static int mm_first_due(uint64_t limit) {
  int best = -1;
  for (int i = 0; i < MM_TIMERS; i++)
    if (mm.pending[i] && mm.deadline[i] <= limit &&
        (best < 0 || mm.deadline[i] < mm.deadline[best] ||
         (mm.deadline[i] == mm.deadline[best] && mm.seq[i] < mm.seq[best])))
      best = i;
  return best;
}

static void mm_cb(uvtw_timer_t *timer) {
  int i = (int)(uintptr_t)timer->data;
  if (mm_first_due(mm.limit) != i)
    mm.wrong_timer++;
  if (uvtw_wheel_now(mm.wheel) != mm.deadline[i])
    mm.wrong_now++;
  mm.pending[i] = false;
  mm.pending_count--;
  mm.fired++;
}

static uint64_t mm_earliest(void) {
  uint64_t earliest = UINT64_MAX;
  for (int i = 0; i < MM_TIMERS; i++)
    if (mm.pending[i] && mm.deadline[i] < earliest)
      earliest = mm.deadline[i];
  return earliest;
}

static void test_manual_model(void) {
  const char *T = "manual model";
  uvtw_options_t opts = {.manual_clock = 1};
  fx_t f;
  int after_bad = 0, count_bad = 0, next_bad = 0;
  if (!fx_open(&f, T, &opts))
    return;
  memset(&mm, 0, sizeof mm);
  mm.wheel = f.wheel;
  for (int i = 0; i < MM_TIMERS; i++) {
    uvtw_timer_init(f.wheel, &mm.timer[i]);
    mm.timer[i].data = (void *)(uintptr_t)i;
  }
  for (int step = 0; step < MM_STEPS; step++) {
    int i = (int)fx_rng_below(MM_TIMERS);
    uint64_t op = fx_rng_below(100), now = uvtw_wheel_now(f.wheel);
    if (op < 45) { /* start or restart, on any level */
      uint64_t timeout = op < 30 ? fx_rng_below(70) : fx_rng_below((uint64_t)1 << fx_rng_below(24));
      if (uvtw_timer_start(&mm.timer[i], mm_cb, timeout, 0) != 0)
        count_bad++;
      mm.pending_count += !mm.pending[i];
      mm.pending[i] = true;
      mm.deadline[i] = now + timeout;
      mm.seq[i] = mm.next_seq++;
    } else if (op < 65) {
      uvtw_timer_stop(&mm.timer[i]);
      mm.pending_count -= mm.pending[i];
      mm.pending[i] = false;
    } else if (op < 90) { /* time passes: a little, or far */
      uint64_t ms = op < 85 ? fx_rng_below(50) : fx_rng_below(500000);
      mm.limit = now + ms;
      if (uvtw_wheel_advance(f.wheel, ms) != 0 || uvtw_wheel_now(f.wheel) != mm.limit)
        count_bad++;
    } else {
      uint64_t earliest = mm_earliest();
      mm.limit = earliest < now ? now : earliest;
      int64_t moved = uvtw_wheel_advance_next(f.wheel);
      if (earliest == UINT64_MAX ? moved != UV_EAGAIN : moved != (int64_t)(mm.limit - now))
        next_bad++;
    }
    if (mm_first_due(uvtw_wheel_now(f.wheel)) >= 0 && op >= 65)
      after_bad++; /* an advance left something due */
    if (fx_stats(f.wheel).active != mm.pending_count)
      count_bad++;
  }
  tap_diag("%s: %d steps, %" PRIu64 " fired", T, MM_STEPS, mm.fired);
  EXPECT_U64(mm.wrong_timer, 0, "%s: every callback is the reference's next due timer", T);
  EXPECT_U64(mm.wrong_now, 0, "%s: every callback sees uvtw_wheel_now() equal to its deadline", T);
  EXPECT_U64(after_bad, 0, "%s: no advance leaves a due timer behind", T);
  EXPECT_U64(next_bad, 0, "%s: advance_next moves to the earliest deadline (UV_EAGAIN if none)", T);
  EXPECT_U64(count_bad, 0, "%s: calls succeed, the clock lands on its target, active matches", T);
  tap_ok(mm.fired > 1000, "%s: the run fired timers (%" PRIu64 ")", T, mm.fired);
  for (int i = 0; i < MM_TIMERS; i++)
    uvtw_timer_stop(&mm.timer[i]);
  fx_close(&f);
}

static void test_manual_matches_real_clock(void) {
  const char *T = "manual clock against the real clock";
  fx_t f;
  static model_t real, manual;

  if (!fx_open(&f, T, NULL))
    return;
  uv_update_time(&f.loop);
  uint64_t last = model_schedule(f.wheel, &real);
  uint64_t t0 = uv_now(&f.loop);
  uv_run(&f.loop, UV_RUN_DEFAULT);
  uint64_t ran_ms = uv_now(&f.loop) - t0;
  fx_close(&f);

  if (!fx_open(&f, T, &manual_opts))
    return;
  model_schedule(f.wheel, &manual);
  for (uint64_t ms = 0; ms < (ran_ms > last ? ran_ms : last); ms++)
    uvtw_wheel_advance(f.wheel, 1);
  EXPECT_U64(manual.n, real.n, "%s: the same number of callbacks (%d)", T, real.n);
  int first_bad = -1;
  for (int k = 0; k < real.n && k < manual.n && k < MODEL_TIMERS; k++)
    if (real.order[k] != manual.order[k]) {
      first_bad = k;
      break;
    }
  if (!tap_ok(first_bad < 0 && real.n == manual.n,
              "%s: the same timers fired in the same order (real loop ran %" PRIu64 " ms)", T,
              ran_ms))
    if (first_bad >= 0)
      tap_diag("  first difference at callback %d: real clock timer %d, manual clock timer %d",
               first_bad, real.order[first_bad], manual.order[first_bad]);
  fx_close(&f);
}

static const tap_case_t cases[] = {
    TAP_CASE(manual_errors),
    TAP_CASE(manual_now),
    TAP_CASE(manual_order),
    TAP_CASE(manual_repeat),
    TAP_CASE(manual_cascades),
    TAP_CASE(manual_zero_in_pass),
    TAP_CASE(manual_self_restart),
    TAP_CASE(manual_advance_next),
    TAP_CASE(manual_tasks),
    TAP_CASE(manual_close),
    TAP_CASE(manual_loop_never_alive),
    TAP_CASE(manual_idle_timeout_30s),
    TAP_CASE(manual_matches_real_clock),
    TAP_CASE(manual_model),
};

FX_MAIN(cases)
