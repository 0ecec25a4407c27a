/* The lateness histogram ("Lateness" in include/uvtw.h): the buckets'
 * bounds, which callbacks count and in which bucket, quantiles against a
 * computation from the array, windows between two copies of the stats,
 * every error, the manual clock, and both calls made from another thread.
 *
 * Lateness is made on purpose by a wheel callback that blocks the loop
 * (uv_sleep): what it starts or schedules before sleeping falls due while
 * it sleeps and runs in a later iteration, when the loop's clock has moved.
 * Every callback of those cases takes a copy of the stats and checks that
 * exactly one bucket grew by one since the callback before, and that the
 * bucket holds the lateness the callback knows (exactly for timers; for
 * tasks, whose deadline the library takes with uv_hrtime() inside
 * uvtw_schedule, the interval between readings before and after the call).
 *
 * One case is white-box: the bucket the fire path computes (src/late.h)
 * against the bounds uvtw_late_bucket_max publishes, for every value up to
 * past the open bucket and around every power of two. */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "fixture.h"
#include "late.h"

enum { LAST = UVTW_LATE_BUCKETS - 1, BLOCK_MS = 60 };

/* ---- Helpers ----------------------------------------------------------------- */

/* The lowest value of bucket i, from the public bounds. */
static uint64_t bucket_min(unsigned i) {
  return i == 0 ? 0 : uvtw_late_bucket_max(i - 1) + 1;
}

/* The bucket that holds `ms`, from the public bounds alone. */
static unsigned bucket_of(uint64_t ms) {
  unsigned i = 0;
  while (uvtw_late_bucket_max(i) < ms)
    i++;
  return i;
}

/* What a quantile in bucket i reports: its upper bound, or the open
 * bucket's lowest value. */
static int64_t reported(unsigned i) {
  return i == LAST ? (int64_t)bucket_min(LAST) : (int64_t)uvtw_late_bucket_max(i);
}

/* The rank max(1, ceil(q * n)) as for the decimal q a user wrote: a q * n
 * within 1e-9 * n of an integer is that integer (0.56 * 100 is
 * 56.000000000000007 in double, rank 56). Found the long way: the nearest
 * integer if close enough, else counting up to the ceiling. */
static uint64_t rank_of(double q, uint64_t n) {
  /* The product rounded to a double: on x87 (i386) an unstored product
   * keeps excess precision. */
  volatile double qn = q * (double)n;
  uint64_t nearest = (uint64_t)(qn + 0.5);
  double off = qn > (double)nearest ? qn - (double)nearest : (double)nearest - qn;
  uint64_t rank = 1;
  if (off <= 1e-9 * (double)n)
    rank = nearest;
  else
    while ((double)rank < qn)
      rank++;
  return rank < 1 ? 1 : rank > n ? n : rank;
}

/* The nearest-rank q-quantile computed the long way: every callback's
 * reported value in order, and the one at rank_of(q, n). `window` must
 * hold few callbacks. */
static int64_t quantile_from_array(const uint64_t *window, double q) {
  static int64_t values[1 << 14];
  uint64_t n = 0;
  for (unsigned i = 0; i < UVTW_LATE_BUCKETS; i++)
    for (uint64_t k = 0; k < window[i] && n < sizeof values / sizeof values[0]; k++)
      values[n++] = reported(i);
  if (n == 0)
    return UV_EAGAIN;
  return values[rank_of(q, n) - 1];
}

static void window_of(const uvtw_stats_t *now, const uvtw_stats_t *since, uint64_t *window) {
  for (unsigned i = 0; i < UVTW_LATE_BUCKETS; i++)
    window[i] = now->late[i] - (since ? since->late[i] : 0);
}

static uint64_t sum_late(const uvtw_stats_t *s) {
  uint64_t n = 0;
  for (unsigned i = 0; i < UVTW_LATE_BUCKETS; i++)
    n += s->late[i];
  return n;
}

/* ---- Callbacks that check how they were counted ------------------------------- */

/* The stats as the previous callback saw them, and what the checks found. */
static struct {
  uvtw_wheel_t *wheel;
  uvtw_stats_t prev;
  int callbacks;
  int miscounted; /* not exactly one bucket grown by one, or fired not by one */
  int wrong_bucket;
  int wrong_total;    /* late_total_ms grew by other than the callback's lateness */
  uint64_t most_late; /* the largest upper bound of a callback's lateness */
  bool manual;        /* a manual clock counts every callback 0 ms late */
} g_seen;

static void seen_reset(uvtw_wheel_t *wheel) {
  memset(&g_seen, 0, sizeof g_seen);
  g_seen.wheel = wheel;
  uvtw_wheel_stats(wheel, &g_seen.prev);
}

/* Called first thing in a callback whose lateness is in [lo, hi]: the
 * callback was counted once, in a bucket that meets [lo, hi]. */
