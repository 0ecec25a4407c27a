/* Cross-thread tasks: uvtw_schedule, tickets, and what closing a wheel does
 * to tasks.
 *
 * A task is a wheel entry like a timer: it embeds a uvtw_timer_t whose
 * callback is uvtw__task_fire. From other threads it travels through the
 * MPSC queue (mpsc.c), which the wheel's uv_async_t drains; the loop thread
 * files its own tasks directly. Which thread that is, the wheel learns from
 * its loop (learn_thread in loop.c); until then every task is queued. A
 * task's life is an atomic state:
 *
 *     QUEUED --(loop takes it in)--> IN_WHEEL --(due, or wheel closes)--> DONE
 *        \                              |
 *         \--(cancel)--> CANCELLED <----/ (cancel)
 *
 * Running the callback and cancelling both leave IN_WHEEL by compare-and-
 * swap, so exactly one of "cancel returned 0" and "callback ran" happens.
 *
 * A task is reference counted: the loop holds one reference until it is
 * done with the task, the ticket holder one until uvtw_ticket_release, and
 * a cancel message (below) one until the loop has read it. A cancel from
 * another thread of a task in the wheel sends the task's queue node again,
 * as a message that has the loop unlink it now rather than at its deadline;
 * the loop tells the two messages apart by the state (QUEUED: take it in)
 * and by whether it ever filed the task. A task holds its place under
 * max_pending until the loop lets go of it (let_go), not until the cancel:
 * so max_pending bounds the tasks' memory even while the loop is busy.
 *
 * A task's block comes from the pool (pool.c). The part other threads
 * touch (the queue, the pool, counters) is a separate allocation,
 * uvtw_shared_t, counted by the pool: the wheel holds one reference and
 * every slab or malloc'd block one, so it lives until the wheel and every
 * task are gone, and tickets stay usable after the wheel closes. Another
 * thread takes a block, pushes onto the queue, and calls uv_async_send if
 * it found the queue empty, only inside a gate: a closed bit and a count
 * of threads inside. The close shuts the gate and waits for the threads
 * inside to leave, then takes what is queued, retires the pool and closes
 * the handle; a call that finds the gate shut fails with UV_ECANCELED, and
 * so the wheel and its handle outlive every push and send, and no block is
 * taken from a retired pool.
 */
#include <assert.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "internal.h"
#include "mpsc.h"
#include "pool.h"

enum task_state { TASK_QUEUED, TASK_IN_WHEEL, TASK_CANCELLED, TASK_DONE };

struct uvtw_shared_s {
  /* Set at creation, read-only afterwards. */
  uvtw_wheel_t *wheel;  /* other threads use it only inside the gate */
  uint32_t max_pending; /* 0: unlimited, `pending` not kept */
  bool manual;
  _Atomic bool thread_known;
  /* The loop's thread, written once, before `thread_known` is set. */
  uv_thread_t loop_thread;
  /* What every call from another thread writes, on cache lines apart from
   * the fields above, which the loop reads for every task. */
  char apart[64];
  _Atomic uint64_t gate; /* bit 0: closed; the rest: twice the threads inside */
  mpsc_t queue;
  pool_t pool; /* the task blocks, and this struct's reference count */
  char apart_too[64];
  /* Counts the loop and other threads both write. */
  _Atomic uint32_t pending; /* tasks the loop has not let go of (see settle) */
  _Atomic uint64_t cancels_won;
  /* Cancelled by another thread, not yet unlinked; the loop may count a
   * task out before its canceller counts it in, so it can dip below 0. */
  _Atomic int64_t cancelled_linked;
};

struct uvtw_ticket_s {
  uvtw_timer_t entry; /* in the wheel; cb_ == uvtw__task_fire, data: the task's arg */
  mpsc_node_t message;
  _Atomic int state;
  _Atomic int refs;
  uvtw_task_cb cb;
  uint64_t due; /* the deadline in ms; on a manual clock the timeout until taken in */
  uvtw_shared_t *shared;
  bool filed;   /* the loop has filed it in the wheel (loop thread only) */
  bool slabbed; /* its block came from a slab (pool.c) */
};

_Static_assert(sizeof(uvtw_ticket_t) <= POOL_BLOCK, "a task fits in a block");

/* ---- the shared part ------------------------------------------------------- */

int uvtw__shared_new(uvtw_wheel_t *w, uint32_t max_pending) {
  uvtw_shared_t *sh = calloc(1, sizeof *sh);
  if (sh == NULL)
    return UV_ENOMEM;
  sh->wheel = w;
  sh->max_pending = max_pending;
  sh->manual = w->manual;
  uvtw__mpsc_init(&sh->queue);
  uvtw__pool_init(&sh->pool); /* calloc made the other counters 0 */
  w->shared = sh;
  return 0;
}

static void shared_free(uvtw_shared_t *sh) {
  uvtw__pool_fini(&sh->pool);
  free(sh);
}

