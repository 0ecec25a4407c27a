/* A loop handed to another thread after it ran (issue 37): the program makes
 * its loop and wheel on one thread ("main"), runs them there a little, then
 * a worker thread runs uv_run(UV_RUN_DEFAULT) for good while main keeps
 * scheduling. include/uvtw.h and API.md: the loop's thread is the one running
 * uv_run at the moment of the call, and only that; such a program loses no
 * task and has no data race (TSan clean), and its 0 ms tasks run promptly.
 *
 *   after_nowait_setup .. main runs uv_run(UV_RUN_NOWAIT) once, then hands
 *                         the loop over and schedules 200 tasks over ~100 ms
 *                         (0 to 10 ms, some with tickets, some cancelled):
 *                         each task not cancelled runs once, with status 0,
 *                         on the worker, 0 ms ones within 1 s, none early;
 *                         a cancelled one never runs; the stats add up
 *   after_timer_start ... the same, but main only started a 5 ms wheel
 *                         timer before the hand-off (no uv_run on main): the
 *                         timer fires once, on the worker
 *   busy_worker ......... as after_nowait_setup, with the worker's loop kept
 *                         busy by a wheel timer restarting itself every 1 ms:
 *                         the timer keeps firing and every task runs once
 *   cancel_from_main .... 10 s tasks scheduled and cancelled from main after
 *                         the hand-off: every cancel wins, no callback runs,
 *                         the wheel ends with active 0
 *
 * Everything the two threads share is atomic, or written before the worker
 * starts, or read after it was joined. A referenced uv_async_t of the test's
 * own keeps the worker's loop alive; sent from main at the end, its callback
 * (on the worker) copies the wheel's stats, closes the wheel and itself and
 * stops the loop. Every cross-thread wait is bounded: a lost task fails a
 * check after WAIT_MS instead of hanging, and a worker that never returns
 * from uv_run ends the program with "Bail out!".
 */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"

#define NS_PER_MS UINT64_C(1000000)

enum {
  MIX_TASKS = 200,    /* tasks of the first three cases */
  CANCEL_TASKS = 50,  /* tasks of cancel_from_main */
  LONG_MS = 10000,    /* a timeout no case waits for */
  PROMPT_MS = 1000,   /* a 0 ms task runs within this (the bug: never) */
  WAIT_MS = 5000,     /* the longest wait for the worker to do something */
  SETUP_TIMER_MS = 5, /* after_timer_start's timer */
  BUSY_FLOOR = 50,    /* fires of the busy timer the case waits for */
  JOIN_MS = 3 * FX_WATCHDOG_MS,
};

typedef enum { SETUP_NOWAIT, SETUP_TIMER } setup_t;

typedef struct ho_s ho_t;

/* A task's argument. The worker writes only the atomics; the rest is
 * main's. */
typedef struct task_s {
  atomic_int calls;
  atomic_int status;
  atomic_int off_worker; /* callbacks on another thread than the worker */
  atomic_int ran_us;     /* now_us() at the callback */
  uint64_t timeout;
  int64_t sched_us; /* now_us() just before uvtw_schedule */
  bool scheduled;
  bool ticketed;
  bool cancel; /* main cancels it right after scheduling it */
  int cancel_rc;
  uvtw_ticket_t *ticket;
} task_t;

struct ho_s {
  fx_t f;
  uv_async_t stop; /* referenced: keeps the worker's loop running */
  bool busy;
  uint64_t base_ns; /* uv_hrtime() before the worker starts */
  uv_thread_t worker;
  uv_thread_t worker_self; /* the worker's own id, written before `running` */
  atomic_int running, done, stop_ran, closes;
  uvtw_stats_t stats; /* the stop callback's copy; main reads it after the join */
  uvtw_timer_t setup_timer, busy_timer;
  atomic_int setup_fires, busy_fires, busy_start_errors, timers_off_worker;
  task_t *tasks;
  int n;
  task_t marker;
};

/* The case running; set before its worker starts. */
static ho_t *g_ho;

