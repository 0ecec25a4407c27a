/* The libuv glue: the public API on top of the pure wheel (wheel.c) and the
 * cross-thread queue (mpsc.c).
 *
 * One uv_timer_t is armed to the wheel's earliest deadline and stopped when
 * nothing is pending, so its being active is what keeps the loop alive,
 * exactly as for a uv_timer_t. Its callback advances the wheel to uv_now()
 * and runs every due callback (a "pass"), then re-arms once.
 *
 * An entry made due from inside a pass waits for the next loop iteration. It
 * is not enough to arm the uv_timer_t with timeout 0 from inside its own
 * callback: libuv before 1.45 runs such a timer again in the same
 * uv__run_timers loop, so a callback restarting itself with 0 would starve
 * the loop. Instead the pass "kicks" the wheel's own uv_async_t; its callback
 * runs in this iteration's poll phase, outside the timer phase, and arms the
 * timer there, which fires in the next timer phase. Same behaviour on every
 * libuv version, at the cost of one eventfd write only in that case.
 *
 * Tasks (uvtw_schedule) are entries like timers: a task embeds a uvtw_timer_t
 * whose callback pointer is the private marker `task_entry`. From other
 * threads they travel through the MPSC queue; the loop thread inserts its own
 * directly. A task's life is an atomic state:
 *
 *     QUEUED --(loop takes it in)--> IN_WHEEL --(loop fires it)--> FIRED
 *        \                              \--(wheel closes)--------> FIRED
 *         \--(cancel)--> CANCELLED  <---(cancel)--/
 *
 * Cancel and fire race only through compare-and-swap on that state, so
 * exactly one of "cancel returned 0" and "callback ran" happens. Memory is
 * reference counted: the loop holds one reference until it is done with the
 * task, the ticket holder one until uvtw_ticket_release, and a cancel that
 * sends a message (so the loop unlinks the task at once, not at its
 * deadline) one until the loop has read it. The queue node carries first the
 * "take me in" message and then, if cancelled while in the wheel, the
 * "drop me" message; the loop tells them apart by the state (QUEUED or not)
 * and by whether the entry is linked.
 *
 * The part other threads touch (queue, counters) is a separate allocation,
 * `shared_t`, that lives until the wheel and every ticket are gone, so
 * tickets stay safe after the wheel closes. A schedule from another thread
 * costs one CAS on the queue word, which also carries the queue's "closed"
 * marker: a push either lands before the close (and the close ends that
 * task) or fails with UV_ECANCELED. Only the producer that found the queue
 * empty calls uv_async_send, through a "gate" (a closed bit plus a count of
 * senders inside) that close shuts and waits out before closing the handle.
 */
#include <assert.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "mpsc.h"
#include "uvtw.h"
#include "wheel.h"

#define container_of(ptr, type, member) ((type *)(void *)((char *)(ptr)-offsetof(type, member)))

enum task_state { TASK_QUEUED, TASK_IN_WHEEL, TASK_CANCELLED, TASK_FIRED };

/* Each group on a cache line of its own, so that what producers write, what
 * the loop writes for every task and what producers only read never share
 * a line (false sharing halved ticketed schedule throughput). */
#define CACHE_LINE 64
typedef struct shared_s {
  /* Read-only after creation; read by every schedule. */
  _Alignas(CACHE_LINE) uint32_t max_pending; /* 0: unlimited, `pending` not kept */
  uv_thread_t loop_thread;
  uvtw_wheel_t *wheel;                   /* other threads: only inside the gate */
  _Alignas(CACHE_LINE) mpsc_t queue;     /* every schedule from another thread */
  _Alignas(CACHE_LINE) _Atomic uint32_t refs; /* the wheel's + one per ticketed task */
  _Alignas(CACHE_LINE) _Atomic uint32_t pending; /* not yet run nor cancelled */
  _Alignas(CACHE_LINE) _Atomic uint64_t gate;    /* bit 0: closed; bits 1..: senders inside */
  /* Written by the loop for every task taken in or run, and by cancels. */
  _Alignas(CACHE_LINE) _Atomic uint64_t tasks_active; /* taken in, not yet run or cancelled */
  _Atomic uint64_t cancels_won;
} shared_t;

struct uvtw_ticket_s {
  uvtw_timer_t timer; /* the wheel entry; timer.cb_ == task_entry */
  mpsc_node_t node;
  _Atomic int state;
  _Atomic int refs;
  uvtw_task_cb cb;
  void *arg;
  uint64_t deadline; /* ticks */
  shared_t *shared;
  bool pins_shared;  /* has a ticket, which may outlive the wheel */
};

