/* Closing a wheel (include/uvtw.h, uvtw_wheel_close): pending timers
 * become inactive and never fire, pending tasks (in the wheel or still
 * queued) run once with UV_ECANCELED before the close callback, starts and
 * schedules on a closing wheel get UV_ECANCELED, tickets stay safe to cancel
 * and release after close, and closing works from inside a timer or task
 * callback, also from a callback that uvtw_wheel_advance runs after a
 * uv_walk closed the wheel's handles and the loop. The valgrind suite runs
 * this file. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"

/* rand_r is POSIX, not in MinGW: a per-thread LCG spreads the timeouts. */
static unsigned next_random(unsigned *state) {
  *state = *state * 1103515245u + 12345u;
  return (*state >> 16) & 0x7fff;
}

/* A uv_walk callback: closes every handle not closing already. */
static void close_any_handle(uv_handle_t *handle, void *arg) {
  (void)arg;
  if (!uv_is_closing(handle))
    uv_close(handle, NULL);
}

/* ---- A close callback that records what it saw ------------------------------ */

typedef struct close_rec_s {
  int calls;
  uvtw_wheel_t *wheel;
  int start_result; /* of a start tried inside the close callback */
  uvtw_timer_t *try_start;
  uvtw_stats_t stats; /* read inside the close callback */
} close_rec_t;

static void on_wheel_closed(uvtw_wheel_t *wheel, void *arg) {
  close_rec_t *rec = arg;
  rec->calls++;
  rec->wheel = wheel;
  uvtw_wheel_stats(wheel, &rec->stats);
  if (rec->try_start)
    rec->start_result = uvtw_timer_start(rec->try_start, fx_noop_timer_cb, 1, 0);
}

/* ---- Timers pending at close ------------------------------------------------ */

/* On a closing wheel a start or again is refused, a stop is a no-op, and
 * a timer initialised there cannot start. */
static void closing_wheel_refuses(uvtw_wheel_t *wheel, probe_t *p1, probe_t *p2, probe_t *p3,
                                  probe_t *fresh) {
  EXPECT_ERR(probe_start(p1, 5, 0), UV_ECANCELED, "start on a closing wheel returns UV_ECANCELED");
  EXPECT_U64((uint64_t)uvtw_timer_is_active(&p1->timer), 0, "... and leaves the timer inactive");
  EXPECT_ERR(uvtw_timer_again(&p2->timer), UV_ECANCELED,
             "again on a closing wheel returns UV_ECANCELED");
  EXPECT_ERR(uvtw_timer_stop(&p3->timer), 0, "stop of a dropped timer returns 0");
  uvtw_timer_init(wheel, &fresh->timer);
  EXPECT_ERR(uvtw_timer_start(&fresh->timer, probe_cb, 1, 0), UV_ECANCELED,
             "start of a timer initialized on a closing wheel returns UV_ECANCELED");
}

/* The stats after the close against `before` it. */
static void expect_close_counts_nothing(const uvtw_wheel_t *wheel, const uvtw_stats_t *before) {
  uvtw_stats_t after = fx_stats(wheel);
  EXPECT_U64(after.active, 0, "stats.active is 0 after close");
  if (!tap_ok(after.stopped == before->stopped && after.started == before->started &&
                  after.fired == before->fired,
              "timers dropped by close count as neither stopped nor fired (nor started by failed "
              "starts)"))
    tap_diag("  expected started/stopped/fired %" PRIu64 "/%" PRIu64 "/%" PRIu64 ", got %" PRIu64
             "/%" PRIu64 "/%" PRIu64,
             before->started, before->stopped, before->fired, after.started, after.stopped,
             after.fired);
}

static void test_close_pending_timers(void) {
  const char *T = "close with pending timers";
  fx_t f;
  uvtw_wheel_t *wheel;
  probe_t p1, p2, p3, p4, fresh;
  close_rec_t rec, rec2;
  aux_t keep;
  uvtw_stats_t before;

  if (!fx_open(&f, T, NULL))
    return;
  wheel = f.wheel;
  log_reset();
  probe_init(wheel, &p1, '1', NULL);
  probe_init(wheel, &p2, '2', NULL);
  probe_init(wheel, &p3, '3', NULL);
  probe_init(wheel, &p4, '4', NULL);
  probe_init(wheel, &fresh, 'f', NULL);
  probe_start(&p1, 10, 0);
  probe_start(&p2, 20, 5);
  probe_start(&p3, 1000, 0);
  probe_start(&p4, UINT64_MAX, 0);
  uvtw_timer_stop(&p3.timer);
  probe_start(&p3, 1000, 0);
  before = fx_stats(wheel);

  memset(&rec, 0, sizeof rec);
  memset(&rec2, 0, sizeof rec2);
  rec.try_start = &fresh.timer;
  uvtw_wheel_close(wheel, on_wheel_closed, &rec);
  tap_ok(!uvtw_timer_is_active(&p1.timer) && !uvtw_timer_is_active(&p2.timer) &&
             !uvtw_timer_is_active(&p3.timer) && !uvtw_timer_is_active(&p4.timer),
         "uvtw_wheel_close makes every pending timer inactive at once");
  EXPECT_U64(uvtw_timer_get_due_in(&p1.timer), 0, "a timer dropped by close has due_in 0");
  EXPECT_I64(uvtw_wheel_next_due(wheel), -1, "after close nothing is pending (next_due -1)");
  closing_wheel_refuses(wheel, &p1, &p2, &p3, &fresh);
  expect_close_counts_nothing(wheel, &before);
  uvtw_wheel_close(wheel, on_wheel_closed, &rec2); /* a second close is ignored */

  aux_init(&f.loop, &keep, NULL);
  aux_start(&keep, 40); /* run the loop past the short deadlines */
  uv_run(&f.loop, UV_RUN_DEFAULT);
  EXPECT_U64((uint64_t)rec.calls, 1, "the close callback runs once");
  tap_ok(rec.wheel == wheel, "the close callback gets the wheel");
  EXPECT_U64((uint64_t)rec2.calls, 0,
             "a second uvtw_wheel_close is ignored (its callback never runs)");
  EXPECT_ERR(rec.start_result, UV_ECANCELED,
             "start inside the close callback returns UV_ECANCELED");
  EXPECT_U64(rec.stats.active, 0, "stats read in the close callback: nothing active");
  if (!tap_ok(strcmp(g_log, "") == 0, "timers pending at close never run"))
    tap_diag("  expected no callbacks, got \"%s\"", g_log);
  fx_close_handle(&keep.handle);
  f.wheel = NULL; /* closed above */
  fx_close(&f);
  log_reset();
}

