/* Cross-thread tasks and tickets (tasks.c), for life.c and manual.c. */
#ifndef UVTW_TASKS_H
#define UVTW_TASKS_H

#include "core.h"

/* The callback of a task's entry (the core's fire[1]). */
void uvtw__task_fire(uvtw_timer_t *entry);
int uvtw__tasks_open(uvtw_wheel_t *w, uint32_t max_pending);
void uvtw__tasks_release(uvtw_shared_t *sh);
/* Takes in everything queued (at every pass's end and in the uv_async_t's
 * callback); false if nothing was. */
bool uvtw__tasks_drain(uvtw_wheel_t *w);
/* Shuts the queue, waits for senders to leave it, and ends every task
 * still queued with UV_ECANCELED. */
void uvtw__tasks_close(uvtw_wheel_t *w);
/* Takes from `active` the tasks another thread cancelled that the loop has
 * not let go of yet. */
void uvtw__tasks_stats(const uvtw_wheel_t *w, uvtw_stats_t *out);
/* The bytes the wheel's task blocks hold (pool.c), for tests. */
uint64_t uvtw__tasks_bytes(const uvtw_wheel_t *w);

#ifdef UVTW_CHECKS
/* The tasks' parts of uvtw__check (life.h). */
bool uvtw__task_check(const uvtw_timer_t *entry, uint64_t *cancelled);
int64_t uvtw__tasks_linked(const uvtw_wheel_t *w);
const char *uvtw__tasks_check(const uvtw_wheel_t *w, int64_t linked, uint64_t tasks,
                              uint64_t cancelled);
#endif

#endif
