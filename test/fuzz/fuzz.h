/* What the fuzz targets share: the entry point libFuzzer calls (and the
 * replay driver, replay.c, without libFuzzer), a reader of the input bytes,
 * and the failure of a check.
 *
 * A target reads its input as a program: each step takes a byte or a few
 * and does what they say. An exhausted input reads as zeros, so any input
 * is a whole program; a target stops at the end of its input. */
#ifndef UVTW_FUZZ_H
#define UVTW_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct fuzz_input_s {
  const uint8_t *data;
  size_t size;
  size_t at; /* bytes read so far */
} fuzz_input_t;

static inline int fuzz_more(const fuzz_input_t *in) {
  return in->at < in->size;
}

static inline uint8_t fuzz_byte(fuzz_input_t *in) {
  return in->at < in->size ? in->data[in->at++] : 0;
}

/* `bytes` bytes (at most 8), little-endian. */
static inline uint64_t fuzz_uint(fuzz_input_t *in, unsigned bytes) {
  uint64_t value = 0;
  for (unsigned i = 0; i < bytes; i++)
    value |= (uint64_t)fuzz_byte(in) << (8 * i);
  return value;
}

/* A value below 2^k, k chosen by the input (0 to 63): small and huge values
 * alike. */
static inline uint64_t fuzz_magnitude(fuzz_input_t *in) {
  unsigned bits = fuzz_byte(in) % 64;
  return fuzz_uint(in, 8) & (((uint64_t)1 << bits) - 1);
}

static inline uint64_t fuzz_add_saturating(uint64_t a, uint64_t b) {
  return a + b < a ? UINT64_MAX : a + b;
}

/* A check that failed: says which, at which input byte, and aborts, which
 * libFuzzer reports as a crash and saves the input. */
#define FUZZ_CHECK(in, cond, what)                                                                 \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "%s:%d: check failed at input byte %zu: %s\n", __FILE__, __LINE__, (in)->at, \
              (what));                                                                             \
      abort();                                                                                     \
    }                                                                                              \
  } while (0)

#endif
