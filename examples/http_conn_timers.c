/* http_conn_timers: how a connection's timers are armed (see http_conn.h),
 * the same for both variants of http_timer.h. Every arm and stop
 * keeps the server's count of armed timers; a timer that fires is checked
 * against its deadline where the variant measures (uv_timer_t). */
#include <stdio.h>

#include "http_server_impl.h"

void timers_init(conn_t *c) {
  for (int i = 0; i < CONN_TIMERS; i++)
    http_timer_init(&c->timers[i], c->server->loop, c->server->wheel, c);
}

int timers_close(conn_t *c, uv_close_cb cb) {
  int callbacks = 0;
  for (int i = 0; i < CONN_TIMERS; i++)
    callbacks += http_timer_close(&c->timers[i], cb);
  return callbacks;
}

void timeout_start(conn_t *c, int which, http_timer_cb cb, uint64_t ms) {
  http_server_t *s = c->server;
  http_timer_t *t = &c->timers[which];
  int was_active = http_timer_active(t);
  int r;
  if (ms == 0)
    return;
  r = http_timer_start(t, cb, ms);
  if (r != 0) {
    fprintf(stderr, "http_server: timer start: %s\n", uv_strerror(r));
    return;
  }
  if (!was_active && ++s->counters.timers_armed > s->counters.timers_armed_peak)
    s->counters.timers_armed_peak = s->counters.timers_armed;
}

void timeout_stop(conn_t *c, int which) {
  http_timer_t *t = &c->timers[which];
  if (!http_timer_active(t))
    return;
  http_timer_stop(t);
  c->server->counters.timers_armed--;
}

void timeouts_stop(conn_t *c) {
  for (int i = 0; i < CONN_TIMERS; i++)
    timeout_stop(c, i);
}

conn_t *timeout_fired(http_timer_t *t) {
  conn_t *c = http_timer_data(t);
  http_server_t *s = c->server;
  s->counters.timers_armed--;
  http_timer_fired(t, &s->counters.early_fires, &s->counters.late_max_ms);
  return c;
}