struct uvtw_wheel_s {
  uv_loop_t *loop;
  shared_t *shared;
  uint32_t tick_ms;
  uint32_t id;       /* in wheel_ids; its timers carry it in their tags */
  bool in_pass;      /* inside the uv_timer_t callback's advance */
  bool closing;
  bool timer_armed;
  int handles_open;
  uint64_t armed;    /* the deadline (ticks) the uv_timer_t is armed for */
  uint64_t tasks_linked; /* task entries in the wheel; the rest are timers */
  uvtw_close_cb close_cb;
  void *close_arg;
  uvtw_stats_t stats; /* loop-side counters; active/stopped completed on read */
  uint64_t restarts;  /* in-place restarts: each is one start and one stop */
  uv_timer_t timer;
  uv_async_t async;
  wheel_t wheel;
};

/* ---- wheel ids ------------------------------------------------------------ */

/* A timer names its wheel by a 16-bit id in its entry's tag, not by a
 * pointer: the other 48 bits of that word keep the start order that lets a
 * restart leave an entry where it is (see wheel_restart_lazy), and so a
 * uvtw_timer_t stays at 56 bytes. Ids are claimed with a compare-and-swap
 * when a wheel is made and freed with it; id 0 is never given (a timer
 * initialized with a NULL wheel has it). So at most 65535 wheels exist at
 * once in a process; uvtw_wheel_new gets UV_ENOMEM past that. */
#define MAX_WHEELS (1u << WHEEL_ID_BITS)
static uvtw_wheel_t *_Atomic wheel_ids[MAX_WHEELS];
static _Atomic uint32_t wheel_id_hint;

static uint32_t claim_wheel_id(uvtw_wheel_t *w) {
  for (uint32_t tries = 1; tries < MAX_WHEELS; tries++) {
    uint32_t id = 1 + atomic_fetch_add_explicit(&wheel_id_hint, 1, memory_order_relaxed) %
                          (MAX_WHEELS - 1);
    uvtw_wheel_t *none = NULL;
    if (atomic_compare_exchange_strong_explicit(&wheel_ids[id], &none, w, memory_order_acq_rel,
                                                memory_order_relaxed))
      return id;
  }
  return 0;
}

static void free_wheel_id(uint32_t id) {
  atomic_store_explicit(&wheel_ids[id], NULL, memory_order_release);
}

/* The wheel a timer was initialized with (NULL if none). */
static inline uvtw_wheel_t *wheel_of(const uvtw_timer_t *timer) {
  return atomic_load_explicit(&wheel_ids[entry_wheel_id(&timer->entry_)], memory_order_acquire);
}

/* Marks an entry as a task; never called. */
static void task_entry(uvtw_timer_t *timer) {
  (void)timer;
  assert(!"task_entry is a marker");
}

/* ---- time ---------------------------------------------------------------- */

static inline uint64_t add_saturating(uint64_t a, uint64_t b) {
  uint64_t sum = a + b;
  return sum < a ? UINT64_MAX : sum;
}

/* A deadline in ms to ticks, rounded up; UINT64_MAX (saturated) stays. */
static inline uint64_t ticks_of_ms(const uvtw_wheel_t *w, uint64_t ms) {
  if (w->tick_ms == 1 || ms == UINT64_MAX)
    return ms;
  return ms / w->tick_ms + (ms % w->tick_ms != 0);
}

static inline uint64_t ms_of_ticks(const uvtw_wheel_t *w, uint64_t ticks) {
  if (w->tick_ms == 1)
    return ticks;
  return ticks > UINT64_MAX / w->tick_ms ? UINT64_MAX : ticks * w->tick_ms;
}

/* uv_now(loop), without the call: uv_now returns the loop's `time` field,
 * whose offset is fixed by libuv's ABI (uv_loop_t is allocated by callers,
 * so its layout cannot change within libuv 1.x). The call, through the PLT
 * into the shared library, made every start spill registers to the stack;
 * churn measured 98 -> 85 ns per stop+start without it. test_timer's
 * twins (each wheel timer beside a uv_timer_t started at the same moment,
 * checked to fire in the same loop iteration) rest on the two agreeing. */
static inline uint64_t loop_now(const uv_loop_t *loop) {
  return loop->time;
}

static inline uint64_t now_ticks(const uvtw_wheel_t *w) {
  uint64_t now = loop_now(w->loop);
  return w->tick_ms == 1 ? now : now / w->tick_ms;
}

/* ---- arming the uv_timer_t ----------------------------------------------- */

static void on_timer(uv_timer_t *handle);

static void arm(uvtw_wheel_t *w, uint64_t deadline) {
  uint64_t due = ms_of_ticks(w, deadline);
  uint64_t now = loop_now(w->loop);
  uv_timer_start(&w->timer, on_timer, due > now ? due - now : 0, 0);
  w->timer_armed = true;
  w->armed = deadline;
}

static void disarm(uvtw_wheel_t *w) {
  if (w->timer_armed)
    uv_timer_stop(&w->timer);
  w->timer_armed = false;
}

