/* Order and passes (guarantees 2, 3 and 5 in README.md): what a
 * wheel callback may do to other timers due in the same pass, a timer
 * restarted with 0 from its own callback (next loop iteration, never
 * starving the loop), FIFO among equal deadlines across restarts and stops,
 * freed timers, and far deadlines. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"

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
  fx_sleep_ms(3);                           /* so W (1 ms after A) is due too when D and E run */
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

/* B and G, stopped from A's callback, never run; C, restarted from it,
 * runs once at its new deadline. */
static void sp_expect_stops_and_restart(void) {
  EXPECT_ERR(sp_stop_b, 0, "stopping a timer due in the same pass returns 0");
  EXPECT_U64((uint64_t)sp_active_b, 0, "... and makes it inactive");
  EXPECT_U64((uint64_t)sp_b.fires, 0,
             "a timer stopped by another callback of the same pass never runs");
  EXPECT_U64((uint64_t)sp_g.fires, 0,
             "a timer stopped from a callback before its deadline never runs");
  EXPECT_ERR(sp_stop_g, 0, "that stop returns 0");
  EXPECT_ERR(sp_start_c, 0, "restarting a timer due in the same pass returns 0");
  EXPECT_U64(sp_due_c, 30, "the restarted timer is due after its new timeout");
  EXPECT_U64((uint64_t)sp_c.fires, 1,
             "a timer restarted later from the same pass runs once, later");
  if (!tap_ok(sp_c.fires >= 1 && sp_a.fires >= 1 && sp_c.now[0] >= sp_a.now[0] + 30,
              "... no earlier than its new deadline"))
    tap_diag("  expected uv_now >= %" PRIu64 ", got %" PRIu64, sp_a.now[0] + 30, sp_c.now[0]);
}

/* The pass goes on after A's callback touched other timers; D, restarted
 * as due, and E, started as due, run in the next iteration. */
static void sp_expect_pass_goes_on(void) {
  EXPECT_U64((uint64_t)sp_f.fires, 1, "the pass goes on after a callback touched other timers");
  EXPECT_U64(sp_f.iter[0], sp_a.iter[0], "... in the same loop iteration");
  EXPECT_U64((uint64_t)sp_d.fires, 1, "a timer due in this pass and restarted as due runs once");
  EXPECT_U64(sp_d.iter[0], sp_a.iter[0] + 1,
             "... in the next loop iteration, not in the same pass");
  EXPECT_ERR(sp_start_e, 0, "starting a timer from a callback returns 0");
  EXPECT_U64((uint64_t)sp_e.fires, 1, "a timer started already due from a callback runs once");
  EXPECT_U64(sp_e.iter[0], sp_a.iter[0] + 1,
             "... in the next loop iteration, not in the same pass");
}

/* S restarts itself in its one-shot callback. */
static void sp_expect_self_restart(void) {
  EXPECT_U64((uint64_t)sp_s.fires, 2, "a one-shot that restarts itself in its callback runs again");
  EXPECT_U64((uint64_t)sp_s.active_in_cb[0], 0, "... and was inactive on entry to its callback");
  EXPECT_ERR(sp_s_stop_result, 0, "stop of itself inside its one-shot callback returns 0");
  if (!tap_ok(sp_s.fires >= 2 && sp_s.now[1] >= sp_s.now[0] + 10,
              "the self-restarted timer runs no earlier than its new deadline"))
    tap_diag("  expected uv_now >= %" PRIu64 ", got %" PRIu64, sp_s.now[0] + 10, sp_s.now[1]);
  EXPECT_ERR(sp_s_again_result, 0, "again on itself with repeat 0 inside its callback returns 0");
  EXPECT_U64((uint64_t)sp_s_active_after_again, 0, "... and leaves it inactive");
}

