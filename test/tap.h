/* Minimal TAP producer shared by the tests: one `ok` line per check, a plan
 * at the end, exit status 1 if anything failed. Failure diagnostics say what
 * was expected and what happened. */
#ifndef UVTW_TEST_TAP_H
#define UVTW_TEST_TAP_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static int tap_count_;
static int tap_failed_;

/* Records one check. `fmt` names the behaviour proven. Returns cond. */
static int tap_ok(int cond, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int tap_ok(int cond, const char *fmt, ...) {
  va_list ap;
  tap_count_++;
  if (!cond)
    tap_failed_++;
  printf("%s %d - ", cond ? "ok" : "not ok", tap_count_);
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  printf("\n");
  fflush(stdout);
  return cond;
}

/* A diagnostic line (shown by TAP consumers, not counted). */
static void tap_diag(const char *fmt, ...) __attribute__((format(printf, 1, 2), unused));
static void tap_diag(const char *fmt, ...) {
  va_list ap;
  printf("# ");
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  printf("\n");
  fflush(stdout);
}

/* Skips one check with a reason. */
static void tap_skip(const char *why, const char *name) __attribute__((unused));
static void tap_skip(const char *why, const char *name) {
  tap_count_++;
  printf("ok %d - %s # SKIP %s\n", tap_count_, name, why);
  fflush(stdout);
}

/* Compares two unsigned values; the message says expected and actual. */
#define TAP_EQ(actual, expected, what)                                                       \
  do {                                                                                       \
    unsigned long long a_ = (unsigned long long)(actual);                                    \
    unsigned long long e_ = (unsigned long long)(expected);                                  \
    if (!tap_ok(a_ == e_, "%s", what))                                                       \
      tap_diag("  expected %llu, got %llu (%s:%d)", e_, a_, __FILE__, __LINE__);             \
  } while (0)

/* Prints the plan and returns the exit status for main. */
static int tap_done(void) __attribute__((unused));
static int tap_done(void) {
  printf("1..%d\n", tap_count_);
  fflush(stdout);
  return tap_failed_ ? 1 : 0;
}

#endif
