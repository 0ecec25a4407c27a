/* A hierarchical timing wheel that is told the time.
 *
 * Time is a 64-bit count of ticks. The wheel keeps its own time `now`; every
 * pending deadline is >= now. Level 0 is the lowest 12 bits of the time,
 * each upper level one more 6-bit digit. An entry with deadline d is filed
 * in the slot named by d's digit on its level: level 0 if d is in now's
 * 4,096-tick block, level 1 if it is in one of the 63 blocks after it,
 * else the level of the highest digit in which d and now differ:
 *
 *   level  slots  slot width   a level spans   (1 tick = 1 ms by default)
 *   0      4096   1            4,096           ~4 s, exact deadlines
 *   1      64     4,096        262,144         ~4.4 min, four runs a slot
 *   2      64     262,144      16,777,216      ~4.7 h
 *   ...
 *   9      64     2^60         2^64            all of uint64_t
 *
 * Level 0 is wide so that the common timeouts, a few seconds, fire without
 * ever being moved (the bench's expire and cancel workloads); it costs
 * about 128 KiB a wheel.
 *
 * Level 1 is a ring: its slot for now's block holds that block's entries
 * (the current slot, below), and the one for each of the 63 blocks after
 * it that block's, so a timeout of up to about 4.3 minutes is never filed
 * above it, whichever boundary of the time's digits it crosses. Levels 2
 * and up never wrap within their rotation: d and now share every digit
 * above the entry's level, so only slots after now's own digit can be
 * occupied, and they are in time order, each level after the one below.
 * An entry on level 2 and up stays there until the wheel's time reaches
 * its slot, even once it is due within 63 blocks, so its slot may start
 * before a level-1 slot holding later entries. The lists are one array
 * (level 0's, level 1's runs, then each upper level's) with one bitmap
 * over it: the slot to expire next is level 0's first occupied one, else
 * the earlier start of the ring's first occupied slot from now's digit on
 * and the first occupied slot above (first_occupied).
 *
 * Every list is in firing order, (deadline, start order `seq`), unless it
 * is marked unsorted. Entries are appended at a list's tail (a cascade's
 * from level 2 and up go in at the head, below). On level 0 and levels 2
 * and up an entry due before the tail marks the slot unsorted. A level-0
 * slot is always in order: its entries share a deadline and are appended
 * as they start, or cascade into it, in their upper slot's order, before
 * its 4,096 ticks begin.
 *
 * A level-1 slot is four lists, its runs, as a server files timeouts of
 * several lengths into it: the 30 s ones, then the 10 s ones due among
 * them, then the 5 s ones, each length in order. An entry joins the first
 * run it extends in firing order (wheel_pick_run, reading run heads only);
 * the last run takes what none does and is then marked unsorted.
 *
 * uvtw__wheel_expire(now) repeatedly takes that earliest slot while it
 * starts at or before `now` and moves the wheel's time to the slot's start.
 *   - Level 0: its entries, all due at that tick, join the expired list.
 *   - Level 1: an unsorted last run is cascaded (below), and level 0 goes
 *     first again. Else the slot becomes the current slot, the one whose
 *     4,096 ticks hold the wheel's time, and its runs fire from where they
 *     are: uvtw__wheel_pop_expired takes the earliest of the expired
 *     list's first entry and the runs' firsts that are due. No pass walks
 *     the slot, so the pass that reaches a level-1 slot of 10^6 idle
 *     timeouts costs what its due entries cost. A run all due is merged
 *     into the expired list.
 *   - Level 2 and up: the slot is cascaded: its entries are filed again
 *     against the new time, each on a lower level, in start order. Entries
 *     from level 2 and up go in at the head of their new lists, whose other
 *     entries were filed later; entries from level 1 at the tail of level-0
 *     slots, whose entries are older. A list sorted stays sorted.
 * Entries never expire before their deadline and a cascade keeps the exact
 * deadline.
 *
 * A restart unlinks the entry and files it again, so every entry is in the
 * slot its deadline names. Each list head remembers the smallest and the
 * largest deadline filed in it; a removal can leave them too low and too
 * high (bounds); a sorted list's earliest is its first entry's.
 */
#include "wheel.h"

#include <limits.h>
#include <string.h>

#include "check.h"

/* Moves all of `from` (not empty) to the tail of `to`, leaving `from` empty. */
static void list_splice(wheel_node_t *to, wheel_node_t *from) {
  from->next->prev = to->prev;
  to->prev->next = from->next;
  from->prev->next = to;
  to->prev = from->prev;
  list_init(from);
}

