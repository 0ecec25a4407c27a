/* Any-thread tasks: uvtw_schedule and its limits, against the "Any-thread
 * tasks" part of include/uvtw.h. Each case runs on a loop and wheel of its
 * own:
 *
 *   argument_errors ........ UV_EINVAL, and *ticket untouched on every error
 *   max_pending ............ UV_ENOBUFS; a won cancel, from any thread (the
 *                            loop's too), frees its place when the loop lets
 *                            go of the task (its next take-in), not before;
 *                            queued tasks hold places; cancel twice after a
 *                            win: 0, 0; after the callback ran: UV_EALREADY,
 *                            UV_EALREADY
 *   loop_thread_keeps_alive  a task scheduled on the loop thread outside the
 *                            wheel's callbacks is taken in at the loop's next
 *                            poll phase, then keeps uv_run(DEFAULT) from
 *                            returning before it ran; one scheduled from a
 *                            wheel callback keeps it going from the call
 *   next_iteration ......... a due task scheduled inside a wheel callback runs
 *                            in the next loop iteration, not in the same pass
 *   max_pending_blocked .... cancelled tasks hold their max_pending places
 *                            while the loop is blocked, and give them back at
 *                            the loop's next drain, long before their deadline
 *   max_pending_chain ...... at max_pending = 1, a task's callback schedules
 *                            the next task
 *
 * Tickets (cancel, release) are in test_tickets.c, many threads at once in
 * test_stress.c, closing with tasks pending in test_close.c.
 */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fixture.h"

#define NS_PER_MS UINT64_C(1000000)

static void close_handle_cb(uv_handle_t *handle) {
  (void)handle;
}

/* ---- Argument errors ------------------------------------------------------ */

static void test_argument_errors(void) {
  fx_t f;
  uvtw_wheel_t *wheel = NULL;
  task_probe_t probe = {0};
  uvtw_ticket_t *ticket = SENTINEL;
  uvtw_stats_t stats;

  if (!fx_open(&f, "errors", NULL))
    return;
  wheel = f.wheel;
  fx_iteration(&f);

  EXPECT_ERR(uvtw_schedule(NULL, 0, task_probe_cb, &probe, &ticket), UV_EINVAL,
             "errors: schedule on a NULL wheel is UV_EINVAL");
  tap_ok(ticket == SENTINEL, "errors: a NULL wheel leaves *ticket untouched");
  EXPECT_ERR(uvtw_schedule(wheel, 0, NULL, &probe, &ticket), UV_EINVAL,
             "errors: schedule with a NULL callback is UV_EINVAL");
  tap_ok(ticket == SENTINEL, "errors: a NULL callback leaves *ticket untouched");
  EXPECT_ERR(uvtw_schedule(NULL, 0, task_probe_cb, &probe, NULL), UV_EINVAL,
             "errors: fire-and-forget on a NULL wheel is UV_EINVAL");
  EXPECT_ERR(uvtw_schedule(wheel, 0, NULL, &probe, NULL), UV_EINVAL,
             "errors: fire-and-forget with a NULL callback is UV_EINVAL");
  EXPECT_ERR(uvtw_ticket_cancel(NULL), UV_EINVAL, "errors: cancelling a NULL ticket is UV_EINVAL");
  uvtw_ticket_release(NULL);
  tap_ok(1, "errors: releasing a NULL ticket is ignored");

  uvtw_wheel_stats(wheel, &stats);
  EXPECT_U64(stats.active, 0, "errors: failed schedules queued nothing (stats.active)");
  EXPECT_U64(stats.started, 0, "errors: failed schedules queued nothing (stats.started)");
  tap_ok(!uv_loop_alive(&f.loop), "errors: failed schedules do not keep the loop alive");

  uv_run(&f.loop, UV_RUN_NOWAIT);
  EXPECT_U64(probe.calls, 0, "errors: no callback ran for a failed schedule");
  fx_close(&f);
}

/* ---- max_pending ------------------------------------------------------------ */

