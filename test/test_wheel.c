/* The pure wheel under virtual time, against a reference model.
 *
 * The model is a plain array of entries; the next entry to fire is found by
 * a linear scan for the smallest (deadline, insertion sequence) among the
 * entries that are due and were inserted before the pass began. Every step
 * (insert, remove, restart, advance, and operations made from inside fire
 * callbacks) is mirrored in both, and after every step wheel_check() and the
 * exact next deadline are compared.
 *
 * UVTW_MODEL_STEPS sets the number of random steps, UVTW_MODEL_SEED the seed.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tap.h"
#include "wheel.h"

#define MAX_ENTRIES 256

typedef struct {
  wheel_entry_t entry;
  bool active;
  uint64_t deadline;
  uint64_t seq;  /* insertion order: FIFO among equal deadlines */
  uint64_t pass; /* the pass counter at insertion */
} item_t;

static wheel_t wheel;
static item_t items[MAX_ENTRIES];
static uint64_t seq_counter;
static uint64_t pass_counter; /* incremented at each advance */
static bool in_pass;
static uint64_t pass_now;
static uint64_t rng_state;
static uint64_t fired_total;
static bool failed;
static char failure[512];

static uint64_t rnd(void) { /* xorshift64* */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * UINT64_C(2685821657736338717);
}

static uint64_t rnd_below(uint64_t n) {
  return n ? rnd() % n : 0;
}

static void fail(const char *fmt, uint64_t a, uint64_t b) {
  if (failed)
    return;
  failed = true;
  snprintf(failure, sizeof failure, fmt, a, b);
}

/* A deadline drawn to hit every level, equal deadlines, slot edges, and the
 * saturated value. */
static uint64_t random_deadline(uint64_t now) {
  uint64_t room = UINT64_MAX - now;
  uint64_t delta;
  switch (rnd_below(10)) {
  case 0:
    delta = 0;
    break;
  case 1:
  case 2:
    delta = rnd_below(70);
    break;
  case 3:
    delta = rnd_below(5000);
    break;
  case 4: { /* near a slot boundary at a random level */
    unsigned level = (unsigned)rnd_below(WHEEL_LEVELS);
    uint64_t width = UINT64_C(1) << (level == 0 ? 0 : level_shift(level));
    if (rnd_below(4) == 0) /* and the old 64-tick edges */
      width = UINT64_C(1) << (6 * (unsigned)rnd_below(10));
    delta = width * (1 + rnd_below(3)) - (now & (width - 1));
    delta += rnd_below(3) - 1;
    break;
  }
  case 5: { /* two draws, sequenced: operand order would be unspecified */
    unsigned shift = (unsigned)rnd_below(64);
    delta = rnd() >> shift;
    break;
  }
  case 6: /* equal to an existing entry's deadline, if any */
    for (int tries = 0; tries < 4; tries++) {
      item_t *it = &items[rnd_below(MAX_ENTRIES)];
      if (it->active && it->deadline >= now)
        return it->deadline;
    }
    delta = rnd_below(100);
    break;
  case 7:
    return UINT64_MAX; /* saturated: never fires */
  case 8: /* already overdue, as a task that waited in the queue */
    return now - rnd_below(now < 100 ? now + 1 : 100);
  default:
    delta = rnd_below(300000);
    break;
  }
  return delta > room ? UINT64_MAX : now + delta;
}

/* Inserts and removals as uvtw_timer_start and _stop make them: a removal
 * of an entry not in the log is mostly deferred, and an insert of the entry
 * just removed puts it back and logs the restart (wheel_reinsert). */
static uint64_t deferred_removals, inserts_in_place;
static void model_insert(item_t *it, uint64_t deadline) {
  it->active = true;
  it->deadline = deadline;
  it->seq = seq_counter++;
  it->pass = pass_counter;
  if (&it->entry == wheel.removed) {
    if (wheel_reinsert(&wheel, &it->entry, deadline))
      wheel_flush(&wheel);
    inserts_in_place++;
  } else {
    wheel_insert(&wheel, &it->entry, deadline);
  }
}

