/* The pure timing wheel: no libuv, no threads, no clock. It is told the
 * time. See wheel.c for how it works. The operations every start, stop and
 * fire runs are inline here, so those paths make no call into the wheel. */
#ifndef UVTW_WHEEL_H
#define UVTW_WHEEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "check.h"
#include "port.h"

#define WHEEL_LEVEL0_BITS 12 /* level 0: 4096 one-tick slots */
#define WHEEL_DIGIT_BITS 6   /* each upper level: one more 6-bit digit */
#define WHEEL_LEVELS 10      /* 12 + 9 x 6 bits cover 64-bit times */
#define WHEEL_RUNS 4         /* lists in each level-1 slot (see wheel.c) */
/* Level 0's slots, level 1's (WHEEL_RUNS lists each), then the 64 of each
 * level above. */
#define WHEEL_SLOT_COUNT                                                                           \
  ((1u << WHEEL_LEVEL0_BITS) + (WHEEL_RUNS + WHEEL_LEVELS - 2) * (1u << WHEEL_DIGIT_BITS))

/* An entry: intrusive, embedded by the caller. `next` is NULL while the
 * entry is in no list. */
typedef struct wheel_node_s {
  struct wheel_node_s *next;
  struct wheel_node_s *prev;
  uint64_t deadline;
  uint64_t seq; /* start order, for FIFO among equal deadlines */
} wheel_node_t;

typedef struct wheel_s {
  uint64_t now;      /* the wheel's time: pending deadlines are >= now but the current slot's */
  uint64_t count;    /* entries in slots or in the expired list */
  uint64_t cascaded; /* entries moved to a finer level */
  uint64_t next_seq; /* the next start order: inserts so far */
  /* Bit i set: slots[i] is not empty. */
  uint64_t occupied[WHEEL_SLOT_COUNT / 64];
  /* Bit i set: slots[i] may be out of (deadline, start order) order: an
   * entry was appended behind a later one (see wheel.c). */
  uint64_t unsorted[WHEEL_SLOT_COUNT / 64];
  /* Entries taken out of the slots by wheel_expire, in firing order. */
  wheel_node_t expired;
  /* A second walk along the expired list, from its tail towards the front
   * (see pop_expired): an entry of the list, or `expired` when none runs. */
  wheel_node_t *ahead;
  /* Every slot in time order: level 0's, then each upper level's, a
   * level-1 slot as WHEEL_RUNS neighbouring lists, its runs. Circular lists
   * with the head as sentinel; a head's `deadline` is a lower bound of its
   * entries' deadlines, its `seq` an upper bound (exact until one is
   * removed), 0 while the list is empty. */
  wheel_node_t slots[WHEEL_SLOT_COUNT];
} wheel_t;

/* A level's digit starts at bit wheel_shift(level) and ends below
 * wheel_shift(level + 1); its slots start at wheel_first_slot(level). On
 * level 1 a slot's index is its first run's, run r at index + r. */
static inline unsigned wheel_shift(unsigned level) {
  return level == 0 ? 0 : WHEEL_LEVEL0_BITS + WHEEL_DIGIT_BITS * (level - 1);
}

static inline unsigned wheel_first_slot(unsigned level) {
  unsigned rows = level <= 1 ? 0 : WHEEL_RUNS + level - 2; /* rows of 64 lists */
  return level == 0 ? 0 : (1u << WHEEL_LEVEL0_BITS) + (rows << WHEEL_DIGIT_BITS);
}

static inline unsigned wheel_level_of_slot(unsigned index) {
  if (index < (1u << WHEEL_LEVEL0_BITS))
    return 0;
  unsigned row = (index - (1u << WHEEL_LEVEL0_BITS)) >> WHEEL_DIGIT_BITS;
  return row < WHEEL_RUNS ? 1 : row - WHEEL_RUNS + 2;
}

static inline bool wheel_occupied(const wheel_t *w, unsigned index) {
  return w->occupied[index / 64] & (uint64_t)1 << index % 64;
}

/* The occupied runs of level-1 slot `index`: bit r for run r. */
_Static_assert(64 % WHEEL_RUNS == 0, "a level-1 slot's runs share one bitmap word");
static inline unsigned wheel_runs_occupied(const wheel_t *w, unsigned index) {
  return (unsigned)(w->occupied[index / 64] >> index % 64) & ((1u << WHEEL_RUNS) - 1);
}

/* The level of the highest digit in which `deadline` and `now` differ. */
static inline unsigned wheel_digit_level(uint64_t deadline, uint64_t now) {
  uint64_t differ = (deadline ^ now) >> WHEEL_LEVEL0_BITS;
  return differ == 0 ? 0 : 1 + (unsigned)uvtw__highest_bit(differ) / WHEEL_DIGIT_BITS;
}

/* The level on which an entry due at `deadline` (>= now) is filed at time
 * `now`: 0 in now's 4,096-tick block, 1 in the 63 blocks after it (level
 * 1 is a ring), else the level of the highest digit that differs. */