static void seen_callback(uint64_t lo, uint64_t hi, const char *who) {
  if (g_seen.manual)
    lo = hi = 0;
  uvtw_stats_t s;
  uvtw_wheel_stats(g_seen.wheel, &s);
  int grown = 0, grown_by_one = 0;
  unsigned at = 0;
  for (unsigned i = 0; i < UVTW_LATE_BUCKETS; i++)
    if (s.late[i] != g_seen.prev.late[i]) {
      grown++;
      grown_by_one += s.late[i] == g_seen.prev.late[i] + 1;
      at = i;
    }
  g_seen.callbacks++;
  if (hi > g_seen.most_late)
    g_seen.most_late = hi;
  if (grown != 1 || grown_by_one != 1 || s.fired != g_seen.prev.fired + 1) {
    g_seen.miscounted++;
    tap_diag("  %s: %d buckets grew (%d by one), fired grew by %" PRIu64, who, grown, grown_by_one,
             s.fired - g_seen.prev.fired);
  } else if (bucket_min(at) > hi || uvtw_late_bucket_max(at) < lo) {
    g_seen.wrong_bucket++;
    tap_diag("  %s: %" PRIu64 "..%" PRIu64 " ms late, counted in bucket %u (%" PRIu64 "..%" PRIu64
             ")",
             who, lo, hi, at, bucket_min(at), uvtw_late_bucket_max(at));
  }
  uint64_t added = s.late_total_ms - g_seen.prev.late_total_ms;
  if (added < lo || added > hi) {
    g_seen.wrong_total++;
    tap_diag("  %s: %" PRIu64 "..%" PRIu64 " ms late, late_total_ms grew by %" PRIu64, who, lo, hi,
             added);
  }
  g_seen.prev = s;
}

static void expect_seen(int callbacks, const char *T) {
  EXPECT_U64(g_seen.callbacks, callbacks, "%s: every callback ran", T);
  EXPECT_U64(g_seen.miscounted, 0,
             "%s: each callback counted exactly once (one bucket +1, fired +1)", T);
  EXPECT_U64(g_seen.wrong_bucket, 0, "%s: each in the bucket that holds its lateness", T);
  EXPECT_U64(g_seen.wrong_total, 0, "%s: late_total_ms grew by each callback's lateness", T);
}

/* The histogram agrees with fired and late_max_ms. */
static void expect_consistent(const uvtw_stats_t *s, const char *T) {
  EXPECT_U64(sum_late(s), s->fired, "%s: the buckets hold every callback run (sum == fired)", T);
  if (s->fired > 0) {
    unsigned top = LAST;
    while (s->late[top] == 0)
      top--;
    EXPECT_U64(top, bucket_of(s->late_max_ms),
               "%s: the highest bucket used holds late_max_ms (%" PRIu64 " ms)", T, s->late_max_ms);
  }
}

/* A timer that knows its deadline; `action` runs after the check. */
typedef struct rec_s rec_t;
struct rec_s {
  uvtw_timer_t timer;
  uint64_t deadline; /* of the run to come, ms */
  int runs;
  int max_runs; /* a repeating timer stops itself after this many */
  uint64_t late[4];
  void (*action)(rec_t *self);
};

static void rec_cb(uvtw_timer_t *timer) {
  rec_t *r = timer->data;
  uint64_t now = uvtw_wheel_now(g_seen.wheel);
  uint64_t late = now > r->deadline ? now - r->deadline : 0;
  seen_callback(late, late, "a timer");
  if (r->runs < 4)
    r->late[r->runs] = late;
  r->runs++;
  r->deadline = now + uvtw_timer_get_repeat(timer); /* the re-arm, as the wheel made it */
  if (r->max_runs != 0 && r->runs == r->max_runs)
    uvtw_timer_stop(timer);
  if (r->action)
    r->action(r);
}

static void rec_start(uvtw_wheel_t *wheel, rec_t *r, uint64_t timeout, uint64_t repeat,
                      void (*action)(rec_t *)) {
  memset(r, 0, sizeof *r);
  uvtw_timer_init(wheel, &r->timer);
  r->timer.data = r;
  r->action = action;
  r->deadline = uvtw_wheel_now(wheel) + timeout;
  uvtw_timer_start(&r->timer, rec_cb, timeout, repeat);
}

/* A task that knows its deadline to within the call to uvtw_schedule. */
typedef struct rec_task_s {
  uint64_t due_lo, due_hi; /* ms, uv_hrtime() before and after the call, + timeout */
  int runs;
  int status;
} rec_task_t;

static uint64_t g_task_least_late; /* the least lower bound of a task's lateness */

static void rec_task_cb(void *arg, int status) {
  rec_task_t *t = arg;
  t->runs++;
  t->status = status;
  if (status != 0)
    return;
  uint64_t now = uvtw_wheel_now(g_seen.wheel);
  uint64_t lo = now > t->due_hi ? now - t->due_hi : 0;
  seen_callback(lo, now > t->due_lo ? now - t->due_lo : 0, "a task");
  if (lo < g_task_least_late)
    g_task_least_late = lo;
}

static int rec_schedule(uvtw_wheel_t *wheel, rec_task_t *t, uint64_t timeout) {
  memset(t, 0, sizeof *t);
  t->due_lo = uv_hrtime() / 1000000 + timeout;
  int r = uvtw_schedule(wheel, timeout, rec_task_cb, t, NULL);
  t->due_hi = uv_hrtime() / 1000000 + timeout;
  return r;
}