static void test_same_pass(void) {
  const char *T = "same pass";
  fx_t f;
  uvtw_wheel_t *wheel;
  const char *expect_log;
  int w_in_first_pass;

  if (!fx_open(&f, T, NULL))
    return;
  wheel = f.wheel;
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
  uv_run(&f.loop, UV_RUN_DEFAULT);

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
  sp_expect_stops_and_restart();
  sp_expect_pass_goes_on();
  sp_expect_self_restart();
  EXPECT_U64((uint64_t)sp_w.fires, 1, "a timer due 1 ms after the pass runs once");
  EXPECT_U64(sp_w.iter[0], sp_a.iter[0] + !w_in_first_pass,
             "... in the first iteration in which it is due");
  tap_ok(sp_a.early + sp_c.early + sp_d.early + sp_e.early + sp_s.early + sp_f.early + sp_w.early ==
             0,
         "no callback of the same-pass scenario ran early");
  fx_close(&f);
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
    if (g_fx->iter == self0.last_iter)
      self0.same_iteration++;
    else if (g_fx->iter != self0.last_iter + 1)
      self0.gaps++;
    if (self0.idle_runs == self0.idle_at_last)
      self0.idle_not_between++;
    if (self0.check_runs == self0.check_at_last)
      self0.check_not_between++;
  }
  self0.last_iter = g_fx->iter;
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

static void test_self_restart_zero_no_starving(void) {
  const char *T = "self-restart with timeout 0";
  fx_t f;
  uvtw_wheel_t *wheel;

  if (!fx_open(&f, T, NULL))
    return;
  wheel = f.wheel;
  memset(&self0, 0, sizeof self0);
  uvtw_timer_init(wheel, &self0.timer);
  uv_idle_init(&f.loop, &self0.idle);
  uv_idle_start(&self0.idle, self0_idle_cb);
  uv_check_init(&f.loop, &self0.check);
  uv_check_start(&self0.check, self0_check_cb);
  uv_unref((uv_handle_t *)&self0.check);
  uv_timer_init(&f.loop, &self0.other);
  uv_timer_start(&self0.other, self0_other_cb, 3, 0);
  uvtw_timer_start(&self0.timer, self0_cb, 0, 0);
  uv_run(&f.loop, UV_RUN_DEFAULT);

  EXPECT_U64(self0.restart_failures, 0, "%s: every restart returned 0", T);
  EXPECT_U64(self0.same_iteration, 0,
             "%s: never runs twice in one loop iteration (not recursively)", T);
  EXPECT_U64(self0.idle_not_between + self0.check_not_between, 0,
             "%s: idle and check handles run between any two of its callbacks", T);
  EXPECT_U64((uint64_t)self0.other_fired, 1, "%s: a uv_timer_t due meanwhile still runs", T);
  EXPECT_U64((uint64_t)self0.active_when_other_fired, 1,
             "%s: ... while the wheel timer keeps restarting", T);
  EXPECT_U64(self0.gaps, 0, "%s: each restart runs in the very next loop iteration", T);
  if (!tap_ok(self0.fires >= SELF_MIN_RUNS && self0.fires < SELF_MAX_RUNS,
              "%s: it kept running, once per iteration, until told to stop", T))
    tap_diag("  expected %d..%d runs, got %" PRIu64, SELF_MIN_RUNS, SELF_MAX_RUNS - 1, self0.fires);
  fx_close_handle(&self0.idle);
  fx_close_handle(&self0.check);
  fx_close_handle(&self0.other);
  fx_close(&f);
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
  g_kick.due_iter[g_kick.due_runs < 2 ? g_kick.due_runs : 1] = g_fx->iter;
  if (++g_kick.due_runs == 1)
    uvtw_timer_start(timer, kick_due_cb, 0, 0); /* due again: next iteration */
}

static void kick_prepare_cb(uv_prepare_t *handle) {
  /* Runs after the timer phase and before poll: between the pass and the
   * wheel's own async callback. */
  if (g_kick.due_runs == 1 && g_kick.later_starts == 0) {
    g_kick.later_starts++;
    uvtw_timer_start(&g_kick.later, fx_noop_timer_cb, 1000, 0);
  }
  if (g_kick.due_runs >= 2)
    uv_prepare_stop(handle);
}

