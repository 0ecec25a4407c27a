/* Tasks and tickets from many threads at once, against the "Any-thread
 * tasks" part of include/uvtw.h:
 *
 *   stress ................. 4 producers x 100 000 tasks with random timeouts
 *                            while a fifth thread cancels a random half: exact
 *                            accounting, never early, per-thread FIFO among
 *                            equal timeouts, loop thread only, stats
 *   close_race ............. the wheel closes while producers and the
 *                            canceller are still running
 *
 * Environment: UVTW_TEST_SCALE (default 1.0) multiplies the task counts of
 * the two cases, for slow runs (Valgrind: 0.05 is plenty);
 * UVTW_TEST_WATCHDOG_S (default 120) bounds how long their loop may wait.
 */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fixture.h"

#define NS_PER_MS UINT64_C(1000000)

/* ---- Shared helpers ------------------------------------------------------ */

static double test_scale = 1.0;
static uint64_t watchdog_ns = 120 * UINT64_C(1000000000);

/* HANDOFF_DONE marks that a callback has taken its side of a ticket
 * handoff; no ticket has its address. */
static char handoff_done_storage;
#define HANDOFF_DONE ((uvtw_ticket_t *)(void *)&handoff_done_storage)

/* Problems found off the TAP path (threads, callbacks) are kept here and
 * printed as diagnostics under the check that failed. */
#define MAX_NOTES 12
static uv_mutex_t notes_mutex;
static char notes[MAX_NOTES][200];
static int notes_count;

static void note(const char *fmt, ...) __attribute__((format(TAP_PRINTF, 1, 2)));
static void note(const char *fmt, ...) {
  va_list ap;
  uv_mutex_lock(&notes_mutex);
  if (notes_count < MAX_NOTES) {
    va_start(ap, fmt);
    vsnprintf(notes[notes_count], sizeof notes[0], fmt, ap);
    va_end(ap);
  }
  notes_count++;
  uv_mutex_unlock(&notes_mutex);
}

static void flush_notes(void) {
  uv_mutex_lock(&notes_mutex);
  for (int i = 0; i < notes_count && i < MAX_NOTES; i++)
    tap_diag("  %s", notes[i]);
  if (notes_count > MAX_NOTES)
    tap_diag("  ... and %d more", notes_count - MAX_NOTES);
  notes_count = 0;
  uv_mutex_unlock(&notes_mutex);
}

