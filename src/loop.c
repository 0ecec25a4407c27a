/* The libuv glue: the wheel object, loop-thread timers, arming the
 * uv_timer_t, passes, and the manual clock.
 *
 * A timer's life: uvtw_timer_start files its node in the pure wheel
 * (wheel.c) and, if it is now the earliest, arms the wheel's one uv_timer_t
 * to its deadline. When that uv_timer_t fires, on_timer runs a pass:
 * wheel_expire moves every entry due at uv_now() to the expired list, and
 * the pass pops them one by one and runs their callbacks, then takes in the
 * tasks queued meanwhile (tasks.c). After the pass, the uv_timer_t is armed
 * again to the earliest pending deadline.
 *
 * One pass per loop iteration (guarantee 2). The pass collects what is due
 * before it runs any callback, so an entry a callback makes due waits for
 * the next pass, which must come in the next loop iteration, as libuv 1.48
 * and later run a uv_timer_t started in its own timer phase. The arming
 * state (enum arming, internal.h) says what the uv_timer_t is doing, and
 * set_arming is the one place that starts or stops it:
 *
 *   IDLE --file--> TIMER --due--> IN_PASS --end_pass--> TIMER or IDLE (libuv >= 1.48)
 *                    |              ^     \--end_pass--> WAIT --prepare--> TIMER (< 1.48)
 *                    +-> COLLECTED -+
 * and every state goes to CLOSED at uvtw_wheel_close.
 *
 * Two cases need care, told apart by uv_version() at run time (a shared
 * libuv is upgraded under programs):
 *   - COLLECTED: the uv_timer_t is due in the timer phase under way and a
 *     due entry is filed from another callback of that phase (a uv_timer_t's,
 *     or another wheel's). The pass's entries are expired first, so the new
 *     one waits for the next pass like a uv_timer_t started now. On libuv
 *     >= 1.48 the uv_timer_t is due if libuv has collected it (started but
 *     no longer active); before 1.48, if it is due by now and another wheel
 *     of the loop is in its pass, so that the phase is under way.
 *   - WAIT: libuv < 1.48 runs a uv_timer_t started with 0 inside the timer
 *     phase in that same phase. So after a pass there, and for a due entry
 *     filed from another wheel's pass, the uv_timer_t is started no earlier
 *     than the next tick, and a uv_prepare_t, which runs once between two
 *     timer phases, arms it to the earliest deadline for the next iteration.
 *     A timer phase may come first when a new uv_run begins with one (1.44
 *     runs one at the end of UV_RUN_ONCE and at the start of the next call):
 *     the uv_timer_t then only waits another tick.
 *     The wheels of a loop find each other (a ring, made at uvtw_wheel_new)
 *     to tell whether one is in its pass.
 * Everything else follows from using a real uv_timer_t on uv_now(): a
 * wheel timer fires in the loop iteration in which a uv_timer_t started at
 * the same moment with the same timeout fires, and keeps the loop alive
 * exactly as long.
 *
 * Keeping the loop alive: `unrefs` counts pending timers that are
 * unref'd, so the pending entries that are referenced (the other timers,
 * and every task) number wheel.count - unrefs. The uv_timer_t is
 * referenced while the wheel is referenced and that number is not 0;
 * being started whenever something is pending, it then keeps the loop
 * alive exactly when a referenced uv_timer_t would. The uv_async_t is
 * referenced until the loop's first iteration, so that a task scheduled
 * before it keeps the loop alive; the uv_prepare_t never is.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "late.h"

/* The public uvtw_timer_t keeps the wheel's node in a field of its own
 * type, with the same layout. */
_Static_assert(sizeof(((uvtw_timer_t *)0)->node_) == sizeof(wheel_node_t) &&
                   _Alignof(wheel_node_t) <= _Alignof(uvtw_timer_t) &&
                   offsetof(uvtw_timer_t, node_) % _Alignof(wheel_node_t) == 0,
               "uvtw_timer_t.node_ does not match wheel_node_t");

static inline wheel_node_t *node_of(uvtw_timer_t *timer) {
  return (wheel_node_t *)(void *)&timer->node_;
}

static inline const wheel_node_t *const_node_of(const uvtw_timer_t *timer) {
  return (const wheel_node_t *)(const void *)&timer->node_;
}

static inline uvtw_wheel_t *wheel_of(const uvtw_timer_t *timer) {
  return (uvtw_wheel_t *)(timer->wheel_ & ~ENTRY_FLAGS);
}

