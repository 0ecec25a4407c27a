/* Guarantee 2's rule on every libuv (include/uvtw.h, API.md "Firing
 * guarantees"): a wheel on the loop's clock runs at most one pass per loop
 * iteration, and an entry made due after the wheel's pass of an iteration
 * (started with 0 from inside any wheel's callback, this wheel's or another
 * one's on the same loop, or from a uv_timer_t callback that runs after the
 * pass) runs in the next iteration's pass. So wheel timers that restart
 * themselves or each other with 0 never starve the loop.
 *
 * Iterations are counted by the fixture's uv_prepare_t (f.iter); wall time
 * only bounds a run, generously, so that a library that breaks the rule
 * still ends: every chain of restarts also stops after a fixed number of
 * callbacks.
 *
 * libuv 1.48 and later collect the due uv_timer_ts before running any, so
 * there a uv_timer_t started with 0 inside the timer phase runs in the next
 * iteration, like the wheel timer started beside it; older libuvs run it in
 * the same timer phase, and the wheel timer one iteration later. The checks
 * and their messages are the same on every libuv: only the iteration
 * expected of such a uv_timer_t twin depends on uv_version(). */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"

enum {
  CHAIN_MIN = 200,     /* callbacks a chain makes at least */
  CHAIN_MAX = 1000000, /* callbacks after which a chain of restarts stops anyway */
  DUE_MS = 20,         /* the uv_timer_t that must run while a chain goes on */
  PAIR_MS = 5,         /* the wheel timer and uv_timer_t due together */
  LATER_MS = 1000,     /* an entry pending far behind the one under test */
  DIAG_MAX = 5,        /* diagnostics printed per kind of failure */
};

static const uint64_t BOUND_NS = UINT64_C(5000000000); /* a chain's wall-time bound */

/* libuv >= 1.48 collects due uv_timer_ts before running them. */
static bool uv_collects_timers(void) {
  return uv_version() >= (1u << 16 | 48u << 8);
}

/* The iteration in which a uv_timer_t started with 0 inside the timer phase
 * of iteration `iter` runs. */
static uint64_t twin_iteration(uint64_t iter) {
  return uv_collects_timers() ? iter + 1 : iter;
}

/* ---- Passes of one wheel: at most one per iteration ------------------------ */

/* Watches one wheel's passes through its callbacks: two callbacks in one
 * loop iteration come from one pass when stats.wakeups did not move
 * between them. */
typedef struct pass_watch_s {
  const uvtw_wheel_t *wheel;
  const char *name;
  uint64_t wakeups0; /* stats.wakeups when the run began */
  uint64_t iter, wakeups;
  int seen;
  uint64_t two_passes; /* callbacks after a second wakeup in one iteration */
} pass_watch_t;

static void pw_begin(pass_watch_t *pw, const uvtw_wheel_t *wheel, const char *name) {
  memset(pw, 0, sizeof *pw);
  pw->wheel = wheel;
  pw->name = name;
  pw->wakeups0 = fx_stats(wheel).wakeups;
}

/* In each of the wheel's callbacks. */
static void pw_note(pass_watch_t *pw) {
  uint64_t iter = g_fx->iter;
  uint64_t wakeups = fx_stats(pw->wheel).wakeups;
  if (pw->seen && iter == pw->iter && wakeups != pw->wakeups && pw->two_passes++ < DIAG_MAX)
    tap_diag("  wheel %s woke again (wakeups %" PRIu64 " -> %" PRIu64
             ") in loop iteration %" PRIu64,
             pw->name, pw->wakeups, wakeups, iter);
  pw->seen = 1;
  pw->iter = iter;
  pw->wakeups = wakeups;
}

/* The checks of a run that spanned `iterations` loop iterations. */
static void pw_check(const pass_watch_t *pw, uint64_t iterations, const char *T) {
  uint64_t wakeups = fx_stats(pw->wheel).wakeups - pw->wakeups0;
  if (!tap_ok(pw->two_passes == 0,
              "%s: wheel %s: the callbacks of one loop iteration all ran in one pass", T, pw->name))
    tap_diag("  expected no second wakeup within an iteration, got %" PRIu64, pw->two_passes);
  if (!tap_ok(wakeups <= iterations, "%s: wheel %s: at most one wakeup per loop iteration", T,
              pw->name))
    tap_diag("  expected at most %" PRIu64 " wakeups in %" PRIu64 " iterations, got %" PRIu64,
             iterations, iterations, wakeups);
}

/* ---- A chain of callbacks, one per iteration ------------------------------ */