/* Re-arms to the wheel's earliest deadline, or stops the timer if empty.
 * Not from inside a pass (see rearm_after_pass). */
static void rearm(uvtw_wheel_t *w) {
  if (w->wheel.count == 0) {
    disarm(w);
    return;
  }
  uint64_t next = wheel_next_deadline(&w->wheel);
  if (!w->timer_armed || next != w->armed)
    arm(w, next);
}

/* Whether filing an entry at `deadline` must re-arm the uv_timer_t: outside
 * a pass, when it is unarmed (after a kick, entries already due wait too) or
 * armed later than `deadline`. */
static inline bool rearm_needed(const uvtw_wheel_t *w, uint64_t deadline) {
  return !w->in_pass && (!w->timer_armed || deadline < w->armed);
}

/* Files an entry; outside a pass, re-arms if it may now be the earliest.
 * rearm, not arm(deadline): while the timer is unarmed after a kick, entries
 * already due are waiting too, and they come first. */
static void insert_entry(uvtw_wheel_t *w, uvtw_timer_t *timer, uint64_t deadline) {
  if (w->wheel.count == 0 && !w->in_pass)
    wheel_catch_up(&w->wheel, now_ticks(w)); /* file it as low as it can go */
  wheel_insert(&w->wheel, &timer->entry_, deadline);
  if (rearm_needed(w, deadline))
    rearm(w);
}

/* ---- waking the loop ----------------------------------------------------- */

static bool gate_enter(shared_t *sh) {
  if (atomic_fetch_add(&sh->gate, 2) & 1) {
    atomic_fetch_sub(&sh->gate, 2);
    return false;
  }
  return true;
}

static void gate_leave(shared_t *sh) {
  atomic_fetch_sub(&sh->gate, 2);
}

static void gate_close(shared_t *sh) {
  atomic_fetch_or(&sh->gate, 1);
  while (atomic_load(&sh->gate) != 1)
    sched_yield(); /* a sender is inside uv_async_send */
}

/* After a push onto an empty queue. If the wheel is closing, its close has
 * taken (or will take) the queue's contents itself. */
static void wake_loop(shared_t *sh) {
  if (gate_enter(sh)) {
    uv_async_send(&sh->wheel->async);
    gate_leave(sh);
  }
}

static bool pending_take(shared_t *sh) {
  if (sh->max_pending == 0)
    return true;
  uint32_t n = atomic_load_explicit(&sh->pending, memory_order_relaxed);
  do {
    if (n >= sh->max_pending)
      return false;
  } while (!atomic_compare_exchange_weak(&sh->pending, &n, n + 1));
  return true;
}

static void pending_put(shared_t *sh) {
  if (sh->max_pending != 0)
    atomic_fetch_sub(&sh->pending, 1);
}

static void shared_unref(shared_t *sh) {
  if (atomic_fetch_sub_explicit(&sh->refs, 1, memory_order_acq_rel) == 1)
    free(sh);
}

static void task_unref(uvtw_ticket_t *task) {
  if (atomic_fetch_sub_explicit(&task->refs, 1, memory_order_acq_rel) == 1) {
    if (task->pins_shared)
      shared_unref(task->shared);
    free(task);
  }
}

static bool on_loop_thread(const shared_t *sh) {
  uv_thread_t self = uv_thread_self();
  return uv_thread_equal(&self, &sh->loop_thread);
}

/* ---- running and dropping entries ------------------------------------------ */

static void note_lateness(uvtw_wheel_t *w, uint64_t deadline) {
  uint64_t now = loop_now(w->loop);
  uint64_t due = ms_of_ticks(w, deadline);
  if (now > due && now - due > w->stats.late_max_ms)
    w->stats.late_max_ms = now - due;
}

/* Ends a task that left the wheel: runs its callback with `status` if it had
 * not been cancelled, then drops the loop's reference. */
static void finish_task(uvtw_wheel_t *w, uvtw_ticket_t *task, int status) {
  int expected = TASK_IN_WHEEL;
  if (atomic_compare_exchange_strong(&task->state, &expected, TASK_FIRED)) {
    shared_t *sh = task->shared;
    pending_put(sh);
    atomic_fetch_sub(&sh->tasks_active, 1);
    if (status == 0) {
      w->stats.fired++;
      note_lateness(w, task->deadline);
    }
    task->cb(task->arg, status);
  }
  task_unref(task);
}

static void fire_entry(wheel_entry_t *entry, void *ctx) {
  uvtw_wheel_t *w = ctx;
  uvtw_timer_t *timer = container_of(entry, uvtw_timer_t, entry_);
  if (timer->cb_ == task_entry) {
    w->tasks_linked--;
    finish_task(w, container_of(timer, uvtw_ticket_t, timer), 0);
    return;
  }
  w->stats.fired++;
  note_lateness(w, entry->deadline);
  if (timer->repeat_ != 0) {
    /* Like uv_timer_t: re-armed from the loop's now before the callback. */
    wheel_insert(&w->wheel, entry,
                 ticks_of_ms(w, add_saturating(loop_now(w->loop), timer->repeat_)));
    w->stats.started++;
  }
  timer->cb_(timer);
}

