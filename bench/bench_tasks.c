/* bench_tasks: cross-thread task scheduling, uvtw_schedule against the
 * obvious alternative, in the same run.
 *
 * The alternative ("mutex+async") is what a libuv program writes without
 * uvtw: producers append to a mutex-protected list and call uv_async_send;
 * the loop's async callback takes the list and starts one uv_timer_t per
 * task (with the time already spent in the queue taken off its timeout, so
 * the deadline counts from the call as with uvtw); the timer's callback runs
 * the task and closes the timer.
 *
 * Two measurements:
 *
 *  1. Throughput. 1, 2 and 4 producer threads share a fixed number of tasks
 *     with random timeouts of 0..50 ms and schedule them as fast as they can.
 *     "calls/s" is tasks / time until the last producer returned from its
 *     last call (the producers' side); "done/s" is tasks / (time until the
 *     last callback ran - 50 ms, the longest timeout), so it equals calls/s
 *     when the loop keeps up and drops when it falls behind; "late" is the
 *     mean and largest delay of a callback past its due time (call +
 *     timeout), the plainest measure of the loop keeping up.
 *     Variants: uvtw fire-and-forget (ticket NULL), uvtw with a ticket that is
 *     released at once, mutex+async.
 *  2. Latency of a 0 ms task from the call (another thread) to the start of
 *     its callback, one task in flight at a time: p50 and p99 in microseconds.
 *
 * Usage: bench_tasks [--quick]   (--quick: smaller runs, < 10 s)
 */
#define _POSIX_C_SOURCE 200809L

#include <inttypes.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "uvtw.h"

#define MAX_TIMEOUT_MS 50
#define MAX_PRODUCERS 4

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

static void close_nothing(uv_handle_t *handle) {
  (void)handle;
}

/* ---- The alternative: mutex-protected list + uv_async_send + uv_timer_t --- */

typedef void (*task_fn)(void *arg, int status);

typedef struct alt_task_s {
  struct alt_task_s *next;
  uint64_t call_ns;
  uint64_t timeout;
  task_fn cb;
  void *arg;
  uv_timer_t timer;
} alt_task_t;

typedef struct alt_s {
  uv_loop_t *loop;
  uv_mutex_t mutex;
  alt_task_t *head;
  alt_task_t *tail;
  uv_async_t async;
} alt_t;

static void alt_task_closed(uv_handle_t *handle) {
  free(handle->data);
}

static void alt_task_due(uv_timer_t *timer) {
  alt_task_t *task = timer->data;
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
    uint64_t deadline = task->call_ns / 1000000 + task->timeout;
    uv_timer_init(alt->loop, &task->timer);
    task->timer.data = task;
    uv_timer_start(&task->timer, alt_task_due, deadline > now ? deadline - now : 0, 0);
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

static int alt_schedule(alt_t *alt, uint64_t timeout, task_fn cb, void *arg) {
  alt_task_t *task = malloc(sizeof *task);
  if (task == NULL)
    return UV_ENOMEM;
  task->call_ns = uv_hrtime();
  task->timeout = timeout;
  task->cb = cb;
  task->arg = arg;
  task->next = NULL;
  uv_mutex_lock(&alt->mutex);
  if (alt->tail)
    alt->tail->next = task;
  else
    alt->head = task;
  alt->tail = task;
  uv_mutex_unlock(&alt->mutex);
  return uv_async_send(&alt->async);
}

static void alt_close(alt_t *alt) {
  uv_close((uv_handle_t *)&alt->async, close_nothing);
}

/* ---- One measured run ------------------------------------------------------- */

enum impl { IMPL_UVTW, IMPL_UVTW_TICKET, IMPL_ALT, IMPL_COUNT };
static const char *const impl_name[IMPL_COUNT] = {"uvtw", "uvtw+ticket", "mutex+async"};

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
  int error;
} producer_t;

struct run_s {
  enum impl impl;
  uv_loop_t loop;
  uvtw_wheel_t *wheel;
  alt_t alt;
  uv_async_t keepalive; /* referenced; keeps the loop running while producers work */
  atomic_int go;
  uint64_t total;
  uint64_t done;        /* loop thread */
  uint64_t start_ns;
  uint64_t last_cb_ns;
  double sum_late_ns;
  uint64_t max_late_ns;
  call_t *calls;
  producer_t producers[MAX_PRODUCERS];
};

static run_t *current_run; /* the run whose tasks are in flight */

/* The loop stops when the work is done; the handles are closed only after
 * the producers are joined, so no uv_async_send can race a uv_close. */
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
  if (++run->done == run->total) {
    run->last_cb_ns = uv_hrtime();
    uv_stop(&run->loop);
  }
}