static void model_remove(item_t *it) {
  it->active = false;
  if (!wheel_maybe_logged(&wheel, &it->entry) && rnd_below(4) != 0) {
    wheel_remove_deferred(&wheel, &it->entry);
    deferred_removals++;
  } else {
    wheel_remove(&wheel, &it->entry);
  }
}

/* A restart as uvtw_timer_start makes it: in place if the wheel can
 * (wheel_restart_lazy), else through the log. To the model, a remove and
 * an insert either way. */
static uint64_t lazy_restarts;
static void model_restart(item_t *it, uint64_t deadline) {
  it->deadline = deadline;
  it->seq = seq_counter++;
  it->pass = pass_counter;
  if (wheel_restart_lazy(&wheel, &it->entry, deadline))
    lazy_restarts++;
  else
    wheel_restart(&wheel, &it->entry, deadline);
}

/* A later deadline for an active entry, as an idle timeout pushed back:
 * often equal to another entry's, often in a later upper slot. */
static uint64_t bumped_deadline(const item_t *it, uint64_t now) {
  switch (rnd_below(4)) {
  case 0: { /* equal to another active entry's, if that is later */
    const item_t *other = &items[rnd_below(MAX_ENTRIES)];
    if (other->active && other->deadline >= it->deadline)
      return other->deadline;
    break;
  }
  case 1: /* a few ticks on */
    if (it->deadline < UINT64_MAX - 8)
      return it->deadline + rnd_below(8);
    break;
  case 2: /* the same timeout from now, as a server re-arms it */
    if (now < UINT64_MAX - 5000)
      return now + 5000 + rnd_below(3);
    break;
  default: /* up to two upper slots on */
    if (it->deadline < UINT64_MAX - 2 * WHEEL_L0_SLOTS)
      return it->deadline + rnd_below(2 * WHEEL_L0_SLOTS);
    break;
  }
  return random_deadline(now);
}

/* The entry the model says must fire next in this pass, or NULL. */
static item_t *model_next_due(void) {
  item_t *best = NULL;
  for (int i = 0; i < MAX_ENTRIES; i++) {
    item_t *it = &items[i];
    /* Inserted during this pass with a due deadline: waits for the next. */
    if (!it->active || it->deadline > pass_now || it->pass == pass_counter)
      continue;
    if (best == NULL || it->deadline < best->deadline ||
        (it->deadline == best->deadline && it->seq < best->seq))
      best = it;
  }
  return best;
}

static uint64_t model_min_deadline(void) {
  uint64_t min = UINT64_MAX;
  for (int i = 0; i < MAX_ENTRIES; i++)
    if (items[i].active && items[i].deadline < min)
      min = items[i].deadline;
  return min;
}

/* A random operation on a random entry, from inside a callback or not. */
static void random_operation(uint64_t now) {
  item_t *it = &items[rnd_below(MAX_ENTRIES)];
  if (it->active) {
    switch (rnd_below(13)) {
    case 0: case 1: case 2: case 3: case 4: case 5:
      model_remove(it);
      break;
    case 6: case 7: /* restart by hand, often as an idle timeout pushed back */
      model_remove(it);
      model_insert(it, rnd_below(2) ? bumped_deadline(it, now) : random_deadline(now));
      break;
    case 8: /* a burst of logged restarts, often past the log's size */
      for (uint64_t n = rnd_below(2 * WHEEL_LOG + 10); n > 0; n--) {
        item_t *other = &items[rnd_below(MAX_ENTRIES)];
        if (other->active)
          model_restart(other, rnd_below(4) == 0 ? now + rnd_below(3) : random_deadline(now));
      }
      break;
    case 9: /* a burst of idle timeouts pushed back, mostly in place, by
               restarts or by stop+start pairs (put back and logged), to
               later deadlines or, for some pairs, any */
      for (uint64_t n = rnd_below(2 * WHEEL_LOG + 10); n > 0; n--) {
        item_t *other = &items[rnd_below(MAX_ENTRIES)];
        if (!other->active)
          continue;
        if (rnd_below(2) == 0) {
          model_restart(other, bumped_deadline(other, now));
        } else {
          uint64_t deadline = rnd_below(4) == 0 ? random_deadline(now) : bumped_deadline(other, now);
          model_remove(other);
          model_insert(other, deadline);
        }
      }
      break;
    default:
      model_restart(it, random_deadline(now));
      break;
    }
  } else {
    model_insert(it, random_deadline(now));
  }
}