static void test_due_entry_not_delayed(void) {
  const char *T = "due entry not delayed by a later start";
  fx_t f;
  uvtw_wheel_t *wheel;

  if (!fx_open(&f, T, NULL))
    return;
  wheel = f.wheel;
  memset(&g_kick, 0, sizeof g_kick);
  uvtw_timer_init(wheel, &g_kick.due);
  uvtw_timer_init(wheel, &g_kick.later);
  uv_prepare_init(&f.loop, &g_kick.prepare);
  uv_prepare_start(&g_kick.prepare, kick_prepare_cb);
  uvtw_timer_start(&g_kick.due, kick_due_cb, 5, 0);
  uint64_t t0 = uv_now(&f.loop);
  while (g_kick.due_runs < 2 && uv_now(&f.loop) - t0 < 3000 && g_fx->watchdog_fired == 0)
    uv_run(&f.loop, UV_RUN_ONCE);
  uint64_t waited = uv_now(&f.loop) - t0;
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
  fx_close_handle(&g_kick.prepare);
  fx_close(&f);
}

/* Equal deadlines run in the order of the last (re)start: 300 timers, first
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
  EXPECT_U64((uint64_t)n_got, (uint64_t)n_expect, "%s: every timer still started ran once", T);
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

/* A fixed shuffle of the first RO_N - 20 timers. */
static void ro_shuffle(int perm[RO_N]) {
  uint32_t seed = 12345;
  for (int i = RO_N - 21; i > 0; i--) { /* Fisher-Yates over the first 280 */
    seed = seed * 1103515245u + 12345u;
    int j = (int)((seed >> 8) % (uint32_t)(i + 1));
    int tmp = perm[i];
    perm[i] = perm[j];
    perm[j] = tmp;
  }
}

/* Restarts in `perm` order to one deadline, some stopped, some restarted
 * twice, then the last 20 started fresh. */
static void ro_restart(const int perm[RO_N], bool stopped[RO_N]) {
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
}

/* The expected order: first restarts (minus the restarted-twice and the
 * stopped), then the second restarts, then the fresh starts. Returns the
 * count. */
static int ro_expected(const int perm[RO_N], const bool stopped[RO_N], int expect[RO_N]) {
  int n_expect = 0;
  for (int k = 0; k < RO_N - 20; k++)
    if (!stopped[perm[k]] && k % 9 != 0)
      expect[n_expect++] = perm[k];
  for (int k = 0; k < RO_N - 20; k += 9)
    if (!stopped[perm[k]])
      expect[n_expect++] = perm[k];
  for (int i = RO_N - 20; i < RO_N; i++)
    expect[n_expect++] = i;
  return n_expect;
}

static void test_restart_order(void) {
  const char *T = "restart order";
  fx_t f;
  uvtw_wheel_t *wheel;
  int expect[RO_N], n_expect, perm[RO_N];
  bool stopped[RO_N] = {false};

  if (!fx_open(&f, T, NULL))
    return;
  wheel = f.wheel;
  ro_fired = 0;
  for (int i = 0; i < RO_N; i++) {
    perm[i] = i;
    uvtw_timer_init(wheel, &ro_timers[i]);
  }
  /* The last 20 are started only at the end, to the same deadline. */
  for (int i = 0; i < RO_N - 20; i++)
    uvtw_timer_start(&ro_timers[i], ro_cb, 30, 0);
  ro_shuffle(perm);
  uv_update_time(&f.loop);
  ro_restart(perm, stopped);
  n_expect = ro_expected(perm, stopped, expect);
  uv_run(&f.loop, UV_RUN_DEFAULT);
  check_fire_order(T, "equal deadlines ran in the order of their last start", ro_order,
                   ro_fired < RO_N + 8 ? ro_fired : RO_N + 8, expect, n_expect);
  fx_close(&f);
}

/* The first callback stops and frees every timer due in the next two
 * milliseconds (their memory may come back from malloc as the replacements)
 * and starts replacements due then. Nothing freed may be read (ASan and
 * Valgrind run this too), the freed timers never run, and the replacements
 * run in order. */
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