static int now_us(void) {
  return (int)((uv_hrtime() - g_ho->base_ns) / 1000);
}

static bool on_worker(void) {
  uv_thread_t self = uv_thread_self();
  return uv_thread_equal(&self, &g_ho->worker_self) != 0;
}

/* ---- Callbacks, on the worker -------------------------------------------- */

static void task_cb(void *arg, int status) {
  task_t *t = arg;
  atomic_store(&t->ran_us, now_us());
  atomic_store(&t->status, status);
  if (!on_worker())
    atomic_fetch_add(&t->off_worker, 1);
  atomic_fetch_add(&t->calls, 1);
}

static void setup_timer_cb(uvtw_timer_t *timer) {
  (void)timer;
  if (!on_worker())
    atomic_fetch_add(&g_ho->timers_off_worker, 1);
  atomic_fetch_add(&g_ho->setup_fires, 1);
}

static void busy_timer_cb(uvtw_timer_t *timer) {
  if (!on_worker())
    atomic_fetch_add(&g_ho->timers_off_worker, 1);
  atomic_fetch_add(&g_ho->busy_fires, 1);
  if (uvtw_timer_start(timer, busy_timer_cb, 1, 0) != 0)
    atomic_fetch_add(&g_ho->busy_start_errors, 1);
}

static void close_cb(uvtw_wheel_t *wheel, void *arg) {
  (void)wheel;
  atomic_fetch_add(&((ho_t *)arg)->closes, 1);
}

static void stop_cb(uv_async_t *handle) {
  ho_t *o = handle->data;
  if (o->busy)
    uvtw_timer_stop(&o->busy_timer);
  uvtw_wheel_stats(o->f.wheel, &o->stats);
  atomic_store(&o->stop_ran, on_worker() ? 1 : 2);
  uvtw_wheel_close(o->f.wheel, close_cb, o);
  uv_close((uv_handle_t *)&o->stop, NULL);
  uv_stop(handle->loop);
}

static void worker_main(void *arg) {
  ho_t *o = arg;
  o->worker_self = uv_thread_self();
  atomic_store(&o->running, 1);
  uv_run(&o->f.loop, UV_RUN_DEFAULT);
  atomic_store(&o->done, 1);
}

/* ---- Main's side ------------------------------------------------------------ */

/* Polls `*flag` until it is at least `want`, for at most `ms`. */
static bool wait_at_least(atomic_int *flag, int want, uint64_t ms) {
  uint64_t end = uv_hrtime() + ms * NS_PER_MS;
  while (atomic_load(flag) < want) {
    if (uv_hrtime() >= end)
      return false;
    fx_sleep_ms(1);
  }
  return true;
}

/* A loop and a wheel made on main, set up as `setup` says, the busy timer
 * started if asked; then the worker runs the loop for good. */
static ho_t *ho_open(const char *T, setup_t setup, bool busy, int n) {
  ho_t *o = fx_xcalloc(1, sizeof *o);
  if (!fx_open(&o->f, T, NULL)) {
    free(o);
    return NULL;
  }
  g_ho = o;
  o->busy = busy;
  o->n = n;
  o->tasks = fx_xcalloc((size_t)n, sizeof *o->tasks);
  uv_async_init(&o->f.loop, &o->stop, stop_cb);
  o->stop.data = o;
  if (setup == SETUP_NOWAIT) {
    uv_run(&o->f.loop, UV_RUN_NOWAIT);
  } else {
    uvtw_timer_init(o->f.wheel, &o->setup_timer);
    EXPECT_ERR(uvtw_timer_start(&o->setup_timer, setup_timer_cb, SETUP_TIMER_MS, 0), 0,
               "%s: main starts a %d ms wheel timer before the hand-off", T, SETUP_TIMER_MS);
  }
  if (busy) {
    uvtw_timer_init(o->f.wheel, &o->busy_timer);
    EXPECT_ERR(uvtw_timer_start(&o->busy_timer, busy_timer_cb, 1, 0), 0,
               "%s: main starts the busy 1 ms wheel timer before the hand-off", T);
  }
  o->base_ns = uv_hrtime();
  uv_thread_create(&o->worker, worker_main, o);
  if (!wait_at_least(&o->running, 1, WAIT_MS)) {
    printf("Bail out! %s: the worker thread did not start within %d ms\n", T, WAIT_MS);
    exit(1);
  }
  return o;
}

