/* http_timer_uv: each connection timer is a uv_timer_t (see http_timer.h),
 * for the benchmark's comparison with the wheel. libuv keeps no statistics
 * of its timers, so each remembers the deadline it was armed for, and its
 * callback measures against it what the wheel measures for its own. */
#include "http_timer.h"

const char http_timer_name[] = "uv_timer";

int http_timer_check(const uvtw_options_t *wheel_options) {
  return wheel_options != NULL && wheel_options->manual_clock ? UV_ENOTSUP : 0;
}

static void on_timer(uv_timer_t *timer) {
  http_timer_t *t = (http_timer_t *)timer; /* its first member */
  t->cb(t);
}

void http_timer_init(http_timer_t *t, uv_loop_t *loop, uvtw_wheel_t *wheel, void *data) {
  uv_timer_init(loop, &t->timer);
  t->timer.data = data;
  (void)wheel;
  t->deadline = 0;
}

void *http_timer_data(const http_timer_t *t) {
  return t->timer.data;
}

int http_timer_start(http_timer_t *t, http_timer_cb cb, uint64_t ms) {
  t->cb = cb;
  t->deadline = uv_now(t->timer.loop) + ms;
  return uv_timer_start(&t->timer, on_timer, ms, 0);
}

void http_timer_stop(http_timer_t *t) {
  uv_timer_stop(&t->timer);
}

int http_timer_active(const http_timer_t *t) {
  return uv_is_active((const uv_handle_t *)&t->timer);
}

void http_timer_fired(const http_timer_t *t, uint64_t *early, uint64_t *late_max) {
  uint64_t now = uv_now(t->timer.loop);
  if (now < t->deadline)
    (*early)++;
  else if (now - t->deadline > *late_max)
    *late_max = now - t->deadline;
}

int http_timer_close(http_timer_t *t, uv_close_cb cb) {
  uv_close((uv_handle_t *)&t->timer, cb);
  return 1;
}