/* ---- time ---------------------------------------------------------------- */

uint64_t uvtw__clock_ms(const uvtw_wheel_t *w) {
  return w->manual ? w->manual_now : uv_now(w->loop);
}

static inline uint64_t ticks_down(const uvtw_wheel_t *w, uint64_t ms) {
  return ms / w->tick_ms;
}

static inline uint64_t ms_of(const uvtw_wheel_t *w, uint64_t ticks) {
  return ticks > UINT64_MAX / w->tick_ms ? UINT64_MAX : ticks * w->tick_ms;
}

uint64_t uvtw__ticks_up(const uvtw_wheel_t *w, uint64_t ms) {
  if (w->tick_ms == 1 || ms == UINT64_MAX)
    return ms;
  uint64_t ticks = ms / w->tick_ms + (ms % w->tick_ms != 0);
  /* Rounded up to UINT64_MAX ms or past it, a deadline saturates too. */
  return ms_of(w, ticks) == UINT64_MAX ? UINT64_MAX : ticks;
}

static inline uint64_t now_ticks(const uvtw_wheel_t *w) {
  return ticks_down(w, uvtw__clock_ms(w));
}

/* ---- arming the uv_timer_t and keeping the loop alive ------------------- */

static void on_timer(uv_timer_t *handle);
static void on_prepare(uv_prepare_t *handle);

/* Handles closed by the program (a uv_walk) are never touched again. */
static inline bool handle_open(const void *handle) {
  return !uv_is_closing((const uv_handle_t *)handle);
}

static void update_refs(uvtw_wheel_t *w) {
  if (uvtw__closing(w)) /* the handles are closing, or closed by a uv_walk */
    return;
  bool may_keep_alive = w->referenced && !w->manual;
  bool keep_alive = may_keep_alive && w->wheel.count > w->unrefs;
  (keep_alive ? uv_ref : uv_unref)((uv_handle_t *)&w->timer);
  (may_keep_alive && !w->loop_ran ? uv_ref : uv_unref)((uv_handle_t *)&w->async);
}

/* The one place that changes the arming and calls libuv for it. In TIMER
 * and WAIT the uv_timer_t is started for `deadline` while anything is
 * pending; COLLECTED and IN_PASS leave it where libuv has it; otherwise it
 * is stopped. The uv_prepare_t runs in WAIT only. */
static void set_arming(uvtw_wheel_t *w, enum arming to, uint64_t deadline) {
  if (to == ARM_TIMER && w->wheel.count == 0)
    to = ARM_IDLE;
  bool started = (to == ARM_TIMER || to == ARM_WAIT) && w->wheel.count != 0;
  if (started) {
    uint64_t due = ms_of(w, deadline);
    uint64_t now = uv_now(w->loop);
    uv_timer_start(&w->timer, on_timer, due > now ? due - now : 0, 0);
  } else if (to != ARM_COLLECTED && to != ARM_IN_PASS && handle_open(&w->timer)) {
    uv_timer_stop(&w->timer);
  }
  if (to == ARM_WAIT)
    uv_prepare_start(&w->prepare, on_prepare);
  else if (handle_open(&w->prepare))
    uv_prepare_stop(&w->prepare);
  w->arming = to;
  w->armed_at = started ? deadline : 0;
}

/* Another wheel on this loop is running its pass: the timer phase is under
 * way (see WAIT above). */
static bool peer_in_pass(const uvtw_wheel_t *w) {
  for (const uvtw_wheel_t *p = w->peer; p != w; p = p->peer)
    if (p->arming == ARM_IN_PASS && !p->manual) /* a manual pass is no timer phase */
      return true;
  return false;
}

/* The arming after filing an entry, `due` by `now` (ticks) or not, on a
 * wheel that is IDLE or TIMER on the loop's clock (see the top). */
static enum arming arming_for(const uvtw_wheel_t *w, bool due, uint64_t now) {
  if (!due)
    return ARM_TIMER;
  bool collected = w->pass_by_timer ? !uv_is_active((const uv_handle_t *)&w->timer)
                                    : w->armed_at <= now && peer_in_pass(w);
  if (w->arming == ARM_TIMER && collected)
    return ARM_COLLECTED;
  return !w->pass_by_timer && peer_in_pass(w) ? ARM_WAIT : ARM_TIMER;
}

