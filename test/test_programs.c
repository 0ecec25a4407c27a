/* The ways real libuv programs use a timer library, each against what
 * include/uvtw.h and README.md promise:
 *
 *   busy_uv_timer_starts .... a wheel timer restarting itself with 0 runs once
 *                             per loop iteration even when a uv_timer_t due at
 *                             the same time starts another wheel timer
 *   busy_two_wheels ......... two wheels on one loop whose callbacks restart
 *                             themselves with 0 and start a timer on the other
 *                             wheel: once per iteration each, and the loop
 *                             goes on (libuv < 1.48 ran such timers again in
 *                             the same timer phase)
 *   again_twin .............. uvtw_timer_again against uv_timer_again: repeat 0
 *                             leaves an active one-shot timer running, repeat
 *                             > 0 restarts; both fire in the same iteration
 *   loop_on_other_thread .... loop and wheel made on one thread, uv_run on
 *                             another: the making thread's tasks and cancels
 *                             go through the queue and run on the loop thread
 *   before_first_run ........ a task scheduled before the loop first runs
 *                             keeps uv_run(DEFAULT) going until it ran, with
 *                             the loop run on the same or another thread; an
 *                             idle wheel does not keep it going
 *   ticket_in_arg ........... a callback that runs at once reads the ticket
 *                             from its argument, where uvtw_schedule wrote it
 *   max_pending_blocked ..... cancelled tasks hold their max_pending places
 *                             while the loop is blocked, and give them back at
 *                             the loop's next drain, long before their deadline
 *   max_pending_chain ....... at max_pending = 1, a task's callback schedules
 *                             the next task
 *   freed_in_callback ....... connections freed inside their own timeout
 *                             callbacks, one-shot and repeating (ASan, Valgrind)
 *   walk_after_close ........ uvtw_wheel_close, then a uv_walk closing every
 *                             other handle: the close callback runs, the loop
 *                             closes
 *   walk_before_close ....... a uv_walk closes every handle, the wheel's two
 *                             among them, uv_loop_close, then uvtw_wheel_close:
 *                             no crash, pending tasks end with UV_ECANCELED,
 *                             the close callback runs, timers are inert
 *   walk_in_callback ........ a wheel timer's callback walks the loop closing
 *                             every handle; the wheel closed after uv_run,
 *                             the loop used again: no handle the walk closed
 *                             is started again
 *   walk_in_peer_pass ....... the same from another wheel's pass, which then
 *                             starts a due timer on the walked wheel
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"

#define NS_PER_MS UINT64_C(1000000)

static void close_any(uv_handle_t *handle, void *arg) {
  (void)arg;
  if (!uv_is_closing(handle))
    uv_close(handle, NULL);
}

static void count_close_cb(uvtw_wheel_t *wheel, void *arg) {
  (void)wheel;
  ++*(int *)arg;
}

static void noop_uv_timer_cb(uv_timer_t *handle) {
  (void)handle;
}

static void count_uv_timer_cb(uv_timer_t *handle) {
  ++*(int *)handle->data;
}

/* ---- Busy loops on libuv < 1.48 ------------------------------------------ */

enum { BUSY_ITERATIONS = 30 };

typedef struct busy_timer_s {
  uvtw_timer_t timer;
  struct busy_timer_s *other; /* started from this one's callback, if set */
  uint64_t last_iter;
  int runs, twice; /* callbacks; iterations in which it ran more than once */
} busy_timer_t;

static struct {
  busy_timer_t self, other;
  busy_timer_t a, b;
  uv_timer_t starter;
  int start_errors;
} busy;

static void busy_cb(uvtw_timer_t *timer) {
  busy_timer_t *t = timer->data;
  if (t->runs > 0 && t->last_iter == g_fx->iter)
    t->twice++;
  t->last_iter = g_fx->iter;
  if (++t->runs >= BUSY_ITERATIONS)
    return;
  busy.start_errors += uvtw_timer_start(timer, busy_cb, 0, 0) != 0;
  if (t->other != NULL)
    busy.start_errors += uvtw_timer_start(&t->other->timer, busy_cb, 0, 0) != 0;
}

static void busy_init(uvtw_wheel_t *wheel, busy_timer_t *t, busy_timer_t *other) {
  memset(t, 0, sizeof *t);
  uvtw_timer_init(wheel, &t->timer);
  t->timer.data = t;
  t->other = other;
}

static void busy_starter_cb(uv_timer_t *handle) {
  (void)handle;
  busy.start_errors += uvtw_timer_start(&busy.other.timer, busy_cb, 0, 0) != 0;
}

