/* The pure hierarchical timing wheel.
 *
 * Time is a count of ticks (uint64_t). The wheel has its own time `now`:
 * every entry with a deadline <= now has been handed out. Time is cut into
 * blocks of 2^11 ticks; the horizon H is the start of the block after
 * now's. An entry with deadline d > now goes to
 *
 * - level 0, a ring of 4096 one-tick slots (slot = d & 4095), if d falls in
 *   now's block or the next one (d < H + 2048): filed at its exact deadline;
 * - else the upper level of the highest bit in which d and H differ, 64
 *   slots per level:
 *
 *     level = 1 + (63 - clz(d ^ H) - 11) / 6    slot = (d >> (11 + 6 * (level - 1))) & 63
 *
 * With a 1 ms tick:
 *
 *     level  slot width   holds deadlines up to (from now)
 *       0      1 ms         2 to 4 s (the rest of this block, and the next)
 *       1      2 s          2.2 min
 *       2      2.2 min      2.4 h
 *       3      2.4 h        6.2 days
 *      4-9    ...           2^64 ticks (the last level has 5 live bits)
 *
 * So the timeouts servers use most (request and idle timeouts of a few
 * seconds) never cascade at all: no entry is walked between its insert and
 * its callback. Consequences the code relies on:
 * - An occupied upper slot at level k lies after H's own digit k, inside the
 *   same window as H: a level never wraps, and every level-k deadline is
 *   smaller than every level-(k+1) one. Every ring deadline is smaller than
 *   every upper one. So the earliest entry is in the ring's first occupied
 *   slot from now on (circularly), else in the lowest occupied upper level's
 *   first slot (bitmaps and count-trailing-zeros find both). A ring slot
 *   holds exactly one deadline; an upper slot's sentinel remembers the
 *   smallest deadline inserted (after removals only a lower bound).
 * - Moving now (and so H) forward to a time before an occupied upper slot's
 *   start does not change which slot any entry belongs in: time can jump.
 *
 * Advancing to a time T repeatedly takes the earlier of two events, if it is
 * <= T: the ring's earliest slot, whose entries are handed out at their
 * deadline; or the earliest upper slot, which is cascaded when the block
 * before it begins (when H reaches its start; on a tie, before the ring
 * slot): now is set there and each entry is filed again relative to it,
 * landing on the ring or a lower level. Nothing is handed out before its
 * deadline and a cascade loses no precision: deadlines are exact, only the
 * filing changes. Cascading a block ahead means an upper slot's entries are
 * in the ring before anything can be inserted there directly.
 *
 * FIFO among equal deadlines: entries are appended at a slot's tail and
 * cascaded in list order, always relative to the wheel's own now. Of two
 * entries with one deadline, the later one either joins the older one's
 * slot behind it, or is filed after the older one has already moved down,
 * into the slot the older one now sits in, again behind it.
 *
 * Restarts in place: a restart of an upper-level entry to a later deadline
 * may leave it where it is (wheel_restart_lazy), so an upper slot can hold
 * entries due after its range, never before it: its cascade comes before
 * their old deadlines and files them by their new ones. Their place in the
 * list then no longer tells their start order, so every insert and restart
 * also gives the entry a tag, a 48-bit start count; a cascade that appends
 * an entry to a ring slot behind one with a later tag marks that slot
 * unsorted, and an unsorted slot is sorted by tag (stable merge sort)
 * before it fires. Every other append to a ring slot (an insert, an applied
 * restart) carries the newest tag, so only cascades can break the order.
 *
 * Entries inserted with a deadline <= `due_limit` (now, or during a pass the
 * time being advanced to) are due: they are handed out at the start of the
 * next pass, so a callback that restarts an entry as already due cannot make
 * the pass run forever. Due entries come in any order (a task can wait in
 * the cross-thread queue), so they are bucketed like a level 0 behind now:
 * deadlines within 63 ticks of due_limit go to one of 64 due buckets by
 * deadline & 63 (one deadline per bucket, so FIFO holds and an insert is
 * O(1)); older ones go to `due_old`, which is merge-sorted (stable) only if
 * an insert came out of order. due_limit does not change between passes
 * while anything is due, so the buckets' order is known at the next pass.
 *
 * Unlinking needs no search and no back pointer to the slot: an entry whose
 * removal leaves its two neighbours equal was the last in its list, and that
 * neighbour is the list's sentinel; if the sentinel lies inside `slots`, its
 * bitmap bit is cleared. A removal may be deferred (wheel_remove_deferred):
 * the entry is marked unlinked at once and its two neighbours, saved in the
 * wheel, are joined by the next operation, which may instead be an insert
 * of that same entry that puts it back (wheel_reinsert) and logs the
 * restart, to be left there or moved when the log is applied. At most one
 * removal waits; its entry is never in the restart log (a stop of an entry
 * that may be there applies the log first), and wheel_sync applies the
 * removal, then the log, before anything reads the lists.
 */
