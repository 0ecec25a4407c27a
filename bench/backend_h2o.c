/* Backend: h2o's h2o_timeout_t on a libuv loop. One list per duration,
 * behind one uv_timer_t armed at its head's deadline: a link appends the
 * entry (stamped with uv_now), an unlink takes it off, and the list's
 * uv_timer_t callback runs the entries whose time has come, in the order
 * they were linked. A restart is an unlink and a link (h2o's own idiom:
 * h2o_timeout_link refuses a linked entry).
 *
 * The include: h2o/timeout.h includes h2o/socket.h, which pulls in
 * OpenSSL's headers (libh2o-dev does not depend on libssl-dev) and most of
 * h2o. timeout.h needs only h2o_loop_t and the libuv backend's part of
 * h2o_timeout_t, which h2o/socket/uv-binding.h defines; that header is
 * included on its own, with the one type it names, and socket.h's include
 * guard set so that timeout.h does not include it.
 *
 * Built a second time as bench_h2o_64 with BENCH_H2O_PAD_TO=64: each
 * entry padded to 64 bytes, a uvtw_timer_t's size. The control run that
 * tells what bytes per timer cost at 10^6 from what the structure costs
 * (bench/README.md). */
#define _GNU_SOURCE
#include "bench.h"
#include "uv_loop.h"

#include <stdio.h>
#include <stdlib.h>
#include <uv.h>

typedef struct st_h2o_socket_t h2o_socket_t;
#include <h2o/socket/uv-binding.h>
#define h2o__socket_h
#include <h2o/timeout.h>
#include <h2o/version.h>

#ifdef BENCH_H2O_PAD_TO
const char *const backend_name = "h2o-64";
#else
const char *const backend_name = "h2o";
#endif
const int backend_fixed_durations = 1;

/* What an application embeds: the entry, beside its own data (here the
 * workload's note). */
typedef struct {
  h2o_timeout_entry_t entry;
  uint32_t note;
#ifdef BENCH_H2O_PAD_TO
  char pad[BENCH_H2O_PAD_TO - sizeof(h2o_timeout_entry_t) - sizeof(uint32_t)];
#endif
} h2o_timer_t;

/* An application keeps its few h2o_timeout_t where it needs them (h2o: in
 * its context, one per configured timeout); this table stands for that, a
 * linear look-up among a few entries. */
enum { MAX_DURATIONS = 8 };
static h2o_timeout_t durations[MAX_DURATIONS];
static size_t n_durations;

static h2o_timer_t *timers;
static size_t n_timers;
static char version[96];

int backend_init(void) {
  return bench_loop_init();
}

void backend_fini(void) {
  for (size_t d = 0; d < n_durations; d++)
    h2o_timeout_dispose(bench_loop, &durations[d]);
  n_durations = 0;
  bench_loop_fini();
}

const char *backend_version(void) {
  snprintf(version, sizeof version, "h2o %s (libh2o %d.%d.%d) on libuv %s", H2O_VERSION,
           H2O_LIBRARY_VERSION_MAJOR, H2O_LIBRARY_VERSION_MINOR, H2O_LIBRARY_VERSION_PATCH,
           uv_version_string());
  return version;
}

static h2o_timeout_t *timeout_list(uint64_t ms) {
  for (size_t d = 0; d < n_durations; d++)
    if (durations[d].timeout == ms)
      return &durations[d];
  if (n_durations == MAX_DURATIONS) {
    fprintf(stderr, "bench h2o: more than %d durations\n", MAX_DURATIONS);
    exit(2);
  }
  h2o_timeout_init(bench_loop, &durations[n_durations], ms);
  return &durations[n_durations++];
}

size_t backend_timer_bytes(const char **note) {
#ifdef BENCH_H2O_PAD_TO
  *note = "sizeof(h2o_timer_t): the entry and the note, padded; per duration one h2o_timeout_t";
  return sizeof(h2o_timer_t);
#else
  *note = "sizeof(h2o_timeout_entry_t); per duration one h2o_timeout_t with its uv_timer_t";
  return sizeof(h2o_timeout_entry_t);
#endif
}

int backend_timers_alloc(size_t n) {
  timers = bench_timers_memory(n * sizeof *timers);
  n_timers = n;
  return timers ? 0 : -1;
}

static void timer_cb(h2o_timeout_entry_t *entry) {
  h2o_timer_t *t = (h2o_timer_t *)entry; /* the entry is the first member */
  bench_fired((size_t)(t - timers), t->note);
}

void backend_timer_init(size_t i) {
  timers[i].entry = (h2o_timeout_entry_t){.cb = timer_cb};
  timers[i].note = 0;
}

void backend_set_note(size_t i, uint32_t note) {
  timers[i].note = note;
}

/* An unlinked entry holds nothing. */
void backend_timers_close(void) {}

void backend_timers_free(void) {
  free(timers);
  timers = NULL;
  n_timers = 0;
}

void backend_start(size_t i, uint64_t timeout_ms) {
  h2o_timeout_unlink(&timers[i].entry);
  h2o_timeout_link(bench_loop, timeout_list(timeout_ms), &timers[i].entry);
}

void backend_restart(size_t i, uint64_t timeout_ms) {
  h2o_timeout_unlink(&timers[i].entry);
  h2o_timeout_link(bench_loop, timeout_list(timeout_ms), &timers[i].entry);
}

void backend_stop(size_t i) {
  h2o_timeout_unlink(&timers[i].entry);
}

int backend_active(size_t i) {
  return h2o_timeout_is_linked(&timers[i].entry);
}

int backend_wheel_stats(bench_wheel_stats_t *out) {
  (void)out;
  return -1;
}
