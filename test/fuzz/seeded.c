/* Runs a fuzz target without libFuzzer on programs made from a seed (TAP):
 * COUNT random inputs of 4 to 256 bytes, each passed to the target's
 * LLVMFuzzerTestOneInput; a failed check aborts (a program that runs 10 s
 * is killed), saying which check and
 * where (fuzz.h), and the input is written to seeded-crash (the file
 * replays it: replay_<target> DIR seeded-crash).
 *
 *   seeded_fuzz_twin [SEED [COUNT [FIRST]]]   (defaults: 1, 1000, 0: runs
 *                                              programs FIRST to COUNT - 1) */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "fuzz.h"
#include "tap.h"

static uint8_t input[256];
static size_t input_size;
static unsigned long program;

/* The input under way goes to seeded-crash if the target aborts. */
static void save_input(int sig) {
  fprintf(stderr, "seeded: program %lu failed; saved as seeded-crash\n", program);
  FILE *f = fopen("seeded-crash", "wb");
  if (f != NULL) {
    fwrite(input, 1, input_size, f);
    fclose(f);
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

/* xorshift64*: the same programs for a seed on every machine. */
static uint64_t next(uint64_t *s) {
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * 2685821657736338717u;
}

int main(int argc, char **argv) {
  uint64_t seed = argc > 1 ? strtoull(argv[1], NULL, 0) : 1;
  unsigned long count = argc > 2 ? strtoul(argv[2], NULL, 0) : 1000;
  unsigned long first = argc > 3 ? strtoul(argv[3], NULL, 0) : 0;
  uint64_t s = seed * 0x9E3779B97F4A7C15u + 1;
  signal(SIGABRT, save_input);
  signal(SIGSEGV, save_input);
  signal(SIGALRM, save_input); /* a program that hangs (a starved loop) */
  for (program = 0; program < count; program++) {
    input_size = 4 + next(&s) % (sizeof input - 3);
    for (size_t j = 0; j < input_size; j++)
      input[j] = (uint8_t)(next(&s) >> 56);
    alarm(10);
    if (program >= first)
      LLVMFuzzerTestOneInput(input, input_size);
  }
  tap_ok(1, "%lu programs from seed %llu: every check held", count, (unsigned long long)seed);
  return tap_done();
}
