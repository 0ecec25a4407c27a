/* Task blocks: where uvtw_schedule's tasks live (see pool.c).
 *
 * A task's block is carved, with one atomic add, from the 256 KiB slab its
 * timeout class is filling. A slab goes back once all its 4 KiB pages are
 * empty, and an empty page at once beyond a budget, so a task that lives
 * long keeps its page and its slab's header page, 8 KiB. The pool counts
 * references for its owner: the owner's own and one per slab in use, so
 * the owner (and the pool in it) outlives every block. */
#ifndef UVTW_POOL_H
#define UVTW_POOL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define POOL_BLOCK 128         /* bytes, two cache lines */
#define POOL_PAGE 4096         /* bytes: 32 blocks, the unit memory goes back in */
#define POOL_SLAB (256 * 1024) /* bytes; page 0 is the slab's header */
#define POOL_CLASSES 12        /* timeouts 0, 1, 2-3, 4-7, ..., 512-1023 ms, 1024 ms and more */
#define POOL_SPARES 4          /* empty slabs kept for reuse: 1 MiB */
#define POOL_IDLE 1024         /* empty pages kept in slabs not yet empty: 4 MiB */

typedef struct pool_s {
  _Atomic uint32_t refs;     /* the owner's, and one per slab in use */
  _Atomic uint32_t idle;     /* empty pages kept in slabs in use (about POOL_IDLE at most) */
  _Atomic uint32_t returned; /* pages given back to the system, of slabs still mapped */
  /* Per class: the slab being filled | the index of its next block; 0: none. */
  _Atomic uintptr_t slab[POOL_CLASSES];
  _Atomic(void *) spare[POOL_SPARES]; /* empty slabs, NULL, or POOL_CLOSED once retired */
} pool_t;

/* The pool holds its owner's reference. */
void uvtw__pool_init(pool_t *p);
/* Any thread. A block for a task with `timeout`, or NULL if out of memory. */
void *uvtw__pool_get(pool_t *p, uint64_t timeout);
/* Any thread, once per block. Returns true if that was the last
 * reference: the owner is to be freed. */
bool uvtw__pool_put(pool_t *p, void *block);
/* The owner, once no block will be taken any more: the spare slabs go
 * back, and the slabs being filled as soon as their blocks have. */
void uvtw__pool_retire(pool_t *p);
/* Drops a reference; true if it was the last: the owner is to be freed. */
bool uvtw__pool_unref(pool_t *p);
/* Bytes of memory the pool holds: its slabs, spares too, less the pages
 * given back to the system. */
uint64_t uvtw__pool_bytes(pool_t *p);

#ifdef UVTW_CHECKS
const char *uvtw__pool_check(pool_t *p, bool retired);
#endif

#endif