static void on_fire(wheel_entry_t *entry, void *ctx) {
  (void)ctx;
  item_t *it = (item_t *)entry;
  item_t *expected = model_next_due();
  fired_total++;
  if (it != expected) {
    fail("fired entry %" PRIu64 " but the model expected entry %" PRIu64,
         (uint64_t)(it - items), expected ? (uint64_t)(expected - items) : UINT64_MAX);
    return;
  }
  if (it->deadline > pass_now)
    fail("fired early: deadline %" PRIu64 " at time %" PRIu64, it->deadline, pass_now);
  if (wheel_entry_linked(entry))
    fail("entry %" PRIu64 " still linked inside its callback (time %" PRIu64 ")",
         (uint64_t)(it - items), pass_now);
  it->active = false;
  /* Callbacks act on the wheel: restart themselves (possibly already due),
   * stop or start others, including ones due in this same pass. */
  unsigned ops = (unsigned)rnd_below(4);
  for (uint64_t i = 0; i < ops && !failed; i++) {
    if (!it->active && rnd_below(3) == 0) /* restart self, often already due */
      model_insert(it, rnd_below(2) ? pass_now : random_deadline(pass_now));
    else
      random_operation(pass_now);
    if (items[0].active && !wheel_entry_linked(&items[0].entry))
      fail("model and wheel disagree on entry 0 at op %" PRIu64 " (time %" PRIu64 ")", i, pass_now);
  }
}

static uint64_t random_advance(uint64_t now) {
  uint64_t room = UINT64_MAX - 1 - now;
  uint64_t delta;
  switch (rnd_below(8)) {
  case 0:
    delta = 0;
    break;
  case 1:
  case 2:
  case 3:
    delta = rnd_below(8);
    break;
  case 4:
    delta = rnd_below(200);
    break;
  case 5:
    delta = rnd_below(20000);
    break;
  case 6: /* jump to just before/at the earliest deadline (if not overdue) */
    delta = model_min_deadline() > now ? model_min_deadline() - now : 0;
    if (delta > 0 && rnd_below(2))
      delta--;
    break;
  default: {
    unsigned shift = 20 + (unsigned)rnd_below(44);
    delta = rnd() >> shift;
    break;
  }
  }
  return delta > room ? now + room : now + delta;
}

static bool check_step(uint64_t step) {
  /* Every slot visited at one step in 64; the others rely on the count. */
  const char *broken = wheel_check(&wheel, step % 64 == 0);
  if (broken != NULL) {
    snprintf(failure, sizeof failure, "step %" PRIu64 ": wheel_check: %s", step, broken);
    return false;
  }
  uint64_t count = 0;
  for (int i = 0; i < MAX_ENTRIES; i++)
    count += items[i].active;
  if (count != wheel.count) {
    snprintf(failure, sizeof failure, "step %" PRIu64 ": wheel holds %" PRIu64 ", model %" PRIu64,
             step, wheel.count, count);
    return false;
  }
  /* Asking for the next deadline applies the restart log; mostly leave the
   * log alone, so that logged restarts meet later operations. */
  if (rnd_below(4) != 0)
    return true;
  uint64_t exact = wheel_next_deadline_exact(&wheel);
  uint64_t want = model_min_deadline();
  /* A due entry is reported as the wheel's now. */
  if (want <= wheel.now)
    want = wheel.now;
  if (count > 0 && exact != want) {
    snprintf(failure, sizeof failure,
             "step %" PRIu64 ": next deadline %" PRIu64 ", model %" PRIu64, step, exact, want);
    return false;
  }
  if (count > 0 && wheel_next_deadline(&wheel) > exact) {
    snprintf(failure, sizeof failure, "step %" PRIu64 ": the lower bound is above the exact value",
             step);
    return false;
  }
  return true;
}

