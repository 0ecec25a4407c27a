/* The twin fuzzer: random libuv programs in which every wheel timer has a
 * uv_timer_t twin, started at the same moment with the same timeout and
 * repeat, and libuv's uv_timer_t is the oracle (docs/design.md, "The twin
 * fuzzer"). Linux only: the loop runs on a virtual clock (vclock.h), so a
 * program's busy work is a clock jump and an input replays exactly.
 *
 * The input is a program. Its first bytes choose what an iteration that
 * does not wait costs on the clock; then each step is one of: a twin
 * operation (start, stop, again, set_repeat, ref/unref, on pair i), busy
 * work with uv_update_time(), uv_stop(), the second wheel closed or made
 * anew, uv_run in a mode, or an actor armed: a uv_timer_t, a wheel timer, a
 * prepare, check or idle handle, an async handle sent, or a handle closed,
 * whose callback then does a few of those operations.
 *
 * Every fire records its loop iteration (an unreferenced prepare counts
 * them) and uv_now(). The oracle: each twin's k-th fire since its start is
 * in the same iteration as its uv_timer_t's, never before its deadline,
 * equal deadlines of one wheel in start order, and uv_run(UV_RUN_DEFAULT)
 * returns only once no referenced twin is pending, and with every
 * uv_timer_t done, every wheel timer has fired as often; uvtw__check holds
 * on both wheels between callbacks (-Dchecks). The exceptions are those
 * include/uvtw.h states, each written once below (excused()). */
#define _GNU_SOURCE /* syscall(), for the virtual clock (vclock.h) */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "fuzz.h"
#include "uvtw.h"
#include "vclock.h"
#ifdef UVTW_CHECKS
#include "../../src/core.h" /* uvtw__arming_check */
#include "../../src/life.h" /* uvtw__check */
#endif

enum { PAIRS = 8, FIRES = 8, ACTORS = 7, ACTS = 4, MAX_ITER = 300 };

typedef struct fire_s {
  uint64_t iter, now;
  bool updated; /* a timer-phase callback of this iteration called uv_update_time before */
} fire_t;

typedef struct pair_s {
  uvtw_timer_t w;
  uv_timer_t u;
  int wheel; /* 0: wheel A, 1: wheel B */
  uint64_t repeat;
  uint64_t due_w, due_u; /* the next deadline of each */
  fire_t wf[FIRES], uf[FIRES];
  unsigned nw, nu, compared; /* fires since the latest start, and compared so far */
  bool sync;                 /* both were filed from the same time: compare */
  /* How the latest start was made (the header's exceptions): */
  bool due_in_wheel_cb; /* due at once, from inside a wheel's callback */
  bool due_in_own_cb;   /* due at once, from inside its own wheel's callback */
  bool due_after_pass;  /* due at once, from a timer-phase callback after the wheel's pass */
  uint64_t seq;         /* start order of its latest filing */
  uint64_t start_iter;  /* the iteration of its latest start */
  uint64_t start_run;   /* and the uv_run it was in (a new one may begin with a timer phase) */
  bool fresh;           /* the wheel timer not started since its init (its wheel is new) */
} pair_t;

enum actor_kind { A_UTIMER, A_WTIMER, A_PREPARE, A_CHECK, A_IDLE, A_ASYNC, A_CLOSE };

typedef struct actor_s {
  uint8_t acts[ACTS][4];
  unsigned nacts;
  unsigned spin; /* idle: iterations to keep running after its acts */
  union {
    uv_handle_t h;
    uv_timer_t timer;
    uv_prepare_t prepare;
    uv_check_t check;
    uv_idle_t idle;
    uv_async_t async;
  } u;
  uvtw_timer_t w;
  uv_timer_t closing; /* A_CLOSE: made and closed to run the close callback */
  bool armed;
} actor_t;