static int schedule_task(ho_t *o, task_t *t) {
  t->sched_us = now_us();
  int rc = uvtw_schedule(o->f.wheel, t->timeout, task_cb, t, t->ticketed ? &t->ticket : NULL);
  t->scheduled = rc == 0;
  return rc;
}

/* Every task not cancelled has run, or WAIT_MS have passed since the last
 * one became due. */
static int wait_tasks(ho_t *o) {
  uint64_t end = uv_hrtime() + (WAIT_MS + 10) * NS_PER_MS;
  for (;;) {
    int missing = 0;
    for (int i = 0; i < o->n; i++) {
      task_t *t = &o->tasks[i];
      if (t->scheduled && t->cancel_rc != 0 && atomic_load(&t->calls) == 0)
        missing++;
    }
    if (missing == 0 || uv_hrtime() >= end)
      return missing;
    fx_sleep_ms(1);
  }
}

/* A 0 ms task scheduled after everything else: once it ran, the loop has
 * drained the queue past every earlier schedule and cancel of main's. */
static void sync_with_marker(ho_t *o, const char *T) {
  task_t *m = &o->marker;
  m->timeout = 0;
  m->cancel_rc = 1;
  EXPECT_ERR(schedule_task(o, m), 0, "%s: main schedules a last 0 ms task", T);
  if (!tap_ok(wait_at_least(&m->calls, 1, WAIT_MS), "%s: ...which runs within %d ms", T, WAIT_MS))
    tap_diag("  it has not run: the loop lost or is sitting on a task from main");
}

static void check_marker(ho_t *o, const char *T) {
  task_t *m = &o->marker;
  int calls = atomic_load(&m->calls), status = atomic_load(&m->status);
  int off = atomic_load(&m->off_worker);
  if (!tap_ok(calls == 1 && status == 0 && off == 0,
              "%s: the last task ran once, with status 0, on the worker", T))
    tap_diag("  %d calls, status %s, %d off the worker", calls, tap_err_name_(status), off);
}

/* Stops the worker's loop by the test's uv_async_t and joins it. If the
 * worker left uv_run on its own (the watchdog), main, the only thread now,
 * runs the loop until the stop callback and the wheel's close ran. */
static void ho_stop(ho_t *o, const char *T) {
  uv_async_send(&o->stop);
  if (!wait_at_least(&o->done, 1, JOIN_MS)) {
    printf("Bail out! %s: the worker never returned from uv_run (%d ms after the stop)\n", T,
           JOIN_MS);
    exit(1);
  }
  uv_thread_join(&o->worker);
  for (int i = 0; i < 5 && (!atomic_load(&o->stop_ran) || atomic_load(&o->closes) == 0); i++)
    uv_run(&o->f.loop, UV_RUN_NOWAIT);
  if (!EXPECT_U64(atomic_load(&o->stop_ran), 1,
                  "%s: the test's uv_async_t, sent from main, stopped the loop on the worker", T))
    tap_diag("  1: on the worker; 2: on main after the worker left uv_run; 0: never");
  EXPECT_U64(atomic_load(&o->closes), 1,
             "%s: the worker closed the wheel; its close callback ran once", T);
}

static void ho_close(ho_t *o) {
  if (atomic_load(&o->stop_ran))
    o->f.wheel = NULL; /* closed by stop_cb */
  fx_close(&o->f);
  g_ho = NULL;
  free(o->tasks);
  free(o);
}

/* ---- The mixed load of the first three cases ------------------------------- */

/* Task i's kind, by i % 10. */
enum { K_LONG_CANCELLED = 0, K_RACE_CANCELLED = 5 };
static const uint64_t mix_timeout[10] = {LONG_MS, 0, 1, 0, 2, 0 /* 0..2 */, 5, 0, 10, 3};