/* After `entry` is filed: the first referenced entry references the
 * handles. */
static void after_file(uvtw_wheel_t *w, const uvtw_timer_t *entry) {
  if (entry->wheel_ & ENTRY_UNREF)
    w->unrefs++;
  else if (w->wheel.count - w->unrefs == 1)
    update_refs(w);
}

/* Once no referenced entry is pending, the handles let go of the loop;
 * once nothing is, the uv_timer_t stops. Out of line, so a stop saves no
 * registers (bench/README.md). */
UVTW_NOINLINE static void release_loop(uvtw_wheel_t *w) {
  update_refs(w);
  enum arming a = w->arming;
  if (w->wheel.count == 0 && (a == ARM_TIMER || a == ARM_COLLECTED || a == ARM_WAIT))
    set_arming(w, a == ARM_WAIT ? ARM_WAIT : ARM_IDLE, 0); /* WAIT keeps its prepare */
}

/* After `entry` is unlinked: updates the counts, and lets go of the loop
 * and stops the uv_timer_t when the last referenced entry, or the last
 * entry, has left. */
static void after_unlink(uvtw_wheel_t *w, const uvtw_timer_t *entry) {
  bool unref = entry->wheel_ & ENTRY_UNREF;
  if (unref)
    w->unrefs--;
  if ((!unref && w->wheel.count == w->unrefs) || w->wheel.count == 0)
    release_loop(w);
}

/* Files `entry` and decides the arming (see the top of this file). A
 * COLLECTED pass's entries are expired before the entry is filed; an empty
 * wheel catches up with the clock, so the entry is filed low. */
void uvtw__entry_add(uvtw_wheel_t *w, uvtw_timer_t *entry, uint64_t deadline) {
  uint64_t now = now_ticks(w);
  bool decides = !w->manual && (w->arming == ARM_IDLE || w->arming == ARM_TIMER);
  enum arming to = decides ? arming_for(w, deadline <= now, now) : w->arming;
  if ((to == ARM_COLLECTED && w->arming != ARM_COLLECTED) || w->wheel.count == 0)
    uvtw__wheel_expire(&w->wheel, now);
  uvtw__wheel_insert(&w->wheel, node_of(entry), deadline);
  after_file(w, entry);
  uint64_t at = node_of(entry)->deadline;
  if (to == ARM_WAIT && at <= now)
    at = now + 1; /* not in the timer phase under way */
  bool starts = (to == ARM_TIMER || to == ARM_WAIT) && !w->manual &&
                (w->wheel.count == 1 || at < w->armed_at);
  if (to != w->arming || starts)
    set_arming(w, to, at);
}

void uvtw__entry_remove(uvtw_wheel_t *w, uvtw_timer_t *entry) {
  uvtw__wheel_remove(&w->wheel, node_of(entry));
  after_unlink(w, entry);
}

/* ---- passes ---------------------------------------------------------------- */

void uvtw__note_fired(uvtw_wheel_t *w, uint64_t deadline) {
  uint64_t now = uvtw__clock_ms(w);
  uint64_t due = ms_of(w, deadline);
  /* A manual clock measures the test's steps, not the loop: 0 ms. */
  uint64_t late = now > due && !w->manual ? now - due : 0;
  w->stats.fired++;
  w->stats.late[uvtw__late_bucket(late)]++;
  w->stats.late_total_ms = uvtw__add_saturating(w->stats.late_total_ms, late);
  if (late > w->stats.late_max_ms)
    w->stats.late_max_ms = late;
}

/* Runs one expired entry's callback. A repeating timer is filed again
 * first, from the clock's now, like uv_timer_t, so it is active inside its
 * callback. A task counts itself (tasks.c), unless it was cancelled. */
static void fire(uvtw_wheel_t *w, uvtw_timer_t *entry) {
  after_unlink(w, entry);
  if (!(entry->wheel_ & ENTRY_TASK)) {
    uvtw__note_fired(w, node_of(entry)->deadline);
    if (entry->repeat_ != 0)
      uvtw__entry_add(w, entry,
                      uvtw__ticks_up(w, uvtw__add_saturating(uvtw__clock_ms(w), entry->repeat_)));
  }
  entry->cb_(entry); /* the entry may be freed from here on */
}

/* Expires everything due at `now` (ticks) unless COLLECTED did, runs the
 * callbacks, then takes in the tasks queued meanwhile, which so keep the
 * loop alive from their call. A callback may close the wheel: then the
 * wheel stays allocated until end_pass. */