/* ---- Bucket bounds ------------------------------------------------------------ */

static void test_bucket_bounds(void) {
  const char *T = "bucket bounds";
  uvtw_stats_t s;
  tap_ok(UVTW_LATE_BUCKETS <= 128, "%s: UVTW_LATE_BUCKETS (%d) is at most 128", T,
         UVTW_LATE_BUCKETS);
  EXPECT_U64(sizeof s.late / sizeof s.late[0], UVTW_LATE_BUCKETS,
             "%s: uvtw_stats_t.late has UVTW_LATE_BUCKETS counters", T);
  for (unsigned i = 0; i < 4; i++)
    EXPECT_U64(uvtw_late_bucket_max(i), i, "%s: bucket %u holds exactly %u ms", T, i, i);
  int empty = 0, too_wide = 0;
  for (unsigned i = 1; i < LAST; i++) {
    uint64_t lo = bucket_min(i), hi = uvtw_late_bucket_max(i);
    empty += hi < lo;
    if (lo >= 4 && hi - lo > lo / 4) {
      too_wide++;
      tap_diag("  bucket %u: %" PRIu64 "..%" PRIu64 " is wider than a quarter of %" PRIu64, i, lo,
               hi, lo);
    }
  }
  EXPECT_U64(empty, 0, "%s: every bucket holds at least one value (bounds increase)", T);
  EXPECT_U64(too_wide, 0, "%s: every closed bucket from 4 ms on has max - min <= min / 4", T);
  EXPECT_U64(uvtw_late_bucket_max(LAST), UINT64_MAX,
             "%s: the last bucket is open-ended (its max is UINT64_MAX)", T);
  if (!tap_ok(bucket_min(LAST) >= 10 * 60 * 1000,
              "%s: the open bucket starts at 10 minutes or later", T))
    tap_diag("  it starts at %" PRIu64 " ms", bucket_min(LAST));
  tap_diag("%s: the open bucket starts at %" PRIu64 " ms", T, bucket_min(LAST));
  EXPECT_U64(uvtw_late_bucket_max(UVTW_LATE_BUCKETS), UINT64_MAX,
             "%s: i == UVTW_LATE_BUCKETS gives UINT64_MAX", T);
  EXPECT_U64(uvtw_late_bucket_max(UVTW_LATE_BUCKETS + 1), UINT64_MAX,
             "%s: i == UVTW_LATE_BUCKETS + 1 gives UINT64_MAX", T);
  EXPECT_U64(uvtw_late_bucket_max(UINT32_MAX), UINT64_MAX, "%s: i == UINT_MAX gives UINT64_MAX", T);
}

/* White-box: the fire path's uvtw__late_bucket against the public bounds. */
static void test_fire_path_bucket(void) {
  const char *T = "fire path bucket";
  uint64_t wrong = 0, first_wrong = 0;
  unsigned i = 0;
  for (uint64_t v = 0; v <= 2 * bucket_min(LAST); v++) {
    while (uvtw_late_bucket_max(i) < v)
      i++;
    if (uvtw__late_bucket(v) != i && wrong++ == 0)
      first_wrong = v;
  }
  if (!EXPECT_U64(wrong, 0,
                  "%s: every value up to twice the open bucket's start lands in its bucket", T))
    tap_diag("  first wrong: %" PRIu64 " ms in bucket %u, the bounds say %u", first_wrong,
             uvtw__late_bucket(first_wrong), bucket_of(first_wrong));
  wrong = 0;
  for (int bit = 0; bit < 64; bit++)
    for (int d = -2; d <= 2; d++) {
      uint64_t v = ((uint64_t)1 << bit) + (uint64_t)(int64_t)d;
      if (uvtw__late_bucket(v) != bucket_of(v) && wrong++ == 0)
        first_wrong = v;
    }
  if (!EXPECT_U64(wrong, 0, "%s: values around every power of two, UINT64_MAX included", T))
    tap_diag("  first wrong: %" PRIu64 " ms", first_wrong);
  EXPECT_U64(uvtw__late_bucket(UINT64_MAX), LAST, "%s: UINT64_MAX ms is in the open bucket", T);
}

/* ---- Counting ----------------------------------------------------------------- */

static rec_t lt_block, lt_a, lt_r, lt_b;

/* Starts three timers, then blocks the loop past all their first deadlines. */
static void lt_block_action(rec_t *self) {
  (void)self;
  uvtw_wheel_t *wheel = g_seen.wheel;
  rec_start(wheel, &lt_a, 10, 0, NULL);
  rec_start(wheel, &lt_r, 10, 10, NULL);
  lt_r.max_runs = 3;
  rec_start(wheel, &lt_b, 30, 0, NULL);
  uv_sleep(BLOCK_MS);
}