/* Callbacks that must run one per loop iteration, in consecutive iterations,
 * with the loop's other handles served between any two, while a uv_timer_t
 * due at DUE_MS runs in the meantime. The chain goes on until that
 * uv_timer_t ran and CHAIN_MIN callbacks were made, or until a bound. */
static struct {
  fx_t *f;
  uint64_t t0_ns;
  uint64_t calls;
  uint64_t last_iter, last_checks, last_idles;
  uint64_t same_iter, gaps, no_check, no_idle;
  uint64_t start_errors;
  int bounded; /* the chain stopped at CHAIN_MAX callbacks or after BOUND_NS */
  uv_timer_t due;
  int due_fires;
  uint64_t calls_at_due;
  uv_check_t check;
  uv_idle_t idle;
  uint64_t checks, idles;
} ch;

static void ch_due_cb(uv_timer_t *handle) {
  (void)handle;
  ch.due_fires++;
  ch.calls_at_due = ch.calls;
}

static void ch_check_cb(uv_check_t *handle) {
  (void)handle;
  ch.checks++;
}

static void ch_idle_cb(uv_idle_t *handle) {
  (void)handle;
  ch.idles++;
}

/* Loop, uv_timer_t due at DUE_MS, unreferenced counters. */
static void ch_begin(fx_t *f) {
  memset(&ch, 0, sizeof ch);
  ch.f = f;
  uv_timer_init(&f->loop, &ch.due);
  uv_check_init(&f->loop, &ch.check);
  uv_idle_init(&f->loop, &ch.idle);
  uv_check_start(&ch.check, ch_check_cb);
  uv_idle_start(&ch.idle, ch_idle_cb);
  uv_unref((uv_handle_t *)&ch.check);
  uv_unref((uv_handle_t *)&ch.idle);
  uv_update_time(&f->loop);
  uv_timer_start(&ch.due, ch_due_cb, DUE_MS, 0);
  ch.t0_ns = uv_hrtime();
}

/* In each callback of the chain. Returns whether the chain goes on. */
static bool ch_note(void) {
  uint64_t iter = ch.f->iter;
  if (ch.calls > 0) {
    if (iter == ch.last_iter) {
      if (ch.same_iter++ < DIAG_MAX)
        tap_diag("  callback %" PRIu64 " ran in loop iteration %" PRIu64 ", as the one before",
                 ch.calls + 1, iter);
    } else if (iter != ch.last_iter + 1 && ch.gaps++ < DIAG_MAX) {
      tap_diag("  callback %" PRIu64 " ran in loop iteration %" PRIu64
               ", the one before in %" PRIu64,
               ch.calls + 1, iter, ch.last_iter);
    }
    if (ch.checks == ch.last_checks)
      ch.no_check++;
    if (ch.idles == ch.last_idles)
      ch.no_idle++;
  }
  ch.calls++;
  ch.last_iter = iter;
  ch.last_checks = ch.checks;
  ch.last_idles = ch.idles;
  if (ch.due_fires > 0 && ch.calls >= CHAIN_MIN) /* the uv_timer_t ran: the chain ends */
    return false;
  if (ch.calls >= CHAIN_MAX || uv_hrtime() - ch.t0_ns > BOUND_NS) {
    ch.bounded = 1;
    return false;
  }
  return true;
}

static void ch_check(const char *T, uint64_t iterations) {
  tap_diag("%s: %" PRIu64 " callbacks in %" PRIu64
           " loop iterations; the uv_timer_t ran after %" PRIu64,
           T, ch.calls, iterations, ch.calls_at_due);
  EXPECT_U64(ch.start_errors, 0, "%s: every uvtw_timer_start returned 0", T);
  if (!tap_ok(ch.due_fires == 1 && !ch.bounded,
              "%s: the uv_timer_t due at %d ms ran while the chain of 0 ms restarts went on (the "
              "loop is not starved)",
              T, DUE_MS))
    tap_diag("  expected it to run once before %d callbacks or %" PRIu64 " s, got %d runs, the "
             "chain %s after %" PRIu64 " callbacks",
             CHAIN_MAX, BOUND_NS / 1000000000u, ch.due_fires,
             ch.bounded ? "cut off by the bound" : "ended", ch.calls);
  tap_ok(ch.calls >= CHAIN_MIN, "%s: (test precondition) the chain made at least %d callbacks", T,
         CHAIN_MIN);
  if (!tap_ok(ch.same_iter == 0, "%s: never two callbacks of the chain in one loop iteration", T))
    tap_diag("  expected 0, got %" PRIu64 " of %" PRIu64 " callbacks", ch.same_iter, ch.calls);
  if (!tap_ok(ch.gaps == 0, "%s: each callback ran in the loop iteration after the one before", T))
    tap_diag("  expected 0 skipped iterations, got %" PRIu64, ch.gaps);
  if (!tap_ok(ch.no_check == 0 && ch.no_idle == 0,
              "%s: a uv_check_t and a uv_idle_t ran between any two callbacks", T))
    tap_diag("  expected 0 callbacks without them, got %" PRIu64 " without a check, %" PRIu64
             " without an idle",
             ch.no_check, ch.no_idle);
}