static void producer_main(void *arg) {
  producer_t *p = arg;
  run_t *run = p->run;
  while (!atomic_load_explicit(&run->go, memory_order_acquire))
    sched_yield();
  for (uint32_t i = 0; i < p->tasks; i++) {
    uint64_t timeout = rng_next(&p->seed) % (MAX_TIMEOUT_MS + 1);
    call_t *call = &p->calls[i];
    int rc;
    call->timeout = timeout;
    call->call_ns = uv_hrtime();
    if (run->impl == IMPL_UVTW) {
      rc = uvtw_schedule(run->wheel, timeout, count_task, call, NULL);
    } else if (run->impl == IMPL_UVTW_TICKET) {
      uvtw_ticket_t *ticket;
      rc = uvtw_schedule(run->wheel, timeout, count_task, call, &ticket);
      if (rc == 0)
        uvtw_ticket_release(ticket);
    } else {
      rc = alt_schedule(&run->alt, timeout, count_task, call);
    }
    if (rc != 0) {
      p->error = rc;
      break;
    }
  }
  p->done_ns = uv_hrtime();
}

static void keepalive_cb(uv_async_t *async) {
  run_t *run = async->data;
  uv_stop(&run->loop);
}

static void run_setup(run_t *run, enum impl impl) {
  memset(run, 0, sizeof *run);
  run->impl = impl;
  int rc = uv_loop_init(&run->loop);
  if (rc)
    die("uv_loop_init", rc);
  rc = impl == IMPL_ALT ? alt_init(&run->alt, &run->loop) : uvtw_wheel_new(&run->loop, NULL, &run->wheel);
  if (rc)
    die("creating the scheduler", rc);
  rc = uv_async_init(&run->loop, &run->keepalive, keepalive_cb);
  if (rc)
    die("uv_async_init", rc);
  run->keepalive.data = run;
}

/* After the producers are joined. */
static void run_teardown(run_t *run) {
  if (run->impl == IMPL_ALT)
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
} throughput_t;