static inline unsigned wheel_level_of(uint64_t deadline, uint64_t now) {
  uint64_t blocks = (deadline >> WHEEL_LEVEL0_BITS) - (now >> WHEEL_LEVEL0_BITS);
  if (blocks < (1u << WHEEL_DIGIT_BITS))
    return blocks != 0;
  return wheel_digit_level(deadline, now);
}

/* The slot (index in slots[]) an entry due at `deadline` takes on `level`. */
static inline unsigned wheel_slot_of(uint64_t deadline, unsigned level) {
  uint64_t digit = (deadline >> wheel_shift(level)) &
                   ((1u << (wheel_shift(level + 1) - wheel_shift(level))) - 1);
  return wheel_first_slot(level) + (unsigned)digit * (level == 1 ? WHEEL_RUNS : 1);
}

/* The first tick of slot `index` in the rotation of its level that holds
 * `now`. */
static inline uint64_t wheel_slot_start(uint64_t now, unsigned index) {
  unsigned level = wheel_level_of_slot(index);
  if (level == 1) { /* the ring: the block of the slot's digit at or after now's */
    uint64_t block = now >> WHEEL_LEVEL0_BITS;
    uint64_t digit = (index - wheel_first_slot(1)) / WHEEL_RUNS;
    uint64_t ahead = (digit - block) & ((1u << WHEEL_DIGIT_BITS) - 1);
    return (block + ahead) << WHEEL_LEVEL0_BITS;
  }
  unsigned above = wheel_shift(level + 1);
  uint64_t high = above >= 64 ? 0 : now >> above << above;
  return high | (uint64_t)(index - wheel_first_slot(level)) << wheel_shift(level);
}

void uvtw__wheel_init(wheel_t *w, uint64_t now);

/* Circular lists with the head as sentinel. */
static inline void list_init(wheel_node_t *head) {
  head->next = head;
  head->prev = head;
}

static inline bool list_empty(const wheel_node_t *head) {
  return head->next == head;
}

static inline void list_append(wheel_node_t *head, wheel_node_t *node) {
  node->prev = head->prev;
  node->next = head;
  head->prev->next = node;
  head->prev = node;
}

/* Firing order: a is due before b, or with b and started before it. */
static inline bool wheel_before(const wheel_node_t *a, const wheel_node_t *b) {
  return a->deadline != b->deadline ? a->deadline < b->deadline : a->seq < b->seq;
}

/* Level 1: the first run of slot `index` (its first run's) that `node`
 * extends in firing order: at the tail, one whose entries are due no later
 * than the node (an empty one's maximum is 0; an entry appended to level 1
 * is the newest: wheel_start), at the head, an empty one or one whose
 * first is due after it. Else the last run, out of order: false. Only
 * heads are read, no entry's line. */
static inline bool wheel_pick_run(const wheel_t *w, const wheel_node_t *node, unsigned *index,
                                  bool front) {
  for (unsigned run = 0; run < WHEEL_RUNS; run++, ++*index) {
    const wheel_node_t *head = &w->slots[*index];
    if (front ? list_empty(head) || wheel_before(node, head->next) : node->deadline >= head->seq)
      return true;
  }
  --*index;
  return false;
}

/* Files a node whose deadline is >= the wheel's time on `level`, at its
 * slot's tail, or at its head if `front` (a cascade from level 2 and up:
 * wheel.c); on level 1 in the run wheel_pick_run picks. A slot that gets an
 * entry out of firing order with its neighbour there is marked unsorted. */
static inline void wheel_file(wheel_t *w, wheel_node_t *node, unsigned level, bool front) {
  unsigned index = wheel_slot_of(node->deadline, level);
  bool in_order = level != 1 || wheel_pick_run(w, node, &index, front);
  wheel_node_t *head = &w->slots[index];
  uint64_t bit = (uint64_t)1 << index % 64;
  if (list_empty(head)) { /* its bit in `occupied` is clear */
    w->occupied[index / 64] |= bit;
    w->unsorted[index / 64] &= ~bit;
    head->deadline = head->seq = node->deadline;
  } else {
    if (node->deadline < head->deadline)
      head->deadline = node->deadline;
    if (node->deadline > head->seq)
      head->seq = node->deadline;
    if (level != 1) /* wheel.c */
      in_order = front ? !wheel_before(head->next, node) : !wheel_before(node, head->prev);
    if (!in_order)
      w->unsorted[index / 64] |= bit;
  }
  list_append(front ? head->next : head, node);
}

static inline bool wheel_node_linked(const wheel_node_t *node) {
  return node->next != NULL;
}

/* Files a node in no list as started now, to fire at `deadline`; a
 * deadline before the wheel's time is filed at that time (it is due at the
 * next expiry). */
static inline void wheel_start(wheel_t *w, wheel_node_t *node, uint64_t deadline) {
  node->deadline = deadline < w->now ? w->now : deadline;
  node->seq = w->next_seq++;
  wheel_file(w, node, wheel_level_of(node->deadline, w->now), false);
}

/* Files `node` (not linked) to fire at `deadline` (see wheel_start). */
static inline void uvtw__wheel_insert(wheel_t *w, wheel_node_t *node, uint64_t deadline) {
  wheel_start(w, node, deadline);
  w->count++;
}

