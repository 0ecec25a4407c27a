/* Closing a wheel with everything outstanding: loop timers, loop-thread
 * tasks, tasks from other threads (with tickets and fire-and-forget) that
 * are still being scheduled and cancelled while the wheel closes. Every
 * task's argument is a heap block freed by whoever ends the task (its
 * callback, or the thread whose cancel won), so Valgrind and LeakSanitizer
 * see a leak or a double free if any task is lost or ended twice. Tickets
 * are cancelled and released after the wheel's close callback has run. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "tap.h"
#include "uvtw.h"

#define THREADS 3
#define PER_THREAD 3000
#define LOOP_TIMERS 500
#define LOOP_TASKS 500

typedef struct {
  _Atomic int ended; /* callbacks + won cancels that ended this task */
  int status;
} task_arg_t;

static uv_loop_t loop;
static uvtw_wheel_t *wheel;
static _Atomic int close_cb_ran;
static _Atomic int producers_done; /* threads that will not call uvtw_schedule again */
static _Atomic long scheduled_ok, ran_due, ran_cancelled, cancels_won, schedule_refused;
static _Atomic long ended_twice;
static uvtw_timer_t timers[LOOP_TIMERS];
static int timer_fired_after_close;
static uvtw_ticket_t *loop_tickets[LOOP_TASKS];
static task_arg_t *loop_args[LOOP_TASKS];

static void task_cb(void *p, int status) {
  task_arg_t *arg = p;
  if (atomic_fetch_add(&arg->ended, 1) != 0)
    atomic_fetch_add(&ended_twice, 1);
  if (status == 0)
    atomic_fetch_add(&ran_due, 1);
  else if (status == UV_ECANCELED)
    atomic_fetch_add(&ran_cancelled, 1);
  free(arg);
}

static void timer_cb(uvtw_timer_t *t) {
  (void)t;
  if (atomic_load(&close_cb_ran))
    timer_fired_after_close++;
}

typedef struct {
  pthread_t thread;
  uvtw_ticket_t *tickets[PER_THREAD];
  task_arg_t *args[PER_THREAD];
  int count;
} producer_t;

static void *produce(void *p) {
  producer_t *self = p;
  unsigned seed = (unsigned)(uintptr_t)self;
  for (int i = 0; i < PER_THREAD; i++) {
    task_arg_t *arg = calloc(1, sizeof *arg);
    bool with_ticket = i % 2 == 0;
    uvtw_ticket_t *ticket = NULL;
    int r = uvtw_schedule(wheel, (uint64_t)(rand_r(&seed) % 200), task_cb, arg,
                          with_ticket ? &ticket : NULL);
    if (r != 0) {
      free(arg);
      atomic_fetch_add(&schedule_refused, 1);
      if (r != UV_ECANCELED)
        atomic_fetch_add(&ended_twice, 1000000); /* an unexpected error: fail below */
      break; /* the wheel is closing: stop using it */
    }
    atomic_fetch_add(&scheduled_ok, 1);
    if (with_ticket) {
      self->tickets[self->count] = ticket;
      self->args[self->count] = arg;
      self->count++;
      /* Cancel some right away, racing the loop taking them in. */
      if (i % 6 == 0 && uvtw_ticket_cancel(ticket) == 0) {
        atomic_fetch_add(&cancels_won, 1);
        free(arg);
      }
    }
    if (i % 64 == 0)
      sched_yield();
  }
  atomic_fetch_add(&producers_done, 1);
  /* Hold the remaining tickets until the wheel is gone, then cancel (must
   * not win: every pending task was ended by the close) and release. */
  while (!atomic_load(&close_cb_ran))
    sched_yield();
  for (int i = 0; i < self->count; i++) {
    int r = uvtw_ticket_cancel(self->tickets[i]);
    if (r == 0 && i % 3 != 0) /* only the early cancels (every 6th schedule) may have won */
      atomic_fetch_add(&ended_twice, 1000);
    uvtw_ticket_release(self->tickets[i]);
  }
  return NULL;
}

/* The wheel pointer dies when this returns, so wait for every producer to
 * have stopped calling uvtw_schedule (each stops at its first UV_ECANCELED). */
