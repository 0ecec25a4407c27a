/* Task blocks: 128-byte blocks carved in order from 256 KiB slabs, one
 * slab being filled per timeout class (powers of two): tasks that share a
 * slab, and within it a 4 KiB page of 32 blocks, were scheduled at about
 * the same time with about the same timeout, so they end at about the same
 * time.
 *
 * Memory follows what is alive, a page at a time. A page whose 32 blocks
 * have all been given back is empty. A slab whose 63 pages are all empty
 * becomes a spare (up to POOL_SPARES of them) or is unmapped: one system
 * call for 2,016 tasks. An empty page in a slab still in use is kept, up
 * to POOL_IDLE such pages in all, since the pages around it usually empty
 * soon after; beyond that budget it goes back to the system at once
 * (madvise MADV_DONTNEED: it leaves the process's resident memory). So a
 * task that lives long (pending, cancelled and not yet let go of, or its
 * ticket unreleased) holds its page and its slab's header page, 8 KiB,
 * beyond a fixed part: the spares, the budget, and the slab each class is
 * carving.
 *
 * Why not malloc: the loop frees the blocks producers allocate, so a
 * producer's malloc finds its thread's caches empty, and glibc keeps freed
 * small blocks in its own lists: one live block among freed ones keeps
 * their memory in the process for good.
 *
 * Any thread takes a block with one atomic add on its class's cursor: the
 * slab's address (slabs are aligned to their size) plus the index of its
 * next block. A slab is filled again only once it is empty: a block is
 * never handed to one thread while another still holds it. The thread
 * that finds a slab used up puts in another: a spare, or a new mapping.
 * Page 0 of a slab is its header: it counts the pages given back, and for
 * each page the blocks given back, in one cache line for the loop, which
 * gives blocks back in deadline order rather than page by page.
 *
 * On Windows, empty pages are not given back one by one: a slab goes back
 * once all its pages have.
 *
 * Under AddressSanitizer a block given back is poisoned until it is handed
 * out again, so that a ticket released twice, or used after its release,
 * is reported where it happens: the slabs are the pool's own mappings,
 * which ASan cannot see into otherwise. A slab is unpoisoned before it is
 * unmapped, so that whatever is mapped there next starts clean. Without
 * ASan none of this is compiled.
 */
#define _DEFAULT_SOURCE 1 /* madvise and MAP_ANONYMOUS, with -std=c11 */

#include "pool.h"

#include <stdlib.h>

#include "port.h"
#ifdef UVTW_CHECKS
#include "check.h"
#endif

#if defined(__SANITIZE_ADDRESS__)
#define POOL_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define POOL_ASAN 1
#endif
#endif
#ifdef POOL_ASAN
#include <sanitizer/asan_interface.h>
#define poison(address, size) ASAN_POISON_MEMORY_REGION(address, size)
#define unpoison(address, size) ASAN_UNPOISON_MEMORY_REGION(address, size)
#else
#define poison(address, size) ((void)(address), (void)(size))
#define unpoison(address, size) ((void)(address), (void)(size))
#endif

#define PAGE ((uintptr_t)POOL_PAGE)
#define SLAB ((uintptr_t)POOL_SLAB)
#define POOL_CLOSED ((void *)1) /* a spare slot once the pool is retired */

#define PAGE_BLOCKS (PAGE / POOL_BLOCK)
#define SLAB_PAGES (SLAB / PAGE - 1) /* page 0: the header */
#define FIRST_BLOCK PAGE_BLOCKS      /* the first block after the header */
#define LAST_BLOCK (SLAB / POOL_BLOCK - 1)

/* A slab's page 0. */
typedef struct header_s {
  _Atomic uint32_t back;                    /* pages given back */
  _Atomic uint32_t idle;                    /* its empty pages counted in the pool's idle */
  _Atomic uint32_t returned;                /* its pages given back to the system */
  _Atomic uint8_t blocks_back[SLAB / PAGE]; /* per page, its blocks given back */
} header_t;

#define HEADER(slab) ((header_t *)(void *)(slab))

_Static_assert(sizeof(header_t) <= POOL_PAGE && PAGE_BLOCKS < 256, "the header and its counts");

#ifdef _WIN32
#include <malloc.h>
#define slab_map() ((char *)_aligned_malloc(SLAB, SLAB))
#define slab_free(slab) _aligned_free(slab)
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

#define slab_free(slab) munmap(slab, SLAB)
#define page_unmap(page) madvise(page, PAGE, MADV_DONTNEED)
#endif

static void slab_unmap(char *slab) {
  unpoison(slab, SLAB);
  slab_free(slab);
}