static struct {
  uv_loop_t loop;
  uvtw_wheel_t *wheel[2];
  pair_t pairs[PAIRS];
  actor_t actors[ACTORS];
  uv_prepare_t counter;
  uint64_t iter, run_iter;
  uint64_t wakeups_at_prepare[2]; /* each wheel's stats.wakeups at the last prepare */
  uint64_t updated_iter;          /* +1: iteration in which a timer-phase callback updated */
  /* +1: the iterations of each wheel's latest two due starts from a wheel's
   * callback or after the wheel's pass (holds), and of its latest two
   * callbacks that updated: a timer held back in one iteration fires in the
   * next, after that iteration's own hold or update (see iter_noted()). */
  uint64_t held_iter[2][2];
  uint64_t wheel_updated_iter[2][2];
  int in_wheel_cb; /* a wheel's callback is running (-1: none) */
  bool in_timer_phase, stopped, guarded, ever_guarded, collects, ending;
  int made;                                        /* wheels made */
  uint64_t seq;                                    /* start order of wheel filings */
  uint64_t runs;                                   /* uv_run calls so far */
  uint64_t last_iter[2], last_due[2], last_seq[2]; /* each wheel's latest fire */
  fuzz_input_t *in;
} t;

static int trace = -1; /* FUZZ_TWIN_TRACE set: each step on stderr */

/* uvtw__check on both wheels (outside their own callbacks); `arming`: only
 * its check of the arming, O(1), where the whole would cost most of the run. */
static void check_wheels(bool arming) {
#ifdef UVTW_CHECKS
  for (int i = 0; i < 2; i++)
    if (t.wheel[i] != NULL && t.in_wheel_cb != i) {
      const char *error = arming ? uvtw__arming_check(t.wheel[i]) : uvtw__check(t.wheel[i]);
      if (error != NULL)
        fprintf(stderr, "wheel %c: %s\n", "AB"[i], error);
      FUZZ_CHECK(t.in, error == NULL, "uvtw__check holds between callbacks");
    }
#else
  (void)arming;
#endif
}

/* Notes the iteration under way (+1) as the latest of two. */
static void iter_note(uint64_t latest[2]) {
  if (latest[0] != t.iter + 1)
    latest[1] = latest[0], latest[0] = t.iter + 1;
}

/* `iter` (+1) is one of the two noted. */
static bool iter_noted(const uint64_t latest[2], uint64_t iter) {
  return latest[0] == iter || latest[1] == iter;
}

static bool pair_live(const pair_t *p) {
  return t.wheel[p->wheel] != NULL;
}

/* The exceptions include/uvtw.h states to "the same loop iteration as a
 * uv_timer_t started at the same moment with the same timeout". */
static bool excused(const pair_t *p, unsigned k, const fire_t *w, const fire_t *u) {
  /* "on libuv 1.48 and later, when a callback that runs before the wheel's
   * in the same timer phase calls uv_update_time(), wheel timers due by the
   * updated clock run in that phase, one iteration before uv_timer_ts due
   * in between" */
  if (t.collects && w->updated && w->iter + 1 == u->iter)
    return true;
  /* "one pass per loop iteration: an entry made due after the wheel's pass
   * of an iteration (a timer started with timeout 0 from inside any
   * wheel's callback, or from a uv_timer_t callback that runs after that
   * pass) runs in the next iteration's pass ... (older libuvs run such a
   * uv_timer_t in the same phase, the wheel timer in that phase or one
   * iteration later)" */
  if (k == 0 && !t.collects && p->due_in_wheel_cb && w->iter == u->iter + 1)
    return true;
  if (k == 0 && !t.collects && p->due_after_pass && w->iter == u->iter + 1)
    return true;
  /* "while a wheel holds such an entry back (libuv < 1.48), its other
   * timers that come due before the next iteration wait with it" */
  if (!t.collects && w->iter == u->iter + 1 && iter_noted(t.held_iter[p->wheel], u->iter + 1))
    return true;
  /* "a wheel's callback that calls uv_update_time() makes the wheel's
   * timers due by the updated clock run in the next iteration (libuv <
   * 1.48 runs their uv_timer_ts in the same phase)" */
  if (!t.collects && w->iter == u->iter + 1 &&
      iter_noted(t.wheel_updated_iter[p->wheel], u->iter + 1))
    return true;
  return false;
}

