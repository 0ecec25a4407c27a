/* See uv_loop.h. */
#define _GNU_SOURCE
#include "uv_loop.h"

#include "bench.h"

uv_loop_t *bench_loop;
static uv_timer_t kick;
static void (*kick_fn)(void *);
static void *kick_arg;

int bench_loop_init(void) {
  bench_loop = uv_default_loop();
  if (bench_loop == NULL || uv_timer_init(bench_loop, &kick) != 0)
    return -1;
  uv_unref((uv_handle_t *)&kick);
  return 0;
}

void bench_loop_fini(void) {
  uv_close((uv_handle_t *)&kick, NULL);
  uv_run(bench_loop, UV_RUN_DEFAULT);
  uv_loop_close(bench_loop);
}

double backend_now_ms(void) {
  return (double)uv_now(bench_loop);
}

/* uv_stop makes this uv_run(UV_RUN_ONCE) poll without blocking and return,
 * instead of sleeping until the next timer is due. */
static void kick_cb(uv_timer_t *handle) {
  uv_unref((uv_handle_t *)handle);
  kick_fn(kick_arg);
  uv_stop(bench_loop);
}

void backend_defer(uint64_t delay_ms, void (*fn)(void *), void *arg) {
  kick_fn = fn;
  kick_arg = arg;
  uv_ref((uv_handle_t *)&kick);
  uv_timer_start(&kick, kick_cb, delay_ms, 0);
}

void backend_run_once(void) {
  uv_run(bench_loop, UV_RUN_ONCE);
}

void backend_run(void) {
  uv_run(bench_loop, UV_RUN_DEFAULT);
}
