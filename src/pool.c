/* Task blocks: 128-byte blocks carved in order from 4 KiB pages, which are
 * carved in order from 256 KiB slabs.
 *
 * Memory follows what is alive. A page goes back to the system (madvise
 * MADV_DONTNEED: it leaves the process's resident memory at once) as soon
 * as its 31 blocks have all been given back, and a slab's address range is
 * unmapped once its 63 pages have. So a task that lives long (pending,
 * cancelled and not yet let go of, or its ticket unreleased) keeps its page
 * and its slab's header page, 8 KiB, and nothing of the tasks around it
 * that ended. Up to POOL_CACHED empty pages are kept for reuse instead, so
 * that a steady flow of tasks takes no system call and no page fault.
 *
 * Why not malloc: the loop frees the blocks producers allocate, so a
 * producer's malloc finds its thread's caches empty, and glibc keeps freed
 * small blocks in its own lists: one live block among freed ones keeps
 * their memory in the process for good.
 *
 * Any thread takes a block with one atomic add on its class's cursor: the
 * page's address (pages are aligned to their size) plus the index of its
 * next block. A page is filled again only once it is empty: a block is
 * never handed to one thread while another still holds it. The thread that
 * finds a page used up puts in another: a cached one, or the next page of
 * the slab being carved, taken with the same atomic add one level up, or a
 * page of a new slab. Header unit 0 of a page or slab counts the units
 * given back. Tasks share a page only with tasks of the same timeout class
 * (powers of two), taken at about the same time, so they end at about the
 * same time.
 *
 * On Windows, pages are not given back one by one: a slab goes back once
 * all its pages have.
 */
#define _DEFAULT_SOURCE 1 /* madvise and MAP_ANONYMOUS, with -std=c11 */

#include "pool.h"

#include <stdlib.h>

#include "port.h"
#ifdef UVTW_CHECKS
#include "internal.h" /* INVARIANT */
#endif

#define PAGE ((uintptr_t)POOL_PAGE)
#define SLAB ((uintptr_t)POOL_SLAB)
#define POOL_CLOSED ((void *)1) /* a cache slot once the pool is retired */
#define GIVEN_BACK(region) ((_Atomic uint32_t *)(void *)(region))

/* A region hands out its units 1..last in order; unit 0 is its header. A
 * cursor is the region's address | the index of its next unit; 0: none. */
typedef struct shape_s {
  uintptr_t size, unit, last;
} shape_t;

static const shape_t PAGE_SHAPE = {PAGE, POOL_BLOCK, PAGE / POOL_BLOCK - 1};
static const shape_t SLAB_SHAPE = {SLAB, PAGE, SLAB / PAGE - 1};

_Static_assert(POOL_PAGE >= 2 * POOL_BLOCK && POOL_SLAB >= 2 * POOL_PAGE, "units and headers");

#ifdef _WIN32
#include <malloc.h>
#define slab_map() ((char *)_aligned_malloc(SLAB, SLAB))
#define slab_unmap(slab) _aligned_free(slab)
#define page_unmap(page) ((void)(page))
#else
#include <sys/mman.h>

/* A new slab, aligned to its size: a range twice as large, trimmed. Its
 * pages are made present in one call (Linux 5.14 on) rather than faulted
 * in one by one as producers first write each. */
static char *slab_map(void) {
  char *raw = mmap(NULL, 2 * SLAB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED)
    return NULL;
  char *slab = (char *)(((uintptr_t)raw + SLAB - 1) & ~(SLAB - 1));
  if (slab != raw)
    munmap(raw, (size_t)(slab - raw));
  munmap(slab + SLAB, (size_t)(raw + SLAB - slab));
#ifdef MADV_POPULATE_WRITE
  madvise(slab, SLAB, MADV_POPULATE_WRITE);
#endif
  return slab;
}

#define slab_unmap(slab) munmap(slab, SLAB)
#define page_unmap(page) madvise(page, PAGE, MADV_DONTNEED)
#endif