static void test_busy_uv_timer_starts(void) {
  const char *T = "busy_uv_timer_starts";
  fx_t f;
  if (!fx_open(&f, T, NULL))
    return;
  busy_init(f.wheel, &busy.self, NULL);
  busy_init(f.wheel, &busy.other, NULL);
  busy.other.runs = BUSY_ITERATIONS - 1; /* runs once, restarts nothing */
  busy.start_errors = 0;
  uv_timer_init(&f.loop, &busy.starter);
  /* Due at the same time: the wheel's uv_timer_t was started first, so its
   * pass (which restarts `self` with 0) runs before the starter. */
  busy.start_errors += uvtw_timer_start(&busy.self.timer, busy_cb, 5, 0) != 0;
  uv_timer_start(&busy.starter, busy_starter_cb, 5, 0);
  uv_run(&f.loop, UV_RUN_DEFAULT);
  EXPECT_U64(busy.self.runs, BUSY_ITERATIONS, "%s: every round of the self-restarting timer ran",
             T);
  EXPECT_U64(busy.self.twice, 0,
             "%s: it never ran twice in one loop iteration, though a uv_timer_t callback "
             "started another wheel timer after its first pass",
             T);
  EXPECT_U64(busy.other.runs, BUSY_ITERATIONS, "%s: the timer the uv_timer_t started ran", T);
  EXPECT_U64(busy.start_errors, 0, "%s: every start returned 0", T);
  fx_close_handle(&busy.starter);
  fx_close(&f);
}

static void test_busy_two_wheels(void) {
  const char *T = "busy_two_wheels";
  fx_t f;
  if (!fx_open(&f, T, NULL))
    return;
  uvtw_wheel_t *second = fx_wheel_new(&f, NULL);
  if (second == NULL) {
    fx_close(&f);
    return;
  }
  busy_init(f.wheel, &busy.a, &busy.b);
  busy_init(second, &busy.b, &busy.a);
  busy.start_errors = 0;
  busy.start_errors += uvtw_timer_start(&busy.a.timer, busy_cb, 0, 0) != 0;
  uint64_t iter0 = f.iter;
  uv_run(&f.loop, UV_RUN_DEFAULT);
  EXPECT_U64(f.watchdog_fired, 0, "%s: uv_run(DEFAULT) returned (no endless timer phase)", T);
  tap_ok(busy.a.runs >= BUSY_ITERATIONS && busy.b.runs >= BUSY_ITERATIONS,
         "%s: both timers ran every round", T);
  EXPECT_U64(busy.a.twice + busy.b.twice, 0, "%s: neither ran twice in one loop iteration", T);
  if (!tap_ok(f.iter - iter0 >= BUSY_ITERATIONS - 1,
              "%s: the rounds spread over loop iterations, one each", T))
    tap_diag("  %d rounds in %" PRIu64 " iterations", busy.a.runs, f.iter - iter0);
  EXPECT_U64(busy.start_errors, 0, "%s: every start returned 0", T);
  fx_wheel_close(&f, second);
  fx_close(&f);
}

/* ---- again against uv_timer_again ----------------------------------------- */

typedef struct again_pair_s {
  uvtw_timer_t w;
  uv_timer_t u;
  int w_fires, u_fires;
  uint64_t w_iter, u_iter;
} again_pair_t;

static void again_w_cb(uvtw_timer_t *timer) {
  again_pair_t *p = timer->data;
  if (p->w_fires++ == 0)
    p->w_iter = g_fx->iter;
  if (uvtw_timer_get_repeat(timer) != 0 && p->w_fires == 2)
    uvtw_timer_stop(timer);
}

static void again_u_cb(uv_timer_t *handle) {
  again_pair_t *p = handle->data;
  if (p->u_fires++ == 0)
    p->u_iter = g_fx->iter;
  if (uv_timer_get_repeat(handle) != 0 && p->u_fires == 2)
    uv_timer_stop(handle);
}

static void test_again_twin(void) {
  const char *T = "again_twin";
  enum { ONE_SHOT, REPEATING, STOPPED, PAIRS };
  again_pair_t p[PAIRS];
  fx_t f;
  if (!fx_open(&f, T, NULL))
    return;
  memset(p, 0, sizeof p);
  for (int i = 0; i < PAIRS; i++) {
    uvtw_timer_init(f.wheel, &p[i].w);
    uv_timer_init(&f.loop, &p[i].u);
    p[i].w.data = p[i].u.data = &p[i];
  }
  uvtw_timer_start(&p[ONE_SHOT].w, again_w_cb, 20, 0);
  uv_timer_start(&p[ONE_SHOT].u, again_u_cb, 20, 0);
  uvtw_timer_start(&p[REPEATING].w, again_w_cb, 500, 10);
  uv_timer_start(&p[REPEATING].u, again_u_cb, 500, 10);
  uvtw_timer_start(&p[STOPPED].w, again_w_cb, 10, 0);
  uv_timer_start(&p[STOPPED].u, again_u_cb, 10, 0);
  uvtw_timer_stop(&p[STOPPED].w);
  uv_timer_stop(&p[STOPPED].u);

  for (int i = 0; i < PAIRS; i++) {
    int rw = uvtw_timer_again(&p[i].w), ru = uv_timer_again(&p[i].u);
    EXPECT_I64(rw, ru, "%s: pair %d: again returns what uv_timer_again returns", T, i);
    EXPECT_U64(!!uvtw_timer_is_active(&p[i].w), !!uv_is_active((uv_handle_t *)&p[i].u),
               "%s: pair %d: active after again exactly when the uv_timer_t is", T, i);
    if (uv_is_active((uv_handle_t *)&p[i].u)) /* libuv keeps a stopped timer's due time */
      EXPECT_U64(uvtw_timer_get_due_in(&p[i].w), uv_timer_get_due_in(&p[i].u),
                 "%s: pair %d: due in as long as the uv_timer_t", T, i);
  }
  EXPECT_U64(!!uvtw_timer_is_active(&p[ONE_SHOT].w), 1,
             "%s: again with repeat 0 leaves an active one-shot timer active", T);
  uv_run(&f.loop, UV_RUN_DEFAULT);
  for (int i = 0; i < PAIRS; i++) {
    EXPECT_U64(p[i].w_fires, p[i].u_fires, "%s: pair %d: as many callbacks as the uv_timer_t", T,
               i);
    EXPECT_U64(p[i].w_iter, p[i].u_iter,
               "%s: pair %d: the first callback in the uv_timer_t's loop iteration", T, i);
  }
  EXPECT_U64(p[ONE_SHOT].w_fires, 1, "%s: the one-shot timer given again fired once", T);
  EXPECT_ERR(uvtw_timer_again(&p[ONE_SHOT].w), 0, "%s: again on a one-shot that ran returns 0", T);
  EXPECT_U64(!!uvtw_timer_is_active(&p[ONE_SHOT].w), 0, "%s: ...and leaves it inactive", T);
  for (int i = 0; i < PAIRS; i++)
    fx_close_handle(&p[i].u);
  fx_close(&f);
}