static void compare(pair_t *p) {
  while (p->compared < p->nw && p->compared < p->nu) {
    unsigned k = p->compared++;
    const fire_t *w = &p->wf[k % FIRES], *u = &p->uf[k % FIRES];
    if (p->sync && w->iter != u->iter && !excused(p, k, w, u)) {
      fprintf(stderr,
              "pair %d: fire %u of the wheel timer in iteration %llu (now %llu), of its "
              "uv_timer_t in %llu (now %llu); libuv %s\n",
              (int)(p - t.pairs), k, (unsigned long long)w->iter, (unsigned long long)w->now,
              (unsigned long long)u->iter, (unsigned long long)u->now, uv_version_string());
      FUZZ_CHECK(t.in, false, "a twin fires in the iteration of its uv_timer_t");
    }
    p->sync = p->sync && w->now == u->now;
  }
  if (p->nw - p->compared > FIRES / 2 || p->nu - p->compared > FIRES / 2)
    p->sync = false; /* one ran ahead: no longer compared */
}

/* When twin `who` (U, the uv_timer_t; W, the wheel's) of pair p fires. */
static fire_t fire_now(const pair_t *p, char who) {
  fire_t f = {t.iter, uv_now(&t.loop), t.updated_iter == t.iter + 1};
  if (trace)
    fprintf(stderr, "    %c%d fires iter %llu now %llu\n", who, (int)(p - t.pairs),
            (unsigned long long)f.iter, (unsigned long long)f.now);
  return f;
}

static void on_u(uv_timer_t *handle) {
  pair_t *p = handle->data;
  fire_t f = fire_now(p, 'U');
  FUZZ_CHECK(t.in, f.now >= p->due_u, "a uv_timer_t never early (the oracle itself)");
  p->due_u = f.now + p->repeat;
  p->uf[p->nu++ % FIRES] = f;
  compare(p);
}

static void on_w(uvtw_timer_t *timer) {
  pair_t *p = timer->data;
  fire_t f = fire_now(p, 'W');
  FUZZ_CHECK(t.in, f.now >= p->due_w, "a wheel timer never runs before its deadline");
  int i = p->wheel, outer = t.in_wheel_cb;
  if (t.last_iter[i] == t.iter && t.last_due[i] == p->due_w)
    FUZZ_CHECK(t.in, t.last_seq[i] < p->seq, "equal deadlines run in start order");
  t.last_iter[i] = t.iter, t.last_due[i] = p->due_w, t.last_seq[i] = p->seq;
  if (p->repeat != 0)
    p->seq = t.seq++; /* filed again before the callback */
  /* "one pass per loop iteration: ... a timer started with timeout 0 from
   * inside its wheel's callback ... runs in the next iteration's pass" */
  FUZZ_CHECK(t.in,
             p->nw != 0 || !p->due_in_own_cb || f.iter > p->start_iter || t.runs != p->start_run,
             "one pass per loop iteration: a start due from a wheel's callback runs in the next");
  p->due_w = f.now + p->repeat;
  p->wf[p->nw++ % FIRES] = f;
  t.in_wheel_cb = i;
  compare(p);
  t.in_wheel_cb = outer;
}

/* ---- the operations, at top level and inside callbacks ------------------- */

static const uint64_t timeouts[8] = {0, 1, 2, 5, 10, 20, 30, 50};
static const uint64_t repeats[8] = {0, 0, 0, 0, 1, 3, 10, 20};

/* A start of both twins at one moment; how it is made decides the
 * exceptions (excused()). */
