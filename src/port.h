/* What the C standard leaves to each compiler: bit scans and function
 * attributes, each with a GCC/Clang form and an MSVC form (MSVC is
 * untested). */
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
#if defined(_M_X64) || defined(_M_ARM64)
  _BitScanReverse64(&index, x);
#else
  if (_BitScanReverse(&index, (unsigned long)(x >> 32)))
    return (int)index + 32;
  _BitScanReverse(&index, (unsigned long)x);
#endif
  return (int)index;
}

static inline int uvtw_lowest_bit(uint64_t x) {
  unsigned long index;
#if defined(_M_X64) || defined(_M_ARM64)
  _BitScanForward64(&index, x);
#else
  if (_BitScanForward(&index, (unsigned long)x))
    return (int)index;
  _BitScanForward(&index, (unsigned long)(x >> 32));
  index += 32;
#endif
  return (int)index;
}

#else

static inline int uvtw_highest_bit(uint64_t x) {
  int index = 0;
  while (x >>= 1)
    index++;
  return index;
}

static inline int uvtw_lowest_bit(uint64_t x) {
  int index = 0;
  while (!(x & 1)) {
    x >>= 1;
    index++;
  }
  return index;
}

#endif

#endif