void uvtw__shared_release(uvtw_shared_t *sh) {
  if (uvtw__pool_unref(&sh->pool))
    shared_free(sh);
}

void uvtw__tasks_stats(const uvtw_wheel_t *w, uvtw_stats_t *out) {
  int64_t cancelled = atomic_load(&w->shared->cancelled_linked);
  out->active -= cancelled > 0 ? (uint64_t)cancelled : 0;
  out->stopped += atomic_load(&w->shared->cancels_won);
}

void uvtw__tasks_set_loop_thread(uvtw_wheel_t *w) {
  w->shared->loop_thread = uv_thread_self();
  atomic_store_explicit(&w->shared->thread_known, true, memory_order_release);
}

/* Before the loop's thread is known, no thread is taken for it: every
 * task goes through the queue. */
static bool on_loop_thread(uvtw_shared_t *sh) {
  if (!atomic_load_explicit(&sh->thread_known, memory_order_acquire))
    return false;
  uv_thread_t self = uv_thread_self();
  return uv_thread_equal(&self, &sh->loop_thread);
}

static bool pending_take(uvtw_shared_t *sh) {
  if (sh->max_pending == 0)
    return true;
  uint32_t n = atomic_load_explicit(&sh->pending, memory_order_relaxed);
  do {
    if (n >= sh->max_pending)
      return false;
  } while (!atomic_compare_exchange_weak(&sh->pending, &n, n + 1));
  return true;
}

static void pending_put(uvtw_shared_t *sh) {
  if (sh->max_pending != 0)
    atomic_fetch_sub(&sh->pending, 1);
}

static void gate_leave(uvtw_shared_t *sh) {
  atomic_fetch_sub(&sh->gate, 2);
}

/* Another thread enters the gate (see above), unless the wheel is closing. */
static bool gate_enter(uvtw_shared_t *sh) {
  if (atomic_fetch_add(&sh->gate, 2) & 1) {
    gate_leave(sh);
    return false;
  }
  return true;
}

/* Inside the gate: queues a task's message, wakes the loop if the queue
 * was empty, and leaves the gate. */
static void send_and_leave(uvtw_shared_t *sh, uvtw_ticket_t *task) {
  if (uvtw__mpsc_push(&sh->queue, &task->message))
    uv_async_send(&sh->wheel->async);
  gate_leave(sh);
}

static void free_block(uvtw_ticket_t *task) {
  uvtw_shared_t *sh = task->shared;
  if (uvtw__pool_put(&sh->pool, task, task->slabbed))
    shared_free(sh);
}

static void task_unref(uvtw_ticket_t *task) {
  if (atomic_fetch_sub_explicit(&task->refs, 1, memory_order_acq_rel) == 1)
    free_block(task);
}

/* ---- the loop side -------------------------------------------------------- */

/* The loop lets go of a task: it drops its reference and frees the task's
 * place under max_pending. A cancelled task keeps that place until then,
 * so max_pending bounds the memory tasks hold even while the loop is busy. */
static void let_go(uvtw_ticket_t *task) {
  pending_put(task->shared);
  task_unref(task);
}

/* Ends a task that has left the wheel (or never entered it): runs its
 * callback with `status` unless it was cancelled, and lets go of it. A task
 * that runs gives its place back first, so its callback may schedule the
 * next one. */
static void settle(uvtw_wheel_t *w, uvtw_ticket_t *task, int status) {
  int expected = TASK_IN_WHEEL;
  if (!atomic_compare_exchange_strong(&task->state, &expected, TASK_DONE)) {
    assert(expected == TASK_CANCELLED);
    atomic_fetch_sub(&task->shared->cancelled_linked, 1);
    let_go(task);
    return;
  }
  pending_put(task->shared);
  if (status == 0)
    uvtw__note_fired(w, uvtw__ticks_up(w, task->due));
  task->cb(task->entry.data, status);
  task_unref(task);
}

void uvtw__task_fire(uvtw_timer_t *entry) {
  uvtw_ticket_t *task = container_of(entry, uvtw_ticket_t, entry);
  uvtw_wheel_t *w = task->shared->wheel;
  settle(w, task, w->closing ? UV_ECANCELED : 0);
}

/* Puts a task that is IN_WHEEL into the wheel, or ends it if closing. */
static void file_task(uvtw_wheel_t *w, uvtw_ticket_t *task) {
  if (w->closing) {
    settle(w, task, UV_ECANCELED);
    return;
  }
  if (w->manual)
    task->due = uvtw__add_saturating(uvtw__clock_ms(w), task->due);
  task->filed = true;
  uvtw__entry_add(w, &task->entry, uvtw__ticks_up(w, task->due));
}