#include "wheel.h"

#include <assert.h>

/* Moves every entry of `from` to the tail of `to`, in order. */
static inline void list_splice_tail(wheel_entry_t *to, wheel_entry_t *from) {
  if (list_empty(from))
    return;
  wheel_entry_t *first = from->next;
  wheel_entry_t *last = from->prev;
  wheel_entry_t *tail = to->prev;
  tail->next = first;
  first->prev = tail;
  last->next = to;
  to->prev = last;
  list_init(from);
}

/* The first tick of slot `slot` of upper level `level`, in the window that
 * holds the horizon (the start of the block after now's). */
static inline uint64_t slot_start(uint64_t horizon, unsigned level, unsigned slot) {
  assert(level >= 1);
  unsigned window_shift = level_shift(level) + WHEEL_LEVEL_BITS;
  uint64_t window = window_shift >= 64 ? 0 : (horizon >> window_shift) << window_shift;
  return window | ((uint64_t)slot << level_shift(level));
}

_Static_assert(WHEEL_L0_WORDS >= 1 && WHEEL_L0_WORDS <= 64, "level 0's summary is one word");
_Static_assert(WHEEL_DUE_ROW < 32, "level_mask has a bit per level");

static inline unsigned first_bit(uint64_t bits) {
  return (unsigned)__builtin_ctzll(bits);
}

static uint64_t lazy_floor_of(const wheel_t *w) {
  uint64_t ring_end = block_of(w->now) + WHEEL_L0_SLOTS;
  uint64_t past_due = (w->due_limit | (WHEEL_BLOCK - 1)) + 1;
  if (past_due == 0 || ring_end < w->now)
    return UINT64_MAX;
  return (ring_end > past_due ? ring_end : past_due) - 1;
}

static void set_lazy_floor(wheel_t *w) {
  w->lazy_floor = lazy_floor_of(w);
}

void wheel_init(wheel_t *w, uint64_t now) {
  w->now = now;
  w->due_limit = now;
  w->tag = 0;
  w->count = 0;
  w->level_mask = 0;
  w->due_old_unsorted = false;
  w->cascaded = 0;
  w->log_len = 0;
  w->removed = w->removed_prev = w->removed_next = NULL;
  w->warmed = 0;
  for (unsigned k = 0; k < WHEEL_WARM_SLOTS; k++)
    w->warm[k].tick = UINT64_MAX;
  for (unsigned k = 0; k <= WHEEL_DUE_ROW; k++)
    w->occupied[k] = 0;
  w->occupied0_summary = 0;
  w->log_tag = 0;
  for (unsigned k = 0; k < WHEEL_L0_WORDS; k++)
    w->occupied0[k] = w->unsorted0[k] = 0;
  list_init(&w->due_old);
  list_init(&w->firing);
  for (size_t i = 0; i < WHEEL_SENTINELS; i++)
    list_init(&w->slots[i]);
  set_lazy_floor(w);
}

void wheel_catch_up(wheel_t *w, uint64_t now) {
  assert(w->count == 0 && !wheel_deferred(w));
  if (now > w->now)
    w->now = w->due_limit = now;
  set_lazy_floor(w);
}

