/* Fuzz target: the public API (include/uvtw.h) on two wheels of one loop,
 * against a model of its contract, with the invariant checker (uvtw__check,
 * src/life.h, in builds with -Dchecks) after every step.
 *
 * The manual wheel. The input chooses its tick (1 ms or larger) and task
 * limit, then is a program of operations, run at the top level and, as
 * actions, inside the callbacks it makes run: timers are made (malloc),
 * started, stopped, restarted (start, again), given a repeat, referenced and
 * unreferenced, and freed (stopped first if active, inside their own
 * callback too); tasks are scheduled with or without a ticket, cancelled
 * and released; the clock moves with uvtw_wheel_advance and
 * uvtw_wheel_advance_next; the wheel closes, at the top level or inside a
 * callback, and operations go on after the close (until its callback has
 * run: then only tickets are used). At the end the wheel is closed if it is
 * not, the loop runs until the close callback, and the remaining tickets
 * are cancelled and released after the wheel is gone.
 *
 * Tasks are queued by uvtw_schedule from any thread, the loop's too, and
 * the loop takes the queue in: at the start of uvtw_wheel_advance and
 * _advance_next, at the end of every pass, in the uv_async_t's callback
 * (an iteration of uv_run) and at the close. A queued task is not active,
 * not in uvtw_wheel_next_due and counts in `started` from the take-in; its
 * deadline is the wheel's time at the take-in plus its timeout, and its
 * start order (FIFO among equal deadlines) that of the take-in. A cancel of
 * a queued task wins and the take-in lets go of it (started and stopped
 * count it, its place under max_pending is free); a cancel of a task in the
 * wheel makes it inactive at once, and the loop lets go of it at the next
 * take-in or when a pass reaches it, whichever comes first (it stays in
 * next_due until then). The close ends the queued tasks first, in queue
 * order, then those in the wheel.
 *
 * The model keeps every timer and task with its deadline in ticks and its
 * start order, and checks, at every callback and after every operation:
 *   - exactly once: a callback runs only for a pending entry, never after
 *     its stop, cancel or the close; every pending task gets UV_ECANCELED
 *     from the close, the queued ones first in queue order, then the others
 *     in (deadline, start order), and timers never run;
 *   - never early, and on time: a callback sees uvtw_wheel_now() at its
 *     pass, which is the entry's deadline, or the call's starting time if
 *     it was overdue, or the next tick for an entry made due inside a pass
 *     (one pass at a time); after uvtw_wheel_advance nothing is left due
 *     that the call should have run; uvtw_wheel_advance_next runs one pass
 *     at the earliest deadline and returns how far the clock moved;
 *   - order: callbacks run in strictly increasing (deadline, start order),
 *     timers and tasks alike (FIFO among equal deadlines);
 *   - results: every call's return value (UV_EINVAL for again on a timer
 *     never started, UV_ECANCELED between the close and its callback,
 *     UV_EBUSY for advancing inside a callback, UV_ENOBUFS past
 *     max_pending, UV_EALREADY for a cancel after the callback), and a
 *     failed schedule leaves *ticket untouched;
 *   - state: is_active, get_due_in, get_repeat, has_ref, uvtw_wheel_now,
 *     uvtw_wheel_next_due, and the counters started, stopped, fired and
 *     active of uvtw_wheel_stats.
 *
 * The loop wheel, on the loop's clock, is where the arming of its
 * uv_timer_t happens (a manual wheel never arms it): a few timers started
 * with 0 to 3 ms (and a repeat of 0 to 3 ms), stopped, restarted,
 * referenced and unreferenced, a plain uv_timer_t started with 0 to 3 ms,
 * the wheel referenced and unreferenced, and, at the top level,
 * uv_run(UV_RUN_NOWAIT): one loop iteration. These operations (but uv_run)
 * run inside the callbacks of both wheels; inside those of the loop wheel
 * and the uv_timer_t, which run in the timer phase, now and then any
 * operation: the manual wheel's pass then runs inside the timer phase, and
 * the loop wheel must tell that another wheel's pass is under way (WAIT and
 * COLLECTED, src/core.c). Its time is real, so the model checks only what
 * does not depend on it: a callback runs only inside uv_run, for an active
 * timer, once per start or re-arm, never before its deadline; a timer is
 * active inside its callback exactly if it repeats; an iteration makes at
 * most one wakeup, and runs a timer at most once (guarantee 2); the
 * counters, is_active, get_due_in, has_ref. An iteration takes the manual
 * wheel's queue in (its uv_async_t, in the poll phase).
 *
 * uvtw__check runs on each wheel after every operation, where it is
 * allowed: on the loop's thread outside that wheel's callbacks (so on the
 * manual wheel at the top level and inside the callbacks of the loop wheel
 * and the uv_timer_t, on the loop wheel everywhere but inside its own
 * callbacks). ASan and LSan (in the libFuzzer build) check that nothing is
 * touched after it is freed and that nothing leaks. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "fuzz.h"
#include "uvtw.h"
#ifdef UVTW_CHECKS
#include "life.h" /* uvtw__check */
#endif

/* uvtw_timer_again with repeat 0 does nothing and returns 0 (an active
 * one-shot timer stays active), and on a closing wheel returns
 * UV_ECANCELED whatever the repeat, as start does (the contract,
 * include/uvtw.h). The model follows that; 0 here keeps again with repeat 0
 * out of the generated operations, for a library that still stops the
 * timer. */
#ifndef FUZZ_API_AGAIN_REPEAT_0
#define FUZZ_API_AGAIN_REPEAT_0 1
#endif

/* Deadlines past the end of time: a timeout that overflows, or a deadline
 * that rounding up to the tick carries past UINT64_MAX ms, saturates; such
 * an entry never fires, and uvtw_wheel_advance_next returns UV_EAGAIN when
 * nothing else is pending (include/uvtw.h). 1 generates timeouts of any
 * size and moves the clock anywhere; 0 keeps timeouts, and the clock, below
 * 2^61 ms, where no deadline comes near the end. */
