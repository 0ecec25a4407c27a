/* uvtw: a hierarchical timing wheel for libuv loops.
 *
 * One wheel per loop holds any number of timers, each start, stop and
 * restart O(1). The wheel owns three libuv handles (uvtw_wheel_new lists
 * them): a uv_timer_t armed to the earliest pending deadline only (stopped
 * when nothing is pending, so an idle wheel never wakes the loop), a
 * uv_async_t through which other threads hand it tasks, and a helper
 * uv_prepare_t. Callbacks always run on the loop's thread.
 *
 * Threads: the loop's thread is the thread running uv_run on the wheel's
 * loop at the moment of a call, and only that; a loop may be run by several
 * threads over its life, one at a time (made on one thread, run with
 * UV_RUN_NOWAIT there for setup, then run on a worker for good), and the
 * library never takes a thread for the loop's because it was once. Every
 * function here is a loop-thread call: made by the thread that runs the
 * loop, or by any thread while no thread runs it (the hand-off ordering the
 * calls, as libuv requires for handles); except uvtw_schedule,
 * uvtw_ticket_cancel, uvtw_ticket_release, uvtw_version_string,
 * uvtw_late_bucket_max and uvtw_stats_late_quantile, which any thread may
 * call at any time. A loop-thread call made from another thread while the
 * loop runs is a data race that corrupts the wheel, as with uv_timer_t;
 * ThreadSanitizer (-fsanitize=thread) reports it.
 *
 * Mistakes: a release build checks nothing that costs time. The debug
 * build (Meson's -Dchecks, on unless the build type is release, minsize or
 * plain) and AddressSanitizer report the mistakes named below where they
 * happen (test/test_misuse.c shows each; README.md, "Debug your use").
 *
 * Errors are negative libuv error codes (UV_EINVAL, ...); 0 is success. A
 * call that fails changes nothing.
 *
 * Time is milliseconds on the loop's clock (uv_now()), exactly as for
 * uv_timer_t: a wheel timer and a uv_timer_t started at the same moment with
 * the same timeout fire in the same loop iteration, on every libuv from 1.44
 * on, with these exceptions, and no others:
 *   - libuv 1.48 and later: when a callback that runs before the wheel's in
 *     the same timer phase calls uv_update_time(), wheel timers due by the
 *     updated clock run in that phase, one iteration before uv_timer_ts due
 *     in between (that libuv collects a phase's due timers against its time
 *     at the phase's start, and keeps that time nowhere);
 *   - libuv before 1.48, which runs a uv_timer_t started with timeout 0 in
 *     the timer phase under way: a timer started with 0 from inside a
 *     wheel's callback runs one iteration after its uv_timer_t twin; one
 *     started with 0 from a uv_timer_t callback that runs after the wheel's
 *     pass in the same timer phase, in that phase or one iteration later
 *     (one pass per loop iteration, below);
 *   - libuv before 1.48: while a wheel holds such a timer back, its other
 *     timers that come due before the next iteration wait with it, and when
 *     a wheel's callback calls uv_update_time(), that wheel's timers due by
 *     the updated clock run in the next iteration: one iteration after
 *     their uv_timer_t twins, which run in that phase.
 * Guarantees, for every callback:
 *   - never early: it runs only once the clock has reached its deadline;
 *   - order: callbacks run in deadline order, equal deadlines in the order
 *     the timers were started (tasks: in call order per calling thread);
 *   - one pass per loop iteration, on every libuv: an entry made due after
 *     the wheel's pass of an iteration (a timer started with timeout 0 from
 *     inside its wheel's callback, or from a uv_timer_t callback that runs
 *     after that pass) runs in a later pass, the next iteration's at the
 *     latest, as libuv 1.48 and later run a uv_timer_t started with 0 in its
 *     own timer phase. So timers that keep restarting themselves or each
 *     other with 0, on one wheel or several, cannot starve the loop;
 *   - exactly once: a stopped timer or a cancelled task never runs after
 *     the stop or the cancel.
 */
#ifndef UVTW_H
#define UVTW_H