static void drop_entry(wheel_entry_t *entry, void *ctx) {
  uvtw_wheel_t *w = ctx;
  uvtw_timer_t *timer = container_of(entry, uvtw_timer_t, entry_);
  if (timer->cb_ == task_entry) {
    w->tasks_linked--;
    finish_task(w, container_of(timer, uvtw_ticket_t, timer), UV_ECANCELED);
  }
}

/* Handles one message from the queue (see the state diagram above). */
static void take_in(uvtw_wheel_t *w, uvtw_ticket_t *task) {
  int expected = TASK_QUEUED;
  if (atomic_compare_exchange_strong(&task->state, &expected, TASK_IN_WHEEL)) {
    atomic_fetch_add(&task->shared->tasks_active, 1);
    if (w->closing) {
      finish_task(w, task, UV_ECANCELED);
      return;
    }
    w->stats.started++;
    w->tasks_linked++;
    insert_entry(w, &task->timer, task->deadline);
    return;
  }
  assert(expected == TASK_CANCELLED);
  if (wheel_entry_linked(&task->timer.entry_)) {
    /* A cancel message for a task still in the wheel: the loop's reference
     * and the message's both go. */
    wheel_remove(&w->wheel, &task->timer.entry_);
    w->tasks_linked--;
    task_unref(task);
  }
  /* Else the loop's reference (a take-in message of a task cancelled in the
   * queue) or the message's (the loop already let go of the task). */
  task_unref(task);
}

/* Handles a batch taken from the queue, oldest first. */
static void take_in_all(uvtw_wheel_t *w, mpsc_node_t *node) {
  while (node != NULL) {
    mpsc_node_t *next = node->next; /* read before the node can be reused */
    take_in(w, container_of(node, uvtw_ticket_t, node));
    node = next;
  }
}

/* ---- the two handle callbacks ------------------------------------------------ */

static void on_async(uv_async_t *handle) {
  uvtw_wheel_t *w = container_of(handle, uvtw_wheel_t, async);
  if (w->closing)
    return;
  mpsc_node_t *batch = mpsc_take_all(&w->shared->queue);
  if (batch != NULL) {
    w->stats.remote_batches++;
    take_in_all(w, batch);
  }
  rearm(w); /* also after a kick from rearm_after_pass: arm outside the timer phase */
}

static void rearm_after_pass(uvtw_wheel_t *w) {
  if (w->wheel.count == 0)
    return;
  uint64_t next = wheel_next_deadline(&w->wheel);
  if (ms_of_ticks(w, next) <= loop_now(w->loop)) {
    /* Entries made due by this pass's callbacks: next iteration. */
    uv_async_send(&w->async);
    return;
  }
  arm(w, next);
}

static void on_timer(uv_timer_t *handle) {
  uvtw_wheel_t *w = container_of(handle, uvtw_wheel_t, timer);
  w->timer_armed = false; /* libuv stopped it before calling us */
  w->stats.wakeups++;
  uint64_t fired_before = w->stats.fired;
  w->in_pass = true;
  wheel_advance(&w->wheel, now_ticks(w), fire_entry, w);
  w->in_pass = false;
  if (w->stats.fired == fired_before)
    w->stats.wasted_wakeups++;
  if (!w->closing)
    rearm_after_pass(w);
}

/* ---- the wheel ------------------------------------------------------------- */

int uvtw_wheel_new(uv_loop_t *loop, const uvtw_options_t *opts, uvtw_wheel_t **out) {
  if (loop == NULL || out == NULL)
    return UV_EINVAL;
  uvtw_wheel_t *w = calloc(1, sizeof *w);
  shared_t *sh = aligned_alloc(CACHE_LINE, sizeof *sh); /* sizeof is a multiple */
  if (w != NULL)
    w->id = claim_wheel_id(w);
  if (w == NULL || sh == NULL || w->id == 0) {
    if (w != NULL && w->id != 0)
      free_wheel_id(w->id);
    free(w);
    free(sh);
    return UV_ENOMEM;
  }
  memset(sh, 0, sizeof *sh);
  int r = uv_async_init(loop, &w->async, on_async);
  if (r != 0) {
    free_wheel_id(w->id);
    free(w);
    free(sh);
    return r;
  }
  uv_timer_init(loop, &w->timer);
  uv_unref((uv_handle_t *)&w->async);
  w->async.data = w;
  w->timer.data = w;
  w->handles_open = 2;
  w->loop = loop;
  w->tick_ms = opts != NULL && opts->tick_ms > 1 ? opts->tick_ms : 1;
  wheel_init(&w->wheel, now_ticks(w));
  w->wheel.tag = w->id;

  mpsc_init(&sh->queue);
  atomic_init(&sh->gate, 0);
  atomic_init(&sh->refs, 1);
  atomic_init(&sh->pending, 0);
  atomic_init(&sh->tasks_active, 0);
  atomic_init(&sh->cancels_won, 0);
  sh->max_pending = opts != NULL ? opts->max_pending : 0;
  sh->loop_thread = uv_thread_self();
  sh->wheel = w;
  w->shared = sh;
  *out = w;
  return 0;
}