static bool has_due(const wheel_t *w) {
  return w->occupied[WHEEL_DUE_ROW] != 0 || !list_empty(&w->due_old);
}

/* The tick of the first occupied ring slot at or after tick `from`, slots
 * counted circularly from from's. Ring entries lie in [now, block_of(now) +
 * ring size), so ring_next(w, w->now) is the earliest (an entry at now
 * itself exists only inside wheel_advance, after a cascade at that tick);
 * for a later `from`, a result at or past that end means there is none in
 * between. The ring must not be empty. */
static uint64_t ring_next(const wheel_t *w, uint64_t from) {
  assert(w->occupied0_summary != 0);
  unsigned start = (unsigned)(from & (WHEEL_L0_SLOTS - 1));
  unsigned word = start / 64;
  unsigned found;
  uint64_t bits = w->occupied0[word] & (~UINT64_C(0) << (start % 64));
  if (bits != 0) {
    found = word * 64 + first_bit(bits);
  } else {
    uint64_t later = word + 1 >= 64 ? 0 : w->occupied0_summary & (~UINT64_C(0) << (word + 1));
    /* Nothing at or after `start`: the lowest occupied index comes next. */
    unsigned w64 = first_bit(later != 0 ? later : w->occupied0_summary);
    found = w64 * 64 + first_bit(w->occupied0[w64]);
  }
  return from + ((found - start) & (WHEEL_L0_SLOTS - 1));
}

/* The lowest upper level's first occupied slot, if any. */
static bool upper_first(const wheel_t *w, unsigned *level_out, unsigned *slot_out) {
  uint32_t upper = w->level_mask & ~UINT32_C(1);
  *level_out = *slot_out = 0;
  if (upper == 0)
    return false;
  *level_out = first_bit(upper);
  *slot_out = first_bit(w->occupied[*level_out]);
  return true;
}

/* The slot holding the earliest entries: the ring's first, else the lowest
 * upper level's first (every ring deadline precedes every upper one). The
 * due row has no bit in level_mask: mark_slot_empty may clear one, but
 * nothing sets it. */
static const wheel_entry_t *earliest_slot(const wheel_t *w, unsigned *level_out,
                                          unsigned *slot_out) {
  if (w->level_mask == 0)
    return NULL;
  if (w->level_mask & 1) {
    *level_out = 0;
    *slot_out = (unsigned)(ring_next(w, w->now) & (WHEEL_L0_SLOTS - 1));
  } else {
    upper_first(w, level_out, slot_out);
  }
  return &w->slots[slot_index(*level_out, *slot_out)];
}

void wheel_file_first(wheel_t *w, wheel_entry_t *entry, unsigned level, unsigned slot) {
  wheel_entry_t *head = &w->slots[slot_index(level, slot)];
  head->deadline = entry->deadline;
  mark_slot_used(w, level, slot);
  list_append(head, entry);
}

void wheel_flush(wheel_t *w) {
  /* The removal first, though it may be newer than logged restarts: its
   * entry is not among them, and they have not moved yet, so the
   * neighbours it was taken from are still its neighbours. */
  wheel_apply_removed(w);
  uint32_t n = w->log_len;
  bool to_old = false;
  w->log_len = 0;
  for (uint32_t i = 0; i < n; i++) {
    const wheel_log_t *record = &w->log[i];
    if (may_stay_in_place(w, record->old, record->deadline))
      continue; /* put back by wheel_reinsert, where it may stay */
    /* insert_due compares with the old list's tail, whose deadline may be
     * a logged restart's not yet applied: then it cannot vouch for order. */
    to_old |= record->deadline <= w->due_limit && w->due_limit - record->deadline >= WHEEL_SLOTS;
    wheel_move_now(w, record->entry, record->deadline);
  }
  if (to_old && !list_empty(&w->due_old))
    w->due_old_unsorted = true;
}

uint64_t wheel_next_deadline(wheel_t *w) {
  wheel_sync(w);
  if (!list_empty(&w->firing) || has_due(w))
    return w->now; /* already due */
  unsigned level = 0, slot = 0;
  const wheel_entry_t *head = earliest_slot(w, &level, &slot);
  return head ? head->deadline : UINT64_MAX;
}