static void run_pass(uvtw_wheel_t *w, uint64_t now) {
  wheel_node_t *node;
  if (w->arming != ARM_COLLECTED)
    uvtw__wheel_expire(&w->wheel, now);
  set_arming(w, ARM_IN_PASS, 0);
  while ((node = uvtw__wheel_pop_expired(&w->wheel)) != NULL) {
    /* While this callback runs, the entry after next is fetched, and the
     * next entry's `data` (a task's argument), which its callback most
     * likely reads first. */
    wheel_node_t *next = w->wheel.expired.next; /* the list's head at its end */
    UVTW_PREFETCH(next->next);
    UVTW_PREFETCH((char *)next->next + 64);
    if (next != &w->wheel.expired)
      UVTW_PREFETCH(container_of(next, uvtw_timer_t, node_)->data);
    fire(w, container_of(node, uvtw_timer_t, node_));
  }
  if (!uvtw__closing(w))
    uvtw__tasks_drain(w);
}

/* Once the three handles are closed. */
static void finish_close(uvtw_wheel_t *w) {
  if (w->close_cb != NULL)
    w->close_cb(w, w->close_arg);
  uvtw__tasks_release(w->shared);
  free(w);
}

/* After run_pass: arms the uv_timer_t for the next pass (see the top of
 * this file) and returns true. If a callback closed the wheel, returns
 * false instead, having finished the close if the program had closed the
 * handles (a uv_walk): the wheel may be gone. */
static bool end_pass(uvtw_wheel_t *w) {
  if (uvtw__closing(w)) {
    if (w->handles_closed == 3)
      finish_close(w);
    return false;
  }
  uint64_t next = uvtw__wheel_next_deadline(&w->wheel), floor = now_ticks(w) + 1;
  if (!w->pass_by_timer && next < floor) /* WAIT: not in the timer phase under way */
    next = floor;
  set_arming(w, w->manual ? ARM_IDLE : w->pass_by_timer ? ARM_TIMER : ARM_WAIT, next);
  return true;
}

static void on_timer(uv_timer_t *handle) {
  uvtw_wheel_t *w = container_of(handle, uvtw_wheel_t, timer);
  if (w->arming == ARM_WAIT) { /* a timer phase before the prepare phase (a new uv_run) */
    set_arming(w, ARM_WAIT, now_ticks(w) + 1);
    return;
  }
  uint64_t fired = w->stats.fired;
  w->stats.wakeups++;
  run_pass(w, now_ticks(w));
  w->stats.wasted_wakeups += w->stats.fired == fired;
  end_pass(w);
}

/* libuv < 1.48: the next iteration has begun; the next pass may come. */
static void on_prepare(uv_prepare_t *handle) {
  uvtw_wheel_t *w = container_of(handle, uvtw_wheel_t, prepare);
  set_arming(w, ARM_TIMER, uvtw__wheel_next_deadline(&w->wheel));
}

static void on_async(uv_async_t *handle) {
  uvtw_wheel_t *w = container_of(handle, uvtw_wheel_t, async);
  if (!w->loop_ran) {
    w->loop_ran = true;
    update_refs(w);
  }
  w->stats.remote_batches += uvtw__tasks_drain(w);
}

/* ---- the wheel ----------------------------------------------------------- */

/* uv_walk's callback at uvtw_wheel_new: joins the ring of an open wheel on
 * the loop, known by its uv_async_t, whose `data` is that wheel. */
static void find_peer(uv_handle_t *handle, void *arg) {
  uvtw_wheel_t *w = arg;
  uvtw_wheel_t *p = handle->data;
  if (handle->type != UV_ASYNC || w->peer != w || p == w || !handle_open(handle) ||
      (uintptr_t)p + offsetof(uvtw_wheel_t, async) != (uintptr_t)handle)
    return;
  w->peer = p->peer;
  p->peer = w;
}

static void leave_peers(uvtw_wheel_t *w) {
  uvtw_wheel_t *p = w;
  while (p->peer != w)
    p = p->peer;
  p->peer = w->peer;
  w->peer = w;
}

