/* Cross-thread tasks: uvtw_schedule, tickets, and what closing a wheel does
 * to tasks.
 *
 * A task is an entry of the core (core.c) like a timer: it embeds a
 * uvtw_timer_t, marked ENTRY_TASK, whose callback is uvtw__task_fire.
 * Every uvtw_schedule, on any thread, pushes the task onto the MPSC queue
 * (mpsc.c); the loop takes the queue in at the end of every pass (so a
 * task scheduled from the wheel's own callback keeps the loop alive from
 * the call) and in the wheel's uv_async_t callback. No thread is ever
 * taken for the loop's: the loop may move between threads. A task's life
 * is one atomic state, changed by compare-and-swap where two threads race,
 * in one place per transition:
 *
 *     QUEUED ---take_in---> IN_WHEEL ---settle: due, or closing---> DONE
 *       |                      |
 *     cancel                 cancel (and a message to the loop)
 *       v                      v
 *     CANCELLED_QUEUED    CANCELLED_IN_WHEEL
 *       |                      |
 *     take_in               the message, or settle
 *       \------> CANCELLED <-----/        (the loop let go of it)
 *
 * Only the loop moves a task out of QUEUED into the wheel, out of IN_WHEEL
 * into DONE, and out of the two cancelled states; other threads only
 * cancel. So exactly one of "cancel returned 0" and "callback ran"
 * happens, and a message's meaning follows from the state it finds: in
 * QUEUED or CANCELLED_QUEUED it is the task's first (take it in), in
 * CANCELLED_IN_WHEEL or CANCELLED a cancel's (unlink it now rather than at
 * its deadline).
 *
 * A task is reference counted: the loop holds one reference until it lets
 * go of the task, the ticket holder one until uvtw_ticket_release, and a
 * cancel message one until the loop has read it. A task holds its place
 * under max_pending until the loop lets go of it (let_go), not until the
 * cancel: so max_pending bounds the tasks' memory even while the loop is
 * busy. The loop counts a cancelled task in `started` (if it never took it
 * in) and `stopped` when it lets go of it.
 *
 * A task's block comes from the pool (pool.c). The part other threads
 * touch (the queue, the pool, counters) is a separate allocation,
 * uvtw_shared_t, counted by the pool: the wheel holds one reference and
 * every slab one, so it lives until the wheel and every
 * task are gone, and tickets stay usable after the wheel closes. A thread
 * takes a block, pushes onto the queue, and calls uv_async_send if it found
 * the queue empty, only inside a gate: a closed bit and a count of threads
 * inside. The close shuts the gate and waits for the threads inside to
 * leave, then takes what is queued, retires the pool and closes the
 * handle; a call that finds the gate shut fails with UV_ECANCELED, and so
 * the wheel and its handle outlive every push and send, and no block is
 * taken from a retired pool.
 */
#include <assert.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "mpsc.h"
#include "pool.h"
#include "tasks.h"

enum task_state {
  TASK_QUEUED,
  TASK_IN_WHEEL,
  TASK_CANCELLED_QUEUED,
  TASK_CANCELLED_IN_WHEEL,
  TASK_CANCELLED, /* the loop let go of it after a won cancel */
  TASK_DONE,      /* its callback has run or is running */
};

struct uvtw_shared_s {
  /* Set at creation, read-only afterwards. */
  uvtw_wheel_t *wheel;  /* other threads use it only inside the gate */
  uint32_t max_pending; /* 0: unlimited, `pending` not kept */
  bool manual;          /* the wheel's clock is manual (its flags word is the loop's) */
  /* What every call from another thread writes, on cache lines apart from
   * the fields above, which the loop reads for every task. */
  char apart[64];
  _Atomic uint64_t gate; /* bit 0: closed; the rest: twice the threads inside */
  mpsc_t queue;
  pool_t pool; /* the task blocks, and this struct's reference count */
  char apart_too[64];
  /* Counts the loop and other threads both write. */
  _Atomic uint32_t pending; /* tasks the loop has not let go of (see let_go) */
  /* Cancelled in the wheel, not yet let go of; the loop may count a task
   * out before its canceller counts it in, so it can dip below 0. */
  _Atomic int64_t cancelled_linked;
};

struct uvtw_ticket_s {
  uvtw_timer_t entry; /* in the wheel; data: the task's arg */
  mpsc_node_t message;
  _Atomic int state; /* enum task_state */
  _Atomic int refs;
  uvtw_task_cb cb;
  uint64_t due; /* the deadline in ms; on a manual clock the timeout until taken in */
  uvtw_shared_t *shared;
};

_Static_assert(sizeof(uvtw_ticket_t) <= POOL_BLOCK, "a task fits in a block");

/* ---- the shared part ------------------------------------------------------- */

