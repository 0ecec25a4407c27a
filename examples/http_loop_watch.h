/* http_loop_watch: how late the example server's loop runs, and whether it
 * should shed load (see http_loop_watch.c). It knows the wheel and nothing
 * of HTTP: any program on a uvtw wheel can watch its loop this way. */
#ifndef UVTW_EXAMPLES_HTTP_LOOP_WATCH_H
#define UVTW_EXAMPLES_HTTP_LOOP_WATCH_H

#include <stdint.h>

#include "uvtw.h"

#define LOOP_WATCH_SAMPLERS 32 /* sampling timers, LOOP_WATCH_SAMPLE_MS apart */
#define LOOP_WATCH_SAMPLE_MS 10

typedef struct loop_watch_s {
  uvtw_wheel_t *wheel;
  uint64_t max_delay;   /* ms; 0: never sheds */
  uint64_t *shedding;   /* set to 1 while the last second's p99 lateness is above max_delay */
  const uint64_t *busy; /* 0: nothing to watch, the samplers stop (loop_watch_wake) */
  int paused;           /* samplers stopped for want of work */
  uvtw_timer_t second_timer;
  struct loop_sampler_s {
    uvtw_timer_t timer;
    uint64_t due; /* its deadline, on the wheel's clock */
  } samplers[LOOP_WATCH_SAMPLERS];
  uvtw_stats_t second_start, second_end; /* the last completed second */
} loop_watch_t;

/* Starts copying the wheel's statistics once a second, deciding *shedding
 * with max_delay > 0, and sampling the loop every LOOP_WATCH_SAMPLE_MS if
 * `sample`, while *busy is not 0: an idle program is not woken 100 times a
 * second. Its timers are unreferenced: they never keep the loop alive. */
void loop_watch_start(loop_watch_t *watch, uvtw_wheel_t *wheel, uint64_t max_delay, int sample,
                      uint64_t *shedding, const uint64_t *busy);
/* Work has come (*busy is not 0): the samplers stopped start again. */
void loop_watch_wake(loop_watch_t *watch);
void loop_watch_stop(loop_watch_t *watch);

#endif
