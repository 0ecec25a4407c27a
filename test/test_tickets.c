/* Tickets: uvtw_ticket_cancel and uvtw_ticket_release, against the
 * "Any-thread tasks" part of include/uvtw.h. Each case runs on a loop and
 * wheel of its own:
 *
 *   cancel_leaves_promptly . a cancelled task leaves the wheel long before its
 *                            deadline (stats.active at once; next_due and
 *                            loop aliveness once the loop lets go of it)
 *   cancelled_stats ........ a cancelled task counts once in started and once
 *                            in stopped, taken in or not; stopped + fired
 *                            never exceed started
 *   ticket_in_arg .......... a callback that runs at once reads the ticket
 *                            from its argument, where uvtw_schedule wrote it
 */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fixture.h"

#define NS_PER_MS UINT64_C(1000000)

static void sleep_us(long us) {
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

static void close_handle_cb(uv_handle_t *handle) {
  (void)handle;
}

/* ---- A cancelled task leaves the wheel promptly --------------------------- */

enum { PROMPT_TASKS = 1000 };

typedef struct prompt_s {
  fx_t f;
  uvtw_wheel_t *wheel;
  uv_timer_t poll;
  task_probe_t probes[PROMPT_TASKS];
  uvtw_ticket_t *tickets[PROMPT_TASKS];
  atomic_int phase; /* 0 scheduling, 1 scheduled, 2 taken in (go cancel), 3 cancelled */
  int scheduled_ok;
  int cancelled_ok;
  uint64_t cancelled_ns; /* when the other thread finished cancelling */
  uint64_t left_ns;      /* when the loop saw the wheel empty */
  uint64_t active_taken_in;
  int taken_in;
} prompt_t;

static void prompt_thread(void *arg) {
  prompt_t *p = arg;
  for (int i = 0; i < PROMPT_TASKS; i++)
    p->scheduled_ok +=
        uvtw_schedule(p->wheel, 10000, task_probe_cb, &p->probes[i], &p->tickets[i]) == 0;
  atomic_store(&p->phase, 1);
  while (atomic_load(&p->phase) != 2)
    sleep_us(200);
  for (int i = 0; i < PROMPT_TASKS; i++) {
    p->cancelled_ok += uvtw_ticket_cancel(p->tickets[i]) == 0;
    uvtw_ticket_release(p->tickets[i]);
  }
  p->cancelled_ns = uv_hrtime();
  atomic_store(&p->phase, 3);
}

static void prompt_poll_cb(uv_timer_t *timer) {
  prompt_t *p = timer->data;
  uvtw_stats_t stats;
  uvtw_wheel_stats(p->wheel, &stats);
  int phase = atomic_load(&p->phase);
  if (phase == 1 && stats.active == PROMPT_TASKS) {
    p->taken_in = 1;
    p->active_taken_in = stats.active;
    atomic_store(&p->phase, 2);
  } else if (phase == 3 && stats.active == 0 && uvtw_wheel_next_due(p->wheel) == -1) {
    p->left_ns = uv_hrtime();
    uv_timer_stop(timer);
  }
}

/* On the loop thread: the loop takes the task in at its next poll phase
 * (one iteration), then it is in the wheel. */
static void prompt_loop_thread(prompt_t *p) {
  uvtw_stats_t stats;
  task_probe_t local = {0};
  uvtw_ticket_t *ticket = NULL;
  uint64_t before_ms = uv_hrtime() / 1000000;
  EXPECT_ERR(uvtw_schedule(p->wheel, 10000, task_probe_cb, &local, &ticket), 0,
             "prompt: a 10 s task is scheduled on the loop thread");
  uint64_t after_ms = uv_hrtime() / 1000000;
  fx_iteration(&p->f);
  uvtw_wheel_stats(p->wheel, &stats);
  EXPECT_U64(stats.active, 1,
             "prompt: the loop's next iteration takes it into the wheel (stats.active)");
  /* The deadline is uv_hrtime() at the call + 10 s; next_due counts from the
   * loop's cached uv_now() (updated by that iteration), which differs from
   * the call's time by (call - uv_now). */
  int64_t due = uvtw_wheel_next_due(p->wheel);
  int64_t lag_lo = (int64_t)before_ms - (int64_t)uv_now(&p->f.loop);
  int64_t lag_hi = (int64_t)after_ms - (int64_t)uv_now(&p->f.loop);
  if (!tap_ok(due >= 10000 + lag_lo && due <= 10000 + lag_hi,
              "prompt: next_due sees it (10000 ms from the call, counted from uv_now)"))
    tap_diag("  next_due = %" PRId64, due);
  EXPECT_ERR(uvtw_ticket_cancel(ticket), 0, "prompt: its cancel wins");
  uvtw_ticket_release(ticket);
  uvtw_wheel_stats(p->wheel, &stats);
  EXPECT_U64(stats.active, 0,
             "prompt: a won cancel makes the task inactive at once (stats.active)");
  /* The loop lets go of it at its next take-in: the uv_run below. */
  uint64_t t0 = uv_hrtime();
  uv_run(&p->f.loop, UV_RUN_DEFAULT);
  uint64_t run_ns = uv_hrtime() - t0;
  uv_run(&p->f.loop, UV_RUN_DEFAULT);
  if (!tap_ok(
          run_ns < 1000 * NS_PER_MS,
          "prompt: a cancelled 10 s task does not keep the loop alive (uv_run returns at once)"))
    tap_diag("  uv_run(DEFAULT) took %.1f ms", run_ns / 1e6);
  uvtw_wheel_stats(p->wheel, &stats);
  EXPECT_U64(stats.active, 0,
             "prompt: after one loop run the cancelled task is gone (stats.active)");
  due = uvtw_wheel_next_due(p->wheel);
  if (!tap_ok(due == -1, "prompt: ...and next_due no longer sees it"))
    tap_diag("  next_due = %" PRId64 ", expected -1", due);
  EXPECT_U64(local.calls, 0, "prompt: the cancelled task never ran");
}

/* From another thread, once the loop has taken the tasks in. */
static void prompt_other_thread(prompt_t *p) {
  uvtw_stats_t stats;
  uv_timer_init(&p->f.loop, &p->poll);
  p->poll.data = p;
  uv_timer_start(&p->poll, prompt_poll_cb, 1, 1);
  uv_thread_t thread;
  uv_thread_create(&thread, prompt_thread, p);
  uv_run(&p->f.loop, UV_RUN_DEFAULT);
  /* If the watchdog stopped the loop before the tasks were seen taken in,
   * let the thread go on to cancel them anyway, so it can be joined. */
  while (atomic_load(&p->phase) == 0)
    sleep_us(1000);
  int scheduled = 1;
  atomic_compare_exchange_strong(&p->phase, &scheduled, 2);
  uv_thread_join(&thread);
  uv_close((uv_handle_t *)&p->poll, close_handle_cb);
  uv_run(&p->f.loop, UV_RUN_DEFAULT);

  EXPECT_U64(p->scheduled_ok, PROMPT_TASKS, "prompt: another thread scheduled 1000 tasks of 10 s");
  EXPECT_U64(p->active_taken_in, PROMPT_TASKS,
             "prompt: the loop took all of them in (stats.active)");
  EXPECT_U64(p->cancelled_ok, PROMPT_TASKS, "prompt: the other thread's cancels all won");
  uint64_t gone_ms = (p->left_ns - p->cancelled_ns) / NS_PER_MS;
  if (!tap_ok(p->left_ns != 0 && gone_ms < 2000,
              "prompt: the cancelled tasks left the wheel long before their deadline "
              "(stats.active 0, next_due -1)"))
    tap_diag("  %s", p->left_ns ? "took too long" : "they never left");
  else
    tap_diag("  gone %" PRIu64 " ms after the last cancel", gone_ms);
  int ran = 0;
  for (int i = 0; i < PROMPT_TASKS; i++)
    ran += p->probes[i].calls;
  EXPECT_U64(ran, 0, "prompt: none of the cancelled tasks ran");
  uvtw_wheel_stats(p->wheel, &stats);
  EXPECT_U64(stats.stopped, PROMPT_TASKS + 1, "prompt: stats.stopped counts every won cancel");
  tap_ok(stats.remote_batches > 0,
         "prompt: stats.remote_batches > 0 after cross-thread scheduling");
}

static void test_cancel_leaves_promptly(void) {
  prompt_t *p = fx_xcalloc(1, sizeof *p);

  if (!fx_open(&p->f, "prompt", NULL)) {
    free(p);
    return;
  }
  p->wheel = p->f.wheel;
  fx_iteration(&p->f);

  prompt_loop_thread(p);
  prompt_other_thread(p);
  fx_close(&p->f);
  free(p);
}

/* ---- Stats of cancelled tasks ------------------------------------------------ */

/* Each cancelled task counts once in stats.started and once in
 * stats.stopped: one taken in before its cancel at the take-in and at the
 * let-go, one cancelled before the loop took it in both at the let-go
 * (the loop's next drain of its queue). At every point stopped + fired
 * (all tasks here are one-shot) <= started; once the loop has let go of
 * everything, active == started - stopped - fired. The cancels and
 * schedules happen while no thread runs the loop (another thread's,
 * joined, or the loop thread's outside callbacks), then the loop runs a
 * few UV_RUN_NOWAIT iterations; every iteration checks the inequality. */
enum { CS_TASKS = 24, CS_ITERATIONS = 3 };

static struct {
  uvtw_wheel_t *wheel;
  task_probe_t probes[CS_TASKS];
  uvtw_ticket_t *tickets[CS_TASKS];
  int cancel_in_cb; /* the 0 ms task 20 cancels this one's ticket, -1: none */
  int cancel_in_cb_rc;
  int over; /* points at which stopped + fired > started */
  uvtw_stats_t over_at;
  uv_prepare_t prepare;
  uv_check_t check;
} cs;

/* What another thread does, then is joined. */
typedef struct cs_job_s {
  int schedule_from, schedule_to; /* schedule tasks [from, to) ... */
  uint64_t timeout;               /* ... with this timeout */
  int cancel_from, cancel_to;     /* then cancel and release [from, to) */
  int scheduled, cancelled;       /* calls that returned 0 */
} cs_job_t;

static void cs_invariant(void) {
  uvtw_stats_t s = fx_stats(cs.wheel);
  if (s.stopped + s.fired > s.started && cs.over++ == 0)
    cs.over_at = s;
}

static void cs_invariant_prepare(uv_prepare_t *handle) {
  (void)handle;
  cs_invariant();
}

static void cs_invariant_check(uv_check_t *handle) {
  (void)handle;
  cs_invariant();
}

/* The 0 ms tasks' callback: task 20 cancels a taken-in task from inside
 * a wheel callback. */
static void cs_fire_cb(void *arg, int status);

/* Tasks of 0 ms get cs_fire_cb. */
static int cs_schedule(int i, uint64_t timeout) {
  return uvtw_schedule(cs.wheel, timeout, timeout == 0 ? cs_fire_cb : task_probe_cb, &cs.probes[i],
                       &cs.tickets[i]);
}

static int cs_cancel(int i) {
  int rc = uvtw_ticket_cancel(cs.tickets[i]);
  uvtw_ticket_release(cs.tickets[i]);
  cs.tickets[i] = NULL;
  return rc;
}

static void cs_job_thread(void *arg) {
  cs_job_t *job = arg;
  for (int i = job->schedule_from; i < job->schedule_to; i++)
    job->scheduled += cs_schedule(i, job->timeout) == 0;
  for (int i = job->cancel_from; i < job->cancel_to; i++)
    job->cancelled += cs_cancel(i) == 0;
}

/* Runs a job on another thread and joins it; checks every call returned 0. */
static void cs_on_thread(int schedule_from, int schedule_to, uint64_t timeout, int cancel_from,
                         int cancel_to, const char *what) {
  cs_job_t job = {schedule_from, schedule_to, timeout, cancel_from, cancel_to, 0, 0};
  uv_thread_t thread;
  if (uv_thread_create(&thread, cs_job_thread, &job) != 0) {
    printf("Bail out! uv_thread_create\n");
    exit(1);
  }
  uv_thread_join(&thread);
  tap_ok(job.scheduled == schedule_to - schedule_from && job.cancelled == cancel_to - cancel_from,
         "cancelled stats: %s: another thread's %d schedules and %d cancels returned 0", what,
         schedule_to - schedule_from, cancel_to - cancel_from);
  cs_invariant();
}

static void cs_fire_cb(void *arg, int status) {
  task_probe_cb(arg, status);
  cs_invariant();
  if (arg == &cs.probes[20] && cs.cancel_in_cb >= 0) {
    cs.cancel_in_cb_rc = cs_cancel(cs.cancel_in_cb);
    cs.cancel_in_cb = -1;
  }
}

static void cs_iterations(fx_t *f) {
  for (int k = 0; k < CS_ITERATIONS; k++)
    fx_iteration(f);
}

static void cs_expect(uint64_t started, uint64_t stopped, uint64_t fired, const char *when) {
  char what[200];
  snprintf(what, sizeof what, "(cancelled stats) %s", when);
  fx_expect_counts(cs.wheel, started - stopped - fired, started, stopped, fired, what);
}

/* Before the loop first runs: tasks 0-4 from the loop's thread, 5-9 from
 * another; all ten cancelled (0-4 on the loop's thread) before the loop
 * takes them in. */
static void cs_cancelled_before_take_in(fx_t *f) {
  const char *T = f->name;
  int scheduled = 0, cancelled = 0;
  for (int i = 0; i < 5; i++)
    scheduled += cs_schedule(i, 10000) == 0;
  cs_on_thread(5, 10, 10000, 5, 10, "before the loop runs");
  for (int i = 0; i < 5; i++)
    cancelled += cs_cancel(i) == 0;
  EXPECT_U64(scheduled + cancelled, 10,
             "%s: five schedules and their cancels on the loop's thread returned 0", T);
  cs_invariant();
  cs_iterations(f);
  cs_expect(10, 10, 0,
            "after the loop let go of 10 tasks cancelled before it took them in "
            "(started 10, stopped 10)");
  cs_iterations(f);
  cs_expect(10, 10, 0, "... and counted once: more iterations change nothing");
}

/* Taken in, then cancelled: 10-15 taken in; 10, 11 cancelled from
 * another thread, 12 from the loop's thread outside callbacks. */
static void cs_cancelled_after_take_in(fx_t *f) {
  const char *T = f->name;
  cs_on_thread(10, 16, 10000, 0, 0, "tasks to take in");
  cs_iterations(f);
  cs_expect(16, 10, 0, "6 tasks taken in count in started at the take-in");
  cs_on_thread(0, 0, 0, 10, 12, "cancels of taken-in tasks");
  EXPECT_ERR(cs_cancel(12), 0, "%s: a taken-in task's cancel on the loop's thread wins", T);
  cs_invariant();
  cs_iterations(f);
  cs_expect(16, 13, 0, "3 taken-in tasks cancelled: stopped once each, started not again");
}

/* A mix: 16-19 of 10 s and 20, 21 of 0 ms from another thread, which
 * cancels 16 and 17 before the loop takes them in; 20's callback
 * cancels 18, taken in. */
static void cs_mixed(fx_t *f) {
  const char *T = f->name;
  cs.cancel_in_cb = 18;
  cs_on_thread(16, 20, 10000, 16, 18, "four 10 s tasks, two cancelled at once");
  cs_on_thread(20, 22, 0, 0, 0, "two 0 ms tasks");
  for (int k = 0; k < 5000 && (cs.probes[20].calls == 0 || cs.probes[21].calls == 0); k++) {
    fx_iteration(f);
    if (cs.probes[20].calls == 0 || cs.probes[21].calls == 0)
      fx_sleep_ms(1);
  }
  tap_ok(cs.probes[20].calls == 1 && cs.probes[20].status == 0 && cs.probes[21].calls == 1 &&
             cs.probes[21].status == 0,
         "%s: the two 0 ms tasks ran once with status 0", T);
  EXPECT_ERR(cs.cancel_in_cb_rc, 0, "%s: a cancel from inside a task callback wins", T);
  cs_iterations(f);
  cs_expect(22, 16, 2,
            "2 cancelled before the take-in, 1 in a callback after it, 2 fired (started 22, "
            "stopped 16, fired 2)");
}

/* The loop's thread, outside callbacks: 22, 23 scheduled, 22 cancelled
 * at once. */
static void cs_scheduled_and_cancelled_at_once(fx_t *f) {
  const char *T = f->name;
  EXPECT_ERR(cs_schedule(22, 10000), 0, "%s: a schedule on the loop's thread", T);
  EXPECT_ERR(cs_schedule(23, 10000), 0, "%s: ... and another", T);
  EXPECT_ERR(cs_cancel(22), 0, "%s: the first one's cancel, at once, wins", T);
  cs_invariant();
  cs_iterations(f);
  cs_expect(24, 17, 2, "a task scheduled and cancelled at once on the loop's thread");
}

/* The rest, 13-15, 19 and 23, cancelled from another thread. */
static void cs_cancel_the_rest(fx_t *f) {
  const char *T = f->name;
  cs_on_thread(0, 0, 0, 13, 16, "cancels of three more taken-in tasks");
  cs_on_thread(0, 0, 0, 19, 20, "the cancel of the last 10 s task taken in");
  EXPECT_ERR(cs_cancel(23), 0, "%s: the last cancel wins", T);
  cs_invariant();
  cs_iterations(f);
  cs_expect(24, 22, 2, "all let go: started == stopped + fired");
}

static void test_cancelled_stats(void) {
  const char *T = "cancelled stats";
  fx_t f;
  if (!fx_open(&f, T, NULL))
    return;
  memset(&cs, 0, sizeof cs);
  cs.wheel = f.wheel;
  cs.cancel_in_cb = -1;
  uv_prepare_init(&f.loop, &cs.prepare);
  uv_prepare_start(&cs.prepare, cs_invariant_prepare);
  uv_unref((uv_handle_t *)&cs.prepare);
  uv_check_init(&f.loop, &cs.check);
  uv_check_start(&cs.check, cs_invariant_check);
  uv_unref((uv_handle_t *)&cs.check);

  cs_cancelled_before_take_in(&f);
  cs_cancelled_after_take_in(&f);
  cs_mixed(&f);
  cs_scheduled_and_cancelled_at_once(&f);
  cs_cancel_the_rest(&f);
  int ran = 0;
  for (int i = 0; i < CS_TASKS; i++)
    ran += i != 20 && i != 21 && cs.probes[i].calls != 0;
  EXPECT_U64(ran, 0, "%s: no cancelled task ran", T);
  EXPECT_ERR(cs_cancel(20), UV_EALREADY, "%s: the tasks that ran cancel with UV_EALREADY", T);
  EXPECT_ERR(cs_cancel(21), UV_EALREADY, "%s: ... both (their tickets released)", T);
  if (!EXPECT_U64(cs.over, 0, "%s: at every point, stopped + fired <= started", T))
    tap_diag("  first seen: started %" PRIu64 ", stopped %" PRIu64 ", fired %" PRIu64,
             cs.over_at.started, cs.over_at.stopped, cs.over_at.fired);
  fx_close_handle(&cs.prepare);
  fx_close_handle(&cs.check);
  fx_close(&f);
}

/* ---- The ticket, read from the callback's argument ------------------------ */

enum { TICKET_TASKS = 2000 };

typedef struct ticket_ctx_s {
  uvtw_ticket_t *ticket; /* written by uvtw_schedule */
  uvtw_ticket_t *seen;   /* what the callback read there */
} ticket_ctx_t;

static void ticket_ctx_cb(void *arg, int status) {
  ticket_ctx_t *c = arg;
  (void)status;
  c->seen = c->ticket;
}

typedef struct ticket_run_s {
  uvtw_wheel_t *wheel;
  ticket_ctx_t ctx[TICKET_TASKS];
  int scheduled;
  atomic_int done;
} ticket_run_t;

static void ticket_producer(void *arg) {
  ticket_run_t *r = arg;
  for (int i = 0; i < TICKET_TASKS; i++) {
    r->ctx[i].ticket = NULL;
    r->scheduled += uvtw_schedule(r->wheel, 0, ticket_ctx_cb, &r->ctx[i], &r->ctx[i].ticket) == 0;
  }
  atomic_store(&r->done, 1);
}

static void test_ticket_in_arg(void) {
  const char *T = "ticket_in_arg";
  fx_t f;
  ticket_run_t *r = fx_xcalloc(1, sizeof *r);
  if (!fx_open(&f, T, NULL)) {
    free(r);
    return;
  }
  fx_iteration(&f);
  r->wheel = f.wheel;

  /* On the loop thread. */
  ticket_ctx_t local = {NULL, NULL};
  EXPECT_ERR(uvtw_schedule(f.wheel, 0, ticket_ctx_cb, &local, &local.ticket), 0,
             "%s: a 0 ms task on the loop thread", T);
  fx_iteration(&f);
  fx_iteration(&f);
  tap_ok(local.seen != NULL && local.seen == local.ticket,
         "%s: its callback read the ticket from its argument", T);
  uvtw_ticket_release(local.ticket);

  /* From another thread while the loop runs and drains at once. */
  uv_thread_t thread;
  uv_thread_create(&thread, ticket_producer, r);
  uint64_t end = uv_hrtime() + 5000 * NS_PER_MS;
  int ran = 0;
  while (uv_hrtime() < end && ran < TICKET_TASKS) {
    fx_iteration(&f);
    ran = 0;
    for (int i = 0; i < TICKET_TASKS && atomic_load(&r->done); i++)
      ran += r->ctx[i].seen != NULL || r->ctx[i].ticket == NULL;
  }
  uv_thread_join(&thread);
  for (int i = 0; i < 5; i++)
    fx_iteration(&f);
  EXPECT_U64(r->scheduled, TICKET_TASKS, "%s: every schedule from the other thread succeeded", T);
  int ok = 0;
  for (int i = 0; i < TICKET_TASKS; i++) {
    ok += r->ctx[i].seen != NULL && r->ctx[i].seen == r->ctx[i].ticket;
    uvtw_ticket_release(r->ctx[i].ticket);
  }
  EXPECT_U64(ok, TICKET_TASKS,
             "%s: every callback read its own ticket from its argument, written before it ran", T);
  fx_close(&f);
  free(r);
}

static const tap_case_t cases[] = {
    TAP_CASE(cancel_leaves_promptly),
    TAP_CASE(cancelled_stats),
    TAP_CASE(ticket_in_arg),
};

FX_MAIN(cases)
