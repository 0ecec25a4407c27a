/* http_timer: the connection timers of the example server, behind one small
 * interface with two variants: http_timer_uvtw.c (the example) and, with
 * HTTP_TIMER_UV, http_timer_uv.c (one uv_timer_t each, http_server_uvtimer).
 * A timer is one-shot; its callback gets the timer, and the timer's data.
 * A connection holds its timers as plain members. */
#ifndef UVTW_EXAMPLES_HTTP_TIMER_H
#define UVTW_EXAMPLES_HTTP_TIMER_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "uvtw.h"

typedef struct http_timer_s http_timer_t;
typedef void (*http_timer_cb)(http_timer_t *timer);

struct http_timer_s {
#ifdef HTTP_TIMER_UV
  uv_timer_t timer;
  uint64_t deadline; /* on the loop's clock, the wheel's too (no manual clock) */
#else
  uvtw_timer_t timer;
#endif
  http_timer_cb cb;
};

extern const char http_timer_name[]; /* "uvtw" or "uv_timer", for /stats */

/* 0, or UV_ENOTSUP where the variant cannot run on the wheel's clock (a
 * uv_timer_t counts on the loop's, not on a manual one). */
int http_timer_check(const uvtw_options_t *wheel_options);

void http_timer_init(http_timer_t *timer, uv_loop_t *loop, uvtw_wheel_t *wheel, void *data);
void *http_timer_data(const http_timer_t *timer);
int http_timer_start(http_timer_t *timer, http_timer_cb cb, uint64_t ms); /* or a libuv error */
void http_timer_stop(http_timer_t *timer);
int http_timer_active(const http_timer_t *timer);

/* At the top of its callback: the uv_timer_t variant checks the deadline it
 * was armed for against the loop's clock, as the wheel checks its own, and
 * counts in *early a fire before it, in *late_max the largest lateness. */
void http_timer_fired(const http_timer_t *timer, uint64_t *early, uint64_t *late_max);

/* Returns how many close callbacks `cb` will get for it (0 or 1). */
int http_timer_close(http_timer_t *timer, uv_close_cb cb);

#endif
