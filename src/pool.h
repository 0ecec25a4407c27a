/* Task blocks: where uvtw_schedule's tasks live (see pool.c).
 *
 * A block for a task with a timeout under a second is carved, with one
 * atomic add, from the 256 KiB slab its timeout class is filling; a longer
 * one is malloc'd. The pool counts references for its owner: the owner's
 * own, one per slab in use and one per malloc'd block, so the owner (and
 * the pool in it) outlives every block. */
#ifndef UVTW_POOL_H
#define UVTW_POOL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define POOL_BLOCK 128         /* bytes, two cache lines */
#define POOL_SLAB (256 * 1024) /* bytes; block 0 is the slab's own */
#define POOL_SLAB_TIMEOUT 1023 /* ms: longer timeouts get malloc'd blocks */
#define POOL_CLASSES 11        /* timeouts 0, 1, 2-3, 4-7, ..., 512-1023 ms */
#define POOL_SPARES 8          /* empty slabs kept for reuse: 2 MiB at most */

typedef struct pool_s {
  _Atomic uint32_t refs;
  /* Per class: the slab being filled | the index of its next block; 0: none. */
  _Atomic uintptr_t cursor[POOL_CLASSES];
  _Atomic(void *) spare[POOL_SPARES]; /* empty slabs, or NULL */
} pool_t;

/* The pool holds its owner's reference. */
void uvtw__pool_init(pool_t *p);
/* Any thread. A block for a task with `timeout`, or NULL if out of memory. */
void *uvtw__pool_get(pool_t *p, uint64_t timeout);
/* Whether a block for `timeout` comes from a slab. */
static inline bool uvtw__pool_slabbed(uint64_t timeout) {
  return timeout <= POOL_SLAB_TIMEOUT;
}

/* Any thread, once per block, saying whether it came from a slab. Returns
 * true if that was the last reference: the owner is to be freed. */
bool uvtw__pool_put(pool_t *p, void *block, bool slabbed);
/* The owner, once no block will be taken any more: the slabs being filled
 * go back as soon as their blocks have. */
void uvtw__pool_retire(pool_t *p);
/* Drops a reference; true if it was the last: then the owner calls
 * uvtw__pool_fini, which frees the spare slabs, and frees itself. */
bool uvtw__pool_unref(pool_t *p);
void uvtw__pool_fini(pool_t *p);

#endif
