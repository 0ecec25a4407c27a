/* http_loop_watch: see http_loop_watch.h.
 *
 * The last completed second's lateness is the difference of the wheel's
 * statistics copied at its start and end (uvtw_stats_late_quantile); its
 * p99 is a bucket's upper bound, at most a quarter above the true value
 * (uvtw.h, "Lateness").
 *
 * The wheel samples the loop at every callback it runs: a server's request
 * timeouts, when they fall due. Sampling timers keep a measure when none
 * is due, one every LOOP_WATCH_SAMPLE_MS, as Node's monitorEventLoopDelay
 * does at its resolution, but with each of the LOOP_WATCH_SAMPLERS timers
 * re-armed one round after its own deadline rather than after it ran: a
 * stall of 300 ms then makes every timer due during it late, by 300, 290,
 * ... ms, so that the histogram holds the stall for as long as it lasted
 * (one sample per LOOP_WATCH_SAMPLE_MS, as HdrHistogram's correction for
 * coordinated omission), not as one sample among thousands. */
#include "http_loop_watch.h"

#include <stddef.h>

#define ROUND_MS ((uint64_t)LOOP_WATCH_SAMPLERS * LOOP_WATCH_SAMPLE_MS)

static void on_sample(uvtw_timer_t *timer) {
  struct loop_sampler_s *sampler = (struct loop_sampler_s *)timer; /* its first member */
  loop_watch_t *watch = timer->data;
  uint64_t now = uvtw_wheel_now(watch->wheel);
  /* The wheel counted how late this ran: that is the sample. */
  if (*watch->busy == 0) {
    watch->paused++;
    return;
  }
  sampler->due = sampler->due + ROUND_MS > now ? sampler->due + ROUND_MS : now;
  uvtw_timer_start(timer, on_sample, sampler->due - now, 0);
}

static void on_second(uvtw_timer_t *timer) {
  loop_watch_t *watch = timer->data;
  int64_t p99;
  watch->second_start = watch->second_end;
  uvtw_wheel_stats(watch->wheel, &watch->second_end);
  if (watch->max_delay == 0)
    return;
  p99 = uvtw_stats_late_quantile(&watch->second_end, &watch->second_start, 0.99);
  *watch->shedding = p99 >= 0 && (uint64_t)p99 > watch->max_delay;
}

static void timer_setup(loop_watch_t *watch, uvtw_timer_t *timer) {
  uvtw_timer_init(watch->wheel, timer);
  timer->data = watch;
  uvtw_timer_unref(timer);
}

void loop_watch_start(loop_watch_t *watch, uvtw_wheel_t *wheel, uint64_t max_delay, int sample,
                      uint64_t *shedding, const uint64_t *busy) {
  watch->wheel = wheel;
  watch->busy = busy;
  watch->paused = 0;
  watch->max_delay = max_delay;
  watch->shedding = shedding;
  uvtw_wheel_stats(wheel, &watch->second_end);
  watch->second_start = watch->second_end; /* an empty window until the first second */
  timer_setup(watch, &watch->second_timer);
  uvtw_timer_start(&watch->second_timer, on_second, 1000, 1000);
  for (int i = 0; i < LOOP_WATCH_SAMPLERS; i++) {
    struct loop_sampler_s *sampler = &watch->samplers[i];
    uint64_t first = (uint64_t)(i + 1) * LOOP_WATCH_SAMPLE_MS;
    timer_setup(watch, &sampler->timer);
    sampler->due = uvtw_wheel_now(wheel) + first;
    if (sample)
      uvtw_timer_start(&sampler->timer, on_sample, first, 0);
  }
}

void loop_watch_wake(loop_watch_t *watch) {
  uint64_t now = uvtw_wheel_now(watch->wheel);
  for (int i = 0; i < LOOP_WATCH_SAMPLERS && watch->paused > 0; i++) {
    struct loop_sampler_s *sampler = &watch->samplers[i];
    if (uvtw_timer_is_active(&sampler->timer))
      continue;
    sampler->due = now + (uint64_t)(i + 1) * LOOP_WATCH_SAMPLE_MS;
    uvtw_timer_start(&sampler->timer, on_sample, sampler->due - now, 0);
    watch->paused--;
  }
}

void loop_watch_stop(loop_watch_t *watch) {
  watch->paused = 0; /* no wake starts them again */
  uvtw_timer_stop(&watch->second_timer);
  for (int i = 0; i < LOOP_WATCH_SAMPLERS; i++)
    uvtw_timer_stop(&watch->samplers[i].timer);
}