static void ch_end(void) {
  fx_close_handle(&ch.due);
  fx_close_handle(&ch.check);
  fx_close_handle(&ch.idle);
}

/* ---- 1. Two wheels playing ping-pong with 0 ms starts ---------------------- */

typedef struct hop_s {
  uvtw_timer_t timer;
  struct hop_s *other; /* the timer this one's callback starts */
  pass_watch_t pw;
} hop_t;

static hop_t hop_a, hop_b;

static void hop_cb(uvtw_timer_t *timer) {
  hop_t *h = timer->data;
  pw_note(&h->pw);
  if (ch_note() && uvtw_timer_start(&h->other->timer, hop_cb, 0, 0) != 0)
    ch.start_errors++;
}

/* Wheel A's callback starts B's timer with 0, B's starts A's: each hop is
 * an entry made due from another wheel's callback, so it runs in the next
 * iteration's pass, on every libuv. */
static void test_two_wheels_ping_pong(void) {
  const char *T = "two wheels ping-pong";
  fx_t f;
  uvtw_wheel_t *b;
  uint64_t iter0, iterations;

  if (!fx_open_more(&f, T, NULL, 1, NULL))
    return;
  b = f.more[0];
  ch_begin(&f);
  uvtw_timer_init(f.wheel, &hop_a.timer);
  uvtw_timer_init(b, &hop_b.timer);
  hop_a.timer.data = &hop_a;
  hop_b.timer.data = &hop_b;
  hop_a.other = &hop_b;
  hop_b.other = &hop_a;
  pw_begin(&hop_a.pw, f.wheel, "A");
  pw_begin(&hop_b.pw, b, "B");
  iter0 = f.iter;
  if (uvtw_timer_start(&hop_a.timer, hop_cb, 0, 0) != 0)
    ch.start_errors++;
  EXPECT_I64(fx_run(&f, UV_RUN_DEFAULT), 0, "%s: uv_run(DEFAULT) returns 0 once the hops end", T);
  iterations = f.iter - iter0 + 1;
  ch_check(T, iterations);
  pw_check(&hop_a.pw, iterations, T);
  pw_check(&hop_b.pw, iterations, T);
  ch_end();
  fx_close(&f);
}

/* ---- 2. One timer restarting itself with 0 --------------------------------- */

static pass_watch_t self_pw;

static void self_cb(uvtw_timer_t *timer) {
  pw_note(&self_pw);
  if (ch_note() && uvtw_timer_start(timer, self_cb, 0, 0) != 0)
    ch.start_errors++;
}

static void test_self_restart_zero(void) {
  const char *T = "self-restart with 0";
  fx_t f;
  uvtw_timer_t timer;
  uint64_t iter0, iterations;
  uvtw_stats_t s0, s1;

  if (!fx_open(&f, T, NULL))
    return;
  ch_begin(&f);
  uvtw_timer_init(f.wheel, &timer);
  pw_begin(&self_pw, f.wheel, "W");
  s0 = fx_stats(f.wheel);
  iter0 = f.iter;
  if (uvtw_timer_start(&timer, self_cb, 0, 0) != 0)
    ch.start_errors++;
  EXPECT_I64(fx_run(&f, UV_RUN_DEFAULT), 0, "%s: uv_run(DEFAULT) returns 0 once the restarts end",
             T);
  iterations = f.iter - iter0 + 1;
  s1 = fx_stats(f.wheel);
  ch_check(T, iterations);
  pw_check(&self_pw, iterations, T);
  EXPECT_U64(s1.fired - s0.fired, ch.calls, "%s: stats.fired counts every callback", T);
  ch_end();
  fx_close(&f);
}

/* A program that drives the loop with uv_run(UV_RUN_ONCE) or
 * UV_RUN_NOWAIT and does some work between the calls: libuv 1.44 runs a
 * timer phase at the end of UV_RUN_ONCE and another at the start of the
 * next call, with no prepare phase between, and libuv 1.45+ UV_RUN_DEFAULT
 * one before its first iteration. Still one pass per iteration. */
