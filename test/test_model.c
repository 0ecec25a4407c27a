/* The public API on a real loop against a model, with the library's
 * invariant checker (uvtw__check, src/life.h) after every step: the
 * randomized counterpart of test_wheel.c's model of the pure wheel, for
 * the glue (src/core.c, timer.c, tasks.c, manual.c, life.c) (TAP).
 *
 * Two wheels on one loop, on the loop's clock (the second with a tick of 1
 * to 3 ms, by the seed). Each step, chosen at random:
 *   - a timer call from the loop's thread on a pool of timers bound to the
 *     wheels: start or restart (0 to 5 ms, some repeating), stop, again,
 *     set_repeat, ref or unref, init again (inactive timers, on either
 *     wheel); a wheel's ref or unref;
 *   - a task: uvtw_schedule from top-level code on the loop's thread, with
 *     or without a ticket, a cancel (again after a win too) or a release;
 *   - the loop runs: uv_run(UV_RUN_NOWAIT), after 0 to 2 ms or not;
 *     UV_RUN_ONCE with a guard uv_timer_t so that it never blocks long;
 *     UV_RUN_DEFAULT stopped by the guard; UV_RUN_DEFAULT with the test's
 *     own handles unreferenced, which may return only once no referenced
 *     wheel holds a referenced timer or a task it has taken in;
 *   - a producer thread starts or stops: it schedules on both wheels and
 *     cancels and releases its tickets continuously while the loop runs;
 *   - a hand-off (the producer joined first): a second thread runs the loop
 *     (uv_run(UV_RUN_NOWAIT) some times, with checks after each) while main
 *     keeps scheduling and cancelling; joined, main runs the loop again.
 * Every wheel callback may start timers with 0 (on either wheel), stop
 * timers, schedule tasks on either wheel and cancel or release tickets.
 *
 * After every step, on the thread that runs the loop and never inside a
 * wheel callback: uvtw__check(wheel) == NULL for both wheels (when the
 * library has the checker: -Dchecks), and the model's checks:
 *   - exactly once: a one-shot timer's callback once per start, never after
 *     a stop; a task's callback exactly once unless its cancel returned 0,
 *     never both (at the end, over every task);
 *   - never early: uv_now() >= the start's uv_now() + timeout at a timer's
 *     callback; a task's at or after its call + timeout - 1 ms by
 *     uv_hrtime() (and uv_now() at or after the call's ms + timeout);
 *   - callbacks on the thread that runs the loop;
 *   - is_active, has_ref, get_repeat and get_due_in of every timer as the
 *     model has them; next_due no later than the earliest armed timer;
 *   - stats: fired as the callbacks counted; stopped + one-shot fires <=
 *     started; armed timers <= active <= armed timers + tasks not run and
 *     not cancelled; and active exactly armed timers + tasks taken in and
 *     not cancelled when that is known: no producer runs and every task was
 *     queued before a poll phase the loop has run since (the contract: the
 *     loop takes in, in the same iteration, every task queued before its
 *     poll phase ends), which a uv_check_t tells;
 * At the end both wheels close, each given a 10 s timer and 10 s tasks
 * first (some taken in, one of those cancelled, some still queued), so that
 * the close always has something to end: every task still pending ends
 * once, with UV_ECANCELED; timers are inactive, starts and schedules get
 * UV_ECANCELED. Every ticket is then cancelled once more (0 if its cancel
 * won, else UV_EALREADY) and released, and uv_loop_close returns 0.
 *
 * Each check is one TAP line at the end; the first failures are told as
 * they happen, with the step, what it did, main's last uv_run and the
 * seed. A run stops after STOP_AFTER failures (and still closes).
 *
 * Environment: UVTW_MODEL_STEPS / 1000 steps (Meson passes -Dmodel_steps,
 * so 2000 by default; bounded to 100 .. 5000), or UVTW_MODEL_LOOP_STEPS
 * steps exactly; UVTW_SEED repeats the random choices of main's steps (the
 * threads' interleavings are the machine's).
 */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "tap.h"
#include "uvtw.h"
#ifdef UVTW_CHECKS
#include "life.h" /* uvtw__check */
#endif

#define NS_PER_MS UINT64_C(1000000)

enum {
  WHEELS = 2,
  TIMERS = 16,            /* the pool of timers, bound to either wheel */
  MAX_TIMEOUT_MS = 5,     /* timeouts and repeats: 0 .. 5 ms */
  RECORDS = 1 << 17,      /* task records, each used once */
  LIST_CAP = 1024,        /* unreleased tickets per owner */
  PRODUCER_BACKLOG = 256, /* the producer waits while this many tasks are outstanding */
  HANDOFF_RUNS_MAX = 40,  /* uv_run(UV_RUN_NOWAIT) calls of a hand-off */
  DIAG_MAX = 12,          /* failures told in full */
  STOP_AFTER = 60,        /* failures after which the run stops (and still closes) */
};

/* ---- random numbers: one generator per role ---------------------------------- */

typedef struct rng_s {
  uint64_t s;
} rng_t;

static uint64_t rng_next(rng_t *r) {
  r->s ^= r->s >> 12;
  r->s ^= r->s << 25;
  r->s ^= r->s >> 27;
  return r->s * UINT64_C(0x2545F4914F6CDD1D);
}

static uint64_t rng_below(rng_t *r, uint64_t n) {
  return (rng_next(r) >> 11) % n;
}

static rng_t g_main_rng; /* main's steps */
static rng_t g_loop_rng; /* whichever thread runs the loop: callbacks, the hand-off's runner */

/* ---- failures --------------------------------------------------------------------- */

enum failure {
  F_CHECKER,
  F_TIMER_ONCE,
  F_TIMER_EARLY,
  F_TIMER_STATE,
  F_TASK_ONCE,
  F_TASK_EARLY,
  F_THREAD,
  F_STATS,
  F_ALIVE,
  F_CALLS,
  F_CLOSE,
  F_COUNT
};