static void test_timers_counted(void) {
  const char *T = "timers counted";
  fx_t f;
  if (!fx_open(&f, T, NULL))
    return;
  seen_reset(f.wheel);
  rec_start(f.wheel, &lt_block, 1, 0, lt_block_action);
  fx_run(&f, UV_RUN_DEFAULT);
  expect_seen(6, T); /* the blocker, a, b, and three runs of r */
  EXPECT_U64(lt_r.runs, 3, "%s: the repeating timer ran three times", T);
  if (!tap_ok(lt_a.late[0] >= BLOCK_MS / 2 && lt_r.late[0] >= BLOCK_MS / 2 && lt_b.late[0] > 0,
              "%s: the blocked loop made the timers late (test precondition)", T))
    tap_diag("  a %" PRIu64 ", b %" PRIu64 ", r %" PRIu64 " ms late", lt_a.late[0], lt_b.late[0],
             lt_r.late[0]);
  uvtw_stats_t s = fx_stats(f.wheel);
  EXPECT_U64(s.fired, 6, "%s: fired counts the six callbacks", T);
  expect_consistent(&s, T);
  EXPECT_I64(uvtw_stats_late_quantile(&s, NULL, 1), reported(bucket_of(s.late_max_ms)),
             "%s: the quantile 1 is the bucket of late_max_ms", T);
  fx_close(&f);
}

/* Another thread schedules; the loop thread blocks meanwhile. */
enum { LT_REMOTE = 3 };
static rec_task_t lt_remote[LT_REMOTE], lt_local;
static rec_t lt_task_block;

static void lt_remote_thread(void *arg) {
  for (int i = 0; i < LT_REMOTE; i++)
    rec_schedule(arg, &lt_remote[i], 5);
}

static void lt_task_block_action(rec_t *self) {
  (void)self;
  uv_thread_t thread;
  uv_thread_create(&thread, lt_remote_thread, g_seen.wheel);
  uv_thread_join(&thread);
  rec_schedule(g_seen.wheel, &lt_local, 5);
  uv_sleep(BLOCK_MS);
}

static void test_tasks_counted(void) {
  const char *T = "tasks counted";
  fx_t f;
  if (!fx_open(&f, T, NULL))
    return;
  fx_iteration(&f); /* the loop runs once */
  seen_reset(f.wheel);
  g_task_least_late = UINT64_MAX;
  rec_start(f.wheel, &lt_task_block, 1, 0, lt_task_block_action);
  fx_run(&f, UV_RUN_DEFAULT);
  expect_seen(1 + LT_REMOTE + 1, T);
  int ran = lt_local.runs == 1 && lt_local.status == 0;
  for (int i = 0; i < LT_REMOTE; i++)
    ran &= lt_remote[i].runs == 1 && lt_remote[i].status == 0;
  tap_ok(ran, "%s: the tasks of both threads ran once with status 0", T);
  if (!tap_ok(g_task_least_late != UINT64_MAX && g_task_least_late >= BLOCK_MS / 2,
              "%s: the blocked loop made every task late (test precondition)", T))
    tap_diag("  the least late was at least %" PRIu64 " ms late", g_task_least_late);
  uvtw_stats_t s = fx_stats(f.wheel);
  expect_consistent(&s, T);
  fx_close(&f);
}

/* Only status 0 counts: tasks a close ends with UV_ECANCELED, and a task
 * whose cancel won, are not counted. */
static uvtw_stats_t cn_before;
static int cn_changed, cn_cancelled;

static void cn_check(uvtw_wheel_t *wheel) {
  uvtw_stats_t s;
  uvtw_wheel_stats(wheel, &s);
  cn_changed += s.fired != cn_before.fired || memcmp(s.late, cn_before.late, sizeof s.late) != 0 ||
                s.late_max_ms != cn_before.late_max_ms;
}

static void cn_task_cb(void *arg, int status) {
  cn_cancelled += status == UV_ECANCELED;
  cn_check(arg);
}

static void cn_close_cb(uvtw_wheel_t *wheel, void *arg) {
  ++*(int *)arg;
  cn_check(wheel);
}

static void cn_thread(void *arg) {
  uvtw_schedule(arg, 10000, cn_task_cb, arg, NULL);
  uvtw_schedule(arg, 10000, cn_task_cb, arg, NULL);
}

static void test_cancelled_not_counted(void) {
  const char *T = "cancelled not counted";
  fx_t f;
  uv_thread_t thread;
  uvtw_ticket_t *ticket = NULL;
  rec_t on_time;
  int closed = 0;
  if (!fx_open(&f, T, NULL))
    return;
  uvtw_wheel_t *wheel = f.wheel;
  fx_iteration(&f);
  seen_reset(wheel);
  rec_start(wheel, &on_time, 0, 0, NULL); /* one callback that counts */
  uv_thread_create(&thread, cn_thread, wheel);
  uv_thread_join(&thread);
  fx_run(&f, UV_RUN_NOWAIT); /* takes the two in, runs on_time */
  EXPECT_U64(on_time.runs, 1, "%s: a timer with status 0 ran", T);
  uvtw_schedule(wheel, 10000, cn_task_cb, wheel, NULL); /* on the loop thread */
  uvtw_schedule(wheel, 10000, cn_task_cb, wheel, &ticket);
  EXPECT_ERR(uvtw_ticket_cancel(ticket), 0, "%s: a cancel wins", T);
  uvtw_ticket_release(ticket);
  uv_thread_create(&thread, cn_thread, wheel); /* still queued at the close */
  uv_thread_join(&thread);
  uvtw_wheel_stats(wheel, &cn_before);
  EXPECT_U64(cn_before.fired, 1, "%s: one callback counted before the close", T);
  cn_changed = cn_cancelled = 0;
  uvtw_wheel_close(wheel, cn_close_cb, &closed);
  f.wheel = NULL;
  for (int i = 0; i < 5 && closed == 0; i++)
    fx_run(&f, UV_RUN_NOWAIT);
  EXPECT_U64(closed, 1, "%s: the close callback ran", T);
  EXPECT_U64(cn_cancelled, 5, "%s: the five tasks left ran with UV_ECANCELED", T);
  EXPECT_U64(cn_changed, 0,
             "%s: fired, late[] and late_max_ms did not move for UV_ECANCELED callbacks", T);
  fx_close(&f);
}