/* uv.h needs POSIX 2001 or later (pthread_rwlock_t, struct addrinfo), which
 * strict ISO C (-std=c11, __STRICT_ANSI__) hides; -pthread (_REENTRANT)
 * alone asks glibc for POSIX 1995 only. The flags uvtw gives its users
 * (pkg-config's Cflags, the CMake target uvtw::uvtw, the Meson dependency)
 * define _DEFAULT_SOURCE, as the compiler does outside strict mode, so
 * `cc -std=c11 $(pkg-config --cflags --libs uvtw)` compiles whatever the
 * order of the includes. A strict translation unit with no feature set
 * stops here, naming the fix, rather than in uv.h. */
#if defined(__STRICT_ANSI__) && !defined(_WIN32) && !defined(_XOPEN_SOURCE) &&                     \
    !defined(_GNU_SOURCE) && !defined(_DEFAULT_SOURCE) && !defined(_BSD_SOURCE) &&                 \
    (!defined(_POSIX_C_SOURCE) || _POSIX_C_SOURCE < 200112L)
#error "uv.h needs POSIX, hidden by -std=c11: use pkg-config --cflags uvtw or -D_DEFAULT_SOURCE"
#endif

#include <stdint.h>
#include <uv.h>

/* UVTW_VERSION_MAJOR, _MINOR, _PATCH: written by Meson from the project's
 * version, installed beside this header. */
#include "uvtw_version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Windows: UVTW_SHARED says uvtw is a DLL (Meson sets it, pkg-config and the
 * CMake package pass it on), so the DLL exports the functions below and its
 * users import them; a static uvtw needs neither. Elsewhere the library is
 * built with hidden visibility and exports only these. */
#if defined(_WIN32) || defined(__CYGWIN__)
#if defined(UVTW_SHARED) && defined(UVTW_BUILDING)
#define UVTW_EXTERN __declspec(dllexport)
#elif defined(UVTW_SHARED)
#define UVTW_EXTERN __declspec(dllimport)
#else
#define UVTW_EXTERN
#endif
#elif defined(UVTW_BUILDING) && defined(__GNUC__)
#define UVTW_EXTERN __attribute__((visibility("default")))
#else
#define UVTW_EXTERN
#endif

typedef struct uvtw_wheel_s uvtw_wheel_t;
typedef struct uvtw_timer_s uvtw_timer_t;
typedef struct uvtw_ticket_s uvtw_ticket_t;

typedef void (*uvtw_timer_cb)(uvtw_timer_t *timer);
/* status 0: the task is due; UV_ECANCELED: the wheel closed before it was. */
typedef void (*uvtw_task_cb)(void *arg, int status);
typedef void (*uvtw_close_cb)(uvtw_wheel_t *wheel, void *arg);

typedef struct uvtw_options_s {
  /* 0 or 1: 1 ms, exact. Larger: every deadline is rounded UP to a multiple
   * of tick_ms of the wheel's clock (absolute values, re-arms included); a
   * deadline already on a multiple stays. Fewer distinct deadlines, fewer
   * wakeups, at the price of firing up to tick_ms - 1 ms later. */
  uint32_t tick_ms;
  /* 0: unlimited. Else at most this many tasks from uvtw_schedule may be
   * pending (queued or in the wheel) at once; past it UV_ENOBUFS. A
   * cancelled task counts until the loop has let go of it (see
   * uvtw_ticket_cancel), so this bounds the memory tasks hold. */
  uint32_t max_pending;
  /* 0: the loop's clock. 1: the wheel's own clock, which starts at
   * uv_now(loop) and moves only with uvtw_wheel_advance and
   * uvtw_wheel_advance_next (for tests: see "Manual clock" below). */
  uint32_t manual_clock;
  /* Room for options of later minor versions; must be zero. A
   * zero-initialised uvtw_options_t always means the defaults. */
  uint32_t reserved[5];
} uvtw_options_t;

/* Buckets of the lateness histogram, uvtw_stats_t.late (see "Lateness"). */
#define UVTW_LATE_BUCKETS 74

