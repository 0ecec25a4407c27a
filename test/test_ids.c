/* A start or stop takes its wheel from a per-thread note of the last wheel
 * used, and checks it against the wheel the timer's id names now
 * (src/uvtw.c). Wheels come and go, and both their addresses (malloc) and
 * their 16-bit ids come back on new wheels. This proves the note never
 * sends an operation to a freed wheel, nor to the wrong live one:
 *
 *  - wheel A is used (the note names it), closed and freed; wheels are then
 *    made and closed, untouched, until one has A's id again: a timer
 *    start, restart and stop on it must show in its stats, not go to A.
 *  - 2000 times, a wheel is made (often where the last one, which the note
 *    names, was freed), used the same way, and freed.
 *  - the wheel with A's id is kept open beside a second live wheel, the
 *    thread switching between them, and a timer of each then fires on its
 *    own wheel.
 *
 * ASan and Valgrind see any use of a freed wheel. Ids run through 65535
 * values before one comes back, so this makes and closes about that many
 * wheels (0.5 s; reads the wheel id from the timer's private tag).
 */
#define _POSIX_C_SOURCE 200809L

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "tap.h"
#include "uvtw.h"

static unsigned id_of(const uvtw_timer_t *timer) {
  return (unsigned)(timer->entry_.tag & 0xffff);
}

static int closed;
static void on_closed(uvtw_wheel_t *wheel, void *arg) {
  (void)wheel;
  (void)arg;
  closed++;
}

static void close_wheel(uv_loop_t *loop, uvtw_wheel_t *wheel) {
  int before = closed;
  uvtw_wheel_close(wheel, on_closed, NULL);
  while (closed == before)
    uv_run(loop, UV_RUN_NOWAIT);
}

static int fires[2];
static void count_cb(uvtw_timer_t *timer) {
  fires[(uintptr_t)timer->data]++;
}

/* A start, a restart and a stop of `timer` on `wheel`: true if each shows
 * in that wheel's stats as it should. */
static bool ops_reach(uvtw_wheel_t *wheel, uvtw_timer_t *timer) {
  uvtw_stats_t s;
  if (uvtw_timer_start(timer, count_cb, 1000, 0) != 0)
    return false;
  uvtw_wheel_stats(wheel, &s);
  if (s.active != 1 || s.started != 1)
    return false;
  if (uvtw_timer_start(timer, count_cb, 2000, 0) != 0)
    return false;
  uvtw_wheel_stats(wheel, &s);
  if (s.active != 1 || s.started != 2 || s.stopped != 1)
    return false;
  if (uvtw_timer_stop(timer) != 0 || uvtw_timer_is_active(timer))
    return false;
  uvtw_wheel_stats(wheel, &s);
  return s.active == 0 && s.stopped == 2 && uvtw_wheel_next_due(wheel) == -1;
}