void uvtw__pool_init(pool_t *p) {
  atomic_init(&p->refs, 1);
  atomic_init(&p->pages, 0);
  atomic_init(&p->slab, 0);
  for (unsigned i = 0; i < POOL_CLASSES; i++)
    atomic_init(&p->cursor[i], 0);
  for (unsigned i = 0; i < POOL_CACHED; i++)
    atomic_init(&p->cached[i], NULL);
}

bool uvtw__pool_unref(pool_t *p) {
  return atomic_fetch_sub_explicit(&p->refs, 1, memory_order_acq_rel) == 1;
}

uint64_t uvtw__pool_bytes(pool_t *p) {
  uint32_t slabs = atomic_load(&p->refs) - 1; /* the owner's reference aside */
  return ((uint64_t)atomic_load(&p->pages) + slabs) * PAGE;
}

/* ---- regions: pages of blocks, slabs of pages -------------------------------- */

static char *region_of(shape_t s, uintptr_t cursor) {
  return (char *)(cursor & ~(s.size - 1));
}

static uintptr_t index_of(shape_t s, uintptr_t cursor) {
  return cursor & (s.size - 1);
}

/* No region, or every unit of it handed out. */
static bool used_up(shape_t s, uintptr_t cursor) {
  return region_of(s, cursor) == NULL || index_of(s, cursor) > s.last;
}

/* `seen` (a cursor value) is used up: replaces it with `region` (unit 1
 * next), or, if NULL, rewinds its index so that failed calls never carry
 * into the address. Another thread may have put in a region since: that
 * one stays, even at the same address, since it is not used up. Returns
 * whether `region` went in. */
static bool replace_used_up(shape_t s, _Atomic uintptr_t *cursor, uintptr_t seen, char *region) {
  char *old = region_of(s, seen);
  uintptr_t next = region != NULL ? (uintptr_t)region | 1 : (uintptr_t)old | (s.last + 1);
  while (used_up(s, seen) && region_of(s, seen) == old)
    if (atomic_compare_exchange_weak_explicit(cursor, &seen, next, memory_order_release,
                                              memory_order_relaxed))
      return true;
  return false;
}

/* Counts `n` units of `region` given back; true if they were its last. */
static bool all_back(shape_t s, char *region, uint32_t n) {
  return atomic_fetch_add_explicit(GIVEN_BACK(region), n, memory_order_acq_rel) + n == s.last;
}

/* Counts `n` pages of `slab` given back; if they were its last, the slab
 * is unmapped. Returns true if it held the pool's last reference. */
static bool slab_back(pool_t *p, char *slab, uint32_t n) {
  if (!all_back(SLAB_SHAPE, slab, n))
    return false;
  slab_unmap(slab);
  return uvtw__pool_unref(p);
}

/* An empty page goes back to the system, and counts in its slab. */
static bool page_back(pool_t *p, char *page) {
  page_unmap(page);
  atomic_fetch_sub_explicit(&p->pages, 1, memory_order_relaxed);
  return slab_back(p, region_of(SLAB_SHAPE, (uintptr_t)page), 1);
}

/* An empty page is cached for reuse, or goes back if the cache is full or
 * closed. */
static bool page_drop(pool_t *p, char *page) {
  for (unsigned i = 0; i < POOL_CACHED; i++) {
    void *none = NULL;
    if (atomic_load_explicit(&p->cached[i], memory_order_relaxed) == NULL &&
        atomic_compare_exchange_strong_explicit(&p->cached[i], &none, page, memory_order_release,
                                                memory_order_relaxed))
      return false;
  }
  return page_back(p, page);
}

/* A new slab, holding a reference to the pool from before any page is out. */
static char *slab_new(pool_t *p) {
  char *slab = slab_map();
  if (slab == NULL)
    return NULL;
  atomic_init(GIVEN_BACK(slab), 0);
  atomic_fetch_add_explicit(&p->refs, 1, memory_order_relaxed);
  return slab;
}

/* A cached page, or the next page of the slab being carved (of a new slab
 * when that one is used up); NULL if out of memory. */
