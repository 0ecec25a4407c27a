/* Task blocks, carved in order from 256 KiB slabs that go back to the C
 * library when their last block does, but for a few kept for reuse.
 *
 * Why not malloc: the loop frees the blocks producers allocate, so a
 * producer's malloc finds its thread's caches empty and returns memory the
 * loop's core touched last, and glibc keeps small freed blocks in its own
 * lists rather than give the pages back. A slab is fresh memory that a
 * producer fills in address order and the loop reads in that order.
 *
 * Any thread takes a block with one atomic add on its class's cursor: the
 * slab's address (slabs are aligned to their size) plus the index of its
 * next block. A slab is filled again only once it is empty: a block is
 * never handed to one thread while another still holds it. The thread that
 * finds a slab used up puts in another; the one that gives a slab's last
 * block back keeps it as a spare, up to POOL_SPARES of them, or frees it.
 * Block 0 holds the slab's count of blocks given back. Spares are taken
 * before a new slab is allocated: their pages are in memory already, where
 * a new slab's fault in one by one.
 *
 * Memory: a slab goes back once every task carved from it has ended and
 * its ticket been released. Tasks share a slab only with tasks of the same
 * timeout class (powers of two up to a second), taken at about the same
 * time, so they end at about the same time; tasks of a second or more, the
 * ones that would keep a slab long, get a malloc'd block each.
 */
#define _DEFAULT_SOURCE 1 /* madvise, with -std=c11 */

#include "pool.h"

#include <stdlib.h>

#include "port.h"

#define SLAB_SIZE ((uintptr_t)POOL_SLAB)
#define SLAB_MASK (SLAB_SIZE - 1)
#define SLAB_BLOCKS (SLAB_SIZE / POOL_BLOCK - 1) /* block 0: the count below */
#define GIVEN_BACK(slab) ((_Atomic uint32_t *)(void *)(slab))

#ifdef _WIN32
#include <malloc.h>
#define slab_alloc() _aligned_malloc(SLAB_SIZE, SLAB_SIZE)
#define slab_free(slab) _aligned_free(slab)
#else
#include <sys/mman.h>
#define slab_free(slab) free(slab)

/* A new slab, its pages made present in one call (Linux 5.14 on) rather
 * than faulted in one by one as a producer first writes each. */
static void *slab_alloc(void) {
  void *slab = aligned_alloc(SLAB_SIZE, SLAB_SIZE);
#ifdef MADV_POPULATE_WRITE
  if (slab != NULL)
    madvise(slab, SLAB_SIZE, MADV_POPULATE_WRITE);
#endif
  return slab;
}
#endif

_Static_assert(POOL_SLAB_TIMEOUT == (1u << (POOL_CLASSES - 1)) - 1, "a class per power of two");

void uvtw__pool_init(pool_t *p) {
  atomic_init(&p->refs, 1);
  for (unsigned i = 0; i < POOL_CLASSES; i++)
    atomic_init(&p->cursor[i], 0);
  for (unsigned i = 0; i < POOL_SPARES; i++)
    atomic_init(&p->spare[i], NULL);
}

/* An empty slab, a spare one if there is: its pages are in memory already. */
static char *slab_take(pool_t *p) {
  for (unsigned i = 0; i < POOL_SPARES; i++) {
    char *slab = atomic_exchange_explicit(&p->spare[i], NULL, memory_order_acquire);
    if (slab != NULL)
      return slab;
  }
  return slab_alloc();
}

/* Keeps an empty slab as a spare, or frees it if POOL_SPARES are kept. */
static void slab_drop(pool_t *p, char *slab) {
  for (unsigned i = 0; i < POOL_SPARES; i++) {
    void *none = NULL;
    if (atomic_compare_exchange_strong_explicit(&p->spare[i], &none, slab, memory_order_release,
                                                memory_order_relaxed))
      return;
  }
  slab_free(slab);
}