enum { BOUNDARY_RUNS = 12 };

static struct {
  fx_t *f;
  uvtw_timer_t timer;
  int calls;
  uint64_t iter[BOUNDARY_RUNS];
} bd;

static void bd_cb(uvtw_timer_t *timer) {
  if (bd.calls < BOUNDARY_RUNS)
    bd.iter[bd.calls] = bd.f->iter;
  if (++bd.calls < BOUNDARY_RUNS)
    uvtw_timer_start(timer, bd_cb, 0, 0);
}

static void run_boundary(uv_run_mode mode, const char *T) {
  fx_t f;
  if (!fx_open(&f, T, NULL))
    return;
  memset(&bd, 0, sizeof bd);
  bd.f = &f;
  uvtw_timer_init(f.wheel, &bd.timer);
  uvtw_timer_start(&bd.timer, bd_cb, 0, 0);
  for (int k = 0; k < 20 * BOUNDARY_RUNS && bd.calls < BOUNDARY_RUNS; k++) {
    fx_run(&f, mode);
    fx_sleep_ms(2); /* the clock moves between two calls */
  }
  EXPECT_U64(bd.calls, BOUNDARY_RUNS, "%s: the self-restarting timer ran every time", T);
  int same = 0;
  for (int i = 1; i < bd.calls && i < BOUNDARY_RUNS; i++)
    same += bd.iter[i] == bd.iter[i - 1];
  EXPECT_U64(same, 0, "%s: never two of its callbacks in one loop iteration", T);
  fx_close(&f);
}

static void test_run_boundary(void) {
  run_boundary(UV_RUN_ONCE, "uv_run(ONCE) calls with work between");
  run_boundary(UV_RUN_NOWAIT, "uv_run(NOWAIT) calls with work between");
  run_boundary(UV_RUN_DEFAULT, "uv_run(DEFAULT) calls with work between");
}

/* ---- 3. Starts from a uv_timer_t that runs after the wheel's pass ---------- */

/* What the wheel holds when its pass ends, before the uv_timer_t runs. */
typedef enum {
  AFTER_EMPTY, /* nothing */
  AFTER_DUE,   /* an entry its callback restarted with 0: due already */
  AFTER_LATER, /* an entry due LATER_MS on */
} after_t;

static struct {
  fx_t *f;
  after_t after;
  probe_t p;     /* due with x; its pass runs first */
  probe_t w;     /* started with 0 by x */
  probe_t later; /* AFTER_LATER: pending far behind; stopped by w */
  uv_timer_t x, twin;
  int x_fires, twin_fires;
  uint64_t x_iter, twin_iter;
  int p_fires_at_x;
  pass_watch_t pw;
} sa;

static void sa_p_action(probe_t *p) {
  pw_note(&sa.pw);
  if (sa.after == AFTER_DUE && p->fires == 1)
    probe_start(p, 0, 0);
}

static void sa_w_action(probe_t *p) {
  (void)p;
  pw_note(&sa.pw);
  uvtw_timer_stop(&sa.later.timer);
}

static void sa_twin_cb(uv_timer_t *handle) {
  (void)handle;
  sa.twin_fires++;
  sa.twin_iter = sa.f->iter;
}

static void sa_x_cb(uv_timer_t *handle) {
  (void)handle;
  sa.x_fires++;
  sa.x_iter = sa.f->iter;
  sa.p_fires_at_x = sa.p.fires;
  probe_start(&sa.w, 0, 0);
  uv_timer_start(&sa.twin, sa_twin_cb, 0, 0);
}

