/* bench_steady: the wheel's own work per pass in a server's steady state.
 *
 * The server workload (bench/README.md) opens every connection at once, so
 * each of its 4,096 ms level-1 slots holds timeouts of one length. A
 * server that runs for minutes files timeouts of different lengths into
 * the same slot: a 30 s timeout started at t and a 5 s one started at
 * t + 25 s fall due in the same 4,096 ms. This runs that on a manual
 * clock, which only uvtw has, so no other backend runs here.
 *
 * N connections, each with one pending timeout of 5, 10 or 30 s (or of
 * the lengths --timeouts lists, in seconds, up to 8 of them). Every
 * millisecond R random connections see activity (a restart with their own
 * timeout), then the clock moves 1 ms and the pass runs; a connection that
 * fires is replaced by a new one with a random timeout. The first 40 s
 * (or the longest timeout and 10 s) fill the wheel (every timeout started
 * at a random time); the following --seconds are timed, one clock read
 * before and after each uvtw_wheel_advance. The wheel's clock is set so
 * that the 30th timed second starts a 262,144 ms block. A pass's time
 * includes its callbacks: each restarts one timer.
 *
 *   bench_steady [--n N] [--restarts-per-ms R] [--seconds S] [--timeouts LIST] [--quick]
 *
 * Prints the distribution of the passes' times, and the passes that took
 * over 1 ms with where they fell: at the start of a 4,096 ms block (a
 * level-1 slot reached) or of a 262,144 ms one (a level-2 slot). */
#define _POSIX_C_SOURCE 200809L
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uv.h>

#include "uvtw.h"

enum { MAX_LENGTHS = 8 };
static uint64_t timeout_ms[MAX_LENGTHS] = {5000, 10000, 30000};
static unsigned lengths = 3;
static uvtw_timer_t *timers;
static unsigned char *length; /* each connection's timeout: an index in timeout_ms */
static uint64_t rng = 0x9e3779b97f4a7c15u;
static size_t fired;

static uint64_t next_random(void) { /* xorshift64 */
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

static void on_timeout(uvtw_timer_t *timer) { /* a new connection in its place */
  size_t i = (size_t)(timer - timers);
  fired++;
  length[i] = (unsigned char)(next_random() % lengths);
  uvtw_timer_start(timer, on_timeout, timeout_ms[length[i]], 0);
}

/* --timeouts: seconds, comma-separated, 1 to MAX_LENGTHS of them. */
static bool parse_lengths(const char *list) {
  unsigned count = 0;
  for (const char *at = list; *at != '\0'; count++) {
    char *end;
    if (count == MAX_LENGTHS)
      return false;
    double seconds = strtod(at, &end);
    if (end == at || seconds < 0.001 || (*end != ',' && *end != '\0'))
      return false;
    timeout_ms[count] = (uint64_t)(seconds * 1000);
    at = end + (*end == ',');
  }
  lengths = count;
  return count > 0;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  size_t n = 1000000, seconds = 60, restarts = 0;
  for (int a = 1; a < argc; a++) {
    if (!strcmp(argv[a], "--quick")) {
      n = 10000;
      seconds = 10;
    } else if (a + 1 < argc && !strcmp(argv[a], "--n")) {
      n = (size_t)strtod(argv[++a], NULL);
    } else if (a + 1 < argc && !strcmp(argv[a], "--restarts-per-ms")) {
      restarts = (size_t)strtod(argv[++a], NULL);
    } else if (a + 1 < argc && !strcmp(argv[a], "--seconds")) {
      seconds = (size_t)strtod(argv[++a], NULL);
    } else if (a + 1 < argc && !strcmp(argv[a], "--timeouts") && parse_lengths(argv[++a])) {
      continue;
    } else {
      fprintf(stderr,
              "usage: %s [--n N] [--restarts-per-ms R] [--seconds S] [--timeouts S,S,...] "
              "[--quick]\n",
              argv[0]);
      return 2;
    }
  }
  if (n == 0 || seconds == 0)
    return 2;
  if (restarts == 0)
    restarts = n / 10000 + 1; /* activity every 10 s a connection */
  uv_loop_t loop;
  uvtw_wheel_t *wheel;
  uvtw_options_t options = {.manual_clock = 1};
  size_t warmup = 40000, steps = seconds * 1000;
  for (unsigned l = 0; l < lengths; l++)
    warmup = timeout_ms[l] + 10000 > warmup ? timeout_ms[l] + 10000 : warmup;
  timers = malloc(n * sizeof *timers);
  length = malloc(n);
  double *pass = malloc(steps * sizeof *pass);
  if (timers == NULL || length == NULL || pass == NULL || uv_loop_init(&loop) != 0 ||
      uvtw_wheel_new(&loop, &options, &wheel) != 0)
    return 1;
  /* A level-2 slot is reached 30 s into the timed part, every run alike. */
  uint64_t level2_at = uvtw_wheel_now(wheel) + warmup + 30000;
  uvtw_wheel_advance(wheel, (262144 - level2_at % 262144) % 262144);
  for (size_t i = 0; i < n; i++) {
    length[i] = (unsigned char)(next_random() % lengths);
    uvtw_timer_init(wheel, &timers[i]);
    uvtw_timer_start(&timers[i], on_timeout, 1 + next_random() % timeout_ms[length[i]], 0);
  }
  size_t slow = 0, slow_level1 = 0, slow_level2 = 0;
  double slowest = 0, slowest_level1 = 0, slowest_level2 = 0;
  for (size_t k = 0; k < warmup + steps; k++) {
    for (size_t j = 0; j < restarts; j++) {
      size_t i = next_random() % n;
      uvtw_timer_start(&timers[i], on_timeout, timeout_ms[length[i]], 0);
    }
    double before = now_ms();
    uvtw_wheel_advance(wheel, 1);
    double took = now_ms() - before;
    if (k < warmup)
      continue;
    pass[k - warmup] = took;
    uint64_t clock = uvtw_wheel_now(wheel);
    bool level2 = clock % 262144 == 0, level1 = clock % 4096 == 0 && !level2;
    slow += took > 1;
    slow_level1 += took > 1 && level1;
    slow_level2 += took > 1 && level2;
    slowest_level1 = level1 && took > slowest_level1 ? took : slowest_level1;
    slowest_level2 = level2 && took > slowest_level2 ? took : slowest_level2;
    slowest = took > slowest ? took : slowest;
  }
  qsort(pass, steps, sizeof *pass, by_value);
  printf("bench_steady: N = %zu connections (timeouts", n);
  for (unsigned l = 0; l < lengths; l++)
    printf("%s %g", l == 0 ? "" : ",", (double)timeout_ms[l] / 1000);
  printf(" s), %zu restarts a ms, %zu s timed after %zu s, %zu fired\n", restarts, seconds,
         warmup / 1000, fired);
  printf("pass, ms: p50 %.3f  p99 %.3f  p99.9 %.3f  max %.3f\n", pass[steps / 2],
         pass[steps * 99 / 100], pass[steps * 999 / 1000], slowest);
  printf("passes over 1 ms: %zu, of which %zu at the start of a 4,096 ms block (the longest "
         "%.3f ms) and %zu at the start of a 262,144 ms one (%.3f ms)\n",
         slow, slow_level1, slowest_level1, slow_level2, slowest_level2);
  uvtw_wheel_close(wheel, NULL, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  free(timers);
  free(length);
  free(pass);
  return 0;
}
