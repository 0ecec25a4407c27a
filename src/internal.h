/* What loop.c and tasks.c share: the wheel object and the calls between the
 * two. Nothing here is public. */
#ifndef UVTW_INTERNAL_H
#define UVTW_INTERNAL_H

#include "uvtw.h"
#include "wheel.h" /* and with it stdbool.h, stddef.h, stdint.h */

#define container_of(ptr, type, member) ((type *)(void *)((char *)(ptr)-offsetof(type, member)))

typedef struct uvtw_shared_s uvtw_shared_t;

struct uvtw_wheel_s {
  uv_loop_t *loop;
  uvtw_shared_t *shared; /* what other threads and tickets touch (tasks.c) */
  uint32_t tick_ms;
  bool manual;             /* on the wheel's own clock */
  bool pass_by_timer;      /* libuv >= 1.48: see after_pass in loop.c */
  bool referenced;         /* uvtw_wheel_ref / uvtw_wheel_unref */
  bool in_pass;            /* running a pass's callbacks */
  bool closing;
  bool armed;              /* the uv_timer_t is started, for armed_at */
  bool kicked;             /* the uv_async_t was sent to start the next pass */
  bool collected;          /* the next pass's due entries are already expired */
  bool thread_known;       /* the loop's thread is known (see learn_thread in loop.c) */
  int handles_closed;
  uint64_t armed_at;       /* ticks */
  uint64_t manual_now;     /* ms, the manual clock */
  uint64_t unrefs;         /* pending timers that do not keep the loop alive */
  uvtw_stats_t stats;      /* started, active, stopped, cascaded: completed on read */
  uvtw_close_cb close_cb;
  void *close_arg;
  uv_timer_t timer;
  uv_async_t async;
  wheel_t wheel;
};

static inline uint64_t uvtw__add_saturating(uint64_t a, uint64_t b) {
  return a + b < a ? UINT64_MAX : a + b;
}

/* loop.c, for tasks.c */

/* The wheel's clock in ms. */
uint64_t uvtw__clock_ms(const uvtw_wheel_t *w);
/* A deadline in ms to ticks, rounded up (UINT64_MAX, saturated, stays). */
uint64_t uvtw__ticks_up(const uvtw_wheel_t *w, uint64_t ms);
/* Files an entry that is in no list at `deadline` (ticks), counting it as
 * pending, and arms the uv_timer_t if it is now the earliest. */
void uvtw__entry_add(uvtw_wheel_t *w, uvtw_timer_t *entry, uint64_t deadline);
/* Unlinks a pending entry and stops the uv_timer_t if nothing is left. */
void uvtw__entry_remove(uvtw_wheel_t *w, uvtw_timer_t *entry);
/* Counts a callback about to run with status 0 for an entry due at
 * `deadline` (ticks): fired, and its lateness in late[] and late_max_ms. */
void uvtw__note_fired(uvtw_wheel_t *w, uint64_t deadline);

/* tasks.c, for loop.c */

/* Records the calling thread as the loop's, for uvtw_schedule and
 * uvtw_ticket_cancel on other threads. */
void uvtw__tasks_set_loop_thread(uvtw_wheel_t *w);

int uvtw__shared_new(uvtw_wheel_t *w, uint32_t max_pending);
void uvtw__shared_release(uvtw_shared_t *sh);
/* The callback of a task's wheel entry: runs the task with status 0, or
 * with UV_ECANCELED once the wheel is closing. */
void uvtw__task_fire(uvtw_timer_t *entry);
/* Takes in everything other threads queued. */
void uvtw__tasks_take_in(uvtw_wheel_t *w);
/* Closes the queue, waits for senders to leave it, and ends every task
 * still queued with UV_ECANCELED. */
void uvtw__tasks_close(uvtw_wheel_t *w);
/* Completes the wheel's counters with the tasks': cancels that returned 0
 * are stops, and tasks cancelled by another thread but not yet unlinked are
 * not active. */
void uvtw__tasks_stats(const uvtw_wheel_t *w, uvtw_stats_t *out);

#endif
