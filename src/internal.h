/* What loop.c and tasks.c share: the wheel object and the calls between the
 * two. Nothing here is public. */
#ifndef UVTW_INTERNAL_H
#define UVTW_INTERNAL_H

#include "uvtw.h"
#include "wheel.h" /* and with it stdbool.h, stddef.h, stdint.h */

#define container_of(ptr, type, member) ((type *)(void *)((char *)(ptr)-offsetof(type, member)))

/* Flags in an entry's `wheel_` (the wheel's address is 8-byte aligned). */
#define ENTRY_UNREF ((uintptr_t)1) /* does not keep the loop alive */
#define ENTRY_TASK ((uintptr_t)2)  /* a task's entry (tasks.c), not a timer */
#define ENTRY_FLAGS (ENTRY_UNREF | ENTRY_TASK)

typedef struct uvtw_shared_s uvtw_shared_t;

/* What the wheel's uv_timer_t is doing: the one state loop.c's arming logic
 * decides from (see the top of loop.c). */
enum arming {
  ARM_IDLE,      /* stopped: nothing pending, or a manual clock */
  ARM_TIMER,     /* started for armed_at */
  ARM_COLLECTED, /* due in the timer phase under way; the pass's entries are expired */
  ARM_IN_PASS,   /* running a pass */
  ARM_WAIT,      /* libuv < 1.48, after a pass: the next pass waits for the prepare */
  ARM_CLOSED,    /* uvtw_wheel_close was called */
};

struct uvtw_wheel_s {
  uv_loop_t *loop;
  uvtw_shared_t *shared; /* what other threads and tickets touch (tasks.c) */
  uvtw_wheel_t *peer;    /* the next open wheel on the same loop: a ring */
  enum arming arming;
  uint32_t tick_ms;
  bool manual;        /* on the wheel's own clock */
  bool pass_by_timer; /* libuv >= 1.48 runs a timer started in its timer phase next time */
  bool referenced;    /* uvtw_wheel_ref / uvtw_wheel_unref */
  bool loop_ran;      /* the loop has run an iteration, or a timer was started */
  int handles_closed;
  uint64_t armed_at;   /* ticks; a filing earlier than this re-arms (0: none does) */
  uint64_t manual_now; /* ms, the manual clock */
  uint64_t unrefs;     /* pending timers that do not keep the loop alive */
  uvtw_stats_t stats;  /* counters kept as they happen; completed on read */
  uvtw_close_cb close_cb;
  void *close_arg;
  uv_timer_t timer;
  uv_async_t async;
  uv_prepare_t prepare; /* libuv < 1.48: ends ARM_WAIT in the next iteration */
  wheel_t wheel;
};

static inline bool uvtw__closing(const uvtw_wheel_t *w) {
  return w->arming == ARM_CLOSED;
}

/* loop.c, for tasks.c */

/* The wheel's clock in ms. */
uint64_t uvtw__clock_ms(const uvtw_wheel_t *w);
/* A deadline in ms to ticks, rounded up (UINT64_MAX, saturated, stays). */
uint64_t uvtw__ticks_up(const uvtw_wheel_t *w, uint64_t ms);
/* Files an entry that is in no list at `deadline` (ticks) and decides the
 * arming (loop.c's file_entry). */
void uvtw__entry_add(uvtw_wheel_t *w, uvtw_timer_t *entry, uint64_t deadline);
/* Unlinks a pending entry; stops the uv_timer_t if nothing is left. */
void uvtw__entry_remove(uvtw_wheel_t *w, uvtw_timer_t *entry);
/* Counts a callback about to run with status 0 for an entry due at
 * `deadline` (ticks): fired, and its lateness. */
void uvtw__note_fired(uvtw_wheel_t *w, uint64_t deadline);

/* tasks.c, for loop.c: its life cycle and two hooks */

int uvtw__tasks_open(uvtw_wheel_t *w, uint32_t max_pending);
void uvtw__tasks_release(uvtw_shared_t *sh);
/* The drain hook: takes in everything queued (at every pass's end and in
 * the uv_async_t's callback); false if nothing was. */
bool uvtw__tasks_drain(uvtw_wheel_t *w);
/* The close hook: shuts the queue, waits for senders to leave it, and ends
 * every task still queued with UV_ECANCELED. */
void uvtw__tasks_close(uvtw_wheel_t *w);
/* Takes from `active` the tasks another thread cancelled that the loop has
 * not let go of yet. */
void uvtw__tasks_stats(const uvtw_wheel_t *w, uvtw_stats_t *out);
/* The bytes the wheel's task blocks hold (pool.c), for tests. */
uint64_t uvtw__tasks_bytes(const uvtw_wheel_t *w);

#ifdef UVTW_CHECKS
/* The invariant checker (-Dchecks): NULL, or the invariant that fails.
 * Loop thread, outside the wheel's callbacks; O(slots + entries). loop.c
 * checks the arming, the counts and the references, tasks.c each task in
 * the wheel and the counters other threads share. */
const char *uvtw__check(const uvtw_wheel_t *w);
/* One invariant of a checker: returns its name if it fails. */
#define INVARIANT(holds, name)                                                                     \
  if (!(holds))                                                                                    \
  return name
bool uvtw__task_check(const uvtw_timer_t *entry, uint64_t *cancelled);
int64_t uvtw__tasks_linked(const uvtw_wheel_t *w);
const char *uvtw__tasks_check(const uvtw_wheel_t *w, int64_t linked, uint64_t tasks,
                              uint64_t cancelled);
#endif

#endif