/* ---- Quantiles and windows ----------------------------------------------------- */

static const double qs[] = {0,    1e-9, 0.001, 0.01,  0.1,    0.25, 0.5,
                            0.75, 0.9,  0.99,  0.999, 0.9999, 1};

static void test_quantiles(void) {
  const char *T = "quantiles";
  uvtw_stats_t s;
  int checked = 0, wrong = 0;
  for (int trial = 0; trial < 300; trial++) {
    memset(&s, 0, sizeof s);
    /* A few buckets used, a few values each; sometimes the open one. */
    unsigned used = 1 + (unsigned)fx_rng_below(6);
    for (unsigned k = 0; k < used; k++)
      s.late[fx_rng_below(UVTW_LATE_BUCKETS)] += 1 + fx_rng_below(trial % 3 ? 50 : 3);
    for (size_t k = 0; k < sizeof qs / sizeof qs[0] + 5; k++) {
      double q = k < sizeof qs / sizeof qs[0] ? qs[k] : (double)fx_rng_below(1000001) / 1e6;
      int64_t want = quantile_from_array(s.late, q);
      int64_t got = uvtw_stats_late_quantile(&s, NULL, q);
      checked++;
      if (got != want && wrong++ < 5)
        tap_diag("  trial %d, q %.6f: expected %" PRId64 ", got %" PRId64, trial, q, want, got);
    }
  }
  EXPECT_U64(wrong, 0, "%s: %d quantiles of random histograms match the array's nearest rank", T,
             checked);

  memset(&s, 0, sizeof s);
  s.late[2] = 99;
  s.late[20] = 1;
  EXPECT_I64(uvtw_stats_late_quantile(&s, NULL, 0.5), 2,
             "%s: 99 in bucket 2, 1 in bucket 20: p50 is 2", T);
  EXPECT_I64(uvtw_stats_late_quantile(&s, NULL, 0.99), 2, "%s: ... p99 is 2 (rank 99)", T);
  EXPECT_I64(uvtw_stats_late_quantile(&s, NULL, 0.991), reported(20),
             "%s: ... p99.1 is bucket 20's upper bound (rank 100)", T);
  EXPECT_I64(uvtw_stats_late_quantile(&s, NULL, 0), 2, "%s: ... q 0 is the least (rank 1)", T);
  s.late[LAST] = 1;
  EXPECT_I64(uvtw_stats_late_quantile(&s, NULL, 1), (int64_t)bucket_min(LAST),
             "%s: the open bucket reports its lowest value", T);
  memset(&s, 0, sizeof s);
  s.late[5] = UINT64_MAX;
  EXPECT_I64(uvtw_stats_late_quantile(&s, NULL, 1), 5, "%s: UINT64_MAX callbacks in one bucket", T);
  /* No wheel counts past UINT64_MAX callbacks in all (fired would wrap
   * first); a made-up struct that does gets answers from its buckets, with
   * the sums saturated, never a read past the array. */
  s.late[LAST] = UINT64_MAX;
  EXPECT_I64(uvtw_stats_late_quantile(&s, NULL, 0.25), 5,
             "%s: counts that sum past UINT64_MAX do not wrap (q 0.25)", T);
  int64_t top = uvtw_stats_late_quantile(&s, NULL, 1);
  tap_ok(top == 5 || top == (int64_t)bucket_min(LAST),
         "%s: ... and q 1 answers from a bucket in use (%" PRId64 ")", T, top);
}

/* The rank of the quantile q of n callbacks is exactly `rank`: with `rank`
 * callbacks 0 ms late and the rest 1 ms late, the quantile is 0 ms; with
 * one fewer 0 ms late, it is 1 ms. Returns whether both held. */
static bool rank_is(double q, uint64_t n, uint64_t rank) {
  uvtw_stats_t s;
  memset(&s, 0, sizeof s);
  s.late[0] = rank;
  s.late[1] = n - rank;
  bool not_above = uvtw_stats_late_quantile(&s, NULL, q) == 0;
  s.late[0] = rank - 1;
  s.late[1] = n - rank + 1;
  return not_above && uvtw_stats_late_quantile(&s, NULL, q) == 1;
}

/* Every q = k / den, both as the quotient and as the decimal "0.<k>"
 * parsed by strtod, of n = den callbacks: rank k exactly. */