int uvtw__tasks_open(uvtw_wheel_t *w, uint32_t max_pending) {
  uvtw_shared_t *sh = calloc(1, sizeof *sh);
  if (sh == NULL)
    return UV_ENOMEM;
  sh->wheel = w;
  sh->manual = w->flags & WHEEL_MANUAL;
  sh->max_pending = max_pending;
  uvtw__mpsc_init(&sh->queue);
  uvtw__pool_init(&sh->pool); /* calloc made the other counters 0 */
  w->shared = sh;
  return 0;
}

void uvtw__tasks_release(uvtw_shared_t *sh) {
  if (uvtw__pool_unref(&sh->pool))
    free(sh);
}

uint64_t uvtw__tasks_bytes(const uvtw_wheel_t *w) {
  return uvtw__pool_bytes(&w->shared->pool);
}

void uvtw__tasks_stats(const uvtw_wheel_t *w, uvtw_stats_t *out) {
  int64_t cancelled = atomic_load(&w->shared->cancelled_linked);
  out->active -= cancelled > 0 ? (uint64_t)cancelled : 0;
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

/* A thread enters the gate (see above), unless the wheel is closing. */
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
  if (uvtw__pool_put(&sh->pool, task))
    free(sh);
}

/* A count that was already 0 is a ticket released twice: the checks build
 * stops there, rather than give the block back twice. Under ASan the block
 * is poisoned once given back (pool.c), which reports the access first. */
static void task_unref(uvtw_ticket_t *task) {
  int before = atomic_fetch_sub_explicit(&task->refs, 1, memory_order_acq_rel);
  MISUSE(before <= 0,
         "a ticket's reference count went below 0 (%d): a ticket released twice, or used after "
         "its release\n",
         before - 1);
  if (before == 1)
    free_block(task);
}

/* ---- the loop side -------------------------------------------------------- */

/* The loop lets go of a cancelled task, `in_wheel` or still queued: it
 * counts the cancel, drops its reference and frees the task's place under
 * max_pending. */
static void let_go(uvtw_wheel_t *w, uvtw_ticket_t *task, bool in_wheel) {
  atomic_store(&task->state, TASK_CANCELLED);
  if (in_wheel)
    atomic_fetch_sub(&task->shared->cancelled_linked, 1);
  w->stats.started += !in_wheel; /* never counted when taken in */
  w->stats.stopped++;
  pending_put(task->shared);
  task_unref(task);
}

/* Ends a task that has left the wheel (or never entered it): runs its
 * callback with `status` unless it was cancelled. A task that runs gives
 * its place back first, so its callback may schedule the next one. */
static void settle(uvtw_wheel_t *w, uvtw_ticket_t *task, int status) {
  int expected = TASK_IN_WHEEL;
  if (!atomic_compare_exchange_strong(&task->state, &expected, TASK_DONE)) {
    assert(expected == TASK_CANCELLED_IN_WHEEL);
    let_go(w, task, true);
    return;
  }
  pending_put(task->shared);
  if (status == 0)
    uvtw__note_fired(w, uvtw__ticks_up(w, task->due));
  task->cb(task->entry.data, status);
  task_unref(task);
}

/* The callback of a task's entry, once it has left the wheel. */
void uvtw__task_fire(uvtw_timer_t *entry) {
  uvtw_ticket_t *task = container_of(entry, uvtw_ticket_t, entry);
  uvtw_wheel_t *w = task->shared->wheel;
  settle(w, task, uvtw__closing(w) ? UV_ECANCELED : 0);
}

/* Handles one message from the queue (see the state diagram above). */
static void take_in(uvtw_wheel_t *w, uvtw_ticket_t *task) {
  int state = TASK_QUEUED;
  if (atomic_compare_exchange_strong(&task->state, &state, TASK_IN_WHEEL)) {
    if (uvtw__closing(w)) {
      settle(w, task, UV_ECANCELED);
      return;
    }
    if (w->flags & WHEEL_MANUAL)
      task->due = uvtw__add_saturating(uvtw__clock_ms(w), task->due);
    uvtw__entry_add(w, &task->entry, uvtw__ticks_up(w, task->due));
    return;
  }
  if (state == TASK_CANCELLED_QUEUED) {
    let_go(w, task, false);
    return;
  }
  assert(state == TASK_CANCELLED_IN_WHEEL || state == TASK_CANCELLED);
  if (state == TASK_CANCELLED_IN_WHEEL) {
    uvtw__entry_remove(w, &task->entry);
    let_go(w, task, true);
  }
  task_unref(task); /* the cancel message's reference */
}

static void take_in_list(uvtw_wheel_t *w, mpsc_node_t *node) {
  while (node != NULL) {
    mpsc_node_t *next = node->next; /* read before the node can be queued again */
    take_in(w, container_of(node, uvtw_ticket_t, message));
    node = next;
  }
}

