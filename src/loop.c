/* The libuv glue: the wheel object, loop-thread timers, arming the
 * uv_timer_t, passes, and the manual clock.
 *
 * A timer's life: uvtw_timer_start files its node in the pure wheel
 * (wheel.c) and, if it is now the earliest, arms the wheel's one uv_timer_t
 * to its deadline. When that uv_timer_t fires, on_timer runs a pass:
 * wheel_expire moves every entry due at uv_now() to the expired list, and
 * the pass pops them one by one and runs their callbacks. After the pass,
 * the uv_timer_t is armed again to the earliest pending deadline.
 *
 * One pass at a time: the pass collects what is due before it runs any
 * callback, so an entry a callback makes due waits for the next pass. The
 * next pass must come in the next loop iteration, and how to get there
 * depends on the libuv the program runs on (checked with uv_version() at
 * run time, since a shared libuv is upgraded under programs):
 *   - libuv >= 1.48 collects due uv_timer_ts before running them, so a
 *     uv_timer_t started with 0 inside its own callback fires in the next
 *     iteration: after_pass simply arms the uv_timer_t with 0.
 *   - older libuv runs such a timer again in the same uv__run_timers call,
 *     which would turn a callback that restarts itself with 0 into a busy
 *     loop. There the pass "kicks" the wheel's uv_async_t instead; its
 *     callback runs in this or the next iteration's poll phase and arms the
 *     uv_timer_t with 0, which fires in the timer phase after it. While the
 *     kick is pending the uv_async_t is referenced (if the wheel keeps the
 *     loop alive at all), because from 1.45 uv_run checks whether the loop
 *     is alive right after the timer phase.
 * Everything else follows from using a real uv_timer_t on uv_now(): a
 * wheel timer fires in the loop iteration in which a uv_timer_t started at
 * the same moment with the same timeout fires, and keeps the loop alive
 * exactly as long.
 *
 * Keeping the loop alive: `unrefs` counts pending timers that are
 * unref'd, so the pending entries that are referenced (the other timers,
 * and every task) number wheel.count - unrefs. The uv_timer_t is
 * referenced while the wheel is referenced and that number is not 0;
 * being active only while something is pending, it then keeps the loop
 * alive exactly when a referenced uv_timer_t would.
 */
#include <stdlib.h>

#include "internal.h"
#include "late.h"

#define TIMER_UNREF ((uintptr_t)1) /* in wheel_: does not keep the loop alive */


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
  return (uvtw_wheel_t *)(timer->wheel_ & ~TIMER_UNREF);
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

/* ---- arming the uv_timer_t and keeping the loop alive ------------------- */

static void on_timer(uv_timer_t *handle);

/* The uv_async_t also keeps the loop alive until the loop's thread is
 * known: until then every task goes through the queue, and one scheduled
 * before the loop first runs must keep it alive from the call. */
static void update_refs(uvtw_wheel_t *w) {
  if (w->closing) /* the handles are closing, or closed by a uv_walk */
    return;
  bool may_keep_alive = w->referenced && !w->manual;
  bool keep_alive = may_keep_alive && w->wheel.count > w->unrefs;
  bool keep_async = (keep_alive && w->kicked) || (may_keep_alive && !w->thread_known);
  (keep_alive ? uv_ref : uv_unref)((uv_handle_t *)&w->timer);
  (keep_async ? uv_ref : uv_unref)((uv_handle_t *)&w->async);
}

/* The loop's thread is the one that runs the wheel's callbacks and makes
 * its loop-thread calls; uvtw_wheel_new may run on another. The first such
 * call or callback tells, and from then on uvtw_schedule files that
 * thread's tasks directly. What the thread queued before is taken in first,
 * so its tasks keep their order. The wheel's uv_timer_t is armed only
 * after this, so its callback needs no check. */
static void learn_thread(uvtw_wheel_t *w) {
  if (w->thread_known)
    return;
  w->thread_known = true;
  uvtw__tasks_set_loop_thread(w);
  update_refs(w);
  uvtw__tasks_take_in(w);
}

static void arm(uvtw_wheel_t *w, uint64_t deadline) {
  uint64_t due = ms_of(w, deadline);
  uint64_t now = uv_now(w->loop);
  uv_timer_start(&w->timer, on_timer, due > now ? due - now : 0, 0);
  w->armed = true;
  w->armed_at = deadline;
}

static void disarm(uvtw_wheel_t *w) {
  if (w->armed)
    uv_timer_stop(&w->timer);
  w->armed = false;
  w->collected = false;
}