static char *page_new(pool_t *p) {
  for (unsigned i = 0; i < POOL_CACHED; i++) {
    void *page = atomic_load_explicit(&p->cached[i], memory_order_relaxed);
    if (page != NULL && page != POOL_CLOSED &&
        atomic_compare_exchange_strong_explicit(&p->cached[i], &page, NULL, memory_order_acquire,
                                                memory_order_relaxed))
      return page;
  }
  for (;;) {
    uintptr_t c = atomic_fetch_add_explicit(&p->slab, 1, memory_order_acquire);
    if (!used_up(SLAB_SHAPE, c)) {
      atomic_fetch_add_explicit(&p->pages, 1, memory_order_relaxed);
      return region_of(SLAB_SHAPE, c) + index_of(SLAB_SHAPE, c) * PAGE;
    }
    char *slab = slab_new(p);
    if (!replace_used_up(SLAB_SHAPE, &p->slab, c + 1, slab) && slab != NULL)
      slab_back(p, slab, SLAB_SHAPE.last); /* another thread's went in: never the last reference */
    if (slab == NULL)
      return NULL;
  }
}

void *uvtw__pool_get(pool_t *p, uint64_t timeout) {
  unsigned k = timeout == 0 ? 0 : 1 + (unsigned)uvtw__highest_bit(timeout); /* its class */
  _Atomic uintptr_t *cursor = &p->cursor[k < POOL_CLASSES ? k : POOL_CLASSES - 1];
  for (;;) {
    uintptr_t c = atomic_fetch_add_explicit(cursor, 1, memory_order_acquire);
    if (!used_up(PAGE_SHAPE, c))
      return region_of(PAGE_SHAPE, c) + index_of(PAGE_SHAPE, c) * POOL_BLOCK;
    char *page = page_new(p);
    if (page != NULL)
      atomic_init(GIVEN_BACK(page), 0);
    if (!replace_used_up(PAGE_SHAPE, cursor, c + 1, page) && page != NULL)
      page_drop(p, page); /* another thread's went in: never the last reference */
    if (page == NULL)
      return NULL;
  }
}

bool uvtw__pool_put(pool_t *p, void *block) {
  char *page = region_of(PAGE_SHAPE, (uintptr_t)block);
  return all_back(PAGE_SHAPE, page, 1) && page_drop(p, page);
}

void uvtw__pool_retire(pool_t *p) {
  /* The cache first: a page emptied from here on goes back at once. The
   * owner's reference is still held, so nothing here is the last. */
  for (unsigned i = 0; i < POOL_CACHED; i++) {
    char *page = atomic_exchange(&p->cached[i], POOL_CLOSED);
    if (page != NULL)
      page_back(p, page);
  }
  /* Units never handed out count as given back. */
  for (unsigned i = 0; i < POOL_CLASSES; i++) {
    uintptr_t c = atomic_exchange(&p->cursor[i], 0);
    if (!used_up(PAGE_SHAPE, c) &&
        all_back(PAGE_SHAPE, region_of(PAGE_SHAPE, c),
                 (uint32_t)(PAGE_SHAPE.last + 1 - index_of(PAGE_SHAPE, c))))
      page_drop(p, region_of(PAGE_SHAPE, c));
  }
  uintptr_t c = atomic_exchange(&p->slab, 0);
  if (!used_up(SLAB_SHAPE, c))
    slab_back(p, region_of(SLAB_SHAPE, c),
              (uint32_t)(SLAB_SHAPE.last + 1 - index_of(SLAB_SHAPE, c)));
}

/* ---- the invariant checker (-Dchecks) ---------------------------------------- */

#ifdef UVTW_CHECKS
/* GCOVR_EXCL_START: the checker's failing branches run only on a broken library. */
const char *uvtw__pool_check(pool_t *p, bool retired) {
  for (unsigned i = 0; i < POOL_CACHED; i++) {
    void *page = atomic_load(&p->cached[i]);
    INVARIANT((page == POOL_CLOSED) == retired, "a cache slot open after retire, or closed before");
    INVARIANT(page == NULL || page == POOL_CLOSED || (uintptr_t)page % PAGE == 0,
              "a cached page is not a page");
  }
  INVARIANT(!retired || atomic_load(&p->slab) == 0, "a retired pool carves a slab");
  return NULL;
}
/* GCOVR_EXCL_STOP */
#endif
