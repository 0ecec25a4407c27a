/* The close races of src/tasks.c, each pinned down by construction rather
 * than left to chance (TAP):
 *
 *   close_waits_for_a_sender ... another thread is inside the gate, between
 *                                its push and its uv_async_send, when the
 *                                loop closes the wheel: the close waits for
 *                                it to leave, then ends its task with
 *                                UV_ECANCELED
 *   cancel_finds_the_gate_shut . another thread cancels a task in the wheel
 *                                after the close has shut the gate: the
 *                                cancel wins, its message cannot be sent,
 *                                and the close drops the task itself
 *   schedule_finds_the_gate_shut another thread schedules after the close
 *                                has shut the gate: UV_ECANCELED, nothing
 *                                queued, *ticket untouched
 *
 * This executable links the library's own objects with
 * -Wl,--wrap=uv_async_send, so the library's uv_async_send goes through
 * __wrap_uv_async_send below, which can hold the calling thread at that
 * point: inside the gate. There is no hook in the library.
 *
 * Cases run by name: `meson test -C build-test races --test-args cancel`. */
#include <stdatomic.h>

#include <uv.h>

#include "tap.h"
#include "uvtw.h"

#define NS_PER_MS UINT64_C(1000000)

int __real_uv_async_send(uv_async_t *async);
int __wrap_uv_async_send(uv_async_t *async);

static atomic_int hold_next_send; /* the next send waits on `go` */
static uv_sem_t inside, go;

int __wrap_uv_async_send(uv_async_t *async) {
  if (atomic_exchange(&hold_next_send, 0)) {
    uv_sem_post(&inside);
    uv_sem_wait(&go);
  }
  return __real_uv_async_send(async);
}

typedef struct probe_s {
  int calls;
  int status;
} probe_t;

static void on_task(void *arg, int status) {
  probe_t *p = arg;
  p->calls++;
  p->status = status;
}

static void on_close(uvtw_wheel_t *wheel, void *arg) {
  (void)wheel;
  ++*(int *)arg;
}

static void on_idle(uv_idle_t *idle) {
  (void)idle;
}

/* One loop iteration, with a handle of the test's keeping the loop alive:
 * the wheel drains its queue. */
static void iterate(uv_loop_t *loop) {
  uv_idle_t idle;
  uv_idle_init(loop, &idle);
  uv_idle_start(&idle, on_idle);
  uv_run(loop, UV_RUN_NOWAIT);
  uv_close((uv_handle_t *)&idle, NULL);
  uv_run(loop, UV_RUN_NOWAIT);
}

/* A loop and a wheel, after the loop's first iteration (the setup is over). */
static int open_wheel(uv_loop_t *loop, uvtw_wheel_t **wheel, const char *T) {
  if (!tap_ok(uv_loop_init(loop) == 0 && uvtw_wheel_new(loop, NULL, wheel) == 0,
              "%s: a loop and a wheel", T))
    return 0;
  uv_run(loop, UV_RUN_NOWAIT);
  return 1;
}

static void close_loop(uv_loop_t *loop, const char *T) {
  uv_run(loop, UV_RUN_DEFAULT);
  EXPECT_ERR(uv_loop_close(loop), 0, "%s: nothing is left open on the loop", T);
}

/* ---- close_waits_for_a_sender --------------------------------------------- */

typedef struct sender_s {
  uvtw_wheel_t *wheel;
  probe_t probe;
  int rc;
} sender_t;

static void sender_thread(void *arg) {
  sender_t *s = arg;
  s->rc = uvtw_schedule(s->wheel, 0, on_task, &s->probe, NULL);
}

static void releaser_thread(void *arg) {
  (void)arg;
  uv_sleep(100); /* the close is waiting by then */
  uv_sem_post(&go);
}

static void test_close_waits_for_a_sender(void) {
  const char *T = "close_waits_for_a_sender";
  uv_loop_t loop;
  sender_t s = {NULL, {0, 0}, -1};
  uv_thread_t sender, releaser;
  int closes = 0;
  if (!open_wheel(&loop, &s.wheel, T))
    return;
  atomic_store(&hold_next_send, 1);
  uv_thread_create(&sender, sender_thread, &s);
  uv_sem_wait(&inside); /* the sender has pushed and is inside the gate */
  uv_thread_create(&releaser, releaser_thread, NULL);
  uint64_t t0 = uv_hrtime();
  uvtw_wheel_close(s.wheel, on_close, &closes);
  uint64_t waited_ms = (uv_hrtime() - t0) / NS_PER_MS;
  uv_thread_join(&sender);
  uv_thread_join(&releaser);
  EXPECT_ERR(s.rc, 0, "%s: the sender's schedule succeeded", T);
  if (!tap_ok(waited_ms >= 90, "%s: the close waited for the sender to leave the gate", T))
    tap_diag("  it returned after %" PRIu64 " ms", waited_ms);
  EXPECT_I64(s.probe.calls, 1, "%s: the sender's task ran once, inside the close...", T);
  EXPECT_ERR(s.probe.status, UV_ECANCELED, "%s: ...with UV_ECANCELED", T);
  close_loop(&loop, T);
  EXPECT_I64(closes, 1, "%s: the close callback ran once", T);
}