/* Schedules MIX_TASKS tasks, two per millisecond (~100 ms): timeouts 0 to
 * 10 ms, every tenth one 10 s and cancelled at once (the cancel must win),
 * every tenth one of 0 to 2 ms cancelled at once (racing its run: either
 * outcome, and then exactly that one), two in ten with a ticket kept. */
static void schedule_mix(ho_t *o, const char *T) {
  int errors = 0, first_error = 0;
  for (int i = 0; i < o->n; i++) {
    task_t *t = &o->tasks[i];
    int kind = i % 10;
    t->timeout = kind == K_RACE_CANCELLED ? (uint64_t)(i / 10 % 3) : mix_timeout[kind];
    t->cancel = kind == K_LONG_CANCELLED || kind == K_RACE_CANCELLED;
    t->ticketed = t->cancel || kind == 3 || kind == 6;
    t->cancel_rc = 1; /* not cancelled */
    int rc = schedule_task(o, t);
    if (rc != 0 && errors++ == 0)
      first_error = rc;
    if (rc == 0 && t->cancel) {
      t->cancel_rc = uvtw_ticket_cancel(t->ticket);
      if (i % 20 == 0) { /* some released at once, the rest after the worker stopped */
        uvtw_ticket_release(t->ticket);
        t->ticketed = false;
      }
    }
    if (i % 2 == 1)
      fx_sleep_ms(1);
  }
  if (!EXPECT_U64(errors, 0, "%s: main's %d uvtw_schedule calls after the hand-off return 0", T,
                  o->n))
    tap_diag("  the first error: %s", tap_err_name_(first_error));
}

/* The checks of what happened to the mixed tasks; after the join. */
static void check_mix(ho_t *o, const char *T, uint64_t *sched_out, uint64_t *ran_out,
                      uint64_t *won_out) {
  int long_lost = 0, race_bad = 0, not_once = 0, bad_status = 0, off_worker = 0;
  int cancelled_ran = 0, early = 0, bad_first = -1;
  int64_t prompt_max_us = 0;
  uint64_t scheduled = 0, ran = 0, won = 0;
  for (int i = 0; i < o->n; i++) {
    task_t *t = &o->tasks[i];
    if (!t->scheduled)
      continue;
    scheduled++;
    int calls = atomic_load(&t->calls);
    off_worker += atomic_load(&t->off_worker);
    if (i % 10 == K_LONG_CANCELLED && t->cancel_rc != 0)
      long_lost++;
    if (i % 10 == K_RACE_CANCELLED && t->cancel_rc != 0 && t->cancel_rc != UV_EALREADY)
      race_bad++;
    if (t->cancel_rc == 0) {
      won++;
      if (calls != 0)
        cancelled_ran++;
      continue;
    }
    if (calls != 1 || atomic_load(&t->status) != 0) {
      not_once += calls != 1;
      bad_status += calls == 1;
      if (bad_first < 0)
        bad_first = i;
      continue;
    }
    ran++;
    int64_t took_us = (int64_t)atomic_load(&t->ran_us) - t->sched_us;
    if (t->timeout == 0 && took_us > prompt_max_us)
      prompt_max_us = took_us;
    if (took_us + 1 < (int64_t)t->timeout * 1000 - 1000)
      early++;
  }
  EXPECT_U64(long_lost, 0, "%s: every cancel of a 10 s task returns 0", T);
  EXPECT_U64(race_bad, 0, "%s: every cancel racing a 0-2 ms task returns 0 or UV_EALREADY", T);
  if (!EXPECT_U64(not_once, 0, "%s: every task not cancelled ran exactly once (none lost)", T) ||
      !EXPECT_U64(bad_status, 0, "%s: ...with status 0", T)) {
    task_t *t = &o->tasks[bad_first];
    tap_diag("  the first bad one: task %d of %d, %" PRIu64 " ms: %d calls, status %s", bad_first,
             o->n, t->timeout, atomic_load(&t->calls), tap_err_name_(atomic_load(&t->status)));
  }
  EXPECT_U64(off_worker, 0, "%s: every task callback ran on the worker thread", T);
  EXPECT_U64(cancelled_ran, 0, "%s: no task whose cancel won ran (%" PRIu64 " of them)", T, won);
  if (!tap_ok(prompt_max_us < PROMPT_MS * 1000, "%s: every 0 ms task ran within %d ms", T,
              PROMPT_MS))
    tap_diag("  the slowest took %.3f ms", (double)prompt_max_us / 1000);
  tap_diag("%s: the slowest 0 ms task took %.3f ms", T, (double)prompt_max_us / 1000);
  EXPECT_U64(early, 0, "%s: no task ran early (more than 1 ms before call + timeout)", T);
  *sched_out = scheduled;
  *ran_out = ran;
  *won_out = won;
}