static bool run_model(uint64_t seed, uint64_t steps, uint64_t start) {
  memset(items, 0, sizeof items);
  seq_counter = pass_counter = fired_total = lazy_restarts = 0;
  deferred_removals = inserts_in_place = 0;
  failed = false;
  rng_state = seed ? seed : 1;
  wheel_init(&wheel, start);
  uint64_t now = start;
  for (uint64_t step = 0; step < steps; step++) {
    if (rnd_below(3) == 0) {
      now = random_advance(now);
      pass_counter++;
      pass_now = now;
      in_pass = true;
      wheel_advance(&wheel, now, on_fire, NULL);
      in_pass = false;
      if (!failed && model_next_due() != NULL)
        fail("pass to %" PRIu64 " left due entry %" PRIu64 " behind", now,
             (uint64_t)(model_next_due() - items));
      pass_counter++; /* entries inserted during the pass are now eligible */
    } else {
      random_operation(now);
    }
    if (failed) {
      char tmp[512];
      snprintf(tmp, sizeof tmp, "%s", failure);
      snprintf(failure, sizeof failure, "step %" PRIu64 ": %.400s", step, tmp);
      return false;
    }
    if (!check_step(step))
      return false;
  }
  return true;
}

/* Hand-written cases that read as specifications. */
static item_t *fired_order[16];
static int fired_count;

static void record_fire(wheel_entry_t *entry, void *ctx) {
  (void)ctx;
  if (fired_count < 16)
    fired_order[fired_count] = (item_t *)entry;
  fired_count++;
}

static void restart_due_fire(wheel_entry_t *entry, void *ctx) {
  record_fire(entry, ctx);
  /* Restart as already due: must wait for the next pass. */
  wheel_insert(&wheel, entry, wheel.due_limit);
}