static uvtw_wheel_t *cc_wheel;
static close_rec_t cc_rec;
static probe_t cc_a, cc_b, cc_c, cc_r, cc_x;
static int cc_start_x, cc_b_active, cc_again_r, cc_r_active;

static void cc_a_action(probe_t *p) {
  (void)p;
  uvtw_wheel_close(cc_wheel, on_wheel_closed, &cc_rec);
  cc_start_x = probe_start(&cc_x, 5, 0);
  cc_b_active = uvtw_timer_is_active(&cc_b.timer);
}

static void cc_r_action(probe_t *p) {
  uvtw_wheel_close(cc_wheel, on_wheel_closed, &cc_rec);
  cc_r_active = uvtw_timer_is_active(&p->timer);
  cc_again_r = uvtw_timer_again(&p->timer);
}

/* A one-shot closes the wheel; B is due in the same pass, C later. */
static void close_from_oneshot_cb(const char *T) {
  fx_t f;
  aux_t keep;
  if (!fx_open(&f, T, NULL))
    return;
  cc_wheel = f.wheel;
  log_reset();
  memset(&cc_rec, 0, sizeof cc_rec);
  probe_init(cc_wheel, &cc_a, 'A', cc_a_action);
  probe_init(cc_wheel, &cc_b, 'B', NULL);
  probe_init(cc_wheel, &cc_c, 'C', NULL);
  probe_init(cc_wheel, &cc_x, 'X', NULL);
  probe_start(&cc_a, 10, 0);
  probe_start(&cc_b, 10, 0);
  probe_start(&cc_c, 30, 0);
  aux_init(&f.loop, &keep, NULL);
  aux_start(&keep, 60);
  uv_run(&f.loop, UV_RUN_DEFAULT);
  if (!tap_ok(strcmp(g_log, "A") == 0,
              "after a callback closes the wheel, no other timer runs (same pass or later)"))
    tap_diag("  expected \"A\", got \"%s\"", g_log);
  EXPECT_U64((uint64_t)cc_b_active, 0,
             "a timer due in the same pass is inactive right after the close");
  EXPECT_ERR(cc_start_x, UV_ECANCELED,
             "start inside the callback after close returns UV_ECANCELED");
  EXPECT_U64((uint64_t)cc_rec.calls, 1, "closing from a callback: the close callback runs once");
  fx_close_handle(&keep.handle);
  f.wheel = NULL; /* closed above */
  fx_close(&f);
}

/* A repeating timer (already re-armed) closes the wheel in its callback. */
static void close_from_repeating_cb(const char *T) {
  fx_t f;
  aux_t keep;
  if (!fx_open(&f, T, NULL))
    return;
  cc_wheel = f.wheel;
  log_reset();
  memset(&cc_rec, 0, sizeof cc_rec);
  probe_init(cc_wheel, &cc_r, 'R', cc_r_action);
  probe_start(&cc_r, 10, 10);
  aux_init(&f.loop, &keep, NULL);
  aux_start(&keep, 60);
  uv_run(&f.loop, UV_RUN_DEFAULT);
  EXPECT_U64((uint64_t)cc_r.fires, 1,
             "a repeating timer that closes the wheel in its callback never runs again");
  EXPECT_U64((uint64_t)cc_r.active_in_cb[0], 1, "(it was active in its callback before the close)");
  EXPECT_U64((uint64_t)cc_r_active, 0,
             "the close makes the re-armed timer inactive inside its own callback");
  EXPECT_ERR(cc_again_r, UV_ECANCELED,
             "again inside the callback after close returns UV_ECANCELED");
  EXPECT_U64((uint64_t)cc_rec.calls, 1, "the close callback runs once");
  fx_close_handle(&keep.handle);
  f.wheel = NULL; /* closed above */
  fx_close(&f);
  log_reset();
}

/* Close with a NULL callback still closes both handles. */
static void close_with_null_cb(const char *T) {
  fx_t f;
  if (!fx_open(&f, T, NULL))
    return;
  cc_wheel = f.wheel;
  probe_init(cc_wheel, &cc_a, 'a', NULL);
  probe_start(&cc_a, 10, 0);
  uvtw_wheel_close(cc_wheel, NULL, NULL);
  uv_run(&f.loop, UV_RUN_DEFAULT);
  EXPECT_U64((uint64_t)cc_a.fires, 0, "close with a NULL callback: the pending timer never runs");
  f.wheel = NULL;
  f.name = "close with a NULL callback";
  fx_close(&f);
}

static void test_close_from_timer_cb(void) {
  const char *T = "close from a callback";
  close_from_oneshot_cb(T);
  close_from_repeating_cb(T);
  close_with_null_cb(T);
}

/* ---- Tasks pending at close ------------------------------------------------- */

enum { CLOSE_A, CLOSE_B, CLOSE_C, CLOSE_D, CLOSE_E, CLOSE_PROBES };

typedef struct close_test_s {
  uvtw_wheel_t *wheel;
  task_probe_t probes[CLOSE_PROBES];
  int close_called;
  int close_cb_runs;
  int calls_at_close_cb[CLOSE_PROBES];
  int schedule_in_close_cb;
  int schedule_in_task_cb;
  int schedule_in_task_cb_untouched;
  int ecanceled_before_close;
} close_test_t;

static close_test_t *close_ctx;

static void close_task_cb(void *arg, int status) {
  task_probe_cb(arg, status);
  if (status == UV_ECANCELED && !close_ctx->close_called)
    close_ctx->ecanceled_before_close++;
  if (arg == &close_ctx->probes[CLOSE_A]) {
    uvtw_ticket_t *t = SENTINEL;
    close_ctx->schedule_in_task_cb = uvtw_schedule(close_ctx->wheel, 0, task_probe_cb, arg, &t);
    close_ctx->schedule_in_task_cb_untouched = (t == SENTINEL);
  }
}

static void close_test_cb(uvtw_wheel_t *wheel, void *arg) {
  close_test_t *c = arg;
  c->close_cb_runs++;
  tap_ok(wheel == c->wheel, "close: the close callback gets the wheel");
  for (int i = 0; i < CLOSE_PROBES; i++)
    c->calls_at_close_cb[i] = c->probes[i].calls;
  c->schedule_in_close_cb = uvtw_schedule(wheel, 0, task_probe_cb, &c->probes[CLOSE_D], NULL);
}

