/* An intrusive lock-free multi-producer single-consumer queue.
 *
 * Producers push with one CAS (retried only when another producer pushed in
 * between: lock-free, never blocking). The consumer takes everything queued
 * in one atomic exchange and gets it back in push order, so items from one
 * producer keep their order. No ABA hazard: nothing is ever popped singly.
 */
#ifndef UVTW_MPSC_H
#define UVTW_MPSC_H

#include <stdatomic.h>
#include <stdbool.h>

typedef struct mpsc_node_s {
  struct mpsc_node_s *next;
} mpsc_node_t;

typedef struct mpsc_s {
  _Atomic(mpsc_node_t *) top; /* newest first */
} mpsc_t;

void uvtw__mpsc_init(mpsc_t *q);

/* Any thread. Returns true if the queue was empty: the caller then wakes
 * the consumer. */
bool uvtw__mpsc_push(mpsc_t *q, mpsc_node_t *node);

/* Consumer only. Takes every queued node; returns them oldest first as a
 * NULL-terminated list (read `next` before a node can be pushed again). */
mpsc_node_t *uvtw__mpsc_take_all(mpsc_t *q);

#endif