static const char *const failure_names[F_COUNT] = {
    "uvtw__check accepts both wheels after every step",
    "exactly once: a timer's callback runs once per start of a one-shot, never after a stop or a "
    "close",
    "never early: a timer's callback sees uv_now() >= its start's uv_now() + timeout",
    "is_active, has_ref, get_repeat, get_due_in and next_due agree with the model",
    "exactly once: a task's callback runs once unless its cancel returned 0, never both",
    "never early: a task runs at or after its call + timeout (uv_hrtime() - 1 ms, uv_now())",
    "callbacks run on the thread that runs the loop",
    "stats: fired as counted, stopped + one-shot fires <= started, active = armed timers + tasks "
    "taken in and not cancelled",
    "uv_run(UV_RUN_DEFAULT) returns only once no referenced timer or taken-in task is pending on a "
    "referenced wheel",
    "every call returns what the contract says",
    "close: pending tasks end with UV_ECANCELED, timers stop, the close callback runs once",
};

static uv_mutex_t g_fail_lock;
static atomic_int g_failures[F_COUNT];
static atomic_int g_failed; /* all categories */
static atomic_uint_fast64_t g_step;
static _Atomic(const char *) g_step_kind = "setup"; /* what main's step did */
static _Atomic(const char *) g_last_run = "none";   /* main's last uv_run */
static uint64_t g_seed;