static void twin_start(pair_t *p, uint64_t timeout, uint64_t repeat) {
  int w = p->wheel;
  bool due = timeout == 0;
  FUZZ_CHECK(t.in, uvtw_timer_start(&p->w, on_w, timeout, repeat) == 0, "a start returns 0");
  uv_timer_start(&p->u, on_u, timeout, repeat);
  uint64_t wakeups = 0;
  if (t.wheel[w] != NULL) {
    uvtw_stats_t st;
    uvtw_wheel_stats(t.wheel[w], &st);
    wakeups = st.wakeups;
  }
  p->repeat = repeat;
  p->fresh = false;
  p->due_w = p->due_u = uv_now(&t.loop) + timeout;
  p->nw = p->nu = p->compared = 0;
  p->sync = true;
  p->seq = t.seq++;
  p->start_iter = t.iter;
  p->start_run = t.runs;
  p->due_in_wheel_cb = due && t.in_wheel_cb >= 0;
  p->due_in_own_cb = due && t.in_wheel_cb == w;
  p->due_after_pass = due && t.in_timer_phase && wakeups != t.wakeups_at_prepare[w];
  if (p->due_in_wheel_cb || p->due_after_pass)
    iter_note(t.held_iter[w]);
}

static void twin_stop(pair_t *p) {
  if (p->nw != p->nu)
    p->sync = false; /* stopped inside an exception's lag: the counts stay apart */
  uvtw_timer_stop(&p->w);
  uv_timer_stop(&p->u);
}

static void wheel_closed(uvtw_wheel_t *w, void *arg) {
  (void)w;
  (*(int *)arg)++;
}

static int closes;

/* Wheel B closed (its twins stopped with it) or made anew. */
static void wheel_b(void) {
  if (t.wheel[1] != NULL) {
    if (t.in_wheel_cb == 1)
      return;
    for (int i = 0; i < PAIRS; i++)
      if (t.pairs[i].wheel == 1)
        twin_stop(&t.pairs[i]); /* the close stops the wheel timer too */
    uvtw_wheel_close(t.wheel[1], wheel_closed, &closes);
    t.wheel[1] = NULL;
    return;
  }
  FUZZ_CHECK(t.in, uvtw_wheel_new(&t.loop, NULL, &t.wheel[1]) == 0, "a second wheel is made");
  t.made++;
  for (int i = 0; i < PAIRS; i++)
    if (t.pairs[i].wheel == 1) {
      uvtw_timer_init(t.wheel[1], &t.pairs[i].w);
      uv_ref((uv_handle_t *)&t.pairs[i].u); /* as the new wheel timer is */
      t.pairs[i].w.data = &t.pairs[i];
      t.pairs[i].fresh = true;
    }
  t.wakeups_at_prepare[1] = 0;
}

static void busy(uint64_t ms) {
  vclock_ns += ms * 1000000u;
  uv_update_time(&t.loop);
  if (t.in_timer_phase)
    t.updated_iter = t.iter + 1;
  if (t.in_wheel_cb >= 0)
    iter_note(t.wheel_updated_iter[t.in_wheel_cb]);
}