typedef struct ticket_job_s {
  uvtw_wheel_t *wheel;
  task_probe_t *probe;
  uvtw_ticket_t *ticket;
  int rc;
  int cancel_rc;
} ticket_job_t;

static void schedule_job(void *arg) {
  ticket_job_t *j = arg;
  j->rc = uvtw_schedule(j->wheel, 10000, close_task_cb, j->probe, &j->ticket);
}

static void cancel_release_job(void *arg) {
  ticket_job_t *j = arg;
  j->cancel_rc = uvtw_ticket_cancel(j->ticket);
  uvtw_ticket_release(j->ticket);
}

/* A task callback that closes the wheel, twice (the second call is ignored). */
typedef struct close_inside_s {
  uvtw_wheel_t *wheel;
  int close_cb_runs;
  task_probe_t pending;
} close_inside_t;

static void close_inside_close_cb(uvtw_wheel_t *wheel, void *arg) {
  close_inside_t *c = arg;
  (void)wheel;
  c->close_cb_runs++;
}

static void close_inside_task_cb(void *arg, int status) {
  close_inside_t *c = arg;
  if (status == 0) {
    uvtw_wheel_close(c->wheel, close_inside_close_cb, c);
    uvtw_wheel_close(c->wheel, close_inside_close_cb, c);
  }
}

/* A: 10 s with a ticket; B: 0 ms with a ticket, never given a loop run;
 * C: 5 s fire-and-forget; D: cancelled before close; E: scheduled by
 * another thread and still in the queue at close (the loop never ran). */
static void close_tasks_schedule(close_test_t *c, uvtw_ticket_t *tickets[CLOSE_PROBES]) {
  int ok = 1;
  ok &= uvtw_schedule(c->wheel, 10000, close_task_cb, &c->probes[CLOSE_A], &tickets[CLOSE_A]) == 0;
  ok &= uvtw_schedule(c->wheel, 0, close_task_cb, &c->probes[CLOSE_B], &tickets[CLOSE_B]) == 0;
  ok &= uvtw_schedule(c->wheel, 5000, close_task_cb, &c->probes[CLOSE_C], NULL) == 0;
  ok &= uvtw_schedule(c->wheel, 10000, close_task_cb, &c->probes[CLOSE_D], &tickets[CLOSE_D]) == 0;
  tap_ok(ok, "close: four tasks scheduled on the loop thread");
  EXPECT_ERR(uvtw_ticket_cancel(tickets[CLOSE_D]), 0,
             "close: one of them is cancelled before close");
  ticket_job_t job = {.wheel = c->wheel, .probe = &c->probes[CLOSE_E]};
  uv_thread_t thread;
  uv_thread_create(&thread, schedule_job, &job);
  uv_thread_join(&thread);
  EXPECT_ERR(job.rc, 0, "close: another thread scheduled a fifth task (still queued)");
  tickets[CLOSE_E] = job.ticket;
}

/* Once uvtw_wheel_close has returned, every schedule is refused, from any
 * thread; a won cancel still returns 0. */
static void close_tasks_refused(close_test_t *c, uvtw_ticket_t *cancelled) {
  uvtw_ticket_t *t = SENTINEL;
  EXPECT_ERR(uvtw_schedule(c->wheel, 0, task_probe_cb, &c->probes[CLOSE_D], &t), UV_ECANCELED,
             "close: schedule after uvtw_wheel_close returned is UV_ECANCELED");
  tap_ok(t == SENTINEL, "close: ...and leaves *ticket untouched");
  EXPECT_ERR(uvtw_schedule(c->wheel, 0, task_probe_cb, &c->probes[CLOSE_D], NULL), UV_ECANCELED,
             "close: fire-and-forget after close is UV_ECANCELED");
  ticket_job_t job = {.wheel = c->wheel, .probe = &c->probes[CLOSE_E], .rc = 1, .ticket = SENTINEL};
  uv_thread_t thread;
  uv_thread_create(&thread, schedule_job, &job);
  uv_thread_join(&thread);
  EXPECT_ERR(job.rc, UV_ECANCELED,
             "close: another thread's schedule on the closing wheel is UV_ECANCELED");
  tap_ok(job.ticket == SENTINEL, "close: ...and leaves its *ticket untouched");
  EXPECT_ERR(uvtw_ticket_cancel(cancelled), 0, "close: a won cancel still returns 0 while closing");
}

/* After the close callback: what ran, when, with which status. */
static void close_tasks_expect_cancelled(const close_test_t *c) {
  int ok = 1;
  EXPECT_U64(c->close_cb_runs, 1, "close: the close callback ran exactly once");
  for (int i = 0; i < CLOSE_PROBES; i++) {
    if (i == CLOSE_D)
      continue;
    ok &= c->calls_at_close_cb[i] == 1 && c->probes[i].calls == 1;
    ok &= c->probes[i].status == UV_ECANCELED && !c->probes[i].wrong_thread;
  }
  if (!tap_ok(ok, "close: every pending task (in the wheel or still queued) ran once with "
                  "UV_ECANCELED, on the loop thread, before the close callback"))
    for (int i = 0; i < CLOSE_PROBES; i++)
      tap_diag("  task %c: calls at close cb %d, calls %d, status %s", 'A' + i,
               c->calls_at_close_cb[i], c->probes[i].calls, tap_err_name_(c->probes[i].status));
  EXPECT_U64(c->probes[CLOSE_D].calls, 0,
             "close: the task whose cancel won never ran, not even at close");
  EXPECT_U64(c->ecanceled_before_close, 0, "close: no UV_ECANCELED before uvtw_wheel_close");
  EXPECT_ERR(c->schedule_in_task_cb, UV_ECANCELED,
             "close: schedule inside an UV_ECANCELED callback is UV_ECANCELED");
  tap_ok(c->schedule_in_task_cb_untouched, "close: ...and leaves *ticket untouched");
  EXPECT_ERR(c->schedule_in_close_cb, UV_ECANCELED,
             "close: schedule inside the close callback is UV_ECANCELED");
}

/* E's and B's tickets, cancelled and released from another thread after
 * the loop itself is gone. */
static void close_tasks_release_late(uvtw_ticket_t *e, uvtw_ticket_t *b) {
  uv_thread_t thread;
  ticket_job_t late = {.ticket = e};
  uv_thread_create(&thread, cancel_release_job, &late);
  uv_thread_join(&thread);
  EXPECT_ERR(
      late.cancel_rc, UV_EALREADY,
      "close: another thread cancels a queued-at-close task after the loop closed: UV_EALREADY");
  late.ticket = b;
  uv_thread_create(&thread, cancel_release_job, &late);
  uv_thread_join(&thread);
  EXPECT_ERR(late.cancel_rc, UV_EALREADY, "close: ...and releases the last ticket there");
}

