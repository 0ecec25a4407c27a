/* What the C standard leaves to each compiler: bit scans, with GCC and
 * Clang's builtins, and in plain C for any other compiler. */
#ifndef UVTW_PORT_H
#define UVTW_PORT_H

#include <stdint.h>

/* Index of the highest set bit of x; x != 0. */
static inline int uvtw_highest_bit(uint64_t x) {
#if defined(__GNUC__) || defined(__clang__)
  return 63 - __builtin_clzll(x);
#else
  int index = 0;
  while (x >>= 1)
    index++;
  return index;
#endif
}

/* Index of the lowest set bit of x; x != 0. */
static inline int uvtw_lowest_bit(uint64_t x) {
#if defined(__GNUC__) || defined(__clang__)
  return __builtin_ctzll(x);
#else
  int index = 0;
  for (; (x & 1) == 0; x >>= 1)
    index++;
  return index;
#endif
}

#endif