typedef struct uvtw_stats_s {
  uint64_t active;         /* armed timers + taken-in tasks not yet run or cancelled */
  uint64_t started;        /* starts, arming again() calls, repeat re-arms, tasks taken in */
  uint64_t stopped;        /* stops of active timers (a restart counts one) + won cancels */
  uint64_t fired;          /* callbacks run with status 0 */
  uint64_t cascaded;       /* entries moved from a coarser level of the wheel to a finer one */
  uint64_t wakeups;        /* times the wheel's uv_timer_t fired */
  uint64_t wasted_wakeups; /* of those, wakeups that ran no callback */
  uint64_t remote_batches; /* times the uv_async_t drained the cross-thread queue */
  uint64_t late_max_ms;    /* largest clock - deadline seen at a callback */
  /* Callbacks run with status 0, by how late they ran: see "Lateness"
   * below for the buckets and uvtw_stats_late_quantile. */
  uint64_t late[UVTW_LATE_BUCKETS];
  /* The sum of those callbacks' lateness, ms (saturating): with the sum of
   * late[], the mean; a Prometheus histogram's _sum. */
  uint64_t late_total_ms;
  uint64_t reserved[7]; /* room for counters of later minor versions; 0 */
} uvtw_stats_t;

/* A loop-thread timer, allocated by the caller (embed it anywhere). Only
 * `data` is for the caller; the other fields are private. 64 bytes on 64-bit
 * targets (a uv_timer_t is 152): one cache line if it starts on a 64-byte
 * boundary, else two, and a restart or a fire touches both
 * (README, "Performance"). An inactive timer holds nothing: its memory
 * may be freed or reused at any time, inside its own callback too (a
 * timeout that frees the connection embedding its timer): the library
 * touches a timer after its callback returns only if the callback started
 * it again. A timer belongs to its wheel until the wheel's close callback
 * has run; after it, stop, is_active, get_due_in and has_ref still answer
 * (the timer is inactive), and uvtw_timer_init may give it to another
 * wheel; anything else reads the freed wheel (a use after free, which
 * AddressSanitizer reports). */
struct uvtw_timer_s {
  void *data;
  struct {
    void *link_[2];
    uint64_t deadline_;
    uint64_t seq_;
  } node_;
  uintptr_t wheel_; /* the wheel's address; low bits: flags (src/core.h) */
  uvtw_timer_cb cb_;
  uint64_t repeat_;
};

/* ---- The wheel (loop thread only) ------------------------------------- */

/* Creates a wheel on `loop` (opts NULL or all zero: tick 1 ms, no task
 * limit, the loop's clock) and stores it in *out. Initializes one
 * uv_timer_t, one uv_async_t and one unreferenced uv_prepare_t on the loop,
 * so uv_walk sees them and a loop with an open wheel cannot be closed with
 * uv_loop_close until the wheel is. Loop-thread call (see Threads above).
 * Until the loop's first iteration has run (or a timer was started) the
 * uv_async_t is referenced, so a task scheduled before the loop first runs
 * keeps it alive; uv_run(UV_RUN_DEFAULT) on an otherwise idle loop returns
 * after that one iteration, without waiting.
 * Errors: loop or out NULL, manual_clock other than 0 or 1, or a reserved
 * field not 0 -> UV_EINVAL; no memory -> UV_ENOMEM; or the error of
 * uv_async_init. Cost: one allocation of about 150 KiB, plus a small one
 * shared with tickets; timers add nothing to it. */
UVTW_EXTERN int uvtw_wheel_new(uv_loop_t *loop, const uvtw_options_t *opts, uvtw_wheel_t **out);

/* Closes the wheel. Pending timers become inactive and never fire. Every
 * pending task's callback runs once with UV_ECANCELED, on the loop thread,
 * inside this call (tasks whose cancel returned 0 never run). Its handles
 * are then closed, and cb(wheel, arg) runs once they are, from the loop; the
 * wheel pointer is valid until cb returns and must not be used afterwards.
 * From this call on, starts, agains and schedules get UV_ECANCELED; stops,
 * cancels and releases still work. Allowed inside any wheel callback. A
 * second call is ignored until the close callback has run (with cb NULL:
 * until the loop has closed the wheel's handles); then the wheel is freed,
 * and any call on it, this one too, is a use after free, which
 * AddressSanitizer reports. `cb` may be NULL. Cost: O(pending entries).
 * Close the wheel before the loop's other handles. A program that closes
 * every handle itself (a uv_walk that closes each one not already closing,
 * the wheel's among them) may call this only after uv_run has finished
 * those closes, even after uv_loop_close, also from a callback that
 * uvtw_wheel_advance runs: the wheel then touches neither its handles nor
 * the loop, ends pending tasks with UV_ECANCELED, runs cb (inside this
 * call, or when that advance's pass ends) and frees itself. Such a program
 * must stop other threads' uvtw_schedule calls before the walk closes the
 * wheel's uv_async_t: the library cannot see a close it did not make, and
 * libuv before 1.45 aborts on a send to a closed handle. */