/* The slot whose list head is `head` has become empty: its bit and its
 * maximum are cleared (its unsorted mark goes when it is filed again). */
static inline void wheel_emptied(wheel_t *w, wheel_node_t *head) {
  size_t index = (size_t)(head - w->slots);
  w->occupied[index / 64] &= ~((uint64_t)1 << index % 64);
  head->seq = 0;
}

/* Takes a linked node out of its list, leaving its links as they were. The
 * checks build first sees that its neighbours link to it: an entry
 * initialised again while linked (a uvtw_timer_t reused without a stop)
 * leaves them linked to it, and the next unlink next to it stops there. */
static inline void wheel_unlink(wheel_t *w, wheel_node_t *node) {
  wheel_node_t *prev = node->prev;
  wheel_node_t *next = node->next;
  MISUSE(prev->next != node || next->prev != node,
         "an entry's neighbours do not link to it (%p): a uvtw_timer_t initialised again, or "
         "freed, while active?\n",
         (void *)node);
  prev->next = next;
  next->prev = prev;
  if (node == w->ahead)
    w->ahead = prev;
  /* Both neighbours are the same node only if it is a list head and the
   * list is now empty. */
  if (prev == next && prev != &w->expired)
    wheel_emptied(w, prev);
}

/* Unlinks a linked node from its slot or from the expired list. */
static inline void uvtw__wheel_remove(wheel_t *w, wheel_node_t *node) {
  wheel_unlink(w, node);
  node->next = node->prev = NULL;
  w->count--;
}

/* Files a linked node again at `deadline`, as a remove and an insert do,
 * with fewer stores: a restart. */
static inline void uvtw__wheel_refile(wheel_t *w, wheel_node_t *node, uint64_t deadline) {
  wheel_unlink(w, node);
  wheel_start(w, node, deadline);
}

/* Moves the wheel's time to `now` (if later) and makes every entry whose
 * deadline is <= now expired: in the expired list, in deadline order, FIFO
 * among equals, or due at the head of the current slot (wheel.c). */
void uvtw__wheel_expire(wheel_t *w, uint64_t now);

/* The first occupied run of the level-1 slot whose 4,096 ticks hold the
 * wheel's time, or NULL. Its runs fire from where they are (wheel.c). */
static inline wheel_node_t *wheel_current(const wheel_t *w) {
  unsigned index = wheel_slot_of(w->now, 1), runs = wheel_runs_occupied(w, index);
  return runs == 0 ? NULL : (wheel_node_t *)(uintptr_t)&w->slots[index + uvtw__lowest_bit(runs)];
}

/* The first expired entry, or NULL: the earliest of the expired list's
 * first and the current slot's runs' firsts that are due. */
static inline wheel_node_t *uvtw__wheel_first_expired(const wheel_t *w) {
  wheel_node_t *first = w->expired.next == &w->expired ? NULL : w->expired.next;
  unsigned index = wheel_slot_of(w->now, 1);
  for (unsigned runs = wheel_runs_occupied(w, index); runs != 0; runs &= runs - 1) {
    wheel_node_t *node = w->slots[index + (unsigned)uvtw__lowest_bit(runs)].next;
    if (node->deadline <= w->now && (first == NULL || wheel_before(node, first)))
      first = node;
  }
  return first;
}

/* Unlinks `node`, the first expired entry (uvtw__wheel_first_expired). */
static inline void uvtw__wheel_pop(wheel_t *w, wheel_node_t *node) {
  /* Reaching an entry of the expired list is a cache miss that waits for
   * the one before, so a second walk loads the list from its tail, one
   * entry a pop, until it reaches the entry popped: two misses in flight
   * instead of one. */
  if (node == w->expired.next && w->ahead != &w->expired)
    w->ahead = w->ahead->prev;
  uvtw__wheel_remove(w, node);
}

/* Unlinks and returns the first expired entry, or NULL. */
static inline wheel_node_t *uvtw__wheel_pop_expired(wheel_t *w) {
  wheel_node_t *node = uvtw__wheel_first_expired(w);
  if (node != NULL)
    uvtw__wheel_pop(w, node);
  return node;
}

/* Whether `node` is one of the wheel's list heads, not an entry. */
static inline bool wheel_is_head(const wheel_t *w, const wheel_node_t *node) {
  return (uintptr_t)node - (uintptr_t)w < sizeof *w;
}

/* A lower bound of the earliest pending deadline, exact unless an entry was
 * removed from an unsorted slot since it was filed; UINT64_MAX if nothing
 * is pending. O(levels). */
uint64_t uvtw__wheel_next_deadline(const wheel_t *w);

/* The earliest pending deadline, exactly: walks the earliest slot if it is
 * unsorted. */
uint64_t uvtw__wheel_next_deadline_exact(const wheel_t *w);

#ifdef UVTW_CHECKS
/* The invariant checker (-Dchecks): list links, occupancy bits, each
 * entry's slot and the slot minimums, the order of the slots not marked
 * unsorted and of the expired list, the entry count, the second walk. NULL if all hold, else
 * what is broken. O(slots + entries). */
const char *uvtw__wheel_check(const wheel_t *w);
#endif

#endif