uint64_t wheel_next_deadline_exact(wheel_t *w) {
  wheel_sync(w);
  if (!list_empty(&w->firing) || has_due(w))
    return w->now;
  unsigned level = 0, slot = 0;
  const wheel_entry_t *head = earliest_slot(w, &level, &slot);
  if (head == NULL)
    return UINT64_MAX;
  if (level == 0)
    return head->deadline;
  /* An entry restarted in place (wheel_restart_lazy) may sit in an earlier
   * upper slot than its deadline's, so later slots are scanned too, until
   * one starts at or after the smallest deadline found so far. */
  uint64_t min = UINT64_MAX;
  uint64_t horizon = block_of(w->now) + WHEEL_BLOCK;
  for (; level < WHEEL_LEVELS; level++) {
    for (uint64_t bits = w->occupied[level]; bits != 0; bits &= bits - 1) {
      slot = first_bit(bits);
      if (slot_start(horizon, level, slot) >= min)
        return min;
      head = &w->slots[slot_index(level, slot)];
      for (const wheel_entry_t *e = head->next; e != head; e = e->next)
        if (e->deadline < min)
          min = e->deadline;
    }
  }
  return min;
}

/* Files again every entry of an upper-level slot that starts at w->now.
 * No callback runs here, so the detached chain can be walked directly. */
static void cascade(wheel_t *w, wheel_entry_t *head) {
  wheel_entry_t *entry = head->next;
  head->prev->next = NULL;
  list_init(head);
  while (entry != NULL) {
    wheel_entry_t *next = entry->next;
    entry->next = NULL;
    file_entry_from(w, entry, true); /* its deadline is at least a block away */
    w->cascaded++;
    entry = next;
  }
}

static inline bool before(const wheel_entry_t *b, const wheel_entry_t *a, bool by_tag) {
  return by_tag ? tag_before(b->tag, a->tag) : b->deadline < a->deadline;
}

static inline wheel_entry_t *merge_sorted(wheel_entry_t *a, wheel_entry_t *b, bool by_tag) {
  wheel_entry_t head;
  wheel_entry_t *tail = &head;
  while (a != NULL && b != NULL) {
    if (before(b, a, by_tag)) { /* ties take `a`, the earlier: stable */
      tail->next = b;
      b = b->next;
    } else {
      tail->next = a;
      a = a->next;
    }
    tail = tail->next;
  }
  tail->next = a != NULL ? a : b;
  return head.next;
}

/* Stable bottom-up merge sort of a list by deadline, or by tag (start
 * order), O(n log n), no memory: bins[i] holds a sorted run of 2^i entries
 * that came before any later bin's. */
static inline void sort_list(wheel_entry_t *head, bool by_tag) {
  if (list_empty(head))
    return; /* its entries were removed after it was marked unsorted */
  wheel_entry_t *bins[64] = {0};
  wheel_entry_t *entry = head->next;
  head->prev->next = NULL;
  while (entry != NULL) {
    wheel_entry_t *carry = entry;
    entry = entry->next;
    carry->next = NULL;
    unsigned i = 0;
    for (; bins[i] != NULL; i++) {
      carry = merge_sorted(bins[i], carry, by_tag);
      bins[i] = NULL;
    }
    bins[i] = carry;
  }
  wheel_entry_t *sorted = NULL;
  for (unsigned i = 0; i < 64; i++)
    if (bins[i] != NULL)
      sorted = merge_sorted(bins[i], sorted, by_tag);
  list_init(head);
  while (sorted != NULL) {
    wheel_entry_t *next = sorted->next;
    list_append(head, sorted);
    sorted = next;
  }
}

/* Moves every due entry to the tail of w->firing, oldest deadline first:
 * the sorted old list, then the buckets from due_limit - 63 to due_limit. */
