/* The lateness histogram's buckets (uvtw_stats_t.late; the layout and why
 * are in include/uvtw.h, "Lateness"). The bucket of a value is inline here,
 * for the fire path in core.c; the public calls are in late.c. */
#ifndef UVTW_LATE_H
#define UVTW_LATE_H

#include <stdint.h>

#include "port.h"
#include "uvtw.h"

/* Each power of two from 4 on is split in 1 << LATE_SUB_BITS buckets. */
#define LATE_SUB_BITS 2
#define LATE_SUBS (1u << LATE_SUB_BITS)

/* The lowest value of bucket i, for LATE_SUBS <= i: the bucket's top bits
 * (LATE_SUBS + i % LATE_SUBS), shifted to the power of two i names. */
#define LATE_BUCKET_MIN(i) ((uint64_t)(LATE_SUBS + (i) % LATE_SUBS) << ((i) / LATE_SUBS - 1))

/* The open last bucket starts here: every larger value is clamped to it. */
#define LATE_OPEN_MIN LATE_BUCKET_MIN(UVTW_LATE_BUCKETS - 1)

_Static_assert(UVTW_LATE_BUCKETS <= 128 && UVTW_LATE_BUCKETS > 2 * LATE_SUBS,
               "the contract allows at most 128 buckets");
_Static_assert(LATE_OPEN_MIN >= 10 * 60 * 1000, "the open bucket starts at 10 minutes or later");
_Static_assert(LATE_BUCKET_MIN(UVTW_LATE_BUCKETS - 2) < 10 * 60 * 1000,
               "UVTW_LATE_BUCKETS is the fewest buckets that reach 10 minutes");

/* The bucket of a lateness of `ms`. With e the highest set bit of ms (at
 * least LATE_SUB_BITS), the bucket is e's power of two and the
 * LATE_SUB_BITS bits below that bit: (e - LATE_SUB_BITS) * LATE_SUBS + (ms
 * >> (e - LATE_SUB_BITS)), whose second term is LATE_SUBS plus those bits.
 * Values below LATE_SUBS get e = LATE_SUB_BITS and land in bucket ms: the
 * exact ones. No branch but the clamp, which compilers make a cmov. */
static inline unsigned uvtw__late_bucket(uint64_t ms) {
  uint64_t v = ms < LATE_OPEN_MIN ? ms : LATE_OPEN_MIN;
  unsigned shift = (unsigned)uvtw__highest_bit(v | LATE_SUBS) - LATE_SUB_BITS;
  return shift * LATE_SUBS + (unsigned)(v >> shift);
}

#endif
