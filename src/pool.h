/* Task blocks: where uvtw_schedule's tasks live (see pool.c).
 *
 * A task's block is carved, with one atomic add, from the 4 KiB page its
 * timeout class is filling; pages are carved the same way from 256 KiB
 * slabs. A page goes back to the system as soon as its last block does, so
 * a task that lives long keeps 8 KiB at most: its page and its slab's
 * header page. The pool counts references for its owner: the owner's own
 * and one per slab, so the owner (and the pool in it) outlives every
 * block. */
#ifndef UVTW_POOL_H
#define UVTW_POOL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define POOL_BLOCK 128         /* bytes, two cache lines */
#define POOL_PAGE 4096         /* bytes; block 0 is the page's header */
#define POOL_SLAB (256 * 1024) /* bytes; page 0 is the slab's header */
#define POOL_CLASSES 18        /* timeouts 0, 1, 2-3, 4-7, ..., 65536 ms and more */
#define POOL_CACHED 64         /* empty pages kept for reuse: 256 KiB at most */

typedef struct pool_s {
  _Atomic uint32_t refs;
  _Atomic uint32_t pages; /* carved from slabs and not yet given back to the system */
  _Atomic uintptr_t slab; /* the slab pages are carved from | the index of its next page */
  /* Per class: the page being filled | the index of its next block; 0: none. */
  _Atomic uintptr_t cursor[POOL_CLASSES];
  _Atomic(void *) cached[POOL_CACHED]; /* empty pages, NULL, or POOL_CLOSED once retired */
} pool_t;

/* The pool holds its owner's reference. */
void uvtw__pool_init(pool_t *p);
/* Any thread. A block for a task with `timeout`, or NULL if out of memory. */
void *uvtw__pool_get(pool_t *p, uint64_t timeout);
/* Any thread, once per block. Returns true if that was the last
 * reference: the owner is to be freed. */
bool uvtw__pool_put(pool_t *p, void *block);
/* The owner, once no block will be taken any more: the pages being filled
 * and the cached ones go back as soon as their blocks have. */
void uvtw__pool_retire(pool_t *p);
/* Drops a reference; true if it was the last: the owner is to be freed. */
bool uvtw__pool_unref(pool_t *p);
/* Bytes of memory the pool holds for blocks: its pages, and the header
 * page of each slab they are in. */
uint64_t uvtw__pool_bytes(pool_t *p);

#ifdef UVTW_CHECKS
const char *uvtw__pool_check(pool_t *p, bool retired);
#endif

#endif