void uvtw__wheel_init(wheel_t *w, uint64_t now) {
  memset(w, 0, sizeof *w);
  w->now = now;
  list_init(&w->expired);
  w->ahead = &w->expired;
  for (unsigned index = 0; index < WHEEL_SLOT_COUNT; index++)
    list_init(&w->slots[index]);
}

/* Level 1's WHEEL_RUNS * 64 bits are as many words of the bitmaps. */
#define LEVEL1_WORD (wheel_first_slot(1) / 64)
_Static_assert(WHEEL_DIGIT_BITS == 6, "level 1 is WHEEL_RUNS bitmap words");

/* The first occupied slot among bitmap words [from, to), or UINT_MAX. */
static unsigned first_in_words(const wheel_t *w, unsigned from, unsigned to) {
  for (unsigned word = from; word < to; word++)
    if (w->occupied[word] != 0)
      return word * 64 + (unsigned)uvtw__lowest_bit(w->occupied[word]);
  return UINT_MAX;
}

/* The first occupied slot of level 1 from the wheel's time on, around its
 * ring (the current slot first): the first set bit of level 1's words from
 * the current slot's on, wrapping, and the first of the levels above,
 * whose slots are in time order; UINT_MAX where there is none. */
static void first_upper(const wheel_t *w, unsigned *ring, unsigned *above) {
  unsigned from = wheel_slot_of(w->now, 1) - wheel_first_slot(1); /* a bit of level 1's */
  *ring = UINT_MAX;
  for (unsigned k = 0; k <= WHEEL_RUNS && *ring == UINT_MAX; k++) {
    unsigned word = (from / 64 + k) % WHEEL_RUNS;
    uint64_t bits = w->occupied[LEVEL1_WORD + word], from_on = UINT64_MAX << from % 64;
    bits &= k == 0 ? from_on : k == WHEEL_RUNS ? ~from_on : UINT64_MAX;
    if (bits != 0) {
      unsigned bit = word * 64 + (unsigned)uvtw__lowest_bit(bits);
      *ring = wheel_first_slot(1) + bit / WHEEL_RUNS * WHEEL_RUNS;
    }
  }
  *above = first_in_words(w, LEVEL1_WORD + WHEEL_RUNS, WHEEL_SLOT_COUNT / 64);
}

/* The slot to expire first; false if none is occupied. Level 0 holds the
 * wheel's own block, before every other slot but the current one, which
 * waits for it. Then the earlier start of level 1's first and the first
 * above, the one above on a tie: it cascades into the slots of its ticks
 * before they are reached. */
static bool first_occupied(const wheel_t *w, unsigned *index) {
  unsigned ring, above;
  *index = first_in_words(w, 0, LEVEL1_WORD);
  if (*index != UINT_MAX)
    return true;
  first_upper(w, &ring, &above);
  bool take_above = ring == UINT_MAX || (above != UINT_MAX && wheel_slot_start(w->now, above) <=
                                                                  wheel_slot_start(w->now, ring));
  *index = take_above ? above : ring;
  return *index != UINT_MAX;
}

static bool is_unsorted(const wheel_t *w, unsigned index) {
  return w->unsorted[index / 64] & (uint64_t)1 << index % 64;
}

/* Moves the entries of a sorted list into the expired list, merged in
 * firing order, from the back: the expired list holds mostly earlier
 * entries (a slot's other runs, slots reached before), so the walk is
 * short. */
static void merge_expired(wheel_t *w, wheel_node_t *head) {
  if (list_empty(&w->expired) || wheel_before(w->expired.prev, head->next)) {
    list_splice(&w->expired, head);
    return;
  }
  wheel_node_t *at = w->expired.prev;
  while (!list_empty(head)) {
    wheel_node_t *node = head->prev;
    while (at != &w->expired && wheel_before(node, at))
      at = at->prev;
    head->prev = node->prev;
    node->prev->next = head;
    list_append(at->next, node); /* after `at` */
  }
}

/* Files the entries of a slot of `level`, taken out of the bitmaps, again
 * against the wheel's time (the slot's start), in start order, each on a
 * lower level. An entry of level 2 and up was filed before every entry of
 * the level-1 slot it joins, so it goes in at the head, walked from the
 * tail; one due in the wheel's block joins that block's level-1 slot too,
 * which is expired next. One of level 1 joins level-0 slots of only older
 * entries, at the tail. */