static void test_close_tasks(void) {
  fx_t f;
  close_test_t c;
  uvtw_ticket_t *tickets[CLOSE_PROBES] = {0};

  memset(&c, 0, sizeof c);
  close_ctx = &c;
  if (!fx_open(&f, "close", NULL))
    return;
  c.wheel = f.wheel;
  close_tasks_schedule(&c, tickets);
  c.close_called = 1;
  uvtw_wheel_close(c.wheel, close_test_cb, &c);
  f.wheel = NULL; /* closed here, its callback under test */
  close_tasks_refused(&c, tickets[CLOSE_D]);
  uv_run(&f.loop, UV_RUN_DEFAULT);
  uv_run(&f.loop, UV_RUN_DEFAULT);
  close_tasks_expect_cancelled(&c);
  EXPECT_ERR(uvtw_ticket_cancel(tickets[CLOSE_A]), UV_EALREADY,
             "close: cancel after close of a task that ran with UV_ECANCELED is UV_EALREADY");
  EXPECT_ERR(uvtw_ticket_cancel(tickets[CLOSE_B]), UV_EALREADY,
             "close: ...also for a 0 ms task that never had a loop run");
  EXPECT_ERR(uvtw_ticket_cancel(tickets[CLOSE_D]), 0,
             "close: a won cancel still returns 0 after close");
  uvtw_ticket_release(tickets[CLOSE_A]);
  uvtw_ticket_release(tickets[CLOSE_D]);
  fx_close(&f);
  close_tasks_release_late(tickets[CLOSE_E], tickets[CLOSE_B]);
}

/* Inside the UV_ECANCELED callbacks of a close, every timer is already
 * inactive, whatever its deadline against the task's: a stop there is a
 * no-op that counts nothing. */
typedef struct timers_first_s {
  uvtw_timer_t early, late;
  uvtw_wheel_t *wheel;
  int calls, active_seen, stop_errors;
  uint64_t stopped_before, stopped_after;
} timers_first_t;

static void timers_first_cb(void *arg, int status) {
  timers_first_t *t = arg;
  (void)status;
  t->calls++;
  t->active_seen += uvtw_timer_is_active(&t->early) + uvtw_timer_is_active(&t->late);
  t->stopped_before = fx_stats(t->wheel).stopped;
  t->stop_errors += uvtw_timer_stop(&t->early) != 0;
  t->stop_errors += uvtw_timer_stop(&t->late) != 0;
  t->stopped_after = fx_stats(t->wheel).stopped;
}

static void test_close_timers_first(void) {
  const char *T = "close-timers-first";
  fx_t f;
  timers_first_t t;
  memset(&t, 0, sizeof t);
  if (!fx_open(&f, T, NULL))
    return;
  fx_iteration(&f);
  t.wheel = f.wheel;
  uvtw_timer_init(f.wheel, &t.early);
  uvtw_timer_init(f.wheel, &t.late);
  uvtw_timer_start(&t.early, fx_noop_timer_cb, 100, 0);
  uvtw_timer_start(&t.late, fx_noop_timer_cb, 900000, 0);
  EXPECT_ERR(uvtw_schedule(f.wheel, 500, timers_first_cb, &t, NULL), 0,
             "%s: a task due between the two timers", T);
  fx_wheel_close(&f, f.wheel);
  f.wheel = NULL;
  EXPECT_U64(t.calls, 1, "%s: the task ran once with UV_ECANCELED", T);
  EXPECT_U64(t.active_seen, 0,
             "%s: inside it, both timers (due before and after it) were already inactive", T);
  EXPECT_U64(t.stop_errors, 0, "%s: stopping them there returns 0", T);
  EXPECT_U64(t.stopped_after, t.stopped_before, "%s: ...and counts no stop", T);
  fx_close(&f);
}

/* A task callback closes the wheel (twice: the second call is ignored). */
static void test_close_inside_task(void) {
  fx_t f;
  int ok;
  close_inside_t ci;
  uvtw_ticket_t *pending_ticket = NULL;
  memset(&ci, 0, sizeof ci);
  if (!fx_open(&f, "close-inside", NULL))
    return;
  ci.wheel = f.wheel;
  ok = uvtw_schedule(ci.wheel, 0, close_inside_task_cb, &ci, NULL) == 0;
  ok &= uvtw_schedule(ci.wheel, 10000, task_probe_cb, &ci.pending, &pending_ticket) == 0;
  tap_ok(ok, "close-inside: a closing task and a 10 s task scheduled");
  uv_run(&f.loop, UV_RUN_DEFAULT);
  EXPECT_U64(
      ci.close_cb_runs, 1,
      "close-inside: closing (twice) from inside a task callback runs the close callback once");
  tap_ok(ci.pending.calls == 1 && ci.pending.status == UV_ECANCELED,
         "close-inside: the pending 10 s task ran once with UV_ECANCELED");
  EXPECT_ERR(uvtw_ticket_cancel(pending_ticket), UV_EALREADY,
             "close-inside: its cancel is UV_EALREADY");
  uvtw_ticket_release(pending_ticket);
  f.wheel = NULL; /* closed by the task */
  fx_close(&f);
}

/* ---- Everything outstanding at once, other threads still at work ----------
 * Loop timers, loop-thread tasks, and tasks from other threads (with tickets
 * and fire-and-forget) that are still being scheduled and cancelled while the
 * wheel closes. Every task's argument is a heap block freed by whoever ends
 * the task (its callback, or the thread whose cancel won), so Valgrind and
 * LeakSanitizer see a leak or a double free if any task is lost or ended
 * twice. Tickets are cancelled and released after the wheel's close
 * callback has run. */

#define THREADS 3
#define PER_THREAD 3000
#define LOOP_TIMERS 500
#define LOOP_TASKS 500

typedef struct {
  _Atomic int ended; /* callbacks + won cancels that ended this task */
  int status;
} task_arg_t;

static uvtw_wheel_t *wheel;
static _Atomic int close_cb_ran;
static _Atomic int producers_done; /* threads that will not call uvtw_schedule again */
static _Atomic long scheduled_ok, ran_due, ran_cancelled, cancels_won, schedule_refused;
static _Atomic long ended_twice;
static uvtw_timer_t timers[LOOP_TIMERS];
static int timer_fired_after_close;
static uvtw_ticket_t *loop_tickets[LOOP_TASKS];
static task_arg_t *loop_args[LOOP_TASKS];

