#include "mpsc.h"

#include <stddef.h>

void uvtw__mpsc_init(mpsc_t *q) {
  atomic_init(&q->top, NULL);
}

bool uvtw__mpsc_push(mpsc_t *q, mpsc_node_t *node) {
  mpsc_node_t *top = atomic_load_explicit(&q->top, memory_order_relaxed);
  do
    node->next = top;
  while (!atomic_compare_exchange_weak_explicit(&q->top, &top, node, memory_order_release,
                                                memory_order_relaxed));
  return top == NULL;
}

mpsc_node_t *uvtw__mpsc_take_all(mpsc_t *q) {
  mpsc_node_t *newest = atomic_exchange_explicit(&q->top, NULL, memory_order_acquire);
  mpsc_node_t *oldest = NULL;
  while (newest != NULL) { /* reverse: oldest first */
    mpsc_node_t *next = newest->next;
    newest->next = oldest;
    oldest = newest;
    newest = next;
  }
  return oldest;
}
