/* A virtual clock for a test binary on Linux (docs/design.md, "The twin
 * fuzzer"): the binary defines clock_gettime, epoll_wait, epoll_pwait and
 * epoll_pwait2, which the shared libuv then calls instead of the C
 * library's (the executable's symbols come first in the lookup).
 *
 * While vclock_on is set, CLOCK_MONOTONIC and CLOCK_MONOTONIC_COARSE (what
 * libuv's uv_hrtime and loop time read) return vclock_ns, and a poll asks
 * the kernel without waiting: if nothing is ready and it would have waited,
 * the clock jumps by the timeout (by vclock_idle_ns for a poll that would
 * not wait) and the poll returns 0, as a poll that timed out. A program's
 * "30 ms of work" is `vclock_ns += 30000000`. Everything else, and every
 * clock while vclock_on is clear (libFuzzer's own timing), is the real one.
 * Include this in one translation unit of the binary. */
#ifndef UVTW_VCLOCK_H
#define UVTW_VCLOCK_H

#include <signal.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static int vclock_on;
static uint64_t vclock_ns;
static uint64_t vclock_idle_ns; /* what a poll that does not wait costs */
static int vclock_forever;      /* polls that would have waited forever */

int clock_gettime(clockid_t id, struct timespec *ts) {
  if (vclock_on && (id == CLOCK_MONOTONIC || id == CLOCK_MONOTONIC_COARSE)) {
    ts->tv_sec = (time_t)(vclock_ns / 1000000000u);
    ts->tv_nsec = (long)(vclock_ns % 1000000000u);
    return 0;
  }
  return (int)syscall(SYS_clock_gettime, id, ts);
}

/* The kernel's answer now, then the clock's jump if it would have waited
 * `ms` (-1: forever). */
static int vclock_poll(int fd, struct epoll_event *events, int max, int ms, const sigset_t *mask) {
  int n = (int)syscall(SYS_epoll_pwait, fd, events, max, vclock_on ? 0 : ms, mask, _NSIG / 8);
  if (!vclock_on || n != 0)
    return n;
  if (ms < 0) {
    vclock_forever++;
    ms = 3600 * 1000;
  }
  vclock_ns += ms > 0 ? (uint64_t)ms * 1000000u : vclock_idle_ns;
  return 0;
}

int epoll_wait(int fd, struct epoll_event *events, int max, int ms) {
  return vclock_poll(fd, events, max, ms, NULL);
}

int epoll_pwait(int fd, struct epoll_event *events, int max, int ms, const sigset_t *mask) {
  return vclock_poll(fd, events, max, ms, mask);
}

int epoll_pwait2(int fd, struct epoll_event *events, int max, const struct timespec *t,
                 const sigset_t *mask) {
  int ms = t == NULL ? -1 : (int)(t->tv_sec * 1000 + (t->tv_nsec + 999999) / 1000000);
  return vclock_poll(fd, events, max, ms, mask);
}

#endif