/* ---- A loop run on another thread than the one that made it --------------- */

/* A task's argument that another thread waits on. */
typedef struct remote_probe_s {
  atomic_int calls;
  atomic_int status;
  atomic_int on_loop_thread;
  const uv_thread_t *loop_thread;
} remote_probe_t;

static void remote_probe_cb(void *arg, int status) {
  remote_probe_t *p = arg;
  uv_thread_t self = uv_thread_self();
  atomic_store(&p->status, status);
  atomic_store(&p->on_loop_thread, uv_thread_equal(&self, p->loop_thread));
  atomic_fetch_add(&p->calls, 1);
}

static void wait_calls(remote_probe_t *p, int calls, uint64_t ms) {
  uint64_t end = uv_hrtime() + ms * NS_PER_MS;
  while (atomic_load(&p->calls) < calls && uv_hrtime() < end)
    fx_sleep_ms(1);
}

typedef struct other_s {
  fx_t f;
  uv_async_t stop; /* referenced: keeps the loop running until sent */
  uv_thread_t loop_thread;
  atomic_int running; /* the loop thread is inside uv_run */
  remote_probe_t now_probe, held_probe, cancelled_probe;
  int closes;
} other_t;

static void other_stop_cb(uv_async_t *handle) {
  other_t *o = handle->data;
  uv_close((uv_handle_t *)&o->stop, NULL);
  uvtw_wheel_close(o->f.wheel, count_close_cb, &o->closes);
}

static void other_loop_thread(void *arg) {
  other_t *o = arg;
  atomic_store(&o->running, 1);
  uv_run(&o->f.loop, UV_RUN_DEFAULT);
}

static void test_loop_on_other_thread(void) {
  const char *T = "loop_on_other_thread";
  other_t *o = fx_xcalloc(1, sizeof *o);
  uvtw_ticket_t *held = NULL, *cancelled = NULL;
  if (!fx_open(&o->f, T, NULL)) {
    free(o);
    return;
  }
  uv_async_init(&o->f.loop, &o->stop, other_stop_cb);
  o->stop.data = o;
  o->now_probe.loop_thread = o->held_probe.loop_thread = o->cancelled_probe.loop_thread =
      &o->loop_thread;
  uv_thread_create(&o->loop_thread, other_loop_thread, o);
  while (!atomic_load(&o->running))
    fx_sleep_ms(1);

  /* This thread made the wheel; the loop runs on the other. */
  EXPECT_ERR(uvtw_schedule(o->f.wheel, 0, remote_probe_cb, &o->now_probe, NULL), 0,
             "%s: a 0 ms task from the making thread is accepted", T);
  EXPECT_ERR(uvtw_schedule(o->f.wheel, 5, remote_probe_cb, &o->held_probe, &held), 0,
             "%s: a 5 ms task with a ticket too", T);
  EXPECT_ERR(uvtw_schedule(o->f.wheel, 10000, remote_probe_cb, &o->cancelled_probe, &cancelled), 0,
             "%s: and a 10 s task", T);
  wait_calls(&o->now_probe, 1, 1000);
  wait_calls(&o->held_probe, 1, 1000);
  EXPECT_U64(atomic_load(&o->now_probe.calls), 1, "%s: the 0 ms task ran within 1 s", T);
  EXPECT_U64(atomic_load(&o->held_probe.calls), 1, "%s: the 5 ms task ran within 1 s", T);
  tap_ok(atomic_load(&o->now_probe.on_loop_thread) && atomic_load(&o->held_probe.on_loop_thread) &&
             atomic_load(&o->now_probe.status) == 0,
         "%s: ...on the loop's thread, with status 0", T);
  EXPECT_ERR(uvtw_ticket_cancel(held), UV_EALREADY,
             "%s: cancelling the task that ran is UV_EALREADY", T);
  EXPECT_ERR(uvtw_ticket_cancel(cancelled), 0, "%s: cancelling the 10 s task wins", T);
  uvtw_ticket_release(held);
  uvtw_ticket_release(cancelled);

  uv_async_send(&o->stop);
  uv_thread_join(&o->loop_thread);
  EXPECT_U64(o->closes, 1, "%s: the loop thread closed the wheel; its callback ran once", T);
  EXPECT_U64(atomic_load(&o->cancelled_probe.calls), 0,
             "%s: the cancelled task never ran, even at close", T);
  o->f.wheel = NULL;
  fx_close(&o->f);
  free(o);
}