typedef struct max_pending_thread_s {
  uvtw_wheel_t *wheel;
  uvtw_ticket_t *to_cancel;
  task_probe_t *probe;
  int rc_full; /* schedule while full */
  int rc_full_untouched;
  int rc_cancel;       /* cancel of to_cancel */
  int rc_after_cancel; /* schedule right after the won cancel */
  uvtw_ticket_t *ticket;
  int rc_after_drain; /* schedule once the loop drained the cancel */
  int rc_full_again;
} max_pending_thread_t;

/* Before the loop runs again: full, a won cancel, still full. */
static void max_pending_thread(void *arg) {
  max_pending_thread_t *m = arg;
  uvtw_ticket_t *t = SENTINEL;
  m->rc_full = uvtw_schedule(m->wheel, 10000, task_probe_cb, m->probe, &t);
  m->rc_full_untouched = (t == SENTINEL);
  m->rc_cancel = uvtw_ticket_cancel(m->to_cancel);
  m->rc_after_cancel = uvtw_schedule(m->wheel, 10000, task_probe_cb, m->probe, NULL);
}

/* After the loop ran: the cancelled task's place is free, and only it. */
static void max_pending_thread_after_drain(void *arg) {
  max_pending_thread_t *m = arg;
  m->ticket = SENTINEL;
  m->rc_after_drain = uvtw_schedule(m->wheel, 10000, task_probe_cb, m->probe, &m->ticket);
  m->rc_full_again = uvtw_schedule(m->wheel, 10000, task_probe_cb, m->probe, NULL);
}

enum { MP_LIMIT = 4 };

/* test_max_pending's tasks: 0..7 are cancelled, 8..11 fire, 15 is
 * rejected. */
static struct {
  task_probe_t probes[16];
  uvtw_ticket_t *tickets[16];
} mp;

/* Up to the limit, and one past it; a won cancel on the loop thread frees
 * its place only when the loop lets go of the task. */
static void mp_fill_to_limit(fx_t *f) {
  uvtw_ticket_t *t;
  int ok = 1;
  for (int i = 0; i < MP_LIMIT; i++) {
    mp.tickets[i] = NULL;
    ok &= uvtw_schedule(f->wheel, 10000, task_probe_cb, &mp.probes[i], &mp.tickets[i]) == 0;
    ok &= mp.tickets[i] != NULL && mp.tickets[i] != SENTINEL;
  }
  tap_ok(ok, "max_pending: %d schedules up to the limit succeed and hand out tickets", MP_LIMIT);

  t = SENTINEL;
  EXPECT_ERR(uvtw_schedule(f->wheel, 10000, task_probe_cb, &mp.probes[15], &t), UV_ENOBUFS,
             "max_pending: one schedule past the limit is UV_ENOBUFS");
  tap_ok(t == SENTINEL, "max_pending: UV_ENOBUFS leaves *ticket untouched");
  EXPECT_ERR(uvtw_schedule(f->wheel, 0, task_probe_cb, &mp.probes[15], NULL), UV_ENOBUFS,
             "max_pending: fire-and-forget tasks count against the limit too");

  EXPECT_ERR(uvtw_ticket_cancel(mp.tickets[1]), 0, "max_pending: cancelling a pending task wins");
  EXPECT_ERR(uvtw_ticket_cancel(mp.tickets[1]), 0,
             "cancel: cancelling again after a win returns 0 again");
  /* The four tasks are still queued (the loop takes them in at its next
   * poll phase), and a won cancel frees its place only when the loop lets
   * go of the task: on the loop's thread too, where no call touches the
   * wheel outside its callbacks. */
  EXPECT_ERR(uvtw_schedule(f->wheel, 10000, task_probe_cb, &mp.probes[15], NULL), UV_ENOBUFS,
             "max_pending: a won cancel on the loop thread keeps its place until the loop lets go "
             "of the task");
  fx_iteration(f); /* takes the tasks in; lets go of the cancelled one */
  mp.tickets[4] = SENTINEL;
  EXPECT_ERR(uvtw_schedule(f->wheel, 10000, task_probe_cb, &mp.probes[4], &mp.tickets[4]), 0,
             "max_pending: once the loop took the queue in, the cancelled task's place is free");
  if (mp.tickets[4] == SENTINEL)
    mp.tickets[4] = NULL; /* failed: nothing to cancel or release (both take NULL) */
  EXPECT_ERR(uvtw_schedule(f->wheel, 10000, task_probe_cb, &mp.probes[15], NULL), UV_ENOBUFS,
             "max_pending: ...and only one place");
}

