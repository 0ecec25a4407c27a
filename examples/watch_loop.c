/* watch_loop: how late does this loop run? Every second it prints the p50,
 * p99 and maximum lateness of the wheel's callbacks in the last second: the
 * window between this second's copy of the stats and the last one.
 *
 * The load: 2,000 timers that fire every 5 to 50 ms, like a server's
 * request timeouts, and a handler that blocks the loop for 40 ms every
 * 2.5 s, like a slow request. Runs for 5 seconds, or argv[1].
 *
 *   cc watch_loop.c $(pkg-config --cflags --libs uvtw) */
#include <uvtw.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

enum { TIMERS = 2000 };

static uvtw_wheel_t *wheel;
static uvtw_timer_t timers[TIMERS], slow, watch;
static uvtw_stats_t last; /* the copy taken a second ago */
static int seconds_left;

static void on_timeout(uvtw_timer_t *timer) {
  (void)timer; /* a server would close a connection here */
}

static void on_slow_request(uvtw_timer_t *timer) {
  (void)timer;
  uv_sleep(40); /* every callback due meanwhile runs up to 40 ms late */
}

/* Each figure is the upper bound of a bucket of the histogram: exact up to
 * 7 ms, at most a quarter above the true value beyond. */
static void on_second(uvtw_timer_t *timer) {
  (void)timer;
  uvtw_stats_t now;
  uvtw_wheel_stats(wheel, &now);
  int64_t p50 = uvtw_stats_late_quantile(&now, &last, 0.5);
  int64_t p99 = uvtw_stats_late_quantile(&now, &last, 0.99);
  int64_t max = uvtw_stats_late_quantile(&now, &last, 1);
  if (p50 == UV_EAGAIN)
    printf("no callbacks in the last second\n");
  else
    printf("last second: %6" PRIu64 " callbacks late by p50 %" PRId64 " ms, p99 %" PRId64
           " ms, max %" PRId64 " ms\n",
           now.fired - last.fired, p50, p99, max);
  fflush(stdout); /* a line a second, also into a pipe or a log */
  last = now;
  if (--seconds_left == 0)
    uvtw_wheel_close(wheel, NULL, NULL); /* its timers stop; uv_run returns */
}

int main(int argc, char **argv) {
  seconds_left = argc > 1 ? atoi(argv[1]) : 5;
  if (seconds_left <= 0 || uvtw_wheel_new(uv_default_loop(), NULL, &wheel) != 0)
    return 1;
  for (int i = 0; i < TIMERS; i++) {
    uint64_t every = 5 + (uint64_t)i % 46;
    uvtw_timer_init(wheel, &timers[i]);
    uvtw_timer_start(&timers[i], on_timeout, every, every);
  }
  uvtw_timer_init(wheel, &slow);
  uvtw_timer_start(&slow, on_slow_request, 2500, 2500);
  uvtw_timer_init(wheel, &watch);
  uvtw_timer_start(&watch, on_second, 1000, 1000);
  uvtw_wheel_stats(wheel, &last);

  uv_run(uv_default_loop(), UV_RUN_DEFAULT); /* until the wheel is closed */
  return uv_loop_close(uv_default_loop()) == 0 ? 0 : 1;
}