#ifndef FUZZ_API_PAST_THE_END
#define FUZZ_API_PAST_THE_END 1
#endif
#define NEAR_ZERO ((uint64_t)1 << 61)

/* The close makes every timer inactive before any task's callback runs
 * with UV_ECANCELED: "pending timers become inactive", and between the
 * close and its callback a stop is a no-op and what the close drops counts
 * in no counter (include/uvtw.h). 0 leaves that check out, for a library
 * that drops timers one by one among the tasks. */
#ifndef FUZZ_API_CLOSE_TIMERS_FIRST
#define FUZZ_API_CLOSE_TIMERS_FIRST 1
#endif

enum {
  TIMERS = 12,
  TASKS = 12,
  LOOP_TIMERS = 4,
  FIRE_BUDGET = 2000, /* callbacks per input; past it, repeating timers stop themselves */
};

/* What the model knows of a pending timer or task. */
typedef struct entry_s {
  bool pending;
  uint64_t deadline; /* ticks */
  uint64_t order;    /* start order */
  uint64_t call;     /* the advance call in whose pass it was armed; 0: outside one */
  uint64_t pass;     /* that pass's tick */
} entry_t;

typedef struct timer_slot_s {
  uvtw_timer_t *timer; /* NULL: none */
  entry_t entry;
  bool started; /* has a callback: again is allowed */
  bool referenced;
  uint64_t repeat;
} timer_slot_t;

enum task_state {
  TASK_FREE,
  TASK_QUEUED,             /* scheduled, not taken in yet */
  TASK_CANCELLED_QUEUED,   /* cancelled before the take-in */
  TASK_IN_WHEEL,           /* taken in: pending (entry.pending) */
  TASK_CANCELLED_IN_WHEEL, /* cancelled in the wheel, not let go of yet */
  TASK_CANCELLED,          /* let go of after a won cancel */
  TASK_FIRED,
  TASK_CLOSED,
};

typedef struct task_slot_s {
  enum task_state state;
  uvtw_ticket_t *ticket; /* NULL: fire-and-forget, or released */
  uint64_t timeout;      /* ms, from the take-in */
  uint64_t queued;       /* queue order */
  entry_t entry;         /* from the take-in */
} task_slot_t;

/* A timer of the loop wheel. */
typedef struct loop_timer_s {
  uvtw_timer_t timer;
  bool pending;
  bool started;
  bool referenced;
  uint64_t repeat;
  uint64_t deadline; /* ms on the loop's clock: it runs no earlier */
  uint64_t run;      /* the uv_run it last ran in */
} loop_timer_t;

typedef struct model_s {
  fuzz_input_t *in;
  uv_loop_t loop;
  /* The manual wheel. */
  uvtw_wheel_t *wheel;
  uint64_t tick;
  uint32_t max_pending;
  uint64_t now; /* ms */
  timer_slot_t timers[TIMERS];
  task_slot_t tasks[TASKS];
  /* The counters of uvtw_stats_t that the calls define. */
  uint64_t started, stopped, fired, active;
  uint64_t tasks_pending; /* tasks holding a place under max_pending */
  uint64_t scheduled;     /* tasks queued so far */
  /* The advance call under way (0: none), its starting time, and the pass
   * whose callbacks run. */
  uint64_t call, calls;
  bool next_only; /* the call is uvtw_wheel_advance_next */
  uint64_t call_start_ms, pass;
  /* The last callback's (deadline, order): they only grow. */
  bool fired_any;
  uint64_t last_deadline, last_order;
  bool closing, closing_in_call;
  /* The last task the close ended: stage 0 (queued) with its queue order,
   * or stage 1 (in the wheel) with its (deadline, start order). */
  bool close_order_any;
  uint64_t close_stage, close_deadline, close_order;
  int close_callbacks; /* 1: the wheel is gone */
  int callbacks;
  /* The loop wheel, and a uv_timer_t beside it. */
  uvtw_wheel_t *loop_wheel;
  loop_timer_t loop_timers[LOOP_TIMERS];
  uint64_t loop_started, loop_stopped, loop_fired, loop_active;
  int loop_close_callbacks;
  uv_timer_t twin;
  uv_check_t check;      /* unreferenced: the model's take-in after the poll phase */
  uint64_t runs;         /* uv_run calls so far */
  bool in_run;           /* inside uv_run */
  bool in_loop_wheel_cb; /* inside one of the loop wheel's callbacks */
  int depth;             /* callbacks under way */
} model_t;

static model_t m;

#define CHECK(cond, what) FUZZ_CHECK(m.in, cond, what)

/* The invariant checker on `w` (`name`: which wheel), where the build has
 * it. */
static void check_invariants(const uvtw_wheel_t *w, const char *name) {
#ifdef UVTW_CHECKS
  const char *error = uvtw__check(w);
  char what[256];
  if (error != NULL)
    snprintf(what, sizeof what, "uvtw__check on the %s wheel: %s", name, error);
  CHECK(error == NULL, what);
#else
  (void)w;
  (void)name;
#endif
}

/* ---- time, as the contract states it ------------------------------------ */

/* A deadline in ms to ticks, rounded up; one rounded up to UINT64_MAX ms
 * or past it saturates, as one that overflows does. */
static uint64_t ticks_up(uint64_t ms) {
  if (m.tick == 1 || ms == UINT64_MAX)
    return ms;
  uint64_t ticks = ms / m.tick + (ms % m.tick != 0);
  return ticks > (UINT64_MAX - 1) / m.tick ? UINT64_MAX : ticks;
}

static uint64_t ms_of(uint64_t ticks) {
  return ticks > UINT64_MAX / m.tick ? UINT64_MAX : ticks * m.tick;
}

static uint64_t max_u64(uint64_t a, uint64_t b) {
  return a > b ? a : b;
}

/* The tick of the pass that runs `e` in an advance call from the call's
 * starting tick on: its deadline, or the call's start if overdue, or the
 * tick after the pass that armed it due (one pass at a time). */