static void on_close(uvtw_wheel_t *w, void *arg) {
  (void)w;
  (void)arg;
  while (atomic_load(&producers_done) < THREADS)
    sched_yield();
  atomic_store(&close_cb_ran, 1);
}

static uv_timer_t closer;
/* Closes once the other threads have scheduled a good share of their tasks,
 * while they are still scheduling and cancelling. */
static void close_now(uv_timer_t *t) {
  (void)t;
  if (atomic_load(&scheduled_ok) < LOOP_TASKS + THREADS * PER_THREAD / 3 &&
      atomic_load(&producers_done) < THREADS)
    return;
  uvtw_wheel_close(wheel, on_close, NULL);
  tap_ok(uvtw_schedule(wheel, 0, task_cb, NULL, NULL) == UV_ECANCELED,
         "uvtw_schedule on a closing wheel returns UV_ECANCELED");
  uv_close((uv_handle_t *)&closer, NULL);
}

int main(void) {
  uv_loop_init(&loop);
  tap_ok(uvtw_wheel_new(&loop, NULL, &wheel) == 0, "a wheel is created");
  for (int i = 0; i < LOOP_TIMERS; i++) {
    uvtw_timer_init(wheel, &timers[i]);
    uvtw_timer_start(&timers[i], timer_cb, (uint64_t)(i % 100) * 3, i % 7 == 0 ? 5 : 0);
  }
  for (int i = 0; i < LOOP_TASKS; i++) {
    loop_args[i] = calloc(1, sizeof *loop_args[i]);
    int r = uvtw_schedule(wheel, (uint64_t)(i % 50) * 4, task_cb, loop_args[i],
                          i % 2 ? &loop_tickets[i] : NULL);
    if (r == 0)
      atomic_fetch_add(&scheduled_ok, 1);
  }
  producer_t producers[THREADS];
  memset(producers, 0, sizeof producers);
  for (int t = 0; t < THREADS; t++)
    pthread_create(&producers[t].thread, NULL, produce, &producers[t]);

  uv_timer_init(&loop, &closer);
  uv_timer_start(&closer, close_now, 20, 5);
  uv_run(&loop, UV_RUN_DEFAULT);
  tap_ok(atomic_load(&close_cb_ran) == 1, "the close callback ran once the handles closed");

  int active_after = 0;
  for (int i = 0; i < LOOP_TIMERS; i++)
    active_after += uvtw_timer_is_active(&timers[i]);
  TAP_EQ(active_after, 0, "every pending timer is inactive after close");

  int loop_cancel_won = 0;
  for (int i = 1; i < LOOP_TASKS; i += 2) {
    if (uvtw_ticket_cancel(loop_tickets[i]) == 0)
      loop_cancel_won++;
    uvtw_ticket_release(loop_tickets[i]);
  }
  TAP_EQ(loop_cancel_won, 0, "after close, cancelling a loop-thread ticket returns UV_EALREADY");

  for (int t = 0; t < THREADS; t++)
    pthread_join(producers[t].thread, NULL);

  uv_run(&loop, UV_RUN_DEFAULT);
  TAP_EQ(timer_fired_after_close, 0, "no timer fires after close");
  TAP_EQ(atomic_load(&ended_twice), 0,
         "no task ended twice, no unexpected error, no late cancel won");
  long ended = atomic_load(&ran_due) + atomic_load(&ran_cancelled) + atomic_load(&cancels_won);
  TAP_EQ(ended, atomic_load(&scheduled_ok),
         "every scheduled task ended exactly once: ran, ran with UV_ECANCELED, or cancelled");
  tap_ok(atomic_load(&ran_cancelled) > LOOP_TASKS,
         "remote tasks were still pending at close: %ld ended with UV_ECANCELED (%ld fired)",
         atomic_load(&ran_cancelled), atomic_load(&ran_due));
  tap_diag("scheduled %ld, refused after close %ld, won cancels %ld", atomic_load(&scheduled_ok),
           atomic_load(&schedule_refused), atomic_load(&cancels_won));
  TAP_EQ(uv_loop_close(&loop), 0, "the loop closes: the wheel left no handle behind");
  return tap_done();
}
