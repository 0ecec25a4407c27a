/* A wheel timer against a uv_timer_t twin on the same loop and the same
 * libuv, decided at run time (guarantee 2 in README.md): every
 * wheel timer has a uv_timer_t started at the same moment with the same
 * timeout, and both record the loop iteration they ran in (the fixture's
 * uv_prepare_t counter). Whatever libuv's timer phase does on the version
 * the test runs on, the twins must agree, with the two exceptions of the
 * rule "a wheel runs at most one pass per loop iteration":
 *   - an entry made due from inside a wheel callback runs in the next
 *     iteration, so starts from a wheel callback use timeouts > 0 here;
 *   - on libuv < 1.48, a start with a due deadline (timeout 0) from a
 *     uv_timer_t callback that runs after the wheel's pass in the same
 *     timer phase: the uv_timer_t twin runs in that same phase, the wheel
 *     timer exactly one iteration later (on libuv >= 1.48 both run in the
 *     next iteration, together). The test tells such starts apart exactly:
 *     an unreferenced uv_prepare_t of the test records the wheel's
 *     stats.wakeups once per iteration (a prepare runs once between two
 *     timer phases on every libuv), so a uv_timer_t callback that sees
 *     another count runs after the wheel's pass of its timer phase. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"

/* ---- Same loop iteration as uv_timer_t, order, never early --------------- */

typedef struct pair_s {
  uvtw_timer_t w;
  uv_timer_t u;
  uint64_t timeout;
  uint64_t deadline; /* uv_now() at the latest start + timeout */
  uint64_t seq;      /* order of the latest start among all starts */
  uint64_t w_iter, u_iter, w_now;
  int w_fires, u_fires;
  /* The latest start was due at once and made after the wheel's pass of
   * the timer phase under way, on libuv < 1.48: the wheel timer runs one
   * iteration after its twin (see the top). */
  bool after_pass;
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
  /* where starts come from: the wheel's pass (see the top) */
  bool in_uv_timer_cb;     /* eq_start is called from a uv_timer_t callback */
  bool timer_phase_twice;  /* libuv < 1.48: runs a uv_timer_t started with 0 in that phase */
  uint64_t wakeups_before; /* stats.wakeups at the last prepare phase */
  uv_prepare_t prepare;
  /* staggered driver */
  uv_timer_t driver;
  int step, steps;
  uint64_t t0;
} eq;

static void eq_w_cb(uvtw_timer_t *timer) {
  pair_t *p = timer->data;
  p->w_fires++;
  p->w_iter = g_fx->iter;
  p->w_now = uv_now(eq.loop);
  if (eq.norder < eq.order_cap)
    eq.order[eq.norder++] = (size_t)(p - eq.pairs);
  if (p->block_w_ms)
    fx_sleep_ms(p->block_w_ms);
}

static void eq_u_cb(uv_timer_t *handle) {
  pair_t *p = handle->data;
  p->u_fires++;
  p->u_iter = g_fx->iter;
  if (p->block_u_ms)
    fx_sleep_ms(p->block_u_ms);
}

/* Once per loop iteration, between two timer phases. */
static void eq_prepare_cb(uv_prepare_t *handle) {
  (void)handle;
  eq.wakeups_before = fx_stats(eq.wheel).wakeups;
}

