/* The pure timing wheel: no libuv, no threads, no clock. It is told the time.
 * See wheel.c for how it works. Not thread-safe: one owner at a time. */
#ifndef UVTW_WHEEL_H
#define UVTW_WHEEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "uvtw.h" /* struct uvtw__entry_s: the intrusive node lives in uvtw_timer_t */

#define WHEEL_LEVEL_BITS 6
#define WHEEL_SLOTS 64 /* per level */
#define WHEEL_LEVELS 11 /* 11 * 6 = 66 bits >= 64: every deadline has a level */
/* After the levels, one more row of 64 sentinels: the due buckets. */
#define WHEEL_DUE_ROW WHEEL_LEVELS

typedef struct uvtw__entry_s wheel_entry_t;

/* Called for each due entry, already removed from the wheel. It may insert
 * and remove any entries, including the one it was given. */
typedef void (*wheel_fire_fn)(wheel_entry_t *entry, void *ctx);

typedef struct wheel_s {
  uint64_t now;          /* the wheel's time: every deadline <= now has been handed out */
  uint64_t due_limit;    /* an insert with deadline <= due_limit is due: handed out next pass */
  uint64_t count;        /* entries held (slots + due + firing) */
  uint32_t level_mask;   /* bit k set iff occupied[k] != 0 */
  bool due_old_unsorted; /* `due_old` may be out of deadline order */
  uint64_t cascaded;     /* entries moved down a level, for stats */
  uint64_t occupied[WHEEL_LEVELS + 1]; /* [WHEEL_DUE_ROW]: the due buckets */
  wheel_entry_t due_old; /* due entries more than 63 ticks before due_limit */
  wheel_entry_t firing;  /* entries being handed out by the current pass */
  /* One sentinel per slot; a sentinel's `deadline` is the slot's minimum
   * deadline (exact after inserts, a lower bound after removals). The last
   * row holds due entries within 63 ticks of due_limit, by deadline & 63. */
  wheel_entry_t slots[(WHEEL_LEVELS + 1) * WHEEL_SLOTS];
} wheel_t;

void wheel_init(wheel_t *w, uint64_t now);

/* Moves an empty wheel's time forward to `now` (nothing to cascade), so
 * that entries inserted next are filed on the lowest levels. O(1). */
void wheel_catch_up(wheel_t *w, uint64_t now);

/* Files `entry` (not in any wheel) to fire at `deadline`. O(1), except that
 * an entry more than 63 ticks overdue may later cost a share of a sort. */
void wheel_insert(wheel_t *w, wheel_entry_t *entry, uint64_t deadline);

/* Takes `entry` out of the wheel. O(1). It must be in this wheel. */
void wheel_remove(wheel_t *w, wheel_entry_t *entry);

static inline bool wheel_entry_linked(const wheel_entry_t *entry) {
  return entry->next != NULL;
}

/* The earliest deadline held, as a lower bound (exact unless entries were
 * removed from that slot); UINT64_MAX if empty. O(1). */
uint64_t wheel_next_deadline(const wheel_t *w);

/* The exact earliest deadline; UINT64_MAX if empty. O(levels) plus a scan
 * of the earliest upper-level slot. */
uint64_t wheel_next_deadline_exact(const wheel_t *w);

/* Moves the wheel's time to `now` and hands every entry with deadline <= now
 * to `fire`, in nondecreasing deadline order, FIFO among equal deadlines.
 * Entries inserted by `fire` with deadline <= now are not handed out in this
 * pass but in the next one. Returns the number of entries handed out. */
size_t wheel_advance(wheel_t *w, uint64_t now, wheel_fire_fn fire, void *ctx);

/* Takes every entry out of the wheel and hands each to `drop` (which may
 * remove or insert others), roughly in deadline order. */
void wheel_clear(wheel_t *w, wheel_fire_fn drop, void *ctx);

/* Verifies every invariant (lists, bitmaps, slot minimums, levels, count).
 * Returns NULL if all hold, else a description of the first broken one. */
const char *wheel_check(const wheel_t *w);

#endif