static void expect_decimal_ranks(uint64_t den, int digits, const char *T) {
  int wrong = 0;
  for (uint64_t k = 1; k < den; k++) {
    char text[32];
    snprintf(text, sizeof text, "0.%0*" PRIu64, digits, k);
    double quotient = (double)k / (double)den, decimal = strtod(text, NULL);
    if (!rank_is(quotient, den, k) || !rank_is(decimal, den, k)) {
      if (wrong++ < 5)
        tap_diag("  q %s (%.17g) of %" PRIu64 ": rank is not %" PRIu64, text, decimal, den, k);
    }
  }
  EXPECT_U64(wrong, 0,
             "%s: q = 0.%0*d .. 0.%0*" PRIu64 " (k / %" PRIu64 " and the decimal via strtod) of "
             "%" PRIu64 " callbacks: rank k exactly",
             T, digits, 1, digits, den - 1, den, den);
}

static void test_decimal_ranks(void) {
  const char *T = "decimal ranks";
  expect_decimal_ranks(100, 2, T); /* 0.07, 0.14, 0.28, 0.55, 0.56: q * n just above k */
  expect_decimal_ranks(1000, 3, T);
  expect_decimal_ranks(10000, 4, T); /* 576 of them just above k */
  static const struct {
    const char *q;
    uint64_t n, rank;
  } cases[] = {
      {"0.999", 1000, 999},
      {"0.9999", 10000, 9999},
      {"0.99", 1000, 990},
      {"0.56", 1000, 560},
      {"0.07", 300, 21},
      {"0.001", 1000, 1},
      {"0.5", 7, 4},
      {"0.999", 100, 100},
      {"0.1", 3, 1},
      {"0.99", 101, 100},
      {"0.56000001", 100, 57},
      {"0.55999999", 100, 56},
      {"0.333333333333", 3, 1},
      {"1e-12", 1000, 1},
      {"0", 5, 1},
      {"1", 5, 5},
  };
  int wrong = 0;
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    double q = strtod(cases[k].q, NULL);
    if (!rank_is(q, cases[k].n, cases[k].rank) && wrong++ < 5)
      tap_diag("  q %s of %" PRIu64 ": rank is not %" PRIu64, cases[k].q, cases[k].n,
               cases[k].rank);
  }
  EXPECT_U64(wrong, 0,
             "%s: q 0.999 of 1000 is rank 999, 0.9999 of 10000 is 9999, 0.5 of 7 is 4, a q * n "
             "1e-6 off an integer is not that integer, and more",
             T);
}

/* Windows of made-up arrays. */
static void windows_of_arrays(const char *T) {
  uvtw_stats_t since, now;
  memset(&since, 0, sizeof since);
  since.late[0] = 1000; /* an old, quiet past */
  since.late[30] = 2;
  now = since;
  now.late[0] += 1;
  now.late[12] += 3;
  now.late[30] += 1;
  EXPECT_I64(uvtw_stats_late_quantile(&now, &since, 0.5), reported(12),
             "%s: the window's median ignores what `since` counted", T);
  EXPECT_I64(uvtw_stats_late_quantile(&now, NULL, 0.5), 0, "%s: since NULL takes all of `now`", T);
  EXPECT_I64(uvtw_stats_late_quantile(&now, &since, 0), 0, "%s: the window's least", T);
  EXPECT_I64(uvtw_stats_late_quantile(&now, &since, 1), reported(30), "%s: the window's largest",
             T);
  EXPECT_ERR(uvtw_stats_late_quantile(&now, &now, 0.5), UV_EAGAIN,
             "%s: an empty window (now == since) gives UV_EAGAIN", T);
}

/* A real wheel: one second of callbacks on time, then one made late. */
static void windows_of_a_wheel(const char *T) {
  uint64_t window[UVTW_LATE_BUCKETS];
  fx_t f;
  if (!fx_open(&f, T, NULL))
    return;
  seen_reset(f.wheel);
  rec_t a, b, c;
  uvtw_stats_t s0 = fx_stats(f.wheel), s1, s2;
  rec_start(f.wheel, &a, 1, 1, NULL);
  a.max_runs = 5;
  fx_run(&f, UV_RUN_DEFAULT);
  s1 = fx_stats(f.wheel);
  g_seen.most_late = 0;
  rec_start(f.wheel, &b, 1, 0, lt_block_action); /* blocks; a, b and r of the timers case */
  fx_run(&f, UV_RUN_DEFAULT);
  s2 = fx_stats(f.wheel);
  uint64_t most_late = g_seen.most_late;
  rec_start(f.wheel, &c, 1, 0, NULL);
  fx_run(&f, UV_RUN_DEFAULT);
  expect_seen(5 + 6 + 1, T); /* a's five runs, the blocker's six callbacks, c */
  window_of(&s2, &s1, window);
  uint64_t n = 0;
  for (unsigned i = 0; i < UVTW_LATE_BUCKETS; i++)
    n += window[i];
  EXPECT_U64(n, s2.fired - s1.fired, "%s: a window holds the callbacks run between the copies", T);
  int wrong = 0;
  for (size_t k = 0; k < sizeof qs / sizeof qs[0]; k++)
    wrong += uvtw_stats_late_quantile(&s2, &s1, qs[k]) != quantile_from_array(window, qs[k]);
  EXPECT_U64(wrong, 0, "%s: the window's quantiles match the difference of the arrays", T);
  EXPECT_I64(uvtw_stats_late_quantile(&s2, &s1, 1), reported(bucket_of(most_late)),
             "%s: the window's largest is the most late of its callbacks (%" PRIu64 " ms)", T,
             most_late);
  EXPECT_I64(uvtw_stats_late_quantile(&s1, &s0, 1), uvtw_stats_late_quantile(&s1, NULL, 1),
             "%s: a window from the first copy equals all of the second", T);
  tap_ok(uvtw_stats_late_quantile(&s2, NULL, 1) >= uvtw_stats_late_quantile(&s2, &s1, 1),
         "%s: since start, the largest is at least the window's largest", T);
  fx_close(&f);
}