/* ---- Tasks scheduled before the loop first runs --------------------------- */

typedef struct early_s {
  fx_t f;
  task_probe_t probe;
  uint64_t run_ns; /* how long uv_run(DEFAULT) took */
  int run_rc;
} early_t;

static void early_run_thread(void *arg) {
  early_t *e = arg;
  uint64_t t0 = uv_hrtime();
  e->run_rc = uv_run(&e->f.loop, UV_RUN_DEFAULT);
  e->run_ns = uv_hrtime() - t0;
}

static void before_first_run(bool other_thread, const char *T) {
  early_t *e = fx_xcalloc(1, sizeof *e);
  if (!fx_open(&e->f, T, NULL)) {
    free(e);
    return;
  }
  uint64_t t0 = uv_hrtime();
  EXPECT_ERR(uvtw_schedule(e->f.wheel, 30, task_probe_cb, &e->probe, NULL), 0,
             "%s: a 30 ms task scheduled before the loop ever ran", T);
  if (other_thread) {
    uv_thread_t thread;
    uv_thread_create(&thread, early_run_thread, e);
    uv_thread_join(&thread);
  } else {
    early_run_thread(e);
  }
  EXPECT_U64(e->probe.calls, 1, "%s: uv_run(DEFAULT) returned only after the task ran", T);
  EXPECT_U64(e->probe.status, 0, "%s: ...with status 0", T);
  if (!tap_ok(e->probe.ran_ns - t0 >= 29 * NS_PER_MS, "%s: ...not early", T))
    tap_diag("  it ran %.3f ms after the call", (double)(e->probe.ran_ns - t0) / 1e6);
  if (!other_thread)
    EXPECT_U64(e->probe.wrong_thread, 0, "%s: ...on the loop's thread", T);

  /* An idle wheel: uv_run(DEFAULT) returns at once. */
  uint64_t t1 = uv_hrtime();
  EXPECT_I64(uv_run(&e->f.loop, UV_RUN_DEFAULT), 0, "%s: with nothing pending uv_run returns 0", T);
  tap_ok(uv_hrtime() - t1 < 500 * NS_PER_MS, "%s: ...at once", T);
  EXPECT_U64(!!uv_loop_alive(&e->f.loop), 0,
             "%s: once the loop has run, an idle wheel does not keep it alive", T);
  fx_close(&e->f);
  free(e);
}

static void test_before_first_run(void) {
  before_first_run(false, "before_first_run, same thread");
  before_first_run(true, "before_first_run, loop run on another thread");

  /* A wheel made and left idle: uv_run(DEFAULT) returns without waiting. */
  fx_t f;
  if (!fx_open(&f, "before_first_run, idle", NULL))
    return;
  uint64_t t0 = uv_hrtime();
  EXPECT_I64(uv_run(&f.loop, UV_RUN_DEFAULT), 0,
             "before_first_run, idle: uv_run(DEFAULT) on an idle new wheel returns 0");
  tap_ok(uv_hrtime() - t0 < 500 * NS_PER_MS, "before_first_run, idle: ...at once");
  fx_close(&f);
}

/* ---- The ticket, read from the callback's argument ------------------------ */

enum { TICKET_TASKS = 2000 };

typedef struct ticket_ctx_s {
  uvtw_ticket_t *ticket; /* written by uvtw_schedule */
  uvtw_ticket_t *seen;   /* what the callback read there */
} ticket_ctx_t;

static void ticket_ctx_cb(void *arg, int status) {
  ticket_ctx_t *c = arg;
  (void)status;
  c->seen = c->ticket;
}

typedef struct ticket_run_s {
  uvtw_wheel_t *wheel;
  ticket_ctx_t ctx[TICKET_TASKS];
  int scheduled;
  atomic_int done;
} ticket_run_t;

static void ticket_producer(void *arg) {
  ticket_run_t *r = arg;
  for (int i = 0; i < TICKET_TASKS; i++) {
    r->ctx[i].ticket = NULL;
    r->scheduled += uvtw_schedule(r->wheel, 0, ticket_ctx_cb, &r->ctx[i], &r->ctx[i].ticket) == 0;
  }
  atomic_store(&r->done, 1);
}