static uint64_t run_tick(const entry_t *e) {
  uint64_t at = max_u64(e->deadline, m.call_start_ms / m.tick);
  return e->call == m.call && e->call != 0 ? max_u64(at, e->pass + 1) : at;
}

/* `a` runs before `b`: (deadline, start order). */
static bool runs_before(const entry_t *a, const entry_t *b) {
  return a->deadline < b->deadline || (a->deadline == b->deadline && a->order < b->order);
}

/* ---- the model's bookkeeping ---------------------------------------------- */

static void arm(entry_t *e, uint64_t timeout) {
  e->pending = true;
  e->deadline = ticks_up(fuzz_add_saturating(m.now, timeout));
  e->order = m.started++;
  e->call = m.call; /* callbacks run only inside advance calls */
  e->pass = m.pass;
  m.active++;
}

static void disarm(entry_t *e) {
  e->pending = false;
  m.active--;
}

static void check_stats(void) {
  uvtw_stats_t s;
  uvtw_wheel_stats(m.wheel, &s);
  CHECK(s.started == m.started,
        "stats: started counts starts, arming agains, re-arms, tasks taken in or let go of");
  CHECK(s.stopped == m.stopped,
        "stats: stopped counts stops of active timers, restarts, tasks let go of after a cancel");
  CHECK(s.fired == m.fired, "stats: fired counts the callbacks run with status 0");
  CHECK(s.active == m.active, "stats: active counts armed timers and pending tasks taken in");
}

/* A deadline (ticks) that saturates: it never fires. */
static bool past_the_end(uint64_t deadline) {
  return ms_of(deadline) == UINT64_MAX;
}

/* Timer or task i's entry if it is in the wheel, else NULL; *fires: it is
 * pending (a cancelled task stays in the wheel until the loop lets go of
 * it). */
static const entry_t *in_wheel(int i, bool *fires) {
  if (i < TIMERS) {
    *fires = true;
    return m.timers[i].entry.pending ? &m.timers[i].entry : NULL;
  }
  const task_slot_t *k = &m.tasks[i - TIMERS];
  *fires = k->state == TASK_IN_WHEEL;
  return *fires || k->state == TASK_CANCELLED_IN_WHEEL ? &k->entry : NULL;
}

/* The earliest deadline in the wheel, UINT64_MAX if none (only among the
 * pending entries that can fire, if `fireable`); *any: one is there. */
static uint64_t earliest_of(bool *any, bool fireable) {
  uint64_t first = UINT64_MAX;
  *any = false;
  for (int i = 0; i < TIMERS + TASKS; i++) {
    bool fires;
    const entry_t *e = in_wheel(i, &fires);
    if (e == NULL || (fireable && !fires))
      continue;
    *any = true;
    if (!(fireable && past_the_end(e->deadline)) && e->deadline < first)
      first = e->deadline;
  }
  return first;
}

static uint64_t earliest(bool *any) {
  return earliest_of(any, false);
}

static void check_queries(void) {
  CHECK(uvtw_wheel_now(m.wheel) == m.now, "uvtw_wheel_now is the model's time");
  bool any;
  uint64_t first = earliest(&any);
  int64_t want = -1;
  if (any && first == UINT64_MAX)
    want = INT64_MAX;
  else if (any)
    want = ms_of(first) <= m.now                        ? 0
           : ms_of(first) - m.now > (uint64_t)INT64_MAX ? INT64_MAX
                                                        : (int64_t)(ms_of(first) - m.now);
  CHECK(uvtw_wheel_next_due(m.wheel) == want,
        "uvtw_wheel_next_due: the earliest deadline's distance in the wheel, queued tasks aside");
  for (int i = 0; i < TIMERS; i++) {
    timer_slot_t *t = &m.timers[i];
    if (t->timer == NULL)
      continue;
    uint64_t due =
        t->entry.pending && ms_of(t->entry.deadline) > m.now ? ms_of(t->entry.deadline) - m.now : 0;
    CHECK(!uvtw_timer_is_active(t->timer) == !t->entry.pending, "is_active: the timer is armed");
    CHECK(uvtw_timer_get_due_in(t->timer) == due,
          "get_due_in: the deadline's distance, 0 if inactive");
    CHECK(uvtw_timer_get_repeat(t->timer) == t->repeat, "get_repeat: the repeat last set");
    CHECK(!uvtw_timer_has_ref(t->timer) == !t->referenced, "has_ref: the last ref or unref");
  }
}

/* ---- tasks: the queue and the take-in ------------------------------------- */

/* The slot is free once its task has ended and its ticket is released. */
static void task_settle_slot(task_slot_t *k) {
  bool ended = k->state == TASK_CANCELLED || k->state == TASK_FIRED || k->state == TASK_CLOSED;
  if (ended && k->ticket == NULL)
    k->state = TASK_FREE;
}

/* The loop lets go of a cancelled task: stopped counts it, its place under
 * max_pending is free. */
static void let_go(task_slot_t *k) {
  k->state = TASK_CANCELLED;
  m.stopped++;
  m.tasks_pending--;
  task_settle_slot(k);
}

static task_slot_t *first_queued(void) {
  task_slot_t *first = NULL;
  for (int i = 0; i < TASKS; i++) {
    task_slot_t *k = &m.tasks[i];
    bool queued = k->state == TASK_QUEUED || k->state == TASK_CANCELLED_QUEUED;
    if (queued && (first == NULL || k->queued < first->queued))
      first = k;
  }
  return first;
}

/* The loop takes the queue in, at the manual wheel's time: it lets go of
 * the tasks cancelled in the wheel (their cancel's message), then takes the
 * queued tasks in queue order, filing each at the time plus its timeout, or
 * letting go of it if it was cancelled (counted in started too). */
static void take_in(void) {
  for (int i = 0; i < TASKS; i++)
    if (m.tasks[i].state == TASK_CANCELLED_IN_WHEEL)
      let_go(&m.tasks[i]);
  task_slot_t *k;
  while ((k = first_queued()) != NULL) {
    if (k->state == TASK_CANCELLED_QUEUED) {
      m.started++;
      let_go(k);
    } else {
      k->state = TASK_IN_WHEEL;
      arm(&k->entry, k->timeout);
    }
  }
}