static void on_handle_closed(uv_handle_t *handle) {
  uvtw_wheel_t *w = handle->data;
  if (--w->handles_open > 0)
    return;
  if (w->close_cb != NULL)
    w->close_cb(w, w->close_arg);
  shared_unref(w->shared);
  free_wheel_id(w->id);
  free(w);
}

void uvtw_wheel_close(uvtw_wheel_t *w, uvtw_close_cb cb, void *arg) {
  if (w == NULL || w->closing)
    return;
  w->closing = true;
  w->close_cb = cb;
  w->close_arg = arg;
  take_in_all(w, mpsc_close(&w->shared->queue)); /* every push from now on fails */
  gate_close(w->shared); /* from here on no other thread touches `w` */
  wheel_clear(&w->wheel, drop_entry, w);
  disarm(w);
  uv_close((uv_handle_t *)&w->timer, on_handle_closed);
  uv_close((uv_handle_t *)&w->async, on_handle_closed);
}

uv_loop_t *uvtw_wheel_loop(const uvtw_wheel_t *w) {
  return w->loop;
}

void uvtw_wheel_ref(uvtw_wheel_t *w) {
  uv_ref((uv_handle_t *)&w->timer);
}

void uvtw_wheel_unref(uvtw_wheel_t *w) {
  uv_unref((uv_handle_t *)&w->timer);
}

int64_t uvtw_wheel_next_due(const uvtw_wheel_t *w) {
  if (w->wheel.count == 0)
    return -1;
  /* Not a change the caller can see: it applies logged restarts first. */
  uint64_t due = ms_of_ticks(w, wheel_next_deadline_exact((wheel_t *)&w->wheel));
  uint64_t now = loop_now(w->loop);
  if (due <= now)
    return 0;
  return due - now > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)(due - now);
}

void uvtw_wheel_stats(const uvtw_wheel_t *w, uvtw_stats_t *out) {
  *out = w->stats;
  out->started += w->restarts;
  out->stopped += w->restarts;
  out->active = w->wheel.count - w->tasks_linked + atomic_load(&w->shared->tasks_active);
  out->stopped += atomic_load(&w->shared->cancels_won);
  out->cascaded = w->wheel.cascaded;
}

const char *uvtw_version_string(void) {
  return "0.1.0";
}

/* ---- loop-thread timers ------------------------------------------------------ */

void uvtw_timer_init(uvtw_wheel_t *wheel, uvtw_timer_t *timer) {
  if (timer == NULL)
    return;
  timer->entry_.next = NULL;
  timer->entry_.prev = NULL;
  timer->entry_.deadline = 0;
  timer->entry_.tag = wheel != NULL ? wheel->id : 0;
  timer->cb_ = NULL;
  timer->repeat_ = 0;
}

/* The slow paths of a start, out of line so that the common ones make no
 * call and so keep nothing on the stack: per timer operation at 10^6
 * timers, the stores that wait behind cache misses are what is paid for. */
__attribute__((noinline)) static int restart_slow(uvtw_wheel_t *w, uvtw_timer_t *timer,
                                                  uint64_t deadline) {
  wheel_restart(&w->wheel, &timer->entry_, deadline);
  if (rearm_needed(w, deadline))
    rearm(w);
  return 0;
}

__attribute__((noinline)) static int insert_slow(uvtw_wheel_t *w, uvtw_timer_t *timer,
                                                 uint64_t deadline) {
  insert_entry(w, timer, deadline);
  return 0;
}

