/* http_timer_uvtw: each connection timer is a timer on the server's wheel
 * (see http_timer.h). The wheel measures its own lateness and never fires
 * early (uvtw.h), so nothing is measured here. */
#include "http_timer.h"

const char http_timer_name[] = "uvtw";

int http_timer_check(const uvtw_options_t *wheel_options) {
  (void)wheel_options;
  return 0;
}

static void on_timer(uvtw_timer_t *timer) {
  http_timer_t *t = (http_timer_t *)timer; /* its first member */
  t->cb(t);
}

void http_timer_init(http_timer_t *t, uv_loop_t *loop, uvtw_wheel_t *wheel, void *data) {
  (void)loop;
  uvtw_timer_init(wheel, &t->timer);
  t->timer.data = data;
}

void *http_timer_data(const http_timer_t *t) {
  return t->timer.data;
}

int http_timer_start(http_timer_t *t, http_timer_cb cb, uint64_t ms) {
  t->cb = cb;
  return uvtw_timer_start(&t->timer, on_timer, ms, 0);
}

void http_timer_stop(http_timer_t *t) {
  uvtw_timer_stop(&t->timer);
}

int http_timer_active(const http_timer_t *t) {
  return uvtw_timer_is_active(&t->timer);
}

void http_timer_fired(const http_timer_t *t, uint64_t *early, uint64_t *late_max) {
  (void)t, (void)early, (void)late_max;
}

int http_timer_close(http_timer_t *t, uv_close_cb cb) {
  (void)cb;
  uvtw_timer_stop(&t->timer); /* an inactive uvtw timer holds nothing */
  return 0;
}