/* The same from another thread, for a task in the wheel: a cancel there
 * frees the place once the loop has let go of the task, at its next
 * take-in; its own tasks wait in the queue, which counts. */
static void mp_other_thread(fx_t *f) {
  max_pending_thread_t m = {.wheel = f->wheel, .to_cancel = mp.tickets[2], .probe = &mp.probes[5]};
  uv_thread_t thread;
  uv_thread_create(&thread, max_pending_thread, &m);
  uv_thread_join(&thread);
  EXPECT_ERR(m.rc_full, UV_ENOBUFS, "max_pending: another thread gets UV_ENOBUFS while full");
  tap_ok(m.rc_full_untouched, "max_pending: ...and its *ticket is untouched");
  EXPECT_ERR(m.rc_cancel, 0, "max_pending: another thread's cancel of a loop-thread task wins");
  EXPECT_ERR(m.rc_after_cancel, UV_ENOBUFS,
             "max_pending: that cancelled task keeps its place until the loop lets go of it");
  fx_iteration(f);
  uv_thread_create(&thread, max_pending_thread_after_drain, &m);
  uv_thread_join(&thread);
  EXPECT_ERR(m.rc_after_drain, 0,
             "max_pending: once the loop drained the cancel, the other thread gets the place");
  tap_ok(m.ticket != SENTINEL && m.ticket != NULL, "max_pending: ...and a ticket");
  EXPECT_ERR(m.rc_full_again, UV_ENOBUFS,
             "max_pending: a queued cross-thread task holds its place");
  mp.tickets[5] = m.ticket == SENTINEL ? NULL : m.ticket;
}

/* Cancel everything left; none of it may run, nor keep the loop alive. */
static void mp_cancel_the_rest(fx_t *f) {
  int ok = 1;
  for (int i = 0; i < 6; i++) {
    if (i == 1 || i == 2 || mp.tickets[i] == NULL)
      continue;
    ok &= uvtw_ticket_cancel(mp.tickets[i]) == 0;
  }
  tap_ok(ok, "max_pending: cancelling the other pending tasks wins");
  for (int i = 0; i < 6; i++)
    uvtw_ticket_release(mp.tickets[i]);
  EXPECT_ERR(uvtw_schedule(f->wheel, 0, task_probe_cb, &mp.probes[15], NULL), UV_ENOBUFS,
             "max_pending: cancelled tasks hold their places until the loop lets go of them");
  fx_iteration(f); /* the loop lets go of every cancelled task */
}

/* Firing also frees places. */
static void mp_firing_frees(fx_t *f) {
  int ok = 1;
  for (int i = 0; i < MP_LIMIT; i++) {
    mp.tickets[i] = NULL;
    ok &= uvtw_schedule(f->wheel, 0, task_probe_cb, &mp.probes[8 + i], &mp.tickets[i]) == 0;
  }
  tap_ok(ok, "max_pending: after cancelling everything, %d places are free again", MP_LIMIT);
  /* Scheduled outside the wheel's callbacks after the loop ran, they keep
   * the loop alive once taken in: one iteration does that. */
  fx_iteration(f);
  uint64_t t0 = uv_hrtime();
  uv_run(&f->loop, UV_RUN_DEFAULT);
  uint64_t run_ms = (uv_hrtime() - t0) / NS_PER_MS;
  uv_run(&f->loop, UV_RUN_DEFAULT);
  if (!tap_ok(run_ms < 2000, "max_pending: cancelled 10 s tasks do not keep the loop alive"))
    tap_diag("  uv_run(DEFAULT) took %" PRIu64 " ms", run_ms);

  ok = 1;
  for (int i = 0; i < 8; i++)
    ok &= mp.probes[i].calls == 0;
  tap_ok(ok, "max_pending: no cancelled task ever ran");
  ok = 1;
  for (int i = 8; i < 8 + MP_LIMIT; i++)
    ok &= mp.probes[i].calls == 1 && mp.probes[i].status == 0 && !mp.probes[i].wrong_thread;
  tap_ok(ok, "max_pending: the %d 0 ms tasks ran once each, with status 0, on the loop thread",
         MP_LIMIT);
  EXPECT_U64(mp.probes[15].calls, 0, "max_pending: no rejected task ever ran");
}

