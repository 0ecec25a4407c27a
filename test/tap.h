/* The tests' one assertion vocabulary, on TAP: one `ok` line per check, a
 * plan at the end, exit status 1 if anything failed.
 *
 *   tap_ok(cond, fmt, ...)          a check; the message names the behaviour
 *   EXPECT_U64(got, want, fmt, ...) equality of unsigned values
 *   EXPECT_I64(got, want, fmt, ...) equality of signed values
 *   EXPECT_ERR(got, want, fmt, ...) equality of libuv error codes (0 or UV_E*)
 *   tap_diag(fmt, ...)              a diagnostic line, not counted
 *   tap_skip(why, name)             a check that could not be made
 *
 * A failed EXPECT_* prints what was expected, what came, and where. Error
 * codes are printed by name when <uv.h> is included before this header.
 *
 * Named cases: a test file lists its cases with TAP_CASE(name) (the function
 * test_<name>) and hands them to tap_run_cases, which runs every case, or,
 * given arguments, only those whose name contains one of them
 * (`meson test -C build timer --test-args restart`). */
#ifndef UVTW_TEST_TAP_H
#define UVTW_TEST_TAP_H

#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One count for the whole program, whichever of its files make checks: in a
 * weak function, not weak variables, which MinGW's linker lays over other
 * zero-initialized data. */
__attribute__((weak)) int *tap_counts_(void) {
  static int counts[2];
  return counts;
}
#define tap_count_ (tap_counts_()[0])
#define tap_failed_ (tap_counts_()[1])

/* MinGW checks `printf` formats against the Windows C runtime's printf; the
 * build asks for C99's (__USE_MINGW_ANSI_STDIO), which this names. */
#ifdef __MINGW_PRINTF_FORMAT
#define TAP_PRINTF __MINGW_PRINTF_FORMAT
#else
#define TAP_PRINTF printf
#endif

static void tap_vok_(int cond, const char *fmt, va_list ap) {
  tap_count_++;
  if (!cond)
    tap_failed_++;
  printf("%s %d - ", cond ? "ok" : "not ok", tap_count_);
  vprintf(fmt, ap);
  printf("\n");
  fflush(stdout);
}

/* Records one check. `fmt` names the behaviour proven. Returns cond. */
static int tap_ok(int cond, const char *fmt, ...) __attribute__((format(TAP_PRINTF, 2, 3), unused));
static int tap_ok(int cond, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  tap_vok_(cond, fmt, ap);
  va_end(ap);
  return cond;
}

/* A diagnostic line (shown by TAP consumers, not counted). */
static void tap_diag(const char *fmt, ...) __attribute__((format(TAP_PRINTF, 1, 2), unused));
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

static const char *tap_err_name_(int err) __attribute__((unused));
static const char *tap_err_name_(int err) {
#ifdef UV_VERSION_MAJOR
  return err == 0 ? "0" : uv_err_name(err);
#else
  return err == 0 ? "0" : "an error";
#endif
}

static int tap_eq_u64_(const char *file, int line, uint64_t got, uint64_t want, const char *fmt,
                       ...) __attribute__((format(TAP_PRINTF, 5, 6), unused));
static int tap_eq_u64_(const char *file, int line, uint64_t got, uint64_t want, const char *fmt,
                       ...) {
  va_list ap;
  va_start(ap, fmt);
  tap_vok_(got == want, fmt, ap);
  va_end(ap);
  if (got != want)
    tap_diag("  expected %" PRIu64 ", got %" PRIu64 " (%s:%d)", want, got, file, line);
  return got == want;
}

static int tap_eq_i64_(const char *file, int line, int64_t got, int64_t want, const char *fmt, ...)
    __attribute__((format(TAP_PRINTF, 5, 6), unused));
static int tap_eq_i64_(const char *file, int line, int64_t got, int64_t want, const char *fmt,
                       ...) {
  va_list ap;
  va_start(ap, fmt);
  tap_vok_(got == want, fmt, ap);
  va_end(ap);
  if (got != want)
    tap_diag("  expected %" PRId64 ", got %" PRId64 " (%s:%d)", want, got, file, line);
  return got == want;
}

static int tap_eq_err_(const char *file, int line, int got, int want, const char *fmt, ...)
    __attribute__((format(TAP_PRINTF, 5, 6), unused));
static int tap_eq_err_(const char *file, int line, int got, int want, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  tap_vok_(got == want, fmt, ap);
  va_end(ap);
  if (got != want)
    tap_diag("  expected %s (%d), got %s (%d) (%s:%d)", tap_err_name_(want), want,
             tap_err_name_(got), got, file, line);
  return got == want;
}

#define EXPECT_U64(got, want, ...)                                                                 \
  tap_eq_u64_(__FILE__, __LINE__, (uint64_t)(got), (uint64_t)(want), __VA_ARGS__)
#define EXPECT_I64(got, want, ...)                                                                 \
  tap_eq_i64_(__FILE__, __LINE__, (int64_t)(got), (int64_t)(want), __VA_ARGS__)
#define EXPECT_ERR(got, want, ...)                                                                 \
  tap_eq_err_(__FILE__, __LINE__, (int)(got), (int)(want), __VA_ARGS__)

/* The older spelling, kept for the white-box tests: EXPECT_U64 with a fixed message. */
#define TAP_EQ(actual, expected, what) EXPECT_U64((actual), (expected), "%s", (what))

/* Prints the plan and returns the exit status for main. */
static int tap_done(void) __attribute__((unused));
static int tap_done(void) {
  printf("1..%d\n", tap_count_);
  fflush(stdout);
  return tap_failed_ ? 1 : 0;
}

/* ---- Named cases ----------------------------------------------------------- */

typedef struct tap_case_s {
  const char *name;
  void (*run)(void);
} tap_case_t;

#define TAP_CASE(name)                                                                             \
  { #name, test_##name }

static int tap_case_selected_(const char *name, int argc, char **argv) {
  if (argc <= 1)
    return 1;
  for (int i = 1; i < argc; i++)
    if (strstr(name, argv[i]) != NULL)
      return 1;
  return 0;
}

/* Runs the selected cases (all, or those whose name contains an argument),
 * each announced by a diagnostic, then prints the plan. Returns the exit
 * status for main. */
static int tap_run_cases(int argc, char **argv, const tap_case_t *cases, size_t n)
    __attribute__((unused));
static int tap_run_cases(int argc, char **argv, const tap_case_t *cases, size_t n) {
  size_t ran = 0;
  for (size_t i = 0; i < n; i++) {
    if (!tap_case_selected_(cases[i].name, argc, argv))
      continue;
    tap_diag("case %s", cases[i].name);
    cases[i].run();
    ran++;
  }
  if (ran == 0) {
    printf("1..0 # SKIP no case name contains an argument given\n");
    fflush(stdout);
    return 0;
  }
  return tap_done();
}

#endif
