/* bench_tasks: cross-thread task scheduling, uvtw_schedule against the
 * obvious alternative, in the same run.
 *
 * The alternative ("mutex+async") is what a libuv program writes without
 * uvtw: producers append to a mutex-protected list and call uv_async_send;
 * the loop's async callback takes the list and starts one uv_timer_t per
 * task (with the time already spent in the queue taken off its timeout, so
 * the deadline counts from the call as with uvtw); the timer's callback runs
 * the task and closes the timer. Its cancel is the equivalent exactly-once
 * cancel: a per-task atomic state that the canceller and the loop race for
 * by compare-and-swap, and a reference count so the canceller may touch the
 * task after the loop is done with it; the loop stops and closes a cancelled
 * task's uv_timer_t when it notices (when it takes the task in, or when the
 * timer fires).
 *
 * Measurements, each figure the median of --runs runs (default 5) with the
 * smallest and largest in parentheses. The runs are interleaved: run r of
 * every variant and producer count comes before run r + 1 of any, so noise
 * on a shared machine spreads over all of them, and each run takes the
 * variants in another order (run_order), so that what a run leaves behind
 * (a heap grown or freed) is not always met by the same variant.
 *
 *  1. Throughput. 1, 2 and 4 producer threads share a fixed number of tasks
 *     with random timeouts of 0..50 ms and schedule them as fast as they can.
 *     "calls/s" is tasks / time until the last producer returned from its
 *     last call (the producers' side); "done/s" is callbacks run / (time of
 *     the last callback - 50 ms, the longest timeout), so it equals calls/s
 *     when the loop keeps up and drops when it falls behind; "late" is the
 *     mean and largest delay of a callback past its due time (call +
 *     timeout), the plainest measure of the loop keeping up.
 *     "CPU ns" is the CPU time of the producer threads, and of the loop
 *     thread in uv_run, per task: the work each side does, which the rates
 *     show only as far as the threads got the CPU.
 *     Variants: uvtw fire-and-forget (ticket NULL); uvtw with a ticket that
 *     is released at once; mutex+async; and the cancel pair, uvtw+cancel and
 *     mutex+async+cancel, where every second task is cancelled by its
 *     producer right after the call (calls/s there counts the schedules,
 *     each with its cancel or release).
 *  2. Latency of a 0 ms task from the call (another thread) to the start of
 *     its callback, one task in flight at a time: p50 and p99 in microseconds.
 *     Each call waits LATENCY_PAUSE_US after the previous callback, so that
 *     it finds the loop asleep in its poll: what is measured is the wake-up
 *     and the dispatch, the same for both, not whether the loop happened to
 *     be still busy with the previous task (closing its uv_timer_t keeps
 *     mutex+async's loop awake a little longer).
 *  3. Memory: the process RSS before a burst of 10^6 fire-and-forget tasks
 *     from one thread (timeouts 0..50 ms), once they have all run, and once
 *     the wheel is closed. Measured first, on a fresh heap.
 *
 * Usage: bench_tasks [--quick] [--runs COUNT] [--only IMPL PRODUCERS]
 *   --quick: smaller runs, < 15 s; --only: throughput of that one variant
 *   (say "uvtw+ticket 2"), for a profiler, with the CPU time per task of
 *   the producers and of the loop thread (steadier on a shared machine).
 */
#define _POSIX_C_SOURCE 200809L

#include <inttypes.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <uv.h>

#include "uvtw.h"

#define MAX_TIMEOUT_MS 50
#define MAX_PRODUCERS 4
#define LATENCY_PAUSE_US 50 /* between a callback and the next call */
#define MAX_RUNS 21

static void die(const char *what, int rc) {
  fprintf(stderr, "bench_tasks: %s: %s\n", what, rc ? uv_strerror(rc) : "failed");
  exit(1);
}

static uint64_t rng_next(uint64_t *state) { /* splitmix64 */
  uint64_t z = (*state += UINT64_C(0x9E3779B97F4A7C15));
  z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
  return z ^ (z >> 31);
}

static uint64_t thread_cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void close_nothing(uv_handle_t *handle) {
  (void)handle;
}

/* ---- The alternative: mutex-protected list + uv_async_send + uv_timer_t --- */

typedef void (*task_fn)(void *arg, int status);

enum alt_state { ALT_PENDING, ALT_RAN, ALT_CANCELLED };

typedef struct alt_task_s {
  struct alt_task_s *next;
  uint64_t call_ns;
  uint64_t timeout;
  task_fn cb;
  void *arg;
  _Atomic int state;
  _Atomic int refs; /* the loop's, and the canceller's if it holds one */
  uv_timer_t timer;
} alt_task_t;

typedef struct alt_s {
  uv_loop_t *loop;
  uv_mutex_t mutex;
  alt_task_t *head;
  alt_task_t *tail;
  uv_async_t async;
} alt_t;

static void alt_task_unref(alt_task_t *task) {
  if (atomic_fetch_sub_explicit(&task->refs, 1, memory_order_acq_rel) == 1)
    free(task);
}