static void start_after_pass(after_t after, const char *T) {
  fx_t f;
  if (!fx_open(&f, T, NULL))
    return;
  memset(&sa, 0, sizeof sa);
  sa.f = &f;
  sa.after = after;
  probe_init(f.wheel, &sa.p, 'P', sa_p_action);
  probe_init(f.wheel, &sa.w, 'W', sa_w_action);
  probe_init(f.wheel, &sa.later, 'L', NULL);
  uv_timer_init(&f.loop, &sa.x);
  uv_timer_init(&f.loop, &sa.twin);
  pw_begin(&sa.pw, f.wheel, "W");
  uv_update_time(&f.loop);
  /* Due at the same ms, the wheel's first: libuv runs its uv_timer_t (armed
   * by this start) before x, which is started after it. */
  probe_start(&sa.p, PAIR_MS, 0);
  if (after == AFTER_LATER)
    probe_start(&sa.later, LATER_MS, 0);
  uv_timer_start(&sa.x, sa_x_cb, PAIR_MS, 0);
  EXPECT_I64(fx_run(&f, UV_RUN_DEFAULT), 0, "%s: uv_run(DEFAULT) returns 0", T);

  if (!tap_ok(sa.x_fires == 1 && sa.p_fires_at_x == 1 && sa.p.iter[0] == sa.x_iter,
              "%s: (test precondition) the wheel's pass ran first in the timer phase of the "
              "uv_timer_t",
              T))
    tap_diag("  expected the uv_timer_t to run once, after the wheel's callback and in its "
             "iteration %" PRIu64 ", got %d runs, after %d wheel callbacks, in iteration %" PRIu64,
             sa.p.iter[0], sa.x_fires, sa.p_fires_at_x, sa.x_iter);
  EXPECT_U64(sa.w.fires, 1, "%s: the wheel timer started with 0 ran once", T);
  EXPECT_U64(sa.w.iter[0], sa.x_iter + 1,
             "%s: the wheel timer started with 0 after the wheel's pass ran in the next loop "
             "iteration",
             T);
  EXPECT_U64(sa.twin_fires, 1, "%s: its uv_timer_t twin ran once", T);
  EXPECT_U64(sa.twin_iter, twin_iteration(sa.x_iter),
             "%s: the uv_timer_t twin ran where libuv runs it (the next iteration from 1.48, the "
             "same before)",
             T);
  if (after == AFTER_DUE) {
    EXPECT_U64(sa.p.fires, 2, "%s: the entry restarted with 0 in its own callback ran again", T);
    EXPECT_U64(sa.p.iter[1], sa.x_iter + 1,
               "%s: ... in the next loop iteration, the pass of the wheel timer started after it",
               T);
  }
  if (after == AFTER_LATER)
    EXPECT_U64(sa.later.fires, 0, "%s: the later entry, stopped, never ran", T);
  pw_check(&sa.pw, 2, T);
  tap_ok(sa.w.early == 0 && sa.p.early == 0, "%s: no callback ran before its deadline", T);
  fx_close_handle(&sa.x);
  fx_close_handle(&sa.twin);
  fx_close(&f);
}

static void test_start_after_pass_twin(void) {
  start_after_pass(AFTER_EMPTY, "start with 0 after the pass of an emptied wheel");
}

static void test_start_after_pass_due_twin(void) {
  start_after_pass(AFTER_DUE, "start with 0 after a pass that left an entry due");
}

static void test_start_after_pass_later_twin(void) {
  start_after_pass(AFTER_LATER, "start with 0 after a pass that left a later entry");
}

/* ---- 4. Starts on wheel B from wheel A's callback -------------------------- */

/* What wheel B holds when A's callback starts a timer on it with 0. */
typedef enum {
  B_EMPTY,   /* nothing */
  B_LATER,   /* an entry due LATER_MS on */
  B_PASSED,  /* nothing: its pass of this iteration ran before A's */
  B_PENDING, /* an entry due now, its pass of this iteration still to come */
} b_state_t;

static struct {
  fx_t *f;
  b_state_t state;
  uvtw_wheel_t *b;
  probe_t a;     /* on A: starts bn and the twin */
  probe_t bn;    /* on B: started with 0 from A's callback */
  probe_t b0;    /* on B: B_PASSED and B_PENDING, due with a */
  probe_t later; /* on B: B_LATER; stopped by bn */
  uv_timer_t twin;
  int twin_fires;
  uint64_t twin_iter;
  int b0_fires_at_a;
  pass_watch_t pw_b;
} ow;

static void ow_twin_cb(uv_timer_t *handle) {
  (void)handle;
  ow.twin_fires++;
  ow.twin_iter = ow.f->iter;
}

static void ow_a_action(probe_t *p) {
  (void)p;
  ow.b0_fires_at_a = ow.b0.fires;
  probe_start(&ow.bn, 0, 0);
  uv_timer_start(&ow.twin, ow_twin_cb, 0, 0);
}

static void ow_b_action(probe_t *p) {
  pw_note(&ow.pw_b);
  if (p == &ow.bn)
    uvtw_timer_stop(&ow.later.timer);
}