UVTW_EXTERN void uvtw_wheel_close(uvtw_wheel_t *wheel, uvtw_close_cb cb, void *arg);

/* The loop the wheel runs on. O(1). */
UVTW_EXTERN uv_loop_t *uvtw_wheel_loop(const uvtw_wheel_t *wheel);

/* A referenced wheel (the default) keeps the loop alive exactly while a
 * referenced timer or a task is pending, like an active uv_timer_t does; an
 * unreferenced one never does, whatever its timers say. Idempotent, O(1). */
UVTW_EXTERN void uvtw_wheel_ref(uvtw_wheel_t *wheel);
UVTW_EXTERN void uvtw_wheel_unref(uvtw_wheel_t *wheel);

/* Milliseconds until the next callback is due on the wheel's clock: 0 if one
 * is overdue, -1 if nothing is pending, INT64_MAX if the earliest entry is
 * further away than that (a saturated deadline never fires). Tasks still in
 * the cross-thread queue are not counted. Cost: O(levels) plus a walk of
 * the one slot that holds the earliest entries. */
UVTW_EXTERN int64_t uvtw_wheel_next_due(const uvtw_wheel_t *wheel);

/* Copies the wheel's counters into *out. O(1): a copy of the struct. The
 * counters only grow, so what happened between two copies is their
 * difference (see "Lateness" below). */
UVTW_EXTERN void uvtw_wheel_stats(const uvtw_wheel_t *wheel, uvtw_stats_t *out);

/* The library's version, "MAJOR.MINOR.PATCH". Any thread. */
UVTW_EXTERN const char *uvtw_version_string(void);

/* ---- Loop-thread timers (mirror uv_timer_*) ---------------------------- */
/* All of these are O(1) in the number of pending timers, allocate nothing,
 * and may be called from inside any wheel callback, on any timer, including
 * the one firing and others due in the same pass. */

/* Binds `timer` to `wheel`, inactive and referenced. Leaves timer->data
 * alone. Call it once before any other uvtw_timer_* call on the timer, and
 * again only while the timer is inactive (after its wheel's close callback,
 * to give it to another wheel). Initialising an active timer (a struct
 * reused without a stop) corrupts the wheel's lists: stop it first. Not
 * started again, the timer crashes the program (a NULL dereference) at the
 * wheel's next pass, in every build. Started again, the timers filed
 * beside its old place may never fire, uv_run may never return (a pass
 * loops, or waits on the old start still counted as pending), or the
 * program crashes later. The debug build (-Dchecks) stops the program with
 * a message if a stop, start or callback beside the old place unlinks an
 * entry there before a pass walks it; otherwise it fails as a release
 * build does. */
UVTW_EXTERN void uvtw_timer_init(uvtw_wheel_t *wheel, uvtw_timer_t *timer);

/* Arms the timer to fire `timeout` ms from now on the wheel's clock
 * (uv_now(loop) for a loop-clock wheel), then every `repeat` ms if repeat >
 * 0: re-armed to now + repeat just before each callback, so it is active
 * inside its callback, where a stop, start or again overrides the re-arm.
 * A one-shot timer is inactive inside its callback. Restarts an active
 * timer (never a duplicate). A deadline that overflows saturates: the timer
 * never fires but stays active and stoppable.
 * Errors: timer or cb NULL, or a timer initialized without a wheel ->
 * UV_EINVAL; wheel closing (from uvtw_wheel_close until its callback) ->
 * UV_ECANCELED. */
UVTW_EXTERN int uvtw_timer_start(uvtw_timer_t *timer, uvtw_timer_cb cb, uint64_t timeout,
                                 uint64_t repeat);