static void fail(enum failure f, const char *fmt, ...) __attribute__((format(TAP_PRINTF, 2, 3)));
static void fail(enum failure f, const char *fmt, ...) {
  atomic_fetch_add(&g_failures[f], 1);
  if (atomic_fetch_add(&g_failed, 1) >= DIAG_MAX)
    return;
  char what[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  uv_mutex_lock(&g_fail_lock);
  tap_diag("  step %" PRIu64 " (%s; last run: %s): %s (seed %" PRIu64 ")",
           (uint64_t)atomic_load(&g_step), atomic_load(&g_step_kind), atomic_load(&g_last_run),
           what, g_seed);
  uv_mutex_unlock(&g_fail_lock);
}

/* ---- the model ------------------------------------------------------------------- */

typedef struct mwheel_s {
  uvtw_wheel_t *w;
  uint32_t tick;
  bool ref;
  bool closing;
  int close_calls;
  /* The loop's side (the thread that runs the loop, or main while none does). */
  bool maybe_queued;     /* a task may wait in its queue: active is known only as a range */
  uint64_t fired;        /* callbacks run with status 0 */
  uint64_t repeat_fires; /* of those, of repeating timers */
  /* Tasks scheduled (counted just before the call) whose callback has not
   * run and whose cancel has not won. */
  _Atomic int64_t outstanding;
} mwheel_t;

typedef struct mtimer_s {
  uvtw_timer_t t;
  int index;
  int wheel;         /* the wheel it was initialised on */
  bool ever_started; /* since its init: again() is not UV_EINVAL */
  bool armed;
  bool ref;
  uint64_t repeat;
  uint64_t due_min; /* uv_now() at the start (or re-arm) + timeout */
} mtimer_t;

enum origin { FROM_MAIN, FROM_CALLBACK, FROM_HANDOFF, FROM_PRODUCER };

/* A task's record; written by the thread that schedules it before the call,
 * read by its callback (the queue orders the two) and by main at the end. */
typedef struct mtask_s {
  atomic_int calls;     /* callbacks with status 0 */
  atomic_int cancelled; /* callbacks with UV_ECANCELED */
  atomic_int won;       /* a cancel returned 0 */
  int wheel;
  enum origin origin;
  uint64_t timeout;
  uint64_t call_ns; /* uv_hrtime() just before uvtw_schedule */
  uvtw_ticket_t *ticket;
  bool scheduled;
  bool ticketed;
  bool released;
} mtask_t;

/* Tickets not yet released, by owner. */
typedef struct tlist_s {
  mtask_t *v[LIST_CAP];
  size_t n;
} tlist_t;

static uv_loop_t g_loop;
static mwheel_t g_wheels[WHEELS];
static mtimer_t g_timers[TIMERS];
static mtask_t *g_records;
static atomic_size_t g_records_used;
static tlist_t g_list_main;     /* main's own tickets (top level and hand-offs) */
static tlist_t g_list_loop;     /* the callbacks' tickets; main's too while it runs the loop */
static tlist_t g_list_producer; /* the producer's */

static uv_thread_t g_runner;    /* the thread that runs the loop (main outside hand-offs) */
static int g_in_cb = -1;        /* the wheel whose callback runs, or -1 */
static bool g_producer_running; /* main's */
static uv_check_t g_check;      /* after each poll phase: the queues were taken in */
static uv_timer_t g_guard;      /* bounds UV_RUN_ONCE and UV_RUN_DEFAULT */
static bool g_guard_fired, g_guard_stops;

/* What the run did, for the report and the check that it did something. */
static struct {
  uint64_t timer_fires, exact_checks, handoffs, handoff_tasks, producer_runs, alive_runs,
      alive_returned, steps;
  atomic_uint_fast64_t producer_tasks;
} g_n;

static bool on_runner(void) {
  uv_thread_t self = uv_thread_self();
  return uv_thread_equal(&self, &g_runner) != 0;
}

static mtask_t *record_new(void) {
  size_t i = atomic_fetch_add(&g_records_used, 1);
  if (i >= RECORDS) {
    atomic_store(&g_records_used, RECORDS);
    return NULL;
  }
  return &g_records[i];
}

static size_t record_index(const mtask_t *r) {
  return (size_t)(r - g_records);
}

static void list_push(tlist_t *l, mtask_t *r) {
  l->v[l->n++] = r;
}

/* Removes and returns the i-th ticket holder of `l`. */
static mtask_t *list_take(tlist_t *l, size_t i) {
  mtask_t *r = l->v[i];
  l->v[i] = l->v[--l->n];
  return r;
}

static uint64_t tick_up(uint32_t tick, uint64_t ms) {
  return (ms + tick - 1) / tick * tick;
}

/* ---- timers ----------------------------------------------------------------------- */

static void loop_actions(int wheel);

static void timer_cb(uvtw_timer_t *timer) {
  mtimer_t *m = timer->data;
  mwheel_t *mw = &g_wheels[m->wheel];
  uint64_t now = uv_now(&g_loop);
  if (!on_runner())
    fail(F_THREAD, "timer %d's callback ran off the thread that runs the loop", m->index);
  if (mw->closing)
    fail(F_TIMER_ONCE, "timer %d's callback ran after its wheel's close", m->index);
  if (!m->armed)
    fail(F_TIMER_ONCE,
         "timer %d's callback ran while it was not started (stopped, or a one-shot "
         "that ran already)",
         m->index);
  if (now < m->due_min)
    fail(F_TIMER_EARLY, "timer %d ran at uv_now %" PRIu64 ", before its due %" PRIu64, m->index,
         now, m->due_min);
  mw->fired++;
  g_n.timer_fires++;
  if (m->repeat != 0) {
    mw->repeat_fires++;
    m->due_min = now + m->repeat;
  } else {
    m->armed = false;
  }
  if (uvtw_timer_is_active(timer) != (m->repeat != 0))
    fail(F_TIMER_STATE, "timer %d (repeat %" PRIu64 ") is %sactive inside its callback", m->index,
         m->repeat, uvtw_timer_is_active(timer) ? "" : "in");
  int outer = g_in_cb;
  g_in_cb = m->wheel;
  loop_actions(m->wheel);
  g_in_cb = outer;
}

static void timer_start(mtimer_t *m, uint64_t timeout, uint64_t repeat) {
  int rc = uvtw_timer_start(&m->t, timer_cb, timeout, repeat);
  if (rc != 0)
    fail(F_CALLS, "uvtw_timer_start(timer %d) returned %s", m->index, tap_err_name_(rc));
  m->ever_started = true;
  m->armed = true;
  m->repeat = repeat;
  m->due_min = uv_now(&g_loop) + timeout;
}

static void timer_stop(mtimer_t *m) {
  int rc = uvtw_timer_stop(&m->t);
  if (rc != 0)
    fail(F_CALLS, "uvtw_timer_stop(timer %d) returned %s", m->index, tap_err_name_(rc));
  m->armed = false;
}

static void timer_again(mtimer_t *m) {
  int rc = uvtw_timer_again(&m->t);
  int want = m->ever_started ? 0 : UV_EINVAL;
  if (rc != want)
    fail(F_CALLS, "uvtw_timer_again(timer %d) returned %s, not %s", m->index, tap_err_name_(rc),
         tap_err_name_(want));
  if (m->ever_started && m->repeat != 0) {
    m->armed = true;
    m->due_min = uv_now(&g_loop) + m->repeat;
  }
}

static void timer_init(mtimer_t *m, int wheel) {
  uvtw_timer_init(g_wheels[wheel].w, &m->t);
  m->t.data = m;
  m->wheel = wheel;
  m->ever_started = m->armed = false;
  m->ref = true;
  m->repeat = 0;
}

static uint64_t random_repeat(rng_t *r) {
  return rng_below(r, 3) == 0 ? 1 + rng_below(r, MAX_TIMEOUT_MS) : 0;
}

/* One timer call from top-level code on the loop's thread. */
static void timer_op(rng_t *r) {
  mtimer_t *m = &g_timers[rng_below(r, TIMERS)];
  unsigned op = (unsigned)rng_below(r, 100);
  if (op < 35) {
    timer_start(m, rng_below(r, MAX_TIMEOUT_MS + 1), random_repeat(r));
  } else if (op < 45) {
    timer_start(m, 0, random_repeat(r));
  } else if (op < 60) {
    timer_stop(m);
  } else if (op < 70) {
    timer_again(m);
  } else if (op < 77) {
    m->repeat = rng_below(r, 2) ? 0 : 1 + rng_below(r, MAX_TIMEOUT_MS);
    uvtw_timer_set_repeat(&m->t, m->repeat);
  } else if (op < 90) {
    m->ref = !m->ref;
    (m->ref ? uvtw_timer_ref : uvtw_timer_unref)(&m->t);
  } else if (!m->armed) { /* an inactive timer holds nothing: it may go to any wheel */
    timer_init(m, (int)rng_below(r, WHEELS));
  }
}

/* ---- tasks ------------------------------------------------------------------------- */

static void task_cb(void *arg, int status) {
  mtask_t *t = arg;
  mwheel_t *mw = &g_wheels[t->wheel];
  size_t id = record_index(t);
  if (!on_runner())
    fail(F_THREAD, "task %zu's callback ran off the thread that runs the loop", id);
  if (atomic_load(&t->calls) + atomic_load(&t->cancelled) != 0)
    fail(F_TASK_ONCE, "task %zu's callback ran a second time (status %s)", id,
         tap_err_name_(status));
  if (atomic_load(&t->won))
    fail(F_TASK_ONCE, "task %zu's callback ran after its cancel returned 0", id);
  atomic_fetch_sub(&mw->outstanding, 1);
  if (status == UV_ECANCELED) {
    if (!mw->closing)
      fail(F_TASK_ONCE, "task %zu ended with UV_ECANCELED on an open wheel", id);
    atomic_fetch_add(&t->cancelled, 1);
    return;
  }
  atomic_fetch_add(&t->calls, 1);
  if (status != 0 || mw->closing) {
    fail(F_TASK_ONCE, "task %zu's callback had status %s%s", id, tap_err_name_(status),
         mw->closing ? " on a closing wheel" : "");
    return;
  }
  uint64_t now_ns = uv_hrtime();
  uint64_t due_ns = t->call_ns + t->timeout * NS_PER_MS;
  if (now_ns + NS_PER_MS < due_ns)
    fail(F_TASK_EARLY, "task %zu (%" PRIu64 " ms) ran %" PRIu64 " us after its call", id,
         t->timeout, (now_ns - t->call_ns) / 1000);
  if (uv_now(&g_loop) < t->call_ns / NS_PER_MS + t->timeout)
    fail(F_TASK_EARLY, "task %zu (%" PRIu64 " ms) ran at uv_now %" PRIu64 ", before %" PRIu64, id,
         t->timeout, uv_now(&g_loop), t->call_ns / NS_PER_MS + t->timeout);
  mw->fired++;
  int outer = g_in_cb;
  g_in_cb = t->wheel;
  loop_actions(t->wheel);
  g_in_cb = outer;
}

/* Schedules a task on `wheel`, with a ticket kept in `list` if asked and
 * there is room. The model counts it outstanding before the call, so that
 * the loop never holds a task the model does not count. */
static mtask_t *schedule_for(uint64_t timeout, int wheel, bool ticket, enum origin origin,
                             tlist_t *list) {
  mtask_t *t = record_new();
  if (t == NULL)
    return NULL;
  mwheel_t *mw = &g_wheels[wheel];
  t->wheel = wheel;
  t->origin = origin;
  t->timeout = timeout;
  t->ticketed = ticket && list->n < LIST_CAP;
  atomic_fetch_add(&mw->outstanding, 1);
  t->call_ns = uv_hrtime();
  int rc = uvtw_schedule(mw->w, t->timeout, task_cb, t, t->ticketed ? &t->ticket : NULL);
  if (rc != 0) {
    atomic_fetch_sub(&mw->outstanding, 1);
    fail(F_CALLS, "uvtw_schedule on wheel %d returned %s", wheel, tap_err_name_(rc));
    return NULL;
  }
  t->scheduled = true;
  if (t->ticketed)
    list_push(list, t);
  /* Only a task scheduled from this wheel's own callback is sure to be
   * taken in by the end of the pass; hand-offs and the producer mark the
   * queues after their join. */
  if (origin == FROM_MAIN || (origin == FROM_CALLBACK && g_in_cb != wheel))
    mw->maybe_queued = true;
  return t;
}

static mtask_t *schedule(rng_t *r, int wheel, bool ticket, enum origin origin, tlist_t *list) {
  return schedule_for(rng_below(r, MAX_TIMEOUT_MS + 1), wheel, ticket, origin, list);
}

/* Cancels a ticket of `list` (it stays there: a won cancel is asked again
 * later, which must return 0 again). `on_loop`: on the thread that runs
 * the loop, where a callback that has started has also counted itself. */
static void cancel(tlist_t *list, size_t i, bool on_loop) {
  mtask_t *t = list->v[i];
  size_t id = record_index(t);
  int was_won = atomic_load(&t->won);
  int rc = uvtw_ticket_cancel(t->ticket);
  int ran = atomic_load(&t->calls) + atomic_load(&t->cancelled);
  if (rc == 0) {
    if (ran != 0)
      fail(F_TASK_ONCE, "task %zu: the cancel returned 0 after its callback ran", id);
    if (!atomic_exchange(&t->won, 1))
      atomic_fetch_sub(&g_wheels[t->wheel].outstanding, 1);
  } else if (rc == UV_EALREADY) {
    if (was_won)
      fail(F_TASK_ONCE, "task %zu: a cancel returned UV_EALREADY after one returned 0", id);
    if (on_loop && ran == 0)
      fail(F_TASK_ONCE, "task %zu: the cancel returned UV_EALREADY, its callback never ran", id);
  } else {
    fail(F_CALLS, "uvtw_ticket_cancel(task %zu) returned %s", id, tap_err_name_(rc));
  }
}

static void release(tlist_t *list, size_t i) {
  mtask_t *t = list_take(list, i);
  uvtw_ticket_release(t->ticket);
  t->released = true;
}

/* What a wheel callback (timer or task) may do, on the loop's thread. */
static void loop_actions(int wheel) {
  rng_t *r = &g_loop_rng;
  unsigned n = (unsigned)rng_below(r, 3);
  for (unsigned k = 0; k < n; k++) {
    unsigned op = (unsigned)rng_below(r, 12);
    mtimer_t *m = &g_timers[rng_below(r, TIMERS)];
    if (op < 3) {
      timer_start(m, op == 0 ? rng_below(r, 3) : 0, rng_below(r, 4) == 0 ? 1 : 0);
    } else if (op < 5) {
      timer_stop(m);
    } else if (op < 6 && (m->ever_started || rng_below(r, 2))) {
      timer_again(m);
    } else if (op < 9) {
      /* this wheel mostly: taken in at the pass's end */
      int on = rng_below(r, 3) == 0 ? (int)rng_below(r, WHEELS) : wheel;
      schedule(r, on, rng_below(r, 2) == 0, FROM_CALLBACK, &g_list_loop);
    } else if (op < 10 && g_list_loop.n != 0) {
      cancel(&g_list_loop, rng_below(r, g_list_loop.n), true);
    } else if (op < 11 && g_list_loop.n != 0) {
      release(&g_list_loop, rng_below(r, g_list_loop.n));
    }
  }
}

/* One task call from top-level code on the loop's thread. */
static void task_op(rng_t *r) {
  unsigned op = (unsigned)rng_below(r, 100);
  tlist_t *list = rng_below(r, 2) ? &g_list_main : &g_list_loop;
  if (op < 50) {
    schedule(r, (int)rng_below(r, WHEELS), rng_below(r, 3) != 0, FROM_MAIN, list);
  } else if (op < 80) {
    if (list->n != 0)
      cancel(list, rng_below(r, list->n), true);
  } else if (list->n != 0) {
    release(list, rng_below(r, list->n));
  }
}

/* ---- the checks after a step ---------------------------------------------------- */

/* On the thread that runs the loop, outside every wheel callback.
 * `concurrent`: another thread (main, during a hand-off) may be scheduling,
 * so the tasks are known only as a range. */
static void check_step(bool concurrent) {
  uint64_t now = uv_now(&g_loop);
  for (int i = 0; i < WHEELS; i++) {
    mwheel_t *mw = &g_wheels[i];
#ifdef UVTW_CHECKS
    const char *broken = uvtw__check(mw->w);
    if (broken != NULL)
      fail(F_CHECKER, "wheel %d: uvtw__check: %s", i, broken);
#endif
    uint64_t armed = 0, first_due = UINT64_MAX;
    for (int k = 0; k < TIMERS; k++) {
      mtimer_t *m = &g_timers[k];
      if (m->wheel != i)
        continue;
      int active = uvtw_timer_is_active(&m->t);
      if (active != m->armed)
        fail(F_TIMER_STATE, "timer %d is %sactive, the model has it %s", k, active ? "" : "in",
             m->armed ? "started" : "stopped");
      if (uvtw_timer_has_ref(&m->t) != m->ref)
        fail(F_TIMER_STATE, "timer %d: has_ref is %d, the model says %d", k,
             uvtw_timer_has_ref(&m->t), m->ref);
      if (uvtw_timer_get_repeat(&m->t) != m->repeat)
        fail(F_TIMER_STATE, "timer %d: get_repeat is %" PRIu64 ", the model says %" PRIu64, k,
             uvtw_timer_get_repeat(&m->t), m->repeat);
      if (!m->armed)
        continue;
      armed++;
      uint64_t deadline = tick_up(mw->tick, m->due_min);
      uint64_t due_in = deadline > now ? deadline - now : 0;
      if (uvtw_timer_get_due_in(&m->t) != due_in)
        fail(F_TIMER_STATE, "timer %d: get_due_in is %" PRIu64 ", the model says %" PRIu64, k,
             uvtw_timer_get_due_in(&m->t), due_in);
      if (due_in < first_due)
        first_due = due_in;
    }
    int64_t next_due = uvtw_wheel_next_due(mw->w);
    if (armed != 0 && (next_due < 0 || (uint64_t)next_due > first_due))
      fail(F_TIMER_STATE, "wheel %d: next_due is %" PRId64 " with a timer due in %" PRIu64, i,
           next_due, first_due);
    uvtw_stats_t s;
    uvtw_wheel_stats(mw->w, &s);
    int64_t outstanding = atomic_load(&mw->outstanding);
    uint64_t tasks = outstanding > 0 ? (uint64_t)outstanding : 0;
    if (s.fired != mw->fired)
      fail(F_STATS, "wheel %d: stats.fired is %" PRIu64 ", the callbacks counted %" PRIu64, i,
           s.fired, mw->fired);
    if (s.stopped + (s.fired - mw->repeat_fires) > s.started)
      fail(F_STATS, "wheel %d: stopped %" PRIu64 " + one-shot fires %" PRIu64 " > started %" PRIu64,
           i, s.stopped, s.fired - mw->repeat_fires, s.started);
    if (s.active < armed || s.active > armed + tasks)
      fail(F_STATS,
           "wheel %d: stats.active is %" PRIu64 ", outside armed timers %" PRIu64 " .. + %" PRIu64
           " tasks not run nor cancelled",
           i, s.active, armed, tasks);
    else if (!concurrent && !g_producer_running && !mw->maybe_queued) {
      g_n.exact_checks++;
      if (s.active != armed + tasks)
        fail(F_STATS,
             "wheel %d: stats.active is %" PRIu64 ", not %" PRIu64 " armed timers + %" PRIu64
             " tasks taken in and not cancelled",
             i, s.active, armed, tasks);
    }
  }
}

/* ---- running the loop ------------------------------------------------------------- */

static void on_check(uv_check_t *handle) {
  (void)handle;
  for (int i = 0; i < WHEELS; i++)
    g_wheels[i].maybe_queued = false;
}

static void on_guard(uv_timer_t *handle) {
  g_guard_fired = true;
  if (g_guard_stops)
    uv_stop(handle->loop);
}

static void run_guarded(uv_run_mode mode, uint64_t guard_ms, bool stops) {
  g_guard_fired = false;
  g_guard_stops = stops;
  /* Repeating: a guard that already fired in this run's first timer phase
   * (libuv < 1.48 runs one before the poll) must still end the poll. */
  uv_timer_start(&g_guard, on_guard, guard_ms, 1);
  uv_run(&g_loop, mode);
  uv_timer_stop(&g_guard);
}

/* UV_RUN_DEFAULT with nothing of the test's own keeping the loop alive:
 * if it returns by itself, nothing that keeps a loop alive is pending. */
static void run_default_alone(uint64_t guard_ms) {
  uv_unref((uv_handle_t *)&g_check);
  uv_unref((uv_handle_t *)&g_guard);
  run_guarded(UV_RUN_DEFAULT, guard_ms, true);
  uv_ref((uv_handle_t *)&g_check);
  uv_ref((uv_handle_t *)&g_guard);
  g_n.alive_runs++;
  if (g_guard_fired)
    return;
  g_n.alive_returned++;
  for (int i = 0; i < WHEELS; i++) {
    mwheel_t *mw = &g_wheels[i];
    if (!mw->ref)
      continue;
    for (int k = 0; k < TIMERS; k++)
      if (g_timers[k].wheel == i && g_timers[k].armed && g_timers[k].ref)
        fail(F_ALIVE, "uv_run returned while referenced timer %d of referenced wheel %d is armed",
             k, i);
    if (!g_producer_running && !mw->maybe_queued && atomic_load(&mw->outstanding) != 0)
      fail(F_ALIVE,
           "uv_run returned while referenced wheel %d holds %" PRId64 " tasks it has taken in", i,
           (int64_t)atomic_load(&mw->outstanding));
  }
}

/* ---- the producer thread ------------------------------------------------------------ */

static uv_thread_t g_producer;
static atomic_int g_producer_stop;
static rng_t g_producer_rng;

static void producer_main(void *arg) {
  (void)arg;
  rng_t *r = &g_producer_rng;
  tlist_t *list = &g_list_producer;
  while (!atomic_load(&g_producer_stop)) {
    int64_t backlog = atomic_load(&g_wheels[0].outstanding) + atomic_load(&g_wheels[1].outstanding);
    unsigned op = (unsigned)rng_below(r, 16);
    if (op < 8 && backlog < PRODUCER_BACKLOG) {
      if (schedule(r, (int)rng_below(r, WHEELS), rng_below(r, 4) != 0, FROM_PRODUCER, list))
        atomic_fetch_add(&g_n.producer_tasks, 1);
    } else if (op < 12 && list->n != 0) {
      cancel(list, rng_below(r, list->n), false);
    } else if (op < 14 && list->n != 0) {
      release(list, rng_below(r, list->n));
    } else {
      uv_sleep(op < 8 || op == 15 ? 1 : 0);
    }
  }
}

static void producer_start(void) {
  g_producer_rng.s = rng_next(&g_main_rng) | 1;
  atomic_store(&g_producer_stop, 0);
  if (uv_thread_create(&g_producer, producer_main, NULL) != 0) {
    printf("Bail out! uv_thread_create failed\n");
    exit(1);
  }
  g_producer_running = true;
  g_n.producer_runs++;
}

/* After the join every task the producer scheduled may wait in a queue. */
static void producer_stop(void) {
  atomic_store(&g_producer_stop, 1);
  uv_thread_join(&g_producer);
  g_producer_running = false;
  for (int i = 0; i < WHEELS; i++)
    g_wheels[i].maybe_queued = true;
}

/* ---- the hand-off --------------------------------------------------------------------- */

static uv_thread_t g_handoff;
static atomic_int g_handoff_done;
static int g_handoff_runs;

static void handoff_main(void *arg) {
  (void)arg;
  g_runner = uv_thread_self();
  for (int i = 0; i < g_handoff_runs; i++) {
    if (rng_below(&g_loop_rng, 4) == 0)
      uv_sleep(1);
    uv_run(&g_loop, UV_RUN_NOWAIT);
    check_step(true);
  }
  atomic_store(&g_handoff_done, 1);
}

/* A second thread runs the loop for a while; main schedules and cancels
 * meanwhile (its own tickets only); joined, main runs the loop again. */
static void handoff(rng_t *r) {
  if (g_producer_running)
    producer_stop();
  g_handoff_runs = 1 + (int)rng_below(r, HANDOFF_RUNS_MAX);
  uint64_t limit = rng_below(r, 30);
  atomic_store(&g_handoff_done, 0);
  if (uv_thread_create(&g_handoff, handoff_main, NULL) != 0) {
    printf("Bail out! uv_thread_create failed\n");
    exit(1);
  }
  uint64_t n = 0;
  while (!atomic_load(&g_handoff_done)) {
    if (n < limit && rng_below(r, 4) != 0) {
      schedule(r, (int)rng_below(r, WHEELS), rng_below(r, 2) == 0, FROM_HANDOFF, &g_list_main);
      n++;
    } else if (n < limit && g_list_main.n != 0) {
      cancel(&g_list_main, rng_below(r, g_list_main.n), false);
    } else {
      uv_sleep(n < limit ? 0 : 1);
    }
  }
  uv_thread_join(&g_handoff);
  g_runner = uv_thread_self();
  g_n.handoffs++;
  g_n.handoff_tasks += n;
  if (n != 0)
    for (int i = 0; i < WHEELS; i++)
      g_wheels[i].maybe_queued = true;
}

/* ---- the run ------------------------------------------------------------------------- */

/* Names what main's step does, for the failures' report. */
static void step_kind(const char *kind, bool runs) {
  atomic_store(&g_step_kind, kind);
  if (runs)
    atomic_store(&g_last_run, kind);
}

static void step(rng_t *r) {
  unsigned op = (unsigned)rng_below(r, 100);
  if (op < 24) {
    step_kind("a timer call", false);
    timer_op(r);
  } else if (op < 27) {
    mwheel_t *mw = &g_wheels[rng_below(r, WHEELS)];
    step_kind("a wheel's ref or unref", false);
    mw->ref = !mw->ref;
    (mw->ref ? uvtw_wheel_ref : uvtw_wheel_unref)(mw->w);
  } else if (op < 45 || op >= 92) {
    step_kind("a task call", false);
    task_op(r);
  } else if (op < 62) {
    unsigned ms = (unsigned)rng_below(r, 4);
    step_kind("uv_run(UV_RUN_NOWAIT)", true);
    if (ms < 3)
      uv_sleep(ms);
    uv_run(&g_loop, UV_RUN_NOWAIT);
  } else if (op < 72) {
    step_kind("uv_run(UV_RUN_ONCE)", true);
    run_guarded(UV_RUN_ONCE, 1 + rng_below(r, MAX_TIMEOUT_MS), false);
  } else if (op < 76) {
    step_kind("uv_run(UV_RUN_DEFAULT) until the guard", true);
    run_guarded(UV_RUN_DEFAULT, 1 + rng_below(r, MAX_TIMEOUT_MS), true);
  } else if (op < 81) {
    step_kind("uv_run(UV_RUN_DEFAULT) with the test's handles unreferenced", true);
    run_default_alone(1 + rng_below(r, MAX_TIMEOUT_MS));
  } else if (op < 86) {
    step_kind(g_producer_running ? "the producer's stop" : "the producer's start", false);
    if (g_producer_running)
      producer_stop();
    else
      producer_start();
  } else if (op < 89) {
    step_kind("a hand-off", true);
    handoff(r);
  } else {
    step_kind("a sleep", false);
    uv_sleep(1);
  }
}

static void on_close(uvtw_wheel_t *wheel, void *arg) {
  mwheel_t *mw = arg;
  if (wheel != mw->w)
    fail(F_CLOSE, "the close callback got another wheel");
  mw->close_calls++;
}

/* Closes both wheels; every task still pending ends with UV_ECANCELED. */
static void close_wheels(void) {
  for (int i = 0; i < WHEELS; i++) {
    mwheel_t *mw = &g_wheels[i];
    mw->closing = true;
    uvtw_wheel_close(mw->w, on_close, mw);
    for (int k = 0; k < TIMERS; k++) {
      mtimer_t *m = &g_timers[k];
      if (m->wheel != i)
        continue;
      if (uvtw_timer_is_active(&m->t))
        fail(F_CLOSE, "timer %d of wheel %d is active after uvtw_wheel_close", k, i);
      m->armed = false;
      if (mw->close_calls == 0) {
        int rc = uvtw_timer_start(&m->t, timer_cb, 0, 0);
        if (rc != UV_ECANCELED)
          fail(F_CLOSE, "uvtw_timer_start on closing wheel %d returned %s", i, tap_err_name_(rc));
      }
    }
    if (mw->close_calls == 0) {
      static mtask_t never; /* a task the closing wheel must refuse */
      uvtw_ticket_t *ticket = NULL;
      never.wheel = i;
      int rc = uvtw_schedule(mw->w, 0, task_cb, &never, &ticket);
      if (rc != UV_ECANCELED || ticket != NULL)
        fail(F_CLOSE, "uvtw_schedule on closing wheel %d returned %s", i, tap_err_name_(rc));
    }
  }
  for (int k = 0; k < 10 && (g_wheels[0].close_calls == 0 || g_wheels[1].close_calls == 0); k++)
    uv_run(&g_loop, UV_RUN_NOWAIT);
}

/* Every ticket still held: cancelled once more (0 if a cancel won, else
 * UV_EALREADY: the callback ran), then released. */
static void release_all(tlist_t *list) {
  while (list->n != 0) {
    mtask_t *t = list->v[list->n - 1];
    int rc = uvtw_ticket_cancel(t->ticket);
    int want = atomic_load(&t->won) ? 0 : UV_EALREADY;
    if (rc != want)
      fail(F_CLOSE, "after the close, cancelling task %zu returned %s, not %s", record_index(t),
           tap_err_name_(rc), tap_err_name_(want));
    release(list, list->n - 1);
  }
}

static void close_handle(uv_handle_t *handle) {
  if (!uv_is_closing(handle))
    uv_close(handle, NULL);
}

/* The loop, its check and guard handles, the wheels (wheel 0 ticking
 * every ms, the others every 1 to 3) and the timers. */
static void model_open(void) {
  g_records = calloc(RECORDS, sizeof *g_records);
  if (g_records == NULL || uv_loop_init(&g_loop) != 0) {
    printf("Bail out! no memory or no loop\n");
    exit(1);
  }
  g_runner = uv_thread_self();
  uv_check_init(&g_loop, &g_check);
  uv_check_start(&g_check, on_check);
  uv_timer_init(&g_loop, &g_guard);
  for (int i = 0; i < WHEELS; i++) {
    mwheel_t *mw = &g_wheels[i];
    uvtw_options_t opts = {0};
    mw->tick = i == 0 ? 1 : 1 + (uint32_t)rng_below(&g_main_rng, 3);
    opts.tick_ms = mw->tick;
    int rc = uvtw_wheel_new(&g_loop, &opts, &mw->w);
    if (rc != 0) {
      printf("Bail out! uvtw_wheel_new: %s\n", uv_strerror(rc));
      exit(1);
    }
    mw->ref = true;
    mw->maybe_queued = true;
  }
  for (int k = 0; k < TIMERS; k++) {
    g_timers[k].index = k;
    timer_init(&g_timers[k], k % WHEELS);
  }
}

/* Something for the close to end: on each wheel a timer, tasks taken in
 * (one of them cancelled) and tasks still queued. */
static void model_leave_work_for_close(void) {
  for (int i = 0; i < WHEELS; i++) {
    for (int k = 0; k < TIMERS; k++)
      if (g_timers[k].wheel == i) {
        timer_start(&g_timers[k], 10000, 0);
        break;
      }
    schedule_for(10000, i, true, FROM_MAIN, &g_list_main);
    schedule_for(10000, i, false, FROM_MAIN, &g_list_main);
    schedule_for(10000, i, true, FROM_MAIN, &g_list_main);
  }
  uv_run(&g_loop, UV_RUN_NOWAIT);
  check_step(false);
  if (g_list_main.n != 0)
    cancel(&g_list_main, g_list_main.n - 1, true);
  for (int i = 0; i < WHEELS; i++) {
    schedule_for(10000, i, true, FROM_MAIN, &g_list_main);
    schedule_for(0, i, false, FROM_MAIN, &g_list_main);
  }
  check_step(false);
}

typedef struct model_tasks_s {
  uint64_t ran, ended, won, tasks;
} model_tasks_t;

/* Every task recorded ended once: ran, ended by the close, or cancelled. */
static model_tasks_t model_count_tasks(void) {
  model_tasks_t n = {0};
  size_t used = atomic_load(&g_records_used);
  for (size_t k = 0; k < used && k < RECORDS; k++) {
    mtask_t *t = &g_records[k];
    if (!t->scheduled)
      continue;
    int calls = atomic_load(&t->calls), cancelled = atomic_load(&t->cancelled);
    int w = atomic_load(&t->won);
    n.tasks++;
    n.ran += calls;
    n.ended += cancelled;
    n.won += w;
    if (calls + cancelled != (w ? 0 : 1))
      fail(F_TASK_ONCE,
           "task %zu (from %d, %" PRIu64 " ms): %d callbacks, %d with UV_ECANCELED, "
           "cancel won: %d",
           k, (int)t->origin, t->timeout, calls, cancelled, w);
  }
  for (int i = 0; i < WHEELS; i++)
    if (atomic_load(&g_wheels[i].outstanding) != 0)
      fail(F_CLOSE, "wheel %d: %" PRId64 " tasks neither ran nor were cancelled", i,
           (int64_t)atomic_load(&g_wheels[i].outstanding));
  return n;
}

static void model_close_loop(void) {
  release_all(&g_list_main);
  release_all(&g_list_loop);
  release_all(&g_list_producer);
  close_handle((uv_handle_t *)&g_check);
  close_handle((uv_handle_t *)&g_guard);
  uv_run(&g_loop, UV_RUN_NOWAIT);
  int rc = uv_loop_close(&g_loop);
  if (rc != 0)
    fail(F_CLOSE, "uv_loop_close returned %s", tap_err_name_(rc));
  free(g_records);
}

/* The run's figures, and a check per kind of failure. */
static void model_report(uint64_t ms, model_tasks_t n) {
  tap_diag("%" PRIu64 " steps in %" PRIu64 " ms: %" PRIu64 " timer fires, %" PRIu64
           " tasks (%" PRIu64 " from the producer in %" PRIu64 " runs, %" PRIu64 " from %" PRIu64
           " hand-offs), %" PRIu64 " ran, %" PRIu64 " cancelled, %" PRIu64 " ended by the close",
           g_n.steps, ms, g_n.timer_fires, n.tasks, (uint64_t)atomic_load(&g_n.producer_tasks),
           g_n.producer_runs, g_n.handoff_tasks, g_n.handoffs, n.ran, n.won, n.ended);
  tap_diag("%" PRIu64 " exact checks of stats.active; %" PRIu64 " of %" PRIu64
           " lone UV_RUN_DEFAULT runs returned by themselves",
           g_n.exact_checks, g_n.alive_returned, g_n.alive_runs);
  for (int f = 0; f < F_COUNT; f++) {
#ifndef UVTW_CHECKS
    if (f == F_CHECKER) {
      tap_skip("the library has no invariant checker (-Dchecks=false)", failure_names[f]);
      continue;
    }
#endif
    if (!tap_ok(atomic_load(&g_failures[f]) == 0, "model: %s", failure_names[f]))
      tap_diag("  %d failures", atomic_load(&g_failures[f]));
  }
  if (g_n.steps >= 500)
    tap_ok(g_n.timer_fires > 0 && n.ran > 0 && n.won > 0 && n.ended > 0 && g_n.handoffs > 0 &&
               atomic_load(&g_n.producer_tasks) > 0 && g_n.exact_checks > 0 &&
               g_n.alive_returned > 0,
           "model: the run fired timers, ran, cancelled and closed tasks, handed the loop off, "
           "ran the producer, checked active exactly and saw the loop end by itself");
}

static void test_model(void) {
  const char *loop_steps = getenv("UVTW_MODEL_LOOP_STEPS");
  const char *wheel_steps = getenv("UVTW_MODEL_STEPS");
  uint64_t steps = wheel_steps ? strtoull(wheel_steps, NULL, 10) / 1000 : 2000;
  steps = steps < 100 ? 100 : steps > 5000 ? 5000 : steps;
  if (loop_steps)
    steps = strtoull(loop_steps, NULL, 10);
  model_open();
#ifdef UVTW_CHECKS
  tap_diag("uvtw__check after every step");
#else
  tap_diag("the library has no invariant checker (-Dchecks=false): the model's own checks only");
#endif
  tap_diag("%" PRIu64 " steps; wheel 1 ticks every %u ms", steps, (unsigned)g_wheels[1].tick);
  uint64_t t0 = uv_hrtime();
  for (uint64_t i = 0; i < steps && atomic_load(&g_failed) < STOP_AFTER; i++) {
    atomic_store(&g_step, i);
    step(&g_main_rng);
    check_step(false);
    g_n.steps++;
  }
  if (g_producer_running)
    producer_stop();
  atomic_store(&g_step, steps);
  step_kind("the close", false);
  uint64_t ms = (uv_hrtime() - t0) / NS_PER_MS;

  model_leave_work_for_close();
  close_wheels();
  for (int i = 0; i < WHEELS; i++)
    if (g_wheels[i].close_calls != 1)
      fail(F_CLOSE, "wheel %d's close callback ran %d times", i, g_wheels[i].close_calls);
  model_tasks_t n = model_count_tasks();
  model_close_loop();
  model_report(ms, n);
}

int main(int argc, char **argv) {
  static const tap_case_t cases[] = {TAP_CASE(model)};
  const char *env = getenv("UVTW_SEED");
  g_seed = env ? strtoull(env, NULL, 0) : UINT64_C(0x75767477);
  if (g_seed == 0)
    g_seed = UINT64_C(0x9E3779B97F4A7C15);
  g_main_rng.s = g_seed;
  g_loop_rng.s = g_seed ^ UINT64_C(0xD1B54A32D192ED03);
  if (g_loop_rng.s == 0)
    g_loop_rng.s = 1;
  setvbuf(stdout, NULL, _IOLBF, 0);
  uv_mutex_init(&g_fail_lock);
  tap_diag("libuv %s, uvtw %s", uv_version_string(), uvtw_version_string());
  tap_diag("seed %" PRIu64 " (set UVTW_SEED to repeat)", g_seed);
  return tap_run_cases(argc, argv, cases, sizeof cases / sizeof cases[0]);
}