void uvtw__pool_init(pool_t *p) {
  atomic_init(&p->refs, 1);
  atomic_init(&p->idle, 0);
  atomic_init(&p->returned, 0);
  for (unsigned i = 0; i < POOL_CLASSES; i++)
    atomic_init(&p->slab[i], 0);
  for (unsigned i = 0; i < POOL_SPARES; i++)
    atomic_init(&p->spare[i], NULL);
}

bool uvtw__pool_unref(pool_t *p) {
  return atomic_fetch_sub_explicit(&p->refs, 1, memory_order_acq_rel) == 1;
}

uint64_t uvtw__pool_bytes(pool_t *p) {
  uint64_t slabs = atomic_load(&p->refs) - 1; /* the owner's reference aside */
  for (unsigned i = 0; i < POOL_SPARES; i++) {
    void *spare = atomic_load(&p->spare[i]);
    slabs += spare != NULL && spare != POOL_CLOSED;
  }
  return slabs * SLAB - (uint64_t)atomic_load(&p->returned) * PAGE;
}

/* ---- slabs ---------------------------------------------------------------- */

static char *slab_of(uintptr_t cursor_or_address) {
  return (char *)(cursor_or_address & ~(SLAB - 1));
}

static uintptr_t index_of(uintptr_t cursor) {
  return cursor & (SLAB - 1);
}

/* No slab, or every block of it handed out. */
static bool used_up(uintptr_t cursor) {
  return slab_of(cursor) == NULL || index_of(cursor) > LAST_BLOCK;
}

/* `seen` (a cursor value) is used up: replaces it with `slab` (its first
 * block next), or, if NULL, rewinds its index so that failed calls never
 * carry into the address. Another thread may have put in a slab since:
 * that one stays, even at the same address, since it is not used up.
 * Returns whether `slab` went in. */
static bool replace_used_up(_Atomic uintptr_t *cursor, uintptr_t seen, char *slab) {
  char *old = slab_of(seen);
  uintptr_t next = slab != NULL ? (uintptr_t)slab | FIRST_BLOCK : (uintptr_t)old | (LAST_BLOCK + 1);
  while (used_up(seen) && slab_of(seen) == old)
    if (atomic_compare_exchange_weak_explicit(cursor, &seen, next, memory_order_release,
                                              memory_order_relaxed))
      return true;
  return false;
}

/* Counts `n` blocks of the page at `address` given back; true if they were
 * its last. */
static bool blocks_back(uintptr_t address, unsigned n) {
  _Atomic uint8_t *count = &HEADER(slab_of(address))->blocks_back[index_of(address) / PAGE];
  return atomic_fetch_add_explicit(count, (uint8_t)n, memory_order_acq_rel) + n == PAGE_BLOCKS;
}

/* Takes a slab's pages given back to the system off the pool's count: it
 * is unmapped, or about to be written again. */
static void forget_returned(pool_t *p, char *slab) {
  atomic_fetch_sub_explicit(&p->returned, atomic_load(&HEADER(slab)->returned),
                            memory_order_relaxed);
}

/* Counts `n` pages of `slab` given back; if they were its last, the slab
 * becomes a spare or is unmapped. Returns true if it held the pool's last
 * reference. */
static bool slab_back(pool_t *p, char *slab, uint32_t n) {
  if (atomic_fetch_add_explicit(&HEADER(slab)->back, n, memory_order_acq_rel) + n != SLAB_PAGES)
    return false;
  atomic_fetch_sub_explicit(&p->idle, atomic_load(&HEADER(slab)->idle), memory_order_relaxed);
  bool spared = false;
  for (unsigned i = 0; i < POOL_SPARES && !spared; i++) {
    void *none = NULL;
    spared = atomic_compare_exchange_strong_explicit(&p->spare[i], &none, slab,
                                                     memory_order_release, memory_order_relaxed);
  }
  if (!spared) {
    forget_returned(p, slab);
    slab_unmap(slab);
  }
  return uvtw__pool_unref(p);
}

/* An empty page is kept in its slab while the pool keeps fewer than
 * POOL_IDLE such pages, or goes back to the system; either way it counts
 * in its slab. */
static bool page_back(pool_t *p, char *page) {
  char *slab = slab_of((uintptr_t)page);
  if (atomic_fetch_add_explicit(&p->idle, 1, memory_order_relaxed) < POOL_IDLE) {
    atomic_fetch_add_explicit(&HEADER(slab)->idle, 1, memory_order_relaxed);
  } else {
    atomic_fetch_sub_explicit(&p->idle, 1, memory_order_relaxed);
    page_unmap(page);
    atomic_fetch_add_explicit(&HEADER(slab)->returned, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&p->returned, 1, memory_order_relaxed);
  }
  return slab_back(p, slab, 1);
}