void uvtw__pool_fini(pool_t *p) {
  for (unsigned i = 0; i < POOL_SPARES; i++)
    slab_free(atomic_load(&p->spare[i]));
}

bool uvtw__pool_unref(pool_t *p) {
  return atomic_fetch_sub_explicit(&p->refs, 1, memory_order_acq_rel) == 1;
}

/* No slab, or every block of it handed out. */
static bool used_up(uintptr_t cursor) {
  return (cursor & ~SLAB_MASK) == 0 || (cursor & SLAB_MASK) > SLAB_BLOCKS;
}

/* `seen` (a cursor value) is used up: replaces it with `slab` (block 1
 * next), or, if 0, rewinds its index so that failed calls never carry into
 * the address. Another thread may have put in a slab since: that one stays,
 * even at the same address, since it is not used up. Returns whether
 * `slab` went in. */
static bool replace_used_up(_Atomic uintptr_t *cursor, uintptr_t seen, uintptr_t slab) {
  uintptr_t address = seen & ~SLAB_MASK;
  uintptr_t next = slab != 0 ? slab | 1 : address | (SLAB_BLOCKS + 1);
  while (used_up(seen) && (seen & ~SLAB_MASK) == address)
    if (atomic_compare_exchange_weak_explicit(cursor, &seen, next, memory_order_release,
                                              memory_order_relaxed))
      return true;
  return false;
}

void *uvtw__pool_get(pool_t *p, uint64_t timeout) {
  if (!uvtw__pool_slabbed(timeout)) {
    void *block = malloc(POOL_BLOCK);
    if (block != NULL)
      atomic_fetch_add_explicit(&p->refs, 1, memory_order_relaxed);
    return block;
  }
  _Atomic uintptr_t *cursor = &p->cursor[timeout == 0 ? 0 : 1 + uvtw__highest_bit(timeout)];
  for (;;) {
    uintptr_t c = atomic_fetch_add_explicit(cursor, 1, memory_order_acquire);
    if (!used_up(c))
      return (char *)(c & ~SLAB_MASK) + (c & SLAB_MASK) * POOL_BLOCK;
    char *slab = slab_take(p);
    if (slab == NULL) {
      replace_used_up(cursor, c + 1, 0);
      return NULL;
    }
    atomic_init(GIVEN_BACK(slab), 0);
    atomic_fetch_add_explicit(&p->refs, 1, memory_order_relaxed); /* before any block is out */
    if (!replace_used_up(cursor, c + 1, (uintptr_t)slab)) {
      atomic_fetch_sub_explicit(&p->refs, 1, memory_order_relaxed);
      slab_drop(p, slab);
    }
  }
}

/* Counts `n` blocks of `slab` given back; if they were its last, the slab
 * becomes a spare or is freed. */
static bool give_back(pool_t *p, char *slab, uint32_t n) {
  if (atomic_fetch_add_explicit(GIVEN_BACK(slab), n, memory_order_acq_rel) + n != SLAB_BLOCKS)
    return false;
  slab_drop(p, slab);
  return uvtw__pool_unref(p);
}

bool uvtw__pool_put(pool_t *p, void *block, bool slabbed) {
  if (slabbed)
    return give_back(p, (char *)((uintptr_t)block & ~SLAB_MASK), 1);
  free(block);
  return uvtw__pool_unref(p);
}

void uvtw__pool_retire(pool_t *p) {
  for (unsigned i = 0; i < POOL_CLASSES; i++) {
    uintptr_t c = atomic_exchange(&p->cursor[i], 0);
    uintptr_t next = c & SLAB_MASK;
    /* Blocks never handed out count as given back. The owner's reference
     * is still held, so this is never the last. */
    if ((c & ~SLAB_MASK) != 0 && next <= SLAB_BLOCKS)
      give_back(p, (char *)(c & ~SLAB_MASK), (uint32_t)(SLAB_BLOCKS + 1 - next));
  }
}
