/* The MPSC queue alone: several producers, one consumer draining batches.
 * Every item arrives exactly once and each producer's items arrive in the
 * order it pushed them. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "mpsc.h"
#include "tap.h"

#define PRODUCERS 4
#define PER_PRODUCER 200000

typedef struct {
  mpsc_node_t node;
  uint32_t producer;
  uint32_t index;
} item_t;

static mpsc_t queue;
static item_t *items;
static _Atomic int wakeups_requested;

static void *produce(void *arg) {
  uint32_t p = (uint32_t)(uintptr_t)arg;
  for (uint32_t i = 0; i < PER_PRODUCER; i++) {
    item_t *it = &items[(size_t)p * PER_PRODUCER + i];
    it->producer = p;
    it->index = i;
    if (uvtw__mpsc_push(&queue, &it->node))
      atomic_fetch_add(&wakeups_requested, 1);
  }
  return NULL;
}

int main(void) {
  items = calloc((size_t)PRODUCERS * PER_PRODUCER, sizeof *items);
  uvtw__mpsc_init(&queue);
  tap_ok(uvtw__mpsc_take_all(&queue) == NULL, "an empty queue yields nothing");

  pthread_t threads[PRODUCERS];
  for (uintptr_t p = 0; p < PRODUCERS; p++)
    pthread_create(&threads[p], NULL, produce, (void *)p);

  uint32_t next_index[PRODUCERS] = {0};
  uint64_t received = 0, batches = 0, order_errors = 0, foreign = 0;
  unsigned done = 0;
  while (received < (uint64_t)PRODUCERS * PER_PRODUCER) {
    mpsc_node_t *n = uvtw__mpsc_take_all(&queue);
    if (n != NULL)
      batches++;
    for (; n != NULL; n = n->next) {
      item_t *it = (item_t *)n;
      if (it->producer >= PRODUCERS) {
        foreign++;
        continue;
      }
      if (it->index != next_index[it->producer])
        order_errors++;
      next_index[it->producer] = it->index + 1;
      received++;
    }
    (void)done;
  }
  for (int p = 0; p < PRODUCERS; p++)
    pthread_join(threads[p], NULL);

  EXPECT_U64(received, (uint64_t)PRODUCERS * PER_PRODUCER, "every pushed item arrives");
  EXPECT_U64(order_errors, 0, "each producer's items arrive in push order, none twice or missing");
  EXPECT_U64(foreign, 0, "no item arrives that was not pushed");
  tap_ok(uvtw__mpsc_take_all(&queue) == NULL, "nothing is left after the last item");
  for (int p = 0; p < PRODUCERS; p++)
    EXPECT_U64(next_index[p], PER_PRODUCER, "producer's last item was the last received");
  /* The queue turns non-empty once per batch the consumer takes, and only
   * the push that turns it says so. */
  EXPECT_U64(atomic_load(&wakeups_requested), batches,
             "exactly one push per batch reports the queue was empty");

  mpsc_node_t a, b;
  tap_ok(uvtw__mpsc_push(&queue, &a) && !uvtw__mpsc_push(&queue, &b),
         "the first push onto an empty queue reports it, the next does not");
  mpsc_node_t *taken = uvtw__mpsc_take_all(&queue);
  tap_ok(taken == &a && taken->next == &b && b.next == NULL,
         "take_all returns the queued nodes, oldest first");
  free(items);
  return tap_done();
}