/* The wheel of this thread's last timer start or stop. A start or stop
 * works out every address it writes (counters, the slot, the log) from its
 * wheel. Taken from the timer, which at 10^6 timers is a cache miss, those
 * addresses wait for that miss, and so do the next operation's loads from
 * the same places, so consecutive operations overlap their misses less.
 * Taken from here, they are known at once; the wheel the timer's id names
 * is only compared with it, a branch the CPU predicts and goes on past.
 * Measured at 10^6 timers (with a wheel pointer in the timer then): starts
 * in random order 57 -> 50 ns each, bench churn (stop + start) 76 -> 67 ns
 * a step. Looking the wheel up in the id table and using it instead
 * measured churn 37 -> 49. The comparison is with the wheel the id names
 * now, so it never matches a freed wheel: the table names the wheel at that
 * address only while it lives, and a new wheel at the same address is the
 * wheel that pointer names. Held as an address, not a pointer, as it may
 * outlive its wheel; NO_WHEEL, never in the table (which has NULL for ids
 * without a wheel), until the first start or stop. Per thread, since
 * timers are loop-thread only and each loop has its own.
 * Against comparing the id with a thread-local one and a count of wheels
 * freed with another (what this replaced: two more thread-locals and a
 * global written at every free), 3 instructions fewer on each start and
 * stop, and no change measurable: bench at 10^6, 7 runs interleaved, stop
 * 38.2 -> 37.1 ns, bump 33.0 -> 33.1, churn 64.1 -> 64.4 (medians). */
#define NO_WHEEL UINTPTR_MAX
static _Thread_local uintptr_t last_wheel __attribute__((tls_model("initial-exec"))) = NO_WHEEL;

static inline bool is_last_wheel(const uvtw_timer_t *timer) {
  return (uintptr_t)wheel_of(timer) == last_wheel;
}

/* Makes `w` (not NULL) the thread's last wheel. */
static inline void set_last_wheel(uvtw_wheel_t *w) {
  last_wheel = (uintptr_t)w;
}

/* The timer's wheel, known without waiting for the timer's cache line when
 * it is the thread's last (which the caller checks first): read again, so
 * that the compiler, which knows it equal to the wheel the timer names,
 * cannot take that one instead, loaded late, after the timer's miss. */
static inline uvtw_wheel_t *wheel_known(void) {
  return (uvtw_wheel_t *)*(volatile uintptr_t *)&last_wheel;
}

/* Sets a starting timer's callback and repeat, stored without first
 * reading what is there: a load from the timer, a cache miss at 10^6
 * timers (often on a second line: a 56-byte timer straddles two lines 5
 * times in 8), holds up the CPU until it arrives, while a store goes to
 * the store buffer and lets it go on to the next operation. Against
 * storing only what changed, bench at 10^6, 5 to 7 runs interleaved:
 * bump 32.7 -> 30.1 ns a restart, churn 68.6 -> 63.1 a step, cancel
 * 12.6 -> 8.3 a start. */
static inline void set_cb_repeat(uvtw_timer_t *timer, uvtw_timer_cb cb, uint64_t repeat) {
  timer->cb_ = cb;
  timer->repeat_ = repeat;
}

/* Applies a full restart log, out of line: see start_not_in_place. */
__attribute__((noinline)) static int flush_log(uvtw_wheel_t *w) {
  wheel_flush(&w->wheel);
  return 0;
}

/* uvtw_timer_start on its wheel, known to be the timer's, to `deadline`
 * in ticks; `in_place_tried`: the in-place restarts were already tried. */
__attribute__((always_inline)) static inline int timer_start_at(uvtw_wheel_t *w, uvtw_timer_t *timer,
                                                                uvtw_timer_cb cb, uint64_t deadline,
                                                                uint64_t repeat, bool in_place_tried) {
  if (w->closing)
    return UV_ECANCELED;
  set_cb_repeat(timer, cb, repeat);
  w->stats.started++;
  /* A restart to a later deadline beyond the ring: the entry stays put.
   * The earliest deadline cannot move earlier, so nothing to re-arm. */
  if (!in_place_tried && wheel_entry_linked(&timer->entry_) &&
      wheel_restart_lazy(&w->wheel, &timer->entry_, deadline)) {
    w->stats.stopped++;
    return 0;
  }
  bool rearming = rearm_needed(w, deadline); /* then the slow paths do it */
  if (wheel_entry_linked(&timer->entry_)) {
    /* A restart: logged, applied in a batch (wheel_restart). The wheel is
     * not empty, so it needs no catching up. */
    w->stats.stopped++;
    if (rearming || !wheel_restart_is_logged_only(&w->wheel))
      return restart_slow(w, timer, deadline); /* tail calls: see above */
    wheel_restart(&w->wheel, &timer->entry_, deadline);
    return 0;
  }
  /* A start right after this timer's stop: one operation, which may leave
   * the entry where it was. */
  if (!in_place_tried && !rearming && &timer->entry_ == w->wheel.removed) {
    if (wheel_reinsert(&w->wheel, &timer->entry_, deadline))
      wheel_flush(&w->wheel);
    return 0;
  }
  if (rearming || w->wheel.log_len != 0 || w->wheel.count == 0)
    return insert_slow(w, timer, deadline);
  wheel_apply_removed(&w->wheel);
  wheel_insert_now(&w->wheel, &timer->entry_, deadline);
  return 0;
}

/* timer_start_at after the in-place paths were tried, out of line: the
 * caller's fast path then keeps no registers to save and no frame. */