static void alt_task_closed(uv_handle_t *handle) {
  alt_task_unref(handle->data);
}

static void alt_task_due(uv_timer_t *timer) {
  alt_task_t *task = timer->data;
  int expected = ALT_PENDING;
  if (atomic_compare_exchange_strong(&task->state, &expected, ALT_RAN))
    task->cb(task->arg, 0);
  uv_close((uv_handle_t *)timer, alt_task_closed);
}

static void alt_drain(uv_async_t *async) {
  alt_t *alt = async->data;
  uv_mutex_lock(&alt->mutex);
  alt_task_t *task = alt->head;
  alt->head = alt->tail = NULL;
  uv_mutex_unlock(&alt->mutex);

  uint64_t now = uv_now(alt->loop);
  while (task != NULL) {
    alt_task_t *next = task->next;
    if (atomic_load_explicit(&task->state, memory_order_acquire) == ALT_CANCELLED) {
      alt_task_unref(task); /* noticed before its timer was started */
    } else {
      uint64_t deadline = task->call_ns / 1000000 + task->timeout;
      uv_timer_init(alt->loop, &task->timer);
      task->timer.data = task;
      uv_timer_start(&task->timer, alt_task_due, deadline > now ? deadline - now : 0, 0);
    }
    task = next;
  }
}

static int alt_init(alt_t *alt, uv_loop_t *loop) {
  memset(alt, 0, sizeof *alt);
  alt->loop = loop;
  uv_mutex_init(&alt->mutex);
  alt->async.data = alt;
  return uv_async_init(loop, &alt->async, alt_drain);
}

/* `ticket` non-NULL: the caller holds a reference, for alt_cancel, that it
 * gives up with alt_release. */
static int alt_schedule(alt_t *alt, uint64_t timeout, task_fn cb, void *arg, alt_task_t **ticket) {
  alt_task_t *task = malloc(sizeof *task);
  if (task == NULL)
    return UV_ENOMEM;
  task->call_ns = uv_hrtime();
  task->timeout = timeout;
  task->cb = cb;
  task->arg = arg;
  task->next = NULL;
  atomic_init(&task->state, ALT_PENDING);
  atomic_init(&task->refs, ticket != NULL ? 2 : 1);
  if (ticket != NULL)
    *ticket = task;
  uv_mutex_lock(&alt->mutex);
  if (alt->tail)
    alt->tail->next = task;
  else
    alt->head = task;
  alt->tail = task;
  uv_mutex_unlock(&alt->mutex);
  return uv_async_send(&alt->async);
}

/* 0 if the cancel won (the callback never runs), else UV_EALREADY. */
static int alt_cancel(alt_task_t *task) {
  int expected = ALT_PENDING;
  if (atomic_compare_exchange_strong(&task->state, &expected, ALT_CANCELLED))
    return 0;
  return expected == ALT_CANCELLED ? 0 : UV_EALREADY;
}

static void alt_release(alt_task_t *task) {
  alt_task_unref(task);
}

static void alt_close(alt_t *alt) {
  uv_close((uv_handle_t *)&alt->async, close_nothing);
}

/* ---- One measured run ------------------------------------------------------- */

enum impl { IMPL_UVTW, IMPL_UVTW_TICKET, IMPL_ALT, IMPL_UVTW_CANCEL, IMPL_ALT_CANCEL, IMPL_COUNT };
static const char *const impl_name[IMPL_COUNT] = {"uvtw", "uvtw+ticket", "mutex+async",
                                                  "uvtw+cancel", "mutex+cancel"};
/* The alternative each variant is compared with. */
static const enum impl impl_yardstick[IMPL_COUNT] = {IMPL_ALT, IMPL_ALT, IMPL_ALT, IMPL_ALT_CANCEL,
                                                     IMPL_ALT_CANCEL};

/* The i-th of n variants to run in run r: from variant r on, in steps of
 * 1 + r % (n - 1). With n prime every step gives each variant one place,
 * and over n - 1 runs each variant runs once right after each other one,
 * so none always meets what the same other one left behind (a heap grown
 * or freed, caches). */
static int run_order(int r, int i, int n) {
  return (r + i * (1 + r % (n - 1))) % n;
}
_Static_assert(IMPL_COUNT == 5, "run_order needs a prime number of variants");

static int impl_is_alt(enum impl impl) {
  return impl == IMPL_ALT || impl == IMPL_ALT_CANCEL;
}

typedef struct run_s run_t;

/* One task's argument: when it was scheduled, and for how long. */
typedef struct call_s {
  uint64_t call_ns;
  uint64_t timeout;
} call_t;

typedef struct producer_s {
  run_t *run;
  uv_thread_t thread;
  uint32_t tasks;
  uint64_t seed;
  call_t *calls;
  uint64_t done_ns;
  uint64_t cpu_ns;             /* the thread's CPU time */
  _Atomic int64_t cancels_won; /* -1 until the producer has finished */
  int error;
  char pad[64];
} producer_t;