/* One operation, from its 4 bytes. */
static void operate(const uint8_t op[4]) {
  pair_t *p = &t.pairs[op[1] % PAIRS];
  bool live = pair_live(p);
  if (trace)
    fprintf(stderr, "  iter %llu now %llu%s: op %u pair %d %u %u\n", (unsigned long long)t.iter,
            (unsigned long long)uv_now(&t.loop), t.in_timer_phase ? " (timer phase)" : "",
            op[0] % 10, op[1] % PAIRS, op[2], op[3]);
  switch (op[0] % 10) {
  case 0:
  case 1:
    if (live)
      twin_start(p, timeouts[op[2] % 8], repeats[op[3] % 8]);
    break;
  case 2:
    if (live)
      twin_stop(p);
    break;
  case 3:
    if (live && !p->fresh) {
      int a = uvtw_timer_again(&p->w), b = uv_timer_again(&p->u);
      FUZZ_CHECK(t.in, a == b, "uvtw_timer_again returns what uv_timer_again does");
      if (a == 0 && p->repeat != 0 && uv_is_active((uv_handle_t *)&p->u)) {
        p->due_w = p->due_u = uv_now(&t.loop) + p->repeat;
        p->nw = p->nu = p->compared = 0;
        p->sync = true;
        p->seq = t.seq++;
        p->due_in_wheel_cb = p->due_in_own_cb = p->due_after_pass = false;
      }
    }
    break;
  case 4:
    if (live) {
      uint64_t r = repeats[op[2] % 8];
      if (p->nw != p->nu)
        p->sync = false; /* one of them is filed again from the old repeat, the other not */
      uvtw_timer_set_repeat(&p->w, r);
      uv_timer_set_repeat(&p->u, r);
      p->repeat = r;
    }
    break;
  case 5:
    if (live) {
      if (op[2] & 1) {
        uvtw_timer_unref(&p->w);
        uv_unref((uv_handle_t *)&p->u);
      } else {
        uvtw_timer_ref(&p->w);
        uv_ref((uv_handle_t *)&p->u);
      }
    }
    break;
  case 6:
  case 7:
    busy(timeouts[op[2] % 8]);
    break;
  case 8:
    uv_stop(&t.loop);
    t.stopped = true;
    break;
  default:
    wheel_b();
    break;
  }
}

static void act(actor_t *a) {
  for (unsigned i = 0; i < a->nacts && !t.ending; i++)
    operate(a->acts[i]);
  a->nacts = 0;
  if (!t.ending)
    check_wheels(true);
}

static void on_actor_timer(uv_timer_t *h) {
  t.in_timer_phase = true;
  act(h->data);
  t.in_timer_phase = false;
}

static void on_actor_wheel(uvtw_timer_t *w) {
  actor_t *a = w->data;
  int outer = t.in_wheel_cb;
  t.in_wheel_cb = 0;
  t.in_timer_phase = true;
  act(a);
  t.in_timer_phase = false;
  t.in_wheel_cb = outer;
}

static void on_actor_prepare(uv_prepare_t *h) {
  act(h->data);
  uv_prepare_stop(h);
}

static void on_actor_check(uv_check_t *h) {
  act(h->data);
  uv_check_stop(h);
}

static void on_actor_idle(uv_idle_t *h) {
  actor_t *a = h->data;
  act(a);
  if (a->spin-- == 0)
    uv_idle_stop(h);
}

static void on_actor_async(uv_async_t *h) {
  act(h->data);
}

static void on_actor_closed(uv_handle_t *h) {
  actor_t *a = h->data;
  act(a);
  a->armed = false;
}

/* Arms actor `kind` with the operations that follow in the input. */
static void arm(fuzz_input_t *in, unsigned kind, uint64_t timeout) {
  actor_t *a = &t.actors[kind];
  if (trace)
    fprintf(stderr, "arm actor %u timeout %llu\n", kind, (unsigned long long)timeout);
  if (kind == A_CLOSE && a->armed)
    return;
  a->nacts = 1 + fuzz_byte(in) % ACTS;
  for (unsigned i = 0; i < a->nacts; i++)
    for (unsigned j = 0; j < 4; j++)
      a->acts[i][j] = fuzz_byte(in);
  a->spin = fuzz_byte(in) % 64;
  switch (kind) {
  case A_UTIMER:
    uv_timer_start(&a->u.timer, on_actor_timer, timeout, 0);
    break;
  case A_WTIMER:
    uvtw_timer_start(&a->w, on_actor_wheel, timeout, 0);
    break;
  case A_PREPARE:
    uv_prepare_start(&a->u.prepare, on_actor_prepare);
    break;
  case A_CHECK:
    uv_check_start(&a->u.check, on_actor_check);
    break;
  case A_IDLE:
    uv_idle_start(&a->u.idle, on_actor_idle);
    break;
  case A_ASYNC:
    uv_async_send(&a->u.async);
    break;
  default:
    uv_timer_init(&t.loop, &a->closing);
    a->closing.data = a;
    uv_close((uv_handle_t *)&a->closing, on_actor_closed);
    a->armed = true;
    break;
  }
}