static void take_due(wheel_t *w) {
  if (w->due_old_unsorted)
    sort_list(&w->due_old, false);
  w->due_old_unsorted = false;
  list_splice_tail(&w->firing, &w->due_old);
  uint64_t bits = w->occupied[WHEEL_DUE_ROW];
  unsigned oldest = (unsigned)((w->due_limit + 1) & (WHEEL_SLOTS - 1));
  uint64_t rotated = oldest ? bits >> oldest | bits << (WHEEL_SLOTS - oldest) : bits;
  while (rotated != 0) {
    unsigned bucket = (first_bit(rotated) + oldest) & (WHEEL_SLOTS - 1);
    rotated &= rotated - 1;
    list_splice_tail(&w->firing, &w->slots[WHEEL_ROW_BASE(WHEEL_DUE_ROW) + bucket]);
  }
  w->occupied[WHEEL_DUE_ROW] = 0;
}

/* Prefetches the first and last byte of the uvtw_timer_t an entry lives in
 * (a hint only: prefetches never fault, so it is harmless for entries that
 * live in something else, as in the tests, or that have left the wheel). */
static inline void prefetch_owner(const wheel_entry_t *e) {
  const char *owner = (const char *)e - offsetof(uvtw_timer_t, entry_);
  __builtin_prefetch(owner);
  __builtin_prefetch(owner + sizeof(uvtw_timer_t) - 1);
}

/* Walks ring slot lists ahead of their firing, to learn where their entries
 * are. A list is a chain of dependent cache misses (150-200 ns each at
 * 10^6 timers on the machine the benchmarks ran on), and what is warmed
 * before the loop sleeps is cold again when it wakes (1 ms between slots
 * was enough to lose it). So, unless the slot at `at` was already walked,
 * the next WHEEL_WARM_SLOTS occupied ring slots are walked in step, each
 * from both ends (16 chains, 16 misses in flight), and only the entries'
 * addresses are kept; when each slot fires, fire_list prefetches its
 * entries from them a few ahead, misses that do not depend on each other.
 * (Bench expire at 10^6, against warming the entries of the next 4 slots
 * into the cache: 199 -> 131 ns per fire.) Runs inside a pass, where no
 * callback can change the lists under it. Returns the addresses recorded
 * for the slot at `at`, or NULL. */
static const wheel_warm_t *warm_ring(wheel_t *w, uint64_t at) {
  enum { K = WHEEL_WARM_SLOTS, CAP = WHEEL_WARM_CAP };
  if (at < w->warmed) {
    for (unsigned k = 0; k < K; k++)
      if (w->warm[k].tick == at)
        return &w->warm[k];
    return NULL; /* occupied after its turn came */
  }
  uint64_t end = block_of(w->now) + WHEEL_L0_SLOTS; /* the ring's end */
  const wheel_entry_t *front[K], *back[K];
  unsigned lists = 0;
  uint64_t t = at;
  while (lists < K && (t = ring_next(w, t)) < end) {
    const wheel_entry_t *head = &w->slots[t & (WHEEL_L0_SLOTS - 1)];
    front[lists] = head->next;
    back[lists] = head->prev;
    w->warm[lists].tick = t;
    w->warm[lists].front = w->warm[lists].back = 0;
    lists++;
    t++;
  }
  w->warmed = t < end ? t : end; /* slots past the end come later, by cascade */
  for (unsigned k = lists; k < K; k++)
    w->warm[k].tick = UINT64_MAX;
  for (unsigned active = lists; active > 0;) {
    active = 0;
    for (unsigned k = 0; k < lists; k++) {
      const wheel_entry_t *f = front[k], *b = back[k];
      wheel_warm_t *plan = &w->warm[k];
      if (f == NULL)
        continue;
      plan->front++;
      w->warm_addr[k][plan->front - 1] = f;
      if (f == b || plan->front + plan->back + 2 > CAP) {
        front[k] = NULL; /* met in the middle, or the row is full */
        continue;
      }
      plan->back++;
      w->warm_addr[k][CAP - plan->back] = b;
      if (f->next == b) {
        front[k] = NULL;
        continue;
      }
      front[k] = f->next;
      back[k] = b->prev;
      active++;
    }
  }
  return w->warm[0].tick == at ? &w->warm[0] : NULL;
}

