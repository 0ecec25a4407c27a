/* hello: the smallest complete program using a uvtw wheel.
 *
 * One one-shot timer (250 ms) and one repeating timer (every 100 ms, stopped
 * after its third run). uv_run returns by itself once nothing is pending,
 * exactly as it would with uv_timer_t; then the wheel is closed so the loop
 * can be closed with nothing left behind.
 *
 * Prints: tick 1, tick 2, one-shot, tick 3. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* uv.h needs POSIX types under -std=c11 */
#endif
#include <stdio.h>

#include <uv.h>

#include "uvtw.h"

static void on_tick(uvtw_timer_t *timer) {
  int *count = timer->data;
  printf("tick %d\n", ++*count);
  if (*count == 3)
    uvtw_timer_stop(timer);
}

static void on_once(uvtw_timer_t *timer) {
  (void)timer;
  printf("one-shot after 250 ms\n");
}

int main(void) {
  uv_loop_t *loop = uv_default_loop();
  uvtw_wheel_t *wheel;
  uvtw_timer_t once, tick;
  int ticks = 0;

  int r = uvtw_wheel_new(loop, NULL, &wheel);
  if (r != 0) {
    fprintf(stderr, "uvtw_wheel_new: %s\n", uv_strerror(r));
    return 1;
  }
  uvtw_timer_init(wheel, &once);
  uvtw_timer_init(wheel, &tick);
  tick.data = &ticks;
  uvtw_timer_start(&once, on_once, 250, 0);
  uvtw_timer_start(&tick, on_tick, 100, 100);

  uv_run(loop, UV_RUN_DEFAULT); /* returns when no timer is pending */

  uvtw_wheel_close(wheel, NULL, NULL);
  uv_run(loop, UV_RUN_DEFAULT); /* lets the wheel's handles close */
  return uv_loop_close(loop) == 0 ? 0 : 1;
}