static void start_from_other_wheel(b_state_t state, const char *T) {
  fx_t f;
  if (!fx_open_more(&f, T, NULL, 1, NULL))
    return;
  memset(&ow, 0, sizeof ow);
  ow.f = &f;
  ow.state = state;
  ow.b = f.more[0];
  probe_init(f.wheel, &ow.a, 'A', ow_a_action);
  probe_init(ow.b, &ow.bn, 'N', ow_b_action);
  probe_init(ow.b, &ow.b0, '0', ow_b_action);
  probe_init(ow.b, &ow.later, 'L', ow_b_action);
  uv_timer_init(&f.loop, &ow.twin);
  pw_begin(&ow.pw_b, ow.b, "B");
  uv_update_time(&f.loop);
  /* Due at the same ms, libuv runs the wheels' uv_timer_ts in the order
   * these starts armed them. */
  if (state == B_PASSED)
    probe_start(&ow.b0, PAIR_MS, 0);
  probe_start(&ow.a, PAIR_MS, 0);
  if (state == B_PENDING)
    probe_start(&ow.b0, PAIR_MS, 0);
  if (state == B_LATER)
    probe_start(&ow.later, LATER_MS, 0);
  EXPECT_I64(fx_run(&f, UV_RUN_DEFAULT), 0, "%s: uv_run(DEFAULT) returns 0", T);

  EXPECT_U64(ow.a.fires, 1, "%s: wheel A's timer ran once", T);
  if (state == B_PASSED || state == B_PENDING) {
    int before = state == B_PASSED;
    if (!tap_ok(ow.b0.fires == 1 && ow.b0_fires_at_a == before && ow.b0.iter[0] == ow.a.iter[0],
                "%s: (test precondition) B's pass of that iteration ran %s A's callback", T,
                before ? "before" : "after"))
      tap_diag("  expected B's entry due with A's to run once, in A's iteration %" PRIu64
               ", %d before A's callback; got %d runs, %d before, in iteration %" PRIu64,
               ow.a.iter[0], before, ow.b0.fires, ow.b0_fires_at_a, ow.b0.iter[0]);
  }
  EXPECT_U64(ow.bn.fires, 1, "%s: B's timer started with 0 from A's callback ran once", T);
  EXPECT_U64(ow.bn.iter[0], ow.a.iter[0] + 1,
             "%s: B's timer started with 0 from A's callback ran in the next loop iteration", T);
  EXPECT_U64(ow.twin_fires, 1, "%s: its uv_timer_t twin ran once", T);
  EXPECT_U64(ow.twin_iter, twin_iteration(ow.a.iter[0]),
             "%s: the uv_timer_t twin ran where libuv runs it (the next iteration from 1.48, the "
             "same before)",
             T);
  if (state == B_LATER)
    EXPECT_U64(ow.later.fires, 0, "%s: B's later entry, stopped, never ran", T);
  pw_check(&ow.pw_b, 2, T);
  tap_ok(ow.bn.early == 0 && ow.b0.early == 0 && ow.a.early == 0,
         "%s: no callback ran before its deadline", T);
  fx_close_handle(&ow.twin);
  fx_close(&f);
}

static void test_start_from_other_wheel_twin(void) {
  start_from_other_wheel(B_EMPTY, "start with 0 on an empty wheel from another's callback");
}

static void test_start_from_other_wheel_later_twin(void) {
  start_from_other_wheel(B_LATER, "start with 0 from another wheel's callback, a later entry "
                                  "pending");
}

static void test_start_from_other_wheel_passed_twin(void) {
  start_from_other_wheel(B_PASSED, "start with 0 from another wheel's callback after the pass");
}

static void test_start_from_other_wheel_pending_twin(void) {
  start_from_other_wheel(B_PENDING, "start with 0 from another wheel's callback before the pass");
}

/* ---- 5. Several wheels restarting themselves and each other ---------------- */

enum { MW_WHEELS = 4, MW_TIMERS = 3, MW_ROUNDS = 300 };

typedef struct mw_timer_s {
  uvtw_timer_t timer;
  int wheel;
  uint64_t fires, last_iter;
} mw_timer_t;

static struct {
  fx_t *f;
  uvtw_wheel_t *wheels[MW_WHEELS];
  pass_watch_t pw[MW_WHEELS];
  mw_timer_t timers[MW_WHEELS * MW_TIMERS];
  uint64_t iter0, t0_ns, calls;
  uint64_t twice; /* a timer's callback ran twice in one iteration */
  uint64_t start_errors;
  int bounded, ended;
} mw;

