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

void mpsc_init(mpsc_t *q);

/* Any thread. Returns true if the queue was empty: the caller should then
 * wake the consumer (earlier pushes have already done so otherwise). */
bool mpsc_push(mpsc_t *q, mpsc_node_t *node);

/* Consumer only. Takes every queued node; returns them oldest first as a
 * NULL-terminated list (the caller reads `next` before reusing a node). */
mpsc_node_t *mpsc_take_all(mpsc_t *q);

#endif