static void test_basics(void) {
  static item_t a, b, c, d;
  memset(&a, 0, sizeof a);
  memset(&b, 0, sizeof b);
  memset(&c, 0, sizeof c);
  memset(&d, 0, sizeof d);
  wheel_init(&wheel, 1000);

  TAP_EQ(wheel_next_deadline(&wheel), UINT64_MAX, "an empty wheel has no next deadline");
  wheel_insert(&wheel, &a.entry, 5000);
  wheel_insert(&wheel, &b.entry, 1001);
  wheel_insert(&wheel, &c.entry, 5000); /* equal to a, inserted later */
  wheel_insert(&wheel, &d.entry, UINT64_MAX);
  tap_ok(wheel_check(&wheel, true) == NULL, "invariants hold after inserts on several levels");
  TAP_EQ(wheel_next_deadline(&wheel), 1001, "the next deadline is the earliest entry");
  wheel_remove(&wheel, &b.entry);
  TAP_EQ(wheel_next_deadline_exact(&wheel), 5000,
         "after removing the earliest, the exact next deadline is the next entry");

  fired_count = 0;
  wheel_advance(&wheel, 4999, record_fire, NULL);
  TAP_EQ(fired_count, 0, "nothing fires one tick before the earliest deadline");
  wheel_advance(&wheel, 5000, record_fire, NULL);
  TAP_EQ(fired_count, 2, "both entries due at 5000 fire at 5000");
  tap_ok(fired_order[0] == &a && fired_order[1] == &c,
         "equal deadlines fire in insertion order after cascading");
  TAP_EQ(wheel.count, 1, "the saturated entry stays");
  wheel_advance(&wheel, UINT64_MAX - 1, record_fire, NULL);
  TAP_EQ(fired_count, 2, "a saturated deadline never fires, even at the largest time");
  wheel_remove(&wheel, &d.entry);
  tap_ok(wheel_check(&wheel, true) == NULL && wheel.count == 0, "removing the last entry empties every bitmap");

  /* FIFO across levels: a is filed high, c filed after a has cascaded. */
  wheel_init(&wheel, 0);
  wheel_insert(&wheel, &a.entry, 10000);
  wheel_advance(&wheel, 9990, record_fire, NULL); /* a cascades down */
  wheel_insert(&wheel, &c.entry, 10000);
  fired_count = 0;
  wheel_advance(&wheel, 20000, record_fire, NULL);
  tap_ok(fired_count == 2 && fired_order[0] == &a && fired_order[1] == &c,
         "an entry inserted after an older one with the same deadline cascaded fires after it");

  /* Entries made due inside a pass wait for the next pass. */
  wheel_init(&wheel, 0);
  wheel_insert(&wheel, &a.entry, 3);
  fired_count = 0;
  wheel_advance(&wheel, 10, restart_due_fire, NULL);
  TAP_EQ(fired_count, 1, "an entry restarting itself as due does not fire again in the same pass");
  tap_ok(wheel_entry_linked(&a.entry) && wheel_next_deadline(&wheel) <= wheel.now,
         "the restarted entry is pending and due");
  wheel_advance(&wheel, 10, restart_due_fire, NULL);
  TAP_EQ(fired_count, 2, "it fires once in the next pass");
  wheel_remove(&wheel, &a.entry);

  /* Out-of-order overdue inserts are handed out in deadline order, stably:
   * recent ones through the due buckets, older ones through the sort. */
  static item_t e, f;
  memset(&e, 0, sizeof e);
  memset(&f, 0, sizeof f);
  wheel_init(&wheel, 1000);
  wheel_insert(&wheel, &a.entry, 990);
  wheel_insert(&wheel, &b.entry, 500);
  wheel_insert(&wheel, &c.entry, 990);
  wheel_insert(&wheel, &d.entry, 700);
  wheel_insert(&wheel, &e.entry, 940);
  wheel_insert(&wheel, &f.entry, 600);
  tap_ok(wheel_check(&wheel, true) == NULL && wheel.due_old_unsorted,
         "an entry more than 63 ticks overdue, inserted out of order, marks the old list unsorted");
  fired_count = 0;
  wheel_advance(&wheel, 1000, record_fire, NULL);
  tap_ok(fired_count == 6 && fired_order[0] == &b && fired_order[1] == &f && fired_order[2] == &d &&
             fired_order[3] == &e && fired_order[4] == &a && fired_order[5] == &c,
         "overdue entries fire in deadline order, FIFO among equals");

  /* An old due list marked unsorted, then emptied by removals. */
  wheel_init(&wheel, 1000);
  wheel_insert(&wheel, &a.entry, 900);
  wheel_insert(&wheel, &b.entry, 500);
  wheel_remove(&wheel, &a.entry);
  wheel_remove(&wheel, &b.entry);
  fired_count = 0;
  wheel_advance(&wheel, 1001, record_fire, NULL);
  tap_ok(fired_count == 0 && wheel_check(&wheel, true) == NULL,
         "a pass over an emptied, unsorted old due list hands out nothing and returns");
}

/* Logged restarts against inserts and removals, by hand. */
/* The ring's walk ahead (warm_ring) keeps the addresses of the next
 * occupied ring slots' entries, and a slot fires with them only if it was
 * walked. A walk that runs out of occupied slots must not count as walked
 * the part of the ring that the next block's cascade fills later. */
static int plan_seen, plan_missing;

static void fire_check_plan(wheel_entry_t *entry, void *ctx) {
  (void)ctx;
  bool found = false;
  for (unsigned k = 0; k < WHEEL_WARM_SLOTS; k++)
    if (wheel.warm[k].tick == entry->deadline && wheel.warm[k].front + wheel.warm[k].back >= 1)
      found = true;
  if (found)
    plan_seen++;
  else
    plan_missing++;
}

static void test_warm_plans(void) {
  static item_t it[4];
  /* Two in this block (the ring), two in the block after next (level 1). */
  static const uint64_t deadline[4] = {10, 20, 4100, 4100};
  memset(it, 0, sizeof it);
  wheel_init(&wheel, 0);
  for (int i = 0; i < 4; i++)
    wheel_insert(&wheel, &it[i].entry, deadline[i]);
  plan_seen = plan_missing = 0;
  wheel_advance(&wheel, 20, fire_check_plan, NULL); /* walks 10 and 20, and runs out */
  TAP_EQ(plan_seen, 2, "the two ring slots fire with their entries' addresses");
  TAP_EQ(wheel.warmed, 2 * WHEEL_BLOCK, "a walk that runs out counts the ring as walked, no further");
  wheel_advance(&wheel, WHEEL_BLOCK, fire_check_plan, NULL); /* cascades 4100 into the ring */
  wheel_advance(&wheel, 4100, fire_check_plan, NULL);
  tap_ok(plan_seen == 4 && plan_missing == 0,
         "a slot the next block's cascade filled is walked before it fires");
  TAP_EQ(wheel.count, 0, "every entry fired");
}

