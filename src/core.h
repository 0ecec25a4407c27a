/* The wheel object and the scheduling core's calls (core.c). Nothing here
 * is public. Each file calls only the files below it, and includes only
 * their headers:
 *
 *   life.c     (life.h) the wheel's life: new, close, references, stats;
 *              its handles, and the ring of the wheels of one loop
 *   manual.c   the manual clock: uvtw_wheel_advance, _advance_next, _now
 *   timer.c    (timer.h) uvtw_timer_*: loop-thread timers, an entry each
 *   tasks.c    (tasks.h) uvtw_schedule and tickets: cross-thread tasks,
 *              an entry each
 *   core.c     (core.h) the scheduling core: the clock and ticks, filing
 *              and unlinking entries, arming the uv_timer_t, passes,
 *              references
 *   wheel.c mpsc.c pool.c late.c    pure: no libuv, no wheel object
 *
 * The core knows entries with a callback, not timers or tasks: life.c gives
 * it, at uvtw_wheel_new, the callback of each kind of entry (timer.c's and
 * tasks.c's trampolines) and what runs where a pass ends. */
#ifndef UVTW_CORE_H
#define UVTW_CORE_H

#include "check.h"
#include "late.h"
#include "uvtw.h"
#include "wheel.h" /* and with it stdbool.h, stddef.h, stdint.h */

#define container_of(ptr, type, member) ((type *)(void *)((char *)(ptr)-offsetof(type, member)))

/* Flags in an entry's `wheel_` (the wheel's address is 8-byte aligned). */
#define ENTRY_UNREF ((uintptr_t)1) /* does not keep the loop alive */
#define ENTRY_TASK ((uintptr_t)2)  /* a task's entry (tasks.c); else a timer's (timer.c) */

typedef struct uvtw_shared_s uvtw_shared_t;

/* The wheel's life and modes, in one word as libuv keeps a handle's. */
enum {
  WHEEL_CLOSING = 1,  /* uvtw_wheel_close was called */
  WHEEL_MANUAL = 2,   /* on the wheel's own clock */
  WHEEL_REF = 4,      /* uvtw_wheel_ref (the default) or uvtw_wheel_unref */
  WHEEL_LOOP_RAN = 8, /* the loop has run an iteration, or a timer was started */
};

/* What the wheel's uv_timer_t and uv_prepare_t are doing (core.c). */
enum arming {
  ARM_IDLE,      /* both stopped: nothing pending, a manual clock, or closing */
  ARM_TIMER,     /* the uv_timer_t started for armed_at */
  ARM_COLLECTED, /* due in the timer phase under way; the pass's entries are expired */
  ARM_IN_PASS,   /* running a pass */
  ARM_WAIT,      /* libuv < 1.48, after a pass: the uv_timer_t due now ends the phase */
  ARM_HELD,      /* libuv < 1.48, after WAIT: entries due in that phase wait for the prepare */
};

/* How the core arms on one libuv (core.c), chosen once at uvtw_wheel_new. */
typedef struct arming_policy_s {
  bool collects; /* the timer phase collects its due timers first (libuv >= 1.48) */
  enum arming after_pass;
  /* The arming after an entry due now is filed on an IDLE or TIMER wheel. */
  enum arming (*due_filed)(const uvtw_wheel_t *w, uint64_t now);
} arming_policy_t;

struct uvtw_wheel_s {
  uv_loop_t *loop;
  unsigned flags; /* WHEEL_* */
  enum arming arming;
  arming_policy_t policy;
  uint32_t tick_ms;
  int open_handles;      /* counted down as the handles close (life.c) */
  uvtw_wheel_t *peer;    /* the next open wheel on the same loop: a ring (life.c) */
  uvtw_shared_t *shared; /* what other threads and tickets touch (tasks.c) */
  uint64_t armed_at;     /* ticks; a filing earlier than this re-arms (0: none does) */
  uint64_t manual_now;   /* ms, the manual clock */
  uint64_t unrefs;       /* pending timers that do not keep the loop alive */
  uvtw_stats_t stats;    /* counters kept as they happen; completed on read */
  /* Given by life.c: each kind of entry's callback ([0] timers, [1] tasks),
   * and what runs where a pass ends: false if the wheel closed in the pass
   * (then it may be gone). */
  void (*fire[2])(uvtw_timer_t *entry);
  bool (*pass_end)(uvtw_wheel_t *w);
  uvtw_close_cb close_cb;
  void *close_arg;
  uv_timer_t timer;
  uv_async_t async;
  uv_prepare_t prepare; /* libuv < 1.48: ends WAIT and HELD in the next iteration */
  wheel_t wheel;
};