static void test_windows(void) {
  const char *T = "windows";
  windows_of_arrays(T);
  windows_of_a_wheel(T);
}

/* ---- Errors ---------------------------------------------------------------------- */

static void test_errors(void) {
  const char *T = "errors";
  uvtw_stats_t now, since;
  memset(&now, 0, sizeof now);
  memset(&since, 0, sizeof since);
  EXPECT_ERR(uvtw_stats_late_quantile(&now, NULL, 0.5), UV_EAGAIN,
             "%s: no callback counted (n == 0) -> UV_EAGAIN", T);
  EXPECT_ERR(uvtw_stats_late_quantile(&now, &since, 0.5), UV_EAGAIN,
             "%s: an empty window -> UV_EAGAIN", T);
  now.late[3] = 4;
  now.late[9] = 1;
  EXPECT_ERR(uvtw_stats_late_quantile(NULL, NULL, 0.5), UV_EINVAL, "%s: now NULL -> UV_EINVAL", T);
  EXPECT_ERR(uvtw_stats_late_quantile(NULL, &now, 0.5), UV_EINVAL,
             "%s: now NULL with a since -> UV_EINVAL", T);
  EXPECT_ERR(uvtw_stats_late_quantile(&now, NULL, -0.01), UV_EINVAL, "%s: q < 0 -> UV_EINVAL", T);
  EXPECT_ERR(uvtw_stats_late_quantile(&now, NULL, -INFINITY), UV_EINVAL,
             "%s: q -infinity -> UV_EINVAL", T);
  EXPECT_ERR(uvtw_stats_late_quantile(&now, NULL, 1.0000001), UV_EINVAL, "%s: q > 1 -> UV_EINVAL",
             T);
  EXPECT_ERR(uvtw_stats_late_quantile(&now, NULL, INFINITY), UV_EINVAL,
             "%s: q +infinity -> UV_EINVAL", T);
  EXPECT_ERR(uvtw_stats_late_quantile(&now, NULL, NAN), UV_EINVAL, "%s: q NaN -> UV_EINVAL", T);
  EXPECT_I64(uvtw_stats_late_quantile(&now, NULL, -0.0), 3, "%s: q -0.0 is 0, not an error", T);
  since.late[3] = 1;
  since.late[5] = 1; /* more than now's 0: not an earlier copy */
  EXPECT_ERR(uvtw_stats_late_quantile(&now, &since, 0.5), UV_EINVAL,
             "%s: since counts more than now in one bucket -> UV_EINVAL", T);
  memset(&since, 0, sizeof since);
  since.late[LAST] = 1;
  EXPECT_ERR(uvtw_stats_late_quantile(&now, &since, 0.5), UV_EINVAL,
             "%s: ... in the open bucket too", T);
  memset(&now, 0, sizeof now);
  EXPECT_ERR(uvtw_stats_late_quantile(&now, &since, 0.5), UV_EINVAL,
             "%s: UV_EINVAL before UV_EAGAIN (since ahead, now empty)", T);
  EXPECT_ERR(uvtw_stats_late_quantile(&now, NULL, NAN), UV_EINVAL,
             "%s: UV_EINVAL before UV_EAGAIN (NaN, now empty)", T);
}

/* ---- The manual clock ---------------------------------------------------------- */

/* On a manual clock a task's deadline is the wheel's time when taken in
 * plus its timeout, and it runs with the clock there. */
static void mc_task_cb(void *arg, int status) {
  rec_task_t *t = arg;
  t->runs++;
  t->status = status;
  seen_callback(0, 0, "a task on a manual clock");
}

static rec_task_t mc_remote;

static void mc_thread(void *arg) {
  mc_remote.runs = 0;
  uvtw_schedule(arg, 40, mc_task_cb, &mc_remote, NULL);
}

static void mc_restart_zero(rec_t *self) {
  if (self->runs == 1) {
    self->deadline = uvtw_wheel_now(g_seen.wheel);
    uvtw_timer_start(&self->timer, rec_cb, 0, 0);
  }
}

