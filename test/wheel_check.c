/* The pure wheel's invariant checker (see wheel_check.h). */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wheel_check.h"

/* Checks one list's links; counts its nodes into *count. */
static const char *check_links(const wheel_node_t *head, uint64_t *count) {
  const wheel_node_t *node = head;
  do {
    if (node->next == NULL || node->prev == NULL || node->next->prev == NULL)
      return "a linked node has a NULL link";
    if (node->next->prev != node)
      return "a node's next does not point back to it";
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
  if ((head->next == head) == ((w->occupied[index / 64] & ((uint64_t)1 << index % 64)) != 0))
    return "an occupancy bit disagrees with its slot";
  uint64_t start = wheel_slot_start(w->now, index);
  for (const wheel_node_t *node = head->next; node != head; node = node->next) {
    if (node->deadline < w->now)
      return "a filed deadline is before the wheel's time";
    if (level == 0 && node->deadline != start)
      return "a level-0 entry is not in the slot its deadline names";
    if (node->deadline < start)
      return "an entry is in a slot after its deadline";
    if (level == 0 && node->prev != head && node->seq < node->prev->seq)
      return "a level-0 slot is out of start order";
    if (node->deadline < head->deadline)
      return "a slot's minimum is above one of its deadlines";
  }
  if (!(head->next == head) && head->deadline < start)
    return "a slot's minimum lies before the slot";
  return NULL;
}

const char *wheel_check(const wheel_t *w) {
  uint64_t count = 0;
  const char *error = check_links(&w->expired, &count);
  if (error != NULL)
    return error;
  for (const wheel_node_t *node = w->expired.next; node != &w->expired; node = node->next) {
    if (node->deadline > w->now)
      return "an expired entry is not due";
    if (node->prev != &w->expired &&
        (node->deadline < node->prev->deadline ||
         (node->deadline == node->prev->deadline && node->seq < node->prev->seq)))
      return "expired entries are out of deadline and start order";
  }
  for (unsigned index = 0; index < WHEEL_SLOT_COUNT; index++) {
    const wheel_node_t *head = &w->slots[index];
    bool empty_and_clear = head->next == head && head->prev == head &&
                           !(w->occupied[index / 64] & ((uint64_t)1 << index % 64));
    if (!empty_and_clear && (error = check_slot(w, index, &count)) != NULL)
      return error;
  }
  if (count != w->count)
    return "the entry count disagrees with the lists";
  const wheel_node_t *ahead = &w->expired;
  while (ahead != w->ahead && (ahead = ahead->next) != &w->expired)
    ;
  if (ahead != w->ahead)
    return "the second walk is not in the expired list";
  return NULL;
}