int uvtw_wheel_new(uv_loop_t *loop, const uvtw_options_t *opts, uvtw_wheel_t **out) {
  uvtw_options_t o = {0};
  if (opts != NULL)
    o = *opts;
  static const uvtw_options_t defaults; /* all zero */
  if (loop == NULL || out == NULL || o.manual_clock > 1 ||
      memcmp(o.reserved, defaults.reserved, sizeof o.reserved) != 0)
    return UV_EINVAL;
  uvtw_wheel_t *w = calloc(1, sizeof *w);
  if (w == NULL)
    return UV_ENOMEM;
  w->loop = loop;
  w->peer = w;
  w->tick_ms = o.tick_ms > 1 ? o.tick_ms : 1;
  w->manual = o.manual_clock != 0;
  w->pass_by_timer = uv_version() >= (1u << 16 | 48u << 8);
  w->referenced = true;
  w->manual_now = uv_now(loop);
  uvtw__wheel_init(&w->wheel, ticks_down(w, w->manual_now));
  int err = uvtw__tasks_open(w, o.max_pending);
  if (err == 0 && (err = uv_async_init(loop, &w->async, on_async)) != 0)
    uvtw__tasks_release(w->shared);
  if (err != 0) {
    free(w);
    return err;
  }
  uv_timer_init(loop, &w->timer);
  uv_prepare_init(loop, &w->prepare);
  uv_unref((uv_handle_t *)&w->prepare);
  w->timer.data = w->async.data = w->prepare.data = w;
  uv_walk(loop, find_peer, w);
  update_refs(w);
  uv_async_send(&w->async); /* the loop's first iteration runs on_async */
  *out = w;
  return 0;
}

static void on_handle_closed(uv_handle_t *handle) {
  uvtw_wheel_t *w = handle->data;
  if (++w->handles_closed == 3)
    finish_close(w);
}

/* Closes a handle of the wheel, unless the program did (a uv_walk that
 * closes every handle): then it is closed already, and its loop may be
 * too, so neither is touched again. */
static void close_handle(uvtw_wheel_t *w, uv_handle_t *handle) {
  if (!handle_open(handle))
    w->handles_closed++;
  else
    uv_close(handle, on_handle_closed);
}

void uvtw_wheel_close(uvtw_wheel_t *w, uvtw_close_cb cb, void *arg) {
  if (w == NULL || uvtw__closing(w))
    return;
  bool in_pass = w->arming == ARM_IN_PASS;
  set_arming(w, ARM_CLOSED, 0);
  leave_peers(w);
  w->close_cb = cb;
  w->close_arg = arg;
  /* Every timer becomes inactive before any task runs with UV_ECANCELED:
   * all entries move to the expired list and the timers leave it; then the
   * queued tasks end, then those in the wheel, in deadline order. */
  uvtw__wheel_expire(&w->wheel, UINT64_MAX);
  wheel_node_t *node = w->wheel.expired.next;
  while (node != &w->wheel.expired) {
    uvtw_timer_t *entry = container_of(node, uvtw_timer_t, node_);
    node = node->next;
    if (!(entry->wheel_ & ENTRY_TASK))
      uvtw__entry_remove(w, entry);
  }
  uvtw__tasks_close(w);
  while ((node = uvtw__wheel_pop_expired(&w->wheel)) != NULL) {
    uvtw_timer_t *task = container_of(node, uvtw_timer_t, node_);
    after_unlink(w, task);
    task->cb_(task); /* closing: UV_ECANCELED */
  }
  close_handle(w, (uv_handle_t *)&w->timer);
  close_handle(w, (uv_handle_t *)&w->async);
  close_handle(w, (uv_handle_t *)&w->prepare);
  /* All three closed by the program: done now, or when the pass ends. */
  if (w->handles_closed == 3 && !in_pass)
    finish_close(w);
}

uv_loop_t *uvtw_wheel_loop(const uvtw_wheel_t *w) {
  return w->loop;
}

void uvtw_wheel_ref(uvtw_wheel_t *w) {
  w->referenced = true;
  update_refs(w);
}

void uvtw_wheel_unref(uvtw_wheel_t *w) {
  w->referenced = false;
  update_refs(w);
}

int64_t uvtw_wheel_next_due(const uvtw_wheel_t *w) {
  if (w->wheel.count == 0)
    return -1;
  uint64_t next = uvtw__wheel_next_deadline_exact(&w->wheel);
  if (next == UINT64_MAX)
    return INT64_MAX;
  uint64_t due = ms_of(w, next);
  uint64_t now = uvtw__clock_ms(w);
  if (due <= now)
    return 0;
  return due - now > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)(due - now);
}