/* Cancels the tasks with a ticket kept that ran (UV_EALREADY) and releases
 * every ticket still held. */
static void settle_tickets(ho_t *o, const char *T, bool cancel) {
  int wrong = 0;
  for (int i = 0; i < o->n; i++) {
    task_t *t = &o->tasks[i];
    if (!t->scheduled || !t->ticketed)
      continue;
    /* Only those that ran: one still pending is reported lost instead. */
    if (cancel && !t->cancel && atomic_load(&t->calls) > 0 &&
        uvtw_ticket_cancel(t->ticket) != UV_EALREADY)
      wrong++;
    if (!cancel) {
      uvtw_ticket_release(t->ticket);
      t->ticketed = false;
    }
  }
  if (cancel)
    EXPECT_U64(wrong, 0, "%s: cancelling a task that ran returns UV_EALREADY", T);
}

static void check_stats(ho_t *o, const char *T, uint64_t started, uint64_t stopped,
                        uint64_t fired) {
  const uvtw_stats_t *s = &o->stats;
  if (!atomic_load(&o->stop_ran))
    return;
  int ok = s->active == 0 && s->started == started && s->stopped == stopped && s->fired == fired;
  if (!tap_ok(ok, "%s: the wheel's stats at the end: active 0, started/stopped/fired add up", T))
    tap_diag("  expected active/started/stopped/fired 0/%" PRIu64 "/%" PRIu64 "/%" PRIu64
             ", got %" PRIu64 "/%" PRIu64 "/%" PRIu64 "/%" PRIu64,
             started, stopped, fired, s->active, s->started, s->stopped, s->fired);
}

static void mixed_case(const char *T, setup_t setup, bool busy) {
  ho_t *o = ho_open(T, setup, busy, MIX_TASKS);
  if (o == NULL)
    return;
  int busy0 = atomic_load(&o->busy_fires);
  schedule_mix(o, T);
  int missing = wait_tasks(o);
  if (!tap_ok(missing == 0, "%s: within %d ms every task not cancelled has run", T, WAIT_MS))
    tap_diag("  %d of %d never ran", missing, o->n);
  if (busy) {
    bool kept = wait_at_least(&o->busy_fires, busy0 + BUSY_FLOOR, WAIT_MS);
    if (!tap_ok(kept, "%s: the busy timer kept firing: %d more fires within %d ms", T, BUSY_FLOOR,
                WAIT_MS))
      tap_diag("  %d fires", atomic_load(&o->busy_fires) - busy0);
  }
  if (setup == SETUP_TIMER)
    wait_at_least(&o->setup_fires, 1, WAIT_MS);
  settle_tickets(o, T, true);
  sync_with_marker(o, T);
  ho_stop(o, T);
  settle_tickets(o, T, false);

  uint64_t scheduled = 0, ran = 0, won = 0;
  check_mix(o, T, &scheduled, &ran, &won);
  check_marker(o, T);
  EXPECT_U64(atomic_load(&o->timers_off_worker), 0, "%s: wheel timers fired on the worker only", T);
  uint64_t setup_fires = (uint64_t)atomic_load(&o->setup_fires);
  uint64_t busy_fires = (uint64_t)atomic_load(&o->busy_fires);
  uint64_t busy_errors = (uint64_t)atomic_load(&o->busy_start_errors);
  if (setup == SETUP_TIMER)
    EXPECT_U64(setup_fires, 1, "%s: the timer main started before the hand-off fired once", T);
  if (busy)
    EXPECT_U64(busy_errors, 0, "%s: every restart of the busy timer returned 0", T);
  /* Tasks: each taken in counts in started (the marker too); a won cancel
   * in stopped. Timers: every start in started; the stop of the busy one,
   * active at the end, in stopped. */
  uint64_t timer_starts = (setup == SETUP_TIMER) + (busy ? 1 + busy_fires - busy_errors : 0);
  check_stats(o, T, scheduled + 1 + timer_starts, won + (busy && busy_errors == 0),
              ran + 1 + setup_fires + busy_fires);
  ho_close(o);
}