/* ---- the loop ---------------------------------------------------------------- */

/* Once per iteration: the count, each wheel's wakeups so far, and the
 * guard: a run that goes on for MAX_ITER iterations stops every twin and
 * the loop (repeating timers run forever). */
static void on_counter(uv_prepare_t *h) {
  (void)h;
  t.iter++;
  for (int i = 0; i < 2; i++)
    if (t.wheel[i] != NULL) {
      uvtw_stats_t st;
      uvtw_wheel_stats(t.wheel[i], &st);
      t.wakeups_at_prepare[i] = st.wakeups;
    }
  /* Every handle of the program that keeps the loop alive is a timer, or
   * runs at once (the wheel's uv_async_t until the loop's first iteration). */
  FUZZ_CHECK(t.in, vclock_forever == 0, "the loop never waits forever");
  if (++t.run_iter > MAX_ITER && !t.guarded) {
    t.guarded = t.ever_guarded = true;
    for (int i = 0; i < PAIRS; i++)
      if (pair_live(&t.pairs[i]))
        twin_stop(&t.pairs[i]);
    uv_idle_stop(&t.actors[A_IDLE].u.idle);
    uv_timer_stop(&t.actors[A_UTIMER].u.timer);
    uvtw_timer_stop(&t.actors[A_WTIMER].w);
    uv_stop(&t.loop);
  }
}

/* Returns false if uv_stop() ended it. */
static bool run(uv_run_mode mode) {
  if (trace)
    fprintf(stderr, "uv_run(%d) at iter %llu now %llu\n", (int)mode, (unsigned long long)t.iter,
            (unsigned long long)uv_now(&t.loop));
  t.run_iter = 0;
  t.guarded = false;
  t.runs++;
  uv_run(&t.loop, mode);
  check_wheels(false);
  bool stopped = t.stopped; /* uv_stop() before or in this run */
  t.stopped = false;
  if (mode != UV_RUN_DEFAULT || stopped || t.guarded)
    return !stopped;
  /* UV_RUN_DEFAULT returns once nothing keeps the loop alive: no
   * referenced wheel timer is pending then, unless a referenced uv_timer_t
   * is too (libuv 1.45 to 1.47 run a timer phase before they look). */
  bool w_alive = false, u_alive = false;
  for (int i = 0; i < PAIRS; i++) {
    pair_t *p = &t.pairs[i];
    /* (not one that lags its uv_timer_t by an exception: compare() judges it) */
    w_alive |=
        pair_live(p) && uvtw_timer_is_active(&p->w) && uvtw_timer_has_ref(&p->w) && p->nw >= p->nu;
    u_alive |= uv_is_active((uv_handle_t *)&p->u) && uv_has_ref((uv_handle_t *)&p->u);
  }
  FUZZ_CHECK(t.in, !w_alive || u_alive,
             "uv_run(UV_RUN_DEFAULT) returns only once no referenced wheel timer is pending");
  return true;
}