void uvtw_wheel_stats(const uvtw_wheel_t *w, uvtw_stats_t *out) {
  *out = w->stats;
  out->started += w->wheel.next_seq; /* every start, repeat and task filed takes one */
  out->active = w->wheel.count;
  out->cascaded = w->wheel.cascaded;
  uvtw__tasks_stats(w, out);
}

const char *uvtw_version_string(void) {
  return UVTW_VERSION_STRING;
}

/* ---- the manual clock ------------------------------------------------------ */

uint64_t uvtw_wheel_now(const uvtw_wheel_t *w) {
  return uvtw__clock_ms(w);
}

/* Checks that the manual clock may move now, and takes in the queued
 * tasks, whose deadlines count from the wheel's time when taken in. */
static int begin_advance(uvtw_wheel_t *w) {
  if (w == NULL || !w->manual)
    return UV_EINVAL;
  if (w->arming == ARM_IN_PASS)
    return UV_EBUSY;
  if (uvtw__closing(w))
    return UV_ECANCELED;
  uvtw__tasks_drain(w);
  return 0;
}

/* Sets the manual clock to tick `at` (never back) and runs one pass there.
 * False if a callback closed the wheel (it may be gone). */
static bool manual_pass(uvtw_wheel_t *w, uint64_t at) {
  if (ms_of(w, at) > w->manual_now)
    w->manual_now = ms_of(w, at);
  run_pass(w, at);
  return end_pass(w);
}

int uvtw_wheel_advance(uvtw_wheel_t *w, uint64_t ms) {
  int err = begin_advance(w);
  if (err != 0)
    return err;
  /* A saturated deadline (UINT64_MAX) is never reached. */
  uint64_t target = uvtw__add_saturating(w->manual_now, ms);
  if (target == UINT64_MAX)
    target--;
  uint64_t last = ticks_down(w, target);
  uint64_t at = now_ticks(w);
  while (w->wheel.count != 0) {
    uint64_t next = uvtw__wheel_next_deadline(&w->wheel);
    if (next > at)
      at = next;
    if (at > last)
      break;
    if (!manual_pass(w, at))
      return 0;
    at++; /* passes at strictly increasing times */
  }
  if (target > w->manual_now)
    w->manual_now = target;
  return 0;
}

int64_t uvtw_wheel_advance_next(uvtw_wheel_t *w) {
  int err = begin_advance(w);
  if (err != 0)
    return err;
  uint64_t next = uvtw__wheel_next_deadline_exact(&w->wheel);
  if (next == UINT64_MAX)
    return UV_EAGAIN;
  uint64_t at = next > now_ticks(w) ? next : now_ticks(w);
  uint64_t moved = ms_of(w, at) > w->manual_now ? ms_of(w, at) - w->manual_now : 0;
  manual_pass(w, at); /* the wheel may be gone if a callback closed it */
  return moved > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)moved;
}

/* ---- loop-thread timers ------------------------------------------------------ */

void uvtw_timer_init(uvtw_wheel_t *wheel, uvtw_timer_t *timer) {
  if (timer == NULL)
    return;
  node_of(timer)->next = node_of(timer)->prev = NULL;
  timer->wheel_ = (uintptr_t)wheel;
  timer->cb_ = NULL;
  timer->repeat_ = 0;
}

/* A start that decides something: a restart, or a filing that may arm
 * (see uvtw__entry_add). */
UVTW_NOINLINE static int start_deciding(uvtw_wheel_t *w, uvtw_timer_t *timer, uint64_t deadline) {
  if (!w->loop_ran) { /* the loop is being set up: the uv_async_t lets go */
    w->loop_ran = true;
    update_refs(w);
  }
  if (wheel_node_linked(node_of(timer))) {
    /* A restart. Pushed later, an entry may stay where it is, and the
     * earliest deadline cannot move earlier. */
    w->stats.stopped++;
    if (uvtw__wheel_postpone(&w->wheel, node_of(timer), deadline))
      return 0;
    uvtw__entry_remove(w, timer);
  }
  uvtw__entry_add(w, timer, deadline);
  return 0;
}