/* Handles one message from the queue (see the state diagram above). */
static void take_in(uvtw_wheel_t *w, uvtw_ticket_t *task) {
  int expected = TASK_QUEUED;
  if (atomic_compare_exchange_strong(&task->state, &expected, TASK_IN_WHEEL)) {
    file_task(w, task);
    return;
  }
  assert(expected == TASK_CANCELLED);
  if (uvtw_timer_is_active(&task->entry)) {
    /* A cancel message for a task still in the wheel: unlink it and let
     * go of it; the message's reference goes below. */
    uvtw__entry_remove(w, &task->entry);
    atomic_fetch_sub(&task->shared->cancelled_linked, 1);
    let_go(task);
  } else if (!task->filed) {
    let_go(task); /* cancelled while queued: this is its take-in message */
    return;
  }
  /* The cancel message's reference. */
  task_unref(task);
}

static void take_in_list(uvtw_wheel_t *w, mpsc_node_t *node) {
  while (node != NULL) {
    mpsc_node_t *next = node->next; /* read before the node can be queued again */
    take_in(w, container_of(node, uvtw_ticket_t, message));
    node = next;
  }
}

void uvtw__tasks_take_in(uvtw_wheel_t *w) {
  mpsc_node_t *batch = uvtw__mpsc_take_all(&w->shared->queue);
  w->stats.remote_batches += batch != NULL;
  take_in_list(w, batch);
}

void uvtw__tasks_close(uvtw_wheel_t *w) {
  atomic_fetch_or(&w->shared->gate, 1);
  while (atomic_load(&w->shared->gate) != 1)
    uv_sleep(0); /* a thread is inside: let it finish its push */
  /* w->closing: queued tasks end with UV_ECANCELED. */
  take_in_list(w, uvtw__mpsc_take_all(&w->shared->queue));
  uvtw__pool_retire(&w->shared->pool); /* no block is taken from here on */
}

/* ---- the public calls ------------------------------------------------------ */

/* Takes a place under max_pending and a block for a new task. */
static int task_new(uvtw_shared_t *sh, uint64_t timeout, uvtw_ticket_t **out) {
  if (!pending_take(sh))
    return UV_ENOBUFS;
  *out = uvtw__pool_get(&sh->pool, timeout);
  if (*out == NULL) {
    pending_put(sh);
    return UV_ENOMEM;
  }
  (*out)->slabbed = uvtw__pool_slabbed(timeout);
  return 0;
}

int uvtw_schedule(uvtw_wheel_t *wheel, uint64_t timeout, uvtw_task_cb cb, void *arg,
                  uvtw_ticket_t **ticket) {
  if (wheel == NULL || cb == NULL)
    return UV_EINVAL;
  uvtw_shared_t *sh = wheel->shared;
  bool loop_thread = on_loop_thread(sh);
  /* Another thread takes its block inside the gate: none is taken once the
   * close has retired the pool. */
  if (loop_thread ? wheel->closing : !gate_enter(sh))
    return UV_ECANCELED;
  uvtw_ticket_t *task;
  int err = task_new(sh, timeout, &task);
  if (err != 0) {
    if (!loop_thread)
      gate_leave(sh);
    return err;
  }
  uvtw_timer_init(wheel, &task->entry);
  task->entry.cb_ = uvtw__task_fire;
  task->cb = cb;
  task->entry.data = arg;
  task->due = sh->manual ? timeout : uvtw__add_saturating(uv_hrtime() / 1000000, timeout);
  task->shared = sh;
  atomic_init(&task->refs, ticket != NULL ? 2 : 1);
  atomic_init(&task->state, loop_thread ? TASK_IN_WHEEL : TASK_QUEUED);
  task->filed = false;
  if (ticket != NULL)
    *ticket = task; /* before the loop can see the task */
  if (loop_thread)
    file_task(wheel, task);
  else
    send_and_leave(sh, task);
  return 0;
}

int uvtw_ticket_cancel(uvtw_ticket_t *task) {
  if (task == NULL)
    return UV_EINVAL;
  int state = atomic_load(&task->state);
  do {
    if (state == TASK_CANCELLED)
      return 0;
    if (state == TASK_DONE)
      return UV_EALREADY;
  } while (!atomic_compare_exchange_weak(&task->state, &state, TASK_CANCELLED));

  uvtw_shared_t *sh = task->shared;
  atomic_fetch_add(&sh->cancels_won, 1);
  if (state == TASK_QUEUED)
    return 0; /* its take-in message will find it cancelled */
  if (on_loop_thread(sh)) {
    /* In the wheel (perhaps expired, in a pass or a close): unlink it now. */
    uvtw__entry_remove(sh->wheel, &task->entry);
    let_go(task);
    return 0;
  }
  /* Have the loop unlink it now rather than at its deadline. */
  atomic_fetch_add(&sh->cancelled_linked, 1);
  if (!gate_enter(sh))
    return 0; /* the closing wheel drops the entry itself */
  atomic_fetch_add(&task->refs, 1); /* the message's reference */
  send_and_leave(sh, task);
  return 0;
}

void uvtw_ticket_release(uvtw_ticket_t *task) {
  if (task != NULL)
    task_unref(task);
}
