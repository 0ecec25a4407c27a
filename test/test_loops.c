/* Loop-thread timers on several loops at once, each loop on its own thread
 * with two wheels: every start and stop reaches its own timer's wheel, and
 * nothing is shared between wheels or threads. Each thread makes random
 * starts, restarts and stops on the timers of its two wheels, keeps a model
 * of which timers are active, then runs its loop until all have fired.
 * Checked against the model: uvtw_timer_is_active, each wheel's stats, and
 * that each timer ran once if left active, else never. The thread suite
 * runs this under ThreadSanitizer too. The workers' loops are their own
 * (the fixture is for a loop on the main thread); the main thread reports.
 *
 * Environment: UVTW_TEST_SCALE (default 1.0) multiplies the operations.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"

enum { THREADS = 3, WHEELS = 2, TIMERS = 300 };

typedef struct slot_s {
  uvtw_timer_t timer;
  int fires;
  bool active; /* the model */
} slot_t;

typedef struct worker_s {
  uint64_t rng;
  size_t ops;
  slot_t slot[WHEELS][TIMERS];
  /* Results, read by the main thread after the join. */
  int setup_error;
  int bad_returns;
  int active_mismatch;
  int stats_before_bad;
  int fires_bad;
  int stats_after_bad;
  int close_calls;
  int loop_close;
} worker_t;

static uint64_t next_rand(worker_t *wk) {
  wk->rng ^= wk->rng << 13;
  wk->rng ^= wk->rng >> 7;
  wk->rng ^= wk->rng << 17;
  return wk->rng;
}

static void timer_cb(uvtw_timer_t *timer) {
  ((slot_t *)timer->data)->fires++;
}

static void on_close(uvtw_wheel_t *wheel, void *arg) {
  (void)wheel;
  ((worker_t *)arg)->close_calls++;
}

static bool stats_are(const uvtw_wheel_t *wheel, uint64_t active, uint64_t started,
                      uint64_t stopped, uint64_t fired) {
  uvtw_stats_t s;
  uvtw_wheel_stats(wheel, &s);
  return s.active == active && s.started == started && s.stopped == stopped && s.fired == fired;
}

static void worker_run(void *arg) {
  worker_t *wk = arg;
  uv_loop_t loop;
  uvtw_wheel_t *wheel[WHEELS] = {NULL};
  uint64_t started[WHEELS] = {0}, stopped[WHEELS] = {0}, active[WHEELS] = {0};

  if (uv_loop_init(&loop) != 0) {
    wk->setup_error = 1;
    return;
  }
  for (int k = 0; k < WHEELS; k++)
    if (uvtw_wheel_new(&loop, NULL, &wheel[k]) != 0)
      wk->setup_error = 1;
  if (wk->setup_error)
    return; /* reported as a failure; what was made is left to exit */
  for (int k = 0; k < WHEELS; k++)
    for (int i = 0; i < TIMERS; i++) {
      uvtw_timer_init(wheel[k], &wk->slot[k][i].timer);
      wk->slot[k][i].timer.data = &wk->slot[k][i];
    }
  for (size_t op = 0; op < wk->ops; op++) {
    int k = (int)(next_rand(wk) % WHEELS), i = (int)(next_rand(wk) % TIMERS);
    slot_t *s = &wk->slot[k][i];
    if (next_rand(wk) % 3 == 0) {
      wk->bad_returns += uvtw_timer_stop(&s->timer) != 0;
      if (s->active) {
        stopped[k]++;
        active[k]--;
      }
      s->active = false;
    } else {
      uint64_t timeout = 1 + next_rand(wk) % 30;
      wk->bad_returns += uvtw_timer_start(&s->timer, timer_cb, timeout, 0) != 0;
      started[k]++;
      if (s->active)
        stopped[k]++; /* a restart counts one stop */
      else
        active[k]++;
      s->active = true;
    }
  }
  for (int k = 0; k < WHEELS; k++) {
    for (int i = 0; i < TIMERS; i++)
      wk->active_mismatch +=
          uvtw_timer_is_active(&wk->slot[k][i].timer) != (wk->slot[k][i].active ? 1 : 0);
    wk->stats_before_bad += !stats_are(wheel[k], active[k], started[k], stopped[k], 0);
  }
  uv_run(&loop, UV_RUN_DEFAULT);
  for (int k = 0; k < WHEELS; k++) {
    for (int i = 0; i < TIMERS; i++)
      wk->fires_bad += wk->slot[k][i].fires != (wk->slot[k][i].active ? 1 : 0);
    wk->stats_after_bad += !stats_are(wheel[k], 0, started[k], stopped[k], active[k]);
    uvtw_wheel_close(wheel[k], on_close, wk);
  }
  uv_run(&loop, UV_RUN_DEFAULT);
  wk->loop_close = uv_loop_close(&loop);
}

static void test_loops_on_threads(void) {
  double scale = 1.0;
  const char *env = getenv("UVTW_TEST_SCALE");
  if (env != NULL && atof(env) > 0)
    scale = atof(env);
  size_t ops = (size_t)(20000 * scale) + 1;

  static worker_t workers[THREADS];
  uv_thread_t threads[THREADS];
  int create_errors = 0;
  for (int t = 0; t < THREADS; t++) {
    memset(&workers[t], 0, sizeof workers[t]);
    workers[t].rng = UINT64_C(0x9E3779B97F4A7C15) * (uint64_t)(t + 1);
    workers[t].ops = ops;
  }
  for (int t = 0; t < THREADS; t++)
    create_errors += uv_thread_create(&threads[t], worker_run, &workers[t]) != 0;
  if (create_errors) {
    printf("Bail out! uv_thread_create failed\n");
    exit(1);
  }
  for (int t = 0; t < THREADS; t++)
    uv_thread_join(&threads[t]);

  for (int t = 0; t < THREADS; t++) {
    worker_t *wk = &workers[t];
    EXPECT_U64(wk->setup_error, 0, "thread %d: its loop and two wheels were made", t);
    EXPECT_U64(wk->bad_returns, 0, "thread %d: all %zu starts and stops returned 0", t, ops);
    EXPECT_U64(wk->active_mismatch, 0,
               "thread %d: each timer is active exactly as its starts and stops left it", t);
    EXPECT_U64(wk->stats_before_bad, 0,
               "thread %d: each wheel's stats count its own starts, restarts and stops", t);
    EXPECT_U64(wk->fires_bad, 0, "thread %d: each timer ran once if left active, else never", t);
    EXPECT_U64(wk->stats_after_bad, 0, "thread %d: each wheel's stats count its own fires", t);
    EXPECT_U64(wk->close_calls, WHEELS, "thread %d: both wheels closed and called back", t);
    EXPECT_U64(wk->loop_close, 0, "thread %d: its loop closes cleanly (nothing left open)", t);
  }
}

static const tap_case_t cases[] = {TAP_CASE(loops_on_threads)};

FX_MAIN(cases)
