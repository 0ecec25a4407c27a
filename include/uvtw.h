/* uvtw: a hierarchical timing wheel for libuv loops.
 *
 * One wheel per loop holds any number of timers in O(1) per operation. The
 * wheel owns one uv_timer_t, armed only to the earliest due deadline (stopped
 * when nothing is pending, so an idle wheel never wakes the loop), and one
 * uv_async_t through which other threads hand it tasks.
 *
 * Threads: every function here must be called on the thread that runs the
 * wheel's loop, except uvtw_schedule, uvtw_ticket_cancel, uvtw_ticket_release
 * and uvtw_version_string, which may be called from any thread.
 *
 * Errors are negative libuv error codes (UV_EINVAL, ...); 0 is success. A call
 * that fails changes nothing.
 *
 * Time is milliseconds on the loop's clock (uv_now()), exactly as for
 * uv_timer_t, so a wheel timer and a uv_timer_t started at the same moment
 * with the same timeout fire in the same loop iteration.
 */
#ifndef UVTW_H
#define UVTW_H

#include <stdint.h>
#include <uv.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(UVTW_BUILDING) && defined(__GNUC__)
#define UVTW_EXTERN __attribute__((visibility("default")))
#else
#define UVTW_EXTERN
#endif

#define UVTW_VERSION_MAJOR 0
#define UVTW_VERSION_MINOR 1
#define UVTW_VERSION_PATCH 0

typedef struct uvtw_wheel_s uvtw_wheel_t;
typedef struct uvtw_timer_s uvtw_timer_t;
typedef struct uvtw_ticket_s uvtw_ticket_t;

typedef void (*uvtw_timer_cb)(uvtw_timer_t *timer);
/* status 0: the task is due; UV_ECANCELED: the wheel closed before it was. */
typedef void (*uvtw_task_cb)(void *arg, int status);
typedef void (*uvtw_close_cb)(uvtw_wheel_t *wheel, void *arg);

typedef struct uvtw_options_s {
  /* 0 or 1: 1 ms, exact. Larger: every deadline is rounded UP to a multiple
   * of tick_ms of the loop clock (absolute uv_now() values, re-arms
   * included); a deadline already on a multiple stays. */
  uint32_t tick_ms;
  /* 0: unlimited. Else at most this many tasks from uvtw_schedule may be
   * pending (queued or in the wheel) at once; past it UV_ENOBUFS. */
  uint32_t max_pending;
} uvtw_options_t;

typedef struct uvtw_stats_s {
  uint64_t active;         /* armed timers + taken-in tasks not yet run or cancelled */
  uint64_t started;        /* starts, arming again() calls, repeat re-arms, tasks taken in */
  uint64_t stopped;        /* stops of active timers (a restart counts one) + won cancels */
  uint64_t fired;          /* callbacks run with status 0 */
  uint64_t cascaded;       /* entries moved from a coarser level to a finer one */
  uint64_t wakeups;        /* times the wheel's uv_timer_t fired */
  uint64_t wasted_wakeups; /* of those, wakeups that ran no callback */
  uint64_t remote_batches; /* times the uv_async_t drained the cross-thread queue */
  uint64_t late_max_ms;    /* largest uv_now() - deadline seen at a callback */
} uvtw_stats_t;

/* Private: the wheel's intrusive list node. Do not touch. */
struct uvtw__entry_s {
  struct uvtw__entry_s *next; /* NULL while the timer is inactive */
  struct uvtw__entry_s *prev;
  uint64_t deadline;          /* absolute, in ticks of the wheel */
  uint64_t tag;               /* low 16 bits: the wheel's id; the rest: start order */
};

/* A loop-thread timer, allocated by the caller (embed it anywhere). Only
 * `data` is for the caller; the rest is private. 56 bytes on 64-bit targets
 * (a uv_timer_t is 152). An inactive timer holds nothing: its memory may be
 * freed or reused at any time, except inside its own callback. */
struct uvtw_timer_s {
  void *data;
  struct uvtw__entry_s entry_;
  uvtw_timer_cb cb_;          /* NULL until the first successful start */
  uint64_t repeat_;
};

