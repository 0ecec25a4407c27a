/* What the C standard leaves to each compiler: bit scans, keeping a
 * function out of line, and prefetching (and a saturating add, which every
 * file that includes this needs), with GCC and Clang's builtins and
 * attributes (which other compilers that claim __GNUC__ provide too). The
 * library also needs C11 <stdatomic.h> (meson.build refuses MSVC, whose C
 * compiler has it only as an experiment). */
#ifndef UVTW_PORT_H
#define UVTW_PORT_H

#include <stdint.h>

#if defined(__GNUC__) || defined(__clang__)

#define UVTW_NOINLINE __attribute__((noinline))
#define UVTW_PREFETCH(address) __builtin_prefetch(address)

/* Index of the highest set bit of x; x != 0. */
static inline int uvtw__highest_bit(uint64_t x) {
  return 63 - __builtin_clzll(x);
}

/* Index of the lowest set bit of x; x != 0. */
static inline int uvtw__lowest_bit(uint64_t x) {
  return __builtin_ctzll(x);
}

#else
#error "uvtw builds with GCC or Clang (or a compiler that provides their builtins)"
#endif

/* a + b, or UINT64_MAX if that overflows. */
static inline uint64_t uvtw__add_saturating(uint64_t a, uint64_t b) {
  return a + b < a ? UINT64_MAX : a + b;
}

#endif