/* Disarms the timer: its callback will not run. A no-op returning 0 if the
 * timer is inactive (so also on a closing or closed wheel, whose timers are
 * all inactive). Errors: timer NULL -> UV_EINVAL. */
UVTW_EXTERN int uvtw_timer_stop(uvtw_timer_t *timer);

/* Restarts the timer with timeout = repeat, as uv_timer_again does. With
 * repeat == 0 it does nothing and returns 0: an active one-shot timer stays
 * active at its deadline, as with uv_timer_again in libuv's code (libuv's
 * documentation says it stops the timer; its code, which programs rely on,
 * does not). Errors: timer NULL or never started -> UV_EINVAL; wheel
 * closing -> UV_ECANCELED. */
UVTW_EXTERN int uvtw_timer_again(uvtw_timer_t *timer);

/* Sets the repeat interval used by the next re-arm or again(); an active
 * timer keeps its current deadline. */
UVTW_EXTERN void uvtw_timer_set_repeat(uvtw_timer_t *timer, uint64_t repeat);
UVTW_EXTERN uint64_t uvtw_timer_get_repeat(const uvtw_timer_t *timer);

/* Milliseconds until the timer is due on the wheel's clock; 0 if due or
 * inactive. */
UVTW_EXTERN uint64_t uvtw_timer_get_due_in(const uvtw_timer_t *timer);

/* Non-zero while the timer is armed. */
UVTW_EXTERN int uvtw_timer_is_active(const uvtw_timer_t *timer);

/* Like uv_ref/uv_unref on a uv_timer_t: an active unreferenced timer still
 * fires when the loop runs, but does not by itself keep uv_run(loop,
 * UV_RUN_DEFAULT) from returning. The setting survives stop and start;
 * uvtw_timer_init makes a timer referenced. has_ref: non-zero if
 * referenced. */
UVTW_EXTERN void uvtw_timer_ref(uvtw_timer_t *timer);
UVTW_EXTERN void uvtw_timer_unref(uvtw_timer_t *timer);
UVTW_EXTERN int uvtw_timer_has_ref(const uvtw_timer_t *timer);

/* ---- Any-thread tasks ----------------------------------------------------- */
/* Tasks are one-shot callbacks that any thread may put on the wheel. Every
 * task goes through a lock-free queue that the loop takes in at the end of
 * each of the wheel's passes and in the poll phase (the wheel's uv_async_t),
 * so in the same iteration if it was queued before the poll phase ends. A
 * task scheduled from inside one of the wheel's own callbacks, or before
 * the loop first runs, keeps the loop alive from the call. One scheduled
 * from anywhere else (another thread, or another handle's callback) keeps
 * it alive once the loop has taken it in: the uv_async_t is unreferenced
 * once the loop has run, because a handle cannot be referenced from
 * another thread, so keep the loop alive by a handle of your own while
 * tasks may still arrive. */

/* Schedules cb(arg, 0) to run on the loop thread `timeout` ms after this
 * call. On a loop-clock wheel the deadline is taken now with uv_hrtime(), so
 * time in the queue does not lengthen it (it may read up to 1 ms early
 * against uv_hrtime(), from truncation to milliseconds); on a manual-clock
 * wheel it is the wheel's time when the task is taken in, plus `timeout`.
 * Tasks from one thread with equal timeouts run in call order.
 * If `ticket` is non-NULL, *ticket receives a handle that must be released
 * exactly once with uvtw_ticket_release; NULL means fire-and-forget.
 * *ticket is written before the task can run, so its callback may read it
 * from where `ticket` points (a field of `arg`, say).
 * Any thread. Cost: a few atomic operations, plus one uv_async_send when
 * the queue was empty. Memory: a task takes a 128-byte block of a 4 KiB
 * page shared with tasks of about the same timeout; memory goes back to
 * the system as tasks end and tickets are released, beyond a fixed part
 * per wheel of at most 8 MiB kept for reuse (its parts: docs/design.md).
 * A task alive, or a ticket unreleased, holds 8 KiB at most (its page and
 * a header page), so release tickets when done with them.
 * Errors (nothing queued, *ticket untouched): wheel or cb NULL -> UV_EINVAL;
 * no memory -> UV_ENOMEM; max_pending reached -> UV_ENOBUFS; wheel closing
 * (from uvtw_wheel_close until its callback returns) -> UV_ECANCELED. A call
 * must not overlap the return of the close callback: the wheel is freed
 * then. */