static void cascade(wheel_t *w, wheel_node_t *head, unsigned level) {
  bool front = level >= 2;
  head->prev->next = head->next->prev = NULL;
  wheel_node_t *node = front ? head->prev : head->next;
  list_init(head);
  for (wheel_node_t *after; node != NULL; node = after) {
    after = front ? node->prev : node->next;
    unsigned to = wheel_level_of(node->deadline, w->now);
    to = front && to == 0 ? 1 : to; /* the wheel's block: its level-1 slot */
    wheel_file(w, node, to, front);
    w->cascaded += to < level;
  }
}

/* Clears the bits and the maximum of slot `index`, whose entries are being
 * moved out. */
static void take(wheel_t *w, unsigned index) {
  wheel_emptied(w, &w->slots[index]);
  w->unsorted[index / 64] &= ~((uint64_t)1 << index % 64);
}

/* Level 1's slot `index` (its first run's), reached: its unsorted run is
 * cascaded; else every run wholly due by `now` is merged into the expired
 * list, and the others fire from where they are (the current slot). False
 * if nothing moved. */
static bool expire_ring_slot(wheel_t *w, unsigned index, uint64_t now) {
  unsigned last = index + WHEEL_RUNS - 1;
  if (wheel_occupied(w, last) && is_unsorted(w, last)) {
    take(w, last);
    cascade(w, &w->slots[last], 1);
    return true;
  }
  bool moved = false;
  for (unsigned run = 0; run < WHEEL_RUNS; run++, index++)
    if (wheel_occupied(w, index) && w->slots[index].prev->deadline <= now) {
      take(w, index);
      merge_expired(w, &w->slots[index]);
      moved = true;
    }
  return moved;
}

void uvtw__wheel_expire(wheel_t *w, uint64_t now) {
  unsigned index;
  while (first_occupied(w, &index)) {
    uint64_t start = wheel_slot_start(w->now, index);
    if (start > now)
      break;
    unsigned level = wheel_level_of_slot(index);
    w->now = start > w->now ? start : w->now;
    if (level == 1) {
      /* The runs that stay fire from where they are: level 0 is empty, and
       * no other slot starts before their last deadlines. */
      if (!expire_ring_slot(w, index, now))
        break;
    } else {
      take(w, index);
      if (level == 0) /* all due at `start`, in start order */
        list_splice(&w->expired, &w->slots[index]);
      else
        cascade(w, &w->slots[index], level);
    }
  }
  /* No occupied slot but the current one starts at or before `now`, so
   * every entry keeps its level and slot against the later time. */
  if (now > w->now)
    w->now = now;
  if (w->ahead == &w->expired) /* start the second walk from the tail */
    w->ahead = w->expired.prev;
}

/* The earliest deadline in occupied slot `index`: its first entry's if it
 * is sorted (a level-0 slot always is), else the slot's minimum (a lower
 * bound) or, if `exact`, the least of a walk. Of a level-1 slot (its first
 * run's index), the least of its runs'. */
static uint64_t slot_earliest(const wheel_t *w, unsigned index, bool exact) {
  unsigned runs = wheel_level_of_slot(index) == 1 ? WHEEL_RUNS : 1;
  uint64_t earliest = UINT64_MAX;
  for (unsigned run = 0; run < runs; run++, index++) {
    const wheel_node_t *head = &w->slots[index];
    if (!wheel_occupied(w, index))
      continue;
    uint64_t least = head->next->deadline;
    if (is_unsorted(w, index)) {
      least = exact ? UINT64_MAX : head->deadline;
      for (const wheel_node_t *node = head->next; exact && node != head; node = node->next)
        least = node->deadline < least ? node->deadline : least;
    }
    earliest = least < earliest ? least : earliest;
  }
  return earliest;
}

/* Entries are in the slot their deadline names, so the earliest is in the
 * expired list, the first occupied slot or the current slot. */
static uint64_t next_deadline(const wheel_t *w, bool exact) {
  unsigned index = first_in_words(w, 0, LEVEL1_WORD), ring, above;
  uint64_t earliest = UINT64_MAX;
  if (!list_empty(&w->expired)) {
    earliest = w->expired.next->deadline;
  } else if (index != UINT_MAX) {
    earliest = slot_earliest(w, index, exact);
  } else { /* level 1's first or the first above: either may be earlier */
    first_upper(w, &ring, &above);
    uint64_t in_ring = ring == UINT_MAX ? UINT64_MAX : slot_earliest(w, ring, exact);
    uint64_t in_above = above == UINT_MAX ? UINT64_MAX : slot_earliest(w, above, exact);
    earliest = in_ring < in_above ? in_ring : in_above;
  }
  uint64_t current = slot_earliest(w, wheel_slot_of(w->now, 1), exact);
  return current < earliest ? current : earliest;
}