/* The tasks that fired (their tickets in 0..MP_LIMIT-1) gave their places
 * back. */
static void mp_fired_gave_places_back(fx_t *f) {
  int ok = 1;
  for (int i = 0; i < MP_LIMIT; i++) {
    ok &= uvtw_ticket_cancel(mp.tickets[i]) == UV_EALREADY;
    ok &= uvtw_ticket_cancel(mp.tickets[i]) == UV_EALREADY;
  }
  tap_ok(ok, "cancel: cancelling after the callback ran returns UV_EALREADY, twice");
  for (int i = 0; i < MP_LIMIT; i++)
    uvtw_ticket_release(mp.tickets[i]);

  ok = 1;
  for (int i = 0; i < MP_LIMIT; i++) {
    mp.tickets[i] = NULL;
    ok &= uvtw_schedule(f->wheel, 10000, task_probe_cb, &mp.probes[15], &mp.tickets[i]) == 0;
  }
  tap_ok(ok, "max_pending: tasks that fired gave their places back");
  ok = 1;
  for (int i = 0; i < MP_LIMIT; i++) {
    ok &= mp.tickets[i] == NULL || uvtw_ticket_cancel(mp.tickets[i]) == 0;
    uvtw_ticket_release(mp.tickets[i]);
  }
  tap_ok(ok, "max_pending: ...and those cancel again (0)");
}

static void test_max_pending(void) {
  fx_t f;
  uvtw_options_t opts = {.tick_ms = 0, .max_pending = MP_LIMIT};

  memset(&mp, 0, sizeof mp);
  if (!fx_open(&f, "max_pending", &opts))
    return;
  fx_iteration(&f);
  mp_fill_to_limit(&f);
  mp_other_thread(&f);
  mp_cancel_the_rest(&f);
  mp_firing_frees(&f);
  mp_fired_gave_places_back(&f);
  fx_close(&f);
  EXPECT_U64(mp.probes[15].calls, 0,
             "max_pending: tasks cancelled before close never ran, even at close");
}

/* ---- A loop-thread task keeps the loop alive ------------------------------ */

/* A wheel timer's callback schedules a task with a ticket. */
typedef struct from_cb_s {
  uvtw_timer_t timer;
  task_probe_t probe;
  uvtw_ticket_t *ticket;
  int rc;
  uint64_t call_ns;
} from_cb_t;

static void from_cb_timer_cb(uvtw_timer_t *timer) {
  from_cb_t *c = timer->data;
  c->call_ns = uv_hrtime();
  c->rc = uvtw_schedule(g_fx->wheel, 5, task_probe_cb, &c->probe, &c->ticket);
}

/* Outside the wheel's callbacks, a schedule on the loop's thread goes
 * through the queue like any other thread's: the loop takes it in at its
 * next poll phase, and only then does the task keep the loop alive (so
 * here one iteration comes before uv_run(DEFAULT), which may return at
 * once before that). */