/* Handles closed by the program (a uv_walk) are never touched again. */
static inline bool uvtw__handle_open(const void *handle) {
  return !uv_is_closing((const uv_handle_t *)handle);
}

static inline bool uvtw__closing(const uvtw_wheel_t *w) {
  return w->flags & WHEEL_CLOSING;
}

/* The core runs a pass of `w`: an arming state (ARM_IN_PASS: the
 * uv_timer_t is left where libuv has it), not one of the wheel's life. A
 * close in the pass ends it (uvtw__core_close); life.c asks at the close
 * whether to free the wheel where the pass ends, manual.c refuses to
 * advance inside a pass. */
static inline bool uvtw__in_pass(const uvtw_wheel_t *w) {
  return w->arming == ARM_IN_PASS;
}

/* An entry's node (const or not, as container_of). */
static inline wheel_node_t *uvtw__node_of(const uvtw_timer_t *entry) {
  return (wheel_node_t *)(uintptr_t)&entry->node_;
}

static inline uvtw_wheel_t *uvtw__wheel_of(const uvtw_timer_t *entry) {
  return (uvtw_wheel_t *)(entry->wheel_ & ~(ENTRY_UNREF | ENTRY_TASK));
}

/* An entry in no list, of `w`, with ENTRY_* `flags`. */
static inline void uvtw__entry_init(uvtw_timer_t *entry, uvtw_wheel_t *w, uintptr_t flags) {
  uvtw__node_of(entry)->next = uvtw__node_of(entry)->prev = NULL;
  entry->wheel_ = (uintptr_t)w | flags;
  entry->cb_ = NULL;
  entry->repeat_ = 0;
}

void uvtw__core_init(uvtw_wheel_t *w, uv_loop_t *loop, uint32_t tick_ms, bool manual);

/* The wheel's clock in ms. */
static inline uint64_t uvtw__clock_ms(const uvtw_wheel_t *w) {
  return w->flags & WHEEL_MANUAL ? w->manual_now : uv_now(w->loop);
}

/* Ticks to ms, saturated. */
static inline uint64_t uvtw__ms_of(const uvtw_wheel_t *w, uint64_t ticks) {
  return ticks > UINT64_MAX / w->tick_ms ? UINT64_MAX : ticks * w->tick_ms;
}

/* The clock in ticks, rounded down: what is due now. */
static inline uint64_t uvtw__now_ticks(const uvtw_wheel_t *w) {
  return uvtw__clock_ms(w) / w->tick_ms;
}

/* A deadline in ms to ticks, rounded up (UINT64_MAX, saturated, stays). */
static inline uint64_t uvtw__ticks_up(const uvtw_wheel_t *w, uint64_t ms) {
  if (w->tick_ms == 1 || ms == UINT64_MAX)
    return ms;
  uint64_t ticks = ms / w->tick_ms + (ms % w->tick_ms != 0);
  /* Rounded up to UINT64_MAX ms or past it, a deadline saturates too. */
  return uvtw__ms_of(w, ticks) == UINT64_MAX ? UINT64_MAX : ticks;
}
/* References the handles as the pending entries and the flags say. */
void uvtw__update_refs(uvtw_wheel_t *w);
/* The loop has run an iteration, or a timer was started: the uv_async_t
 * lets go of the loop (WHEEL_LOOP_RAN). */
void uvtw__loop_ran(uvtw_wheel_t *w);
/* Sets (ENTRY_UNREF) or clears (0) an entry's ENTRY_UNREF; a pending entry
 * moves between the referenced entries and the unref'd ones. */
void uvtw__entry_set_unref(uvtw_timer_t *entry, uintptr_t unref);
/* Files an entry that is in no list at `deadline` (ticks) and decides the
 * arming. */
void uvtw__entry_add(uvtw_wheel_t *w, uvtw_timer_t *entry, uint64_t deadline);
/* Counts a callback about to run with status 0 for an entry due at
 * `deadline` (ticks): fired, and its lateness. Inline: every fire runs it. */