/* ---- The wheel (loop thread only) ------------------------------------- */

/* Creates a wheel on `loop` (opts NULL: tick 1 ms, no task limit) and stores
 * it in *out. Initializes one uv_timer_t and one (unreferenced) uv_async_t on
 * the loop. The calling thread must be the loop's thread.
 * Errors: loop or out NULL -> UV_EINVAL; no memory, or 65535 wheels already
 * open in the process (a timer names its wheel by a 16-bit id) ->
 * UV_ENOMEM; or the error of uv_async_init. Cost: two allocations, about
 * 215 KiB in all (mostly the 4096 one-tick slots of the wheel's ring, 32
 * bytes each, and 64 KiB of entry addresses kept for prefetching before
 * slots fire). */
UVTW_EXTERN int uvtw_wheel_new(uv_loop_t *loop, const uvtw_options_t *opts, uvtw_wheel_t **out);

/* Closes the wheel. Pending timers become inactive and never fire. Every
 * pending task's callback runs once with UV_ECANCELED, on the loop thread,
 * before `cb` (tasks whose cancel returned 0 never run). Both handles are
 * closed and cb(wheel, arg) runs once they are; the wheel pointer is valid
 * until cb returns and must not be used afterwards. From uvtw_wheel_close on,
 * starts and schedules get UV_ECANCELED. Allowed inside any wheel callback.
 * A second call is ignored. Cost: O(pending entries). `cb` may be NULL. */
UVTW_EXTERN void uvtw_wheel_close(uvtw_wheel_t *wheel, uvtw_close_cb cb, void *arg);

/* The loop the wheel runs on. O(1). */
UVTW_EXTERN uv_loop_t *uvtw_wheel_loop(const uvtw_wheel_t *wheel);

/* A referenced wheel (the default) keeps the loop alive exactly while
 * something is pending, like an active uv_timer_t; an unreferenced one never
 * does. Idempotent, O(1). */
UVTW_EXTERN void uvtw_wheel_ref(uvtw_wheel_t *wheel);
UVTW_EXTERN void uvtw_wheel_unref(uvtw_wheel_t *wheel);

/* Milliseconds until the next callback is due, against uv_now(): 0 if one is
 * overdue, -1 if nothing is pending, INT64_MAX if the earliest entry is
 * further away than that (a saturated deadline never fires). Tasks still in
 * the cross-thread queue are not counted. Cost: O(levels) plus a scan of
 * the earliest upper-level slot (and of the next ones while timers
 * restarted in place may make them earlier), after applying up to 64
 * logged restarts. */
UVTW_EXTERN int64_t uvtw_wheel_next_due(const uvtw_wheel_t *wheel);

/* Copies the wheel's counters into *out. O(1). */
UVTW_EXTERN void uvtw_wheel_stats(const uvtw_wheel_t *wheel, uvtw_stats_t *out);

/* "0.1.0". Any thread. */
UVTW_EXTERN const char *uvtw_version_string(void);

/* ---- Loop-thread timers (mirror uv_timer_*) ---------------------------- */
/* All are O(1) in the number of pending timers (a restart of an active
 * timer, and a start right after its stop, amortized: one that may not stay
 * in place is logged, and every 64th applies the batch), allocate nothing,
 * and may be called from inside any wheel callback, on any timer including
 * the one firing. A restart to a later deadline, of a timer due more than
 * 2 to 4 s ahead (past the wheel's ring of one-tick slots: 2048 to 4096
 * ticks), leaves it where it is in the wheel and touches only the timer. A
 * stop followed at once by a start of the same timer touches only the
 * timer too: it is put back and logged, and the batch leaves it there in
 * that same case, or moves it. */

/* Binds `timer` to `wheel`, inactive. Leaves timer->data alone. */
UVTW_EXTERN void uvtw_timer_init(uvtw_wheel_t *wheel, uvtw_timer_t *timer);

/* Arms the timer to fire `timeout` ms from uv_now(loop), then every `repeat`
 * ms if repeat > 0 (re-armed to uv_now + repeat just before each callback, so
 * it is active inside its callback). Restarts an active timer. A deadline
 * that overflows saturates: the timer never fires but stays active and
 * stoppable. A start from inside a wheel callback with an already-due
 * deadline runs in the next loop iteration, never in the same pass.
 * Errors: timer or cb NULL -> UV_EINVAL; wheel closing -> UV_ECANCELED. */