static void test_ticket_in_arg(void) {
  const char *T = "ticket_in_arg";
  fx_t f;
  ticket_run_t *r = fx_xcalloc(1, sizeof *r);
  if (!fx_open(&f, T, NULL)) {
    free(r);
    return;
  }
  fx_iteration(&f);
  r->wheel = f.wheel;

  /* On the loop thread. */
  ticket_ctx_t local = {NULL, NULL};
  EXPECT_ERR(uvtw_schedule(f.wheel, 0, ticket_ctx_cb, &local, &local.ticket), 0,
             "%s: a 0 ms task on the loop thread", T);
  fx_iteration(&f);
  fx_iteration(&f);
  tap_ok(local.seen != NULL && local.seen == local.ticket,
         "%s: its callback read the ticket from its argument", T);
  uvtw_ticket_release(local.ticket);

  /* From another thread while the loop runs and drains at once. */
  uv_thread_t thread;
  uv_thread_create(&thread, ticket_producer, r);
  uint64_t end = uv_hrtime() + 5000 * NS_PER_MS;
  int ran = 0;
  while (uv_hrtime() < end && ran < TICKET_TASKS) {
    fx_iteration(&f);
    ran = 0;
    for (int i = 0; i < TICKET_TASKS && atomic_load(&r->done); i++)
      ran += r->ctx[i].seen != NULL || r->ctx[i].ticket == NULL;
  }
  uv_thread_join(&thread);
  for (int i = 0; i < 5; i++)
    fx_iteration(&f);
  EXPECT_U64(r->scheduled, TICKET_TASKS, "%s: every schedule from the other thread succeeded", T);
  int ok = 0;
  for (int i = 0; i < TICKET_TASKS; i++) {
    ok += r->ctx[i].seen != NULL && r->ctx[i].seen == r->ctx[i].ticket;
    uvtw_ticket_release(r->ctx[i].ticket);
  }
  EXPECT_U64(ok, TICKET_TASKS,
             "%s: every callback read its own ticket from its argument, written before it ran", T);
  fx_close(&f);
  free(r);
}

/* ---- max_pending while the loop is blocked -------------------------------- */

enum { HELD_LIMIT = 8 };

typedef struct held_s {
  uvtw_wheel_t *wheel;
  task_probe_t probes[HELD_LIMIT + 1];
  uvtw_ticket_t *tickets[HELD_LIMIT];
  int scheduled, cancelled, full_while_blocked;
  int scheduled_after;
  uv_timer_t blocker;
} held_t;

static void held_fill_and_cancel(void *arg) {
  held_t *h = arg;
  for (int i = 0; i < HELD_LIMIT; i++)
    h->scheduled +=
        uvtw_schedule(h->wheel, 10000, task_probe_cb, &h->probes[i], &h->tickets[i]) == 0;
  for (int i = 0; i < HELD_LIMIT; i++) {
    h->cancelled += uvtw_ticket_cancel(h->tickets[i]) == 0;
    uvtw_ticket_release(h->tickets[i]);
  }
  h->full_while_blocked =
      uvtw_schedule(h->wheel, 0, task_probe_cb, &h->probes[HELD_LIMIT], NULL) == UV_ENOBUFS;
}

static void held_refill(void *arg) {
  held_t *h = arg;
  for (int i = 0; i < HELD_LIMIT; i++) {
    h->tickets[i] = NULL;
    h->scheduled_after +=
        uvtw_schedule(h->wheel, 10000, task_probe_cb, &h->probes[i], &h->tickets[i]) == 0;
  }
}

/* The loop is blocked inside this callback while another thread fills the
 * wheel's queue and cancels everything. */
static void held_blocker_cb(uv_timer_t *handle) {
  held_t *h = handle->data;
  uv_thread_t thread;
  uv_thread_create(&thread, held_fill_and_cancel, h);
  uv_thread_join(&thread);
}

