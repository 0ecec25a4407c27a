/* The pure wheel (src/wheel.c) against a reference model, plus its
 * invariant checker.
 *
 * model: random inserts, removals, restarts and expiries, with deadlines
 * near and far (every level), some in the past and some saturated, checked
 * after every step with uvtw__wheel_check and against a reference that
 * orders entries by (deadline, insertion order): every expiry must hand
 * back exactly the due entries, in that order, and the next deadline must
 * be a lower bound (exact: equal) of the reference's.
 * Environment: UVTW_MODEL_STEPS (steps, default 300000), UVTW_SEED.
 *
 * checker: each invariant uvtw__wheel_check (src/wheel.c) names is broken on
 * purpose, one at a time, and it must report exactly that one.
 *
 * Cases run by name: `meson test -C build wheel_model --test-args checker`.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tap.h"
#include "wheel.h"

#define POOL 512

typedef struct entry_s {
  wheel_node_t node; /* first: a node's address is its entry's */
  bool pending;      /* the model: in the wheel */
  uint64_t deadline; /* the model's effective deadline */
  uint64_t seq;      /* the model's insertion order */
} entry_t;

static uint64_t rng_state;

static uint64_t rng(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

static uint64_t rng_below(uint64_t n) {
  return rng() % n;
}

/* The first tick of one of the next two level-1 slots: entries filed there
 * at different times share a deadline on level 1, and some of them fire
 * from the current slot beside entries filed on level 0 later. Or a tick
 * just after one of the next two multiples of 2^18, which entries filed at
 * different times wait for on level 2 or in level 1's ring. */
static uint64_t shared_deadline(uint64_t now) {
  if (rng_below(4) == 0)
    return (((now >> 18) + 1 + rng_below(2)) << 18) + rng_below(8);
  return ((now >> 12) + 1 + rng_below(2)) << 12;
}

/* A deadline relative to `now` that lands on any level, sometimes in the
 * past, sometimes saturated. */
static uint64_t random_deadline(uint64_t now) {
  switch (rng_below(10)) {
  case 0:
    return now > 5 ? now - rng_below(5) : now; /* in the past: filed at now */
  case 1:
    return UINT64_MAX;
  case 2:
    return now + rng_below(4); /* equal deadlines, FIFO */
  case 3:
  case 4:
    return shared_deadline(now);
  default: {
    unsigned level = (unsigned)rng_below(8);
    uint64_t span = (uint64_t)1 << (6 * level + 6);
    return now + rng_below(span);
  }
  }
}

static uint64_t model_next(const entry_t *pool) {
  uint64_t next = UINT64_MAX;
  for (int i = 0; i < POOL; i++)
    if (pool[i].pending && pool[i].deadline < next)
      next = pool[i].deadline;
  return next;
}

/* The model's next due entry at `now` in (deadline, seq) order, or NULL. */
static entry_t *model_first_due(entry_t *pool, uint64_t now) {
  entry_t *best = NULL;
  for (int i = 0; i < POOL; i++) {
    entry_t *e = &pool[i];
    if (e->pending && e->deadline <= now &&
        (best == NULL || e->deadline < best->deadline ||
         (e->deadline == best->deadline && e->seq < best->seq)))
      best = e;
  }
  return best;
}

typedef struct {
  uint64_t steps, inserts, removes, expiries, fired, restarted, current;
  int failures;
} model_run_t;

static void fail(model_run_t *run, uint64_t step, const char *what) {
  if (run->failures++ < 5)
    tap_diag("  step %" PRIu64 ": %s (seed %" PRIu64 ")", step, what, rng_state);
}

static void model_insert(wheel_t *w, entry_t *e, uint64_t *seq) {
  uint64_t deadline = random_deadline(w->now);
  uvtw__wheel_insert(w, &e->node, deadline);
  e->pending = true;
  e->deadline = deadline < w->now ? w->now : deadline;
  e->seq = (*seq)++;
}

/* Expires to `now` and compares what comes out with the model. Between
 * pops it sometimes removes a random entry, as a callback stopping another
 * timer does, due or not. */
static void model_expire(wheel_t *w, entry_t *pool, uint64_t now, model_run_t *run, uint64_t step) {
  uvtw__wheel_expire(w, now);
  wheel_node_t *node;
  while ((node = uvtw__wheel_pop_expired(w)) != NULL) {
    entry_t *got = (entry_t *)(void *)node;
    entry_t *want = model_first_due(pool, now);
    if (got != want) {
      fail(run, step,
           want == NULL ? "an entry expired that the model does not have due"
                        : "entries expired out of (deadline, insertion) order");
      if (!got->pending)
        continue;
    }
    got->pending = false;
    run->fired++;
    entry_t *victim = &pool[rng_below(POOL)];
    if (rng_below(4) == 0 && victim->pending) {
      uvtw__wheel_remove(w, &victim->node);
      victim->pending = false;
      run->removes++;
      const char *broken = uvtw__wheel_check(w);
      if (broken != NULL)
        fail(run, step, broken);
    }
  }
  if (model_first_due(pool, now) != NULL)
    fail(run, step, "a due entry did not expire");
}

/* One random operation on an entry of `pool`: a start or restart, a
 * restart later (uvtw__wheel_refile), a stop, or time passing. */
static void model_step(wheel_t *w, entry_t *pool, uint64_t *seq, model_run_t *run, uint64_t step) {
  entry_t *e = &pool[rng_below(POOL)];
  unsigned op = (unsigned)rng_below(100);
  if (op < 30) { /* start, or restart */
    if (e->pending)
      uvtw__wheel_remove(w, &e->node);
    model_insert(w, e, seq);
    run->inserts++;
  } else if (op < 45 && e->pending) { /* restart later */
    uint64_t later = e->deadline + rng_below(op < 40 ? 64 : 100000);
    if (op >= 41) /* to a deadline other entries share, maybe blocks away */
      later = shared_deadline(w->now);
    if (later < e->deadline)
      later = op >= 41 ? e->deadline : UINT64_MAX;
    uvtw__wheel_refile(w, &e->node, later);
    run->restarted++;
    e->deadline = later;
    e->seq = (*seq)++;
  } else if (op < 70) { /* stop */
    if (e->pending) {
      uvtw__wheel_remove(w, &e->node);
      e->pending = false;
      run->removes++;
    }
  } else { /* time passes: a little, to the next deadline, or far */
    uint64_t next = model_next(pool);
    uint64_t now = w->now;
    if (op < 85)
      now += rng_below(70);
    else if (op < 95 && next != UINT64_MAX)
      now = next;
    else
      now += rng_below((uint64_t)1 << 26);
    model_expire(w, pool, now, run, step);
    run->expiries++;
    run->current += wheel_current(w) != NULL;
  }
}

/* The checker, and the next deadline (the lower bound and the exact one)
 * against the reference's. */
static void model_check_step(const wheel_t *w, const entry_t *pool, model_run_t *run,
                             uint64_t step) {
  const char *broken = uvtw__wheel_check(w);
  if (broken != NULL)
    fail(run, step, broken);
  uint64_t want = model_next(pool);
  uint64_t lower = uvtw__wheel_next_deadline(w);
  uint64_t exact = uvtw__wheel_next_deadline_exact(w);
  if (lower > want)
    fail(run, step, "the next deadline is later than the earliest pending one");
  if (exact != want)
    fail(run, step, "the exact next deadline is not the earliest pending one");
}

static void test_model(void) {
  static entry_t pool[POOL];
  static wheel_t w;
  const char *steps_env = getenv("UVTW_MODEL_STEPS");
  uint64_t steps = steps_env ? strtoull(steps_env, NULL, 10) : 300000;
  uint64_t seq = 0;
  model_run_t run = {0};

  memset(pool, 0, sizeof pool);
  uvtw__wheel_init(&w, rng_below(1u << 20));
  for (uint64_t step = 0; step < steps; step++) {
    model_step(&w, pool, &seq, &run, step);
    model_check_step(&w, pool, &run, step);
    if (run.failures > 20)
      break;
    run.steps++;
  }
  tap_diag("model: %" PRIu64 " steps, %" PRIu64 " inserts, %" PRIu64 " restarts, %" PRIu64
           " removals, %" PRIu64 " expiries (%" PRIu64 " leaving a current slot), %" PRIu64
           " expired, %" PRIu64 " cascaded",
           run.steps, run.inserts, run.restarted, run.removes, run.expiries, run.current, run.fired,
           w.cascaded);
  EXPECT_U64(run.failures, 0, "model: the wheel agrees with the reference at every step");
  tap_ok(run.fired > 0 && w.cascaded > 0 && run.restarted > 0 && run.current > 0,
         "model: the run expired, cascaded and restarted entries, and left current slots");
}

/* ---- targeted cases ------------------------------------------------------ */

/* Pops the expired entries: true if they are `want[0..n)`, in that order,
 * and nothing after them. */
static bool pops_are(wheel_t *w, wheel_node_t *const *want, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (uvtw__wheel_pop_expired(w) != want[i])
      return false;
  return uvtw__wheel_pop_expired(w) == NULL;
}

static void test_fifo_across_levels(void) {
  static wheel_t w;
  entry_t e[4];
  uvtw__wheel_init(&w, 0);
  /* Same deadline 320000, filed at different times: e[0] on level 2, e[1]
   * and e[2] on level 1 (within 63 blocks of the wheel's time), and e[0]
   * cascaded there at 262144, in front of e[1], which it started before. */
  uvtw__wheel_insert(&w, &e[0].node, 320000);
  uvtw__wheel_expire(&w, 256000);
  uvtw__wheel_insert(&w, &e[1].node, 320000);
  uvtw__wheel_expire(&w, 319360);
  uvtw__wheel_insert(&w, &e[2].node, 320000);
  uvtw__wheel_insert(&w, &e[3].node, 319936);
  tap_ok(uvtw__wheel_check(&w) == NULL, "fifo: the checker accepts the wheel");
  tap_ok(w.cascaded == 1, "fifo: the first entry cascaded on the way");
  uvtw__wheel_expire(&w, 320000);
  wheel_node_t *order[4];
  for (int i = 0; i < 4; i++)
    order[i] = uvtw__wheel_pop_expired(&w);
  tap_ok(order[0] == &e[3].node && order[1] == &e[0].node && order[2] == &e[1].node &&
             order[3] == &e[2].node,
         "fifo: deadline order first, then the order of insertion, whichever level each passed");
  EXPECT_U64(w.count, 0, "fifo: nothing is left");
}

/* Level 1 is a ring over the 63 blocks after the wheel's, so the slot of
 * the block at 2^18 takes entries started within 63 blocks of it while an
 * entry started earlier waits on level 2 for the same block. When the
 * wheel's time reaches 2^18, the level-2 slot cascades first, its entry due
 * in that block joining the block's level-1 slot at its head (it started
 * first), and the level-1 slot, out of order, cascades behind it: every
 * entry fires in deadline order, none from a level-1 slot out of order. */
static void test_upper_into_ring(void) {
  static wheel_t w;
  entry_t e[3];
  enum { S = 1 << 18 };
  uvtw__wheel_init(&w, 0);
  uvtw__wheel_insert(&w, &e[0].node, S + 30); /* 64 blocks ahead: level 2 */
  uvtw__wheel_expire(&w, S - 10 * 4096);
  uvtw__wheel_insert(&w, &e[1].node, S + 5); /* 10 blocks ahead: level 1 */
  uvtw__wheel_insert(&w, &e[2].node, S);     /* behind e[1]: the slot is unsorted */
  tap_ok(uvtw__wheel_check(&w) == NULL && wheel_current(&w) == NULL,
         "upper into ring: level 2 and level 1 hold the block at 2^18");
  uvtw__wheel_expire(&w, S + 10);
  tap_ok(uvtw__wheel_check(&w) == NULL, "upper into ring: the checker accepts the wheel at 2^18");
  wheel_node_t *first = uvtw__wheel_pop_expired(&w), *second = uvtw__wheel_pop_expired(&w);
  tap_ok(first == &e[2].node && second == &e[1].node && uvtw__wheel_pop_expired(&w) == NULL,
         "upper into ring: by 2^18 + 10, the entries due at 2^18 and 2^18 + 5, in that order");
  uvtw__wheel_expire(&w, S + 30);
  tap_ok(uvtw__wheel_pop_expired(&w) == &e[0].node && w.count == 0,
         "upper into ring: the level-2 entry at 2^18 + 30, and nothing is left");
}

/* A sorted level-1 slot fires from where it is once the wheel's time is in
 * its 4,096 ticks, merged with entries filed on level 0 since: deadline
 * order, then start order. */
static void test_current_slot(void) {
  static wheel_t w;
  entry_t a, b, c, d, e;
  uvtw__wheel_init(&w, 0);
  uvtw__wheel_insert(&w, &a.node, 5000); /* level 1, the slot of 4096 */
  uvtw__wheel_insert(&w, &b.node, 5000);
  uvtw__wheel_insert(&w, &c.node, 6000);
  uvtw__wheel_expire(&w, 4500);
  tap_ok(uvtw__wheel_pop_expired(&w) == NULL &&
             wheel_current(&w) == &w.slots[wheel_slot_of(4096, 1)],
         "current: at 4500 nothing is due, and the slot of 4096 is the current slot");
  EXPECT_U64(w.cascaded, 0, "current: nothing moved to level 0");
  uvtw__wheel_insert(&w, &d.node, 5000); /* level 0, started after a and b */
  uvtw__wheel_insert(&w, &e.node, 4800); /* level 0 */
  EXPECT_U64(uvtw__wheel_next_deadline(&w), 4800, "current: the next deadline is level 0's");
  uvtw__wheel_expire(&w, 5000);
  tap_ok(pops_are(&w, (wheel_node_t *[]){&e.node, &a.node, &b.node, &d.node}, 4),
         "current: at 5000, 4800 first, then the 5000s in start order across the two levels");
  EXPECT_U64(uvtw__wheel_next_deadline(&w), 6000, "current: then the current slot's next entry");
  EXPECT_U64(uvtw__wheel_next_deadline_exact(&w), 6000, "current: exactly");
  tap_ok(uvtw__wheel_check(&w) == NULL, "current: the checker accepts the wheel");
  uvtw__wheel_expire(&w, 9000);
  tap_ok(uvtw__wheel_pop_expired(&w) == &c.node && wheel_current(&w) == NULL,
         "current: once all of it is due, its last entry expires and no slot is current");
  EXPECT_U64(w.count, 0, "current: nothing is left");
}

/* A current slot reached by an expiry that makes all of it due is merged
 * into the expired list among the level-0 entries due by then, in firing
 * order, its last entry behind all of them. */
static void test_current_slot_merged(void) {
  static wheel_t w;
  entry_t a, b, c, d, e;
  uvtw__wheel_init(&w, 0);
  uvtw__wheel_insert(&w, &a.node, 5000); /* level 1, the slot of 4096 */
  uvtw__wheel_insert(&w, &b.node, 5000);
  uvtw__wheel_insert(&w, &c.node, 6000);
  uvtw__wheel_expire(&w, 4500);          /* the slot of 4096 is current */
  uvtw__wheel_insert(&w, &d.node, 5000); /* level 0, started after a and b */
  uvtw__wheel_insert(&w, &e.node, 4800); /* level 0 */
  uvtw__wheel_expire(&w, 7000);
  tap_ok(wheel_current(&w) == NULL && uvtw__wheel_check(&w) == NULL,
         "merged: at 7000 no slot is current, and the checker accepts the wheel");
  wheel_node_t *order[6];
  for (int i = 0; i < 6; i++)
    order[i] = uvtw__wheel_pop_expired(&w);
  tap_ok(order[0] == &e.node && order[1] == &a.node && order[2] == &b.node && order[3] == &d.node &&
             order[4] == &c.node && order[5] == NULL,
         "merged: 4800, the 5000s in start order across the two levels, then 6000");
}

/* The entries of a list. */
static uint64_t list_length(const wheel_node_t *head) {
  uint64_t length = 0;
  for (const wheel_node_t *node = head->next; node != head; node = node->next)
    length++;
  return length;
}

/* Deadlines filed out of order in one level-1 slot: its first runs take
 * the entries that extend them in firing order, the last run the rest,
 * marked unsorted. When the slot's first tick comes, the last run alone is
 * cascaded into level 0, and the entries fire in deadline order, then
 * start order, from the runs and level 0 together. */
static void test_unsorted_upper_slot(void) {
  enum { N = 1000 };
  static wheel_t w;
  static entry_t e[N];
  uvtw__wheel_init(&w, 0);
  for (unsigned i = 0; i < N; i++) /* 20 deadlines, filed in random order */
    uvtw__wheel_insert(&w, &e[i].node, 8192 + 100 + rng_below(20));
  const wheel_node_t *last = &w.slots[wheel_slot_of(8192, 1) + WHEEL_RUNS - 1];
  uint64_t in_last = list_length(last);
  size_t index = (size_t)(last - w.slots);
  bool marked = w.unsorted[index / 64] >> index % 64 & 1;
  tap_ok(in_last > 0 && in_last < N - (WHEEL_RUNS - 1) && marked,
         "unsorted: the last run holds what the others could not take, marked unsorted");
  uvtw__wheel_expire(&w, 8192);
  tap_ok(uvtw__wheel_pop_expired(&w) == NULL && uvtw__wheel_check(&w) == NULL,
         "unsorted: none is due at 8192; the checker accepts the wheel");
  EXPECT_U64(w.cascaded, in_last, "unsorted: the last run, and only it, was cascaded to level 0");
  uvtw__wheel_expire(&w, 8192 + 200);
  wheel_node_t *prev = uvtw__wheel_pop_expired(&w), *node;
  unsigned fired = prev != NULL, in_order = fired;
  for (; (node = uvtw__wheel_pop_expired(&w)) != NULL; fired++, prev = node)
    in_order += !wheel_before(node, prev);
  EXPECT_U64(fired, N, "unsorted: all fire by 8392");
  EXPECT_U64(in_order, N, "unsorted: in deadline order, then start order");
}

/* A level-1 slot whose first run has emptied: reached, its unsorted last
 * run is still the one cascaded, and the runs fire in firing order. */
static void test_first_run_emptied(void) {
  static wheel_t w;
  entry_t a, b, c, d, e;
  uvtw__wheel_init(&w, 0);
  uvtw__wheel_insert(&w, &a.node, 9000); /* run 0 of the slot of 8192 */
  uvtw__wheel_insert(&w, &b.node, 8500); /* run 1 */
  uvtw__wheel_insert(&w, &c.node, 8400); /* run 2 */
  uvtw__wheel_insert(&w, &d.node, 8300); /* run 3 */
  uvtw__wheel_insert(&w, &e.node, 8200); /* run 3, out of order */
  uvtw__wheel_remove(&w, &a.node);
  uvtw__wheel_expire(&w, 8192);
  tap_ok(uvtw__wheel_pop_expired(&w) == NULL && uvtw__wheel_check(&w) == NULL,
         "first run emptied: none is due at 8192; the checker accepts the wheel");
  EXPECT_U64(w.cascaded, 2, "first run emptied: the last run's two entries were cascaded");
  uvtw__wheel_expire(&w, 9000);
  tap_ok(pops_are(&w, (wheel_node_t *[]){&e.node, &d.node, &c.node, &b.node}, 4),
         "first run emptied: 8200, 8300, 8400, 8500");
}

/* The unsorted mark compares an entry with its slot's tail: an entry due
 * after the slot's first entry and before its last makes the slot
 * unsorted, and it fires between them. */
static void test_filed_between(void) {
  static wheel_t w;
  entry_t a, b, c;
  uvtw__wheel_init(&w, 0);
  uvtw__wheel_insert(&w, &a.node, 5000); /* level 1, the slot of 4096 */
  uvtw__wheel_insert(&w, &b.node, 7000);
  uvtw__wheel_insert(&w, &c.node, 6000);
  uvtw__wheel_expire(&w, 5000);
  tap_ok(uvtw__wheel_pop_expired(&w) == &a.node && uvtw__wheel_pop_expired(&w) == NULL,
         "between: at 5000 the first entry fires alone");
  uvtw__wheel_expire(&w, 6000);
  tap_ok(uvtw__wheel_pop_expired(&w) == &c.node, "between: at 6000 the entry filed last fires");
  uvtw__wheel_expire(&w, 7000);
  tap_ok(uvtw__wheel_pop_expired(&w) == &b.node, "between: at 7000 the second entry fires");
  tap_ok(uvtw__wheel_check(&w) == NULL, "between: the checker accepts the wheel");
}

static void test_saturated(void) {
  static wheel_t w;
  entry_t e;
  uvtw__wheel_init(&w, 100);
  uvtw__wheel_insert(&w, &e.node, UINT64_MAX);
  uvtw__wheel_expire(&w, UINT64_MAX - 1);
  tap_ok(uvtw__wheel_pop_expired(&w) == NULL, "saturated: UINT64_MAX does not expire before it");
  EXPECT_U64(uvtw__wheel_next_deadline_exact(&w), UINT64_MAX,
             "saturated: next deadline is UINT64_MAX");
  tap_ok(uvtw__wheel_check(&w) == NULL, "saturated: the checker accepts the wheel");
}

static void test_remove_clears(void) {
  static wheel_t w;
  entry_t a, b;
  uvtw__wheel_init(&w, 0);
  uvtw__wheel_insert(&w, &a.node, 10);
  uvtw__wheel_insert(&w, &b.node, 10);
  uvtw__wheel_remove(&w, &a.node);
  EXPECT_U64(w.occupied[0], (uint64_t)1 << 10, "remove: a slot with an entry left keeps its bit");
  uvtw__wheel_remove(&w, &b.node);
  EXPECT_U64(w.occupied[0], 0, "remove: the last removal clears the slot's bit");
  uvtw__wheel_insert(&w, &a.node, 3);
  uvtw__wheel_insert(&w, &b.node, 3);
  uvtw__wheel_expire(&w, 3);
  uvtw__wheel_remove(&w, &a.node);
  tap_ok(uvtw__wheel_pop_expired(&w) == &b.node && uvtw__wheel_pop_expired(&w) == NULL,
         "remove: an expired entry can be removed before it is popped");
  tap_ok(!wheel_node_linked(&a.node) && !wheel_node_linked(&b.node),
         "remove: removed and popped entries are unlinked");
}

/* While expired entries wait to be popped, both next deadlines are the
 * first expired entry's, whatever the slots hold. */
static void test_next_deadline_expired(void) {
  static wheel_t w;
  entry_t a, b, c;
  uvtw__wheel_init(&w, 0);
  uvtw__wheel_insert(&w, &a.node, 5);
  uvtw__wheel_insert(&w, &b.node, 6);
  uvtw__wheel_insert(&w, &c.node, 9);
  uvtw__wheel_expire(&w, 7);
  EXPECT_U64(uvtw__wheel_next_deadline(&w), 5, "next deadline: the first expired entry's");
  EXPECT_U64(uvtw__wheel_next_deadline_exact(&w), 5,
             "next deadline, exact: the first expired entry's");
  tap_ok(uvtw__wheel_pop_expired(&w) == &a.node, "next deadline: the first expired pops first");
  EXPECT_U64(uvtw__wheel_next_deadline_exact(&w), 6,
             "next deadline, exact: the expired entry left, before the slots' 9");
  tap_ok(uvtw__wheel_pop_expired(&w) == &b.node && uvtw__wheel_pop_expired(&w) == NULL,
         "next deadline: the second expired pops, then nothing");
  EXPECT_U64(uvtw__wheel_next_deadline_exact(&w), 9, "next deadline, exact: then the slot's 9");
}

/* ---- the checker ------------------------------------------------------------ */

/* A wheel with entries on levels 0, 1 and 2 and in the expired list. */
static void checker_fixture(wheel_t *w, entry_t *e) {
  uvtw__wheel_init(w, 1000);
  uvtw__wheel_insert(w, &e[0].node, 1000);   /* expires below */
  uvtw__wheel_insert(w, &e[1].node, 1000);   /* expires below */
  uvtw__wheel_insert(w, &e[2].node, 1010);   /* level 0 */
  uvtw__wheel_insert(w, &e[3].node, 70000);  /* level 1, the slot starting at 69632 */
  uvtw__wheel_insert(w, &e[4].node, 70500);  /* level 1, same slot */
  uvtw__wheel_insert(w, &e[5].node, 300000); /* level 2 */
  uvtw__wheel_expire(w, 1000);
  uvtw__wheel_insert(w, &e[6].node, 1010); /* level 0, behind e[2] */
}

typedef struct {
  const char *name;
  void (*corrupt)(wheel_t *w, entry_t *e);
  const char *report; /* what the checker must say */
} corruption_t;

static wheel_node_t *slot_holding(wheel_t *w, const entry_t *e) {
  for (unsigned index = 0; index < WHEEL_SLOT_COUNT; index++)
    for (wheel_node_t *n = w->slots[index].next; n != &w->slots[index]; n = n->next)
      if (n == &e->node)
        return &w->slots[index];
  return NULL;
}

static void null_link(wheel_t *w, entry_t *e) {
  (void)w;
  e[3].node.prev = NULL;
}
static void broken_back_link(wheel_t *w, entry_t *e) {
  (void)w;
  e[4].node.prev = &e[2].node;
}
static void bit_without_entries(wheel_t *w, entry_t *e) {
  (void)e;
  w->occupied[WHEEL_SLOT_COUNT / 64 - 1] |= (uint64_t)1 << 63;
}
static void entries_without_bit(wheel_t *w, entry_t *e) {
  size_t index = (size_t)(slot_holding(w, &e[5]) - w->slots);
  w->occupied[index / 64] &= ~((uint64_t)1 << index % 64);
}
static void wrong_level0_slot(wheel_t *w, entry_t *e) {
  (void)w;
  e[2].node.deadline = 1011;
}
static void slot_after_deadline(wheel_t *w, entry_t *e) {
  (void)w;
  e[3].node.deadline = 69000;
}
static void level0_out_of_start_order(wheel_t *w, entry_t *e) {
  (void)w;
  uint64_t seq = e[2].node.seq;
  e[2].node.seq = e[6].node.seq;
  e[6].node.seq = seq;
}
static void upper_out_of_order(wheel_t *w, entry_t *e) {
  (void)w;
  e[3].node.deadline = 70500;
  e[4].node.deadline = 70000;
}
/* A wheel whose current slot is the level-1 slot of 4096, marked unsorted. */
static void current_unsorted(wheel_t *w, entry_t *e) {
  uvtw__wheel_init(w, 0);
  uvtw__wheel_insert(w, &e[0].node, 5000);
  uvtw__wheel_insert(w, &e[1].node, 6000);
  uvtw__wheel_expire(w, 4500);
  unsigned index = wheel_slot_of(4096, 1);
  w->unsorted[index / 64] |= (uint64_t)1 << index % 64;
}
static void first_run_unsorted(wheel_t *w, entry_t *e) {
  size_t index = (size_t)(slot_holding(w, &e[3]) - w->slots);
  w->unsorted[index / 64] |= (uint64_t)1 << index % 64;
}
static void maximum_too_low(wheel_t *w, entry_t *e) {
  slot_holding(w, &e[4])->seq = e[4].node.deadline - 1;
}
static void expired_out_of_start_order(wheel_t *w, entry_t *e) {
  (void)w;
  uint64_t seq = e[0].node.seq;
  e[0].node.seq = e[1].node.seq;
  e[1].node.seq = seq;
}
static void deadline_before_now(wheel_t *w, entry_t *e) {
  (void)w;
  e[2].node.deadline = 990;
}
static void minimum_too_high(wheel_t *w, entry_t *e) {
  slot_holding(w, &e[3])->deadline = 70100;
}
static void minimum_before_slot(wheel_t *w, entry_t *e) {
  slot_holding(w, &e[3])->deadline = 1000;
}
static void expired_not_due(wheel_t *w, entry_t *e) {
  (void)w;
  e[1].node.deadline = 1001;
}
static void expired_out_of_order(wheel_t *w, entry_t *e) {
  (void)w;
  e[0].node.deadline = 1000;
  e[1].node.deadline = 999;
}
static void count_off(wheel_t *w, entry_t *e) {
  (void)e;
  w->count++;
}
static void walk_off_the_list(wheel_t *w, entry_t *e) {
  w->ahead = &e[2].node;
}

static void test_checker(void) {
  static const corruption_t corruptions[] = {
      {"a NULL link", null_link, "a linked node has a NULL link"},
      {"a next that does not point back", broken_back_link,
       "a node's next does not point back to it"},
      {"an occupancy bit on an empty slot", bit_without_entries,
       "an occupancy bit disagrees with its slot"},
      {"an occupied slot without its bit", entries_without_bit,
       "an occupancy bit disagrees with its slot"},
      {"a level-0 entry in a slot its deadline does not name", wrong_level0_slot,
       "an entry is not in the slot its deadline names"},
      {"an entry in a slot after its deadline", slot_after_deadline,
       "an entry is not in the slot its deadline names"},
      {"a level-0 slot out of start order", level0_out_of_start_order,
       "a level-0 slot, or one not marked unsorted, is out of firing order"},
      {"an upper slot not marked unsorted out of deadline order", upper_out_of_order,
       "a level-0 slot, or one not marked unsorted, is out of firing order"},
      {"a current slot marked unsorted", current_unsorted, "the current slot is marked unsorted"},
      {"a level-1 run other than the last marked unsorted", first_run_unsorted,
       "a level-1 run other than the last is marked unsorted"},
      {"a slot's maximum below its last deadline", maximum_too_low,
       "a slot's maximum is below one of its deadlines"},
      {"expired entries with one deadline out of start order", expired_out_of_start_order,
       "expired entries are out of deadline and start order"},
      {"a deadline before the wheel's time", deadline_before_now,
       "a filed deadline is before the wheel's time"},
      {"a slot minimum above one of its deadlines", minimum_too_high,
       "a slot's minimum is above one of its deadlines"},
      {"a slot minimum before the slot starts", minimum_before_slot,
       "a slot's minimum lies before the slot"},
      {"an expired entry that is not due", expired_not_due, "an expired entry is not due"},
      {"expired entries out of order", expired_out_of_order,
       "expired entries are out of deadline and start order"},
      {"an entry count that disagrees with the lists", count_off,
       "the entry count disagrees with the lists"},
      {"a second walk outside the expired list", walk_off_the_list,
       "the second walk is not in the expired list"},
  };
  static wheel_t w;
  entry_t e[7];
  checker_fixture(&w, e);
  const char *clean = uvtw__wheel_check(&w);
  if (!tap_ok(clean == NULL, "checker: a sound wheel passes"))
    tap_diag("  reported: %s", clean);
  for (size_t i = 0; i < sizeof corruptions / sizeof corruptions[0]; i++) {
    checker_fixture(&w, e);
    corruptions[i].corrupt(&w, e);
    const char *report = uvtw__wheel_check(&w);
    if (!tap_ok(report != NULL && strcmp(report, corruptions[i].report) == 0, "checker: reports %s",
                corruptions[i].name))
      tap_diag("  expected \"%s\", got \"%s\"", corruptions[i].report,
               report ? report : "(nothing)");
  }
}

int main(int argc, char **argv) {
  static const tap_case_t cases[] = {
      TAP_CASE(model),
      TAP_CASE(fifo_across_levels),
      TAP_CASE(upper_into_ring),
      TAP_CASE(current_slot),
      TAP_CASE(current_slot_merged),
      TAP_CASE(unsorted_upper_slot),
      TAP_CASE(first_run_emptied),
      TAP_CASE(filed_between),
      TAP_CASE(saturated),
      TAP_CASE(remove_clears),
      TAP_CASE(next_deadline_expired),
      TAP_CASE(checker),
  };
  const char *seed_env = getenv("UVTW_SEED");
  rng_state = seed_env ? strtoull(seed_env, NULL, 10) : 0x9e3779b97f4a7c15u;
  if (rng_state == 0)
    rng_state = 1;
  tap_diag("seed %" PRIu64 " (set UVTW_SEED to repeat)", rng_state);
  return tap_run_cases(argc, argv, cases, sizeof cases / sizeof cases[0]);
}