static void mw_cb(uvtw_timer_t *timer) {
  mw_timer_t *t = timer->data;
  uint64_t iter = mw.f->iter;
  pw_note(&mw.pw[t->wheel]);
  if (t->fires > 0 && t->last_iter == iter && mw.twice++ < DIAG_MAX)
    tap_diag("  timer %d ran twice in loop iteration %" PRIu64, (int)(t - mw.timers), iter);
  t->fires++;
  t->last_iter = iter;
  mw.calls++;
  if (iter - mw.iter0 >= MW_ROUNDS) {
    mw.ended = 1;
    return;
  }
  if (mw.calls >= CHAIN_MAX || uv_hrtime() - mw.t0_ns > BOUND_NS) {
    mw.bounded = 1;
    return;
  }
  /* A random timer, on any wheel, this one among them, and half of the
   * time this one too: every callback keeps at least one timer going, and
   * wheels run empty and are started again from the others. */
  mw_timer_t *o = &mw.timers[fx_rng_below(MW_WHEELS * MW_TIMERS)];
  if (uvtw_timer_start(&o->timer, mw_cb, 0, 0) != 0)
    mw.start_errors++;
  if (o != t && fx_rng_below(2) == 0 && uvtw_timer_start(timer, mw_cb, 0, 0) != 0)
    mw.start_errors++;
}

static void test_one_pass_per_iteration(void) {
  const char *T = "one pass per iteration, several wheels";
  static const char *const names[MW_WHEELS] = {"0", "1", "2", "3"};
  fx_t f;
  uint64_t iterations;

  if (!fx_open_more(&f, T, NULL, MW_WHEELS - 1, NULL))
    return;
  memset(&mw, 0, sizeof mw);
  mw.f = &f;
  mw.wheels[0] = f.wheel;
  for (int k = 1; k < MW_WHEELS; k++)
    mw.wheels[k] = f.more[k - 1];
  for (int k = 0; k < MW_WHEELS; k++)
    pw_begin(&mw.pw[k], mw.wheels[k], names[k]);
  for (int i = 0; i < MW_WHEELS * MW_TIMERS; i++) {
    mw.timers[i].wheel = i % MW_WHEELS;
    uvtw_timer_init(mw.wheels[i % MW_WHEELS], &mw.timers[i].timer);
    mw.timers[i].timer.data = &mw.timers[i];
  }
  mw.iter0 = f.iter;
  mw.t0_ns = uv_hrtime();
  for (int i = 0; i < MW_WHEELS * MW_TIMERS; i++)
    if (uvtw_timer_start(&mw.timers[i].timer, mw_cb, 0, 0) != 0)
      mw.start_errors++;
  EXPECT_I64(fx_run(&f, UV_RUN_DEFAULT), 0, "%s: uv_run(DEFAULT) returns 0 once the restarts end",
             T);
  iterations = f.iter - mw.iter0 + 1;
  tap_diag("%s: %" PRIu64 " callbacks in %" PRIu64 " loop iterations", T, mw.calls, iterations);
  EXPECT_U64(mw.start_errors, 0, "%s: every uvtw_timer_start returned 0", T);
  if (!tap_ok(mw.ended && !mw.bounded,
              "%s: the restarts went on for %d loop iterations within the bound", T, MW_ROUNDS))
    tap_diag("  expected %d iterations before %d callbacks or %" PRIu64 " s, got %" PRIu64
             " iterations and %" PRIu64 " callbacks",
             MW_ROUNDS, CHAIN_MAX, BOUND_NS / 1000000000u, iterations, mw.calls);
  if (!tap_ok(mw.twice == 0, "%s: no timer restarted with 0 ran twice in one loop iteration", T))
    tap_diag("  expected 0, got %" PRIu64, mw.twice);
  for (int k = 0; k < MW_WHEELS; k++)
    pw_check(&mw.pw[k], iterations, T);
  fx_close(&f);
}

/* As real libuv programs use the wheel, against include/uvtw.h and
 * README.md:
 *
 *   busy_uv_timer_starts .... a wheel timer restarting itself with 0 runs once
 *                             per loop iteration even when a uv_timer_t due at
 *                             the same time starts another wheel timer
 *   busy_two_wheels ......... two wheels on one loop whose callbacks restart
 *                             themselves with 0 and start a timer on the other
 *                             wheel: once per iteration each, and the loop
 *                             goes on (libuv < 1.48 ran such timers again in
 *                             the same timer phase)
 */

/* ---- Busy loops on libuv < 1.48 ------------------------------------------ */

enum { BUSY_ITERATIONS = 30 };

typedef struct busy_timer_s {
  uvtw_timer_t timer;
  struct busy_timer_s *other; /* started from this one's callback, if set */
  uint64_t last_iter;
  int runs, twice; /* callbacks; iterations in which it ran more than once */
} busy_timer_t;

static struct {
  busy_timer_t self, other;
  busy_timer_t a, b;
  uv_timer_t starter;
  int start_errors;
} busy;