static void test_manual_clock(void) {
  const char *T = "manual clock";
  uvtw_options_t opts = {.manual_clock = 1};
  fx_t f;
  rec_t t[5], r, z;
  rec_task_t local;
  uv_thread_t thread;
  static const uint64_t timeouts[5] = {0, 1, 7, 100, 5000};
  if (!fx_open(&f, T, &opts))
    return;
  seen_reset(f.wheel);
  g_seen.manual = true;
  for (int i = 0; i < 5; i++)
    rec_start(f.wheel, &t[i], timeouts[i], 0, NULL);
  rec_start(f.wheel, &r, 3, 3, NULL);
  r.max_runs = 4;
  memset(&local, 0, sizeof local);
  uvtw_schedule(f.wheel, 20, mc_task_cb, &local, NULL);
  uv_thread_create(&thread, mc_thread, f.wheel);
  uv_thread_join(&thread);
  EXPECT_ERR(uvtw_wheel_advance(f.wheel, 50), 0, "%s: advance runs what is due", T);
  while (uvtw_wheel_advance_next(f.wheel) >= 0) {
  }
  expect_seen(5 + 4 + 2, T);
  uvtw_stats_t s = fx_stats(f.wheel);
  EXPECT_U64(s.late[0], 11, "%s: all eleven callbacks counted 0 ms late", T);
  EXPECT_U64(s.late_max_ms, 0, "%s: late_max_ms stays 0", T);
  EXPECT_I64(uvtw_stats_late_quantile(&s, NULL, 1), 0, "%s: the largest lateness is 0", T);
  expect_consistent(&s, T);

  /* An entry made due inside a pass runs in the pass one millisecond
   * later, and still counts 0 ms (include/uvtw.h, "Lateness"). */
  seen_reset(f.wheel);
  g_seen.manual = true;
  rec_start(f.wheel, &z, 5, 0, mc_restart_zero);
  EXPECT_ERR(uvtw_wheel_advance(f.wheel, 10), 0, "%s: advance past a restart with 0", T);
  expect_seen(2, T);
  s = fx_stats(f.wheel);
  EXPECT_U64(s.late[0], 13, "%s: the timer restarted with 0 in its pass counts 0 ms too", T);
  EXPECT_U64(s.late_max_ms, 0, "%s: ... and late_max_ms stays 0", T);
  fx_close(&f);
}

/* ---- Another thread ---------------------------------------------------------------- */

typedef struct ot_job_s {
  uvtw_stats_t snapshot; /* the thread's own copy */
  uint64_t bounds[UVTW_LATE_BUCKETS + 2];
  int64_t quantiles[sizeof qs / sizeof qs[0]];
  int64_t window_median;
} ot_job_t;

static void ot_run(ot_job_t *job, const uvtw_stats_t *copy, const uvtw_stats_t *since) {
  for (unsigned i = 0; i < UVTW_LATE_BUCKETS + 2; i++)
    job->bounds[i] = uvtw_late_bucket_max(i);
  for (size_t k = 0; k < sizeof qs / sizeof qs[0]; k++)
    job->quantiles[k] = uvtw_stats_late_quantile(copy, NULL, qs[k]);
  job->window_median = uvtw_stats_late_quantile(copy, since, 0.5);
}

static uvtw_stats_t ot_since;

static void ot_thread(void *arg) {
  ot_job_t *job = arg;
  uvtw_stats_t copy = job->snapshot;
  ot_run(job, &copy, &ot_since);
}

static void test_other_thread(void) {
  const char *T = "other thread";
  fx_t f;
  uv_thread_t thread;
  ot_job_t there, here;
  rec_t block;
  if (!fx_open(&f, T, NULL))
    return;
  seen_reset(f.wheel);
  uvtw_wheel_stats(f.wheel, &ot_since);
  rec_start(f.wheel, &block, 1, 0, lt_block_action);
  fx_run(&f, UV_RUN_DEFAULT);
  memset(&there, 0, sizeof there);
  uvtw_wheel_stats(f.wheel, &there.snapshot);
  here = there;
  EXPECT_ERR(uv_thread_create(&thread, ot_thread, &there), 0, "%s: a thread starts", T);
  uv_thread_join(&thread);
  ot_run(&here, &here.snapshot, &ot_since);
  tap_ok(memcmp(there.bounds, here.bounds, sizeof here.bounds) == 0,
         "%s: uvtw_late_bucket_max gives the same bounds on another thread", T);
  tap_ok(memcmp(there.quantiles, here.quantiles, sizeof here.quantiles) == 0 &&
             there.window_median == here.window_median,
         "%s: uvtw_stats_late_quantile on a copy gives the same answers on another thread", T);
  tap_ok(here.quantiles[sizeof qs / sizeof qs[0] - 1] >=
             (int64_t)bucket_min(bucket_of(BLOCK_MS / 2)),
         "%s: ... and they are about the late timers (q 1 >= %d ms's bucket)", T, BLOCK_MS / 2);
  fx_close(&f);
}

static const tap_case_t cases[] = {
    TAP_CASE(bucket_bounds),
    TAP_CASE(fire_path_bucket),
    TAP_CASE(timers_counted),
    TAP_CASE(tasks_counted),
    TAP_CASE(cancelled_not_counted),
    TAP_CASE(quantiles),
    TAP_CASE(decimal_ranks),
    TAP_CASE(windows),
    TAP_CASE(errors),
    TAP_CASE(manual_clock),
    TAP_CASE(other_thread),
};

FX_MAIN(cases)