int uvtw_timer_start(uvtw_timer_t *timer, uvtw_timer_cb cb, uint64_t timeout, uint64_t repeat) {
  if (timer == NULL || cb == NULL || wheel_of(timer) == NULL)
    return UV_EINVAL;
  uvtw_wheel_t *w = wheel_of(timer);
  if (uvtw__closing(w))
    return UV_ECANCELED;
  timer->cb_ = cb;
  timer->repeat_ = repeat;
  uint64_t now = uvtw__clock_ms(w);
  uint64_t deadline = uvtw__ticks_up(w, uvtw__add_saturating(now, timeout));
  /* Most starts decide nothing: a new entry with a timeout (not due, then)
   * no earlier than armed_at, on a wheel that holds others. They only
   * insert; the decisions are out of line, so such a start saves few
   * registers (bench/README.md). */
  if (wheel_node_linked(node_of(timer)) || timeout == 0 || w->wheel.count == 0 ||
      deadline < w->armed_at)
    return start_deciding(w, timer, deadline);
  uvtw__wheel_insert(&w->wheel, node_of(timer), deadline);
  after_file(w, timer);
  return 0;
}

int uvtw_timer_stop(uvtw_timer_t *timer) {
  if (timer == NULL)
    return UV_EINVAL;
  if (wheel_node_linked(node_of(timer))) {
    wheel_of(timer)->stats.stopped++;
    uvtw__entry_remove(wheel_of(timer), timer);
  }
  return 0;
}

int uvtw_timer_again(uvtw_timer_t *timer) {
  if (timer == NULL || timer->cb_ == NULL || wheel_of(timer) == NULL)
    return UV_EINVAL;
  if (uvtw__closing(wheel_of(timer)))
    return UV_ECANCELED;
  if (timer->repeat_ == 0) /* as uv_timer_again: an active one-shot timer stays */
    return 0;
  return uvtw_timer_start(timer, timer->cb_, timer->repeat_, timer->repeat_);
}

void uvtw_timer_set_repeat(uvtw_timer_t *timer, uint64_t repeat) {
  timer->repeat_ = repeat;
}

uint64_t uvtw_timer_get_repeat(const uvtw_timer_t *timer) {
  return timer->repeat_;
}

uint64_t uvtw_timer_get_due_in(const uvtw_timer_t *timer) {
  if (!uvtw_timer_is_active(timer))
    return 0;
  uint64_t due = ms_of(wheel_of(timer), const_node_of(timer)->deadline);
  uint64_t now = uvtw__clock_ms(wheel_of(timer));
  return due > now ? due - now : 0;
}

int uvtw_timer_is_active(const uvtw_timer_t *timer) {
  return wheel_node_linked(const_node_of(timer));
}

/* Sets or clears ENTRY_UNREF; a pending timer moves between the referenced
 * entries and the unref'd ones. */
static void set_unref(uvtw_timer_t *timer, uintptr_t unref) {
  uvtw_wheel_t *w = wheel_of(timer);
  if ((timer->wheel_ & ENTRY_UNREF) == unref)
    return;
  timer->wheel_ ^= ENTRY_UNREF;
  if (wheel_node_linked(node_of(timer))) {
    w->unrefs = unref ? w->unrefs + 1 : w->unrefs - 1;
    update_refs(w);
  }
}

void uvtw_timer_ref(uvtw_timer_t *timer) {
  set_unref(timer, 0);
}

void uvtw_timer_unref(uvtw_timer_t *timer) {
  set_unref(timer, ENTRY_UNREF);
}

int uvtw_timer_has_ref(const uvtw_timer_t *timer) {
  return !(timer->wheel_ & ENTRY_UNREF);
}

/* ---- the invariant checker (-Dchecks) ---------------------------------------- */

#ifdef UVTW_CHECKS
/* GCOVR_EXCL_START: the checker's failing branches run only on a broken library. */

/* The pending entries of one list, counted into c[]: entries, unrefs,
 * tasks, tasks cancelled in the wheel. */
static const char *check_list(const uvtw_wheel_t *w, const wheel_node_t *head, uint64_t c[4]) {
  for (const wheel_node_t *node = head->next; node != head; node = node->next) {
    const uvtw_timer_t *entry = container_of(node, uvtw_timer_t, node_);
    bool task = entry->wheel_ & ENTRY_TASK;
    INVARIANT(wheel_of(entry) == w, "an entry is filed in another wheel");
    /* armed_at is no later than any deadline, but in WAIT, where it is the next iteration */
    INVARIANT(w->arming == ARM_WAIT || node->deadline >= w->armed_at, "an entry before armed_at");
    INVARIANT(!task || uvtw__task_check(entry, &c[3]), "a task in the wheel is not pending");
    c[0]++, c[1] += (entry->wheel_ & ENTRY_UNREF) != 0, c[2] += task;
  }
  return NULL;
}