static void sleep_us(long us) {
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

static uint64_t rng_next(uint64_t *state) { /* splitmix64 */
  uint64_t z = (*state += UINT64_C(0x9E3779B97F4A7C15));
  z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
  return z ^ (z >> 31);
}

static uint32_t scaled(uint32_t n, uint32_t minimum) {
  double v = (double)n * test_scale;
  return v < (double)minimum ? minimum : (uint32_t)v;
}

static void close_handle_cb(uv_handle_t *handle) {
  (void)handle;
}

/* The threaded cases' loop: runs it until every handle is closed, then
 * closes it; other threads may still hold the wheel, so a loop that cannot
 * close ends the program. */
static void finish_loop(uv_loop_t *loop, const char *what) {
  uv_run(loop, UV_RUN_DEFAULT);
  int rc = uv_loop_close(loop);
  if (rc != 0) {
    tap_ok(0, "%s: every handle of the loop is closed at the end", what);
    tap_diag("  uv_loop_close returned %s; open handles:", tap_err_name_(rc));
    uv_print_all_handles(loop, stdout);
    fflush(stdout);
    exit(tap_done() | 1);
  }
}

/* The threaded cases' watchdog: a lost task or a wheel that keeps the loop
 * alive ends the program (other threads still use the wheel, so the case
 * cannot just stop its loop and go on). Unreferenced. */
static uv_timer_t watchdog;
static const char *watchdog_what;
static uint64_t watchdog_ms;

static void watchdog_fired(uv_timer_t *timer) {
  (void)timer;
  tap_ok(0, "%s: done within %" PRIu64 " ms", watchdog_what, watchdog_ms);
  flush_notes();
  exit(tap_done() | 1);
}

static void watchdog_start(uv_loop_t *loop, uint64_t ms, const char *what) {
  watchdog_what = what;
  watchdog_ms = ms;
  uv_timer_init(loop, &watchdog);
  uv_timer_start(&watchdog, watchdog_fired, ms, 0);
  uv_unref((uv_handle_t *)&watchdog);
}

static void watchdog_stop(void) {
  uv_close((uv_handle_t *)&watchdog, close_handle_cb);
}

/* The argument of schedules that must fail: if one succeeds, its callback
 * lands here harmlessly and the check on the return code reports it. */
static task_probe_t stray_probe;

/* ---- The threaded harness: stress and close race -------------------------- */

enum { NPROD = 4, STRESS_MAX_TIMEOUT = 50, CLOSE_MAX_TIMEOUT = 200, CLOSE_RESERVE = 16 };

/* What happens to a task's ticket. */
enum task_kind {
  K_CANCEL,        /* the canceller thread cancels it, then releases it */
  K_FORGET,        /* no ticket */
  K_RELEASE_NOW,   /* the producer releases it right after the call */
  K_RELEASE_IN_CB, /* whoever comes second of the producer and the callback releases it */
  K_HOLD,          /* kept to the end; then cancelled (must be UV_EALREADY) and released */
};

/* Delay from the call to the cancel, so cancels race the deadlines at every
 * distance; LAG_AFTER_CLOSE (close race only) waits for the close callback. */
#define NLAG 5
#define LAG_AFTER_CLOSE NLAG
static const uint64_t lag_ms[NLAG] = {0, 1, 8, 25, 50};

typedef struct task_s {
  /* Written by the producer before uvtw_schedule; read-only afterwards. */
  uint64_t call_ns;
  uint32_t seq;
  uint16_t timeout;
  uint8_t producer;
  uint8_t kind;
  uint8_t lag;
  /* Producer, after the call; read by others after `published`. */
  int schedule_rc;
  uvtw_ticket_t *ticket;
  _Atomic(uvtw_ticket_t *) handoff; /* K_RELEASE_IN_CB */
  /* Canceller. */
  atomic_int cancel_rc; /* 1: not attempted */
  /* Loop thread. */
  int callbacks;
  int status;
  uint64_t ran_ns;
  /* Any thread. */
  atomic_int releases;
} task_t;

typedef struct harness_s harness_t;

enum { LATE_BUCKETS = 1024 };

typedef struct producer_s {
  harness_t *h;
  int index;
  uv_thread_t thread;
  uint32_t capacity;
  task_t *tasks;
  uint64_t seed;
  atomic_uint published; /* tasks[0..published) are settled on the producer side */
  /* Valid once the producer is done. */
  uint32_t scheduled_ok;
  uint32_t rejected_closing; /* UV_ECANCELED */
  uint32_t failures;         /* anything else, or UV_ECANCELED outside a close */
  uint32_t ok_after_close;   /* 0 returned although close had returned before the call */
  uint32_t ok_after_rejection;
  uint32_t touched_on_error;
  uint64_t done_ns;
} producer_t;

struct harness_s {
  const char *name;
  int close_mode;
  uint32_t max_timeout;
  uv_loop_t loop;
  uvtw_wheel_t *wheel;
  producer_t prod[NPROD];
  uv_thread_t canceller;
  uint64_t start_ns;
  atomic_int producers_done;
  atomic_int canceller_done;
  atomic_int close_returned; /* uvtw_wheel_close has returned */
  atomic_int close_cb_done;  /* the close callback is (all but) done */

  /* Canceller tallies, valid once canceller_done. */
  uint64_t cancel_wins, cancel_lost, cancel_bad, cancel_after_close_not_already;

  /* Loop-thread tallies. */
  uint64_t cb_total, cb_ok, cb_canceled;
  uint64_t cb_wrong_thread, cb_bad_status, early_hr, early_now, fifo_broken;
  uint64_t ran_after_won_cancel, ok_after_close, ecanceled_outside_close, ran_after_close_cb;
  uint64_t max_late_ns;
  double sum_late_ns;
  uint64_t late_histogram[LATE_BUCKETS]; /* by whole ms late against uv_hrtime() */
  int32_t last_seq[NPROD][CLOSE_MAX_TIMEOUT + 1];
  int close_called;
  int close_cb_runs;
  uint64_t published_at_close;
  int schedule_in_close_cb;
  uv_timer_t poll;
  uint64_t grace_until_ns;
  int timed_out;
  uvtw_stats_t stats;
  int64_t next_due;
};

static void task_cb(void *arg, int status);

/* Task `i` of producer `p`, from the random `r`: random timeouts, and
 * runs of equal ones to exercise FIFO ties; returns its timeout. */
static uint32_t make_task(producer_t *p, uint32_t i, uint64_t r, uint32_t *run_left,
                          uint32_t *run_timeout) {
  harness_t *h = p->h;
  task_t *task = &p->tasks[i];
  if (*run_left == 0 && (r & 3) == 0) {
    *run_left = 2 + (uint32_t)((r >> 2) % 31);
    *run_timeout = (uint32_t)((r >> 8) % (h->max_timeout + 1));
  }
  uint32_t timeout = *run_left ? *run_timeout : (uint32_t)((r >> 16) % (h->max_timeout + 1));
  if (*run_left)
    (*run_left)--;
  uint32_t k = (uint32_t)((r >> 32) % 16);
  task->kind = k < 8    ? K_CANCEL
               : k < 10 ? K_FORGET
               : k < 12 ? K_RELEASE_NOW
               : k < 14 ? K_RELEASE_IN_CB
                        : K_HOLD;
  task->lag = (uint8_t)((r >> 40) % NLAG);
  if (h->close_mode && task->kind == K_CANCEL && ((r >> 48) & 3) == 0)
    task->lag = LAG_AFTER_CLOSE;
  task->seq = i;
  task->timeout = (uint16_t)timeout;
  task->producer = (uint8_t)p->index;
  atomic_init(&task->cancel_rc, 1);
  atomic_init(&task->releases, 0);
  atomic_init(&task->handoff, NULL);
  return timeout;
}

/* Counts what the schedule of task `i` returned and hands its ticket on
 * (released now, at its callback, or kept). */
static void after_schedule(producer_t *p, uint32_t i, int rc, uvtw_ticket_t *ticket,
                           int closed_before) {
  harness_t *h = p->h;
  task_t *task = &p->tasks[i];
  if (rc == 0) {
    p->scheduled_ok++;
    if (closed_before)
      p->ok_after_close++;
    if (p->rejected_closing)
      p->ok_after_rejection++;
    if (task->kind != K_FORGET && (ticket == SENTINEL || ticket == NULL)) {
      note("%s: producer %d task %u: schedule returned 0 without a ticket", h->name, p->index, i);
      p->failures++;
      ticket = NULL;
    }
    task->ticket = task->kind == K_FORGET ? NULL : ticket;
    if (ticket == NULL || ticket == SENTINEL) {
      /* nothing to release */
    } else if (task->kind == K_RELEASE_NOW) {
      atomic_fetch_add(&task->releases, 1);
      uvtw_ticket_release(ticket);
    } else if (task->kind == K_RELEASE_IN_CB) {
      if (atomic_exchange(&task->handoff, ticket) == HANDOFF_DONE) {
        atomic_fetch_add(&task->releases, 1);
        uvtw_ticket_release(ticket);
      }
    }
  } else {
    task->ticket = NULL;
    if (ticket != SENTINEL)
      p->touched_on_error++;
    if (rc == UV_ECANCELED && h->close_mode) {
      p->rejected_closing++;
    } else {
      if (p->failures++ == 0)
        note("%s: producer %d task %u: schedule returned %s", h->name, p->index, i,
             tap_err_name_(rc));
    }
  }
}

static void producer_run(void *arg) {
  producer_t *p = arg;
  harness_t *h = p->h;
  uint32_t run_left = 0, run_timeout = 0;

  for (uint32_t i = 0; i < p->capacity; i++) {
    task_t *task = &p->tasks[i];
    uint64_t r = rng_next(&p->seed);

    /* Close race: the last CLOSE_RESERVE slots are for schedules made after
     * uvtw_wheel_close returned, so every producer is still at work when the
     * wheel closes, whatever the scheduling. */
    if (h->close_mode && i == p->capacity - CLOSE_RESERVE && p->rejected_closing == 0)
      while (!atomic_load(&h->close_returned))
        sleep_us(100);

    uint32_t timeout = make_task(p, i, r, &run_left, &run_timeout);

    int closed_before = atomic_load(&h->close_returned);
    uvtw_ticket_t *ticket = SENTINEL;
    task->call_ns = uv_hrtime();
    int rc =
        uvtw_schedule(h->wheel, timeout, task_cb, task, task->kind == K_FORGET ? NULL : &ticket);
    task->schedule_rc = rc;

    after_schedule(p, i, rc, ticket, closed_before);
    atomic_store_explicit(&p->published, i + 1, memory_order_release);

    if (h->close_mode) {
      if (p->rejected_closing >= CLOSE_RESERVE)
        break; /* a few more rejections proved the point; stop using the wheel */
      if ((i & 63) == 63)
        sleep_us(50);
    }
  }
  p->done_ns = uv_hrtime();
  atomic_fetch_add_explicit(&h->producers_done, 1, memory_order_release);
}

/* Cancels the K_CANCEL tasks of every producer, each `lag` after its call.
 * One cursor per (producer, lag): call times grow along a producer's array,
 * so each cursor's targets come in order. */
static void canceller_run(void *arg) {
  harness_t *h = arg;
  uint32_t cursor[NPROD][NLAG + 1] = {{0}};
  int nlag = h->close_mode ? NLAG + 1 : NLAG;

  for (;;) {
    int producers_done = atomic_load_explicit(&h->producers_done, memory_order_acquire);
    int close_cb_done = atomic_load_explicit(&h->close_cb_done, memory_order_acquire);
    uint64_t now = uv_hrtime();
    int progress = 0, behind = 0;

    for (int p = 0; p < NPROD; p++) {
      producer_t *prod = &h->prod[p];
      uint32_t published = atomic_load_explicit(&prod->published, memory_order_acquire);
      for (int lag = 0; lag < nlag; lag++) {
        uint32_t *c = &cursor[p][lag];
        while (*c < published) {
          task_t *task = &prod->tasks[*c];
          if (task->kind != K_CANCEL || task->lag != lag || task->schedule_rc != 0 ||
              !task->ticket) {
            ++*c;
            continue;
          }
          if (lag == LAG_AFTER_CLOSE ? !close_cb_done
                                     : now < task->call_ns + lag_ms[lag] * NS_PER_MS)
            break;
          int after_close = atomic_load_explicit(&h->close_cb_done, memory_order_acquire);
          int rc = uvtw_ticket_cancel(task->ticket);
          atomic_store_explicit(&task->cancel_rc, rc, memory_order_relaxed);
          if (rc == 0)
            h->cancel_wins++;
          else if (rc == UV_EALREADY)
            h->cancel_lost++;
          else if (h->cancel_bad++ == 0)
            note("%s: cancel of producer %d task %u returned %s", h->name, p, *c,
                 tap_err_name_(rc));
          if (after_close && rc != UV_EALREADY && h->cancel_after_close_not_already++ == 0)
            note("%s: cancel after the close callback returned %s for producer %d task %u", h->name,
                 tap_err_name_(rc), p, *c);
          atomic_fetch_add(&task->releases, 1);
          uvtw_ticket_release(task->ticket);
          ++*c;
          progress++;
        }
        if (*c < published)
          behind = 1;
      }
    }
    if (producers_done == NPROD && !behind)
      break;
    if (!progress)
      sleep_us(200);
  }
  atomic_store_explicit(&h->canceller_done, 1, memory_order_release);
}

static harness_t *current;

static void task_cb(void *arg, int status) {
  harness_t *h = current;
  task_t *task = arg;
  uint64_t now_ns = uv_hrtime();

  task->callbacks++;
  task->status = status;
  task->ran_ns = now_ns;
  h->cb_total++;
  if (!fx_on_loop_thread() && h->cb_wrong_thread++ == 0)
    note("%s: a task callback ran off the loop thread", h->name);
  if (atomic_load_explicit(&task->cancel_rc, memory_order_relaxed) == 0 &&
      h->ran_after_won_cancel++ == 0)
    note("%s: producer %u task %u ran although its cancel had returned 0", h->name, task->producer,
         task->seq);
  if (h->close_cb_runs && h->ran_after_close_cb++ == 0)
    note("%s: a task callback ran after the close callback", h->name);

  if (task->kind == K_RELEASE_IN_CB) {
    uvtw_ticket_t *ticket = atomic_exchange(&task->handoff, HANDOFF_DONE);
    if (ticket != NULL) {
      atomic_fetch_add(&task->releases, 1);
      uvtw_ticket_release(ticket);
    }
  }

  if (status == UV_ECANCELED) {
    h->cb_canceled++;
    if (!h->close_called && h->ecanceled_outside_close++ == 0)
      note("%s: producer %u task %u got UV_ECANCELED before the wheel was closed", h->name,
           task->producer, task->seq);
    return;
  }
  if (status != 0) {
    if (h->cb_bad_status++ == 0)
      note("%s: a task callback got status %s", h->name, tap_err_name_(status));
    return;
  }

  h->cb_ok++;
  if (h->close_called && h->ok_after_close++ == 0)
    note("%s: producer %u task %u ran with status 0 after uvtw_wheel_close", h->name,
         task->producer, task->seq);

  /* Never early, against the call's uv_hrtime() (1 ms truncation allowed)... */
  uint64_t due_ns = task->call_ns + task->timeout * NS_PER_MS;
  if (now_ns + NS_PER_MS < due_ns && h->early_hr++ == 0)
    note("%s: producer %u task %u (%u ms) ran %.3f ms after its call, %.3f ms early", h->name,
         task->producer, task->seq, task->timeout, (now_ns - task->call_ns) / 1e6,
         (due_ns - now_ns) / 1e6);
  if (now_ns > due_ns) {
    uint64_t late = now_ns - due_ns;
    h->sum_late_ns += (double)late;
    if (late > h->max_late_ns)
      h->max_late_ns = late;
    uint64_t bucket = late / NS_PER_MS;
    h->late_histogram[bucket < LATE_BUCKETS ? bucket : LATE_BUCKETS - 1]++;
  } else {
    h->late_histogram[0]++;
  }
  /* ...and against the loop clock: the deadline is at least call_ms + timeout. */
  uint64_t min_deadline_ms = task->call_ns / NS_PER_MS + task->timeout;
  if (uv_now(&h->loop) < min_deadline_ms && h->early_now++ == 0)
    note("%s: producer %u task %u ran at uv_now %" PRIu64 " before its deadline %" PRIu64, h->name,
         task->producer, task->seq, uv_now(&h->loop), min_deadline_ms);

  /* Per-thread FIFO among equal timeouts: same producer and timeout means
   * nondecreasing deadlines with ties in call order, so call order. */
  int32_t *last = &h->last_seq[task->producer][task->timeout];
  if ((int32_t)task->seq < *last && h->fifo_broken++ == 0)
    note("%s: producer %u, timeout %u ms: task %u ran after task %d", h->name, task->producer,
         task->timeout, task->seq, *last);
  if ((int32_t)task->seq > *last)
    *last = (int32_t)task->seq;
}

static void harness_close_cb(uvtw_wheel_t *wheel, void *arg) {
  harness_t *h = arg;
  (void)wheel;
  h->close_cb_runs++;
  if (h->close_mode) {
    uvtw_ticket_t *t = SENTINEL;
    h->schedule_in_close_cb = uvtw_schedule(wheel, 0, task_probe_cb, &stray_probe, &t);
    /* The wheel pointer dies when this returns: producers must be done with it. */
    for (int p = 0; p < NPROD; p++)
      uv_thread_join(&h->prod[p].thread);
  }
  atomic_store_explicit(&h->close_cb_done, 1, memory_order_release);
}

static uint32_t total_published(harness_t *h) {
  uint32_t sum = 0;
  for (int p = 0; p < NPROD; p++)
    sum += atomic_load_explicit(&h->prod[p].published, memory_order_acquire);
  return sum;
}

/* Ends the run: statistics, then close the wheel and our poll timer. */
static void harness_finish(harness_t *h) {
  uvtw_wheel_stats(h->wheel, &h->stats);
  h->next_due = uvtw_wheel_next_due(h->wheel);
  h->close_called = 1;
  uvtw_wheel_close(h->wheel, harness_close_cb, h);
  atomic_store(&h->close_returned, 1);
  uv_close((uv_handle_t *)&h->poll, close_handle_cb);
}

static void stress_poll_cb(uv_timer_t *timer) {
  harness_t *h = timer->data;
  uint64_t now = uv_hrtime();

  if (atomic_load_explicit(&h->producers_done, memory_order_acquire) == NPROD &&
      atomic_load_explicit(&h->canceller_done, memory_order_acquire)) {
    uint64_t expected = 0;
    for (int p = 0; p < NPROD; p++)
      expected += h->prod[p].scheduled_ok;
    /* Wait a grace period past the last deadline to catch extra callbacks. */
    if (h->grace_until_ns == 0 && h->cb_total + h->cancel_wins >= expected)
      h->grace_until_ns = now + (STRESS_MAX_TIMEOUT + 100) * NS_PER_MS;
    if (h->grace_until_ns != 0 && now >= h->grace_until_ns) {
      harness_finish(h);
      return;
    }
    if (now - h->start_ns > watchdog_ns) {
      h->timed_out = 1;
      harness_finish(h);
    }
    return;
  }
  if (now - h->start_ns > watchdog_ns) {
    tap_ok(0, "%s: producers and canceller finished before the watchdog", h->name);
    flush_notes();
    exit(tap_done() | 1);
  }
}

static void close_race_poll_cb(uv_timer_t *timer) {
  harness_t *h = timer->data;
  uint32_t capacity = 0;
  for (int p = 0; p < NPROD; p++)
    capacity += h->prod[p].capacity;
  uint32_t published = total_published(h);
  if (published >= capacity / 4 ||
      atomic_load_explicit(&h->producers_done, memory_order_acquire) == NPROD) {
    h->published_at_close = published;
    harness_finish(h);
    uvtw_ticket_t *t = SENTINEL;
    int rc = uvtw_schedule(h->wheel, 0, task_probe_cb, &stray_probe, &t);
    EXPECT_ERR(rc, UV_ECANCELED,
               "close race: a loop-thread schedule right after close is UV_ECANCELED");
    tap_ok(t == SENTINEL, "close race: ...and leaves *ticket untouched");
  }
}

static void harness_start(harness_t *h, uint32_t per_producer) {
  uv_loop_init(&h->loop);
  if (!EXPECT_ERR(uvtw_wheel_new(&h->loop, NULL, &h->wheel), 0, "harness: uvtw_wheel_new succeeds"))
    exit(tap_done() | 1);
  current = h;
  for (int p = 0; p < NPROD; p++)
    for (uint32_t t = 0; t <= CLOSE_MAX_TIMEOUT; t++)
      h->last_seq[p][t] = -1;
  /* Our own referenced timer keeps the loop running while other threads
   * schedule (their tasks do not, until taken in). */
  uv_timer_init(&h->loop, &h->poll);
  h->poll.data = h;
  uv_timer_start(&h->poll, h->close_mode ? close_race_poll_cb : stress_poll_cb, 1,
                 h->close_mode ? 1 : 5);
  watchdog_start(&h->loop, watchdog_ns / NS_PER_MS + 30000, h->name);
  h->start_ns = uv_hrtime();
  for (int p = 0; p < NPROD; p++) {
    producer_t *prod = &h->prod[p];
    prod->h = h;
    prod->index = p;
    prod->capacity = per_producer;
    prod->tasks = calloc(per_producer, sizeof(task_t));
    prod->seed = UINT64_C(0x5EED) * (uint64_t)(p + 1) ^ h->start_ns;
    if (!prod->tasks) {
      tap_ok(0, "%s: allocating %u tasks", h->name, per_producer);
      exit(tap_done() | 1);
    }
  }
  for (int p = 0; p < NPROD; p++)
    uv_thread_create(&h->prod[p].thread, producer_run, &h->prod[p]);
  uv_thread_create(&h->canceller, canceller_run, h);
}

/* After the loop: the checks common to both runs. */
typedef struct accounting_s {
  uint64_t scheduled_ok, rejected, failures, ok_after_close, ok_after_rejection, touched;
  uint64_t missing, doubled, ran_although_won, bad_release, hold_not_already, forget_ran;
  uint64_t canceled_cb, hold_cancels;
} accounting_t;

static void hold_cancel_release(harness_t *h, accounting_t *a) {
  for (int p = 0; p < NPROD; p++) {
    producer_t *prod = &h->prod[p];
    uint32_t published = atomic_load(&prod->published);
    for (uint32_t i = 0; i < published; i++) {
      task_t *task = &prod->tasks[i];
      if (task->schedule_rc != 0 || task->kind != K_HOLD || !task->ticket)
        continue;
      int rc = uvtw_ticket_cancel(task->ticket);
      a->hold_cancels++;
      if (rc != UV_EALREADY && a->hold_not_already++ == 0)
        note("%s: producer %d task %u: cancel after its callback ran returned %s", h->name, p, i,
             tap_err_name_(rc));
      atomic_fetch_add(&task->releases, 1);
      uvtw_ticket_release(task->ticket);
    }
  }
}

typedef struct hold_job_s {
  harness_t *h;
  accounting_t *a;
} hold_job_t;

static void hold_job(void *arg) {
  hold_job_t *j = arg;
  hold_cancel_release(j->h, j->a);
}

static void account(harness_t *h, accounting_t *a) {
  for (int p = 0; p < NPROD; p++) {
    producer_t *prod = &h->prod[p];
    uint32_t published = atomic_load(&prod->published);
    a->scheduled_ok += prod->scheduled_ok;
    a->rejected += prod->rejected_closing;
    a->failures += prod->failures;
    a->ok_after_close += prod->ok_after_close;
    a->ok_after_rejection += prod->ok_after_rejection;
    a->touched += prod->touched_on_error;
    for (uint32_t i = 0; i < published; i++) {
      task_t *task = &prod->tasks[i];
      int cancel_rc = atomic_load(&task->cancel_rc);
      int expected_calls = task->schedule_rc == 0 && cancel_rc != 0 ? 1 : 0;
      int expected_releases = task->schedule_rc == 0 && task->kind != K_FORGET ? 1 : 0;
      if (task->callbacks < expected_calls && a->missing++ == 0)
        note("%s: producer %d task %u (%u ms, kind %d, schedule %s, cancel %s) never ran", h->name,
             p, i, task->timeout, task->kind, tap_err_name_(task->schedule_rc),
             cancel_rc == 1 ? "not tried" : tap_err_name_(cancel_rc));
      if (expected_calls && task->callbacks > 1 && a->doubled++ == 0)
        note("%s: producer %d task %u ran %d times", h->name, p, i, task->callbacks);
      if (!expected_calls && task->callbacks > 0) {
        if (task->schedule_rc == 0) {
          if (a->ran_although_won++ == 0)
            note("%s: producer %d task %u ran although its cancel returned 0", h->name, p, i);
        } else if (a->doubled++ == 0) {
          note("%s: producer %d task %u ran although its schedule returned %s", h->name, p, i,
               tap_err_name_(task->schedule_rc));
        }
      }
      if (task->callbacks && task->status == UV_ECANCELED)
        a->canceled_cb++;
      if (atomic_load(&task->releases) != expected_releases && a->bad_release++ == 0)
        note("%s: producer %d task %u: ticket released %d times (test bookkeeping)", h->name, p, i,
             atomic_load(&task->releases));
      if (task->kind == K_FORGET && task->schedule_rc == 0 && task->callbacks == 1)
        a->forget_ran++;
    }
  }
}

static void harness_free(harness_t *h) {
  for (int p = 0; p < NPROD; p++)
    free(h->prod[p].tasks);
  current = NULL;
}

/* The whole-ms lateness below which `fraction` of the status-0 callbacks fell. */
static unsigned late_percentile(const harness_t *h, double fraction) {
  uint64_t total = 0, seen = 0;
  for (int i = 0; i < LATE_BUCKETS; i++)
    total += h->late_histogram[i];
  for (int i = 0; i < LATE_BUCKETS; i++) {
    seen += h->late_histogram[i];
    if (total && (double)seen >= fraction * (double)total)
      return (unsigned)i + 1;
  }
  return LATE_BUCKETS;
}

static uint64_t production_ms(const harness_t *h) {
  uint64_t last = h->start_ns;
  for (int p = 0; p < NPROD; p++)
    if (h->prod[p].done_ns > last)
      last = h->prod[p].done_ns;
  return (last - h->start_ns) / NS_PER_MS;
}

static void report_count(uint64_t n, const char *what) {
  if (!tap_ok(n == 0, "%s", what)) {
    tap_diag("  %" PRIu64 " violations", n);
    flush_notes();
  }
}

/* What the run took and how late its callbacks were. */
static void stress_report(const harness_t *h, uint64_t elapsed_ms) {
  tap_diag("stress: %" PRIu64 " ms (producers done after %" PRIu64 " ms); %" PRIu64
           " callbacks, cancels won %" PRIu64 " / lost %" PRIu64,
           elapsed_ms, production_ms(h), h->cb_total, h->cancel_wins, h->cancel_lost);
  tap_diag("stress: lateness vs uv_hrtime: mean %.3f ms, p50 < %u ms, p99 < %u ms (1024: >= 1023), "
           "max %.3f ms; "
           "late_max_ms %" PRIu64 ", remote_batches %" PRIu64 ", wakeups %" PRIu64
           " (wasted %" PRIu64 "), cascaded %" PRIu64,
           h->cb_ok ? h->sum_late_ns / (double)h->cb_ok / 1e6 : 0.0, late_percentile(h, 0.5),
           late_percentile(h, 0.99), h->max_late_ns / 1e6, h->stats.late_max_ms,
           h->stats.remote_batches, h->stats.wakeups, h->stats.wasted_wakeups, h->stats.cascaded);
}

/* Every task ended once, as its cancel and ticket say. */
static void stress_expect_tasks(const harness_t *h, const accounting_t *a, uint32_t per_producer) {
  tap_ok(!h->timed_out, "stress: all callbacks came before the watchdog");
  EXPECT_U64(a->scheduled_ok, (uint64_t)NPROD * per_producer, "stress: every schedule returned 0");
  report_count(a->failures + a->touched, "stress: no schedule failed");
  report_count(h->cancel_bad, "stress: every cancel returned 0 or UV_EALREADY");
  report_count(a->missing, "stress: every task ran unless its cancel returned 0 (never neither)");
  report_count(a->ran_although_won,
               "stress: no task whose cancel returned 0 ever ran (never both)");
  report_count(h->ran_after_won_cancel,
               "stress: no callback started after its cancel had returned 0");
  report_count(a->doubled, "stress: no task ran twice");
  EXPECT_U64(h->cb_ok + h->cancel_wins, a->scheduled_ok,
             "stress: callbacks with status 0 + won cancels == tasks scheduled");
  report_count(h->cb_bad_status + h->cb_canceled, "stress: every callback had status 0");
  report_count(h->cb_wrong_thread, "stress: every callback ran on the loop thread");
  report_count(h->early_hr,
               "stress: never early: uv_hrtime() >= call + timeout - 1 ms at every callback");
  report_count(h->early_now, "stress: never early: uv_now(loop) >= deadline at every callback");
  report_count(h->fifo_broken,
               "stress: per-thread FIFO: equal timeouts from one thread ran in call order");
  tap_ok(a->forget_ran > 0, "stress: fire-and-forget tasks ran (%" PRIu64 ")", a->forget_ran);
  report_count(a->hold_not_already, "stress: cancel after the callback ran is UV_EALREADY");
  report_count(a->bad_release, "stress: every ticket was released exactly once");
  /* Whether cancels raced firing at all depends on the scheduler (under
   * Valgrind every thread runs in turn): a property of the run, not of uvtw. */
  tap_diag("stress: cancels won %" PRIu64 ", lost %" PRIu64, h->cancel_wins, h->cancel_lost);
  if (h->cancel_wins > 0 && h->cancel_lost > 0)
    tap_ok(1, "stress: cancels both won and lost against firing");
  else
    tap_skip("this run's scheduling never let a cancel race a firing",
             "stress: cancels both won and lost against firing");
}

/* The wheel's stats agree with what the tasks did. */
static void stress_expect_stats(const harness_t *h, const accounting_t *a) {
  EXPECT_U64(h->stats.active, 0, "stress: stats.active is 0 at the end");
  if (!tap_ok(h->next_due == -1, "stress: next_due is -1 at the end"))
    tap_diag("  next_due = %" PRId64, h->next_due);
  EXPECT_U64(h->stats.fired, h->cb_ok, "stress: stats.fired == callbacks with status 0");
  EXPECT_U64(h->stats.stopped, h->cancel_wins, "stress: stats.stopped == cancels that returned 0");
  if (!tap_ok(h->stats.started >= h->stats.fired && h->stats.started <= a->scheduled_ok,
              "stress: fired <= stats.started <= tasks scheduled"))
    tap_diag("  started %" PRIu64 ", fired %" PRIu64 ", scheduled %" PRIu64, h->stats.started,
             h->stats.fired, a->scheduled_ok);
  tap_ok(h->stats.remote_batches > 0,
         "stress: stats.remote_batches > 0 after cross-thread scheduling");
  EXPECT_U64(h->close_cb_runs, 1, "stress: the wheel closed");
}

static void test_stress(void) {
  harness_t *h = calloc(1, sizeof *h);
  accounting_t a;
  uint32_t per_producer = scaled(100000, 500);

  memset(&a, 0, sizeof a);
  h->name = "stress";
  h->max_timeout = STRESS_MAX_TIMEOUT;
  tap_diag("stress: %d producers x %u tasks (0..%d ms, scale %.3g), a canceller thread on half "
           "of them",
           NPROD, per_producer, STRESS_MAX_TIMEOUT, test_scale);
  harness_start(h, per_producer);
  uv_run(&h->loop, UV_RUN_DEFAULT);
  for (int p = 0; p < NPROD; p++)
    uv_thread_join(&h->prod[p].thread);
  uv_thread_join(&h->canceller);
  watchdog_stop();
  finish_loop(&h->loop, "stress");
  uint64_t elapsed_ms = (uv_hrtime() - h->start_ns) / NS_PER_MS;

  hold_cancel_release(h, &a);
  account(h, &a);
  stress_report(h, elapsed_ms);
  stress_expect_tasks(h, &a, per_producer);
  stress_expect_stats(h, &a);
  harness_free(h);
  free(h);
}

/* The close stopped the producers: what their schedules returned. */
static void close_race_expect_schedules(const harness_t *h, const accounting_t *a) {
  EXPECT_U64(h->close_cb_runs, 1, "close race: the close callback ran once");
  report_count(h->ran_after_close_cb, "close race: no task callback ran after the close callback");
  EXPECT_U64(
      a->rejected, NPROD * CLOSE_RESERVE,
      "close race: every producer was still scheduling when the wheel closed, and was rejected");
  tap_ok(h->cb_canceled > 0,
         "close race: some tasks were pending at close (UV_ECANCELED callbacks)");
  report_count(a->failures, "close race: schedules returned only 0 or UV_ECANCELED");
  report_count(a->touched, "close race: UV_ECANCELED left *ticket untouched");
  report_count(a->ok_after_close,
               "close race: every schedule after uvtw_wheel_close returned is UV_ECANCELED");
  report_count(a->ok_after_rejection, "close race: no schedule succeeded after one was rejected");
  EXPECT_ERR(h->schedule_in_close_cb, UV_ECANCELED,
             "close race: schedule inside the close callback is UV_ECANCELED");
}

/* Every task ended once, by its callback, its won cancel or the close. */
static void close_race_expect_tasks(const harness_t *h, const accounting_t *a) {
  report_count(h->cancel_bad, "close race: every cancel returned 0 or UV_EALREADY");
  report_count(h->cancel_after_close_not_already,
               "close race: cancels from another thread after the close callback are UV_EALREADY");
  report_count(a->hold_not_already,
               "close race: held tickets cancelled after close are UV_EALREADY");
  report_count(
      a->missing,
      "close race: every task whose schedule returned 0 got a callback unless its cancel won");
  report_count(a->ran_although_won + h->ran_after_won_cancel,
               "close race: no task ran after its cancel won");
  report_count(a->doubled,
               "close race: no task got two callbacks, none got one without being scheduled");
  report_count(h->ok_after_close, "close race: no status 0 callback after uvtw_wheel_close");
  report_count(h->ecanceled_outside_close, "close race: UV_ECANCELED only from the close");
  report_count(h->cb_bad_status, "close race: statuses were only 0 and UV_ECANCELED");
  report_count(h->cb_wrong_thread, "close race: every callback ran on the loop thread");
  report_count(h->early_hr + h->early_now, "close race: never early");
  report_count(h->fifo_broken, "close race: per-thread FIFO among equal timeouts");
  report_count(a->bad_release,
               "close race: every ticket was released exactly once, some after close");
}

static void test_close_race(void) {
  harness_t *h = calloc(1, sizeof *h);
  accounting_t a;
  uint32_t per_producer = scaled(40000, 400);

  memset(&a, 0, sizeof a);
  h->name = "close race";
  h->close_mode = 1;
  h->max_timeout = CLOSE_MAX_TIMEOUT;
  tap_diag("close race: %d producers x up to %u tasks (0..%d ms), closed at about a quarter", NPROD,
           per_producer, CLOSE_MAX_TIMEOUT);
  harness_start(h, per_producer);
  uv_run(&h->loop, UV_RUN_DEFAULT);
  /* The loop is over; the canceller may still be cancelling (after close). */
  watchdog_stop();
  finish_loop(&h->loop, "close race");
  uv_thread_join(&h->canceller);
  /* The held tickets: cancelled and released by yet another thread. */
  hold_job_t job = {h, &a};
  uv_thread_t thread;
  uv_thread_create(&thread, hold_job, &job);
  uv_thread_join(&thread);
  account(h, &a);

  tap_diag("close race: closed at %" PRIu64 " published; %" PRIu64 " scheduled, %" PRIu64
           " rejected; callbacks %" PRIu64 " ok + %" PRIu64 " UV_ECANCELED; cancels won %" PRIu64
           " / lost %" PRIu64,
           h->published_at_close, a.scheduled_ok, a.rejected, h->cb_ok, h->cb_canceled,
           h->cancel_wins, h->cancel_lost);

  close_race_expect_schedules(h, &a);
  close_race_expect_tasks(h, &a);
  harness_free(h);
  free(h);
}

static const tap_case_t cases[] = {
    TAP_CASE(stress),
    TAP_CASE(close_race),
};

int main(int argc, char **argv) {
  const char *scale = getenv("UVTW_TEST_SCALE");
  const char *wd = getenv("UVTW_TEST_WATCHDOG_S");
  if (scale && atof(scale) > 0)
    test_scale = atof(scale);
  if (wd && atof(wd) > 0)
    watchdog_ns = (uint64_t)(atof(wd) * 1e9);
  uv_mutex_init(&notes_mutex);
  int status = fx_main(argc, argv, cases, sizeof cases / sizeof cases[0]);
  flush_notes();
  return status;
}
