/* A hierarchical timing wheel that is told the time.
 *
 * Time is a 64-bit count of ticks. The wheel keeps its own time `now`; every
 * pending deadline is >= now. Level 0 is the lowest 12 bits of the time,
 * each upper level one more 6-bit digit. An entry with deadline d is filed
 * on the level of the highest digit in which d and now differ, in the slot
 * named by d's digit on that level:
 *
 *   level  slots  slot width   a level spans   (1 tick = 1 ms by default)
 *   0      4096   1            4,096           ~4 s, exact deadlines
 *   1      64     4,096        262,144         ~4.4 min
 *   2      64     262,144      16,777,216      ~4.7 h
 *   ...
 *   9      64     2^60         2^64            all of uint64_t
 *
 * Level 0 is wide so that the common timeouts, a few seconds, fire without
 * ever being moved (the bench's expire and cancel workloads); it costs
 * about 128 KiB a wheel.
 *
 * Within its current rotation a level never wraps: d and now share every
 * digit above the entry's level, so only slots at or after now's own digit
 * can be occupied. Hence every entry on a lower level is due before every
 * entry on a higher one, and within a level slots are in time order. The
 * slots are one array in that order (level 0's, then each upper level's),
 * with one bitmap over it: the earliest pending entry is in the first
 * occupied slot, found by looking for the first non-zero bitmap word and
 * counting its trailing zeros.
 *
 * uvtw__wheel_expire(now) repeatedly takes that earliest slot while it
 * starts at or before `now`, moves the wheel's time to the slot's start and
 * either moves its entries to the expired list (level 0: they all have
 * exactly that deadline) or files them again against the new time, which
 * puts each on a lower level (the cascade). Entries never expire before
 * their deadline and a cascade keeps the exact deadline.
 *
 * FIFO among equal deadlines: every entry carries its start order (`seq`),
 * and a level-0 slot, whose entries share one deadline, fires in that
 * order. Entries are appended at a slot's tail. A new entry, started last,
 * belongs there; a cascaded one may not (a direct filing got ahead of it,
 * or it was postponed, below, and its slot holds entries in the order they
 * were first filed, not restarted). Such a filing marks its level-0 slot
 * unsorted, and the expiry sorts the slot (a merge sort: one walk if it is
 * in order, O(k log k) if not) before the slot fires. So the sorting is
 * spread over the passes that fire each millisecond, not done for a whole
 * upper slot in the pass that cascades it.
 *
 * Postponing: a restart to a later deadline of an entry that waits on an
 * upper level leaves the entry where it is and only rewrites its deadline
 * and start order; the cascade that empties its slot files it by the new
 * deadline. An idle timeout pushed back on every read then touches the
 * timer alone, not its two list neighbours (the bench's bump workload). An
 * upper-level entry may therefore sit in an earlier slot than its deadline
 * names, never a later one; level-0 entries are always exact.
 *
 * Each slot head remembers the smallest deadline filed in it; a removal or
 * a postponement can leave that value too low (a lower bound), never too
 * high.
 */
#include "wheel.h"

#include <stdlib.h>
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
  w->scratch_max = SIZE_MAX / 2 / sizeof *w->scratch;
}

void uvtw__wheel_fini(wheel_t *w) {
  free(w->scratch);
  w->scratch = NULL;
  w->scratch_size = 0;
}

/* Merges two chains (NULL-terminated, linked by `next`) in start order. */
static wheel_node_t *merge_by_seq(wheel_node_t *a, wheel_node_t *b) {
  wheel_node_t head, *tail = &head;
  while (a != NULL && b != NULL) {
    wheel_node_t **first = a->seq <= b->seq ? &a : &b;
    tail->next = *first;
    tail = *first;
    *first = (*first)->next;
  }
  tail->next = a != NULL ? a : b;
  return head.next;
}

/* A chain merge sorted in start order. */
static wheel_node_t *sort_by_seq(wheel_node_t *chain) {
  if (chain->next == NULL)
    return chain;
  wheel_node_t *slow = chain, *fast = chain->next;
  while (fast != NULL && fast->next != NULL) {
    slow = slow->next;
    fast = fast->next->next;
  }
  wheel_node_t *second = slow->next;
  slow->next = NULL;
  return merge_by_seq(sort_by_seq(chain), sort_by_seq(second));
}

/* Room for `count` pairs twice over in the scratch array; false if there
 * is none (more than scratch_max, or no memory). */
static bool scratch_for(wheel_t *w, size_t count) {
  if (count <= w->scratch_size)
    return true;
  size_t size = count > 2 * w->scratch_size ? count : 2 * w->scratch_size;
  wheel_pair_t *bigger =
      size <= w->scratch_max ? realloc(w->scratch, 2 * size * sizeof *bigger) : NULL;
  if (bigger == NULL)
    return false;
  w->scratch = bigger;
  w->scratch_size = size;
  return true;
}

/* Puts a slot's entries in start order. Through the scratch array: one
 * walk copies each entry's start order and address, a radix sort of the
 * copies (8 bits a round, as many rounds as the spread of start orders
 * needs) runs in cache, and one walk of the array relinks the entries, whose
 * stores do not wait for each other. A linked merge sort instead waits for
 * a cache miss at each of its k log k steps. Without room for the array,
 * the merge sort. */
