/* Fuzz target: the public API (include/uvtw.h) on a wheel with a manual
 * clock, against a model of its contract.
 *
 * The input chooses the wheel's tick (1 ms or larger) and task limit, then
 * is a program of operations, run at the top level and, as actions, inside
 * the callbacks it makes run: timers are made (malloc), started, stopped,
 * restarted (start, again), given a repeat, referenced and unreferenced,
 * and freed (stopped first if active, inside their own callback too);
 * loop-thread tasks are scheduled with or without a ticket, cancelled and
 * released; the clock moves with uvtw_wheel_advance and
 * uvtw_wheel_advance_next; the wheel closes, at the top level or inside a
 * callback, and operations go on after the close. At the end the wheel is
 * closed if it is not, the loop runs until the close callback, and the
 * remaining tickets are cancelled and released after the wheel is gone.
 *
 * The model keeps every timer and task with its deadline in ticks and its
 * start order, and checks, at every callback and after every operation:
 *   - exactly once: a callback runs only for a pending entry, never after
 *     its stop, cancel or the close; every pending task gets UV_ECANCELED
 *     from the close, in (deadline, start order), and timers never run;
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
 * ASan and LSan (in the libFuzzer build) check that nothing is touched
 * after it is freed and that nothing leaks. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "fuzz.h"
#include "uvtw.h"

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

enum task_state { TASK_FREE, TASK_PENDING, TASK_FIRED, TASK_CANCELLED, TASK_CLOSED };

typedef struct task_slot_s {
  enum task_state state;
  uvtw_ticket_t *ticket; /* NULL: fire-and-forget, or released */
  entry_t entry;
} task_slot_t;

typedef struct model_s {
  fuzz_input_t *in;
  uv_loop_t loop;
  uvtw_wheel_t *wheel;
  uint64_t tick;
  uint32_t max_pending;
  uint64_t now; /* ms */
  timer_slot_t timers[TIMERS];
  task_slot_t tasks[TASKS];
  /* The counters of uvtw_stats_t that the calls define. */
  uint64_t started, stopped, fired, active, tasks_pending;
  /* The advance call under way (0: none), its starting time, and the pass
   * whose callbacks run. */
  uint64_t call, calls;
  bool next_only; /* the call is uvtw_wheel_advance_next */
  uint64_t call_start_ms, pass;
  /* The last callback's (deadline, order): they only grow. */
  bool fired_any;
  uint64_t last_deadline, last_order;
  bool closing, closing_in_call;
  bool close_order_any;
  uint64_t close_deadline, close_order;
  int close_callbacks;
  int callbacks;
} model_t;

static model_t m;

#define CHECK(cond, what) FUZZ_CHECK(m.in, cond, what)

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
  CHECK(s.started == m.started, "stats: started counts starts, arming agains, re-arms, tasks");
  CHECK(s.stopped == m.stopped, "stats: stopped counts stops of active timers, restarts, won cancels");
  CHECK(s.fired == m.fired, "stats: fired counts the callbacks run with status 0");
  CHECK(s.active == m.active, "stats: active counts armed timers and pending tasks");
}

/* A deadline (ticks) that saturates: it never fires. */
static bool past_the_end(uint64_t deadline) {
  return ms_of(deadline) == UINT64_MAX;
}

/* The earliest pending entry's deadline, UINT64_MAX if none (only among
 * those that can fire, if `fireable`); *any: one is pending. */