UVTW_EXTERN int uvtw_timer_start(uvtw_timer_t *timer, uvtw_timer_cb cb, uint64_t timeout, uint64_t repeat);

/* Disarms the timer; a no-op returning 0 if it is inactive. */
UVTW_EXTERN int uvtw_timer_stop(uvtw_timer_t *timer);

/* Restarts the timer with timeout = repeat; with repeat == 0 it stops the
 * timer and returns 0 (also on a closing wheel: a stop is always allowed).
 * Errors: never started -> UV_EINVAL; repeat > 0 on a closing wheel ->
 * UV_ECANCELED. */
UVTW_EXTERN int uvtw_timer_again(uvtw_timer_t *timer);

/* Sets the repeat interval used by the next re-arm or again(). */
UVTW_EXTERN void uvtw_timer_set_repeat(uvtw_timer_t *timer, uint64_t repeat);
UVTW_EXTERN uint64_t uvtw_timer_get_repeat(const uvtw_timer_t *timer);

/* Milliseconds until the timer is due against uv_now(); 0 if due or inactive. */
UVTW_EXTERN uint64_t uvtw_timer_get_due_in(const uvtw_timer_t *timer);

/* Non-zero while the timer is armed. */
UVTW_EXTERN int uvtw_timer_is_active(const uvtw_timer_t *timer);

/* ---- Any-thread tasks ----------------------------------------------------- */
/* Tasks are one-shot callbacks that any thread may put on the wheel. From a
 * thread other than the loop's they go through a lock-free multi-producer
 * queue that the wheel's uv_async_t drains on the loop thread; the loop must
 * be running (uv_run) for them to be taken in. The uv_async_t is unreferenced:
 * a task from another thread keeps the loop alive only once it is taken in,
 * so keep the loop alive by other means (a handle of your own, or a
 * referenced wheel with something pending) while other threads schedule. A
 * task scheduled on the loop thread goes straight into the wheel and keeps
 * the loop alive from the call. */

/* Schedules cb(arg, 0) to run on the loop thread `timeout` ms after this call
 * (deadline taken now with uv_hrtime(), so time spent in the queue does not
 * lengthen it). Tasks from one thread with equal timeouts run in call order.
 * If `ticket` is non-NULL, *ticket receives a handle that must be released
 * exactly once with uvtw_ticket_release; NULL means fire-and-forget.
 * Any thread. Cost: one allocation and one CAS, plus one uv_async_send when
 * the queue was empty. Errors (nothing queued, *ticket untouched): wheel or
 * cb NULL -> UV_EINVAL; no memory -> UV_ENOMEM; max_pending reached ->
 * UV_ENOBUFS; wheel closing (uvtw_wheel_close called, its cb not yet
 * returned) -> UV_ECANCELED. */
UVTW_EXTERN int uvtw_schedule(uvtw_wheel_t *wheel, uint64_t timeout, uvtw_task_cb cb, void *arg,
                  uvtw_ticket_t **ticket);

/* Cancels the task. Returns 0 if the cancel won: the callback will never run
 * (again 0 on a repeat call); its place under max_pending is freed at once
 * and the wheel drops the entry promptly. Returns UV_EALREADY if the callback
 * has started or finished (with status 0, or UV_ECANCELED because the wheel
 * closed). Exactly one of the two, under any interleaving. Any thread, also
 * after the wheel was closed. Lock-free; UV_EINVAL for NULL. */
UVTW_EXTERN int uvtw_ticket_cancel(uvtw_ticket_t *ticket);

/* Gives up the ticket; does not cancel. Exactly once per ticket, any thread,
 * before or after the task ran, was cancelled, or the wheel closed. NULL is
 * ignored. Lock-free. */
UVTW_EXTERN void uvtw_ticket_release(uvtw_ticket_t *ticket);

#ifdef __cplusplus
}
#endif
#endif /* UVTW_H */