__attribute__((noinline)) static int start_not_in_place(uvtw_wheel_t *w, uvtw_timer_t *timer,
                                                        uvtw_timer_cb cb, uint64_t deadline,
                                                        uint64_t repeat) {
  return timer_start_at(w, timer, cb, deadline, repeat, true);
}

/* A start worked out from the timeout the general way, out of line: on a
 * wheel whose tick is not 1 ms, a deadline that overflows, or a wheel
 * other than the thread's last (start_switch). uvtw_timer_start then makes
 * no call but tail calls, and so needs no frame. */
__attribute__((noinline)) static int start_in_ticks(uvtw_wheel_t *w, uvtw_timer_t *timer,
                                                    uvtw_timer_cb cb, uint64_t timeout,
                                                    uint64_t repeat) {
  uint64_t deadline = ticks_of_ms(w, add_saturating(loop_now(w->loop), timeout));
  return timer_start_at(w, timer, cb, deadline, repeat, false);
}

/* A start on another wheel than the last one: remembers it, then starts. */
__attribute__((noinline)) static int start_switch(uvtw_timer_t *timer, uvtw_timer_cb cb,
                                                  uint64_t timeout, uint64_t repeat) {
  uvtw_wheel_t *w = wheel_of(timer);
  if (w == NULL)
    return UV_EINVAL;
  set_last_wheel(w);
  return start_in_ticks(w, timer, cb, timeout, repeat);
}

int uvtw_timer_start(uvtw_timer_t *timer, uvtw_timer_cb cb, uint64_t timeout, uint64_t repeat) {
  if (timer == NULL || cb == NULL)
    return UV_EINVAL;
  if (!is_last_wheel(timer))
    return start_switch(timer, cb, timeout, repeat);
  uvtw_wheel_t *w = wheel_known();
  /* The idle timeout pushed back, by a restart (the entry stays in place:
   * wheel_restart_lazy; the earliest deadline cannot move earlier, so
   * nothing to re-arm) or by a stop and start (the entry is put back and
   * logged, wheel_reinsert, unless the wheel must be re-armed first), with
   * as little around it as can be. A timer linked, or stopped last, means
   * the wheel is not closing (closing unlinks them all and applies the
   * stop). Bench bump at 10^6, 5 runs, against the same test inside
   * timer_start: 28.8 -> 24.7 ns (median). */
  uint64_t deadline;
  if (w->tick_ms == 1 && !__builtin_add_overflow(loop_now(w->loop), timeout, &deadline)) {
    if (wheel_entry_linked(&timer->entry_)) {
      if (wheel_restart_lazy(&w->wheel, &timer->entry_, deadline)) {
        w->restarts++;
        goto in_place;
      }
    } else if (&timer->entry_ == w->wheel.removed && !rearm_needed(w, deadline)) {
      set_cb_repeat(timer, cb, repeat);
      w->stats.started++;
      if (wheel_reinsert(&w->wheel, &timer->entry_, deadline))
        return flush_log(w); /* a tail call: see above */
      return 0;
    }
    return start_not_in_place(w, timer, cb, deadline, repeat);
  }
  return start_in_ticks(w, timer, cb, timeout, repeat);
in_place:
  set_cb_repeat(timer, cb, repeat);
  return 0;
}

/* A stop that must apply the restart log first, or may empty the wheel. */
__attribute__((noinline)) static int stop_slow(uvtw_wheel_t *w, uvtw_timer_t *timer) {
  wheel_remove(&w->wheel, &timer->entry_);
  w->stats.stopped++;
  if (w->wheel.count == 0 && !w->in_pass)
    disarm(w);
  return 0;
}

/* A stop of a timer on another wheel than the last one. */
__attribute__((noinline)) static int stop_switch(uvtw_timer_t *timer) {
  uvtw_wheel_t *w = wheel_of(timer);
  set_last_wheel(w);
  return stop_slow(w, timer);
}

int uvtw_timer_stop(uvtw_timer_t *timer) {
  if (timer == NULL)
    return UV_EINVAL;
  if (!wheel_entry_linked(&timer->entry_))
    return 0;
  if (!is_last_wheel(timer)) {
    return stop_switch(timer); /* tail calls, out of line: the common path keeps no frame */
  }
  uvtw_wheel_t *w = wheel_known();
  if (wheel_maybe_logged(&w->wheel, &timer->entry_) || w->wheel.count == 1) {
    return stop_slow(w, timer);
  }
  /* Its neighbours are joined at the next operation, unless that is a
   * start of this timer (wheel_reinsert). */
  wheel_remove_deferred(&w->wheel, &timer->entry_);
  w->stats.stopped++;
  return 0;
}