struct run_s {
  enum impl impl;
  int nproducers;
  uv_loop_t loop;
  uvtw_wheel_t *wheel;
  alt_t alt;
  uv_async_t keepalive; /* referenced; keeps the loop running while producers work */
  atomic_int go;
  uint64_t total;
  uint64_t done; /* loop thread */
  uint64_t start_ns;
  uint64_t loop_cpu_ns; /* the loop thread's CPU time in uv_run */
  uint64_t last_cb_ns;
  double sum_late_ns;
  uint64_t max_late_ns;
  call_t *calls;
  producer_t producers[MAX_PRODUCERS];
};

static run_t *current_run; /* the run whose tasks are in flight */

/* Every task has run or been cancelled: the loop stops. The handles are
 * closed only after the producers are joined, so no uv_async_send can race
 * a uv_close. */
static void stop_if_finished(run_t *run) {
  uint64_t settled = run->done;
  for (int i = 0; i < run->nproducers; i++) {
    int64_t won = atomic_load_explicit(&run->producers[i].cancels_won, memory_order_acquire);
    if (won < 0)
      return;
    settled += (uint64_t)won;
  }
  if (settled == run->total)
    uv_stop(&run->loop);
}

static void count_task(void *arg, int status) {
  run_t *run = current_run;
  const call_t *call = arg;
  uint64_t now = uv_hrtime();
  uint64_t due = call->call_ns + call->timeout * 1000000;
  (void)status;
  if (now > due) {
    run->sum_late_ns += (double)(now - due);
    if (now - due > run->max_late_ns)
      run->max_late_ns = now - due;
  }
  run->last_cb_ns = now;
  if (++run->done == run->total || run->impl == IMPL_UVTW_CANCEL || run->impl == IMPL_ALT_CANCEL)
    stop_if_finished(run);
}

/* One call of the variant; every second task (odd i) of the cancel pair is
 * cancelled. Returns 1 if a cancel won, 0, or a negative error. */
static int call_one(run_t *run, uint32_t i, uint64_t timeout, call_t *call) {
  int rc, won = 0;
  uvtw_ticket_t *ticket;
  alt_task_t *alt_ticket;
  switch (run->impl) {
  case IMPL_UVTW:
    return uvtw_schedule(run->wheel, timeout, count_task, call, NULL);
  case IMPL_UVTW_TICKET:
  case IMPL_UVTW_CANCEL:
    rc = uvtw_schedule(run->wheel, timeout, count_task, call, &ticket);
    if (rc != 0)
      return rc;
    if (run->impl == IMPL_UVTW_CANCEL && (i & 1))
      won = uvtw_ticket_cancel(ticket) == 0;
    uvtw_ticket_release(ticket);
    return won;
  case IMPL_ALT:
    return alt_schedule(&run->alt, timeout, count_task, call, NULL);
  default:
    rc = alt_schedule(&run->alt, timeout, count_task, call, &alt_ticket);
    if (rc != 0)
      return rc;
    if (i & 1)
      won = alt_cancel(alt_ticket) == 0;
    alt_release(alt_ticket);
    return won;
  }
}

static void producer_main(void *arg) {
  producer_t *p = arg;
  run_t *run = p->run;
  int64_t won = 0;
  while (!atomic_load_explicit(&run->go, memory_order_acquire))
    sched_yield();
  for (uint32_t i = 0; i < p->tasks; i++) {
    uint64_t timeout = rng_next(&p->seed) % (MAX_TIMEOUT_MS + 1);
    call_t *call = &p->calls[i];
    call->timeout = timeout;
    call->call_ns = uv_hrtime();
    int rc = call_one(run, i, timeout, call);
    if (rc < 0) {
      p->error = rc;
      break;
    }
    won += rc;
  }
  p->done_ns = uv_hrtime();
  p->cpu_ns = thread_cpu_ns();
  atomic_store_explicit(&p->cancels_won, won, memory_order_release);
  uv_async_send(&run->keepalive); /* the loop checks whether all is done */
}

static void keepalive_cb(uv_async_t *async) {
  run_t *run = async->data;
  if (run->nproducers == 0) /* the latency run */
    uv_stop(&run->loop);
  else
    stop_if_finished(run);
}

static void run_setup(run_t *run, enum impl impl) {
  memset(run, 0, sizeof *run);
  run->impl = impl;
  int rc = uv_loop_init(&run->loop);
  if (rc)
    die("uv_loop_init", rc);
  rc = impl_is_alt(impl) ? alt_init(&run->alt, &run->loop)
                         : uvtw_wheel_new(&run->loop, NULL, &run->wheel);
  if (rc)
    die("creating the scheduler", rc);
  rc = uv_async_init(&run->loop, &run->keepalive, keepalive_cb);
  if (rc)
    die("uv_async_init", rc);
  run->keepalive.data = run;
}