static const char *check_arming(const uvtw_wheel_t *w) {
  enum arming a = w->arming;
  bool timer = uv_is_active((const uv_handle_t *)&w->timer), empty = w->wheel.count == 0;
  bool started = (a == ARM_TIMER || a == ARM_WAIT) && !empty;
  uint64_t due = ms_of(w, w->armed_at), now = uv_now(w->loop);
  INVARIANT(a != ARM_IN_PASS, "checked inside a pass"); /* the checker runs between passes */
  INVARIANT(!w->manual || (a == ARM_IDLE && !timer), "a manual clock armed its uv_timer_t");
  INVARIANT(a != ARM_IDLE || (!timer && (empty || w->manual)), "IDLE with a timer or entries");
  /* TIMER: started, or (libuv >= 1.48) collected by libuv's timer phase */
  INVARIANT(a != ARM_TIMER || (!empty && (timer || w->pass_by_timer)), "TIMER not armed");
  /* COLLECTED: libuv >= 1.48 holds it inactive in its list; older libuvs in the heap */
  INVARIANT(a != ARM_COLLECTED || (!empty && timer != w->pass_by_timer), "COLLECTED, not due");
  INVARIANT(a != ARM_WAIT || (!w->pass_by_timer && timer == !empty), "WAIT on libuv >= 1.48");
  INVARIANT((a == ARM_WAIT) == uv_is_active((const uv_handle_t *)&w->prepare), "prepare not WAIT");
  INVARIANT(started || w->armed_at == 0, "armed_at set with nothing armed"); /* the fast path */
  INVARIANT(!started || uv_timer_get_due_in(&w->timer) == (due > now ? due - now : 0),
            "the uv_timer_t is not due at armed_at");
  uint64_t next = uvtw__wheel_next_deadline_exact(&w->wheel), floor = now_ticks(w) + 1;
  INVARIANT(!started || w->armed_at <= (a == ARM_WAIT && next < floor ? floor : next),
            "the uv_timer_t is armed after the earliest deadline (WAIT: the next tick)");
  return NULL;
}

const char *uvtw__check(const uvtw_wheel_t *w) {
  int64_t linked = uvtw__tasks_linked(w); /* before the walk: see uvtw__tasks_check */
  uint64_t c[4] = {0};
  const char *error = check_list(w, &w->wheel.expired, c);
  for (unsigned i = 0; i < WHEEL_SLOT_COUNT && error == NULL; i++)
    error = check_list(w, &w->wheel.slots[i], c);
  if (error != NULL)
    return error;
  INVARIANT(c[0] == w->wheel.count && c[1] == w->unrefs, "the counts disagree with the lists");
  /* Closed: nothing left, out of the ring, the handles closing (not checked). */
  INVARIANT(!uvtw__closing(w) || (c[0] == 0 && w->peer == w), "a closed wheel holds on");
  if (uvtw__closing(w) || (error = check_arming(w)) != NULL)
    return error != NULL ? error : uvtw__tasks_check(w, linked, c[2], c[3]);
  bool may_keep_alive = w->referenced && !w->manual;
  /* The handles keep the loop alive as a referenced uv_timer_t would, and
   * before the loop's first iteration for the tasks queued; the uv_prepare_t never. */
  INVARIANT(uv_has_ref((const uv_handle_t *)&w->timer) == (may_keep_alive && c[0] > c[1]),
            "the uv_timer_t's reference disagrees with the referenced entries");
  INVARIANT(uv_has_ref((const uv_handle_t *)&w->async) == (may_keep_alive && !w->loop_ran),
            "the uv_async_t's reference is wrong");
  INVARIANT(!uv_has_ref((const uv_handle_t *)&w->prepare), "the uv_prepare_t is referenced");
  INVARIANT(w->wheel.now <= now_ticks(w), "the wheel's time is ahead of its clock");
  for (const uvtw_wheel_t *p = w->peer; p != w; p = p->peer) /* the open wheels of one loop */
    INVARIANT(p->loop == w->loop && !uvtw__closing(p), "the ring holds a closed or foreign wheel");
  return uvtw__tasks_check(w, linked, c[2], c[3]);
}
/* GCOVR_EXCL_STOP */
#endif