/* ---- cancel_finds_the_gate_shut, schedule_finds_the_gate_shut ------------- */

typedef struct shut_s {
  uvtw_wheel_t *wheel;
  uvtw_ticket_t *in_wheel; /* a task in the wheel, cancelled from another thread */
  probe_t in_wheel_probe, queued_probe, late_probe;
  int cancel_rc, schedule_rc, callbacks_with_gate_shut;
  uvtw_ticket_t *late_ticket;
} shut_t;

static void schedule_thread(void *arg) {
  shut_t *s = arg;
  s->schedule_rc = uvtw_schedule(s->wheel, 0, on_task, &s->late_probe, &s->late_ticket);
}

static void cancel_thread(void *arg) {
  shut_t *s = arg;
  s->cancel_rc = uvtw_ticket_cancel(s->in_wheel);
}

static void queue_thread(void *arg) {
  shut_t *s = arg;
  uvtw_schedule(s->wheel, 10000, on_task, &s->in_wheel_probe, &s->in_wheel);
}

/* The queued task's UV_ECANCELED callback: the close has shut the gate and
 * not yet dropped the tasks in the wheel. */
static void queued_cb(void *arg, int status) {
  shut_t *s = arg;
  uv_thread_t thread;
  s->queued_probe.calls++;
  s->queued_probe.status = status;
  s->callbacks_with_gate_shut++;
  uv_thread_create(&thread, cancel_thread, s);
  uv_thread_join(&thread);
  uv_thread_create(&thread, schedule_thread, s);
  uv_thread_join(&thread);
}

static void queued_thread(void *arg) {
  shut_t *s = arg;
  uvtw_schedule(s->wheel, 0, queued_cb, s, NULL);
}

static void gate_shut(shut_t *s, uv_loop_t *loop, const char *T) {
  uv_thread_t thread;
  int closes = 0;
  if (!open_wheel(loop, &s->wheel, T))
    return;
  uv_thread_create(&thread, queue_thread, s); /* into the wheel at the next drain */
  uv_thread_join(&thread);
  iterate(loop);
  uv_thread_create(&thread, queued_thread, s); /* still queued at the close */
  uv_thread_join(&thread);
  s->late_ticket = (uvtw_ticket_t *)(void *)s;
  uvtw_wheel_close(s->wheel, on_close, &closes);
  EXPECT_I64(s->callbacks_with_gate_shut, 1,
             "%s: the queued task ran with UV_ECANCELED, the gate shut", T);
  close_loop(loop, T);
  EXPECT_I64(closes, 1, "%s: the close callback ran once", T);
}

static void test_cancel_finds_the_gate_shut(void) {
  const char *T = "cancel_finds_the_gate_shut";
  uv_loop_t loop;
  shut_t s = {0};
  gate_shut(&s, &loop, T);
  EXPECT_ERR(s.cancel_rc, 0, "%s: the other thread's cancel of the task in the wheel won", T);
  EXPECT_I64(s.in_wheel_probe.calls, 0,
             "%s: the close dropped that task itself: its callback never ran", T);
  EXPECT_ERR(uvtw_ticket_cancel(s.in_wheel), 0, "%s: cancelling it again still returns 0", T);
  uvtw_ticket_release(s.in_wheel);
}

static void test_schedule_finds_the_gate_shut(void) {
  const char *T = "schedule_finds_the_gate_shut";
  uv_loop_t loop;
  shut_t s = {0};
  gate_shut(&s, &loop, T);
  EXPECT_ERR(s.schedule_rc, UV_ECANCELED, "%s: a schedule from another thread is UV_ECANCELED", T);
  tap_ok(s.late_ticket == (uvtw_ticket_t *)(void *)&s, "%s: ...and leaves *ticket untouched", T);
  EXPECT_I64(s.late_probe.calls, 0, "%s: ...and queued nothing that ran", T);
  uvtw_ticket_release(s.in_wheel);
}

int main(int argc, char **argv) {
  static const tap_case_t cases[] = {
      TAP_CASE(close_waits_for_a_sender),
      TAP_CASE(cancel_finds_the_gate_shut),
      TAP_CASE(schedule_finds_the_gate_shut),
  };
  uv_sem_init(&inside, 0);
  uv_sem_init(&go, 0);
  tap_diag("libuv %s, uvtw %s", uv_version_string(), uvtw_version_string());
  return tap_run_cases(argc, argv, cases, sizeof cases / sizeof cases[0]);
}
