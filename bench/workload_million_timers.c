/* The million_timers workload: libuv's benchmark of that name (see harness.c). */
#define _GNU_SOURCE
#include "workload.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- million_timers ------------------------------------------------------ */

static void fire_million(size_t i, uint32_t note) {
  (void)i;
  (void)note;
  fired++;
}

static int run_million_timers(size_t n) {
  uint64_t before_all, before_run, after_run, after_all, cpu0, cpu1;
  uint64_t timeout = 0;
  struct rusage ru;

  if (backend_timers_alloc(n) != 0)
    return -1;
  bench_fired = fire_million;
  fired = 0;
  cpu0 = cpu_ns();
  before_all = wall_ns();
  for (size_t i = 0; i < n; i++) {
    if (i % 1000 == 0)
      timeout++;
    backend_timer_init(i);
    backend_start(i, timeout);
  }
  before_run = wall_ns();
  backend_run();
  after_run = wall_ns();
  backend_timers_close();
  after_all = wall_ns();
  cpu1 = cpu_ns();
  if (fired != n) {
    fprintf(stderr, "bench %s: million_timers: %zu of %zu fired\n", backend_name, fired, n);
    return -1;
  }
  getrusage(RUSAGE_SELF, &ru);
  backend_timers_free();

  fprintf(stderr, "%s: %.2f seconds total\n", backend_name, (double)(after_all - before_all) / 1e9);
  fprintf(stderr, "%s: %.2f seconds init\n", backend_name, (double)(before_run - before_all) / 1e9);
  fprintf(stderr, "%s: %.2f seconds dispatch\n", backend_name,
          (double)(after_run - before_run) / 1e9);
  fprintf(stderr, "%s: %.2f seconds cleanup\n", backend_name,
          (double)(after_all - after_run) / 1e9);
  record("million_timers", n, "init_s", (double)(before_run - before_all) / 1e9);
  record("million_timers", n, "dispatch_s", (double)(after_run - before_run) / 1e9);
  record("million_timers", n, "cleanup_s", (double)(after_all - after_run) / 1e9);
  record("million_timers", n, "total_s", (double)(after_all - before_all) / 1e9);
  record("million_timers", n, "cpu_s", (double)(cpu1 - cpu0) / 1e9);
  record("million_timers", n, "peak_rss_mib", (double)ru.ru_maxrss / 1024.0);
  return 0;
}

int million_timers_in_child(size_t m) {
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0)
    return -1;
  if (pid == 0) {
    int rc = backend_init() != 0 || run_million_timers(m) != 0;
    fflush(stdout);
    _exit(rc);
  }
  int status;
  if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return -1;
  return 0;
}
