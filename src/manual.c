/* The manual clock (uvtw_options_t.manual_clock): the wheel's time moves
 * only by uvtw_wheel_advance and uvtw_wheel_advance_next, which run the
 * passes themselves, one per distinct due time, in the caller's stack. The
 * uv_timer_t is never started (core.c's arming stays IDLE). */
#include "tasks.h"

uint64_t uvtw_wheel_now(const uvtw_wheel_t *w) {
  return uvtw__clock_ms(w);
}

/* Checks that the manual clock may move now, and takes in the queued
 * tasks, whose deadlines count from the wheel's time when taken in. */
static int begin_advance(uvtw_wheel_t *w) {
  if (w == NULL || !(w->flags & WHEEL_MANUAL))
    return UV_EINVAL;
  if (uvtw__closing(w))
    return UV_ECANCELED;
  if (uvtw__in_pass(w))
    return UV_EBUSY;
  uvtw__tasks_drain(w);
  return 0;
}

int uvtw_wheel_advance(uvtw_wheel_t *w, uint64_t ms) {
  int err = begin_advance(w);
  if (err != 0)
    return err;
  /* A saturated deadline (UINT64_MAX) is never reached. */
  uint64_t target = uvtw__add_saturating(uvtw__clock_ms(w), ms);
  if (target == UINT64_MAX)
    target--;
  uint64_t last = target / w->tick_ms;
  uint64_t at = uvtw__now_ticks(w);
  while (w->wheel.count != 0) {
    uint64_t next = uvtw__wheel_next_deadline(&w->wheel);
    if (next > at)
      at = next;
    if (at > last)
      break;
    if (!uvtw__pass(w, at))
      return 0;
    at++; /* passes at strictly increasing times */
  }
  uvtw__manual_set(w, target);
  return 0;
}

int64_t uvtw_wheel_advance_next(uvtw_wheel_t *w) {
  int err = begin_advance(w);
  if (err != 0)
    return err;
  uint64_t next = uvtw__wheel_next_deadline_exact(&w->wheel);
  if (next == UINT64_MAX)
    return UV_EAGAIN;
  uint64_t at = next > uvtw__now_ticks(w) ? next : uvtw__now_ticks(w);
  uint64_t due = uvtw__ms_of(w, at);
  uint64_t moved = due > uvtw__clock_ms(w) ? due - uvtw__clock_ms(w) : 0;
  uvtw__pass(w, at); /* the wheel may be gone if a callback closed it */
  return moved > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)moved;
}