static void test_max_pending_blocked(void) {
  const char *T = "max_pending_blocked";
  uvtw_options_t opts = {.max_pending = HELD_LIMIT};
  fx_t f;
  held_t *h = fx_xcalloc(1, sizeof *h);
  if (!fx_open(&f, T, &opts)) {
    free(h);
    return;
  }
  fx_iteration(&f);
  h->wheel = f.wheel;
  uv_timer_init(&f.loop, &h->blocker);
  h->blocker.data = h;
  uv_timer_start(&h->blocker, held_blocker_cb, 1, 0);
  uv_run(&f.loop, UV_RUN_ONCE); /* runs the blocker: the loop is busy meanwhile */
  while (h->scheduled == 0 && !f.watchdog_fired)
    uv_run(&f.loop, UV_RUN_ONCE);
  EXPECT_U64(h->scheduled, HELD_LIMIT, "%s: %d tasks fill max_pending while the loop is blocked", T,
             HELD_LIMIT);
  EXPECT_U64(h->cancelled, HELD_LIMIT, "%s: every cancel wins", T);
  EXPECT_U64(h->full_while_blocked, 1,
             "%s: the cancelled tasks keep their places while the loop has not let go of them "
             "(UV_ENOBUFS)",
             T);

  uint64_t t0 = uv_hrtime();
  uvtw_stats_t stats = fx_stats(f.wheel);
  uint64_t batches = stats.remote_batches;
  while (fx_stats(f.wheel).remote_batches == batches && uv_hrtime() - t0 < 2000 * NS_PER_MS)
    fx_iteration(&f);
  uv_thread_t thread;
  uv_thread_create(&thread, held_refill, h);
  uv_thread_join(&thread);
  EXPECT_U64(h->scheduled_after, HELD_LIMIT,
             "%s: once the loop drained the queue, every place is free again", T);
  tap_ok(uv_hrtime() - t0 < 5000 * NS_PER_MS, "%s: ...long before the tasks' 10 s deadline", T);
  int ran = 0;
  for (int i = 0; i <= HELD_LIMIT; i++)
    ran += h->probes[i].calls;
  EXPECT_U64(ran, 0, "%s: no cancelled or refused task ran", T);
  for (int i = 0; i < HELD_LIMIT; i++) {
    uvtw_ticket_cancel(h->tickets[i]);
    uvtw_ticket_release(h->tickets[i]);
  }
  fx_close_handle(&h->blocker);
  fx_close(&f);
  free(h);
}

/* A periodic task at max_pending = 1: each run schedules the next. */
typedef struct chain_s {
  uvtw_wheel_t *wheel;
  int runs, errors;
} chain_t;

enum { CHAIN_RUNS = 20 };

static void chain_cb(void *arg, int status) {
  chain_t *c = arg;
  c->runs++;
  if (status == 0 && c->runs < CHAIN_RUNS && uvtw_schedule(c->wheel, 1, chain_cb, c, NULL) != 0)
    c->errors++;
}

static void test_max_pending_chain(void) {
  const char *T = "max_pending_chain";
  uvtw_options_t opts = {.max_pending = 1};
  fx_t f;
  chain_t c = {NULL, 0, 0};
  if (!fx_open(&f, T, &opts))
    return;
  c.wheel = f.wheel;
  EXPECT_ERR(uvtw_schedule(f.wheel, 1, chain_cb, &c, NULL), 0, "%s: the first task", T);
  uv_run(&f.loop, UV_RUN_DEFAULT);
  EXPECT_U64(c.runs, CHAIN_RUNS,
             "%s: a task that runs gives its place back before its callback, which schedules "
             "the next one",
             T);
  EXPECT_U64(c.errors, 0, "%s: no schedule from a callback got UV_ENOBUFS", T);
  fx_close(&f);
}

/* ---- Connections freed inside their own timeout callbacks ----------------- */

enum { CONNS = 64 };

typedef struct conn_s {
  uvtw_timer_t timeout;
  int *freed;
  char buffer[200]; /* what a connection holds besides its timer */
} conn_t;

static void conn_timeout_cb(uvtw_timer_t *timer) {
  conn_t *c = timer->data;
  if (uvtw_timer_get_repeat(timer) != 0)
    uvtw_timer_stop(timer); /* a repeating timer is active in its callback */
  ++*c->freed;
  free(c);
}

static void test_freed_in_callback(void) {
  const char *T = "freed_in_callback";
  fx_t f;
  int freed = 0;
  if (!fx_open(&f, T, NULL))
    return;
  for (int i = 0; i < CONNS; i++) {
    conn_t *c = fx_xcalloc(1, sizeof *c);
    c->freed = &freed;
    uvtw_timer_init(f.wheel, &c->timeout);
    c->timeout.data = c;
    /* Equal deadlines in groups, so one pass frees several neighbours;
     * every fourth repeats. */
    uvtw_timer_start(&c->timeout, conn_timeout_cb, 1 + (uint64_t)(i % 4), i % 4 == 3 ? 2 : 0);
  }
  uv_run(&f.loop, UV_RUN_DEFAULT);
  EXPECT_U64(freed, CONNS, "%s: every connection timed out once and freed itself", T);
  uvtw_stats_t stats = fx_stats(f.wheel);
  EXPECT_U64(stats.active, 0, "%s: nothing is left in the wheel", T);
  EXPECT_U64(stats.fired, CONNS, "%s: stats.fired counts each once", T);
  fx_close(&f);
}

/* ---- uv_walk shutdowns ---------------------------------------------------- */