static void close_cb_free(uv_handle_t *h) {
  (void)h;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_input_t in = {data, size, 0};
  memset(&t, 0, sizeof t);
  t.in = &in;
  t.in_wheel_cb = -1;
  if (trace < 0)
    trace = getenv("FUZZ_TWIN_TRACE") != NULL;
  t.collects = uv_version() >= (1u << 16 | 48u << 8);
  vclock_ns = (uint64_t)1000000000000u;
  vclock_idle_ns = (uint64_t)(fuzz_byte(&in) % 4) * 500000u; /* 0 to 1.5 ms */
  vclock_forever = 0;
  vclock_on = 1;
  closes = 0;
  FUZZ_CHECK(&in, uv_loop_init(&t.loop) == 0, "the loop is made");
  uv_prepare_init(&t.loop, &t.counter);
  uv_prepare_start(&t.counter, on_counter);
  uv_unref((uv_handle_t *)&t.counter);
  FUZZ_CHECK(&in, uvtw_wheel_new(&t.loop, NULL, &t.wheel[0]) == 0, "a wheel is made");
  t.made = 1;
  for (int i = 0; i < PAIRS; i++) {
    pair_t *p = &t.pairs[i];
    p->wheel = i >= PAIRS - 2; /* the last two on wheel B */
    uv_timer_init(&t.loop, &p->u);
    p->u.data = p;
  }
  for (int i = 0; i < PAIRS - 2; i++) {
    uvtw_timer_init(t.wheel[0], &t.pairs[i].w);
    t.pairs[i].w.data = &t.pairs[i];
  }
  for (unsigned k = 0; k < ACTORS; k++) {
    actor_t *a = &t.actors[k];
    if (k == A_UTIMER)
      uv_timer_init(&t.loop, &a->u.timer);
    else if (k == A_PREPARE)
      uv_prepare_init(&t.loop, &a->u.prepare);
    else if (k == A_CHECK)
      uv_check_init(&t.loop, &a->u.check);
    else if (k == A_IDLE)
      uv_idle_init(&t.loop, &a->u.idle);
    else if (k == A_ASYNC)
      uv_async_init(&t.loop, &a->u.async, on_actor_async);
    if (k != A_WTIMER && k != A_CLOSE) {
      a->u.h.data = a;
      if (k != A_UTIMER)
        uv_unref(&a->u.h);
    }
    a->w.data = a;
  }
  uvtw_timer_init(t.wheel[0], &t.actors[A_WTIMER].w);
  uvtw_timer_unref(&t.actors[A_WTIMER].w);

  unsigned steps = 0;
  while (fuzz_more(&in) && steps++ < 64) {
    uint8_t op[4];
    for (unsigned j = 0; j < 4; j++)
      op[j] = fuzz_byte(&in);
    if (op[0] < 160) {
      operate(op);
      check_wheels(true);
    } else if (op[0] < 208) {
      static const uv_run_mode modes[3] = {UV_RUN_DEFAULT, UV_RUN_ONCE, UV_RUN_NOWAIT};
      run(modes[op[1] % 3]);
    } else {
      arm(&in, op[1] % ACTORS, timeouts[op[2] % 8]);
    }
  }
  /* The end: every twin runs out (the guard stops repeating ones), then
   * each fired as often as its uv_timer_t. */
  for (int runs = 0; !run(UV_RUN_DEFAULT) && runs < 8; runs++)
    t.ever_guarded |= runs == 7; /* stopped again and again */
  for (int i = 0; i < PAIRS; i++) {
    pair_t *p = &t.pairs[i];
    /* an unreferenced one may be left pending where its twin ran (an exception) */
    if (!t.ever_guarded && p->sync && pair_live(p) && !uvtw_timer_is_active(&p->w) &&
        !uv_is_active((uv_handle_t *)&p->u))
      FUZZ_CHECK(&in, p->nw == p->nu, "a twin fires as often as its uv_timer_t");
    uv_timer_stop(&p->u);
    uv_close((uv_handle_t *)&p->u, close_cb_free);
  }
  t.ending = true; /* callbacks to come do nothing */
  for (int i = 0; i < 2; i++)
    if (t.wheel[i] != NULL) {
      uvtw_wheel_close(t.wheel[i], wheel_closed, &closes);
      t.wheel[i] = NULL;
    }
  for (unsigned k = 0; k < ACTORS; k++)
    if (k != A_WTIMER && k != A_CLOSE)
      uv_close(&t.actors[k].u.h, close_cb_free);
  uv_close((uv_handle_t *)&t.counter, close_cb_free);
  uv_run(&t.loop, UV_RUN_DEFAULT);
  FUZZ_CHECK(&in, uv_loop_close(&t.loop) == 0, "every handle closed");
  FUZZ_CHECK(&in, closes == t.made, "every wheel's close callback ran once");
  vclock_on = 0;
  return 0;
}