static void oc_task_cb(void *p, int status) {
  task_arg_t *arg = p;
  if (atomic_fetch_add(&arg->ended, 1) != 0)
    atomic_fetch_add(&ended_twice, 1);
  if (status == 0)
    atomic_fetch_add(&ran_due, 1);
  else if (status == UV_ECANCELED)
    atomic_fetch_add(&ran_cancelled, 1);
  free(arg);
}

static void oc_timer_cb(uvtw_timer_t *t) {
  (void)t;
  if (atomic_load(&close_cb_ran))
    timer_fired_after_close++;
}

typedef struct {
  pthread_t thread;
  uvtw_ticket_t *tickets[PER_THREAD];
  task_arg_t *args[PER_THREAD];
  int count;
} producer_t;

static void *produce(void *p) {
  producer_t *self = p;
  unsigned seed = (unsigned)(uintptr_t)self;
  for (int i = 0; i < PER_THREAD; i++) {
    task_arg_t *arg = calloc(1, sizeof *arg);
    bool with_ticket = i % 2 == 0;
    uvtw_ticket_t *ticket = NULL;
    int r = uvtw_schedule(wheel, (uint64_t)(next_random(&seed) % 200), oc_task_cb, arg,
                          with_ticket ? &ticket : NULL);
    if (r != 0) {
      free(arg);
      atomic_fetch_add(&schedule_refused, 1);
      if (r != UV_ECANCELED)
        atomic_fetch_add(&ended_twice, 1000000); /* an unexpected error: fail below */
      break;                                     /* the wheel is closing: stop using it */
    }
    atomic_fetch_add(&scheduled_ok, 1);
    if (with_ticket) {
      self->tickets[self->count] = ticket;
      self->args[self->count] = arg;
      self->count++;
      /* Cancel some right away, racing the loop taking them in. */
      if (i % 6 == 0 && uvtw_ticket_cancel(ticket) == 0) {
        atomic_fetch_add(&cancels_won, 1);
        free(arg);
      }
    }
    if (i % 64 == 0)
      sched_yield();
  }
  atomic_fetch_add(&producers_done, 1);
  /* Hold the remaining tickets until the wheel is gone, then cancel (must
   * not win: every pending task was ended by the close) and release. */
  while (!atomic_load(&close_cb_ran))
    sched_yield();
  for (int i = 0; i < self->count; i++) {
    int r = uvtw_ticket_cancel(self->tickets[i]);
    if (r == 0 && i % 3 != 0) /* only the early cancels (every 6th schedule) may have won */
      atomic_fetch_add(&ended_twice, 1000);
    uvtw_ticket_release(self->tickets[i]);
  }
  return NULL;
}

/* The wheel pointer dies when this returns, so wait for every producer to
 * have stopped calling uvtw_schedule (each stops at its first UV_ECANCELED). */
static void on_close(uvtw_wheel_t *w, void *arg) {
  (void)w;
  (void)arg;
  while (atomic_load(&producers_done) < THREADS)
    sched_yield();
  atomic_store(&close_cb_ran, 1);
}

static uv_timer_t closer;
/* Closes once the other threads have scheduled a good share of their tasks,
 * while they are still scheduling and cancelling. */
static void close_now(uv_timer_t *t) {
  (void)t;
  if (atomic_load(&scheduled_ok) < LOOP_TASKS + THREADS * PER_THREAD / 3 &&
      atomic_load(&producers_done) < THREADS)
    return;
  uvtw_wheel_close(wheel, on_close, NULL);
  tap_ok(uvtw_schedule(wheel, 0, oc_task_cb, NULL, NULL) == UV_ECANCELED,
         "uvtw_schedule on a closing wheel returns UV_ECANCELED");
  uv_close((uv_handle_t *)&closer, NULL);
}

/* Timers, some repeating, and loop-thread tasks, half with tickets. */
static void oc_fill(void) {
  for (int i = 0; i < LOOP_TIMERS; i++) {
    uvtw_timer_init(wheel, &timers[i]);
    uvtw_timer_start(&timers[i], oc_timer_cb, (uint64_t)(i % 100) * 3, i % 7 == 0 ? 5 : 0);
  }
  for (int i = 0; i < LOOP_TASKS; i++) {
    loop_args[i] = calloc(1, sizeof *loop_args[i]);
    int r = uvtw_schedule(wheel, (uint64_t)(i % 50) * 4, oc_task_cb, loop_args[i],
                          i % 2 ? &loop_tickets[i] : NULL);
    if (r == 0)
      atomic_fetch_add(&scheduled_ok, 1);
  }
}

/* Right after the close: every timer inactive, every loop-thread ticket
 * too late to cancel. */
static void oc_expect_closed(void) {
  int active_after = 0;
  for (int i = 0; i < LOOP_TIMERS; i++)
    active_after += uvtw_timer_is_active(&timers[i]);
  EXPECT_U64(active_after, 0, "every pending timer is inactive after close");

  int loop_cancel_won = 0;
  for (int i = 1; i < LOOP_TASKS; i += 2) {
    if (uvtw_ticket_cancel(loop_tickets[i]) == 0)
      loop_cancel_won++;
    uvtw_ticket_release(loop_tickets[i]);
  }
  EXPECT_U64(loop_cancel_won, 0,
             "after close, cancelling a loop-thread ticket returns UV_EALREADY");
}

/* Once the producers are done: every task ended once, no timer fired. */
static void oc_expect_ended(void) {
  EXPECT_U64(timer_fired_after_close, 0, "no timer fires after close");
  EXPECT_U64(atomic_load(&ended_twice), 0,
             "no task ended twice, no unexpected error, no late cancel won");
  long ended = atomic_load(&ran_due) + atomic_load(&ran_cancelled) + atomic_load(&cancels_won);
  EXPECT_U64(ended, atomic_load(&scheduled_ok),
             "every scheduled task ended exactly once: ran, ran with UV_ECANCELED, or cancelled");
  tap_ok(atomic_load(&ran_cancelled) > LOOP_TASKS,
         "remote tasks were still pending at close: %ld ended with UV_ECANCELED (%ld fired)",
         atomic_load(&ran_cancelled), atomic_load(&ran_due));
  tap_diag("scheduled %ld, refused after close %ld, won cancels %ld", atomic_load(&scheduled_ok),
           atomic_load(&schedule_refused), atomic_load(&cancels_won));
}

