/* Fuzz target: the pure wheel (src/wheel.h, src/wheel.c) against a plain
 * reference, with the invariant checker (uvtw__wheel_check, src/wheel.c) after every
 * step.
 *
 * The input sets the wheel's starting time, then each step takes an
 * operation byte and its arguments:
 *   insert    an entry (a restart if it is pending) at a deadline in the
 *             past, saturated, equal to others, or any distance ahead;
 *   remove    a pending entry, expired or not;
 *   restart   a pending entry to a later deadline: unlinked and filed
 *             again, as a restart does;
 *   expire    to a later time, a little or far, or to the next deadline;
 *   pop       the first expired entry.
 * The reference is an array of entries, each with its deadline, its start
 * order and whether the last expiry reached it. After every step:
 * uvtw__wheel_check passes; a pop hands back the reference's earliest expired
 * entry by (deadline, start order), or nothing when it has none; the next
 * deadline is a lower bound of the reference's earliest, and the exact one
 * equals it; the wheel's count is the reference's. */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "fuzz.h"
#include "wheel.h"

enum { ENTRIES = 64, MAX_STEPS = 512 };

typedef struct entry_s {
  wheel_node_t node; /* first: a node's address is its entry's */
  bool pending;      /* in the wheel */
  bool expired;      /* reached by an expiry since it was filed */
  uint64_t deadline; /* as filed: never before the wheel's time then */
  uint64_t seq;      /* start order */
} entry_t;

typedef struct model_s {
  wheel_t wheel;
  entry_t entries[ENTRIES];
  uint64_t seq;   /* the next start order */
  uint64_t count; /* pending entries */
} model_t;

/* The reference's earliest pending entry by (deadline, start order), among
 * the expired ones only if `expired_only`; NULL if none. */
static entry_t *earliest(model_t *m, bool expired_only) {
  entry_t *best = NULL;
  for (int i = 0; i < ENTRIES; i++) {
    entry_t *e = &m->entries[i];
    if (!e->pending || (expired_only && !e->expired))
      continue;
    if (best == NULL || e->deadline < best->deadline ||
        (e->deadline == best->deadline && e->seq < best->seq))
      best = e;
  }
  return best;
}

static uint64_t deadline_from(fuzz_input_t *in, uint64_t now) {
  switch (fuzz_byte(in) % 6) {
  case 0: { /* in the past: filed at the wheel's time */
    uint64_t back = fuzz_byte(in) % 8;
    return back < now ? now - back : 0;
  }
  case 1:
    return UINT64_MAX;
  case 2: /* a few distinct deadlines, shared by many entries */
    return fuzz_add_saturating(now, fuzz_byte(in) % 4);
  default:
    return fuzz_add_saturating(now, fuzz_magnitude(in));
  }
}

static void unlink_entry(model_t *m, entry_t *e) {
  uvtw__wheel_remove(&m->wheel, &e->node);
  e->pending = false;
  m->count--;
}

static void insert(model_t *m, entry_t *e, uint64_t deadline) {
  uint64_t now = m->wheel.now;
  if (e->pending)
    unlink_entry(m, e);
  uvtw__wheel_insert(&m->wheel, &e->node, deadline);
  e->pending = true;
  e->expired = false;
  e->deadline = deadline < now ? now : deadline;
  e->seq = m->seq++;
  m->count++;
}

/* A restart to a later deadline: unlinked and filed again in one call, as
 * a restart of a timer does (uvtw__wheel_refile). */
static void restart_later(fuzz_input_t *in, model_t *m, entry_t *e) {
  uint64_t later = fuzz_add_saturating(e->deadline, fuzz_magnitude(in));
  uvtw__wheel_refile(&m->wheel, &e->node, later);
  e->expired = false;
  e->deadline = later < m->wheel.now ? m->wheel.now : later;
  e->seq = m->seq++;
}

static void expire(model_t *m, uint64_t now) {
  uvtw__wheel_expire(&m->wheel, now);
  for (int i = 0; i < ENTRIES; i++)
    if (m->entries[i].pending && m->entries[i].deadline <= now)
      m->entries[i].expired = true;
}

static void pop(fuzz_input_t *in, model_t *m) {
  wheel_node_t *node = uvtw__wheel_pop_expired(&m->wheel);
  entry_t *want = earliest(m, true);
  FUZZ_CHECK(in, node == (want != NULL ? &want->node : NULL),
             "a pop hands back the earliest expired entry by (deadline, start order)");
  if (want != NULL) {
    want->pending = false;
    m->count--;
  }
}

static void check(fuzz_input_t *in, model_t *m) {
  const char *broken = uvtw__wheel_check(&m->wheel);
  if (broken != NULL)
    fprintf(stderr, "uvtw__wheel_check: %s\n", broken);
  FUZZ_CHECK(in, broken == NULL, "wheel_check finds every invariant holding");
  FUZZ_CHECK(in, m->wheel.count == m->count, "the wheel counts the pending entries");
  entry_t *first = earliest(m, false);
  uint64_t want = first != NULL ? first->deadline : UINT64_MAX;
  FUZZ_CHECK(in, uvtw__wheel_next_deadline(&m->wheel) <= want,
             "the next deadline is not after the earliest pending one");
  FUZZ_CHECK(in, uvtw__wheel_next_deadline_exact(&m->wheel) == want,
             "the exact next deadline is the earliest pending one");
  for (int i = 0; i < ENTRIES; i++)
    FUZZ_CHECK(in, wheel_node_linked(&m->entries[i].node) == m->entries[i].pending,
               "an entry is linked exactly while pending");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static model_t m;
  fuzz_input_t in = {data, size, 0};
  memset(m.entries, 0, sizeof m.entries);
  m.seq = 0;
  m.count = 0;
  uvtw__wheel_init(&m.wheel, fuzz_magnitude(&in));
  for (int step = 0; step < MAX_STEPS && fuzz_more(&in); step++) {
    uint8_t op = fuzz_byte(&in);
    entry_t *e = &m.entries[fuzz_byte(&in) % ENTRIES];
    uint64_t now = m.wheel.now;
    switch (op % 8) {
    case 0:
    case 1:
      insert(&m, e, deadline_from(&in, now));
      break;
    case 2:
      if (e->pending)
        unlink_entry(&m, e);
      break;
    case 3:
      if (e->pending)
        restart_later(&in, &m, e);
      break;
    case 4: /* a little */
      expire(&m, fuzz_add_saturating(now, fuzz_byte(&in)));
      break;
    case 5: /* any distance */
      expire(&m, fuzz_add_saturating(now, fuzz_magnitude(&in)));
      break;
    case 6: { /* to the earliest deadline */
      entry_t *first = earliest(&m, false);
      expire(&m, first != NULL ? first->deadline : now);
      break;
    }
    default:
      pop(&in, &m);
      break;
    }
    check(&in, &m);
  }
  return 0;
}