/* The i-th address of a plan: the head part, then the tail part. */
static inline const wheel_entry_t *plan_at(const wheel_t *w, const wheel_warm_t *plan, size_t i) {
  const wheel_entry_t *const *row = w->warm_addr[plan - w->warm];
  return i < plan->front ? row[i] : row[WHEEL_WARM_CAP - plan->back + (i - plan->front)];
}

/* Hands out every entry of w->firing, one at a time, so that a callback can
 * remove or restart entries still waiting in the list. With a plan (the
 * addresses of a ring slot's entries, see warm_ring), the entries a few
 * places ahead are prefetched before each one is handed out. */
static size_t fire_list(wheel_t *w, wheel_fire_fn fire, void *ctx, const wheel_warm_t *plan) {
  enum { AHEAD = 16 };
  size_t fired = 0;
  size_t planned = plan != NULL ? (size_t)plan->front + plan->back : 0;
  for (size_t i = 0; i < AHEAD && i < planned; i++)
    prefetch_owner(plan_at(w, plan, i));
  for (;;) {
    wheel_sync(w); /* a callback may have restarted entries still listed */
    if (list_empty(&w->firing))
      break;
    if (fired + AHEAD < planned)
      prefetch_owner(plan_at(w, plan, fired + AHEAD));
    wheel_entry_t *entry = w->firing.next;
    list_unlink(entry);
    w->count--;
    fire(entry, ctx);
    fired++;
  }
  return fired;
}

size_t wheel_advance(wheel_t *w, uint64_t now, wheel_fire_fn fire, void *ctx) {
  size_t fired = 0;
  if (now < w->now)
    now = w->now;
  wheel_sync(w);
  take_due(w); /* before due_limit moves: it orders the buckets */
  w->due_limit = now;
  set_lazy_floor(w);
  fired += fire_list(w, fire, ctx, NULL);

  /* In time order: fire the ring's earliest slot at its deadline, or
   * cascade the earliest upper slot when the block before it begins (when
   * the horizon reaches it), whichever comes first. */
  for (;;) {
    uint64_t ring_at = UINT64_MAX, upper_at = UINT64_MAX;
    unsigned ring_slot = 0, level = 0, slot = 0;
    bool ring = (w->level_mask & 1) != 0;
    bool upper = upper_first(w, &level, &slot);
    if (ring) {
      ring_at = ring_next(w, w->now);
      ring_slot = (unsigned)(ring_at & (WHEEL_L0_SLOTS - 1));
    }
    if (upper)
      upper_at = slot_start(block_of(w->now) + WHEEL_BLOCK, level, slot) - WHEEL_BLOCK;
    /* On a tie, cascade first: once now reaches upper_at, inserts file
     * that block in the ring, behind entries still waiting above. */
    if (ring && ring_at < upper_at) {
      if (ring_at > now)
        break;
      const wheel_warm_t *plan = warm_ring(w, ring_at);
      w->now = ring_at;
      set_lazy_floor(w);
      if (w->unsorted0[ring_slot / 64] & (UINT64_C(1) << (ring_slot % 64)))
        sort_list(&w->slots[ring_slot], true);
      mark_slot_empty(w, ring_slot);
      list_splice_tail(&w->firing, &w->slots[ring_slot]);
      fired += fire_list(w, fire, ctx, plan);
    } else if (upper && upper_at <= now) {
      w->now = upper_at;
      set_lazy_floor(w);
      size_t index = slot_index(level, slot);
      mark_slot_empty(w, index);
      cascade(w, &w->slots[index]);
    } else {
      break;
    }
  }

  w->now = now;
  set_lazy_floor(w);
  return fired;
}