/* After the producers are joined. */
static void run_teardown(run_t *run) {
  if (impl_is_alt(run->impl))
    alt_close(&run->alt);
  else
    uvtw_wheel_close(run->wheel, NULL, NULL);
  uv_close((uv_handle_t *)&run->keepalive, close_nothing);
  uv_run(&run->loop, UV_RUN_DEFAULT);
  if (uv_loop_close(&run->loop) != 0)
    die("uv_loop_close", UV_EBUSY);
}

typedef struct throughput_s {
  double calls_per_s;
  double done_per_s;
  double mean_late_ms;
  double max_late_ms;
  double producer_cpu_ns; /* per task: CPU time, a steadier figure on a shared machine */
  double loop_cpu_ns;
  double per_batch; /* tasks per drain of uvtw's queue */
} throughput_t;

/* Starts the producers, runs the loop until every task ran or was
 * cancelled, joins them. */
static void run_producers(run_t *run, int producers, uint64_t total) {
  uint64_t first = 0;
  run->nproducers = producers;
  run->total = total;
  for (int i = 0; i < producers; i++) {
    producer_t *p = &run->producers[i];
    p->run = run;
    p->tasks =
        (uint32_t)(total / (uint64_t)producers + ((uint64_t)i < total % (uint64_t)producers));
    p->seed = UINT64_C(12345) + (uint64_t)i;
    p->calls = run->calls + first;
    atomic_init(&p->cancels_won, -1);
    first += p->tasks;
    if (uv_thread_create(&p->thread, producer_main, p) != 0)
      die("uv_thread_create", 0);
  }
  run->start_ns = uv_hrtime();
  run->loop_cpu_ns = thread_cpu_ns();
  atomic_store_explicit(&run->go, 1, memory_order_release);
  uv_run(&run->loop, UV_RUN_DEFAULT);
  run->loop_cpu_ns = thread_cpu_ns() - run->loop_cpu_ns;
  for (int i = 0; i < producers; i++) {
    uv_thread_join(&run->producers[i].thread);
    if (run->producers[i].error)
      die("schedule", run->producers[i].error);
  }
}

static throughput_t measure_throughput(enum impl impl, int producers, uint64_t total) {
  run_t *run = malloc(sizeof *run);
  if (run == NULL)
    die("malloc", UV_ENOMEM);
  run_setup(run, impl);
  run->calls = calloc(total, sizeof *run->calls);
  if (run->calls == NULL)
    die("calloc", UV_ENOMEM);
  current_run = run;
  run_producers(run, producers, total);
  uvtw_stats_t stats = {0};
  if (!impl_is_alt(impl))
    uvtw_wheel_stats(run->wheel, &stats);
  uint64_t last_call_ns = run->start_ns, producer_cpu_ns = 0;
  for (int i = 0; i < producers; i++) {
    producer_cpu_ns += run->producers[i].cpu_ns;
    if (run->producers[i].done_ns > last_call_ns)
      last_call_ns = run->producers[i].done_ns;
  }
  run_teardown(run);
  uint64_t tail_ns = MAX_TIMEOUT_MS * UINT64_C(1000000);
  uint64_t done_ns = run->last_cb_ns - run->start_ns;
  throughput_t t = {
      .calls_per_s = (double)total / ((double)(last_call_ns - run->start_ns) / 1e9),
      .done_per_s = (double)run->done /
                    ((double)(done_ns > 2 * tail_ns ? done_ns - tail_ns : done_ns / 2) / 1e9),
      .mean_late_ms = run->sum_late_ns / (double)(run->done ? run->done : 1) / 1e6,
      .max_late_ms = (double)run->max_late_ns / 1e6,
      .producer_cpu_ns = (double)producer_cpu_ns / (double)total,
      .loop_cpu_ns = (double)run->loop_cpu_ns / (double)total,
      .per_batch = (double)total / (double)(stats.remote_batches ? stats.remote_batches : 1),
  };
  current_run = NULL;
  free(run->calls);
  free(run);
  return t;
}

/* ---- Latency of a 0 ms task ------------------------------------------------- */

typedef struct latency_s {
  run_t *run;
  uint32_t samples;
  uint64_t *ns;
  atomic_int ran;
  uint64_t ran_ns;
  int error;
} latency_t;

static void latency_task(void *arg, int status) {
  latency_t *l = arg;
  (void)status;
  l->ran_ns = uv_hrtime();
  atomic_store_explicit(&l->ran, 1, memory_order_release);
}