/* A callback with status 0 for `e`: pending, at the pass the contract
 * names, after every callback before it in (deadline, order). A callback
 * of a later pass means the pass before ended, with a take-in. A cancelled
 * task that this pass reached before `e` has been let go of. */
static void check_fire(const entry_t *e) {
  CHECK(e->pending, "exactly once: a callback runs only for a pending entry");
  CHECK(m.call != 0 && !m.closing,
        "callbacks run only inside an advance call, never after the close");
  uint64_t at = run_tick(e);
  if (m.next_only) {
    CHECK(e->call != m.call, "advance_next: an entry made due in its pass waits");
    at = m.pass;
    CHECK(e->deadline <= at, "advance_next: only entries due at its one pass run");
  } else if (at != m.pass) {
    take_in(); /* at the end of the pass before */
  }
  for (int i = 0; i < TASKS; i++) {
    task_slot_t *k = &m.tasks[i];
    if (k->state == TASK_CANCELLED_IN_WHEEL && run_tick(&k->entry) == at &&
        runs_before(&k->entry, e))
      let_go(k);
  }
  uint64_t now = uvtw_wheel_now(m.wheel);
  CHECK(!past_the_end(e->deadline), "a deadline past the end of time never fires");
  CHECK(now >= ms_of(e->deadline), "never early");
  CHECK(now == max_u64(m.call_start_ms, ms_of(at)),
        "on time: the pass runs at the deadline, the call's start, or the tick after the pass that "
        "made it due");
  CHECK(!m.fired_any || e->deadline > m.last_deadline ||
            (e->deadline == m.last_deadline && e->order > m.last_order),
        "order: (deadline, start order) grows from callback to callback");
  m.fired_any = true;
  m.last_deadline = e->deadline;
  m.last_order = e->order;
  m.now = now;
  m.pass = at;
  m.fired++;
  m.callbacks++;
}

/* ---- operations -------------------------------------------------------------- */

static void run_ops(int count);
static void check_all(void);
static void loop_op(unsigned kind);
static void loop_ops(void);

static uint64_t timeout_from(fuzz_input_t *in) {
  switch (fuzz_byte(in) % 8) {
  case 0:
    return 0;
  case 1: /* UINT64_MAX, or close to it */
    return UINT64_MAX - (FUZZ_API_PAST_THE_END ? fuzz_byte(in) : 0);
  case 2:
    return m.tick * (fuzz_byte(in) % 4); /* on the tick */
  case 3:
    return FUZZ_API_PAST_THE_END ? fuzz_magnitude(in) : fuzz_magnitude(in) % NEAR_ZERO;
  default:
    return fuzz_byte(in) % 32;
  }
}

static void on_timer(uvtw_timer_t *timer);

static void timer_new(timer_slot_t *t) {
  if (m.closing || t->entry.pending)
    return;
  if (t->timer == NULL) {
    t->timer = malloc(sizeof *t->timer);
    CHECK(t->timer != NULL, "memory for a timer");
  }
  uvtw_timer_init(m.wheel, t->timer);
  t->timer->data = t;
  t->started = false;
  t->referenced = true;
  t->repeat = 0;
  CHECK(!uvtw_timer_is_active(t->timer), "a timer is inactive after init");
}

/* A start or an arming again() that returned 0. */
static void timer_started(timer_slot_t *t, uint64_t timeout, uint64_t repeat) {
  if (t->entry.pending) {
    m.stopped++; /* a restart */
    disarm(&t->entry);
  }
  t->started = true;
  t->repeat = repeat;
  arm(&t->entry, timeout);
}

static void timer_start(timer_slot_t *t, uint64_t timeout, uint64_t repeat) {
  int r = uvtw_timer_start(t->timer, on_timer, timeout, repeat);
  if (m.closing) {
    CHECK(r == UV_ECANCELED, "start on a closing wheel: UV_ECANCELED");
    return;
  }
  CHECK(r == 0, "start: 0");
  timer_started(t, timeout, repeat);
}

static void timer_stop(timer_slot_t *t) {
  CHECK(uvtw_timer_stop(t->timer) == 0, "stop: 0");
  if (t->entry.pending) {
    m.stopped++;
    disarm(&t->entry);
  }
}

static void timer_again(timer_slot_t *t) {
  if (!FUZZ_API_AGAIN_REPEAT_0 && t->started && t->repeat == 0)
    return;
  int r = uvtw_timer_again(t->timer);
  if (!t->started)
    CHECK(r == UV_EINVAL, "again on a timer never started: UV_EINVAL");
  else if (m.closing)
    CHECK(r == UV_ECANCELED, "again on a closing wheel: UV_ECANCELED");
  else if (t->repeat == 0)
    CHECK(r == 0, "again with repeat 0: 0, and nothing changes");
  else {
    CHECK(r == 0, "again with a repeat: 0, a restart");
    timer_started(t, t->repeat, t->repeat);
  }
}

static void timer_free(timer_slot_t *t) {
  timer_stop(t);
  free(t->timer);
  t->timer = NULL;
}

static void on_task(void *arg, int status);

static task_slot_t *free_task_slot(void) {
  for (int i = 0; i < TASKS; i++)
    if (m.tasks[i].state == TASK_FREE)
      return &m.tasks[i];
  return NULL;
}

/* A schedule queues the task: it holds its place under max_pending from
 * the call on, and enters the wheel at the next take-in. */