/* Zeroes `n` items and starts the wheel afresh at time 0. */
static void fresh_wheel(item_t *const *list, int n) {
  for (int i = 0; i < n; i++)
    memset(list[i], 0, sizeof *list[i]);
  wheel_init(&wheel, 0);
}

static void test_restart_log(void) {
  static item_t a, b, c, d;
  fresh_wheel((item_t *const[]){&a, &b, &c, &d}, 4);
  wheel_insert(&wheel, &a.entry, 100);
  wheel_insert(&wheel, &b.entry, 100);
  wheel_insert(&wheel, &c.entry, 100);
  wheel_restart(&wheel, &b.entry, 200);
  wheel_restart(&wheel, &a.entry, 200);
  TAP_EQ(wheel.log_len, 2, "restarts are logged, not applied");
  TAP_EQ(a.entry.deadline, 200, "a logged restart changes the entry's deadline at once");
  tap_ok(wheel_check(&wheel, true) == NULL, "invariants hold with restarts logged");
  wheel_insert(&wheel, &d.entry, 200);
  TAP_EQ(wheel.log_len, 0, "an insert applies the log first");
  fired_count = 0;
  wheel_advance(&wheel, 100, record_fire, NULL);
  tap_ok(fired_count == 1 && fired_order[0] == &c, "only the entry not restarted fires at 100");
  wheel_advance(&wheel, 200, record_fire, NULL);
  tap_ok(fired_count == 4 && fired_order[1] == &b && fired_order[2] == &a && fired_order[3] == &d,
         "restarted entries fire in restart order, before a later insert with their deadline");

  /* Restarted twice: the last restart decides both deadline and place. */
  wheel_init(&wheel, 0);
  wheel_insert(&wheel, &a.entry, 50);
  wheel_insert(&wheel, &b.entry, 50);
  wheel_restart(&wheel, &a.entry, 300);
  wheel_restart(&wheel, &b.entry, 300);
  wheel_restart(&wheel, &a.entry, 300);
  tap_ok(wheel_check(&wheel, true) == NULL, "an entry logged twice is checked by its last restart");
  wheel_remove(&wheel, &b.entry);
  TAP_EQ(wheel_next_deadline_exact(&wheel), 300, "a removal applies the log before it unlinks");
  fired_count = 0;
  wheel_advance(&wheel, 300, record_fire, NULL);
  tap_ok(fired_count == 1 && fired_order[0] == &a && wheel.count == 0,
         "the entry restarted twice fires once, at its last deadline");

  /* A full log applies itself; the earliest deadline may move earlier. */
  static item_t many[WHEEL_LOG + 1];
  memset(many, 0, sizeof many);
  wheel_init(&wheel, 0);
  for (int i = 0; i <= WHEEL_LOG; i++)
    wheel_insert(&wheel, &many[i].entry, 1000);
  for (int i = 0; i < WHEEL_LOG; i++)
    wheel_restart(&wheel, &many[i].entry, 2000 - (uint64_t)i);
  TAP_EQ(wheel.log_len, 0, "a full log is applied by the restart that fills it");
  wheel_restart(&wheel, &many[WHEEL_LOG].entry, 5);
  TAP_EQ(wheel_next_deadline(&wheel), 5, "the next deadline sees a logged restart to an earlier time");
  tap_ok(wheel_check(&wheel, true) == NULL, "invariants hold after a full log was applied");
}