static void latency_producer(void *arg) {
  latency_t *l = arg;
  run_t *run = l->run;
  for (uint32_t i = 0; i < l->samples; i++) {
    uint64_t pause_end = uv_hrtime() + LATENCY_PAUSE_US * 1000;
    while (uv_hrtime() < pause_end)
      ; /* spinning: no sleep's timer slack */
    atomic_store_explicit(&l->ran, 0, memory_order_relaxed);
    uint64_t call_ns = uv_hrtime();
    int rc;
    if (run->impl == IMPL_ALT) {
      rc = alt_schedule(&run->alt, 0, latency_task, l, NULL);
    } else if (run->impl == IMPL_UVTW_TICKET) {
      uvtw_ticket_t *ticket;
      rc = uvtw_schedule(run->wheel, 0, latency_task, l, &ticket);
      if (rc == 0)
        uvtw_ticket_release(ticket);
    } else {
      rc = uvtw_schedule(run->wheel, 0, latency_task, l, NULL);
    }
    if (rc != 0) {
      l->error = rc;
      break;
    }
    while (!atomic_load_explicit(&l->ran, memory_order_acquire))
      sched_yield();
    l->ns[i] = l->ran_ns - call_ns;
  }
  uv_async_send(&run->keepalive); /* tells the loop to stop */
}

static int compare_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

typedef struct percentiles_s {
  double p50_us;
  double p99_us;
} percentiles_t;

static percentiles_t measure_latency(enum impl impl, uint32_t samples) {
  run_t *run = malloc(sizeof *run);
  latency_t l;
  if (run == NULL)
    die("malloc", UV_ENOMEM);
  memset(&l, 0, sizeof l);
  run_setup(run, impl);
  l.run = run;
  l.samples = samples;
  l.ns = calloc(samples, sizeof *l.ns);
  if (l.ns == NULL)
    die("calloc", UV_ENOMEM);
  uv_thread_t thread;
  if (uv_thread_create(&thread, latency_producer, &l) != 0)
    die("uv_thread_create", 0);
  uv_run(&run->loop, UV_RUN_DEFAULT);
  uv_thread_join(&thread);
  if (l.error)
    die("schedule", l.error);
  run_teardown(run);
  qsort(l.ns, samples, sizeof *l.ns, compare_u64);
  percentiles_t p = {
      .p50_us = (double)l.ns[samples / 2] / 1e3,
      .p99_us = (double)l.ns[(uint64_t)samples * 99 / 100] / 1e3,
  };
  free(l.ns);
  free(run);
  return p;
}

/* ---- Memory after a burst --------------------------------------------------- */

static double rss_mib(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  unsigned long size = 0, resident = 0;
  if (f == NULL)
    return 0;
  if (fscanf(f, "%lu %lu", &size, &resident) != 2)
    resident = 0;
  fclose(f);
  return (double)resident * (double)sysconf(_SC_PAGESIZE) / (1024.0 * 1024.0);
}

/* RSS before a burst of `total` tasks from one producer, once every task
 * ran (the wheel still open), and after the wheel closed. */
static void measure_memory(uint64_t total) {
  run_t *run = malloc(sizeof *run);
  if (run == NULL)
    die("malloc", UV_ENOMEM);
  run_setup(run, IMPL_UVTW);
  run->calls = calloc(total, sizeof *run->calls);
  if (run->calls == NULL)
    die("calloc", UV_ENOMEM);
  memset(run->calls, 0xff, total * sizeof *run->calls); /* resident before "before" */
  current_run = run;
  double before = rss_mib();
  run_producers(run, 1, total);
  double after = rss_mib();
  run_teardown(run);
  current_run = NULL;
  printf("\nmemory: a burst of %" PRIu64
         " fire-and-forget tasks from one thread, timeouts 0..%d ms\n\n",
         total, MAX_TIMEOUT_MS);
  printf("  RSS before %.1f MiB, after they all ran %.1f MiB (%.2fx), after closing %.1f MiB\n",
         before, after, after / before, rss_mib());
  free(run->calls);
  free(run);
}

/* ---- Memory held by survivors ------------------------------------------------ */

/* One survivor per N tasks, the rest ended: what the library keeps for
 * the survivors is RSS growth. The loop runs on a thread of its own, so
 * that this thread can measure while the loop is blocked in a callback. */
enum survivor { SURVIVOR_PENDING, SURVIVOR_TICKET, SURVIVOR_CANCELLED, SURVIVOR_KINDS };
static const char *const survivor_name[SURVIVOR_KINDS] = {"pending", "ran, ticket kept",
                                                          "cancelled, loop blocked"};

typedef struct survivors_s {
  uv_loop_t loop;
  uvtw_wheel_t *wheel;
  uv_async_t stop;
  uv_thread_t thread;
  uv_sem_t signal;  /* a barrier task ran, or the blocking task began */
  uv_sem_t unblock; /* lets the blocking task return */
  _Atomic uint64_t ran;
} survivors_t;

static void survivor_ran(void *arg, int status) {
  survivors_t *s = arg;
  if (status == 0)
    atomic_fetch_add(&s->ran, 1);
}

static void survivor_signal(void *arg, int status) {
  (void)status;
  uv_sem_post(&((survivors_t *)arg)->signal);
}

static void survivor_block(void *arg, int status) {
  survivors_t *s = arg;
  (void)status;
  uv_sem_post(&s->signal);
  uv_sem_wait(&s->unblock);
}