static void keep_alive_loop_thread(fx_t *f) {
  task_probe_t forget = {0};
  uvtw_stats_t stats;
  uv_update_time(&f->loop);
  uint64_t t0 = uv_hrtime();
  EXPECT_ERR(uvtw_schedule(f->wheel, 30, task_probe_cb, &forget, NULL), 0,
             "keep-alive: fire-and-forget schedule on the loop thread succeeds");
  uvtw_wheel_stats(f->wheel, &stats);
  EXPECT_U64(stats.active, 0,
             "keep-alive: the task waits in the queue until the loop takes it in (not active)");
  EXPECT_I64(uvtw_wheel_next_due(f->wheel), -1, "keep-alive: ...nor seen by next_due");
  fx_iteration(f);
  uvtw_wheel_stats(f->wheel, &stats);
  EXPECT_U64(stats.active, 1,
             "keep-alive: the loop's next iteration takes the loop-thread task in (stats.active)");
  tap_ok(uv_loop_alive(&f->loop), "keep-alive: once taken in, it keeps the loop alive");
  /* The task's deadline is uv_hrtime() at the call + 30 ms; next_due counts
   * on uv_now(), which may lag uv_hrtime() (a coarse clock, a slow run). */
  int64_t due = uvtw_wheel_next_due(f->wheel);
  uint64_t after_ms = uv_hrtime() / 1000000;
  int64_t lag = after_ms > uv_now(&f->loop) ? (int64_t)(after_ms - uv_now(&f->loop)) : 0;
  if (!tap_ok(due >= 0 && due <= 30 + lag,
              "keep-alive: next_due sees the task once taken in, due 30 ms from the call"))
    tap_diag("  next_due = %" PRId64 ", expected 0..%" PRId64 " (30 + uv_now's lag)", due,
             30 + lag);

  uv_run(&f->loop, UV_RUN_DEFAULT);
  uint64_t elapsed_ns = uv_hrtime() - t0;
  EXPECT_U64(forget.calls, 1, "keep-alive: uv_run(DEFAULT) returned only after the 30 ms task ran");
  EXPECT_U64(forget.status, 0, "keep-alive: ...with status 0");
  if (!tap_ok(forget.calls == 1 && forget.ran_ns - t0 >= 29 * NS_PER_MS,
              "keep-alive: ...not before 29 ms after the call"))
    tap_diag("  it ran after %.3f ms", (forget.ran_ns - t0) / 1e6);
  if (!tap_ok(elapsed_ns < 2000 * NS_PER_MS, "keep-alive: ...and the loop ended right after it"))
    tap_diag("  uv_run took %.3f ms", elapsed_ns / 1e6);
}

/* From a wheel callback, the task is taken in at the end of the pass and
 * keeps the loop alive from the call: the timer is the only thing that
 * keeps the loop alive until then, and uv_run(DEFAULT) goes on to the
 * task. */
static void keep_alive_from_wheel_cb(fx_t *f) {
  from_cb_t h, *held = &h;
  memset(&h, 0, sizeof h);
  uvtw_timer_init(f->wheel, &held->timer);
  held->timer.data = held;
  EXPECT_ERR(uvtw_timer_start(&held->timer, from_cb_timer_cb, 1, 0), 0,
             "keep-alive: a wheel timer that schedules a 5 ms task with a ticket is started");
  uv_run(&f->loop, UV_RUN_DEFAULT);
  EXPECT_ERR(held->rc, 0, "keep-alive: a schedule with a ticket from a wheel callback succeeds");
  EXPECT_U64(held->probe.calls, 1,
             "keep-alive: uv_run(DEFAULT) returned only after the task scheduled from the wheel "
             "callback ran (it kept the loop alive from the call)");
  EXPECT_U64(held->probe.status, 0, "keep-alive: ...with status 0");
  if (!tap_ok(held->probe.calls == 1 && held->probe.ran_ns - held->call_ns >= 4 * NS_PER_MS,
              "keep-alive: ...not before 4 ms after the call"))
    tap_diag("  it ran after %.3f ms", (held->probe.ran_ns - held->call_ns) / 1e6);
  EXPECT_ERR(uvtw_ticket_cancel(held->ticket), UV_EALREADY,
             "keep-alive: its cancel afterwards is UV_EALREADY");
  uvtw_ticket_release(held->ticket);
}

static void test_loop_thread_keeps_alive(void) {
  fx_t f;
  uvtw_stats_t stats;

  if (!fx_open(&f, "keep-alive", NULL))
    return;
  fx_iteration(&f);
  tap_ok(!uv_loop_alive(&f.loop), "keep-alive: an idle wheel does not keep the loop alive");
  keep_alive_loop_thread(&f);
  keep_alive_from_wheel_cb(&f);
  uvtw_wheel_stats(f.wheel, &stats);
  EXPECT_U64(stats.fired, 3, "keep-alive: stats.fired counts both tasks and the timer");
  EXPECT_U64(stats.active, 0, "keep-alive: stats.active is 0 after both ran");
  fx_close(&f);
}

/* ---- Tasks scheduled inside a wheel callback run in the next iteration --- */

typedef struct chain_s {
  uvtw_wheel_t *wheel;
  uv_check_t check;
  uint64_t iteration; /* bumped once per loop iteration by the check handle */
  uint64_t last_iteration;
  int links;
  int same_pass;  /* links that ran in the iteration of the link before */
  int later_pass; /* links that ran two or more iterations after it */
  int errors;
} chain_t;