static uint64_t earliest_of(bool *any, bool fireable) {
  uint64_t first = UINT64_MAX;
  *any = false;
  for (int i = 0; i < TIMERS + TASKS; i++) {
    const entry_t *e = i < TIMERS ? &m.timers[i].entry : &m.tasks[i - TIMERS].entry;
    bool pending = i < TIMERS ? e->pending : m.tasks[i - TIMERS].state == TASK_PENDING;
    if (!pending)
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
    want = ms_of(first) <= m.now                             ? 0
           : ms_of(first) - m.now > (uint64_t)INT64_MAX ? INT64_MAX
                                                          : (int64_t)(ms_of(first) - m.now);
  CHECK(uvtw_wheel_next_due(m.wheel) == want, "uvtw_wheel_next_due: the earliest deadline's distance");
  for (int i = 0; i < TIMERS; i++) {
    timer_slot_t *t = &m.timers[i];
    if (t->timer == NULL)
      continue;
    uint64_t due = t->entry.pending && ms_of(t->entry.deadline) > m.now
                       ? ms_of(t->entry.deadline) - m.now
                       : 0;
    CHECK(!uvtw_timer_is_active(t->timer) == !t->entry.pending, "is_active: the timer is armed");
    CHECK(uvtw_timer_get_due_in(t->timer) == due, "get_due_in: the deadline's distance, 0 if inactive");
    CHECK(uvtw_timer_get_repeat(t->timer) == t->repeat, "get_repeat: the repeat last set");
    CHECK(!uvtw_timer_has_ref(t->timer) == !t->referenced, "has_ref: the last ref or unref");
  }
}

/* A callback with status 0 for `e`: pending, at the pass the contract
 * names, after every callback before it in (deadline, order). */
static void check_fire(const entry_t *e) {
  CHECK(e->pending, "exactly once: a callback runs only for a pending entry");
  CHECK(m.call != 0 && !m.closing, "callbacks run only inside an advance call, never after the close");
  uint64_t at = run_tick(e);
  if (m.next_only) {
    CHECK(e->call != m.call, "advance_next: an entry made due in its pass waits");
    at = m.pass;
    CHECK(e->deadline <= at, "advance_next: only entries due at its one pass run");
  }
  uint64_t now = uvtw_wheel_now(m.wheel);
  CHECK(!past_the_end(e->deadline), "a deadline past the end of time never fires");
  CHECK(now >= ms_of(e->deadline), "never early");
  CHECK(now == max_u64(m.call_start_ms, ms_of(at)),
        "on time: the pass runs at the deadline, the call's start, or the tick after the pass that made it due");
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

static void task_schedule(uint64_t timeout, bool with_ticket) {
  task_slot_t *k = free_task_slot();
  if (k == NULL)
    return;
  uvtw_ticket_t *ticket = (uvtw_ticket_t *)(void *)&m; /* no ticket has this address */
  int r = uvtw_schedule(m.wheel, timeout, on_task, k, with_ticket ? &ticket : NULL);
  int want = m.closing                                               ? UV_ECANCELED
             : m.max_pending != 0 && m.tasks_pending >= m.max_pending ? UV_ENOBUFS
                                                                       : 0;
  CHECK(r == want, "schedule: 0, UV_ECANCELED once closing, UV_ENOBUFS past max_pending");
  if (r != 0) {
    CHECK(ticket == (uvtw_ticket_t *)(void *)&m, "a failed schedule leaves *ticket untouched");
    return;
  }
  k->state = TASK_PENDING;
  k->ticket = with_ticket ? ticket : NULL;
  arm(&k->entry, timeout);
  m.tasks_pending++;
}

/* The slot is free once its task has ended and its ticket is released. */
static void task_settle_slot(task_slot_t *k) {
  if (k->state != TASK_PENDING && k->ticket == NULL)
    k->state = TASK_FREE;
}

static void task_cancel(task_slot_t *k) {
  if (k->ticket == NULL)
    return;
  int r = uvtw_ticket_cancel(k->ticket);
  if (k->state == TASK_PENDING) {
    CHECK(r == 0, "cancel of a pending task: 0");
    k->state = TASK_CANCELLED;
    disarm(&k->entry);
    m.tasks_pending--;
    m.stopped++;
  } else if (k->state == TASK_CANCELLED) {
    CHECK(r == 0, "cancel again after a won cancel: 0");
  } else {
    CHECK(r == UV_EALREADY, "cancel after the callback: UV_EALREADY");
  }
}

static void task_release(task_slot_t *k) {
  if (k->ticket == NULL)
    return;
  uvtw_ticket_release(k->ticket);
  k->ticket = NULL;
  task_settle_slot(k);
}

/* An advance that must fail: inside a callback, or on a closing wheel. */
static void advance_refused(uint64_t ms) {
  int r = uvtw_wheel_advance(m.wheel, ms);
  CHECK(r == (m.call != 0 ? UV_EBUSY : UV_ECANCELED),
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
  for (int i = 0; i < TASKS; i++)
    CHECK(m.tasks[i].state != TASK_PENDING, "the close ends every pending task");
  CHECK(m.active == 0, "nothing is active after the close");
  check_stats();
}

/* Runs an advance call (advance_next if `next_only`) and checks what it
 * left behind. */
static void advance_call(uint64_t ms, bool next_only) {
  if (m.call != 0 || m.closing) {
    if (next_only) {
      int64_t r = uvtw_wheel_advance_next(m.wheel);
      CHECK(r == (m.call != 0 ? UV_EBUSY : UV_ECANCELED),
            "advance_next inside a callback: UV_EBUSY; on a closing wheel: UV_ECANCELED");
    } else {
      advance_refused(ms);
    }
    return;
  }
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
    if (first != UINT64_MAX)
      m.now = m.call_start_ms + moved;
  } else {
    CHECK(uvtw_wheel_advance(m.wheel, ms) == 0, "advance: 0");
    m.now = max_u64(m.now, target);
  }
  /* Left pending: only what the call could not run. */
  for (int i = 0; i < TIMERS + TASKS && !m.closing; i++) {
    entry_t *e = i < TIMERS ? &m.timers[i].entry : &m.tasks[i - TIMERS].entry;
    bool pending = i < TIMERS ? e->pending : m.tasks[i - TIMERS].state == TASK_PENDING;
    if (!pending)
      continue;
    if (next_only)
      CHECK(e->call == m.call || e->deadline > m.pass || first == UINT64_MAX,
            "advance_next: every entry due at its pass ran");
    else
      CHECK(run_tick(e) > target / m.tick, "advance: every entry due on the way ran");
  }
  m.call = 0;
}

/* One operation read from the input. */
static void run_op(void) {
  fuzz_input_t *in = m.in;
  uint8_t op = fuzz_byte(in);
  timer_slot_t *t = &m.timers[fuzz_byte(in) % TIMERS];
  task_slot_t *k = &m.tasks[fuzz_byte(in) % TASKS];
  /* Inside the close, a task's callback may only try to start things (a
   * timer not yet dropped by the close is still linked then). */
  bool have_timer = t->timer != NULL && (!m.closing_in_call || op % 16 == 1 || op % 16 == 2);
  switch (op % 16) {
  case 0:
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
    task_schedule(timeout, fuzz_byte(in) % 4 != 0);
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
    advance_call(ms, false);
    break;
  }
  case 13:
    advance_call(0, true);
    break;
  case 14:
    (fuzz_byte(in) & 1 ? uvtw_wheel_ref : uvtw_wheel_unref)(m.wheel);
    break;
  default:
    if (fuzz_byte(in) % 8 == 0)
      wheel_close();
    break;
  }
  if (!m.closing_in_call) {
    check_queries();
    check_stats();
  }
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
  run_ops(fuzz_byte(m.in) % 4);
}

static void on_task(void *arg, int status) {
  task_slot_t *k = arg;
  CHECK(k >= m.tasks && k < m.tasks + TASKS && k->state == TASK_PENDING,
        "a task's callback runs once, for a pending task");
  if (status == 0) {
    check_fire(&k->entry);
    k->state = TASK_FIRED;
  } else {
    CHECK(status == UV_ECANCELED && m.closing_in_call,
          "a task ends with UV_ECANCELED only inside the close");
    for (int i = 0; i < TIMERS && FUZZ_API_CLOSE_TIMERS_FIRST; i++)
      CHECK(m.timers[i].timer == NULL || !uvtw_timer_is_active(m.timers[i].timer),
            "inside the close, every timer is inactive when tasks end with UV_ECANCELED");
    CHECK(!m.close_order_any || k->entry.deadline > m.close_deadline ||
              (k->entry.deadline == m.close_deadline && k->entry.order > m.close_order),
          "the close ends tasks in (deadline, start order)");
    m.close_order_any = true;
    m.close_deadline = k->entry.deadline;
    m.close_order = k->entry.order;
    k->state = TASK_CLOSED;
    m.callbacks++;
  }
  disarm(&k->entry);
  m.tasks_pending--;
  task_settle_slot(k);
  if (m.callbacks <= FIRE_BUDGET)
    run_ops(fuzz_byte(m.in) % 3);
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
  /* The clock starts at uv_now(); moved to a multiple of 2^32 ticks, plus
   * an offset the input says, the run repeats exactly. */
  uint64_t align = m.tick << 32;
  uint64_t start = uvtw_wheel_now(m.wheel);
  CHECK(uvtw_wheel_advance(m.wheel, align - start % align + fuzz_uint(&in, 2)) == 0,
        "advance of an empty wheel");
  m.now = uvtw_wheel_now(m.wheel);

  while (fuzz_more(&in))
    run_op();

  if (!m.closing)
    wheel_close();
  uv_run(&m.loop, UV_RUN_DEFAULT);
  CHECK(m.close_callbacks == 1, "the close callback runs once");
  /* Tickets outlive the wheel: cancel, then release. */
  for (int i = 0; i < TASKS; i++) {
    task_cancel(&m.tasks[i]);
    task_release(&m.tasks[i]);
  }
  for (int i = 0; i < TIMERS; i++)
    free(m.timers[i].timer);
  CHECK(uv_loop_close(&m.loop) == 0, "the wheel closed everything it opened on the loop");
  return 0;
}