static void survivors_stop(uv_async_t *async) {
  survivors_t *s = async->data;
  uvtw_wheel_close(s->wheel, NULL, NULL);
  uv_close((uv_handle_t *)&s->stop, close_nothing);
}

static void survivors_loop(void *arg) {
  uv_run(&((survivors_t *)arg)->loop, UV_RUN_DEFAULT);
}

/* Waits until the loop has read everything queued before. */
static void survivors_barrier(survivors_t *s) {
  if (uvtw_schedule(s->wheel, 0, survivor_signal, s, NULL) != 0)
    die("uvtw_schedule", 0);
  uv_sem_wait(&s->signal);
}

#ifdef __GLIBC__
#include <malloc.h>
/* Bytes glibc's malloc holds: in use, and free but kept. */
static void malloc_held(double *in_use, double *kept) {
  struct mallinfo2 m = mallinfo2();
  *in_use = (double)m.uordblks + (double)m.hblkhd;
  *kept = (double)m.fordblks;
}
#else
static void malloc_held(double *in_use, double *kept) {
  *in_use = *kept = 0;
}
#endif

typedef struct held_s {
  double rss, malloc_in_use, malloc_kept; /* MiB */
} held_t;

static held_t held_now(void) {
  held_t h;
  malloc_held(&h.malloc_in_use, &h.malloc_kept);
  h.rss = rss_mib();
  h.malloc_in_use /= 1024.0 * 1024.0;
  h.malloc_kept /= 1024.0 * 1024.0;
  return h;
}

/* `total` tasks of `timeout` ms from this thread, with tickets; every
 * `every`th survives as `kind`, the others end. Prints the growth with the
 * survivors alive and once they ended too. */
static void survivors_case(uvtw_ticket_t **tickets, uint64_t total, uint64_t every,
                           uint64_t timeout, enum survivor kind) {
  survivors_t *s = calloc(1, sizeof *s);
  if (s == NULL || uv_loop_init(&s->loop) != 0 || uvtw_wheel_new(&s->loop, NULL, &s->wheel) != 0 ||
      uv_async_init(&s->loop, &s->stop, survivors_stop) != 0 || uv_sem_init(&s->signal, 0) != 0 ||
      uv_sem_init(&s->unblock, 0) != 0)
    die("survivors: setup", 0);
  s->stop.data = s;
  if (uv_thread_create(&s->thread, survivors_loop, s) != 0)
    die("uv_thread_create", 0);
  survivors_barrier(s);
  held_t before = held_now();
  for (uint64_t i = 0; i < total; i++)
    if (uvtw_schedule(s->wheel, timeout, survivor_ran, s, &tickets[i]) != 0)
      die("uvtw_schedule", 0);
  uint64_t survivors = (total + every - 1) / every;
  for (uint64_t i = 0; i < total; i++)
    if (i % every != 0) {
      if (kind != SURVIVOR_TICKET)
        uvtw_ticket_cancel(tickets[i]);
      uvtw_ticket_release(tickets[i]);
    }
  if (kind == SURVIVOR_TICKET)
    while (atomic_load(&s->ran) < total)
      uv_sleep(10);
  survivors_barrier(s);
  if (kind == SURVIVOR_CANCELLED) {
    if (uvtw_schedule(s->wheel, 0, survivor_block, s, NULL) != 0)
      die("uvtw_schedule", 0);
    uv_sem_wait(&s->signal); /* the loop is blocked in survivor_block */
    for (uint64_t i = 0; i < total; i += every)
      uvtw_ticket_cancel(tickets[i]);
  }
  held_t alive = held_now();
  if (kind == SURVIVOR_CANCELLED)
    uv_sem_post(&s->unblock);
  for (uint64_t i = 0; i < total; i += every) {
    if (kind == SURVIVOR_PENDING)
      uvtw_ticket_cancel(tickets[i]);
    uvtw_ticket_release(tickets[i]);
  }
  survivors_barrier(s);
  held_t ended = held_now();
  double growth = alive.rss - before.rss;
  double bound = (double)survivors * 8.0 / 1024.0 + 8.0;
  printf("  %-24s  %5" PRIu64 "  %7" PRIu64 "  %8" PRIu64 "  %9.1f  %10.2f  %9.1f  %9.1f  %9.1f  "
         "%9.1f\n",
         survivor_name[kind], timeout, every, survivors, growth,
         growth * 1024.0 / (double)survivors, bound, alive.malloc_in_use - before.malloc_in_use,
         alive.malloc_kept - before.malloc_kept, ended.rss - before.rss);
  uv_async_send(&s->stop);
  uv_thread_join(&s->thread);
  if (uv_loop_close(&s->loop) != 0)
    die("uv_loop_close", UV_EBUSY);
  uv_sem_destroy(&s->signal);
  uv_sem_destroy(&s->unblock);
  free(s);
}