static void task_schedule(uint64_t timeout, bool with_ticket) {
  task_slot_t *k = free_task_slot();
  if (k == NULL)
    return;
  uvtw_ticket_t *ticket = (uvtw_ticket_t *)(void *)&m; /* no ticket has this address */
  int r = uvtw_schedule(m.wheel, timeout, on_task, k, with_ticket ? &ticket : NULL);
  int want = m.closing                                                ? UV_ECANCELED
             : m.max_pending != 0 && m.tasks_pending >= m.max_pending ? UV_ENOBUFS
                                                                      : 0;
  CHECK(r == want, "schedule: 0, UV_ECANCELED once closing, UV_ENOBUFS past max_pending");
  if (r != 0) {
    CHECK(ticket == (uvtw_ticket_t *)(void *)&m, "a failed schedule leaves *ticket untouched");
    return;
  }
  k->state = TASK_QUEUED;
  k->ticket = with_ticket ? ticket : NULL;
  k->timeout = timeout;
  k->queued = m.scheduled++;
  m.tasks_pending++;
}

static void task_cancel(task_slot_t *k) {
  if (k->ticket == NULL)
    return;
  int r = uvtw_ticket_cancel(k->ticket);
  switch (k->state) {
  case TASK_QUEUED:
    CHECK(r == 0, "cancel of a queued task: 0");
    k->state = TASK_CANCELLED_QUEUED; /* let go of at the take-in */
    break;
  case TASK_IN_WHEEL:
    CHECK(r == 0, "cancel of a pending task: 0");
    k->state = TASK_CANCELLED_IN_WHEEL; /* inactive now, let go of later */
    disarm(&k->entry);
    break;
  case TASK_CANCELLED_QUEUED:
  case TASK_CANCELLED_IN_WHEEL:
  case TASK_CANCELLED:
    CHECK(r == 0, "cancel again after a won cancel: 0");
    break;
  default:
    CHECK(r == UV_EALREADY, "cancel after the callback: UV_EALREADY");
    break;
  }
}

static void task_release(task_slot_t *k) {
  if (k->ticket == NULL)
    return;
  uvtw_ticket_release(k->ticket);
  k->ticket = NULL;
  task_settle_slot(k);
}

/* Why an advance must fail: inside a callback, or on a closing wheel. */
static int advance_refusal(void) {
  /* Inside a callback UV_EBUSY, unless the wheel is closing (include/uvtw.h). */
  bool busy = m.call != 0 && !m.closing;
  return busy ? UV_EBUSY : UV_ECANCELED;
}

static void advance_refused(uint64_t ms) {
  int r = uvtw_wheel_advance(m.wheel, ms);
  CHECK(r == advance_refusal(),
        "advance inside a callback: UV_EBUSY; on a closing wheel: UV_ECANCELED");
}

static void close_cb(uvtw_wheel_t *wheel, void *arg) {
  CHECK(wheel == m.wheel && arg == &m, "the close callback gets its wheel and argument");
  m.close_callbacks++;
  uvtw_timer_t timer;
  uvtw_timer_init(wheel, &timer);
  CHECK(uvtw_timer_start(&timer, on_timer, 0, 0) == UV_ECANCELED,
        "start inside the close callback: UV_ECANCELED");
  uvtw_ticket_t *ticket = NULL;
  CHECK(uvtw_schedule(wheel, 0, on_task, NULL, &ticket) == UV_ECANCELED && ticket == NULL,
        "schedule inside the close callback: UV_ECANCELED, *ticket untouched");
}

static void wheel_close(void) {
  bool again = m.closing;
  if (!again) {
    m.closing = true;
    m.closing_in_call = true;
    m.close_order_any = false;
    for (int i = 0; i < TIMERS; i++)
      if (m.timers[i].entry.pending)
        disarm(&m.timers[i].entry); /* inactive, not stopped */
  }
  uvtw_wheel_close(m.wheel, close_cb, &m);
  if (again)
    return;
  m.closing_in_call = false;
  /* The close let go of every cancelled task, the queued ones counted in
   * started too. */
  for (int i = 0; i < TASKS; i++) {
    task_slot_t *k = &m.tasks[i];
    CHECK(k->state != TASK_QUEUED && k->state != TASK_IN_WHEEL,
          "the close ends every pending task");
    if (k->state == TASK_CANCELLED_QUEUED)
      m.started++;
    if (k->state == TASK_CANCELLED_QUEUED || k->state == TASK_CANCELLED_IN_WHEEL)
      let_go(k);
  }
  CHECK(m.active == 0, "nothing is active after the close");
  check_stats();
}

/* Runs an advance call (advance_next if `next_only`) and checks what it
 * left behind. The call takes the queue in first, and again at the end of
 * each pass. */
static void advance_call(uint64_t ms, bool next_only) {
  if (m.call != 0 || m.closing) {
    if (next_only) {
      int64_t r = uvtw_wheel_advance_next(m.wheel);
      CHECK(r == advance_refusal(),
            "advance_next inside a callback: UV_EBUSY; on a closing wheel: UV_ECANCELED");
    } else {
      advance_refused(ms);
    }
    return;
  }
  take_in();
  bool any;
  uint64_t first = earliest_of(&any, true);
  if (first != UINT64_MAX && past_the_end(first))
    first = UINT64_MAX;
  m.call = ++m.calls;
  m.next_only = next_only;
  m.call_start_ms = m.now;
  m.pass = max_u64(first, m.now / m.tick);
  uint64_t target = fuzz_add_saturating(m.now, ms);
  if (target == UINT64_MAX)
    target--;
  if (next_only) {
    uint64_t moved = max_u64(m.now, ms_of(m.pass)) - m.now;
    int64_t r = uvtw_wheel_advance_next(m.wheel);
    CHECK(first == UINT64_MAX ? r == UV_EAGAIN : r >= 0,
          "advance_next: >= 0, or UV_EAGAIN if nothing pending can fire");
    CHECK(first == UINT64_MAX || moved > INT64_MAX || r == (int64_t)moved,
          "advance_next: the ms the clock moved to the earliest deadline");
    if (!m.closing)
      take_in(); /* at the end of its pass */
    if (first != UINT64_MAX)
      m.now = m.call_start_ms + moved;
  } else {
    CHECK(uvtw_wheel_advance(m.wheel, ms) == 0, "advance: 0");
    /* A callback that closed the wheel ends the call at its pass, without
     * touching the wheel again (a close after a uv_walk frees it there). */
    if (!m.closing) {
      take_in(); /* at the end of the last pass */
      m.now = max_u64(m.now, target);
    }
  }
  /* Left pending: only what the call could not run. */
  for (int i = 0; i < TIMERS + TASKS && !m.closing; i++) {
    bool fires;
    const entry_t *e = in_wheel(i, &fires);
    if (e == NULL)
      continue;
    if (next_only)
      CHECK(e->call == m.call || e->deadline > m.pass || first == UINT64_MAX,
            "advance_next: every entry due at its pass ran");
    else
      CHECK(run_tick(e) > target / m.tick, "advance: every entry due on the way ran");
  }
  m.call = 0;
}