int main(void) {
  uv_loop_t loop;
  if (uv_loop_init(&loop) != 0) {
    tap_ok(0, "uv_loop_init");
    return tap_done();
  }

  uvtw_wheel_t *a;
  uvtw_timer_t ta;
  TAP_EQ(uvtw_wheel_new(&loop, NULL, &a), 0, "wheel A is made");
  uvtw_timer_init(a, &ta);
  TAP_EQ(ops_reach(a, &ta), 1, "start, restart and stop on wheel A reach wheel A");
  unsigned id_a = id_of(&ta);
  uintptr_t addr_a = (uintptr_t)a;
  close_wheel(&loop, a); /* freed; this thread's note still named it */

  /* Made and closed one after another, untouched (the note still names A),
   * until one has A's id again: an operation on it must not go to A. */
  size_t made = 0;
  uvtw_wheel_t *again = NULL;
  uvtw_timer_t t;
  for (size_t k = 0; k < 70000 && again == NULL; k++) {
    uvtw_wheel_t *w;
    if (uvtw_wheel_new(&loop, NULL, &w) != 0)
      break;
    made++;
    uvtw_timer_init(w, &t);
    if (id_of(&t) == id_a)
      again = w;
    else
      close_wheel(&loop, w);
  }
  tap_diag("%zu wheels made until A's id came back (A at %#jx, it at %#jx)", made,
           (uintmax_t)addr_a, (uintmax_t)(uintptr_t)again);
  TAP_EQ(again != NULL, 1, "a wheel made later has A's id again");
  if (again == NULL)
    return tap_done();
  TAP_EQ(ops_reach(again, &t), 1,
         "start, restart and stop on it reach it, not A, which the thread used last");

  /* Used, freed, and the next made, many times over: the note names the
   * wheel just freed, whose address malloc may give the next one. */
  size_t failed = 0, at_noted = 0;
  uintptr_t noted = (uintptr_t)again;
  uvtw_wheel_t *keep = again;
  for (int k = 0; k < 2000; k++) {
    uvtw_wheel_t *w;
    uvtw_timer_t tw;
    if (uvtw_wheel_new(&loop, NULL, &w) != 0) {
      failed++;
      break;
    }
    if ((uintptr_t)w == noted)
      at_noted++;
    uvtw_timer_init(w, &tw);
    if (!ops_reach(w, &tw))
      failed++;
    noted = (uintptr_t)w;
    close_wheel(&loop, w);
  }
  tap_diag("of 2000 wheels, %zu were made at the address of the wheel the note named, "
           "just freed", at_noted);
  TAP_EQ(failed, 0, "each of 2000 wheels made after the last one used was freed gets its "
                    "own timer's start, restart and stop");
  again = keep;

  /* The wheel with A's id beside another live wheel, the thread switching
   * between them; a timer of each fires on its own wheel. */
  uvtw_wheel_t *b;
  uvtw_timer_t tb, tr;
  TAP_EQ(uvtw_wheel_new(&loop, NULL, &b), 0, "a second live wheel is made");
  uvtw_timer_init(b, &tb);
  t.data = (void *)0;
  tb.data = (void *)1;
  uvtw_timer_init(again, &tr); /* a second timer on the wheel with A's id */
  tr.data = (void *)0;
  bool ok = true;
  for (int k = 0; k < 100; k++) {
    ok &= uvtw_timer_start(&t, count_cb, (uint64_t)(5 + k % 3), 0) == 0;
    ok &= uvtw_timer_start(&tb, count_cb, (uint64_t)(5 + k % 5), 0) == 0;
    ok &= uvtw_timer_stop(&t) == 0;
    ok &= uvtw_timer_start(&tr, count_cb, 3, 0) == 0;
    ok &= uvtw_timer_stop(&tr) == 0;
  }
  ok &= uvtw_timer_start(&t, count_cb, 4, 0) == 0;
  TAP_EQ(ok, 1, "starts and stops alternating between the two wheels succeed");
  uvtw_stats_t sa, sb;
  uvtw_wheel_stats(again, &sa);
  uvtw_wheel_stats(b, &sb);
  TAP_EQ(sa.active, 1, "the wheel with A's id holds its one timer");
  TAP_EQ(sa.started, 2 + 201, "... and counts its own starts only");
  TAP_EQ(sb.active, 1, "the other wheel holds its one timer");
  TAP_EQ(sb.started, 100, "... and counts its own starts only");
  uv_run(&loop, UV_RUN_DEFAULT);
  TAP_EQ(fires[0], 1, "the timer on the wheel with A's id fired once");
  TAP_EQ(fires[1], 1, "the timer on the other wheel fired once");
  uvtw_wheel_stats(again, &sa);
  uvtw_wheel_stats(b, &sb);
  TAP_EQ(sa.fired, 1, "it fired on its own wheel");
  TAP_EQ(sb.fired, 1, "and the other on its own");
  close_wheel(&loop, again);
  close_wheel(&loop, b);
  TAP_EQ(uv_loop_close(&loop), 0, "the loop closes: nothing is left on it");
  return tap_done();
}