/* The uv_timer_t is due in the timer phase under way, collected but not yet
 * run: libuv >= 1.48 collects every due uv_timer_t before running any of
 * them, and a uv_timer_t started meanwhile waits for the next phase. */
static bool pass_collected(const uvtw_wheel_t *w) {
  return w->armed && !uv_is_active((const uv_handle_t *)&w->timer);
}

static void kick(uvtw_wheel_t *w) {
  if (w->kicked)
    return;
  w->kicked = true;
  update_refs(w);
  uv_async_send(&w->async);
}

/* After `entry` is filed: the first referenced entry references the
 * handles. */
static void count_in(uvtw_wheel_t *w, const uvtw_timer_t *entry) {
  if (entry->wheel_ & TIMER_UNREF)
    w->unrefs++;
  else if (w->wheel.count - w->unrefs == 1)
    update_refs(w);
}

/* Once no referenced entry is pending, the handles let go of the loop; once
 * nothing is, the uv_timer_t stops. Out of line, so a stop saves no
 * registers, which takes a fifth off its time. */
UVTW_NOINLINE static void none_referenced(uvtw_wheel_t *w) {
  update_refs(w);
  if (w->wheel.count == 0)
    disarm(w);
}

/* After `entry` is unlinked: the last referenced entry, or the last entry,
 * has left. */
static void count_out(uvtw_wheel_t *w, const uvtw_timer_t *entry) {
  bool unref = entry->wheel_ & TIMER_UNREF;
  if (unref)
    w->unrefs--;
  if ((!unref && w->wheel.count == w->unrefs) || w->wheel.count == 0)
    none_referenced(w);
}

/* Outside a pass and on the loop's clock: where a filing may arm. */
static inline bool outside(const uvtw_wheel_t *w) {
  return !w->in_pass && !w->manual;
}

/* Outside a pass, the filing arms the uv_timer_t if the entry may be the
 * earliest (a pass arms once, when it ends). While the uv_timer_t waits in
 * libuv's collected list (pass_collected), a due entry must wait for the
 * next phase like a uv_timer_t started now: the pass's own collection is
 * made before it is filed, and the uv_timer_t is left where it is, so it
 * still runs in this phase. */
void uvtw__entry_add(uvtw_wheel_t *w, uvtw_timer_t *entry, uint64_t deadline) {
  uint64_t now_ms = uvtw__clock_ms(w);
  bool collect = ms_of(w, deadline) <= now_ms && outside(w) && !w->collected && pass_collected(w);
  if (collect || w->wheel.count == 0) /* an empty wheel catches up: file it low */
    uvtw__wheel_expire(&w->wheel, ticks_down(w, now_ms));
  w->collected |= collect;
  uvtw__wheel_insert(&w->wheel, node_of(entry), deadline);
  /* A pending kick arms the uv_timer_t itself, in the next poll phase:
   * armed now, libuv < 1.48 would run the kicking pass's due entries in
   * this timer phase again. */
  if ((!w->armed || node_of(entry)->deadline < w->armed_at) && outside(w) && !w->kicked &&
      !pass_collected(w))
    arm(w, uvtw__wheel_next_deadline(&w->wheel));
  count_in(w, entry);
}

void uvtw__entry_remove(uvtw_wheel_t *w, uvtw_timer_t *entry) {
  uvtw__wheel_remove(&w->wheel, node_of(entry));
  count_out(w, entry);
}

/* ---- passes ---------------------------------------------------------------- */

void uvtw__note_fired(uvtw_wheel_t *w, uint64_t deadline) {
  uint64_t now = uvtw__clock_ms(w);
  uint64_t due = ms_of(w, deadline);
  /* A manual clock measures the test's steps, not the loop: 0 ms. */
  uint64_t late = now > due && !w->manual ? now - due : 0;
  w->stats.fired++;
  w->stats.late[uvtw__late_bucket(late)]++;
  if (late > w->stats.late_max_ms)
    w->stats.late_max_ms = late;
}

/* Runs one expired entry's callback. A repeating timer is filed again
 * first, from the clock's now, like uv_timer_t, so it is active inside its
 * callback. */
static void fire(uvtw_wheel_t *w, uvtw_timer_t *entry) {
  count_out(w, entry);
  if (entry->cb_ != uvtw__task_fire) {
    uvtw__note_fired(w, node_of(entry)->deadline);
    if (entry->repeat_ != 0)
      uvtw__entry_add(w, entry, uvtw__ticks_up(w, uvtw__add_saturating(uvtw__clock_ms(w), entry->repeat_)));
  }
  entry->cb_(entry); /* the entry may be freed from here on */
}