/* Whether an operation may use the manual wheel: not once it is gone. */
static bool wheel_usable(void) {
  return m.close_callbacks == 0;
}

/* One operation read from the input. */
static void run_op(void) {
  fuzz_input_t *in = m.in;
  uint8_t op = fuzz_byte(in);
  timer_slot_t *t = &m.timers[fuzz_byte(in) % TIMERS];
  task_slot_t *k = &m.tasks[fuzz_byte(in) % TASKS];
  /* Inside the close, a task's callback may only try to start things (a
   * timer not yet dropped by the close is still linked then). */
  bool have_timer =
      t->timer != NULL && wheel_usable() && (!m.closing_in_call || op % 16 == 1 || op % 16 == 2);
  switch (op % 16) {
  case 0:
    if (wheel_usable())
      timer_new(t);
    break;
  case 1:
  case 2: {
    uint64_t timeout = timeout_from(in);
    uint64_t repeat = fuzz_byte(in) % 3 == 0 ? timeout_from(in) : 0;
    if (have_timer)
      timer_start(t, timeout, repeat);
    break;
  }
  case 3:
    if (have_timer)
      timer_stop(t);
    break;
  case 4:
    if (have_timer)
      timer_again(t);
    break;
  case 5: {
    uint64_t repeat = timeout_from(in);
    if (have_timer) {
      uvtw_timer_set_repeat(t->timer, repeat);
      t->repeat = repeat;
    }
    break;
  }
  case 6: {
    bool ref = fuzz_byte(in) & 1;
    if (have_timer) {
      (ref ? uvtw_timer_ref : uvtw_timer_unref)(t->timer);
      t->referenced = ref;
    }
    break;
  }
  case 7:
    if (have_timer)
      timer_free(t);
    break;
  case 8:
  case 9: {
    uint64_t timeout = timeout_from(in);
    bool with_ticket = fuzz_byte(in) % 4 != 0;
    if (wheel_usable())
      task_schedule(timeout, with_ticket);
    break;
  }
  case 10:
    task_cancel(k);
    break;
  case 11:
    task_release(k);
    break;
  case 12: {
    uint64_t ms = fuzz_byte(in) % 2 ? fuzz_byte(in) : fuzz_magnitude(in);
    if (!FUZZ_API_PAST_THE_END)
      ms %= m.now < NEAR_ZERO ? NEAR_ZERO - m.now : 256;
    if (wheel_usable())
      advance_call(ms, false);
    break;
  }
  case 13:
    if (wheel_usable())
      advance_call(0, true);
    break;
  case 14: {
    bool ref = fuzz_byte(in) & 1;
    if (wheel_usable())
      (ref ? uvtw_wheel_ref : uvtw_wheel_unref)(m.wheel);
    break;
  }
  default: {
    uint8_t which = fuzz_byte(in);
    if (which % 8 == 0 && wheel_usable())
      wheel_close();
    else if (which % 8 != 0)
      loop_op(which / 8u);
    break;
  }
  }
  check_all();
}

/* Actions inside a callback: up to three operations. */
static void run_ops(int count) {
  for (int i = 0; i < count && fuzz_more(m.in); i++)
    run_op();
}

static void on_timer(uvtw_timer_t *timer) {
  timer_slot_t *t = timer->data;
  CHECK(t >= m.timers && t < m.timers + TIMERS && t->timer == timer,
        "a timer callback gets a timer of the wheel, not a freed one");
  entry_t *e = &t->entry;
  check_fire(e);
  disarm(e);
  if (t->repeat != 0)
    arm(e, t->repeat); /* re-armed before the callback */
  CHECK(!uvtw_timer_is_active(timer) == !e->pending,
        "inside its callback, a timer is active exactly if it repeats");
  check_stats();
  if (m.callbacks > FIRE_BUDGET) {
    timer_stop(t);
    return;
  }
  m.depth++;
  run_ops(fuzz_byte(m.in) % 4);
  m.depth--;
}

static void on_task(void *arg, int status) {
  task_slot_t *k = arg;
  CHECK(k >= m.tasks && k < m.tasks + TASKS, "a task's callback gets its argument");
  if (status == 0) {
    if (k->state == TASK_QUEUED && m.call != 0) {
      CHECK(!m.next_only, "advance_next: a task queued in its pass waits for the next take-in");
      take_in(); /* the pass before ended with the take-in that filed it */
    }
    CHECK(k->state == TASK_IN_WHEEL,
          "a task's callback runs once, for a pending task in the wheel");
    check_fire(&k->entry);
    disarm(&k->entry);
    k->state = TASK_FIRED;
  } else {
    CHECK(status == UV_ECANCELED && m.closing_in_call,
          "a task ends with UV_ECANCELED only inside the close");
    CHECK(k->state == TASK_QUEUED || k->state == TASK_IN_WHEEL,
          "a task's callback runs once, for a pending task");
    for (int i = 0; i < TIMERS && FUZZ_API_CLOSE_TIMERS_FIRST; i++)
      CHECK(m.timers[i].timer == NULL || !uvtw_timer_is_active(m.timers[i].timer),
            "inside the close, every timer is inactive when tasks end with UV_ECANCELED");
    /* The queued tasks (stage 0) in queue order, then those in the wheel
     * (stage 1) in (deadline, start order). */
    bool in = k->state == TASK_IN_WHEEL;
    uint64_t stage = in, deadline = in ? k->entry.deadline : 0;
    uint64_t order = in ? k->entry.order : k->queued;
    CHECK(!m.close_order_any || stage > m.close_stage ||
              (stage == m.close_stage && (deadline > m.close_deadline ||
                                          (deadline == m.close_deadline && order > m.close_order))),
          "the close ends the queued tasks first, in queue order, then those in the wheel in "
          "(deadline, start order)");
    m.close_order_any = true;
    m.close_stage = stage;
    m.close_deadline = deadline;
    m.close_order = order;
    if (in)
      disarm(&k->entry);
    k->state = TASK_CLOSED;
    m.callbacks++;
  }
  m.tasks_pending--;
  task_settle_slot(k);
  if (m.callbacks <= FIRE_BUDGET) {
    m.depth++;
    run_ops(fuzz_byte(m.in) % 3);
    m.depth--;
  }
}

