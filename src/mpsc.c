#include "mpsc.h"

#include <stddef.h>

void uvtw__mpsc_init(mpsc_t *q) {
  atomic_init(&q->top, NULL);
  q->closed.next = NULL;
}

mpsc_push_result_t uvtw__mpsc_push(mpsc_t *q, mpsc_node_t *node) {
  mpsc_node_t *top = atomic_load_explicit(&q->top, memory_order_relaxed);
  do {
    if (top == &q->closed)
      return MPSC_CLOSED;
    node->next = top;
  } while (!atomic_compare_exchange_weak_explicit(&q->top, &top, node, memory_order_release,
                                                  memory_order_relaxed));
  return top == NULL ? MPSC_PUSHED_FIRST : MPSC_PUSHED;
}

static mpsc_node_t *oldest_first(mpsc_node_t *newest_first) {
  mpsc_node_t *list = NULL;
  while (newest_first != NULL) {
    mpsc_node_t *next = newest_first->next;
    newest_first->next = list;
    list = newest_first;
    newest_first = next;
  }
  return list;
}

mpsc_node_t *uvtw__mpsc_take_all(mpsc_t *q) {
  mpsc_node_t *top = atomic_load_explicit(&q->top, memory_order_relaxed);
  if (top == NULL || top == &q->closed)
    return NULL;
  return oldest_first(atomic_exchange_explicit(&q->top, NULL, memory_order_acquire));
}

mpsc_node_t *uvtw__mpsc_close(mpsc_t *q) {
  mpsc_node_t *top = atomic_exchange_explicit(&q->top, &q->closed, memory_order_acquire);
  return top == &q->closed ? NULL : oldest_first(top);
}