/* ---- The cases ------------------------------------------------------------------ */

static void test_after_nowait_setup(void) {
  mixed_case("after_nowait_setup", SETUP_NOWAIT, false);
}

static void test_after_timer_start(void) {
  mixed_case("after_timer_start", SETUP_TIMER, false);
}

static void test_busy_worker(void) {
  mixed_case("busy_worker", SETUP_NOWAIT, true);
}

/* Half the tasks are cancelled right after their schedule, the other half
 * once the loop has had time to take them in. */
static void test_cancel_from_main(void) {
  const char *T = "cancel_from_main";
  ho_t *o = ho_open(T, SETUP_NOWAIT, false, CANCEL_TASKS);
  if (o == NULL)
    return;
  int sched_errors = 0, lost = 0;
  for (int i = 0; i < o->n; i++) {
    task_t *t = &o->tasks[i];
    t->timeout = LONG_MS;
    t->ticketed = true;
    t->cancel = true;
    t->cancel_rc = 1;
    if (schedule_task(o, t) != 0) {
      sched_errors++;
      continue;
    }
    if (i % 2 == 0)
      t->cancel_rc = uvtw_ticket_cancel(t->ticket);
    if (i % 4 == 1)
      fx_sleep_ms(1);
  }
  fx_sleep_ms(20);
  for (int i = 1; i < o->n; i += 2)
    if (o->tasks[i].scheduled)
      o->tasks[i].cancel_rc = uvtw_ticket_cancel(o->tasks[i].ticket);
  for (int i = 0; i < o->n; i++) {
    task_t *t = &o->tasks[i];
    if (t->scheduled && t->cancel_rc != 0)
      lost++;
    if (t->scheduled && i % 4 == 0) { /* some released now, the rest after the stop */
      uvtw_ticket_release(t->ticket);
      t->ticketed = false;
    }
  }
  EXPECT_U64(sched_errors, 0, "%s: main's %d uvtw_schedule calls of 10 s tasks return 0", T, o->n);
  EXPECT_U64(lost, 0, "%s: every cancel from main returns 0, before or after the take-in", T);
  sync_with_marker(o, T);
  ho_stop(o, T);
  settle_tickets(o, T, false);

  int calls = 0;
  for (int i = 0; i < o->n; i++) {
    task_t *t = &o->tasks[i];
    calls += atomic_load(&t->calls);
  }
  EXPECT_U64(calls, 0, "%s: no cancelled task's callback ran, not even at the close", T);
  check_marker(o, T);
  check_stats(o, T, (uint64_t)(o->n - sched_errors) + 1, (uint64_t)(o->n - sched_errors), 1);
  ho_close(o);
}

/* As real libuv programs use the wheel, against include/uvtw.h and
 * README.md:
 *
 *   loop_on_other_thread .... loop and wheel made on one thread, uv_run on
 *                             another: the making thread's tasks and cancels
 *                             go through the queue and run on the loop thread
 *   before_first_run ........ a task scheduled before the loop first runs
 *                             keeps uv_run(DEFAULT) going until it ran, with
 *                             the loop run on the same or another thread; an
 *                             idle wheel does not keep it going
 */