/* ---- the loop wheel ------------------------------------------------------------ */

static void on_loop_timer(uvtw_timer_t *timer);

/* A start or an arming again() that returned 0. */
static void loop_started(loop_timer_t *t, uint64_t timeout, uint64_t repeat) {
  if (t->pending) {
    m.loop_stopped++; /* a restart */
    m.loop_active--;
  }
  t->pending = t->started = true;
  t->repeat = repeat;
  t->deadline = uv_now(&m.loop) + timeout;
  m.loop_started++;
  m.loop_active++;
}

static void loop_start(loop_timer_t *t, uint64_t timeout, uint64_t repeat) {
  CHECK(uvtw_timer_start(&t->timer, on_loop_timer, timeout, repeat) == 0,
        "start on the loop's clock: 0");
  loop_started(t, timeout, repeat);
}

static void loop_stop(loop_timer_t *t) {
  CHECK(uvtw_timer_stop(&t->timer) == 0, "stop on the loop's clock: 0");
  if (t->pending) {
    m.loop_stopped++;
    m.loop_active--;
    t->pending = false;
  }
}

static void loop_again(loop_timer_t *t) {
  int r = uvtw_timer_again(&t->timer);
  CHECK(r == (t->started ? 0 : UV_EINVAL), "again: 0, UV_EINVAL on a timer never started");
  if (t->started && t->repeat != 0)
    loop_started(t, t->repeat, t->repeat);
}

/* Counters and queries of the loop wheel, and its invariants outside its
 * callbacks. */
static void check_loop_wheel(void) {
  uvtw_stats_t s;
  uvtw_wheel_stats(m.loop_wheel, &s);
  CHECK(s.started == m.loop_started, "loop's clock: started counts starts, restarts, re-arms");
  CHECK(s.stopped == m.loop_stopped,
        "loop's clock: stopped counts stops of active timers, restarts");
  CHECK(s.fired == m.loop_fired, "loop's clock: fired counts the callbacks");
  CHECK(s.active == m.loop_active, "loop's clock: active counts the armed timers");
  uint64_t now = uv_now(&m.loop);
  CHECK(uvtw_wheel_now(m.loop_wheel) == now, "loop's clock: uvtw_wheel_now is uv_now");
  for (int i = 0; i < LOOP_TIMERS; i++) {
    loop_timer_t *t = &m.loop_timers[i];
    uint64_t due = t->pending && t->deadline > now ? t->deadline - now : 0;
    CHECK(!uvtw_timer_is_active(&t->timer) == !t->pending,
          "loop's clock: is_active: the timer is armed");
    CHECK(uvtw_timer_get_due_in(&t->timer) == due,
          "loop's clock: get_due_in: the deadline's distance");
    CHECK(!uvtw_timer_has_ref(&t->timer) == !t->referenced,
          "loop's clock: has_ref: the last ref or unref");
  }
  if (!m.in_loop_wheel_cb)
    check_invariants(m.loop_wheel, "loop's clock");
}

/* After every operation: the manual wheel's queries and counters (not
 * inside the close, nor once it is gone) and its invariants (only outside
 * its callbacks), then the loop wheel's. */
static void check_all(void) {
  if (wheel_usable() && !m.closing_in_call) {
    check_queries();
    check_stats();
    if (m.call == 0)
      check_invariants(m.wheel, "manual");
  }
  check_loop_wheel();
}

/* One iteration of the loop: the loop wheel runs at most one pass (one
 * wakeup). uv_run makes no iteration if nothing keeps the loop alive. */
static void loop_run(void) {
  uvtw_stats_t before, after;
  uvtw_wheel_stats(m.loop_wheel, &before);
  bool iterates = uv_loop_alive(&m.loop) != 0;
  m.runs++;
  m.in_run = true;
  uv_run(&m.loop, UV_RUN_NOWAIT);
  m.in_run = false;
  uvtw_wheel_stats(m.loop_wheel, &after);
  CHECK(after.wakeups - before.wakeups <= (iterates ? 1u : 0u),
        "one pass per loop iteration: at most one wakeup per uv_run(UV_RUN_NOWAIT)");
}

/* The check phase follows the poll phase, in which the manual wheel's
 * uv_async_t took its queue in (before the timer phase from libuv 1.45 on,
 * after it before). */
static void on_check(uv_check_t *handle) {
  (void)handle;
  take_in();
}

static void on_twin(uv_timer_t *handle) {
  (void)handle;
  CHECK(m.in_run && m.depth == 0, "the uv_timer_t runs inside uv_run");
  m.depth++;
  loop_ops();
  m.depth--;
}

/* An operation on the loop's clock; `kind` from the input. Anywhere but
 * uv_run, which runs only at the top level. */