void wheel_clear(wheel_t *w, wheel_fire_fn drop, void *ctx) {
  wheel_sync(w);
  take_due(w);
  /* Roughly in deadline order, as promised: the ring by index (it wraps),
   * then the upper levels, each in slot order. */
  for (unsigned word = 0; word < WHEEL_L0_WORDS; word++) {
    while (w->occupied0[word] != 0) {
      unsigned slot = word * 64 + first_bit(w->occupied0[word]);
      list_splice_tail(&w->firing, &w->slots[slot]);
      w->occupied0[word] &= w->occupied0[word] - 1;
    }
  }
  w->occupied0_summary = 0;
  for (unsigned level = 1; level < WHEEL_LEVELS; level++) {
    while (w->occupied[level] != 0) {
      unsigned slot = first_bit(w->occupied[level]);
      list_splice_tail(&w->firing, &w->slots[slot_index(level, slot)]);
      w->occupied[level] &= w->occupied[level] - 1;
    }
  }
  w->level_mask = 0;
  for (unsigned k = 0; k < WHEEL_L0_WORDS; k++)
    w->unsorted0[k] = 0;
  fire_list(w, drop, ctx, NULL);
}

/* The entry after `e` in its list, as the list stands once the deferred
 * removal is applied... except that the removed entry itself is still
 * walked (it reads as unlinked; its neighbours still point to it). */
static const wheel_entry_t *next_of(const wheel_t *w, const wheel_entry_t *e) {
  return e == w->removed ? w->removed_next : e->next;
}

/* Walks one list, checking its links; returns the entries seen (a
 * deferred removal among them) or -1. */
static int64_t check_list(const wheel_t *w, const wheel_entry_t *head, uint64_t limit) {
  int64_t n = 0;
  const wheel_entry_t *prev = head;
  for (const wheel_entry_t *e = head->next; e != head; e = next_of(w, e)) {
    if (e == NULL || e->prev != prev || (uint64_t)n > limit)
      return -1;
    if (e == w->removed && (e->next != NULL || e->prev != w->removed_prev))
      return -1;
    prev = e;
    n++;
  }
  return head->prev == prev ? n : -1;
}

/* Whether a restart of `e` is logged: it may then sit anywhere. */
static bool logged(const wheel_t *w, const wheel_entry_t *e) {
  for (uint32_t i = 0; i < w->log_len; i++)
    if (w->log[i].entry == e)
      return true;
  return false;
}

/* Whether `e` sits where the invariants say: not logged (a logged entry
 * may sit anywhere) and not the deferred removal (unlinked, still listed). */
static bool placed(const wheel_t *w, const wheel_entry_t *e) {
  return e != w->removed && !logged(w, e);
}

