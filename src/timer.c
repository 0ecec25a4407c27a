/* Loop-thread timers: the uvtw_timer_* calls, in the shape of libuv's
 * uv_timer_* (src/timer.c there). A timer is an entry of the core (core.c)
 * whose callback is timer_fire: it counts the fire, files a repeating
 * timer again, then runs the program's callback, kept in the timer's cb_. */
#include "timer.h"

/* The callback of a timer's entry, once it has left the wheel. A repeating
 * timer is filed again first, from the clock's now, like uv_timer_t, so it
 * is active inside its callback. */
void uvtw__timer_fire(uvtw_timer_t *timer) {
  uvtw_wheel_t *w = uvtw__wheel_of(timer);
  uvtw__note_fired(w, uvtw__node_of(timer)->deadline);
  if (timer->repeat_ != 0)
    uvtw__entry_add(w, timer,
                    uvtw__ticks_up(w, uvtw__add_saturating(uvtw__clock_ms(w), timer->repeat_)));
  timer->cb_(timer); /* the timer may be freed from here on */
}

void uvtw_timer_init(uvtw_wheel_t *wheel, uvtw_timer_t *timer) {
  if (timer != NULL)
    uvtw__entry_init(timer, wheel, 0);
}

/* A start that decides something: a restart, or a filing that may arm
 * (see uvtw__entry_add). */
UVTW_NOINLINE static int start_deciding(uvtw_wheel_t *w, uvtw_timer_t *timer, uint64_t deadline) {
  uvtw__loop_ran(w);          /* the loop is being set up: the uv_async_t lets go */
  uvtw__entry_stop(w, timer); /* a restart is a stop and a filing */
  uvtw__entry_add(w, timer, deadline);
  return 0;
}

int uvtw_timer_start(uvtw_timer_t *timer, uvtw_timer_cb cb, uint64_t timeout, uint64_t repeat) {
  if (timer == NULL || cb == NULL || uvtw__wheel_of(timer) == NULL)
    return UV_EINVAL;
  uvtw_wheel_t *w = uvtw__wheel_of(timer);
  if (uvtw__closing(w))
    return UV_ECANCELED;
  timer->cb_ = cb;
  timer->repeat_ = repeat;
  uint64_t now = uvtw__clock_ms(w);
  uint64_t deadline = uvtw__ticks_up(w, uvtw__add_saturating(now, timeout));
  /* Most starts and restarts decide nothing: a timeout (not due, then)
   * whose filing cannot arm. They only file; the decisions are out of line,
   * so such a start saves few registers (bench/README.md). */
  if (timeout == 0 || uvtw__filing_may_arm(w, deadline))
    return start_deciding(w, timer, deadline);
  if (wheel_node_linked(uvtw__node_of(timer)))
    uvtw__entry_refile(w, timer, deadline);
  else
    uvtw__entry_insert(w, timer, deadline);
  return 0;
}

int uvtw_timer_stop(uvtw_timer_t *timer) {
  if (timer == NULL)
    return UV_EINVAL;
  uvtw__entry_stop(uvtw__wheel_of(timer), timer);
  return 0;
}

int uvtw_timer_again(uvtw_timer_t *timer) {
  if (timer == NULL || timer->cb_ == NULL || uvtw__wheel_of(timer) == NULL)
    return UV_EINVAL;
  if (uvtw__closing(uvtw__wheel_of(timer)))
    return UV_ECANCELED;
  if (timer->repeat_ == 0) /* as uv_timer_again: an active one-shot timer stays */
    return 0;
  return uvtw_timer_start(timer, timer->cb_, timer->repeat_, timer->repeat_);
}

void uvtw_timer_set_repeat(uvtw_timer_t *timer, uint64_t repeat) {
  timer->repeat_ = repeat;
}

uint64_t uvtw_timer_get_repeat(const uvtw_timer_t *timer) {
  return timer->repeat_;
}

int uvtw_timer_is_active(const uvtw_timer_t *timer) {
  return wheel_node_linked(uvtw__node_of(timer));
}

uint64_t uvtw_timer_get_due_in(const uvtw_timer_t *timer) {
  if (!uvtw_timer_is_active(timer))
    return 0;
  uvtw_wheel_t *w = uvtw__wheel_of(timer);
  uint64_t due = uvtw__ms_of(w, uvtw__node_of(timer)->deadline);
  uint64_t now = uvtw__clock_ms(w);
  return due > now ? due - now : 0;
}

void uvtw_timer_ref(uvtw_timer_t *timer) {
  uvtw__entry_set_unref(timer, 0);
}

void uvtw_timer_unref(uvtw_timer_t *timer) {
  uvtw__entry_set_unref(timer, ENTRY_UNREF);
}

int uvtw_timer_has_ref(const uvtw_timer_t *timer) {
  return !(timer->wheel_ & ENTRY_UNREF);
}