/* Restarts that leave an entry where it is (wheel_restart_lazy). */
static void test_restart_in_place(void) {
  static item_t a, b, c, e, f, g;
  fresh_wheel((item_t *const[]){&a, &b, &c}, 3);
  /* Level 1 (the ring ends at 4096): one 2048-tick slot, in start order. */
  wheel_insert(&wheel, &a.entry, 10000);
  wheel_insert(&wheel, &b.entry, 10005);
  wheel_insert(&wheel, &c.entry, 10010);
  tap_ok(wheel_restart_lazy(&wheel, &a.entry, 10010), "a restart to a later upper-level deadline stays in place");
  tap_ok(wheel_restart_lazy(&wheel, &b.entry, 10010), "so does a second one, to the same deadline");
  tap_ok(a.entry.next == &b.entry && b.entry.next == &c.entry,
         "the list keeps its order: the entries were not moved");
  tap_ok(!wheel_restart_lazy(&wheel, &c.entry, 10001) && c.entry.deadline == 10010,
         "a restart to an earlier deadline is refused and changes nothing");
  tap_ok(wheel_check(&wheel, true) == NULL, "invariants hold with entries restarted in place");
  fired_count = 0;
  wheel_advance(&wheel, 10009, record_fire, NULL);
  TAP_EQ(fired_count, 0, "nothing fires before the new deadline");
  wheel_advance(&wheel, 10010, record_fire, NULL);
  tap_ok(fired_count == 3 && fired_order[0] == &c && fired_order[1] == &a && fired_order[2] == &b,
         "equal deadlines fire in start order: the entry not restarted, then the restarts in turn");

  /* Restarted in place to a later slot than its own: the exact next
   * deadline must look past the slot it sits in. */
  fresh_wheel((item_t *const[]){&e, &f, &g}, 3);
  wheel_insert(&wheel, &e.entry, 5000); /* level 1, slot 2: [4096, 6144) */
  tap_ok(wheel_restart_lazy(&wheel, &e.entry, 7000), "a restart into the next upper slot stays in place");
  wheel_insert(&wheel, &f.entry, 6500); /* slot 3 */
  wheel_insert(&wheel, &g.entry, 7000); /* slot 3, the same deadline as e, started later */
  TAP_EQ(wheel_next_deadline_exact(&wheel), 6500, "the exact next deadline is in the later slot");
  tap_ok(wheel_next_deadline(&wheel) <= 6500, "the cheap next deadline stays a lower bound");
  tap_ok(wheel_check(&wheel, true) == NULL, "invariants hold with an entry in an earlier slot than its deadline's");
  fired_count = 0;
  wheel_advance(&wheel, 7000, record_fire, NULL);
  tap_ok(fired_count == 3 && fired_order[0] == &f && fired_order[1] == &e && fired_order[2] == &g,
         "after both cascades, deadlines in order and FIFO between e and g");
  TAP_EQ(wheel.count, 0, "every entry fired");

  /* Not in place: ring entries, and entries whose restart is still logged. */
  fresh_wheel((item_t *const[]){&a, &b}, 2);
  wheel_insert(&wheel, &a.entry, 100);
  wheel_insert(&wheel, &b.entry, 9000);
  tap_ok(!wheel_restart_lazy(&wheel, &a.entry, 200), "a ring entry is not restarted in place");
  wheel_restart(&wheel, &b.entry, 9100);
  tap_ok(!wheel_restart_lazy(&wheel, &b.entry, 9200) && b.entry.deadline == 9100,
         "nor is an entry whose last restart is still in the log");
}

/* A stop and a start of the same entry (wheel_remove_deferred, then
 * wheel_reinsert): put back and logged; the flush leaves it in place or
 * moves it. Stops of entries not in the log leave the log alone. */