static void busy_cb(uvtw_timer_t *timer) {
  busy_timer_t *t = timer->data;
  if (t->runs > 0 && t->last_iter == g_fx->iter)
    t->twice++;
  t->last_iter = g_fx->iter;
  if (++t->runs >= BUSY_ITERATIONS)
    return;
  busy.start_errors += uvtw_timer_start(timer, busy_cb, 0, 0) != 0;
  if (t->other != NULL)
    busy.start_errors += uvtw_timer_start(&t->other->timer, busy_cb, 0, 0) != 0;
}

static void busy_init(uvtw_wheel_t *wheel, busy_timer_t *t, busy_timer_t *other) {
  memset(t, 0, sizeof *t);
  uvtw_timer_init(wheel, &t->timer);
  t->timer.data = t;
  t->other = other;
}

static void busy_starter_cb(uv_timer_t *handle) {
  (void)handle;
  busy.start_errors += uvtw_timer_start(&busy.other.timer, busy_cb, 0, 0) != 0;
}

static void test_busy_uv_timer_starts(void) {
  const char *T = "busy_uv_timer_starts";
  fx_t f;
  if (!fx_open(&f, T, NULL))
    return;
  busy_init(f.wheel, &busy.self, NULL);
  busy_init(f.wheel, &busy.other, NULL);
  busy.other.runs = BUSY_ITERATIONS - 1; /* runs once, restarts nothing */
  busy.start_errors = 0;
  uv_timer_init(&f.loop, &busy.starter);
  /* Due at the same time: the wheel's uv_timer_t was started first, so its
   * pass (which restarts `self` with 0) runs before the starter. */
  busy.start_errors += uvtw_timer_start(&busy.self.timer, busy_cb, 5, 0) != 0;
  uv_timer_start(&busy.starter, busy_starter_cb, 5, 0);
  uv_run(&f.loop, UV_RUN_DEFAULT);
  EXPECT_U64(busy.self.runs, BUSY_ITERATIONS, "%s: every round of the self-restarting timer ran",
             T);
  EXPECT_U64(busy.self.twice, 0,
             "%s: it never ran twice in one loop iteration, though a uv_timer_t callback "
             "started another wheel timer after its first pass",
             T);
  EXPECT_U64(busy.other.runs, BUSY_ITERATIONS, "%s: the timer the uv_timer_t started ran", T);
  EXPECT_U64(busy.start_errors, 0, "%s: every start returned 0", T);
  fx_close_handle(&busy.starter);
  fx_close(&f);
}

static void test_busy_two_wheels(void) {
  const char *T = "busy_two_wheels";
  fx_t f;
  if (!fx_open_more(&f, T, NULL, 1, NULL))
    return;
  uvtw_wheel_t *second = f.more[0];
  busy_init(f.wheel, &busy.a, &busy.b);
  busy_init(second, &busy.b, &busy.a);
  busy.start_errors = 0;
  busy.start_errors += uvtw_timer_start(&busy.a.timer, busy_cb, 0, 0) != 0;
  uint64_t iter0 = f.iter;
  uv_run(&f.loop, UV_RUN_DEFAULT);
  EXPECT_U64(f.watchdog_fired, 0, "%s: uv_run(DEFAULT) returned (no endless timer phase)", T);
  tap_ok(busy.a.runs >= BUSY_ITERATIONS && busy.b.runs >= BUSY_ITERATIONS,
         "%s: both timers ran every round", T);
  EXPECT_U64(busy.a.twice + busy.b.twice, 0, "%s: neither ran twice in one loop iteration", T);
  if (!tap_ok(f.iter - iter0 >= BUSY_ITERATIONS - 1,
              "%s: the rounds spread over loop iterations, one each", T))
    tap_diag("  %d rounds in %" PRIu64 " iterations", busy.a.runs, f.iter - iter0);
  EXPECT_U64(busy.start_errors, 0, "%s: every start returned 0", T);
  fx_close(&f);
}

/* ---- again against uv_timer_again ----------------------------------------- */

static const tap_case_t cases[] = {
    TAP_CASE(two_wheels_ping_pong),
    TAP_CASE(self_restart_zero),
    TAP_CASE(run_boundary),
    TAP_CASE(start_after_pass_twin),
    TAP_CASE(start_after_pass_due_twin),
    TAP_CASE(start_after_pass_later_twin),
    TAP_CASE(start_from_other_wheel_twin),
    TAP_CASE(start_from_other_wheel_later_twin),
    TAP_CASE(start_from_other_wheel_passed_twin),
    TAP_CASE(start_from_other_wheel_pending_twin),
    TAP_CASE(one_pass_per_iteration),
    TAP_CASE(busy_uv_timer_starts),
    TAP_CASE(busy_two_wheels),
};

FX_MAIN(cases)