static void loop_op(unsigned kind) {
  fuzz_input_t *in = m.in;
  loop_timer_t *t = &m.loop_timers[fuzz_byte(in) % LOOP_TIMERS];
  uint8_t arg = fuzz_byte(in);
  switch (kind % 8) {
  case 0:
  case 1:
    loop_start(t, arg % 4, arg & 0x10 ? arg / 4 % 4 : 0);
    break;
  case 2:
    loop_stop(t);
    break;
  case 3:
    loop_again(t);
    break;
  case 4:
    (arg & 1 ? uvtw_timer_ref : uvtw_timer_unref)(&t->timer);
    t->referenced = arg & 1;
    break;
  case 5:
    if (arg & 1)
      uv_timer_start(&m.twin, on_twin, arg / 2 % 4, 0);
    else
      uv_timer_stop(&m.twin);
    break;
  case 6:
    (arg & 1 ? uvtw_wheel_ref : uvtw_wheel_unref)(m.loop_wheel);
    break;
  default:
    if (m.depth == 0)
      loop_run();
    break;
  }
}

/* Actions inside a callback on the loop's clock: up to three operations,
 * each checked: on the loop's clock, or one time in four any operation
 * (the manual wheel's advance then runs its pass inside the timer phase). */
static void loop_ops(void) {
  for (int n = fuzz_byte(m.in) % 4; n > 0 && fuzz_more(m.in); n--) {
    uint8_t kind = fuzz_byte(m.in);
    if (kind % 4 == 0) {
      run_op();
    } else {
      loop_op(kind / 4u);
      check_all();
    }
  }
}

static void on_loop_timer(uvtw_timer_t *timer) {
  loop_timer_t *t = timer->data;
  CHECK(t >= m.loop_timers && t < m.loop_timers + LOOP_TIMERS && &t->timer == timer,
        "loop's clock: a callback gets a timer of the wheel");
  CHECK(m.in_run && m.depth == 0, "loop's clock: callbacks run only inside uv_run");
  CHECK(t->pending, "loop's clock: exactly once: a callback runs only for an active timer");
  uint64_t now = uv_now(&m.loop);
  CHECK(now >= t->deadline, "loop's clock: never early");
  CHECK(t->run != m.runs,
        "one pass per loop iteration: a timer runs at most once per uv_run(UV_RUN_NOWAIT)");
  t->run = m.runs;
  m.loop_fired++;
  if (t->repeat != 0) {
    t->deadline = now + t->repeat; /* re-armed before the callback */
    m.loop_started++;
  } else {
    t->pending = false;
    m.loop_active--;
  }
  CHECK(!uvtw_timer_is_active(timer) == !t->pending,
        "loop's clock: inside its callback, a timer is active exactly if it repeats");
  m.depth++;
  m.in_loop_wheel_cb = true;
  loop_ops();
  m.in_loop_wheel_cb = false;
  m.depth--;
}

static void loop_close_cb(uvtw_wheel_t *wheel, void *arg) {
  CHECK(wheel == m.loop_wheel && arg == &m,
        "loop's clock: the close callback gets its wheel and argument");
  m.loop_close_callbacks++;
}

/* ---- one input ------------------------------------------------------------------ */

static uint32_t tick_from(fuzz_input_t *in) {
  switch (fuzz_byte(in) % 4) {
  case 0:
    return 0; /* the default: 1 ms */
  case 1:
    return 1;
  case 2:
    return 2 + fuzz_byte(in) % 15;
  default:
    return 1 + (uint32_t)fuzz_uint(in, 2);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_input_t in = {data, size, 0};
  memset(&m, 0, sizeof m);
  m.in = &in;
  uvtw_options_t options = {.manual_clock = 1};
  options.tick_ms = tick_from(&in);
  options.max_pending = fuzz_byte(&in) % 4 == 0 ? fuzz_byte(&in) % 5 : 0;
  m.tick = options.tick_ms > 1 ? options.tick_ms : 1;
  m.max_pending = options.max_pending;
  CHECK(uv_loop_init(&m.loop) == 0, "a loop");
  CHECK(uvtw_wheel_new(&m.loop, &options, &m.wheel) == 0, "a wheel with a manual clock");
  CHECK(uvtw_wheel_new(&m.loop, NULL, &m.loop_wheel) == 0, "a wheel on the loop's clock");
  CHECK(uv_timer_init(&m.loop, &m.twin) == 0, "a uv_timer_t");
  CHECK(uv_check_init(&m.loop, &m.check) == 0 && uv_check_start(&m.check, on_check) == 0,
        "a uv_check_t");
  uv_unref((uv_handle_t *)&m.check);
  for (int i = 0; i < LOOP_TIMERS; i++) {
    uvtw_timer_init(m.loop_wheel, &m.loop_timers[i].timer);
    m.loop_timers[i].timer.data = &m.loop_timers[i];
    m.loop_timers[i].referenced = true;
  }
  /* The clock starts at uv_now(); moved to a multiple of 2^32 ticks, plus
   * an offset the input says, the run repeats exactly. */
  uint64_t align = m.tick << 32;
  uint64_t start = uvtw_wheel_now(m.wheel);
  CHECK(uvtw_wheel_advance(m.wheel, align - start % align + fuzz_uint(&in, 2)) == 0,
        "advance of an empty wheel");
  m.now = uvtw_wheel_now(m.wheel);
  check_all();

  while (fuzz_more(&in))
    run_op();

  if (!m.closing)
    wheel_close();
  uvtw_wheel_close(m.loop_wheel, loop_close_cb, &m);
  uv_close((uv_handle_t *)&m.twin, NULL);
  uv_close((uv_handle_t *)&m.check, NULL);
  uv_run(&m.loop, UV_RUN_DEFAULT);
  CHECK(m.close_callbacks == 1, "the close callback runs once");
  CHECK(m.loop_close_callbacks == 1, "loop's clock: the close callback runs once");
  /* Tickets outlive the wheel: cancel, then release. */
  for (int i = 0; i < TASKS; i++) {
    task_cancel(&m.tasks[i]);
    task_release(&m.tasks[i]);
  }
  for (int i = 0; i < TIMERS; i++)
    free(m.timers[i].timer);
  CHECK(uv_loop_close(&m.loop) == 0, "the wheels closed everything they opened on the loop");
  return 0;
}