UVTW_EXTERN int uvtw_schedule(uvtw_wheel_t *wheel, uint64_t timeout, uvtw_task_cb cb, void *arg,
                              uvtw_ticket_t **ticket);

/* Cancels the task. Returns 0 if the cancel won: the callback will never run
 * (again 0 on a repeat call), and the wheel drops the entry promptly. The
 * task keeps its place under max_pending until the loop has let go of it,
 * at its next take-in of the queue (not at the deadline), so max_pending
 * bounds the memory tasks hold even while the loop is busy. Returns
 * UV_EALREADY if the callback has started or finished (with status 0, or
 * UV_ECANCELED because the wheel closed). Exactly one of the two, under any interleaving. Any
 * thread, also after the wheel was closed and freed. Lock-free, O(1).
 * Errors: ticket NULL -> UV_EINVAL. */
UVTW_EXTERN int uvtw_ticket_cancel(uvtw_ticket_t *ticket);

/* Gives up the ticket; does not cancel. Exactly once per ticket, any thread,
 * before or after the task ran, was cancelled, or the wheel closed. A
 * ticket holds the task's memory (see uvtw_schedule). NULL is ignored.
 * Lock-free, O(1). After the release the ticket must not be used: once the
 * task has ended too, its block goes back, and a second release or a
 * cancel then is reported by AddressSanitizer (the block is poisoned), a
 * second release also by the debug build, which aborts with a message. */
UVTW_EXTERN void uvtw_ticket_release(uvtw_ticket_t *ticket);

/* ---- Manual clock (wheels made with manual_clock = 1) ------------------- */
/* A manual wheel's time starts at uv_now(loop) when the wheel is made and
 * moves only with the two calls below; timer deadlines, repeats,
 * uvtw_timer_get_due_in and uvtw_wheel_next_due count on it. Its callbacks
 * run only inside these calls, on the loop thread. It never arms its
 * uv_timer_t and never keeps the loop alive by what it holds. Every other
 * guarantee holds on its clock as on the loop's.
 *
 * One pass: the wheel's time is set to some T, and every callback due at T
 * when the pass begins runs, in deadline order, each seeing uvtw_wheel_now()
 * equal to T. An entry made due during the pass (a timer started with
 * timeout 0 at T, say) waits for the next pass. One uvtw_wheel_advance call
 * runs its passes at strictly increasing times (so at most one per
 * millisecond, per tick when tick_ms > 1), so it always returns, whatever
 * the callbacks do: what a pass at T makes due runs in the same call's pass
 * at T + 1 if the call goes that far, else in the next call.
 */

/* The wheel's time in ms: uv_now(loop) for a loop-clock wheel, else the
 * manual clock's. O(1). */
UVTW_EXTERN uint64_t uvtw_wheel_now(const uvtw_wheel_t *wheel);

/* Loop thread. Takes in the queued tasks, then moves the
 * wheel's time forward by `ms`, running one pass at the current time if
 * something is due, then one at each later time at which something is due,
 * up to and including the new time, which the wheel then keeps. Returns 0.
 * Errors: wheel NULL or on the loop's clock -> UV_EINVAL; wheel closing ->
 * UV_ECANCELED (also inside a callback that closed it); called from inside
 * one of this wheel's callbacks -> UV_EBUSY.
 * Cost: O(entries fired + passes). */
UVTW_EXTERN int uvtw_wheel_advance(uvtw_wheel_t *wheel, uint64_t ms);

/* Loop thread. Takes in queued tasks, moves the wheel's time to the
 * earliest pending deadline (not at all if something is already due) and
 * runs that one pass. Returns the milliseconds the time moved (>= 0), or
 * UV_EAGAIN when nothing pending can ever fire, or the errors of
 * uvtw_wheel_advance. `while (uvtw_wheel_advance_next(w) >= 0)` runs a test
 * until nothing is pending (forever if a callback always restarts itself). */