static void sort_slot(wheel_t *w, wheel_node_t *head) {
  size_t count = 0;
  uint64_t low = head->next->seq, spread = 0;
  for (wheel_node_t *node = head->next; node != head; node = node->next) {
    if (!scratch_for(w, count + 1)) {
      head->prev->next = NULL;
      node = sort_by_seq(head->next);
      list_init(head);
      for (wheel_node_t *next; node != NULL; node = next) {
        next = node->next;
        list_append(head, node);
      }
      return;
    }
    w->scratch[count++] = (wheel_pair_t){node->seq, node};
    low = node->seq < low ? node->seq : low;
  }
  wheel_pair_t *from = w->scratch, *to = w->scratch + w->scratch_size;
  for (size_t i = 0; i < count; i++)
    spread |= from[i].seq - low;
  for (unsigned shift = 0; shift < 64 && spread >> shift != 0; shift += 8) {
    size_t at[257] = {0};
    for (size_t i = 0; i < count; i++)
      at[1 + ((from[i].seq - low) >> shift & 255)]++;
    for (unsigned digit = 0; digit < 256; digit++)
      at[digit + 1] += at[digit];
    for (size_t i = 0; i < count; i++)
      to[at[(from[i].seq - low) >> shift & 255]++] = from[i];
    wheel_pair_t *swap = from;
    from = to;
    to = swap;
  }
  list_init(head);
  for (size_t i = 0; i < count; i++)
    list_append(head, from[i].node);
}

/* The first occupied slot, which holds the earliest entries (slots are in
 * time order); false if none. */
static bool first_occupied(const wheel_t *w, unsigned *index) {
  for (unsigned word = 0; word < WHEEL_SLOT_COUNT / 64; word++) {
    if (w->occupied[word] != 0) {
      *index = word * 64 + (unsigned)uvtw__lowest_bit(w->occupied[word]);
      return true;
    }
  }
  return false;
}

void uvtw__wheel_expire(wheel_t *w, uint64_t now) {
  unsigned index;
  while (first_occupied(w, &index)) {
    uint64_t start = wheel_slot_start(w->now, index);
    if (start > now)
      break;
    w->now = start;
    w->occupied[index / 64] &= ~((uint64_t)1 << index % 64);
    wheel_node_t *head = &w->slots[index];
    unsigned level = wheel_level_of_slot(index);
    if (level == 0) {
      uint64_t bit = (uint64_t)1 << index % 64;
      if (w->unsorted[index / 64] & bit) {
        w->unsorted[index / 64] &= ~bit;
        sort_slot(w, head);
      }
      list_splice(&w->expired, head);
      continue;
    }
    /* Refiled against the slot's start, no entry comes back to this slot. */
    head->prev->next = NULL;
    wheel_node_t *node = head->next;
    list_init(head);
    while (node != NULL) {
      wheel_node_t *next = node->next;
      if (wheel_file(w, node) < level)
        w->cascaded++;
      node = next;
    }
  }
  /* No occupied slot starts at or before `now`, so every entry keeps its
   * level and slot against the later time. */
  if (now > w->now)
    w->now = now;
  if (w->ahead == &w->expired) /* start the second walk from the tail */
    w->ahead = w->expired.prev;
}

uint64_t uvtw__wheel_next_deadline(const wheel_t *w) {
  unsigned index;
  if (!list_empty(&w->expired))
    return w->expired.next->deadline;
  return first_occupied(w, &index) ? w->slots[index].deadline : UINT64_MAX;
}

uint64_t uvtw__wheel_next_deadline_exact(const wheel_t *w) {
  if (!list_empty(&w->expired))
    return w->expired.next->deadline;
  /* Slots in time order. A slot's entries are all due at or after its
   * start, so once the earliest deadline seen is not after the next slot's
   * start, no later slot holds an earlier one. */
  uint64_t earliest = UINT64_MAX;
  for (unsigned word = 0; word < WHEEL_SLOT_COUNT / 64; word++) {
    for (uint64_t bits = w->occupied[word]; bits != 0; bits &= bits - 1) {
      unsigned index = word * 64 + (unsigned)uvtw__lowest_bit(bits);
      if (earliest <= wheel_slot_start(w->now, index))
        return earliest;
      const wheel_node_t *head = &w->slots[index];
      for (const wheel_node_t *node = head->next; node != head; node = node->next)
        if (node->deadline < earliest)
          earliest = node->deadline;
    }
  }
  return earliest;
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

static const char *check_slot(const wheel_t *w, unsigned index, uint64_t *count) {
  const wheel_node_t *head = &w->slots[index];
  unsigned level = wheel_level_of_slot(index);
  const char *error = check_links(head, count);
  if (error != NULL)
    return error;
  bool bit = w->occupied[index / 64] & ((uint64_t)1 << index % 64);
  INVARIANT((head->next != head) == bit, "an occupancy bit disagrees with its slot");
  uint64_t start = wheel_slot_start(w->now, index);
  for (const wheel_node_t *node = head->next; node != head; node = node->next) {
    INVARIANT(node->deadline >= w->now, "a filed deadline is before the wheel's time");
    INVARIANT(level != 0 || node->deadline == start,
              "a level-0 entry is not in the slot its deadline names");
    INVARIANT(node->deadline >= start, "an entry is in a slot after its deadline");
    INVARIANT(level != 0 || node->prev == head || node->seq >= node->prev->seq ||
                  (w->unsorted[index / 64] & ((uint64_t)1 << index % 64)),
              "a level-0 slot not marked unsorted is out of start order");
    INVARIANT(node->deadline >= head->deadline, "a slot's minimum is above one of its deadlines");
  }
  INVARIANT(head->next == head || head->deadline >= start, "a slot's minimum lies before the slot");
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
    bool empty_and_clear = head->next == head && head->prev == head &&
                           !(w->occupied[index / 64] & ((uint64_t)1 << index % 64));
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