/* An empty slab holding a reference to the pool from before any block is
 * out: a spare, or a new one; NULL if out of memory. */
static char *slab_new(pool_t *p) {
  char *slab = NULL;
  for (unsigned i = 0; i < POOL_SPARES && slab == NULL; i++) {
    void *spare = atomic_load_explicit(&p->spare[i], memory_order_relaxed);
    if (spare != NULL && spare != POOL_CLOSED &&
        atomic_compare_exchange_strong_explicit(&p->spare[i], &spare, NULL, memory_order_acquire,
                                                memory_order_relaxed))
      slab = spare;
  }
  if (slab != NULL)
    forget_returned(p, slab); /* those pages come back as they are written */
  else if ((slab = slab_map()) == NULL)
    return NULL;
  atomic_init(&HEADER(slab)->back, 0);
  atomic_init(&HEADER(slab)->idle, 0);
  atomic_init(&HEADER(slab)->returned, 0);
  for (unsigned i = 0; i < SLAB / PAGE; i++)
    atomic_init(&HEADER(slab)->blocks_back[i], 0);
  atomic_fetch_add_explicit(&p->refs, 1, memory_order_relaxed);
  return slab;
}

void *uvtw__pool_get(pool_t *p, uint64_t timeout) {
  unsigned k = timeout == 0 ? 0 : 1 + (unsigned)uvtw__highest_bit(timeout); /* its class */
  _Atomic uintptr_t *cursor = &p->slab[k < POOL_CLASSES ? k : POOL_CLASSES - 1];
  for (;;) {
    uintptr_t c = atomic_fetch_add_explicit(cursor, 1, memory_order_acquire);
    if (!used_up(c)) {
      char *block = slab_of(c) + index_of(c) * POOL_BLOCK;
      unpoison(block, POOL_BLOCK);
      return block;
    }
    char *slab = slab_new(p);
    if (!replace_used_up(cursor, c + 1, slab) && slab != NULL)
      slab_back(p, slab, SLAB_PAGES); /* another thread's went in: never the last reference */
    if (slab == NULL)
      return NULL;
  }
}

bool uvtw__pool_put(pool_t *p, void *block) {
  uintptr_t address = (uintptr_t)block;
  poison(block, POOL_BLOCK); /* before the count: then it may be handed out again */
  return blocks_back(address, 1) && page_back(p, (char *)(address & ~(PAGE - 1)));
}

void uvtw__pool_retire(pool_t *p) {
  /* The spares first: a slab emptied from here on is unmapped at once.
   * The owner's reference is still held, so nothing here is the last. */
  for (unsigned i = 0; i < POOL_SPARES; i++) {
    char *slab = atomic_exchange(&p->spare[i], POOL_CLOSED);
    if (slab != NULL) {
      forget_returned(p, slab);
      slab_unmap(slab);
    }
  }
  /* Blocks never handed out count as given back: the rest of a page begun,
   * then whole pages. */
  for (unsigned i = 0; i < POOL_CLASSES; i++) {
    uintptr_t c = atomic_exchange(&p->slab[i], 0);
    if (used_up(c))
      continue;
    char *slab = slab_of(c);
    uintptr_t next = index_of(c), pages_left = (LAST_BLOCK + 1 - next) / PAGE_BLOCKS;
    if (next % PAGE_BLOCKS != 0 && blocks_back((uintptr_t)(slab + next * POOL_BLOCK),
                                               (unsigned)(PAGE_BLOCKS - next % PAGE_BLOCKS)))
      page_back(p, slab + next / PAGE_BLOCKS * PAGE);
    if (pages_left > 0)
      slab_back(p, slab, (uint32_t)pages_left);
  }
}

/* ---- the invariant checker (-Dchecks) ---------------------------------------- */

#ifdef UVTW_CHECKS
/* GCOVR_EXCL_START: the checker's failing branches run only on a broken library. */
const char *uvtw__pool_check(pool_t *p, bool retired) {
  for (unsigned i = 0; i < POOL_SPARES; i++) {
    void *slab = atomic_load(&p->spare[i]);
    INVARIANT((slab == POOL_CLOSED) == retired, "a spare slot open after retire, or closed before");
    INVARIANT(slab == NULL || slab == POOL_CLOSED || (uintptr_t)slab % SLAB == 0,
              "a spare is not a slab");
  }
  for (unsigned i = 0; i < POOL_CLASSES; i++)
    INVARIANT(!retired || atomic_load(&p->slab[i]) == 0, "a retired pool carves");
  /* Other threads may count an idle page in before they check the budget. */
  INVARIANT(atomic_load(&p->idle) <= POOL_IDLE + 64, "more idle pages than the budget");
  return NULL;
}
/* GCOVR_EXCL_STOP */
#endif