static void test_walk_after_close(void) {
  const char *T = "walk_after_close";
  uv_loop_t loop;
  uvtw_wheel_t *wheel;
  uvtw_timer_t timer;
  uv_timer_t other;
  task_probe_t probe = {0};
  int closes = 0;
  if (!tap_ok(uv_loop_init(&loop) == 0 && uvtw_wheel_new(&loop, NULL, &wheel) == 0,
              "%s: a loop and a wheel", T))
    return;
  uvtw_timer_init(wheel, &timer);
  uvtw_timer_start(&timer, fx_noop_timer_cb, 10000, 0);
  uvtw_schedule(wheel, 10000, task_probe_cb, &probe, NULL);
  uv_timer_init(&loop, &other);
  uv_timer_start(&other, noop_uv_timer_cb, 10000, 0);
  uvtw_wheel_close(wheel, count_close_cb, &closes);
  uv_walk(&loop, close_any, NULL); /* skips the wheel's closing handles */
  uv_run(&loop, UV_RUN_DEFAULT);
  EXPECT_U64(closes, 1, "%s: the close callback ran once", T);
  EXPECT_U64(probe.calls, 1, "%s: the pending task ran once...", T);
  EXPECT_I64(probe.status, UV_ECANCELED, "%s: ...with UV_ECANCELED", T);
  EXPECT_ERR(uv_loop_close(&loop), 0, "%s: uv_loop_close returns 0", T);
  EXPECT_U64(!!uvtw_timer_is_active(&timer), 0, "%s: the timer is inactive", T);
}

static void test_walk_before_close(void) {
  const char *T = "walk_before_close";
  uv_loop_t *loop = fx_xcalloc(1, sizeof *loop);
  uvtw_wheel_t *wheel;
  uvtw_timer_t timer, idle;
  task_probe_t pending = {0}, queued = {0};
  uvtw_ticket_t *ticket = NULL;
  int closes = 0;
  if (!tap_ok(uv_loop_init(loop) == 0 && uvtw_wheel_new(loop, NULL, &wheel) == 0,
              "%s: a loop and a wheel", T)) {
    free(loop);
    return;
  }
  uvtw_timer_init(wheel, &timer);
  uvtw_timer_init(wheel, &idle);
  uvtw_timer_start(&timer, fx_noop_timer_cb, 10000, 0);
  EXPECT_ERR(uvtw_schedule(wheel, 10000, task_probe_cb, &pending, &ticket), 0,
             "%s: a 10 s task is scheduled", T);
  uv_run(loop, UV_RUN_NOWAIT); /* the loop's setup: it takes the task in */
  EXPECT_U64(fx_stats(wheel).active, 2, "%s: the timer and the task are in the wheel", T);
  EXPECT_ERR(uvtw_schedule(wheel, 10000, task_probe_cb, &queued, NULL), 0,
             "%s: another 10 s task, still queued when the walk closes the handles", T);

  /* The program's shutdown: close every handle, run the loop, close it. */
  uv_walk(loop, close_any, NULL);
  uv_run(loop, UV_RUN_DEFAULT);
  EXPECT_ERR(uv_loop_close(loop), 0, "%s: uv_loop_close returns 0 (the wheel's handles closed)", T);
  memset(loop, 0xa5, sizeof *loop); /* the loop is gone: the wheel must not read it */
  free(loop);
  EXPECT_U64(pending.calls + queued.calls, 0, "%s: the tasks have not run yet", T);

  /* Then the wheel. */
  uvtw_wheel_close(wheel, count_close_cb, &closes);
  EXPECT_U64(closes, 1, "%s: uvtw_wheel_close ran its callback (inside the call: no loop)", T);
  EXPECT_U64(pending.calls, 1, "%s: the pending task in the wheel ran once...", T);
  EXPECT_I64(pending.status, UV_ECANCELED, "%s: ...with UV_ECANCELED", T);
  EXPECT_U64(queued.calls, 1, "%s: the task still queued ran once...", T);
  EXPECT_I64(queued.status, UV_ECANCELED, "%s: ...with UV_ECANCELED", T);
  EXPECT_ERR(uvtw_ticket_cancel(ticket), UV_EALREADY,
             "%s: its ticket is still safe to cancel: UV_EALREADY", T);
  uvtw_ticket_release(ticket);

  /* Timers outlive the wheel: what a connection's teardown calls is inert. */
  EXPECT_ERR(uvtw_timer_stop(&timer), 0, "%s: stop after the close callback is a no-op", T);
  EXPECT_U64(!!uvtw_timer_is_active(&timer), 0, "%s: the timer is inactive", T);
  EXPECT_U64(uvtw_timer_get_due_in(&timer), 0, "%s: ...and due in 0", T);
  EXPECT_ERR(uvtw_timer_stop(&idle), 0, "%s: stop of a timer never started: a no-op", T);

  /* The timers may be given to a new wheel. */
  uv_loop_t again;
  uvtw_wheel_t *second;
  if (tap_ok(uv_loop_init(&again) == 0 && uvtw_wheel_new(&again, NULL, &second) == 0,
             "%s: a new loop and wheel", T)) {
    uvtw_timer_init(second, &timer);
    EXPECT_ERR(uvtw_timer_start(&timer, fx_noop_timer_cb, 1, 0), 0,
               "%s: a timer of the closed wheel, initialised again, starts on the new one", T);
    uv_run(&again, UV_RUN_DEFAULT);
    EXPECT_U64(fx_stats(second).fired, 1, "%s: ...and fires", T);
    closes = 0;
    uvtw_wheel_close(second, count_close_cb, &closes);
    uv_run(&again, UV_RUN_DEFAULT);
    EXPECT_U64(closes, 1, "%s: the new wheel closes", T);
    EXPECT_ERR(uv_loop_close(&again), 0, "%s: ...and its loop", T);
  }
}