UVTW_EXTERN int64_t uvtw_wheel_advance_next(uvtw_wheel_t *wheel);

/* ---- Lateness (how late the loop runs its callbacks) --------------------- */
/* Every callback run with status 0, timers (each run of a repeating one)
 * and tasks alike, counts once in uvtw_stats_t.late[i], in the bucket that
 * holds its lateness: the wheel's clock at the callback minus its deadline,
 * in ms (0 when on time; with tick_ms > 1 the deadline is the rounded-up
 * one), and adds that lateness to late_total_ms, so that the mean of a
 * window (and a Prometheus histogram's _sum) comes from two snapshots. A
 * task's callback with UV_ECANCELED is not counted. A wheel that
 * holds a server's request timeouts samples the loop's delay at every one
 * of them, not at a fixed rate: a callback that blocks the loop for 200 ms
 * shows up in the lateness of every timer due meanwhile.
 *
 * A manual-clock wheel counts every callback 0 ms late (and keeps
 * late_max_ms and late_total_ms at 0): its time moves in the test's steps,
 * which say nothing about the loop, even for an entry made due inside a
 * pass, which runs one tick later.
 *
 * Counting adds nothing to start, stop or restart, and to a fire a bit
 * scan and an increment: no allocation, no call into libuv.
 *
 * The buckets, log-linear like HdrHistogram's with four buckets per power
 * of two:
 *
 *     bucket i     lateness, ms                      width
 *     0 .. 7       i (one value each)                1
 *     8 .. 11      8-9, 10-11, 12-13, 14-15          2
 *     12 .. 15     16-19, 20-23, 24-27, 28-31        4
 *     i >= 4       from (4 + i % 4) << (i / 4 - 1)   1 << (i / 4 - 1)
 *     73 (last)    655,360 (10 min 55 s) and more    open
 *
 * Why this layout: small values are exact (a loop that keeps up runs its
 * callbacks 0 or 1 ms late, from the clock's millisecond steps), and no
 * bucket is wider than a quarter of its lowest value, so a quantile, given
 * as its bucket's upper bound, is never below the true value and at most a
 * quarter above it. Four buckets per power of two is the coarsest
 * power-of-two split that keeps that, so 74 buckets (592 bytes) reach past
 * ten minutes. A value's bucket is its highest set bit
 * and the two bits below it: a bit scan, a shift and an add, no table and
 * no loop, which is what lets every fire count. */

/* The largest lateness in ms that bucket i holds: bucket i holds
 * uvtw_late_bucket_max(i - 1) + 1 (0 for i == 0) to uvtw_late_bucket_max(i).
 * UINT64_MAX for the last, open-ended bucket and for i >= UVTW_LATE_BUCKETS.
 * Any thread; O(1); no errors. */
UVTW_EXTERN uint64_t uvtw_late_bucket_max(unsigned i);

/* The q-quantile (0 <= q <= 1: 0.5 the median, 0.99 the p99, 1 the largest)
 * of the lateness of the n callbacks counted in `now` but not in `since`
 * (since NULL: all of `now`), two copies made by uvtw_wheel_stats, `since`
 * the earlier. By nearest rank: the first bucket, in order of lateness,
 * whose cumulative count reaches max(1, ceil(q * n)), given as its upper
 * bound in ms (uvtw_late_bucket_max); for the open last bucket, its lowest
 * value. So a p99 of 15 says: at least 99% of the callbacks ran at most
 * 15 ms late, and the true p99 is at least 14 (the bucket 14-15).
 * Any thread: it reads only the two structs, which the caller owns (copies,
 * never the wheel's own). O(UVTW_LATE_BUCKETS); allocates nothing.
 * Errors: now NULL, q outside [0, 1] or NaN, or a `since` that counts more
 * than `now` in some bucket (not an earlier copy of the same wheel) ->
 * UV_EINVAL; else n == 0 (no callback in the window) -> UV_EAGAIN. */
UVTW_EXTERN int64_t uvtw_stats_late_quantile(const uvtw_stats_t *now, const uvtw_stats_t *since,
                                             double q);

#ifdef __cplusplus
}
#endif
#endif /* UVTW_H */