static void test_close_everything_outstanding(void) {
  fx_t f;
  if (!fx_open(&f, "close with everything outstanding", NULL))
    return;
  wheel = f.wheel;
  oc_fill();
  producer_t producers[THREADS];
  memset(producers, 0, sizeof producers);
  for (int t = 0; t < THREADS; t++)
    pthread_create(&producers[t].thread, NULL, produce, &producers[t]);

  uv_timer_init(&f.loop, &closer);
  uv_timer_start(&closer, close_now, 20, 5);
  uv_run(&f.loop, UV_RUN_DEFAULT);
  tap_ok(atomic_load(&close_cb_ran) == 1, "the close callback ran once the handles closed");

  oc_expect_closed();
  for (int t = 0; t < THREADS; t++)
    pthread_join(producers[t].thread, NULL);

  uv_run(&f.loop, UV_RUN_DEFAULT);
  oc_expect_ended();
  f.wheel = NULL; /* closed by close_now */
  fx_close(&f);   /* the loop closes: the wheel left no handle behind */
}

/* ---- Closed from a manual clock's callback after a uv_walk (issue 37) --------
 * A program closes every handle with a uv_walk (the wheel's among them),
 * uv_run finishes those closes and the loop closes; then a callback that
 * uvtw_wheel_advance (or uvtw_wheel_advance_next) runs closes the wheel.
 * The wheel touches neither its closed handles' loop nor itself once its
 * close callback has run: the loop's memory is scribbled over and freed
 * (ASan and Valgrind see any use), and the wheel is freed inside the
 * advance, which must then not read it. */

typedef struct walk_close_s {
  uvtw_wheel_t *wheel;
  uvtw_timer_t closer, beside, later;
  task_probe_t in_wheel, queued;
  int start_after_close; /* the closing callback starts `later` after the close */
  int start_rc;
  int closer_fires, beside_fires, later_fires;
  int closes;
  int tasks_ended_at_close_cb; /* task callbacks run when the close callback ran */
} walk_close_t;

static walk_close_t *wc;

static void wc_close_cb(uvtw_wheel_t *wheel, void *arg) {
  walk_close_t *c = arg;
  c->closes++;
  c->tasks_ended_at_close_cb = c->in_wheel.calls + c->queued.calls;
  tap_ok(wheel == c->wheel, "walk then close in advance: the close callback gets the wheel");
}

static void wc_other_cb(uvtw_timer_t *timer) {
  if (timer == &wc->beside)
    wc->beside_fires++;
  else
    wc->later_fires++;
}

static void wc_closer_cb(uvtw_timer_t *timer) {
  (void)timer;
  wc->closer_fires++;
  uvtw_wheel_close(wc->wheel, wc_close_cb, wc);
  if (wc->start_after_close)
    wc->start_rc = uvtw_timer_start(&wc->later, wc_other_cb, 1, 0);
}

static void walk_then_close_in_advance(bool advance_next, bool start_after_close) {
  char T[96];
  snprintf(T, sizeof T, "walk then close in %s (%s)",
           advance_next ? "uvtw_wheel_advance_next" : "uvtw_wheel_advance",
           start_after_close ? "then a start" : "then nothing");
  uv_loop_t *loop = fx_xcalloc(1, sizeof *loop);
  walk_close_t c;
  uvtw_ticket_t *ticket = NULL;
  uvtw_options_t opts = {.manual_clock = 1};
  memset(&c, 0, sizeof c);
  wc = &c;
  c.start_after_close = start_after_close;
  c.start_rc = 1;
  if (!tap_ok(uv_loop_init(loop) == 0 && uvtw_wheel_new(loop, &opts, &c.wheel) == 0,
              "%s: a loop and a manual-clock wheel", T)) {
    free(loop);
    return;
  }
  uvtw_timer_init(c.wheel, &c.closer);
  uvtw_timer_init(c.wheel, &c.beside);
  uvtw_timer_init(c.wheel, &c.later);
  int ok = uvtw_timer_start(&c.closer, wc_closer_cb, 5, 0) == 0;
  ok &= uvtw_timer_start(&c.beside, wc_other_cb, 5, 0) == 0; /* due in the same pass, after it */
  ok &= uvtw_schedule(c.wheel, 10000, task_probe_cb, &c.in_wheel, &ticket) == 0;
  ok &= uvtw_wheel_advance(c.wheel, 0) == 0; /* takes the task in; nothing is due */
  ok &= uvtw_schedule(c.wheel, 10000, task_probe_cb, &c.queued, NULL) == 0;
  tap_ok(ok, "%s: two timers due at 5 ms, a 10 s task in the wheel and one still queued", T);
  EXPECT_U64(fx_stats(c.wheel).active, 3, "%s: (the timers and the task taken in are active)", T);

  /* The program's shutdown: every handle closed by a walk, the loop closed. */
  uv_walk(loop, close_any_handle, NULL);
  uv_run(loop, UV_RUN_DEFAULT);
  EXPECT_ERR(uv_loop_close(loop), 0, "%s: uv_loop_close returns 0 (the wheel's handles closed)", T);
  memset(loop, 0xa5, sizeof *loop); /* the loop is gone: the wheel must not read it */
  free(loop);

  /* Then the wheel's clock moves: the closing callback runs in the pass. */
  int64_t r = advance_next ? uvtw_wheel_advance_next(c.wheel) : uvtw_wheel_advance(c.wheel, 10);
  EXPECT_I64(r, advance_next ? 5 : 0, "%s: the call returns %s", T,
             advance_next ? "the 5 ms it moved" : "0");
  EXPECT_U64(c.closer_fires, 1, "%s: the closing timer ran once", T);
  EXPECT_U64(c.beside_fires, 0, "%s: the timer due beside it, after it, never ran", T);
  EXPECT_U64(c.closes, 1, "%s: the close callback ran once, before the call returned", T);
  EXPECT_U64(c.tasks_ended_at_close_cb, 2, "%s: both tasks had ended before the close callback", T);
  tap_ok(c.in_wheel.calls == 1 && c.in_wheel.status == UV_ECANCELED,
         "%s: the task in the wheel ran once, with UV_ECANCELED", T);
  tap_ok(c.queued.calls == 1 && c.queued.status == UV_ECANCELED,
         "%s: the task queued across the walk ran once, with UV_ECANCELED", T);
  if (start_after_close) {
    EXPECT_ERR(c.start_rc, UV_ECANCELED, "%s: a start after the close is UV_ECANCELED", T);
    EXPECT_U64(c.later_fires, 0, "%s: ...and that timer never runs", T);
  }
  EXPECT_ERR(uvtw_ticket_cancel(ticket), UV_EALREADY,
             "%s: the task's ticket is still safe to cancel: UV_EALREADY", T);
  uvtw_ticket_release(ticket);
  EXPECT_U64(uvtw_timer_is_active(&c.closer) + uvtw_timer_is_active(&c.beside) +
                 uvtw_timer_is_active(&c.later),
             0, "%s: every timer is inactive", T);
  wc = NULL;
}