/* Expires everything due at `now` (ticks), then runs the callbacks. Returns
 * how many ran. */
static uint64_t run_pass(uvtw_wheel_t *w, uint64_t now) {
  uint64_t fired_before = w->stats.fired;
  wheel_node_t *node;
  w->in_pass = true;
  if (!w->collected)
    uvtw__wheel_expire(&w->wheel, now);
  w->collected = false;
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
  w->in_pass = false;
  return w->stats.fired - fired_before;
}

/* Arms the uv_timer_t for the next pass (see the top of this file). */
static void after_pass(uvtw_wheel_t *w) {
  if (w->closing || w->manual || w->wheel.count == 0)
    return;
  uint64_t next = uvtw__wheel_next_deadline(&w->wheel);
  if (next <= ticks_down(w, uvtw__clock_ms(w)) && !w->pass_by_timer)
    kick(w);
  else
    arm(w, next);
}

static void on_timer(uv_timer_t *handle) {
  uvtw_wheel_t *w = container_of(handle, uvtw_wheel_t, timer);
  w->armed = false;
  w->stats.wakeups++;
  if (run_pass(w, ticks_down(w, uvtw__clock_ms(w))) == 0)
    w->stats.wasted_wakeups++;
  after_pass(w);
}

static void on_async(uv_async_t *handle) {
  uvtw_wheel_t *w = container_of(handle, uvtw_wheel_t, async);
  learn_thread(w);
  if (w->kicked) {
    w->kicked = false;
    update_refs(w);
    if (w->wheel.count != 0 && !w->armed)
      arm(w, uvtw__wheel_next_deadline(&w->wheel));
  }
  uvtw__tasks_take_in(w);
}

/* ---- the wheel ----------------------------------------------------------- */

int uvtw_wheel_new(uv_loop_t *loop, const uvtw_options_t *opts, uvtw_wheel_t **out) {
  uvtw_options_t o = {0};
  if (opts != NULL)
    o = *opts;
  bool reserved_zero = true;
  for (size_t i = 0; i < sizeof o.reserved / sizeof o.reserved[0]; i++)
    reserved_zero &= o.reserved[i] == 0;
  if (loop == NULL || out == NULL || o.manual_clock > 1 || !reserved_zero)
    return UV_EINVAL;
  uvtw_wheel_t *w = calloc(1, sizeof *w);
  if (w == NULL)
    return UV_ENOMEM;
  w->loop = loop;
  w->tick_ms = o.tick_ms > 1 ? o.tick_ms : 1;
  w->manual = o.manual_clock != 0;
  w->pass_by_timer = uv_version() >= (1u << 16 | 48u << 8);
  w->referenced = true;
  w->manual_now = uv_now(loop);
  uvtw__wheel_init(&w->wheel, ticks_down(w, w->manual_now));
  int err = uvtw__shared_new(w, o.max_pending);
  if (err == 0 && (err = uv_async_init(loop, &w->async, on_async)) != 0)
    uvtw__shared_release(w->shared);
  if (err != 0) {
    free(w);
    return err;
  }
  uv_timer_init(loop, &w->timer);
  update_refs(w);
  uv_async_send(&w->async); /* the first poll tells the loop's thread */
  *out = w;
  return 0;
}

/* Once both handles are closed. */
static void finish_close(uvtw_wheel_t *w) {
  if (w->close_cb != NULL)
    w->close_cb(w, w->close_arg);
  uvtw__shared_release(w->shared);
  free(w);
}

static void on_handle_closed(uv_handle_t *handle) {
  uvtw_wheel_t *w = handle->data;
  if (++w->handles_closed == 2) /* the uv_timer_t and the uv_async_t */
    finish_close(w);
}

/* Closes a handle of the wheel, unless the program did (a uv_walk that
 * closes every handle): then it is closed already, and its loop may be
 * too, so neither is touched again. */
static void close_handle(uvtw_wheel_t *w, uv_handle_t *handle) {
  if (uv_is_closing(handle)) {
    w->handles_closed++;
    return;
  }
  handle->data = w;
  uv_close(handle, on_handle_closed);
}

void uvtw_wheel_close(uvtw_wheel_t *w, uvtw_close_cb cb, void *arg) {
  if (w == NULL || w->closing)
    return;
  if (uv_is_closing((uv_handle_t *)&w->timer))
    w->armed = false; /* closed by the program: not to be stopped again */
  disarm(w);
  w->closing = true;
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
    if (entry->cb_ != uvtw__task_fire)
      uvtw__entry_remove(w, entry);
  }
  uvtw__tasks_close(w);
  while ((node = uvtw__wheel_pop_expired(&w->wheel)) != NULL) {
    uvtw_timer_t *task = container_of(node, uvtw_timer_t, node_);
    count_out(w, task);
    uvtw__task_fire(task); /* closing: UV_ECANCELED */
  }
  close_handle(w, (uv_handle_t *)&w->timer);
  close_handle(w, (uv_handle_t *)&w->async);
  if (w->handles_closed == 2) /* both were closed by the program */
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
  out->started = w->wheel.next_seq; /* every start, repeat and task takes one */
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