static throughput_t measure_throughput(enum impl impl, int producers, uint64_t total) {
  run_t *run = malloc(sizeof *run);
  if (run == NULL)
    die("malloc", UV_ENOMEM);
  run_setup(run, impl);
  run->total = total;
  run->calls = calloc(total, sizeof *run->calls);
  if (run->calls == NULL)
    die("calloc", UV_ENOMEM);
  current_run = run;
  uint64_t first = 0;
  for (int i = 0; i < producers; i++) {
    producer_t *p = &run->producers[i];
    p->run = run;
    p->tasks = (uint32_t)(total / (uint64_t)producers + ((uint64_t)i < total % (uint64_t)producers));
    p->seed = UINT64_C(12345) + (uint64_t)i;
    p->calls = run->calls + first;
    first += p->tasks;
    if (uv_thread_create(&p->thread, producer_main, p) != 0)
      die("uv_thread_create", 0);
  }
  run->start_ns = uv_hrtime();
  atomic_store_explicit(&run->go, 1, memory_order_release);
  uv_run(&run->loop, UV_RUN_DEFAULT);
  uint64_t last_call_ns = run->start_ns;
  for (int i = 0; i < producers; i++) {
    uv_thread_join(&run->producers[i].thread);
    if (run->producers[i].error)
      die("schedule", run->producers[i].error);
    if (run->producers[i].done_ns > last_call_ns)
      last_call_ns = run->producers[i].done_ns;
  }
  run_teardown(run);
  uint64_t tail_ns = MAX_TIMEOUT_MS * UINT64_C(1000000);
  uint64_t done_ns = run->last_cb_ns - run->start_ns;
  throughput_t t = {
      .calls_per_s = (double)total / ((double)(last_call_ns - run->start_ns) / 1e9),
      .done_per_s = (double)total / ((double)(done_ns > 2 * tail_ns ? done_ns - tail_ns : done_ns / 2) / 1e9),
      .mean_late_ms = run->sum_late_ns / (double)total / 1e6,
      .max_late_ms = (double)run->max_late_ns / 1e6,
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
    atomic_store_explicit(&l->ran, 0, memory_order_relaxed);
    uint64_t call_ns = uv_hrtime();
    int rc;
    if (run->impl == IMPL_ALT) {
      rc = alt_schedule(&run->alt, 0, latency_task, l);
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

/* ---- Report ------------------------------------------------------------------- */

int main(int argc, char **argv) {
  int quick = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--quick") == 0) {
      quick = 1;
    } else {
      fprintf(stderr, "usage: %s [--quick]\n", argv[0]);
      return 2;
    }
  }
  const uint64_t total = quick ? 150000 : 400000;
  const int repeats = quick ? 2 : 3; /* best of: the machine may be shared */
  const uint32_t samples = quick ? 5000 : 20000;
  static const int producer_counts[] = {1, 2, 4};
  enum { NCOUNTS = sizeof producer_counts / sizeof producer_counts[0] };
  throughput_t best[NCOUNTS][IMPL_COUNT];
  uv_cpu_info_t *cpus;
  int ncpus = 0;

  if (uv_cpu_info(&cpus, &ncpus) == 0)
    uv_free_cpu_info(cpus, ncpus);
  printf("bench_tasks: uvtw %s, libuv %s, %d CPUs%s\n", uvtw_version_string(), uv_version_string(),
         ncpus, quick ? ", --quick" : "");
  printf("\nthroughput: %" PRIu64 " tasks per run shared by the producers, timeouts 0..%d ms, "
         "best of %d\n",
         total, MAX_TIMEOUT_MS, repeats);
  printf("  calls/s: tasks / time to the producers' last return\n"
         "  done/s: tasks / (time to the last callback - %d ms); late: callback time - due time\n\n",
         MAX_TIMEOUT_MS);
  printf("  %-9s  %-12s  %10s  %12s  %10s  %12s  %11s\n", "producers", "impl", "Mcalls/s",
         "Mcalls/s/thr", "Mdone/s", "late mean ms", "late max ms");
  for (int c = 0; c < NCOUNTS; c++) {
    for (int impl = 0; impl < IMPL_COUNT; impl++) {
      throughput_t b = {0, 0, 1e300, 1e300};
      for (int r = 0; r < repeats; r++) {
        throughput_t t = measure_throughput((enum impl)impl, producer_counts[c], total);
        if (t.calls_per_s > b.calls_per_s)
          b.calls_per_s = t.calls_per_s;
        if (t.done_per_s > b.done_per_s)
          b.done_per_s = t.done_per_s;
        if (t.mean_late_ms < b.mean_late_ms)
          b.mean_late_ms = t.mean_late_ms;
        if (t.max_late_ms < b.max_late_ms)
          b.max_late_ms = t.max_late_ms;
      }
      best[c][impl] = b;
      printf("  %-9d  %-12s  %10.2f  %12.2f  %10.2f  %12.2f  %11.2f\n", producer_counts[c],
             impl_name[impl], b.calls_per_s / 1e6, b.calls_per_s / 1e6 / producer_counts[c],
             b.done_per_s / 1e6, b.mean_late_ms, b.max_late_ms);
      fflush(stdout);
    }
  }
  printf("\n  ratios against mutex+async (> 1: uvtw faster)\n");
  printf("  %-9s  %-12s  %10s  %10s  %12s\n", "producers", "impl", "calls/s", "done/s",
         "late mean");
  for (int c = 0; c < NCOUNTS; c++)
    for (int impl = 0; impl < IMPL_ALT; impl++)
      printf("  %-9d  %-12s  %9.2fx  %9.2fx  %11.2fx\n", producer_counts[c], impl_name[impl],
             best[c][impl].calls_per_s / best[c][IMPL_ALT].calls_per_s,
             best[c][impl].done_per_s / best[c][IMPL_ALT].done_per_s,
             best[c][IMPL_ALT].mean_late_ms / (best[c][impl].mean_late_ms > 0.001 ? best[c][impl].mean_late_ms : 0.001));

  printf("\nlatency of a 0 ms task, call (other thread) -> callback, one in flight, %u samples\n\n",
         samples);
  printf("  %-12s  %10s  %10s\n", "impl", "p50 us", "p99 us");
  percentiles_t lat[IMPL_COUNT];
  for (int impl = 0; impl < IMPL_COUNT; impl++) {
    lat[impl] = measure_latency((enum impl)impl, samples);
    printf("  %-12s  %10.1f  %10.1f\n", impl_name[impl], lat[impl].p50_us, lat[impl].p99_us);
    fflush(stdout);
  }
  printf("\n  ratios mutex+async / impl (> 1: uvtw lower latency)\n");
  for (int impl = 0; impl < IMPL_ALT; impl++)
    printf("  %-12s  p50 %.2fx  p99 %.2fx\n", impl_name[impl], lat[IMPL_ALT].p50_us / lat[impl].p50_us,
           lat[IMPL_ALT].p99_us / lat[impl].p99_us);
  return 0;
}