static void test_walk_then_close_in_advance(void) {
  walk_then_close_in_advance(false, false);
  walk_then_close_in_advance(false, true);
  walk_then_close_in_advance(true, false);
  walk_then_close_in_advance(true, true);
}

/* As real libuv programs use the wheel, against include/uvtw.h and
 * README.md:
 *
 *   walk_after_close ........ uvtw_wheel_close, then a uv_walk closing every
 *                             other handle: the close callback runs, the loop
 *                             closes
 *   walk_before_close ....... a uv_walk closes every handle, the wheel's two
 *                             among them, uv_loop_close, then uvtw_wheel_close:
 *                             no crash, pending tasks end with UV_ECANCELED,
 *                             the close callback runs, timers are inert
 *   walk_in_callback ........ a wheel timer's callback walks the loop closing
 *                             every handle; the wheel closed after uv_run,
 *                             the loop used again: no handle the walk closed
 *                             is started again
 *   walk_in_peer_pass ....... the same from another wheel's pass, which then
 *                             starts a due timer on the walked wheel
 */

static void count_close_cb(uvtw_wheel_t *wheel, void *arg) {
  (void)wheel;
  ++*(int *)arg;
}

static void noop_uv_timer_cb(uv_timer_t *handle) {
  (void)handle;
}

static void count_uv_timer_cb(uv_timer_t *handle) {
  ++*(int *)handle->data;
}

static void test_walk_after_close(void) {
  const char *T = "walk_after_close";
  uv_loop_t loop;
  uvtw_wheel_t *wheel;
  uvtw_timer_t timer;
  uv_timer_t other;
  task_probe_t probe = {0};
  int closes = 0;
  if (!tap_ok(uv_loop_init(&loop) == 0 && uvtw_wheel_new(&loop, NULL, &wheel) == 0,
              "%s: a loop and a wheel", T))
    return;
  uvtw_timer_init(wheel, &timer);
  uvtw_timer_start(&timer, fx_noop_timer_cb, 10000, 0);
  uvtw_schedule(wheel, 10000, task_probe_cb, &probe, NULL);
  uv_timer_init(&loop, &other);
  uv_timer_start(&other, noop_uv_timer_cb, 10000, 0);
  uvtw_wheel_close(wheel, count_close_cb, &closes);
  uv_walk(&loop, close_any_handle, NULL); /* skips the wheel's closing handles */
  uv_run(&loop, UV_RUN_DEFAULT);
  EXPECT_U64(closes, 1, "%s: the close callback ran once", T);
  EXPECT_U64(probe.calls, 1, "%s: the pending task ran once...", T);
  EXPECT_I64(probe.status, UV_ECANCELED, "%s: ...with UV_ECANCELED", T);
  EXPECT_ERR(uv_loop_close(&loop), 0, "%s: uv_loop_close returns 0", T);
  EXPECT_U64(!!uvtw_timer_is_active(&timer), 0, "%s: the timer is inactive", T);
}

/* With the loop gone, the wheel's close runs its callback inside the call,
 * ending every task, queued or in the wheel, with UV_ECANCELED. */
static void close_wheel_after_loop(const char *T, uvtw_wheel_t *wheel, task_probe_t *pending,
                                   task_probe_t *queued, uvtw_ticket_t *ticket) {
  int closes = 0;
  uvtw_wheel_close(wheel, count_close_cb, &closes);
  EXPECT_U64(closes, 1, "%s: uvtw_wheel_close ran its callback (inside the call: no loop)", T);
  EXPECT_U64(pending->calls, 1, "%s: the pending task in the wheel ran once...", T);
  EXPECT_I64(pending->status, UV_ECANCELED, "%s: ...with UV_ECANCELED", T);
  EXPECT_U64(queued->calls, 1, "%s: the task still queued ran once...", T);
  EXPECT_I64(queued->status, UV_ECANCELED, "%s: ...with UV_ECANCELED", T);
  EXPECT_ERR(uvtw_ticket_cancel(ticket), UV_EALREADY,
             "%s: its ticket is still safe to cancel: UV_EALREADY", T);
  uvtw_ticket_release(ticket);
}

/* Timers outlive the wheel: what a connection's teardown calls is inert. */
static void closed_wheels_timers_inert(const char *T, uvtw_timer_t *timer, uvtw_timer_t *idle) {
  EXPECT_ERR(uvtw_timer_stop(timer), 0, "%s: stop after the close callback is a no-op", T);
  EXPECT_U64(!!uvtw_timer_is_active(timer), 0, "%s: the timer is inactive", T);
  EXPECT_U64(uvtw_timer_get_due_in(timer), 0, "%s: ...and due in 0", T);
  EXPECT_ERR(uvtw_timer_stop(idle), 0, "%s: stop of a timer never started: a no-op", T);
}

/* The timers may be given to a new wheel. */
static void closed_wheels_timer_reused(const char *T, uvtw_timer_t *timer) {
  int closes = 0;
  uv_loop_t again;
  uvtw_wheel_t *second;
  if (tap_ok(uv_loop_init(&again) == 0 && uvtw_wheel_new(&again, NULL, &second) == 0,
             "%s: a new loop and wheel", T)) {
    uvtw_timer_init(second, timer);
    EXPECT_ERR(uvtw_timer_start(timer, fx_noop_timer_cb, 1, 0), 0,
               "%s: a timer of the closed wheel, initialised again, starts on the new one", T);
    uv_run(&again, UV_RUN_DEFAULT);
    EXPECT_U64(fx_stats(second).fired, 1, "%s: ...and fires", T);
    uvtw_wheel_close(second, count_close_cb, &closes);
    uv_run(&again, UV_RUN_DEFAULT);
    EXPECT_U64(closes, 1, "%s: the new wheel closes", T);
    EXPECT_ERR(uv_loop_close(&again), 0, "%s: ...and its loop", T);
  }
}