enum { CHAIN_LINKS = 200 };

static void chain_check_cb(uv_check_t *check) {
  chain_t *c = check->data;
  c->iteration++;
}

static void chain_cb(void *arg, int status) {
  chain_t *c = arg;
  if (status != 0) {
    c->errors++;
    return;
  }
  if (c->links > 0 && c->iteration == c->last_iteration)
    c->same_pass++;
  if (c->links > 0 && c->iteration > c->last_iteration + 1)
    c->later_pass++;
  c->last_iteration = c->iteration;
  if (++c->links < CHAIN_LINKS && uvtw_schedule(c->wheel, 0, chain_cb, c, NULL) != 0)
    c->errors++;
}

static void test_next_iteration(void) {
  fx_t f;
  chain_t c;

  memset(&c, 0, sizeof c);
  if (!fx_open(&f, "next-iteration", NULL))
    return;
  c.wheel = f.wheel;
  uv_check_init(&f.loop, &c.check);
  c.check.data = &c;
  uv_check_start(&c.check, chain_check_cb);
  uv_unref((uv_handle_t *)&c.check);

  EXPECT_ERR(uvtw_schedule(c.wheel, 0, chain_cb, &c, NULL), 0,
             "next-iteration: first link scheduled");
  uv_run(&f.loop, UV_RUN_DEFAULT);
  EXPECT_U64(
      c.links, CHAIN_LINKS,
      "next-iteration: a chain of 0 ms tasks, each scheduled from the previous one's callback, "
      "keeps the loop alive to the end");
  EXPECT_U64(c.errors, 0, "next-iteration: every link was scheduled and ran with status 0");
  if (!tap_ok(c.same_pass == 0,
              "next-iteration: a due task scheduled inside a wheel callback runs in the next loop "
              "iteration, never in the same pass"))
    tap_diag("  %d of %d links ran in the same loop iteration as the callback that scheduled them",
             c.same_pass, CHAIN_LINKS - 1);
  if (!tap_ok(c.later_pass == 0,
              "next-iteration: ...and in the very next one, not later (a 0 ms task waits no "
              "longer than a uv_timer_t started with 0 from a uv_timer_t callback)"))
    tap_diag("  %d of %d links ran two or more iterations after the link before", c.later_pass,
             CHAIN_LINKS - 1);
  uv_close((uv_handle_t *)&c.check, close_handle_cb);
  fx_close(&f);
}

/* ---- max_pending while the loop is blocked -------------------------------- */

enum { HELD_LIMIT = 8 };

typedef struct held_s {
  uvtw_wheel_t *wheel;
  task_probe_t probes[HELD_LIMIT + 1];
  uvtw_ticket_t *tickets[HELD_LIMIT];
  int scheduled, cancelled, full_while_blocked;
  int scheduled_after;
  uv_timer_t blocker;
} held_t;

static void held_fill_and_cancel(void *arg) {
  held_t *h = arg;
  for (int i = 0; i < HELD_LIMIT; i++)
    h->scheduled +=
        uvtw_schedule(h->wheel, 10000, task_probe_cb, &h->probes[i], &h->tickets[i]) == 0;
  for (int i = 0; i < HELD_LIMIT; i++) {
    h->cancelled += uvtw_ticket_cancel(h->tickets[i]) == 0;
    uvtw_ticket_release(h->tickets[i]);
  }
  h->full_while_blocked =
      uvtw_schedule(h->wheel, 0, task_probe_cb, &h->probes[HELD_LIMIT], NULL) == UV_ENOBUFS;
}

static void held_refill(void *arg) {
  held_t *h = arg;
  for (int i = 0; i < HELD_LIMIT; i++) {
    h->tickets[i] = NULL;
    h->scheduled_after +=
        uvtw_schedule(h->wheel, 10000, task_probe_cb, &h->probes[i], &h->tickets[i]) == 0;
  }
}

/* The loop is blocked inside this callback while another thread fills the
 * wheel's queue and cancels everything. */
static void held_blocker_cb(uv_timer_t *handle) {
  held_t *h = handle->data;
  uv_thread_t thread;
  uv_thread_create(&thread, held_fill_and_cancel, h);
  uv_thread_join(&thread);
}