static void measure_survivors(uint64_t total) {
  static const uint64_t every[] = {1, 64, 2047, 4096};
  static const uint64_t timeouts[] = {500, 1500};
  uvtw_ticket_t **tickets = malloc(total * sizeof *tickets);
  if (tickets == NULL)
    die("malloc", UV_ENOMEM);
  memset(tickets, 0xff, total * sizeof *tickets); /* resident before "before" */
  printf("\nmemory held by survivors: %" PRIu64
         " tasks with tickets from one thread, one in N survives, the others end\n"
         "  growth: RSS with the survivors alive - RSS before the tasks (MiB); bound: 8 KiB per\n"
         "  survivor + 8 MiB; malloc: glibc's heap in use and kept free (growth, MiB); ended:\n"
         "  RSS growth once the survivors ended too (MiB). One run of each.\n\n",
         total);
  printf("  %-24s  %5s  %7s  %8s  %9s  %10s  %9s  %9s  %9s  %9s\n", "survivor", "ms", "N",
         "survivors", "growth", "KiB/surv.", "bound", "malloc", "kept", "ended");
  for (int kind = 0; kind < SURVIVOR_KINDS; kind++)
    for (size_t t = 0; t < sizeof timeouts / sizeof timeouts[0]; t++)
      for (size_t e = 0; e < sizeof every / sizeof every[0]; e++)
        survivors_case(tickets, total, every[e], timeouts[t], (enum survivor)kind);
  free(tickets);
}

/* ---- Report ------------------------------------------------------------------- */

static int compare_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* "median (min-max)" of n values, sorted in place. */
typedef struct summary_s {
  double median, min, max;
} summary_t;

static summary_t summarize(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, compare_double);
  summary_t s = {n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2, v[0], v[n - 1]};
  return s;
}

static void print_cell(summary_t s) {
  char buf[48];
  snprintf(buf, sizeof buf, "%.2f (%.2f-%.2f)", s.median, s.min, s.max);
  printf("  %20s", buf);
}

static const int producer_counts[] = {1, 2, 4};
enum { NCOUNTS = sizeof producer_counts / sizeof producer_counts[0] };

/* Figures [count][impl][metric][run]. */
enum { M_CALLS, M_DONE, M_LATE_MEAN, M_LATE_MAX, M_PRODUCER_CPU, M_LOOP_CPU, M_COUNT };
static double figures[NCOUNTS][IMPL_COUNT][M_COUNT][MAX_RUNS];

static void print_throughput(int runs) {
  printf("  %-9s  %-12s  %20s  %20s  %20s  %20s  %20s  %20s\n", "producers", "impl", "Mcalls/s",
         "Mdone/s", "late mean ms", "late max ms", "producers CPU ns", "loop CPU ns");
  for (int c = 0; c < NCOUNTS; c++)
    for (int impl = 0; impl < IMPL_COUNT; impl++) {
      printf("  %-9d  %-12s", producer_counts[c], impl_name[impl]);
      for (int m = 0; m < M_COUNT; m++) {
        double v[MAX_RUNS];
        memcpy(v, figures[c][impl][m], sizeof v);
        print_cell(summarize(v, runs));
      }
      printf("\n");
    }
  printf("\n  ratios of medians against the alternative (> 1: uvtw better)\n");
  printf("  %-9s  %-12s  %10s  %10s  %12s  %14s  %10s\n", "producers", "impl", "calls/s", "done/s",
         "late mean", "producers CPU", "loop CPU");
  for (int c = 0; c < NCOUNTS; c++)
    for (int impl = 0; impl < IMPL_COUNT; impl++) {
      if (impl_is_alt((enum impl)impl))
        continue;
      summary_t s[M_COUNT], alt[M_COUNT];
      for (int m = 0; m < M_COUNT; m++) {
        double v[MAX_RUNS];
        memcpy(v, figures[c][impl][m], sizeof v);
        s[m] = summarize(v, runs);
        memcpy(v, figures[c][impl_yardstick[impl]][m], sizeof v);
        alt[m] = summarize(v, runs);
      }
      double late = s[M_LATE_MEAN].median > 0.001 ? s[M_LATE_MEAN].median : 0.001;
      printf("  %-9d  %-12s  %9.2fx  %9.2fx  %11.2fx  %13.2fx  %9.2fx\n", producer_counts[c],
             impl_name[impl], s[M_CALLS].median / alt[M_CALLS].median,
             s[M_DONE].median / alt[M_DONE].median, alt[M_LATE_MEAN].median / late,
             alt[M_PRODUCER_CPU].median / s[M_PRODUCER_CPU].median,
             alt[M_LOOP_CPU].median / s[M_LOOP_CPU].median);
    }
}