static void test_freed_timers_in_next_slots(void) {
  const char *T = "freed timers in the next slots";
  fx_t f;
  if (!fx_open(&f, T, NULL))
    return;
  uvtw_wheel_t *wheel = f.wheel;
  pf_freed_runs = pf_new_runs = pf_new_order_bad = pf_first_runs = 0;
  pf_last_seq = 0;
  uv_update_time(&f.loop);
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
  uv_run(&f.loop, UV_RUN_DEFAULT);
  EXPECT_U64((uint64_t)pf_first_runs, 1, "the callback that frees the next slots' timers ran once");
  EXPECT_U64((uint64_t)pf_freed_runs, 0,
             "timers stopped and freed after their slot was walked never run");
  EXPECT_U64((uint64_t)pf_new_runs, 2 * PF_PER_SLOT,
             "every replacement started into those slots ran");
  EXPECT_U64((uint64_t)pf_new_order_bad, 0,
             "the replacements ran in deadline order, FIFO within one");
  fx_expect_counts(wheel, 0, 1 + 4 * PF_PER_SLOT, 2 * PF_PER_SLOT, 1 + 2 * PF_PER_SLOT,
                   "after the slots were emptied and refilled");
  for (int i = 0; i < 2 * PF_PER_SLOT && pf_first_runs == 1; i++)
    free(pf_new[i]);
  fx_close(&f);
}

/* The same order rules for far deadlines (timeouts over 4.1 s), with
 * restarts to later deadlines, stops followed by a start of the same timer,
 * and stops whose memory is scribbled over and freed at once (ASan and
 * Valgrind see any later use). Takes about 4.3 s of loop time. */
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

/* IP_N timers, each its own allocation, due 4200 to 4260 ms from now. */
static void far_start_all(uvtw_wheel_t *wheel) {
  for (int i = 0; i < IP_N; i++) {
    ip_timers[i] = malloc(sizeof(uvtw_timer_t)); /* not zeroed: init must do what it needs */
    if (ip_timers[i] == NULL) {
      printf("Bail out! out of memory\n");
      exit(1);
    }
    uvtw_timer_init(wheel, ip_timers[i]);
    ip_timers[i]->data = (void *)(intptr_t)i;
    uvtw_timer_start(ip_timers[i], order_cb, 4200 + (uint64_t)(i % 7) * 10, 0);
  }
}

/* From the middle out, so that list order and start order differ:
 * restarts, stop+start pairs, and stops whose memory is freed at once,
 * all to (or from) one deadline, 4300 ms. Returns how many are left, their
 * order in `expect`. */
static int far_restart_from_middle(bool freed[IP_N], int expect[IP_N]) {
  int n_expect = 0;
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
  return n_expect;
}

/* Three restarted again: to the end of the order. One pulled earlier. */
static void far_restart_again(const bool freed[IP_N], int expect[IP_N], int n_expect) {
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
}

static void test_order_far_deadlines(void) {
  const char *T = "order of far deadlines";
  fx_t f;
  uvtw_wheel_t *wheel;
  int expect[IP_N], n_expect;
  bool freed[IP_N] = {false};

  if (!fx_open(&f, T, NULL))
    return;
  wheel = f.wheel;
  order_n = 0;
  uv_update_time(&f.loop);
  far_start_all(wheel);
  n_expect = far_restart_from_middle(freed, expect);
  far_restart_again(freed, expect, n_expect);
  uv_run(&f.loop, UV_RUN_DEFAULT);
  check_fire_order(T, "deadlines in order, equal ones in the order of their last start", order_log,
                   order_n < ORDER_CAP ? order_n : ORDER_CAP, expect, n_expect);
  uvtw_stats_t st;
  uvtw_wheel_stats(wheel, &st);
  EXPECT_U64(st.active, 0, "%s: nothing left active", T);
  for (int i = 0; i < IP_N; i++)
    free(ip_timers[i]);
  fx_close(&f);
}

/* A stop and start that makes a timer the earliest re-arms the wheel's
 * uv_timer_t, so it runs on time, not at the deadline armed before; and a
 * batch of 150 stop+start pairs of far timers (over 4.1 s), to earlier and
 * to later deadlines, runs in deadline order. */
static uv_loop_t *ss_loop;
static uint64_t ss_t0, ss_early_at;

static void ss_early_cb(uvtw_timer_t *timer) {
  (void)timer;
  ss_early_at = uv_now(ss_loop) - ss_t0;
}