static void eq_reset(uv_loop_t *loop, uvtw_wheel_t *wheel, size_t cap) {
  memset(&eq, 0, sizeof eq);
  eq.loop = loop;
  eq.wheel = wheel;
  eq.timer_phase_twice = uv_version() < (1u << 16 | 48u << 8);
  uv_prepare_init(loop, &eq.prepare);
  uv_prepare_start(&eq.prepare, eq_prepare_cb);
  uv_unref((uv_handle_t *)&eq.prepare);
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
  p->after_pass = eq.timer_phase_twice && eq.in_uv_timer_cb && p->deadline <= uv_now(eq.loop) &&
                  fx_stats(eq.wheel).wakeups != eq.wakeups_before;
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
/* What eq_verify counts over the pairs. */
typedef struct eq_tally_s {
  size_t bad_fires, bad_iter, early, compared, after_pass;
  uint64_t late_max;
} eq_tally_t;

/* Pair `i`: its callbacks, its iteration against its twin's, and its
 * lateness, counted into `n` (the first few wrong ones shown). */
static void eq_tally_pair(size_t i, const pair_t *p, eq_tally_t *n) {
  int want = p->stopped ? 0 : 1;
  if (p->w_fires != want || p->u_fires != want) {
    if (n->bad_fires++ < 5)
      tap_diag("  timer %zu (timeout %" PRIu64 ", %s): wheel timer ran %d times, its "
               "uv_timer_t twin %d times, expected %d each",
               i, p->timeout, p->stopped ? "stopped" : "not stopped", p->w_fires, p->u_fires, want);
  }
  if (p->w_fires >= 1 && p->u_fires >= 1) {
    n->compared++;
    n->after_pass += p->after_pass;
    uint64_t want_iter = p->u_iter + (p->after_pass ? 1 : 0);
    if (p->w_iter != want_iter && n->bad_iter++ < 5)
      tap_diag("  timer %zu (timeout %" PRIu64 ", deadline %" PRIu64 "%s): wheel timer ran in "
               "loop iteration %" PRIu64 ", its uv_timer_t twin in iteration %" PRIu64,
               i, p->timeout, p->deadline,
               p->after_pass ? ", started due after the wheel's pass" : "", p->w_iter, p->u_iter);
  }
  if (p->w_fires >= 1) {
    if (p->w_now < p->deadline) {
      if (n->early++ < 5)
        tap_diag("  timer %zu ran at uv_now %" PRIu64 ", before its deadline %" PRIu64, i, p->w_now,
                 p->deadline);
    } else if (p->w_now - p->deadline > n->late_max) {
      n->late_max = p->w_now - p->deadline;
    }
  }
}

/* Callbacks out of deadline-then-start order (the first few shown). */
static size_t eq_bad_order(void) {
  size_t bad_order = 0;
  for (size_t k = 1; k < eq.norder; k++) {
    const pair_t *a = &eq.pairs[eq.order[k - 1]];
    const pair_t *b = &eq.pairs[eq.order[k]];
    if (eq_before(b, a) && bad_order++ < 5)
      tap_diag("  callback %zu ran timer %zu (deadline %" PRIu64 ", start #%" PRIu64
               ") after timer %zu (deadline %" PRIu64 ", start #%" PRIu64 ")",
               k, eq.order[k], b->deadline, b->seq, eq.order[k - 1], a->deadline, a->seq);
  }
  return bad_order;
}

static uint64_t eq_verify(const char *test) {
  eq_tally_t n;

  memset(&n, 0, sizeof n);

  if (!tap_ok(eq.start_failures == 0, "%s: every uvtw_timer_start returned 0", test))
    tap_diag("  expected 0 failures, got %d (last %s)", eq.start_failures,
             tap_err_name_(eq.last_start_error));
  for (size_t i = 0; i < eq.used; i++)
    eq_tally_pair(i, &eq.pairs[i], &n);
  size_t bad_order = eq_bad_order();
  if (!tap_ok(n.bad_fires == 0,
              "%s: every started wheel timer (and uv_timer_t twin) ran exactly once, every stopped "
              "one never",
              test))
    tap_diag("  expected 0 timers with a wrong number of callbacks, got %zu of %zu", n.bad_fires,
             eq.used);
  if (!tap_ok(n.bad_iter == 0 && n.compared > 0,
              "%s: each wheel timer ran in the same loop iteration as its uv_timer_t twin, but "
              "one iteration after it if started due from a uv_timer_t callback after the wheel's "
              "pass of that timer phase (libuv < 1.48)",
              test))
    tap_diag("  expected 0 of %zu to differ, got %zu", n.compared, n.bad_iter);
  tap_diag("%s: %zu of %zu twins started due after the wheel's pass of their timer phase", test,
           n.after_pass, n.compared);
  if (!tap_ok(n.early == 0, "%s: no wheel callback ran with uv_now() below its deadline", test))
    tap_diag("  expected 0 early callbacks, got %zu", n.early);
  if (!tap_ok(bad_order == 0,
              "%s: callbacks ran in nondecreasing deadline order, equal deadlines in start order",
              test))
    tap_diag("  expected 0 out-of-order callbacks, got %zu of %zu", bad_order, eq.norder);
  return n.late_max;
}

static void eq_close_twins(void) {
  for (size_t i = 0; i < eq.used; i++)
    fx_close_handle(&eq.pairs[i].u);
  fx_close_handle(&eq.prepare);
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
  uvtw_stats_t s = fx_stats(wheel);
  size_t distinct = eq_distinct_deadlines();
  EXPECT_U64(s.wasted_wakeups, 0, "%s: no wasted wakeups when nothing was stopped", T);
  if (!tap_ok(s.wakeups >= 1 && s.wakeups <= distinct, "%s: %s", T, why))
    tap_diag("  expected 1..%zu wakeups, got %" PRIu64, distinct, s.wakeups);
  return s;
}

/* Closes the twins, the wheel and the loop of an eq_* test. */
static void eq_finish(fx_t *f) {
  eq_close_twins();
  fx_close(f);
  eq_free();
}

enum { STATIC_PAIRS = 3000 };

/* Thousands of timers started together, many with equal timeouts; one
 * uv_timer_t callback and one wheel callback block the loop, so that many
 * deadlines are overdue when it wakes. No stops: so no wasted wakeups. */
static void test_twin_thousands(void) {
  const char *T = "same iteration as uv_timer_t";
  fx_t f;
  uvtw_wheel_t *wheel;
  uvtw_stats_t s;
  uint64_t late_max;

  if (!fx_open(&f, T, NULL))
    return;
  wheel = f.wheel;
  eq_reset(&f.loop, wheel, STATIC_PAIRS);
  for (size_t i = 0; i < STATIC_PAIRS; i++) {
    pair_t *p = eq_new_pair();
    uint64_t kind = fx_rng_below(10);
    uint64_t timeout = kind == 0 ? 0 : kind < 7 ? fx_rng_below(60) * 5 : fx_rng_below(400);
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
  EXPECT_U64(fx_stats(wheel).active, STATIC_PAIRS, "%s: stats.active counts every armed timer", T);
  uv_run(&f.loop, UV_RUN_DEFAULT);

  late_max = eq_verify(T);
  if (!tap_ok(late_max >= 50, "%s: the blocked callbacks left timers overdue (test precondition)",
              T))
    tap_diag("  expected some callback >= 50 ms late, the latest was %" PRIu64 " ms", late_max);
  fx_expect_counts(wheel, 0, eq.starts, eq.stops, eq.starts,
                   "after thousands of one-shot timers ran");
  s = eq_check_wakeups(
      wheel, T, "the wheel woke only for due callbacks (1 <= wakeups <= distinct deadlines)");
  EXPECT_U64(s.late_max_ms, late_max,
             "%s: stats.late_max_ms is the largest uv_now() - deadline seen", T);
  eq_finish(&f);
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
  if (fx_rng_below(3) == 0)
    return fx_rng_below(70);
  target =
      eq.t0 + stagger_targets[fx_rng_below(sizeof stagger_targets / sizeof stagger_targets[0])];
  return target > now ? target - now : 0;
}

/* A timer that neither ran nor was stopped, and whose twin has not run yet
 * (deadline in the future), so that touching both keeps them in step. */
static pair_t *stagger_pick_pending(uint64_t now) {
  for (int tries = 0; tries < 20 && eq.used > 0; tries++) {
    pair_t *p = &eq.pairs[fx_rng_below(eq.used)];
    if (!p->stopped && p->deadline > now && p->w_fires == 0 && uvtw_timer_is_active(&p->w))
      return p;
  }
  return NULL;
}

static void stagger_step(uv_timer_t *handle) {
  uint64_t now = uv_now(eq.loop);
  eq.in_uv_timer_cb = true;
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
  eq.in_uv_timer_cb = false;
  if (eq.step == STAGGER_STEPS / 2)
    fx_sleep_ms(60);
  if (++eq.step == eq.steps)
    uv_timer_stop(handle);
}

/* Timers started, restarted, stopped, and stopped and started again at
 * once, at many different moments (from a uv_timer_t callback), each with
 * a uv_timer_t twin treated the same way. Some timeouts are 0 (a target
 * already passed), and the driver may run before or after the wheel's
 * pass of its timer phase: the second exception at the top. */
static void test_twin_staggered(void) {
  const char *T = "staggered starts, restarts and stops";
  fx_t f;
  uvtw_wheel_t *wheel;

  if (!fx_open(&f, T, NULL))
    return;
  wheel = f.wheel;
  eq_reset(&f.loop, wheel, STAGGER_STEPS * STAGGER_NEW);
  eq.steps = STAGGER_STEPS;
  eq.t0 = uv_now(&f.loop);
  uv_timer_init(&f.loop, &eq.driver);
  uv_timer_start(&eq.driver, stagger_step, 1, 5);
  uv_run(&f.loop, UV_RUN_DEFAULT);

  eq_verify(T);
  fx_expect_counts(wheel, 0, eq.starts, eq.stops, eq.starts - eq.stops,
                   "after staggered starts, restarts and stops");
  fx_close_handle(&eq.driver);
  eq_finish(&f);
}

enum { LEVEL_TIMERS = 400 };

/* Timeouts from 1 ms to ~1.1 s cross several level boundaries of a 64-slot
 * wheel; moving them between levels must not cost wakeups of its own. */
static void test_twin_across_levels(void) {
  const char *T = "no wasted wakeups across levels";
  fx_t f;
  uvtw_wheel_t *wheel;
  uvtw_stats_t s;

  if (!fx_open(&f, T, NULL))
    return;
  wheel = f.wheel;
  eq_reset(&f.loop, wheel, LEVEL_TIMERS);
  for (size_t i = 0; i < LEVEL_TIMERS; i++) {
    pair_t *p = eq_new_pair();
    uint64_t kind = fx_rng_below(4);
    uint64_t timeout = kind == 0   ? 1 + fx_rng_below(64)
                       : kind == 1 ? 64 * (1 + fx_rng_below(16)) + fx_rng_below(3)
                                   : 1 + fx_rng_below(1100);
    eq_start(p, timeout);
  }
  uv_run(&f.loop, UV_RUN_DEFAULT);
  eq_verify(T);
  s = eq_check_wakeups(wheel, T, "at most one wakeup per distinct deadline (cascades cost none)");
  tap_diag("%s: %" PRIu64 " wakeups for %zu deadlines, %" PRIu64 " cascaded", T, s.wakeups,
           eq_distinct_deadlines(), s.cascaded);
  fx_expect_counts(wheel, 0, LEVEL_TIMERS, 0, LEVEL_TIMERS, "after timers across levels ran");
  eq_finish(&f);
}

/* ---- Twins started from each kind of callback (issue 16) ------------------- */

/* Where the pairs are started from. */
typedef enum { FROM_TOP, FROM_TIMER_CB, FROM_CHECK_CB, FROM_IDLE_CB, FROM_WHEEL_CB } start_from_t;

static const char *const from_name[] = {"top level", "a uv_timer_t callback",
                                        "a uv_check_t callback", "a uv_idle_t callback",
                                        "a wheel callback"};

/* The timeouts every context starts, twice each so that equal deadlines
 * meet; a wheel callback skips 0 (the documented exception). */
static const uint64_t ctx_timeouts[] = {0, 0, 1, 2, 1, 3, 5, 2, 10, 17, 64, 65};
enum { CTX_TIMEOUTS = sizeof ctx_timeouts / sizeof ctx_timeouts[0], CTX_ROUNDS = 3 };

static struct {
  start_from_t from;
  int rounds;
  uv_timer_t timer;
  uv_check_t check;
  uv_idle_t idle;
  uvtw_timer_t wheel_timer;
  uv_timer_t waker; /* a check callback runs only after poll returns */
  uint64_t iter_of_last_round;
} ctx;

static void noop_uv_timer_cb(uv_timer_t *handle) {
  (void)handle;
}

/* One round: a pair per timeout, each pair started at this moment. */
static void ctx_start_round(void) {
  for (size_t i = 0; i < CTX_TIMEOUTS; i++) {
    if (ctx.from == FROM_WHEEL_CB && ctx_timeouts[i] == 0)
      continue;
    pair_t *p = eq_new_pair();
    if (p != NULL)
      eq_start(p, ctx_timeouts[i]);
  }
  ctx.rounds++;
  ctx.iter_of_last_round = g_fx->iter;
}

static void ctx_timer_cb(uv_timer_t *handle) {
  eq.in_uv_timer_cb = true;
  ctx_start_round();
  eq.in_uv_timer_cb = false;
  if (ctx.rounds == CTX_ROUNDS)
    uv_timer_stop(handle);
}

/* The check and idle contexts start a round every third iteration, so that
 * pairs of a round are pending while the next one starts. */
static void ctx_check_cb(uv_check_t *handle) {
  if (ctx.rounds > 0 && g_fx->iter < ctx.iter_of_last_round + 3)
    return;
  ctx_start_round();
  if (ctx.rounds == CTX_ROUNDS) {
    uv_check_stop(handle);
    uv_timer_stop(&ctx.waker);
  }
}

static void ctx_idle_cb(uv_idle_t *handle) {
  if (ctx.rounds > 0 && g_fx->iter < ctx.iter_of_last_round + 3)
    return;
  ctx_start_round();
  if (ctx.rounds == CTX_ROUNDS)
    uv_idle_stop(handle);
}

static void ctx_wheel_cb(uvtw_timer_t *timer) {
  ctx_start_round();
  if (ctx.rounds == CTX_ROUNDS)
    uvtw_timer_stop(timer);
}

static void twin_from(start_from_t from, const char *T) {
  fx_t f;
  if (!fx_open(&f, T, NULL))
    return;
  memset(&ctx, 0, sizeof ctx);
  ctx.from = from;
  eq_reset(&f.loop, f.wheel, CTX_ROUNDS * CTX_TIMEOUTS);
  uv_timer_init(&f.loop, &ctx.timer);
  uv_check_init(&f.loop, &ctx.check);
  uv_idle_init(&f.loop, &ctx.idle);
  uv_timer_init(&f.loop, &ctx.waker);
  uvtw_timer_init(f.wheel, &ctx.wheel_timer);
  switch (from) {
  case FROM_TOP:
    for (int r = 0; r < CTX_ROUNDS; r++)
      ctx_start_round();
    break;
  case FROM_TIMER_CB:
    uv_timer_start(&ctx.timer, ctx_timer_cb, 3, 4);
    break;
  case FROM_CHECK_CB:
    uv_check_start(&ctx.check, ctx_check_cb);
    uv_timer_start(&ctx.waker, noop_uv_timer_cb, 1, 1);
    break;
  case FROM_IDLE_CB:
    uv_idle_start(&ctx.idle, ctx_idle_cb);
    break;
  case FROM_WHEEL_CB:
    uvtw_timer_start(&ctx.wheel_timer, ctx_wheel_cb, 3, 4);
    break;
  }
  EXPECT_I64(uv_run(&f.loop, UV_RUN_DEFAULT), 0,
             "%s: uv_run(DEFAULT) returns 0 once every timer ran", T);
  EXPECT_U64(ctx.rounds, CTX_ROUNDS, "%s: every round of starts was made from %s", T,
             from_name[from]);
  eq_verify(T);
  fx_close_handle(&ctx.timer);
  fx_close_handle(&ctx.check);
  fx_close_handle(&ctx.idle);
  fx_close_handle(&ctx.waker);
  eq_finish(&f);
}

/* The wheel's only timer restarted with 0 from a uv_timer_t callback, in the
 * timer phase in which the wheel's own uv_timer_t is due too: it runs in the
 * iteration of a uv_timer_t twin restarted beside it (on libuv >= 1.48, which
 * collects due timers first, the next one; before, the same one). */
static struct {
  fx_t *f;
  uv_timer_t x, twin;
  uvtw_timer_t w;
  uint64_t w_iter, twin_iter;
  int w_fires, twin_fires;
} rc;

static void rc_w_cb(uvtw_timer_t *timer) {
  (void)timer;
  rc.w_fires++;
  rc.w_iter = rc.f->iter;
}

static void rc_twin_cb(uv_timer_t *handle) {
  (void)handle;
  rc.twin_fires++;
  rc.twin_iter = rc.f->iter;
}

static void rc_x_cb(uv_timer_t *handle) {
  (void)handle;
  uvtw_timer_start(&rc.w, rc_w_cb, 0, 0);
  uv_timer_start(&rc.twin, rc_twin_cb, 0, 0);
}

/* `across`: the first start's deadline lies in the wheel's next level-0
 * rotation (4,096 ticks), so the entry waits on level 1, where a restart
 * to a later deadline may leave it in place; restarted due, it must still
 * wait for the next pass. */
static void restart_only_timer(const char *T, bool across) {
  fx_t f;
  if (!fx_open(&f, T, NULL))
    return;
  memset(&rc, 0, sizeof rc);
  rc.f = &f;
  uv_timer_init(&f.loop, &rc.x);
  uv_timer_init(&f.loop, &rc.twin);
  uvtw_timer_init(f.wheel, &rc.w);
  uv_update_time(&f.loop);
  uint64_t timeout = across ? 50 : 5;
  if (across && uv_now(&f.loop) % 4096 < 4096 - timeout) {
    uv_sleep((unsigned)(4096 - timeout / 2 - uv_now(&f.loop) % 4096));
    uv_update_time(&f.loop);
  }
  if (across)
    tap_diag("%s: started %llu ms before a rotation (%llu wanted)", T,
             (unsigned long long)(4096 - uv_now(&f.loop) % 4096), (unsigned long long)timeout);
  /* x first: libuv runs it before the wheel's uv_timer_t, all due at once. */
  uv_timer_start(&rc.x, rc_x_cb, timeout, 0);
  uvtw_timer_start(&rc.w, rc_w_cb, timeout, 0);
  uv_timer_start(&rc.twin, rc_twin_cb, timeout, 0);
  EXPECT_I64(uv_run(&f.loop, UV_RUN_DEFAULT), 0, "%s: uv_run(DEFAULT) returns 0", T);
  EXPECT_U64(rc.w_fires, 1, "%s: the wheel timer ran once", T);
  EXPECT_U64(rc.twin_fires, 1, "%s: its uv_timer_t twin ran once", T);
  EXPECT_U64(rc.w_iter, rc.twin_iter, "%s: both ran in the same loop iteration", T);
  fx_close_handle(&rc.x);
  fx_close_handle(&rc.twin);
  fx_close(&f);
}

static void test_twin_restart_only_timer(void) {
  restart_only_timer("the only wheel timer restarted with 0 from a uv_timer_t due beside it",
                     false);
}

static void test_twin_restart_across_rotation(void) {
  restart_only_timer("the same, its first deadline in the next rotation of level 0", true);
}

static void test_twin_from_top(void) {
  twin_from(FROM_TOP, "twins started from the top level");
}

static void test_twin_from_timer_cb(void) {
  twin_from(FROM_TIMER_CB, "twins started from a uv_timer_t callback");
}

static void test_twin_from_check_cb(void) {
  twin_from(FROM_CHECK_CB, "twins started from a uv_check_t callback");
}

static void test_twin_from_idle_cb(void) {
  twin_from(FROM_IDLE_CB, "twins started from a uv_idle_t callback");
}

static void test_twin_from_wheel_cb(void) {
  twin_from(FROM_WHEEL_CB, "twins started from a wheel callback (timeouts > 0)");
}

/* ---- Self-restarting 0 ms timers, started from each context (issue 16) ---- */

enum { SELF_ROUNDS = 50 };

static struct {
  start_from_t from;
  uvtw_timer_t timer;
  uv_timer_t starter;
  uv_check_t check_starter;
  uv_idle_t idle_starter;
  uvtw_timer_t wheel_starter;
  uv_timer_t waker;   /* a check callback runs only after poll returns */
  uv_check_t counter; /* unreferenced: counts check phases */
  uint64_t checks;
  int fires, started, restart_errors;
  uint64_t last_iter, last_checks;
  int same_iteration, gaps, no_check_between;
  int run_returned; /* uv_run(DEFAULT) has returned */
  int fired_after_return;
  uv_timer_t twin; /* a uv_timer_t started with 0 beside the first round */
  uint64_t start_iter, first_iter, twin_iter;
  int twin_fires;
} sr;

static void sr_twin_cb(uv_timer_t *handle) {
  (void)handle;
  sr.twin_fires++;
  sr.twin_iter = g_fx->iter;
}

static void sr_counter_cb(uv_check_t *handle) {
  (void)handle;
  sr.checks++;
}

static void sr_cb(uvtw_timer_t *timer) {
  if (sr.run_returned)
    sr.fired_after_return++;
  if (sr.fires > 0) {
    if (g_fx->iter == sr.last_iter)
      sr.same_iteration++;
    else if (g_fx->iter != sr.last_iter + 1)
      sr.gaps++;
    if (sr.checks == sr.last_checks)
      sr.no_check_between++;
  }
  if (sr.fires == 0)
    sr.first_iter = g_fx->iter;
  sr.fires++;
  sr.last_iter = g_fx->iter;
  sr.last_checks = sr.checks;
  if (sr.fires < SELF_ROUNDS && uvtw_timer_start(timer, sr_cb, 0, 0) != 0)
    sr.restart_errors++;
}

static void sr_begin(void) {
  if (sr.started++ != 0)
    return;
  sr.start_iter = g_fx->iter;
  if (uvtw_timer_start(&sr.timer, sr_cb, 0, 0) != 0)
    sr.restart_errors++;
  uv_timer_start(&sr.twin, sr_twin_cb, 0, 0);
}

static void sr_starter_cb(uv_timer_t *handle) {
  sr_begin();
  uv_timer_stop(handle);
}

static void sr_check_starter_cb(uv_check_t *handle) {
  sr_begin();
  uv_check_stop(handle);
}

static void sr_idle_starter_cb(uv_idle_t *handle) {
  sr_begin();
  uv_idle_stop(handle);
}

static void sr_wheel_starter_cb(uvtw_timer_t *timer) {
  (void)timer;
  sr_begin();
}

static void self_restart_from(start_from_t from, const char *T) {
  fx_t f;
  if (!fx_open(&f, T, NULL))
    return;
  memset(&sr, 0, sizeof sr);
  sr.from = from;
  uvtw_timer_init(f.wheel, &sr.timer);
  uv_timer_init(&f.loop, &sr.starter);
  uv_check_init(&f.loop, &sr.check_starter);
  uv_idle_init(&f.loop, &sr.idle_starter);
  uvtw_timer_init(f.wheel, &sr.wheel_starter);
  uv_timer_init(&f.loop, &sr.waker);
  uv_timer_init(&f.loop, &sr.twin);
  uv_check_init(&f.loop, &sr.counter);
  uv_check_start(&sr.counter, sr_counter_cb);
  uv_unref((uv_handle_t *)&sr.counter);
  switch (from) {
  case FROM_TOP:
  case FROM_TIMER_CB:
    uv_timer_start(&sr.starter, sr_starter_cb, 2, 0);
    break;
  case FROM_CHECK_CB:
    uv_check_start(&sr.check_starter, sr_check_starter_cb);
    uv_timer_start(&sr.waker, noop_uv_timer_cb, 2, 0);
    break;
  case FROM_IDLE_CB:
    uv_idle_start(&sr.idle_starter, sr_idle_starter_cb);
    break;
  case FROM_WHEEL_CB:
    uvtw_timer_start(&sr.wheel_starter, sr_wheel_starter_cb, 2, 0);
    break;
  }
  int r = uv_run(&f.loop, UV_RUN_DEFAULT);
  sr.run_returned = 1;
  EXPECT_I64(r, 0, "%s: uv_run(DEFAULT) returns 0", T);
  EXPECT_U64(sr.fires, SELF_ROUNDS, "%s: all %d rounds fired before uv_run(DEFAULT) returned", T,
             SELF_ROUNDS);
  EXPECT_U64(uvtw_timer_is_active(&sr.timer), 0, "%s: the timer is inactive after the last round",
             T);
  EXPECT_U64(sr.restart_errors, 0, "%s: every start returned 0", T);
  EXPECT_U64(sr.twin_fires, 1, "%s: (the uv_timer_t twin of the first start ran)", T);
  if (from == FROM_WHEEL_CB)
    tap_ok(sr.fires > 0 && sr.first_iter > sr.start_iter,
           "%s: the first round, started from a wheel callback, runs in a later iteration", T);
  else
    EXPECT_U64(sr.first_iter, sr.twin_iter,
               "%s: the first round runs in the iteration of its uv_timer_t twin", T);
  EXPECT_U64(sr.same_iteration, 0, "%s: never two rounds in one loop iteration", T);
  EXPECT_U64(sr.gaps, 0, "%s: each round runs in the very next loop iteration", T);
  EXPECT_U64(sr.no_check_between, 0,
             "%s: the loop does not starve: a uv_check_t ran between any two rounds", T);
  uv_run(&f.loop, UV_RUN_NOWAIT);
  EXPECT_U64(sr.fired_after_return, 0, "%s: nothing fired after uv_run returned", T);
  fx_close_handle(&sr.starter);
  fx_close_handle(&sr.check_starter);
  fx_close_handle(&sr.idle_starter);
  fx_close_handle(&sr.counter);
  fx_close_handle(&sr.waker);
  fx_close_handle(&sr.twin);
  fx_close(&f);
}

static void test_self_restart_from_timer_cb(void) {
  self_restart_from(FROM_TIMER_CB, "0 ms self-restart started from a uv_timer_t callback");
}

static void test_self_restart_from_check_cb(void) {
  self_restart_from(FROM_CHECK_CB, "0 ms self-restart started from a uv_check_t callback");
}

static void test_self_restart_from_idle_cb(void) {
  self_restart_from(FROM_IDLE_CB, "0 ms self-restart started from a uv_idle_t callback");
}

static void test_self_restart_from_wheel_cb(void) {
  self_restart_from(FROM_WHEEL_CB, "0 ms self-restart started from a wheel callback");
}

/* ---- uv_update_time() in the timer phase: the one exception ---------------- */

/* The twins' fixture: twins W2 and U2 started together, each recording
 * the iteration it ran in, plus one, so that 0 is "not run" (a slow start,
 * as under Valgrind, can make both due in the loop's first iteration,
 * iteration 0); W1 and HELD, wheel timers that set the stage; BUSY, a
 * uv_timer_t that works busy_ms and updates the clock. */
static struct {
  uvtw_timer_t w1, w2, held;
  uv_timer_t u2, busy;
  unsigned busy_ms;
  uint64_t w_iter, u_iter, w_now, phase_start;
  bool start_held;     /* BUSY starts HELD with 0 before its work */
  bool held_before_w2; /* HELD ran, and before W2 */
} tw;

static void tw_w_cb(uvtw_timer_t *timer) {
  (void)timer;
  tw.w_iter = g_fx->iter + 1;
  tw.w_now = uvtw_wheel_now(g_fx->wheel);
}

static void tw_u_cb(uv_timer_t *handle) {
  (void)handle;
  tw.u_iter = g_fx->iter + 1;
}

static void tw_start_twins(fx_t *f, uint64_t timeout) {
  uvtw_timer_init(f->wheel, &tw.w2);
  uv_timer_init(&f->loop, &tw.u2);
  uvtw_timer_start(&tw.w2, tw_w_cb, timeout, 0);
  uv_timer_start(&tw.u2, tw_u_cb, timeout, 0);
}

static void tw_held_cb(uvtw_timer_t *timer) {
  (void)timer;
  tw.held_before_w2 = tw.w_iter == 0;
}

static void tw_busy_cb(uv_timer_t *handle) {
  tw.phase_start = uv_now(handle->loop); /* the first due in its phase: the phase's time */
  if (tw.start_held)
    uvtw_timer_start(&tw.held, tw_held_cb, 0, 0);
  fx_sleep_ms(tw.busy_ms);
  uv_update_time(handle->loop);
}

/* Starts BUSY, due in `timeout` ms, to work `ms`. */
static void tw_start_busy(fx_t *f, uint64_t timeout, unsigned ms) {
  tw.busy_ms = ms;
  uv_timer_init(&f->loop, &tw.busy);
  uv_timer_start(&tw.busy, tw_busy_cb, timeout, 0);
}

/* Both twins ran, W2 in U2's iteration. */
static void tw_expect_same_iteration(const char *T) {
  tap_ok(tw.w_iter != 0 && tw.u_iter != 0, "%s: both twins ran", T);
  EXPECT_U64(tw.w_iter, tw.u_iter, "%s: W2 runs in U2's iteration (libuv %s)", T,
             uv_version_string());
}

/* libuv >= 1.48 collects a timer phase's due uv_timer_ts against the time
 * at the phase's start and keeps that time nowhere; a uv_timer_t callback
 * that calls uv_update_time() before the wheel's pass of that phase moves
 * uv_now() on, and the pass runs what is due by then: an iteration before
 * a uv_timer_t twin due in between (include/uvtw.h, "Time"). Before 1.48
 * the phase reads the clock again for every timer and the twins agree. */
static void test_update_time_in_phase(void) {
  const char *T = "update_time_in_phase";
  fx_t f;
  if (!fx_open(&f, T, NULL))
    return;
  memset(&tw, 0, sizeof tw);
  /* BUSY and the wheel's own uv_timer_t are due together, BUSY started
   * first; the twins are due 190 ms later, within BUSY's 250 ms. */
  uv_update_time(&f.loop);
  tw_start_busy(&f, 10, 250);
  uvtw_timer_init(f.wheel, &tw.w1);
  uvtw_timer_start(&tw.w1, fx_noop_timer_cb, 10, 0);
  tw_start_twins(&f, 200);
  uint64_t w_deadline = uv_now(&f.loop) + 200;
  fx_run(&f, UV_RUN_DEFAULT);
  tap_ok(tw.w_iter != 0 && tw.u_iter != 0, "%s: both twins ran", T);
  tap_ok(tw.w_now >= w_deadline, "%s: never early: ran at %llu, due %llu", T,
         (unsigned long long)tw.w_now, (unsigned long long)w_deadline);
  bool collects = uv_version() >= (1u << 16 | 48u << 8);
  bool exercised = tw.phase_start < w_deadline; /* else the phase collected both */
  uint64_t ahead = collects && exercised ? 1 : 0;
  EXPECT_U64(tw.w_iter + ahead, tw.u_iter,
             "%s: the wheel timer runs %llu iteration(s) before its twin (libuv %s%s)", T,
             (unsigned long long)ahead, uv_version_string(),
             exercised ? "" : "; the loop woke after the twins' deadline");
  fx_close_handle(&tw.busy);
  fx_close_handle(&tw.u2);
  fx_close(&f);
}

static void test_again_twin(void);

/* The wheel's pass runs in a timer phase; a uv_timer_t callback after it
 * in that phase works 30 ms and updates the clock, which makes the twins
 * (20 ms) due: libuv < 1.48 runs U2 in that phase, and so must the wheel
 * run W2, which the clock, not a callback, made due. */
static void test_twin_due_by_clock_after_pass(void) {
  const char *T = "twin_due_by_clock_after_pass";
  fx_t f;
  if (!fx_open(&f, T, NULL))
    return;
  memset(&tw, 0, sizeof tw);
  uv_update_time(&f.loop);
  uvtw_timer_init(f.wheel, &tw.w1);
  uvtw_timer_start(&tw.w1, fx_noop_timer_cb, 1, 0); /* the wheel's uv_timer_t first */
  tw_start_busy(&f, 1, 30);                         /* then BUSY, after the pass */
  tw_start_twins(&f, 20);
  fx_run(&f, UV_RUN_DEFAULT);
  tw_expect_same_iteration(T);
  fx_close_handle(&tw.busy);
  fx_close_handle(&tw.u2);
  fx_close(&f);
}

/* As twin_due_by_clock_after_pass, but BUSY first starts HELD with 0,
 * made due after the pass: on libuv < 1.48 the wheel holds it back to the
 * next iteration (one pass per loop iteration), and W2, due between HELD
 * and the clock BUSY moves to, waits with it and runs after it, in
 * deadline order: one iteration after U2 (include/uvtw.h's exception "its
 * other timers that come due before the next iteration wait with it").
 * libuv >= 1.48 runs U2 in the next iteration too. `empty_pass`: W1 is
 * restarted later after the wheel's uv_timer_t was armed for it, so the
 * pass that runs before BUSY runs nothing. */
static void twin_held_by_clock(const char *T, bool empty_pass) {
  fx_t f;
  if (!fx_open(&f, T, NULL))
    return;
  memset(&tw, 0, sizeof tw);
  uv_update_time(&f.loop);
  uvtw_timer_init(f.wheel, &tw.w1);
  uvtw_timer_init(f.wheel, &tw.held);
  uvtw_timer_start(&tw.w1, fx_noop_timer_cb, 1, 0); /* the wheel's uv_timer_t first */
  if (empty_pass)
    uvtw_timer_start(&tw.w1, fx_noop_timer_cb, 500, 0); /* leaves it armed for 1 ms */
  tw.start_held = true;
  tw_start_busy(&f, 1, 30); /* then BUSY, after the pass */
  tw_start_twins(&f, 20);
  uint64_t w_deadline = uv_now(&f.loop) + 20;
  fx_run(&f, UV_RUN_DEFAULT);
  tap_ok(tw.w_iter != 0 && tw.u_iter != 0, "%s: both twins ran", T);
  tap_ok(tw.held_before_w2, "%s: HELD ran before W2, due later", T);
  bool collects = uv_version() >= (1u << 16 | 48u << 8);
  bool exercised = tw.phase_start < w_deadline; /* else W2 ran in the pass */
  uint64_t lag = !collects && exercised ? 1 : 0;
  EXPECT_U64(tw.w_iter, tw.u_iter + lag, "%s: W2 runs %llu iteration(s) after U2 (libuv %s%s)", T,
             (unsigned long long)lag, uv_version_string(),
             exercised ? "" : "; the loop woke after the twins' deadline");
  fx_close_handle(&tw.busy);
  fx_close_handle(&tw.u2);
  fx_close(&f);
}

static void test_twin_held_by_clock_after_pass(void) {
  twin_held_by_clock("twin_held_by_clock_after_pass", false);
}

static void test_twin_held_by_clock_after_empty_pass(void) {
  twin_held_by_clock("twin_held_by_clock_after_empty_pass", true);
}

/* A UV_RUN_ONCE may end before the wheel's uv_timer_t is due by the
 * loop's clock (seen under load, on libuv 1.45 and 1.50): runs ONCE again
 * until the pass has run (at most 50 times), so that the run that ran it
 * is the last before the twins. */
static void tw_run_once_until_pass(fx_t *f, uv_run_mode mode) {
  for (int runs = 0; mode == UV_RUN_ONCE && uvtw_timer_is_active(&tw.w1) && runs < 50; runs++)
    fx_run(f, UV_RUN_ONCE);
}

/* Run the loop until its last timer phase has run a wheel pass, start
 * twins at top level, run it again: in the same iteration, whatever timer
 * phase the new uv_run begins with (libuv 1.45 to 1.47 run one before the
 * loop in UV_RUN_DEFAULT; 1.44 one at the end of UV_RUN_ONCE). */
static void twin_run_start_run(const char *T, uv_run_mode first, uint64_t timeout) {
  fx_t f;
  if (!fx_open(&f, T, NULL))
    return;
  memset(&tw, 0, sizeof tw);
  fx_run(&f, UV_RUN_NOWAIT); /* the wheel's uv_async_t has run: ONCE waits for the timer */
  uvtw_timer_init(f.wheel, &tw.w1);
  uvtw_timer_start(&tw.w1, fx_noop_timer_cb, 2, 0);
  fx_run(&f, first); /* its last timer phase runs the pass */
  tw_run_once_until_pass(&f, first);
  tap_ok(!uvtw_timer_is_active(&tw.w1), "%s: the first run ran the wheel's pass", T);
  tw_start_twins(&f, timeout);
  fx_run(&f, UV_RUN_DEFAULT);
  tw_expect_same_iteration(T);
  fx_close_handle(&tw.u2);
  fx_close(&f);
}

static void tw_busy_wheel_cb(uvtw_timer_t *timer) {
  fx_sleep_ms(10);
  (void)timer;
  uv_update_time(&g_fx->loop);
}

/* As above, but the first run's pass calls uv_update_time() after busy
 * work, which makes another wheel timer due: on libuv < 1.48 the wheel
 * holds it back (HELD) when that run ends. Twins started at top level with
 * a timeout are filed on that wheel, which the filing arms, so the next
 * uv_run's first timer phase runs W2 with U2. */
static void test_twin_run_start_run_held(void) {
  const char *T = "twin_run_start_run_held";
  fx_t f;
  if (!fx_open(&f, T, NULL))
    return;
  memset(&tw, 0, sizeof tw);
  fx_run(&f, UV_RUN_NOWAIT);
  uvtw_timer_init(f.wheel, &tw.w1);
  uvtw_timer_init(f.wheel, &tw.held);
  uvtw_timer_start(&tw.w1, tw_busy_wheel_cb, 2, 0);
  uvtw_timer_start(&tw.held, fx_noop_timer_cb, 5, 0); /* due by the clock the pass moves */
  fx_run(&f, UV_RUN_ONCE);
  tw_run_once_until_pass(&f, UV_RUN_ONCE);
  tap_ok(!uvtw_timer_is_active(&tw.w1), "%s: the first run ran the wheel's pass", T);
  tw_start_twins(&f, 3);
  fx_sleep_ms(5); /* both due when the next uv_run begins */
  fx_run(&f, UV_RUN_DEFAULT);
  tw_expect_same_iteration(T);
  fx_close_handle(&tw.u2);
  fx_close(&f);
}

static void test_twin_run_start_run_default(void) {
  twin_run_start_run("twin_run_start_run_default", UV_RUN_DEFAULT, 0);
}

static void test_twin_run_start_run_once(void) {
  twin_run_start_run("twin_run_start_run_once", UV_RUN_ONCE, 0);
}

static void test_twin_run_start_run_timeout(void) {
  twin_run_start_run("twin_run_start_run_timeout", UV_RUN_DEFAULT, 3);
}

static const tap_case_t cases[] = {
    TAP_CASE(twin_due_by_clock_after_pass),
    TAP_CASE(twin_held_by_clock_after_pass),
    TAP_CASE(twin_held_by_clock_after_empty_pass),
    TAP_CASE(twin_run_start_run_default),
    TAP_CASE(twin_run_start_run_once),
    TAP_CASE(twin_run_start_run_timeout),
    TAP_CASE(twin_run_start_run_held),
    TAP_CASE(twin_thousands),
    TAP_CASE(twin_staggered),
    TAP_CASE(twin_across_levels),
    TAP_CASE(twin_restart_only_timer),
    TAP_CASE(twin_restart_across_rotation),
    TAP_CASE(twin_from_top),
    TAP_CASE(twin_from_timer_cb),
    TAP_CASE(twin_from_check_cb),
    TAP_CASE(twin_from_idle_cb),
    TAP_CASE(twin_from_wheel_cb),
    TAP_CASE(self_restart_from_timer_cb),
    TAP_CASE(self_restart_from_check_cb),
    TAP_CASE(self_restart_from_idle_cb),
    TAP_CASE(self_restart_from_wheel_cb),
    TAP_CASE(update_time_in_phase),
    TAP_CASE(again_twin),
};

FX_MAIN(cases)

/* As real libuv programs use the wheel, against include/uvtw.h and
 * README.md:
 *
 *   again_twin .............. uvtw_timer_again against uv_timer_again: repeat 0
 *                             leaves an active one-shot timer running, repeat
 *                             > 0 restarts; both fire in the same iteration
 */

typedef struct again_pair_s {
  uvtw_timer_t w;
  uv_timer_t u;
  int w_fires, u_fires;
  uint64_t w_iter, u_iter;
} again_pair_t;

static void again_w_cb(uvtw_timer_t *timer) {
  again_pair_t *p = timer->data;
  if (p->w_fires++ == 0)
    p->w_iter = g_fx->iter;
  if (uvtw_timer_get_repeat(timer) != 0 && p->w_fires == 2)
    uvtw_timer_stop(timer);
}

static void again_u_cb(uv_timer_t *handle) {
  again_pair_t *p = handle->data;
  if (p->u_fires++ == 0)
    p->u_iter = g_fx->iter;
  if (uv_timer_get_repeat(handle) != 0 && p->u_fires == 2)
    uv_timer_stop(handle);
}

static void test_again_twin(void) {
  const char *T = "again_twin";
  enum { ONE_SHOT, REPEATING, STOPPED, PAIRS };
  again_pair_t p[PAIRS];
  fx_t f;
  if (!fx_open(&f, T, NULL))
    return;
  memset(p, 0, sizeof p);
  for (int i = 0; i < PAIRS; i++) {
    uvtw_timer_init(f.wheel, &p[i].w);
    uv_timer_init(&f.loop, &p[i].u);
    p[i].w.data = p[i].u.data = &p[i];
  }
  uvtw_timer_start(&p[ONE_SHOT].w, again_w_cb, 20, 0);
  uv_timer_start(&p[ONE_SHOT].u, again_u_cb, 20, 0);
  uvtw_timer_start(&p[REPEATING].w, again_w_cb, 500, 10);
  uv_timer_start(&p[REPEATING].u, again_u_cb, 500, 10);
  uvtw_timer_start(&p[STOPPED].w, again_w_cb, 10, 0);
  uv_timer_start(&p[STOPPED].u, again_u_cb, 10, 0);
  uvtw_timer_stop(&p[STOPPED].w);
  uv_timer_stop(&p[STOPPED].u);

  for (int i = 0; i < PAIRS; i++) {
    int rw = uvtw_timer_again(&p[i].w), ru = uv_timer_again(&p[i].u);
    EXPECT_I64(rw, ru, "%s: pair %d: again returns what uv_timer_again returns", T, i);
    EXPECT_U64(!!uvtw_timer_is_active(&p[i].w), !!uv_is_active((uv_handle_t *)&p[i].u),
               "%s: pair %d: active after again exactly when the uv_timer_t is", T, i);
    if (uv_is_active((uv_handle_t *)&p[i].u)) /* libuv keeps a stopped timer's due time */
      EXPECT_U64(uvtw_timer_get_due_in(&p[i].w), uv_timer_get_due_in(&p[i].u),
                 "%s: pair %d: due in as long as the uv_timer_t", T, i);
  }
  EXPECT_U64(!!uvtw_timer_is_active(&p[ONE_SHOT].w), 1,
             "%s: again with repeat 0 leaves an active one-shot timer active", T);
  uv_run(&f.loop, UV_RUN_DEFAULT);
  for (int i = 0; i < PAIRS; i++) {
    EXPECT_U64(p[i].w_fires, p[i].u_fires, "%s: pair %d: as many callbacks as the uv_timer_t", T,
               i);
    EXPECT_U64(p[i].w_iter, p[i].u_iter,
               "%s: pair %d: the first callback in the uv_timer_t's loop iteration", T, i);
  }
  EXPECT_U64(p[ONE_SHOT].w_fires, 1, "%s: the one-shot timer given again fired once", T);
  EXPECT_ERR(uvtw_timer_again(&p[ONE_SHOT].w), 0, "%s: again on a one-shot that ran returns 0", T);
  EXPECT_U64(!!uvtw_timer_is_active(&p[ONE_SHOT].w), 0, "%s: ...and leaves it inactive", T);
  for (int i = 0; i < PAIRS; i++)
    fx_close_handle(&p[i].u);
  fx_close(&f);
}

/* ---- A loop run on another thread than the one that made it --------------- */