static void count_close_cb(uvtw_wheel_t *wheel, void *arg) {
  (void)wheel;
  ++*(int *)arg;
}

typedef struct remote_probe_s {
  atomic_int calls;
  atomic_int status;
  atomic_int on_loop_thread;
  const uv_thread_t *loop_thread;
} remote_probe_t;

static void remote_probe_cb(void *arg, int status) {
  remote_probe_t *p = arg;
  uv_thread_t self = uv_thread_self();
  atomic_store(&p->status, status);
  atomic_store(&p->on_loop_thread, uv_thread_equal(&self, p->loop_thread));
  atomic_fetch_add(&p->calls, 1);
}

static void wait_calls(remote_probe_t *p, int calls, uint64_t ms) {
  uint64_t end = uv_hrtime() + ms * NS_PER_MS;
  while (atomic_load(&p->calls) < calls && uv_hrtime() < end)
    fx_sleep_ms(1);
}

typedef struct other_s {
  fx_t f;
  uv_async_t stop; /* referenced: keeps the loop running until sent */
  uv_thread_t loop_thread;
  atomic_int running; /* the loop thread is inside uv_run */
  remote_probe_t now_probe, held_probe, cancelled_probe;
  int closes;
} other_t;

static void other_stop_cb(uv_async_t *handle) {
  other_t *o = handle->data;
  uv_close((uv_handle_t *)&o->stop, NULL);
  uvtw_wheel_close(o->f.wheel, count_close_cb, &o->closes);
}

static void other_loop_thread(void *arg) {
  other_t *o = arg;
  atomic_store(&o->running, 1);
  uv_run(&o->f.loop, UV_RUN_DEFAULT);
}

static void test_loop_on_other_thread(void) {
  const char *T = "loop_on_other_thread";
  other_t *o = fx_xcalloc(1, sizeof *o);
  uvtw_ticket_t *held = NULL, *cancelled = NULL;
  if (!fx_open(&o->f, T, NULL)) {
    free(o);
    return;
  }
  uv_async_init(&o->f.loop, &o->stop, other_stop_cb);
  o->stop.data = o;
  o->now_probe.loop_thread = o->held_probe.loop_thread = o->cancelled_probe.loop_thread =
      &o->loop_thread;
  uv_thread_create(&o->loop_thread, other_loop_thread, o);
  while (!atomic_load(&o->running))
    fx_sleep_ms(1);

  /* This thread made the wheel; the loop runs on the other. */
  EXPECT_ERR(uvtw_schedule(o->f.wheel, 0, remote_probe_cb, &o->now_probe, NULL), 0,
             "%s: a 0 ms task from the making thread is accepted", T);
  EXPECT_ERR(uvtw_schedule(o->f.wheel, 5, remote_probe_cb, &o->held_probe, &held), 0,
             "%s: a 5 ms task with a ticket too", T);
  EXPECT_ERR(uvtw_schedule(o->f.wheel, 10000, remote_probe_cb, &o->cancelled_probe, &cancelled), 0,
             "%s: and a 10 s task", T);
  wait_calls(&o->now_probe, 1, 1000);
  wait_calls(&o->held_probe, 1, 1000);
  EXPECT_U64(atomic_load(&o->now_probe.calls), 1, "%s: the 0 ms task ran within 1 s", T);
  EXPECT_U64(atomic_load(&o->held_probe.calls), 1, "%s: the 5 ms task ran within 1 s", T);
  tap_ok(atomic_load(&o->now_probe.on_loop_thread) && atomic_load(&o->held_probe.on_loop_thread) &&
             atomic_load(&o->now_probe.status) == 0,
         "%s: ...on the loop's thread, with status 0", T);
  EXPECT_ERR(uvtw_ticket_cancel(held), UV_EALREADY,
             "%s: cancelling the task that ran is UV_EALREADY", T);
  EXPECT_ERR(uvtw_ticket_cancel(cancelled), 0, "%s: cancelling the 10 s task wins", T);
  uvtw_ticket_release(held);
  uvtw_ticket_release(cancelled);

  uv_async_send(&o->stop);
  uv_thread_join(&o->loop_thread);
  EXPECT_U64(o->closes, 1, "%s: the loop thread closed the wheel; its callback ran once", T);
  EXPECT_U64(atomic_load(&o->cancelled_probe.calls), 0,
             "%s: the cancelled task never ran, even at close", T);
  o->f.wheel = NULL;
  fx_close(&o->f);
  free(o);
}