static void test_stop_start_earlier(void) {
  const char *T = "stop+start to an earlier deadline";
  fx_t f;
  uvtw_wheel_t *wheel;
  static uvtw_timer_t a, b, many[150];

  if (!fx_open(&f, T, NULL))
    return;
  wheel = f.wheel;
  ss_loop = &f.loop;
  uv_update_time(&f.loop);
  ss_t0 = uv_now(&f.loop);
  ss_early_at = UINT64_MAX;
  order_n = 0;
  /* 150 timers at 4200..4349 ms (far: past 4096 ms); each
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
  uvtw_timer_start(&a, fx_noop_timer_cb, 3000, 0);
  uvtw_timer_start(&b, ss_early_cb, 9000, 0);
  uvtw_timer_stop(&a);
  uvtw_timer_stop(&b);
  uvtw_timer_start(&b, ss_early_cb, 30, 0);
  EXPECT_I64(uvtw_wheel_next_due(wheel), 30, "%s: next_due sees the new deadline", T);
  uv_run(&f.loop, UV_RUN_DEFAULT);
  tap_ok(ss_early_at >= 30 && ss_early_at < 1000,
         "%s: it ran at %" PRIu64 " ms, not at a deadline armed before (3000 or later)", T,
         ss_early_at);
  check_fire_order(T, "the batch: earlier and later deadlines, in deadline order", order_log,
                   order_n < 150 ? order_n : 150, expect, n);
  EXPECT_U64((uint64_t)order_n, 150, "%s: each of the batch ran once", T);
  fx_close(&f);
}

/* ---- Callbacks stopping and freeing the timers still due in their pass ---- */

/* Sixteen timers due together fire in one pass; the first callbacks stop
 * and free timers of the same pass at once: the pass's tail, where the
 * wheel's second walk of the expired list starts, the entries that walk
 * stands on next, one in the middle and the next one due. ASan and Valgrind
 * see any later use of the freed memory. */
enum { SF_N = 16 };
static uvtw_timer_t *sf_timers[SF_N];
static int sf_log[SF_N + 1], sf_n;

static void sf_stop_free(int i) {
  uvtw_timer_stop(sf_timers[i]);
  free(sf_timers[i]);
  sf_timers[i] = NULL;
}

static void sf_cb(uvtw_timer_t *timer) {
  int i = (int)(intptr_t)timer->data;
  if (sf_n < SF_N + 1)
    sf_log[sf_n] = i;
  sf_n++;
  if (i == 0) {
    sf_stop_free(15);
    sf_stop_free(14);
    sf_stop_free(13);
    sf_stop_free(8);
  } else if (i == 1) {
    sf_stop_free(12);
    sf_stop_free(11);
  } else if (i == 2) {
    sf_stop_free(3);
  }
}

static void test_stop_free_in_pass(void) {
  const char *T = "stop and free in a pass";
  static const int expect[] = {0, 1, 2, 4, 5, 6, 7, 9, 10};
  fx_t f;
  if (!fx_open(&f, T, NULL))
    return;
  sf_n = 0;
  for (int i = 0; i < SF_N; i++) {
    sf_timers[i] = malloc(sizeof *sf_timers[i]);
    if (sf_timers[i] == NULL) {
      printf("Bail out! out of memory\n");
      exit(1);
    }
    uvtw_timer_init(f.wheel, sf_timers[i]);
    sf_timers[i]->data = (void *)(intptr_t)i;
    uvtw_timer_start(sf_timers[i], sf_cb, 10, 0);
  }
  uv_run(&f.loop, UV_RUN_DEFAULT);
  check_fire_order(T, "the timers left ran in start order, the stopped ones never", sf_log,
                   sf_n < SF_N + 1 ? sf_n : SF_N + 1, expect,
                   (int)(sizeof expect / sizeof *expect));
  for (int i = 0; i < SF_N; i++)
    free(sf_timers[i]);
  fx_close(&f);
}

static const tap_case_t cases[] = {
    TAP_CASE(same_pass),
    TAP_CASE(self_restart_zero_no_starving),
    TAP_CASE(due_entry_not_delayed),
    TAP_CASE(restart_order),
    TAP_CASE(freed_timers_in_next_slots),
    TAP_CASE(order_far_deadlines),
    TAP_CASE(stop_start_earlier),
    TAP_CASE(stop_free_in_pass),
};

FX_MAIN(cases)