static void test_walk_before_close(void) {
  const char *T = "walk_before_close";
  uv_loop_t *loop = fx_xcalloc(1, sizeof *loop);
  uvtw_wheel_t *wheel;
  uvtw_timer_t timer, idle;
  task_probe_t pending = {0}, queued = {0};
  uvtw_ticket_t *ticket = NULL;
  if (!tap_ok(uv_loop_init(loop) == 0 && uvtw_wheel_new(loop, NULL, &wheel) == 0,
              "%s: a loop and a wheel", T)) {
    free(loop);
    return;
  }
  uvtw_timer_init(wheel, &timer);
  uvtw_timer_init(wheel, &idle);
  uvtw_timer_start(&timer, fx_noop_timer_cb, 10000, 0);
  EXPECT_ERR(uvtw_schedule(wheel, 10000, task_probe_cb, &pending, &ticket), 0,
             "%s: a 10 s task is scheduled", T);
  uv_run(loop, UV_RUN_NOWAIT); /* the loop's setup: it takes the task in */
  EXPECT_U64(fx_stats(wheel).active, 2, "%s: the timer and the task are in the wheel", T);
  EXPECT_ERR(uvtw_schedule(wheel, 10000, task_probe_cb, &queued, NULL), 0,
             "%s: another 10 s task, still queued when the walk closes the handles", T);

  /* The program's shutdown: close every handle, run the loop, close it. */
  uv_walk(loop, close_any_handle, NULL);
  uv_run(loop, UV_RUN_DEFAULT);
  EXPECT_ERR(uv_loop_close(loop), 0, "%s: uv_loop_close returns 0 (the wheel's handles closed)", T);
  memset(loop, 0xa5, sizeof *loop); /* the loop is gone: the wheel must not read it */
  free(loop);
  EXPECT_U64(pending.calls + queued.calls, 0, "%s: the tasks have not run yet", T);

  close_wheel_after_loop(T, wheel, &pending, &queued, ticket);
  closed_wheels_timers_inert(T, &timer, &idle);
  closed_wheels_timer_reused(T, &timer);
}

/* A wheel timer's callback shuts the program down with a uv_walk that
 * closes every handle, the wheels' among them; once uv_run has finished the
 * closes, the wheels are closed and freed, and the loop is used again (a
 * test harness reusing its loop). `peer`: the walk runs in another wheel's
 * pass, which then starts a due timer on the walked wheel. No libuv call may
 * touch a handle the walk closed: on libuv < 1.48 a restarted uv_prepare_t
 * would stay in the loop's list after its wheel is freed (ASan, Valgrind). */
static struct {
  uv_loop_t *loop;
  uvtw_wheel_t *other;
  uvtw_wheel_t *walker;
  uvtw_timer_t late;
  uv_handle_t *kept[8]; /* with a peer: the walking wheel's handles, left open */
  int nkept;
} wk;

static void keep_handle(uv_handle_t *handle, void *arg) {
  (void)arg;
  if (wk.nkept < 8)
    wk.kept[wk.nkept++] = handle;
}

static void close_unkept(uv_handle_t *handle, void *arg) {
  (void)arg;
  for (int i = 0; i < wk.nkept; i++)
    if (wk.kept[i] == handle)
      return;
  if (!uv_is_closing(handle))
    uv_close(handle, NULL);
}

/* With a peer, the walk leaves the walking wheel's own handles open, so
 * that its pass goes on and the peer's arming decides inside it. */
static void walk_cb(uvtw_timer_t *timer) {
  (void)timer;
  uv_walk(wk.loop, close_unkept, NULL);
  if (wk.other != NULL) {
    uvtw_timer_start(&wk.late, fx_noop_timer_cb, 0, 0);
    uvtw_wheel_unref(wk.walker); /* its pending timer lets the loop end */
  }
}

static void walk_in_pass(const char *T, bool peer) {
  uv_loop_t loop;
  uvtw_wheel_t *wheel, *other = NULL;
  uvtw_timer_t timer, pending;
  int closes = 0, fires = 0;
  wk.nkept = 0;
  if (!tap_ok(uv_loop_init(&loop) == 0 && uvtw_wheel_new(&loop, NULL, &wheel) == 0,
              "%s: a loop and a wheel", T))
    return;
  if (peer) {
    uv_walk(&loop, keep_handle, NULL); /* the walking wheel's handles */
    if (!tap_ok(uvtw_wheel_new(&loop, NULL, &other) == 0, "%s: a second wheel", T))
      return;
  }
  wk.loop = &loop;
  wk.other = other;
  wk.walker = wheel;
  uvtw_timer_init(wheel, &timer);
  uvtw_timer_init(wheel, &pending);
  uvtw_timer_start(&timer, walk_cb, 1, 0);
  uvtw_timer_start(&pending, fx_noop_timer_cb, 10000, 0); /* the pass arms for it */
  if (peer)
    uvtw_timer_init(other, &wk.late);
  uv_run(&loop, UV_RUN_DEFAULT);
  EXPECT_U64(fx_stats(wheel).fired, 1, "%s: the walking timer ran", T);
  if (peer) {
    uvtw_wheel_close(other, count_close_cb, &closes);
    uvtw_wheel_close(wheel, count_close_cb, &closes);
    uv_run(&loop, UV_RUN_DEFAULT); /* the walking wheel's handles close */
  } else {
    uvtw_wheel_close(wheel, count_close_cb, &closes);
  }
  EXPECT_U64(closes, peer ? 2 : 1, "%s: the close callbacks ran", T);
  /* The loop again, with a uv_timer_t of its own. */
  uv_timer_t again;
  uv_timer_init(&loop, &again);
  again.data = &fires;
  uv_timer_start(&again, count_uv_timer_cb, 2, 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  EXPECT_U64(fires, 1, "%s: a uv_timer_t started after the shutdown runs", T);
  uv_close((uv_handle_t *)&again, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  EXPECT_ERR(uv_loop_close(&loop), 0, "%s: uv_loop_close returns 0", T);
}

static void test_walk_in_callback(void) {
  walk_in_pass("walk_in_callback", false);
}

static void test_walk_in_peer_pass(void) {
  walk_in_pass("walk_in_peer_pass", true);
}

static const tap_case_t cases[] = {
    TAP_CASE(close_pending_timers),
    TAP_CASE(close_from_timer_cb),
    TAP_CASE(close_tasks),
    TAP_CASE(close_inside_task),
    TAP_CASE(close_everything_outstanding),
    TAP_CASE(close_timers_first),
    TAP_CASE(walk_then_close_in_advance),
    TAP_CASE(walk_after_close),
    TAP_CASE(walk_before_close),
    TAP_CASE(walk_in_callback),
    TAP_CASE(walk_in_peer_pass),
};

FX_MAIN(cases)