int uvtw_timer_again(uvtw_timer_t *timer) {
  if (timer == NULL || timer->cb_ == NULL)
    return UV_EINVAL;
  if (timer->repeat_ == 0)
    return uvtw_timer_stop(timer);
  return uvtw_timer_start(timer, timer->cb_, timer->repeat_, timer->repeat_);
}

void uvtw_timer_set_repeat(uvtw_timer_t *timer, uint64_t repeat) {
  timer->repeat_ = repeat;
}

uint64_t uvtw_timer_get_repeat(const uvtw_timer_t *timer) {
  return timer->repeat_;
}

uint64_t uvtw_timer_get_due_in(const uvtw_timer_t *timer) {
  if (!wheel_entry_linked(&timer->entry_))
    return 0;
  const uvtw_wheel_t *w = wheel_of(timer);
  uint64_t due = ms_of_ticks(w, timer->entry_.deadline);
  uint64_t now = loop_now(w->loop);
  return due > now ? due - now : 0;
}

int uvtw_timer_is_active(const uvtw_timer_t *timer) {
  return wheel_entry_linked(&timer->entry_);
}

/* ---- any-thread tasks -------------------------------------------------------- */

int uvtw_schedule(uvtw_wheel_t *wheel, uint64_t timeout, uvtw_task_cb cb, void *arg,
                  uvtw_ticket_t **ticket) {
  if (wheel == NULL || cb == NULL)
    return UV_EINVAL;
  uint64_t deadline_ms = add_saturating(uv_hrtime() / 1000000, timeout);
  shared_t *sh = wheel->shared;
  bool loop_thread = on_loop_thread(sh);
  if (loop_thread && wheel->closing)
    return UV_ECANCELED;
  if (!pending_take(sh))
    return UV_ENOBUFS;
  uvtw_ticket_t *task = malloc(sizeof *task);
  if (task == NULL) {
    pending_put(sh);
    return UV_ENOMEM;
  }
  uvtw_timer_init(wheel, &task->timer);
  task->timer.cb_ = task_entry;
  task->cb = cb;
  task->arg = arg;
  task->deadline = ticks_of_ms(wheel, deadline_ms);
  task->shared = sh;
  task->pins_shared = ticket != NULL;
  atomic_init(&task->refs, ticket != NULL ? 2 : 1);
  if (ticket != NULL)
    atomic_fetch_add(&sh->refs, 1);

  if (loop_thread) {
    atomic_init(&task->state, TASK_IN_WHEEL);
    atomic_fetch_add(&sh->tasks_active, 1);
    wheel->stats.started++;
    wheel->tasks_linked++;
    insert_entry(wheel, &task->timer, task->deadline);
  } else {
    atomic_init(&task->state, TASK_QUEUED);
    mpsc_push_result_t pushed = mpsc_push(&sh->queue, &task->node);
    if (pushed == MPSC_CLOSED) {
      pending_put(sh);
      if (ticket != NULL)
        shared_unref(sh);
      free(task);
      return UV_ECANCELED;
    }
    if (pushed == MPSC_PUSHED_FIRST)
      wake_loop(sh);
  }
  if (ticket != NULL)
    *ticket = task;
  return 0;
}

int uvtw_ticket_cancel(uvtw_ticket_t *task) {
  if (task == NULL)
    return UV_EINVAL;
  int state = atomic_load(&task->state);
  do {
    if (state == TASK_CANCELLED)
      return 0;
    if (state == TASK_FIRED)
      return UV_EALREADY;
  } while (!atomic_compare_exchange_weak(&task->state, &state, TASK_CANCELLED));

  shared_t *sh = task->shared;
  pending_put(sh);
  atomic_fetch_add(&sh->cancels_won, 1);
  if (state == TASK_QUEUED)
    return 0; /* its take-in message will find it cancelled */
  atomic_fetch_sub(&sh->tasks_active, 1);
  /* In the wheel: have the loop unlink it now rather than at its deadline. */
  if (on_loop_thread(sh)) {
    /* The task was in the wheel, so the wheel has not finished closing. If
     * it is closing, wheel_clear drops the entry. */
    uvtw_wheel_t *w = sh->wheel;
    if (!w->closing) {
      wheel_remove(&w->wheel, &task->timer.entry_);
      w->tasks_linked--;
      if (w->wheel.count == 0 && !w->in_pass)
        disarm(w);
      task_unref(task);
    }
    return 0;
  }
  atomic_fetch_add(&task->refs, 1); /* the message's reference */
  mpsc_push_result_t pushed = mpsc_push(&sh->queue, &task->node);
  if (pushed == MPSC_PUSHED_FIRST)
    wake_loop(sh);
  else if (pushed == MPSC_CLOSED)
    task_unref(task); /* the closing wheel drops the entry itself */
  return 0;
}

void uvtw_ticket_release(uvtw_ticket_t *task) {
  if (task != NULL)
    task_unref(task);
}