static void test_reinsert(void) {
  static item_t a, b, c, d;
  fresh_wheel((item_t *const[]){&a, &b, &c, &d}, 4);
  wheel_insert(&wheel, &a.entry, 10000); /* one level-1 slot, in start order */
  wheel_insert(&wheel, &b.entry, 10005);
  wheel_insert(&wheel, &c.entry, 10010);
  wheel_insert(&wheel, &d.entry, 3000); /* the ring */

  wheel_remove_deferred(&wheel, &a.entry);
  tap_ok(!wheel_entry_linked(&a.entry) && wheel.count == 3, "a deferred stop unlinks at once");
  tap_ok(!wheel_reinsert(&wheel, &a.entry, 10010), "a start right after puts it back, logged");
  tap_ok(wheel_entry_linked(&a.entry) && a.entry.deadline == 10010 && wheel.log_len == 1 &&
             wheel.count == 4,
         "active at once, with its new deadline");
  wheel_remove_deferred(&wheel, &b.entry); /* not logged: the log stays */
  TAP_EQ(wheel.log_len, 1, "a stop of an entry not in the log leaves the log as it is");
  tap_ok(wheel_maybe_logged(&wheel, &a.entry) && !wheel_maybe_logged(&wheel, &c.entry),
         "an entry restarted since the oldest logged restart may be logged; one before may not");
  tap_ok(!wheel_reinsert(&wheel, &b.entry, 8000), "an earlier deadline is logged too");
  tap_ok(wheel_check(&wheel, true) == NULL, "invariants hold with the log and a removal pending");
  wheel_remove_deferred(&wheel, &d.entry);
  tap_ok(!wheel_reinsert(&wheel, &d.entry, 9000), "and so is a ring entry's restart");
  wheel_flush(&wheel);
  TAP_EQ(wheel.log_len, 0, "the flush empties the log");
  tap_ok(a.entry.prev == &wheel.slots[WHEEL_ROW_BASE(1) + 4] && a.entry.next == &c.entry,
         "a later deadline past the ring: left in place");
  tap_ok(c.entry.prev == &a.entry && b.entry.prev == &wheel.slots[WHEEL_ROW_BASE(1) + 3],
         "an earlier one: moved to its own slot");
  tap_ok(d.entry.prev == &c.entry, "a ring entry: moved, to the tail of its new slot");
  tap_ok(wheel_check(&wheel, true) == NULL, "invariants hold after the flush");
  fired_count = 0;
  wheel_advance(&wheel, 10010, record_fire, NULL);
  tap_ok(fired_count == 4 && fired_order[0] == &b && fired_order[1] == &d &&
             fired_order[2] == &c && fired_order[3] == &a,
         "deadlines in order, equal ones in start order (c before a, restarted after it)");
}

int main(void) {
  const char *env_steps = getenv("UVTW_MODEL_STEPS");
  const char *env_seed = getenv("UVTW_MODEL_SEED");
  uint64_t steps = env_steps ? strtoull(env_steps, NULL, 10) : 2000000;
  uint64_t seed = env_seed ? strtoull(env_seed, NULL, 10) : 0x5eed;

  test_basics();
  test_restart_log();
  test_warm_plans();
  test_restart_in_place();
  test_reinsert();

  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  /* Three runs: from time 0, from a time with many set bits, and near the
   * end of the 64-bit range. */
  uint64_t starts[3] = {0, UINT64_C(0x0000123456789abc), UINT64_MAX - (UINT64_C(1) << 56)};
  for (int i = 0; i < 3; i++) {
    bool ok = run_model(seed + (uint64_t)i, steps / 3, starts[i]);
    tap_ok(ok, "randomized model run %d (start %" PRIu64 ", %" PRIu64 " steps, seed %" PRIu64
               "): same callbacks, same order, same times, invariants after every step",
           i, starts[i], steps / 3, seed + (uint64_t)i);
    if (!ok)
      tap_diag("%s", failure);
    tap_ok(fired_total > steps / 3, "model run %d fired a meaningful number of entries (%" PRIu64 ")",
           i, fired_total);
    tap_ok(lazy_restarts > steps / 30, "model run %d restarted entries in place (%" PRIu64 " times)",
           i, lazy_restarts);
    tap_ok(deferred_removals > steps / 30 && inserts_in_place > steps / 300,
           "model run %d deferred removals (%" PRIu64 ") and undid some of them (%" PRIu64 ")", i,
           deferred_removals, inserts_in_place);
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  tap_diag("model: %" PRIu64 " steps in %.2f s", steps,
           (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
  return tap_done();
}