/* ---- Tasks scheduled before the loop first runs --------------------------- */

typedef struct early_s {
  fx_t f;
  task_probe_t probe;
  uint64_t run_ns; /* how long uv_run(DEFAULT) took */
  int run_rc;
} early_t;

static void early_run_thread(void *arg) {
  early_t *e = arg;
  uint64_t t0 = uv_hrtime();
  e->run_rc = uv_run(&e->f.loop, UV_RUN_DEFAULT);
  e->run_ns = uv_hrtime() - t0;
}

static void before_first_run(bool other_thread, const char *T) {
  early_t *e = fx_xcalloc(1, sizeof *e);
  if (!fx_open(&e->f, T, NULL)) {
    free(e);
    return;
  }
  uint64_t t0 = uv_hrtime();
  EXPECT_ERR(uvtw_schedule(e->f.wheel, 30, task_probe_cb, &e->probe, NULL), 0,
             "%s: a 30 ms task scheduled before the loop ever ran", T);
  if (other_thread) {
    uv_thread_t thread;
    uv_thread_create(&thread, early_run_thread, e);
    uv_thread_join(&thread);
  } else {
    early_run_thread(e);
  }
  EXPECT_U64(e->probe.calls, 1, "%s: uv_run(DEFAULT) returned only after the task ran", T);
  EXPECT_U64(e->probe.status, 0, "%s: ...with status 0", T);
  if (!tap_ok(e->probe.ran_ns - t0 >= 29 * NS_PER_MS, "%s: ...not early", T))
    tap_diag("  it ran %.3f ms after the call", (double)(e->probe.ran_ns - t0) / 1e6);
  if (!other_thread)
    EXPECT_U64(e->probe.wrong_thread, 0, "%s: ...on the loop's thread", T);

  /* An idle wheel: uv_run(DEFAULT) returns at once. */
  uint64_t t1 = uv_hrtime();
  EXPECT_I64(uv_run(&e->f.loop, UV_RUN_DEFAULT), 0, "%s: with nothing pending uv_run returns 0", T);
  tap_ok(uv_hrtime() - t1 < 500 * NS_PER_MS, "%s: ...at once", T);
  EXPECT_U64(!!uv_loop_alive(&e->f.loop), 0,
             "%s: once the loop has run, an idle wheel does not keep it alive", T);
  fx_close(&e->f);
  free(e);
}

static void test_before_first_run(void) {
  before_first_run(false, "before_first_run, same thread");
  before_first_run(true, "before_first_run, loop run on another thread");

  /* A wheel made and left idle: uv_run(DEFAULT) returns without waiting. */
  fx_t f;
  if (!fx_open(&f, "before_first_run, idle", NULL))
    return;
  uint64_t t0 = uv_hrtime();
  EXPECT_I64(uv_run(&f.loop, UV_RUN_DEFAULT), 0,
             "before_first_run, idle: uv_run(DEFAULT) on an idle new wheel returns 0");
  tap_ok(uv_hrtime() - t0 < 500 * NS_PER_MS, "before_first_run, idle: ...at once");
  fx_close(&f);
}

static const tap_case_t cases[] = {
    TAP_CASE(after_nowait_setup), TAP_CASE(after_timer_start),    TAP_CASE(busy_worker),
    TAP_CASE(cancel_from_main),   TAP_CASE(loop_on_other_thread), TAP_CASE(before_first_run),
};

FX_MAIN(cases)
