/* What the C standard leaves to each compiler: bit scans, with a GCC/Clang
 * form and an MSVC form (MSVC is untested). */
#ifndef UVTW_PORT_H
#define UVTW_PORT_H

#include <stdint.h>

#if defined(__GNUC__) || defined(__clang__)

/* Index of the highest set bit of x; x != 0. */
static inline int uvtw_highest_bit(uint64_t x) {
  return 63 - __builtin_clzll(x);
}

/* Index of the lowest set bit of x; x != 0. */
static inline int uvtw_lowest_bit(uint64_t x) {
  return __builtin_ctzll(x);
}

#elif defined(_MSC_VER)
#include <intrin.h>

static inline int uvtw_highest_bit(uint64_t x) {
  unsigned long index;
  if (_BitScanReverse(&index, (unsigned long)(x >> 32)))
    return (int)index + 32;
  _BitScanReverse(&index, (unsigned long)x);
  return (int)index;
}

static inline int uvtw_lowest_bit(uint64_t x) {
  unsigned long index;
  if (_BitScanForward(&index, (unsigned long)x))
    return (int)index;
  _BitScanForward(&index, (unsigned long)(x >> 32));
  return (int)index + 32;
}

#else
#error "uvtw needs GCC, Clang or MSVC (see src/port.h)"
#endif

#endif