/* A wheel timer's callback shuts the program down with a uv_walk that
 * closes every handle, the wheels' among them; once uv_run has finished the
 * closes, the wheels are closed and freed, and the loop is used again (a
 * test harness reusing its loop). `peer`: the walk runs in another wheel's
 * pass, which then starts a due timer on the walked wheel. No libuv call may
 * touch a handle the walk closed: on libuv < 1.48 a restarted uv_prepare_t
 * would stay in the loop's list after its wheel is freed (ASan, Valgrind). */
static struct {
  uv_loop_t *loop;
  uvtw_wheel_t *other;
  uvtw_wheel_t *walker;
  uvtw_timer_t late;
  uv_handle_t *kept[8]; /* with a peer: the walking wheel's handles, left open */
  int nkept;
} wk;

static void keep_handle(uv_handle_t *handle, void *arg) {
  (void)arg;
  if (wk.nkept < 8)
    wk.kept[wk.nkept++] = handle;
}

static void close_unkept(uv_handle_t *handle, void *arg) {
  (void)arg;
  for (int i = 0; i < wk.nkept; i++)
    if (wk.kept[i] == handle)
      return;
  if (!uv_is_closing(handle))
    uv_close(handle, NULL);
}

/* With a peer, the walk leaves the walking wheel's own handles open, so
 * that its pass goes on and the peer's arming decides inside it. */
static void walk_cb(uvtw_timer_t *timer) {
  (void)timer;
  uv_walk(wk.loop, close_unkept, NULL);
  if (wk.other != NULL) {
    uvtw_timer_start(&wk.late, fx_noop_timer_cb, 0, 0);
    uvtw_wheel_unref(wk.walker); /* its pending timer lets the loop end */
  }
}

static void walk_in_pass(const char *T, bool peer) {
  uv_loop_t loop;
  uvtw_wheel_t *wheel, *other = NULL;
  uvtw_timer_t timer, pending;
  int closes = 0, fires = 0;
  wk.nkept = 0;
  if (!tap_ok(uv_loop_init(&loop) == 0 && uvtw_wheel_new(&loop, NULL, &wheel) == 0,
              "%s: a loop and a wheel", T))
    return;
  if (peer) {
    uv_walk(&loop, keep_handle, NULL); /* the walking wheel's handles */
    if (!tap_ok(uvtw_wheel_new(&loop, NULL, &other) == 0, "%s: a second wheel", T))
      return;
  }
  wk.loop = &loop;
  wk.other = other;
  wk.walker = wheel;
  uvtw_timer_init(wheel, &timer);
  uvtw_timer_init(wheel, &pending);
  uvtw_timer_start(&timer, walk_cb, 1, 0);
  uvtw_timer_start(&pending, fx_noop_timer_cb, 10000, 0); /* the pass arms for it */
  if (peer)
    uvtw_timer_init(other, &wk.late);
  uv_run(&loop, UV_RUN_DEFAULT);
  EXPECT_U64(fx_stats(wheel).fired, 1, "%s: the walking timer ran", T);
  if (peer) {
    uvtw_wheel_close(other, count_close_cb, &closes);
    uvtw_wheel_close(wheel, count_close_cb, &closes);
    uv_run(&loop, UV_RUN_DEFAULT); /* the walking wheel's handles close */
  } else {
    uvtw_wheel_close(wheel, count_close_cb, &closes);
  }
  EXPECT_U64(closes, peer ? 2 : 1, "%s: the close callbacks ran", T);
  /* The loop again, with a uv_timer_t of its own. */
  uv_timer_t again;
  uv_timer_init(&loop, &again);
  again.data = &fires;
  uv_timer_start(&again, count_uv_timer_cb, 2, 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  EXPECT_U64(fires, 1, "%s: a uv_timer_t started after the shutdown runs", T);
  uv_close((uv_handle_t *)&again, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  EXPECT_ERR(uv_loop_close(&loop), 0, "%s: uv_loop_close returns 0", T);
}

static void test_walk_in_callback(void) {
  walk_in_pass("walk_in_callback", false);
}

static void test_walk_in_peer_pass(void) {
  walk_in_pass("walk_in_peer_pass", true);
}

static const tap_case_t cases[] = {
    TAP_CASE(busy_uv_timer_starts), TAP_CASE(busy_two_wheels),   TAP_CASE(again_twin),
    TAP_CASE(loop_on_other_thread), TAP_CASE(before_first_run),  TAP_CASE(ticket_in_arg),
    TAP_CASE(max_pending_blocked),  TAP_CASE(max_pending_chain), TAP_CASE(freed_in_callback),
    TAP_CASE(walk_after_close),     TAP_CASE(walk_before_close), TAP_CASE(walk_in_callback),
    TAP_CASE(walk_in_peer_pass),
};

FX_MAIN(cases)