static void run_latency(int runs, uint32_t samples) {
  static const enum impl latency_impls[] = {IMPL_UVTW, IMPL_UVTW_TICKET, IMPL_ALT};
  enum { NLAT = 3 };
  double p50[NLAT][MAX_RUNS], p99[NLAT][MAX_RUNS];
  printf("\nlatency of a 0 ms task, call (other thread) -> callback, one in flight, each call "
         "%d us after the previous callback, %u samples per run, median of %d runs (min-max)\n\n",
         LATENCY_PAUSE_US, samples, runs);
  for (int r = 0; r < runs; r++)
    for (int k = 0; k < NLAT; k++) {
      int i = run_order(r, k, NLAT); /* NLAT is prime too */
      percentiles_t p = measure_latency(latency_impls[i], samples);
      p50[i][r] = p.p50_us;
      p99[i][r] = p.p99_us;
    }
  printf("  %-12s  %20s  %20s\n", "impl", "p50 us", "p99 us");
  for (int i = 0; i < NLAT; i++) {
    printf("  %-12s", impl_name[latency_impls[i]]);
    print_cell(summarize(p50[i], runs));
    print_cell(summarize(p99[i], runs));
    printf("\n");
  }
}

/* --only: runs of one variant, each figure printed. */
static int run_only(const char *name, int producers, int runs, uint64_t total) {
  for (int impl = 0; impl < IMPL_COUNT; impl++) {
    if (strcmp(name, impl_name[impl]) != 0)
      continue;
    for (int r = 0; r < runs; r++) {
      throughput_t t = measure_throughput((enum impl)impl, producers, total);
      printf("%s %d: %.2f Mcalls/s, %.2f Mdone/s, late mean %.2f ms, max %.2f ms; CPU ns per "
             "task: producers %.0f, loop %.0f; tasks per batch %.1f\n",
             name, producers, t.calls_per_s / 1e6, t.done_per_s / 1e6, t.mean_late_ms,
             t.max_late_ms, t.producer_cpu_ns, t.loop_cpu_ns, t.per_batch);
    }
    return 0;
  }
  fprintf(stderr, "bench_tasks: no variant named %s\n", name);
  return 2;
}

int main(int argc, char **argv) {
  int quick = 0, runs = 0, only_producers = 0;
  const char *only = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--quick") == 0) {
      quick = 1;
    } else if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc) {
      runs = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--only") == 0 && i + 2 < argc) {
      only = argv[++i];
      only_producers = atoi(argv[++i]);
    } else {
      fprintf(stderr, "usage: %s [--quick] [--runs COUNT] [--only IMPL PRODUCERS]\n", argv[0]);
      return 2;
    }
  }
  if (runs == 0)
    runs = quick ? 1 : 5;
  if (runs < 1 || runs > MAX_RUNS) {
    fprintf(stderr, "bench_tasks: --runs must be 1..%d\n", MAX_RUNS);
    return 2;
  }
  const uint64_t total = quick ? 100000 : 400000;
  const uint32_t samples = quick ? 2000 : 20000;
  uv_cpu_info_t *cpus;
  int ncpus = 0;
  if (only != NULL) {
    if (only_producers < 1 || only_producers > MAX_PRODUCERS) {
      fprintf(stderr, "bench_tasks: --only: 1..%d producers\n", MAX_PRODUCERS);
      return 2;
    }
    return run_only(only, only_producers, runs, total);
  }

  if (uv_cpu_info(&cpus, &ncpus) == 0)
    uv_free_cpu_info(cpus, ncpus);
  printf("bench_tasks: uvtw %s, libuv %s, %d CPUs%s\n", uvtw_version_string(), uv_version_string(),
         ncpus, quick ? ", --quick" : "");
  measure_memory(quick ? 100000 : 1000000);
  measure_survivors(quick ? 100000 : 1000000);

  printf("\nthroughput: %" PRIu64 " tasks per run shared by the producers, timeouts 0..%d ms, "
         "median of %d interleaved runs (min-max)\n",
         total, MAX_TIMEOUT_MS, runs);
  printf(
      "  calls/s: tasks / time to the producers' last return\n"
      "  done/s: callbacks / (time to the last callback - %d ms); late: callback time - due time\n"
      "  CPU ns: the producer threads' and the loop thread's CPU time per task, steadier than the\n"
      "          rates when other work shares the machine\n"
      "  +cancel: every second task cancelled by its producer right after the call\n\n",
      MAX_TIMEOUT_MS);
  for (int r = 0; r < runs; r++)
    for (int c = 0; c < NCOUNTS; c++)
      for (int i = 0; i < IMPL_COUNT; i++) {
        int impl = run_order(r, i, IMPL_COUNT);
        throughput_t t = measure_throughput((enum impl)impl, producer_counts[c], total);
        figures[c][impl][M_CALLS][r] = t.calls_per_s / 1e6;
        figures[c][impl][M_DONE][r] = t.done_per_s / 1e6;
        figures[c][impl][M_LATE_MEAN][r] = t.mean_late_ms;
        figures[c][impl][M_LATE_MAX][r] = t.max_late_ms;
        figures[c][impl][M_PRODUCER_CPU][r] = t.producer_cpu_ns;
        figures[c][impl][M_LOOP_CPU][r] = t.loop_cpu_ns;
      }
  print_throughput(runs);
  run_latency(runs, samples);
  return 0;
}
