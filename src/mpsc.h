/* An intrusive lock-free multi-producer single-consumer queue.
 *
 * Producers push with one CAS (retried only when another producer pushed in
 * between: lock-free, never blocking). The consumer takes everything queued
 * in one atomic exchange and gets it back in push order, so items from one
 * producer keep their order. No ABA hazard: nothing is ever popped singly.
 *
 * The queue can be closed: its top then holds a marker, so a push either
 * lands before the close (and is returned by the close) or fails.
 */
#ifndef UVTW_MPSC_H
#define UVTW_MPSC_H

#include <stdatomic.h>

typedef struct mpsc_node_s {
  struct mpsc_node_s *next;
} mpsc_node_t;

typedef struct mpsc_s {
  _Atomic(mpsc_node_t *) top; /* newest first, or &closed when closed */
  mpsc_node_t closed;         /* never queued: only its address is used */
} mpsc_t;

typedef enum {
  MPSC_PUSHED,       /* queued behind others: the consumer is already due to run */
  MPSC_PUSHED_FIRST, /* queued onto an empty queue: the caller wakes the consumer */
  MPSC_CLOSED        /* not queued: the queue is closed */
} mpsc_push_result_t;

void uvtw__mpsc_init(mpsc_t *q);

/* Any thread. */
mpsc_push_result_t uvtw__mpsc_push(mpsc_t *q, mpsc_node_t *node);

/* Consumer only. Takes every queued node; returns them oldest first as a
 * NULL-terminated list (read `next` before a node can be pushed again). */
mpsc_node_t *uvtw__mpsc_take_all(mpsc_t *q);

/* Consumer only. Closes the queue and returns what was left, oldest first. */
mpsc_node_t *uvtw__mpsc_close(mpsc_t *q);

#endif