bool uvtw__tasks_drain(uvtw_wheel_t *w) {
  mpsc_node_t *batch = uvtw__mpsc_take_all(&w->shared->queue);
  take_in_list(w, batch);
  return batch != NULL;
}

void uvtw__tasks_close(uvtw_wheel_t *w) {
  atomic_fetch_or(&w->shared->gate, 1);
  while (atomic_load(&w->shared->gate) != 1)
    uv_sleep(0);                       /* a thread is inside: let it finish its push */
  uvtw__tasks_drain(w);                /* closing: queued tasks end with UV_ECANCELED */
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
  return 0;
}

int uvtw_schedule(uvtw_wheel_t *wheel, uint64_t timeout, uvtw_task_cb cb, void *arg,
                  uvtw_ticket_t **ticket) {
  if (wheel == NULL || cb == NULL)
    return UV_EINVAL;
  uvtw_shared_t *sh = wheel->shared;
  /* The block is taken inside the gate: none once the close retired the pool. */
  if (!gate_enter(sh))
    return UV_ECANCELED;
  uvtw_ticket_t *task;
  int err = task_new(sh, timeout, &task);
  if (err != 0) {
    gate_leave(sh);
    return err;
  }
  uvtw__entry_init(&task->entry, wheel, ENTRY_TASK);
  task->entry.data = arg;
  task->cb = cb;
  task->due = sh->manual ? timeout : uvtw__add_saturating(uv_hrtime() / 1000000, timeout);
  task->shared = sh;
  atomic_init(&task->refs, ticket != NULL ? 2 : 1);
  atomic_init(&task->state, TASK_QUEUED);
  if (ticket != NULL)
    *ticket = task; /* before the loop can see the task */
  send_and_leave(sh, task);
  return 0;
}

int uvtw_ticket_cancel(uvtw_ticket_t *task) {
  if (task == NULL)
    return UV_EINVAL;
  int state = atomic_load(&task->state);
  int to;
  do {
    if (state == TASK_DONE)
      return UV_EALREADY;
    if (state != TASK_QUEUED && state != TASK_IN_WHEEL)
      return 0; /* cancelled before */
    to = state == TASK_QUEUED ? TASK_CANCELLED_QUEUED : TASK_CANCELLED_IN_WHEEL;
  } while (!atomic_compare_exchange_weak(&task->state, &state, to));
  if (to == TASK_CANCELLED_QUEUED)
    return 0; /* its first message will find it cancelled */
  /* Have the loop unlink it now rather than at its deadline. */
  uvtw_shared_t *sh = task->shared;
  atomic_fetch_add(&sh->cancelled_linked, 1);
  /* A closing wheel lets go of it itself. */
  if (!gate_enter(sh))
    return 0;
  atomic_fetch_add(&task->refs, 1); /* the message's reference */
  send_and_leave(sh, task);
  return 0;
}

void uvtw_ticket_release(uvtw_ticket_t *task) {
  if (task != NULL)
    task_unref(task);
}

/* ---- the invariant checker (-Dchecks) ---------------------------------------- */

#ifdef UVTW_CHECKS
/* GCOVR_EXCL_START: the checker's failing branches run only on a broken library. */
bool uvtw__task_check(const uvtw_timer_t *entry, uint64_t *cancelled) {
  const uvtw_ticket_t *task = container_of(entry, uvtw_ticket_t, entry);
  int state = atomic_load(&task->state);
  *cancelled += state == TASK_CANCELLED_IN_WHEEL;
  /* In the wheel, with the loop's reference, in a state only the loop leaves. */
  return (state == TASK_IN_WHEEL || state == TASK_CANCELLED_IN_WHEEL) &&
         atomic_load(&task->refs) >= 1;
}

int64_t uvtw__tasks_linked(const uvtw_wheel_t *w) {
  return atomic_load(&w->shared->cancelled_linked);
}

const char *uvtw__tasks_check(const uvtw_wheel_t *w, int64_t linked, uint64_t tasks,
                              uint64_t cancelled) {
  const uvtw_shared_t *sh = w->shared;
  /* Read before the walk, and counted in only once the state is set. */
  INVARIANT(linked <= (int64_t)cancelled, "more tasks counted cancelled than in the wheel");
  INVARIANT(sh->max_pending == 0 || atomic_load(&sh->pending) >= tasks,
            "tasks in the wheel without their place under max_pending"); /* each holds one */
  INVARIANT(((atomic_load(&sh->gate) & 1) != 0) == uvtw__closing(w),
            "the queue's gate disagrees with the wheel's closing"); /* it shuts at close */
  return uvtw__pool_check((pool_t *)&sh->pool, uvtw__closing(w));   /* retired at close */
}
/* GCOVR_EXCL_STOP */
#endif