uint64_t uvtw__wheel_next_deadline(const wheel_t *w) {
  return next_deadline(w, false);
}

uint64_t uvtw__wheel_next_deadline_exact(const wheel_t *w) {
  return next_deadline(w, true);
}

/* ---- the invariant checker (-Dchecks) ---------------------------------------- */

#ifdef UVTW_CHECKS
/* GCOVR_EXCL_START: the checker's failing branches run only on a broken wheel. */

/* Checks one list's links; counts its nodes into *count. */
static const char *check_links(const wheel_node_t *head, uint64_t *count) {
  const wheel_node_t *node = head;
  do {
    INVARIANT(node->next != NULL && node->prev != NULL && node->next->prev != NULL,
              "a linked node has a NULL link");
    INVARIANT(node->next->prev == node, "a node's next does not point back to it");
    if (node != head)
      ++*count;
    node = node->next;
  } while (node != head);
  return NULL;
}

/* Entries are in the slot their deadline names, and not due, but in the
 * current slot: there, in the 4,096 ticks of the wheel's time, and due once
 * that is at or after their deadline. */
static const char *check_slot(const wheel_t *w, unsigned index, uint64_t *count) {
  const wheel_node_t *head = &w->slots[index];
  const char *error = check_links(head, count);
  if (error != NULL)
    return error;
  INVARIANT((head->next != head) == wheel_occupied(w, index),
            "an occupancy bit disagrees with its slot");
  unsigned slot_level = wheel_level_of_slot(index), run = 0, named = index;
  if (slot_level == 1) { /* the slot's index is its first run's */
    run = (index - wheel_first_slot(1)) % WHEEL_RUNS;
    named = index - run;
  }
  bool current = slot_level == 1 && named == wheel_slot_of(w->now, 1);
  bool unsorted = is_unsorted(w, index);
  INVARIANT(!current || !unsorted, "the current slot is marked unsorted");
  INVARIANT(!unsorted || slot_level != 1 || run == WHEEL_RUNS - 1,
            "a level-1 run other than the last is marked unsorted");
  for (const wheel_node_t *node = head->next; node != head; node = node->next) {
    /* Levels 2 and up keep an entry until the wheel's time reaches its
     * slot, by which its digit names its level. */
    unsigned level = slot_level >= 2 ? wheel_digit_level(node->deadline, w->now)
                                     : wheel_level_of(node->deadline, w->now);
    INVARIANT(current || node->deadline >= w->now, "a filed deadline is before the wheel's time");
    INVARIANT(current ? level == 0 : wheel_slot_of(node->deadline, level) == named,
              "an entry is not in the slot its deadline names");
    INVARIANT((unsorted && slot_level != 0) || node->prev == head ||
                  !wheel_before(node, node->prev),
              "a level-0 slot, or one not marked unsorted, is out of firing order");
    INVARIANT(node->deadline >= head->deadline, "a slot's minimum is above one of its deadlines");
    INVARIANT(node->deadline <= head->seq, "a slot's maximum is below one of its deadlines");
  }
  INVARIANT(head->next == head || head->deadline >= wheel_slot_start(w->now, index),
            "a slot's minimum lies before the slot");
  return NULL;
}

const char *uvtw__wheel_check(const wheel_t *w) {
  uint64_t count = 0;
  const char *error = check_links(&w->expired, &count);
  if (error != NULL)
    return error;
  for (const wheel_node_t *node = w->expired.next; node != &w->expired; node = node->next) {
    INVARIANT(node->deadline <= w->now, "an expired entry is not due");
    const wheel_node_t *prev = node->prev;
    INVARIANT(prev == &w->expired || node->deadline > prev->deadline ||
                  (node->deadline == prev->deadline && node->seq >= prev->seq),
              "expired entries are out of deadline and start order");
  }
  for (unsigned index = 0; index < WHEEL_SLOT_COUNT; index++) {
    const wheel_node_t *head = &w->slots[index];
    bool empty_and_clear = head->next == head && head->prev == head && !wheel_occupied(w, index);
    INVARIANT(!empty_and_clear || head->seq == 0, "an empty slot's maximum is not 0");
    if (!empty_and_clear && (error = check_slot(w, index, &count)) != NULL)
      return error;
  }
  INVARIANT(count == w->count, "the entry count disagrees with the lists");
  const wheel_node_t *ahead = &w->expired;
  while (ahead != w->ahead && (ahead = ahead->next) != &w->expired)
    ;
  INVARIANT(ahead == w->ahead, "the second walk is not in the expired list");
  return NULL;
}
/* GCOVR_EXCL_STOP */
#endif