static inline void uvtw__note_fired(uvtw_wheel_t *w, uint64_t deadline) {
  uint64_t now = uvtw__clock_ms(w);
  uint64_t due = uvtw__ms_of(w, deadline);
  /* A manual clock measures the test's steps, not the loop: 0 ms. */
  uint64_t late = now > due && !(w->flags & WHEEL_MANUAL) ? now - due : 0;
  w->stats.fired++;
  w->stats.late[uvtw__late_bucket(late)]++;
  w->stats.late_total_ms = uvtw__add_saturating(w->stats.late_total_ms, late);
  if (late > w->stats.late_max_ms)
    w->stats.late_max_ms = late;
}

/* Moves the manual clock to `ms`, never back. */
static inline void uvtw__manual_set(uvtw_wheel_t *w, uint64_t ms) {
  if (ms > w->manual_now)
    w->manual_now = ms;
}
/* The manual clock's pass (manual.c): moves the clock to `now` (ticks),
 * runs one pass there, then pass_end, then arms for the next one; false if
 * a callback closed the wheel (it may be gone). */
bool uvtw__pass(uvtw_wheel_t *w, uint64_t now);
/* Pops and runs every expired entry's callback, in firing order (a pass,
 * and uvtw_wheel_close's tasks). */
void uvtw__fire_expired(uvtw_wheel_t *w);
/* uvtw_wheel_close: the handles are stopped for good (unless closed by the
 * program), a pass under way ends (IDLE), every timer's entry is unlinked
 * without its callback, and every task's moves to the expired list, in
 * firing order, for uvtw__fire_expired. */
void uvtw__core_close(uvtw_wheel_t *w);

/* Files an entry that is in no list at `deadline` (ticks) in the pure
 * wheel, deciding nothing: the first referenced entry references the
 * handles. Inline: every start runs it. */
static inline void uvtw__entry_insert(uvtw_wheel_t *w, uvtw_timer_t *entry, uint64_t deadline) {
  uvtw__wheel_insert(&w->wheel, uvtw__node_of(entry), deadline);
  if (entry->wheel_ & ENTRY_UNREF)
    w->unrefs++;
  else if (w->wheel.count - w->unrefs == 1)
    uvtw__update_refs(w);
}

/* Files a pending entry again at `deadline` (ticks), which the armed
 * uv_timer_t does not pass: the counts and the arming stay. A restart is
 * counted as a stop. Inline: every restart runs it. */
static inline void uvtw__entry_refile(uvtw_wheel_t *w, uvtw_timer_t *entry, uint64_t deadline) {
  w->stats.stopped++;
  uvtw__wheel_refile(&w->wheel, uvtw__node_of(entry), deadline);
}

/* Whether filing an entry not due at `deadline` (ticks) may arm: on an
 * empty wheel, earlier than armed_at, or on a HELD wheel (which a filing
 * arms). If not, uvtw__entry_insert (or, for a pending entry,
 * uvtw__entry_refile) files it as uvtw__entry_add would. */
static inline bool uvtw__filing_may_arm(const uvtw_wheel_t *w, uint64_t deadline) {
  return w->wheel.count == 0 || deadline < w->armed_at || w->arming == ARM_HELD;
}

/* See uvtw__entry_unlinked. */
void uvtw__release_loop(uvtw_wheel_t *w);

/* After `entry` is unlinked: updates the counts, and lets go of the loop
 * and stops the uv_timer_t when the last referenced entry, or the last
 * entry, has left. Inline, as uvtw__entry_insert. */
static inline void uvtw__entry_unlinked(uvtw_wheel_t *w, const uvtw_timer_t *entry) {
  bool unref = entry->wheel_ & ENTRY_UNREF;
  if (unref)
    w->unrefs--;
  if ((!unref && w->wheel.count == w->unrefs) || w->wheel.count == 0)
    uvtw__release_loop(w);
}

/* Unlinks a pending entry; stops the uv_timer_t if nothing is left. */
static inline void uvtw__entry_remove(uvtw_wheel_t *w, uvtw_timer_t *entry) {
  uvtw__wheel_remove(&w->wheel, uvtw__node_of(entry));
  uvtw__entry_unlinked(w, entry);
}

/* A stop (uvtw_timer_stop, or a restart's): a pending entry is unlinked and
 * counted in `stopped`. */
static inline void uvtw__entry_stop(uvtw_wheel_t *w, uvtw_timer_t *entry) {
  if (wheel_node_linked(uvtw__node_of(entry))) {
    w->stats.stopped++;
    uvtw__entry_remove(w, entry);
  }
}

#ifdef UVTW_CHECKS
/* The arming's part of uvtw__check (life.h). */
const char *uvtw__arming_check(const uvtw_wheel_t *w);
#endif

#endif