static void test_max_pending_blocked(void) {
  const char *T = "max_pending_blocked";
  uvtw_options_t opts = {.max_pending = HELD_LIMIT};
  fx_t f;
  held_t *h = fx_xcalloc(1, sizeof *h);
  if (!fx_open(&f, T, &opts)) {
    free(h);
    return;
  }
  fx_iteration(&f);
  h->wheel = f.wheel;
  uv_timer_init(&f.loop, &h->blocker);
  h->blocker.data = h;
  uv_timer_start(&h->blocker, held_blocker_cb, 1, 0);
  uv_run(&f.loop, UV_RUN_ONCE); /* runs the blocker: the loop is busy meanwhile */
  while (h->scheduled == 0 && !f.watchdog_fired)
    uv_run(&f.loop, UV_RUN_ONCE);
  EXPECT_U64(h->scheduled, HELD_LIMIT, "%s: %d tasks fill max_pending while the loop is blocked", T,
             HELD_LIMIT);
  EXPECT_U64(h->cancelled, HELD_LIMIT, "%s: every cancel wins", T);
  EXPECT_U64(h->full_while_blocked, 1,
             "%s: the cancelled tasks keep their places while the loop has not let go of them "
             "(UV_ENOBUFS)",
             T);

  uint64_t t0 = uv_hrtime();
  uvtw_stats_t stats = fx_stats(f.wheel);
  uint64_t batches = stats.remote_batches;
  while (fx_stats(f.wheel).remote_batches == batches && uv_hrtime() - t0 < 2000 * NS_PER_MS)
    fx_iteration(&f);
  uv_thread_t thread;
  uv_thread_create(&thread, held_refill, h);
  uv_thread_join(&thread);
  EXPECT_U64(h->scheduled_after, HELD_LIMIT,
             "%s: once the loop drained the queue, every place is free again", T);
  tap_ok(uv_hrtime() - t0 < 5000 * NS_PER_MS, "%s: ...long before the tasks' 10 s deadline", T);
  int ran = 0;
  for (int i = 0; i <= HELD_LIMIT; i++)
    ran += h->probes[i].calls;
  EXPECT_U64(ran, 0, "%s: no cancelled or refused task ran", T);
  for (int i = 0; i < HELD_LIMIT; i++) {
    uvtw_ticket_cancel(h->tickets[i]);
    uvtw_ticket_release(h->tickets[i]);
  }
  fx_close_handle(&h->blocker);
  fx_close(&f);
  free(h);
}

/* A periodic task at max_pending = 1: each run schedules the next. */
typedef struct pending_chain_s {
  uvtw_wheel_t *wheel;
  int runs, errors;
} pending_chain_t;

enum { CHAIN_RUNS = 20 };

static void pending_chain_cb(void *arg, int status) {
  pending_chain_t *c = arg;
  c->runs++;
  if (status == 0 && c->runs < CHAIN_RUNS &&
      uvtw_schedule(c->wheel, 1, pending_chain_cb, c, NULL) != 0)
    c->errors++;
}

static void test_max_pending_chain(void) {
  const char *T = "max_pending_chain";
  uvtw_options_t opts = {.max_pending = 1};
  fx_t f;
  pending_chain_t c = {NULL, 0, 0};
  if (!fx_open(&f, T, &opts))
    return;
  c.wheel = f.wheel;
  EXPECT_ERR(uvtw_schedule(f.wheel, 1, pending_chain_cb, &c, NULL), 0, "%s: the first task", T);
  uv_run(&f.loop, UV_RUN_DEFAULT);
  EXPECT_U64(c.runs, CHAIN_RUNS,
             "%s: a task that runs gives its place back before its callback, which schedules "
             "the next one",
             T);
  EXPECT_U64(c.errors, 0, "%s: no schedule from a callback got UV_ENOBUFS", T);
  fx_close(&f);
}

static const tap_case_t cases[] = {
    TAP_CASE(argument_errors), TAP_CASE(max_pending),         TAP_CASE(loop_thread_keeps_alive),
    TAP_CASE(next_iteration),  TAP_CASE(max_pending_blocked), TAP_CASE(max_pending_chain),
};

FX_MAIN(cases)