const char *wheel_check(const wheel_t *w, bool every_slot) {
  uint64_t seen = 0;
  uint32_t levels = 0;
  if (w->due_limit < w->now)
    return "due_limit is behind the wheel's time";
  if (w->log_len >= WHEEL_LOG)
    return "the restart log is over-full";
  for (uint32_t i = 0; i < w->log_len; i++) {
    const wheel_entry_t *e = w->log[i].entry;
    if (!wheel_entry_linked(e))
      return "a logged restart's entry is not in the wheel";
    uint32_t last = i;
    for (uint32_t j = i + 1; j < w->log_len; j++)
      if (w->log[j].entry == e)
        last = j;
    if (e->deadline != w->log[last].deadline)
      return "an entry's deadline is not its last logged restart's";
  }
  if (w->occupied[0] != 0)
    return "the unused row-0 bitmap is set";
  if (w->lazy_floor != lazy_floor_of(w))
    return "lazy_floor is stale";
  for (unsigned word = 0; word < WHEEL_L0_WORDS; word++)
    if (w->unsorted0[word] & ~w->occupied0[word])
      return "an empty ring slot is marked unsorted";
  for (unsigned word = 0; word < WHEEL_L0_WORDS; word++)
    if ((w->occupied0[word] != 0) != ((w->occupied0_summary >> word) & 1))
      return "level 0's summary disagrees with its bitmap";
  if (WHEEL_L0_WORDS < 64 && (w->occupied0_summary >> (WHEEL_L0_WORDS % 64)) != 0)
    return "level 0's summary has bits past its words";
  for (unsigned level = 0; level < WHEEL_LEVELS; level++) {
    unsigned slots = level == 0 ? WHEEL_L0_SLOTS : WHEEL_SLOTS;
    for (unsigned slot = 0; slot < slots; slot++) {
      const uint64_t *word = level == 0 ? &w->occupied0[slot / 64] : &w->occupied[level];
      if (!every_slot && slot % 64 == 0 && *word == 0) {
        slot += 63; /* a clear word: its slots are left to the count */
        continue;
      }
      const wheel_entry_t *head = &w->slots[slot_index(level, slot)];
      bool bit = (*word >> (slot % 64)) & 1;
      if (!bit && (!every_slot || (head->next == head && head->prev == head)))
        continue;
      int64_t n = check_list(w, head, w->count);
      if (n < 0)
        return "broken links in a slot list";
      if ((n > 0) != bit)
        return "occupancy bit disagrees with the slot list";
      if (n == 0)
        continue;
      levels |= UINT32_C(1) << level;
      seen += (uint64_t)n;
      bool in_order = level == 0 && !((w->unsorted0[slot / 64] >> (slot % 64)) & 1);
      const wheel_entry_t *last = NULL; /* the last placed entry */
      for (const wheel_entry_t *e = head->next; e != head; e = next_of(w, e)) {
        const char *bad = NULL;
        if (e->deadline <= w->now)
          bad = "an entry in a slot is not after the wheel's time";
        else if (level == 0 && (level_of(e->deadline, w->now) != 0 || slot_of(e->deadline, 0) != slot))
          bad = "an entry is filed in the wrong ring slot";
        else if (level != 0 && e->deadline < slot_start(block_of(w->now) + WHEEL_BLOCK, level, slot))
          bad = "an entry is filed in a later slot than its deadline's"; /* it would fire late */
        else if (in_order && last != NULL && placed(w, e) && !tag_before(last->tag, e->tag))
          bad = "a ring slot not marked unsorted is out of start order";
        if (placed(w, e))
          last = e;
        else if (e->deadline < head->deadline)
          bad = "a slot's minimum is above one of its entries";
        else if (level == 0 && e->deadline != head->deadline)
          bad = "a level-0 slot holds two deadlines";
        if (bad != NULL && placed(w, e))
          return bad;
      }
    }
  }
  if (levels != w->level_mask)
    return "level mask disagrees with the occupancy bitmaps";

  for (unsigned bucket = 0; bucket < WHEEL_SLOTS; bucket++) {
    const wheel_entry_t *head = &w->slots[WHEEL_ROW_BASE(WHEEL_DUE_ROW) + bucket];
    int64_t n = check_list(w, head, w->count);
    if (n < 0)
      return "broken links in a due bucket";
    if ((n > 0) != ((w->occupied[WHEEL_DUE_ROW] >> bucket) & 1))
      return "occupancy bit disagrees with a due bucket";
    seen += (uint64_t)n;
    for (const wheel_entry_t *e = head->next; e != head; e = next_of(w, e))
      if ((e->deadline > w->due_limit || w->due_limit - e->deadline >= WHEEL_SLOTS ||
           (e->deadline & (WHEEL_SLOTS - 1)) != bucket) &&
          placed(w, e))
        return "an entry is in the wrong due bucket";
  }
  int64_t n = check_list(w, &w->due_old, w->count);
  if (n < 0)
    return "broken links in the old due list";
  seen += (uint64_t)n;
  const wheel_entry_t *before = NULL; /* the last entry not logged */
  for (const wheel_entry_t *e = w->due_old.next; e != &w->due_old; e = next_of(w, e)) {
    if (!placed(w, e))
      continue;
    if (e->deadline > w->due_limit || w->due_limit - e->deadline < WHEEL_SLOTS)
      return "an entry in the old due list is not old";
    if (!w->due_old_unsorted && before != NULL && e->deadline < before->deadline)
      return "the old due list is out of order but not marked so";
    before = e;
  }
  n = check_list(w, &w->firing, w->count);
  if (n < 0)
    return "broken links in the firing list";
  seen += (uint64_t)n;
  if (w->removed != NULL && (w->removed_prev->next != w->removed || w->removed_next->prev != w->removed))
    return "a deferred removal's neighbours let go of it";
  if (seen != w->count + (w->removed != NULL))
    return "count disagrees with the entries held";
  return NULL;
}
