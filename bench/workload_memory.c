/* The memory workload: the machine's cost of touching N timers (a yardstick) (see harness.c). */
#define _GNU_SOURCE
#include "workload.h"

#include <stdio.h>
#include <stdlib.h>

/* ---- memory: what the machine charges for touching N timers --------------- */

/* Not a backend measurement: a yardstick for the others. With N records of
 * one cache line each, in the same random order the workloads use: the cost
 * of touching one record (independent accesses, which the CPU overlaps, as
 * it does a stop's first access), and of one dependent miss (a pointer chase
 * through a random cycle, as a walk along a linked list or down a heap).
 * And the floor of any timer kept on intrusive doubly linked lists: with N
 * records of 56 bytes (a uvtw_timer_t's size) on 5 lists, 4N times take a
 * random record off its list and append it to a random one, inline, with no
 * bookkeeping and no call: the memory work of a churn step (stop + start)
 * or of a restart, and nothing else. */
typedef struct line_s {
  struct line_s *next;
  uint64_t value;
  char pad[48];
} line_t;

static const line_t *volatile chase_end;

typedef struct node_s {
  struct node_s *next, *prev;
  uint64_t rest[5]; /* 56 bytes in all, like a uvtw_timer_t */
} node_t;

/* ns per unlink + append of a random record (see above). */
static double list_move_ns(size_t n, const uint32_t *pick, size_t steps) {
  enum { LISTS = 5 };
  node_t *nodes = xmalloc(n * sizeof *nodes);
  node_t heads[LISTS];
  for (unsigned l = 0; l < LISTS; l++)
    heads[l].next = heads[l].prev = &heads[l];
  for (size_t i = 0; i < n; i++) {
    node_t *h = &heads[i % LISTS], *tail = h->prev;
    nodes[i].next = h;
    nodes[i].prev = tail;
    nodes[i].rest[0] = i;
    tail->next = &nodes[i];
    h->prev = &nodes[i];
  }
  uint64_t t0 = cpu_ns();
  for (size_t k = 0; k < steps; k++) {
    node_t *e = &nodes[pick[k]];
    e->prev->next = e->next;
    e->next->prev = e->prev;
    node_t *h = &heads[pick[steps - 1 - k] % LISTS], *tail = h->prev;
    e->next = h;
    e->prev = tail;
    e->rest[0] = k;
    tail->next = e;
    h->prev = e;
  }
  uint64_t t1 = cpu_ns();
  chase_end = (const line_t *)(const void *)heads[0].next; /* keeps the loop */
  free(nodes);
  return (double)(t1 - t0) / (double)steps;
}

void run_memory(size_t n, uint64_t seed) {
  line_t *lines = xmalloc(n * sizeof *lines);
  uint32_t *perm = xmalloc(n * sizeof *perm);
  size_t steps = 4 * n;
  uint32_t *pick = xmalloc(steps * sizeof *pick);

  rng_seed(seed, WL_CHURN, 0);
  for (size_t k = 0; k < steps; k++)
    pick[k] = rng_below((uint32_t)n);
  shuffle(perm, n);
  for (size_t i = 0; i < n; i++) {
    lines[perm[i]].next = &lines[perm[(i + 1) % n]];
    lines[perm[i]].value = i;
  }
  uint64_t t0 = cpu_ns();
  for (size_t k = 0; k < steps; k++)
    lines[pick[k]].value++;
  uint64_t t1 = cpu_ns();
  const line_t *at = &lines[perm[0]];
  for (size_t k = 0; k < n; k++)
    at = at->next;
  uint64_t t2 = cpu_ns();
  chase_end = at; /* keeps the chase from being optimized away */
  record("memory", n, "ns_random_touch", (double)(t1 - t0) / (double)steps);
  record("memory", n, "ns_dependent_miss", (double)(t2 - t1) / (double)n);
  free(lines);
  record("memory", n, "ns_list_move", list_move_ns(n, pick, steps));
  free(perm);
  free(pick);
}