static int check_manual(uvtw_wheel_t *w) {
  if (w == NULL || !w->manual)
    return UV_EINVAL;
  if (w->in_pass)
    return UV_EBUSY;
  if (w->closing)
    return UV_ECANCELED;
  learn_thread(w);
  uvtw__tasks_take_in(w);
  return 0;
}

/* Sets the manual clock to tick `at` (never back) and runs one pass there. */
static void manual_pass(uvtw_wheel_t *w, uint64_t at) {
  if (ms_of(w, at) > w->manual_now)
    w->manual_now = ms_of(w, at);
  run_pass(w, at);
}

int uvtw_wheel_advance(uvtw_wheel_t *w, uint64_t ms) {
  int err = check_manual(w);
  if (err != 0)
    return err;
  /* A saturated deadline (UINT64_MAX) is never reached. */
  uint64_t target = uvtw__add_saturating(w->manual_now, ms);
  if (target == UINT64_MAX)
    target--;
  uint64_t last = ticks_down(w, target);
  uint64_t at = ticks_down(w, uvtw__clock_ms(w));
  while (!w->closing && w->wheel.count != 0) {
    uint64_t next = uvtw__wheel_next_deadline(&w->wheel);
    if (next > at)
      at = next;
    if (at > last)
      break;
    manual_pass(w, at);
    at++; /* passes at strictly increasing times */
  }
  if (target > w->manual_now)
    w->manual_now = target;
  return 0;
}

int64_t uvtw_wheel_advance_next(uvtw_wheel_t *w) {
  int err = check_manual(w);
  if (err != 0)
    return err;
  uint64_t next = uvtw__wheel_next_deadline_exact(&w->wheel);
  if (next == UINT64_MAX)
    return UV_EAGAIN;
  uint64_t before = w->manual_now;
  uint64_t now = ticks_down(w, uvtw__clock_ms(w));
  manual_pass(w, next > now ? next : now);
  uint64_t moved = w->manual_now - before;
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

/* A start that decides something: a restart, or a filing that may arm,
 * collect or catch up (see uvtw__entry_add). */
UVTW_NOINLINE static int start_deciding(uvtw_wheel_t *w, uvtw_timer_t *timer, uint64_t deadline) {
  learn_thread(w);
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
  if (w->closing)
    return UV_ECANCELED;
  timer->cb_ = cb;
  timer->repeat_ = repeat;
  uint64_t now = uvtw__clock_ms(w);
  uint64_t deadline = uvtw__ticks_up(w, uvtw__add_saturating(now, timeout));
  /* Most starts decide nothing: a new entry with a timeout (not due, then),
   * no earlier than the armed deadline, on a wheel that holds others. They
   * only insert; the decisions are out of line, so such a start saves few
   * registers, which takes a tenth off a stop + start at 10^6 timers. */
  if (wheel_node_linked(node_of(timer)) || timeout == 0 || w->wheel.count == 0 || !w->armed ||
      deadline < w->armed_at)
    return start_deciding(w, timer, deadline);
  uvtw__wheel_insert(&w->wheel, node_of(timer), deadline);
  count_in(w, timer);
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
  if (wheel_of(timer)->closing)
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

/* Sets or clears TIMER_UNREF; a pending timer moves between the referenced
 * entries and the unref'd ones. */
static void set_unref(uvtw_timer_t *timer, uintptr_t unref) {
  uvtw_wheel_t *w = wheel_of(timer);
  if ((timer->wheel_ & TIMER_UNREF) == unref)
    return;
  timer->wheel_ ^= TIMER_UNREF;
  if (wheel_node_linked(node_of(timer))) {
    w->unrefs = unref ? w->unrefs + 1 : w->unrefs - 1;
    update_refs(w);
  }
}

void uvtw_timer_ref(uvtw_timer_t *timer) {
  set_unref(timer, 0);
}

void uvtw_timer_unref(uvtw_timer_t *timer) {
  set_unref(timer, TIMER_UNREF);
}

int uvtw_timer_has_ref(const uvtw_timer_t *timer) {
  return !(timer->wheel_ & TIMER_UNREF);
}
