/* The library's failure paths, reached for real, with no hook in the
 * library (TAP).
 *
 * Descriptors: RLIMIT_NOFILE lowered below the descriptor a loop's
 * uv_async_t handles need (see test_descriptors_exhausted), so that
 * uvtw_wheel_new's uv_async_init fails: uvtw_wheel_new must return its
 * error and leave nothing behind.
 *
 * Memory: this executable links the library's own objects (not the shared
 * library) with -Wl,--wrap=malloc,--wrap=calloc,--wrap=free,--wrap=mmap,
 * --wrap=mmap64,--wrap=munmap, so every allocation the library makes goes through the
 * wrappers below, which fail the allocation a case asks for; `live` counts
 * the blocks allocated and not freed and `mapped` the bytes mapped and not
 * unmapped, so a leak shows as a count that does not come back. libuv's
 * own allocations are not wrapped (it is a library of its own).
 *
 * Task memory (src/pool.c): a slab put in by another call while one is
 * being mapped, as when two threads find the slab used up at once, made by
 * a schedule from inside the wrapped mmap (test_slab_race); the bytes the
 * pool holds, read through its internal counter, bounded by what is alive
 * whatever order tasks end in (test_memory_follows_alive); a steady flow
 * of tasks that maps nothing new (test_steady_flow).
 *
 * A caller's mistakes (NULL handles, a timer bound to no wheel) and
 * deadlines that overflow are the remaining cases.
 *
 * Cases run by name: `meson test -C build failures --test-args memory`. */
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <uv.h>

#include "src/pool.h"  /* the pool's sizes, spares and budget */
#include "src/tasks.h" /* uvtw__tasks_bytes */
#include "tap.h"
#include "uvtw.h"

/* ---- allocations ------------------------------------------------------------ */

void *__real_malloc(size_t size);
void *__real_calloc(size_t count, size_t size);
void __real_free(void *block);
/* mmap64 where off_t is 64 bits by _FILE_OFFSET_BITS, as in meson's builds */
void *__real_mmap(void *address, size_t length, int prot, int flags, int fd, off_t offset);
void *__real_mmap64(void *address, size_t length, int prot, int flags, int fd, off_t offset);
int __real_munmap(void *address, size_t length);
void *__wrap_malloc(size_t size);
void *__wrap_calloc(size_t count, size_t size);
void __wrap_free(void *block);
void *__wrap_mmap(void *address, size_t length, int prot, int flags, int fd, off_t offset);
void *__wrap_mmap64(void *address, size_t length, int prot, int flags, int fd, off_t offset);
int __wrap_munmap(void *address, size_t length);

static long fail_in = -1; /* allocations to let through before one fails; -1: none fails */
static long live;         /* blocks allocated through the wrappers, not yet freed */
static long made;         /* allocations through the wrappers (mmap's too) */
static long mapped;       /* bytes mapped through the wrappers, not yet unmapped */

static int allocation_fails(void) {
  made++;
  if (fail_in < 0)
    return 0;
  return fail_in-- == 0;
}

void *__wrap_malloc(size_t size) {
  void *block = allocation_fails() ? NULL : __real_malloc(size);
  live += block != NULL;
  return block;
}

void *__wrap_calloc(size_t count, size_t size) {
  void *block = allocation_fails() ? NULL : __real_calloc(count, size);
  live += block != NULL;
  return block;
}

void __wrap_free(void *block) {
  live -= block != NULL;
  __real_free(block);
}

/* Set by test_slab_race: the next mmap schedules a task on this wheel
 * first. */
static uvtw_wheel_t *schedule_inside;
static int inside_ran; /* that task's callbacks with status 0 */

static void on_inside(void *arg, int status) {
  (void)arg;
  inside_ran += status == 0;
}

typedef void *map_fn(void *address, size_t length, int prot, int flags, int fd, off_t offset);

static void *wrapped_map(map_fn *real, void *address, size_t length, int prot, int flags, int fd,
                         off_t offset) {
  uvtw_wheel_t *wheel = schedule_inside;
  schedule_inside = NULL;
  if (wheel != NULL && uvtw_schedule(wheel, 5, on_inside, NULL, NULL) != 0)
    return MAP_FAILED;
  void *range = allocation_fails() ? MAP_FAILED : real(address, length, prot, flags, fd, offset);
  mapped += range != MAP_FAILED ? (long)length : 0;
  return range;
}

void *__wrap_mmap(void *address, size_t length, int prot, int flags, int fd, off_t offset) {
  return wrapped_map(__real_mmap, address, length, prot, flags, fd, offset);
}

void *__wrap_mmap64(void *address, size_t length, int prot, int flags, int fd, off_t offset) {
  return wrapped_map(__real_mmap64, address, length, prot, flags, fd, offset);
}

int __wrap_munmap(void *address, size_t length) {
  mapped -= (long)length;
  return __real_munmap(address, length);
}

/* ---- helpers ------------------------------------------------------------------ */

static char sentinel_storage;
#define SENTINEL_WHEEL ((uvtw_wheel_t *)(void *)&sentinel_storage)
#define SENTINEL_TICKET ((uvtw_ticket_t *)(void *)&sentinel_storage)

static int close_callbacks;

static void on_close(uvtw_wheel_t *wheel, void *arg) {
  (void)wheel;
  (void)arg;
  close_callbacks++;
}

/* Closes `wheel` (if not NULL) and the loop; checks that the wheel's close
 * callback ran and that nothing is left open on the loop. */
static void close_all(uv_loop_t *loop, uvtw_wheel_t *wheel, const char *T) {
  close_callbacks = 0;
  if (wheel != NULL) {
    uvtw_wheel_close(wheel, on_close, NULL);
    uv_run(loop, UV_RUN_DEFAULT);
    EXPECT_I64(close_callbacks, 1, "%s: the wheel's close callback ran once", T);
  }
  EXPECT_ERR(uv_loop_close(loop), 0, "%s: nothing is left open on the loop", T);
}

typedef struct task_probe_s {
  int calls;
  int status;
} task_probe_t;

static void on_task(void *arg, int status) {
  task_probe_t *probe = arg;
  probe->calls++;
  probe->status = status;
}

/* ---- descriptors ------------------------------------------------------------------ */

/* The descriptor of the loop's uv_async_t handles: the eventfd that
 * uv_loop_init opened for the loop's own uv_async_t, as /proc names it; -1
 * if there is none to see. */
static int async_descriptor(void) {
  DIR *dir = opendir("/proc/self/fd");
  int found = -1;
  struct dirent *entry;
  while (dir != NULL && (entry = readdir(dir)) != NULL) {
    char path[300], target[64];
    snprintf(path, sizeof path, "/proc/self/fd/%s", entry->d_name);
    ssize_t n = readlink(path, target, sizeof target - 1);
    if (n > 0) {
      target[n] = '\0';
      if (strcmp(target, "anon_inode:[eventfd]") == 0 && atoi(entry->d_name) > found)
        found = atoi(entry->d_name);
    }
  }
  if (dir != NULL)
    closedir(dir);
  return found;
}

/* uvtw_wheel_new returns the error of uv_async_init when no descriptor can
 * be opened, leaving *out untouched and nothing allocated or open.
 *
 * uv_loop_init opens the descriptor behind every uv_async_t of the loop, so
 * uv_async_init needs one only on a loop that lost it: after a uv_loop_fork
 * that could not open it again. Every descriptor below the eventfd's number
 * is taken and RLIMIT_NOFILE is lowered to that number: uv_loop_fork's new
 * epoll descriptor takes the old one's place, below the limit, and the
 * eventfd, closed, cannot come back (EMFILE); nor can the one uvtw_wheel_new's
 * uv_async_init asks for. */
static void test_descriptors_exhausted(void) {
  const char *T = "descriptors exhausted";
  uv_loop_t loop;
  struct rlimit saved, lowered;
  int fillers[64], filled = 0;
  if (!tap_ok(uv_loop_init(&loop) == 0, "%s: a loop (it opens descriptors of its own)", T))
    return;
  int async_fd = async_descriptor();
  if (async_fd < 0 || getrlimit(RLIMIT_NOFILE, &saved) != 0) {
    tap_skip("no eventfd in /proc/self/fd, or no RLIMIT_NOFILE", T);
    close_all(&loop, NULL, T);
    return;
  }
  for (int fd; filled < 64 && (fd = open("/dev/null", O_RDONLY)) >= 0;) {
    if (fd >= async_fd) {
      close(fd);
      break;
    }
    fillers[filled++] = fd;
  }
  lowered = saved;
  lowered.rlim_cur = (rlim_t)async_fd;
  tap_ok(setrlimit(RLIMIT_NOFILE, &lowered) == 0,
         "%s: every descriptor below the eventfd's (%d) taken, RLIMIT_NOFILE lowered to it", T,
         async_fd);
  int forked = uv_loop_fork(&loop);
  long live_before = live;
  uvtw_wheel_t *wheel = SENTINEL_WHEEL;
  int r = uvtw_wheel_new(&loop, NULL, &wheel);
  setrlimit(RLIMIT_NOFILE, &saved);
  while (filled > 0)
    close(fillers[--filled]);
  EXPECT_ERR(forked, UV_EMFILE, "%s: uv_loop_fork cannot open the eventfd again", T);
  EXPECT_ERR(r, UV_EMFILE, "%s: uvtw_wheel_new returns uv_async_init's error", T);
  tap_ok(wheel == SENTINEL_WHEEL, "%s: *out is untouched", T);
  EXPECT_I64(live, live_before, "%s: what uvtw_wheel_new allocated is freed", T);
  uvtw_wheel_t *second = NULL;
  EXPECT_ERR(uvtw_wheel_new(&loop, NULL, &second), 0,
             "%s: with descriptors back, a wheel is made on the same loop", T);
  close_all(&loop, second, T);
}

/* ---- memory --------------------------------------------------------------------------- */

/* Each allocation uvtw_wheel_new makes may fail: UV_ENOMEM, *out untouched,
 * nothing leaked, nothing left on the loop; with all of them granted it
 * succeeds. */
static void test_memory_wheel_new(void) {
  const char *T = "memory: uvtw_wheel_new";
  long failing = 0;
  for (;; failing++) {
    uv_loop_t loop;
    if (!tap_ok(uv_loop_init(&loop) == 0, "%s: a loop", T))
      return;
    uvtw_wheel_t *wheel = SENTINEL_WHEEL;
    long live_before = live, made_before = made;
    fail_in = failing;
    int r = uvtw_wheel_new(&loop, NULL, &wheel);
    fail_in = -1;
    if (r == 0) {
      tap_ok(made - made_before == failing, "%s: it succeeds once its %ld allocations are granted",
             T, failing);
      close_all(&loop, wheel, T);
      EXPECT_I64(live, live_before, "%s: a closed wheel leaves nothing allocated", T);
      break;
    }
    EXPECT_ERR(r, UV_ENOMEM, "%s: allocation %ld fails: UV_ENOMEM", T, failing + 1);
    tap_ok(wheel == SENTINEL_WHEEL, "%s: allocation %ld fails: *out is untouched", T, failing + 1);
    EXPECT_I64(live, live_before, "%s: allocation %ld fails: nothing leaked", T, failing + 1);
    close_all(&loop, NULL, T);
    if (failing > 16) {
      tap_ok(0, "%s: it succeeds within 16 allocations", T);
      break;
    }
  }
}

/* A loop and a wheel on it, or false (with the loop closed). */
static int open_wheel(uv_loop_t *loop, const uvtw_options_t *options, uvtw_wheel_t **wheel,
                      const char *T) {
  if (!tap_ok(uv_loop_init(loop) == 0, "%s: a loop", T))
    return 0;
  if (EXPECT_ERR(uvtw_wheel_new(loop, options, wheel), 0, "%s: a wheel", T))
    return 1;
  close_all(loop, NULL, T);
  return 0;
}

/* uvtw_schedule without memory: UV_ENOMEM, *ticket untouched, nothing
 * queued or counted, its place under max_pending given back. */
static void test_memory_schedule(void) {
  const char *T = "memory: uvtw_schedule";
  uv_loop_t loop;
  uvtw_wheel_t *wheel = NULL;
  uvtw_options_t options = {.max_pending = 1, .manual_clock = 1};
  task_probe_t failed = {0, 0}, scheduled = {0, 0};
  long live_start = live, mapped_start = mapped;
  if (!open_wheel(&loop, &options, &wheel, T))
    return;
  uvtw_stats_t before, after;
  uvtw_wheel_stats(wheel, &before);
  long live_before = live, mapped_before = mapped;
  uvtw_ticket_t *ticket = SENTINEL_TICKET;
  fail_in = 0;
  int r = uvtw_schedule(wheel, 5, on_task, &failed, &ticket);
  fail_in = 0;
  int r_forget = uvtw_schedule(wheel, 5, on_task, &failed, NULL);
  fail_in = 0;
  int r_long = uvtw_schedule(wheel, 5000, on_task, &failed, &ticket);
  fail_in = -1;
  uvtw_wheel_stats(wheel, &after);
  EXPECT_ERR(r, UV_ENOMEM, "%s: with a ticket: UV_ENOMEM", T);
  EXPECT_ERR(r_forget, UV_ENOMEM, "%s: fire-and-forget: UV_ENOMEM", T);
  EXPECT_ERR(r_long, UV_ENOMEM, "%s: a timeout of seconds (another class): UV_ENOMEM", T);
  tap_ok(ticket == SENTINEL_TICKET, "%s: *ticket is untouched", T);
  tap_ok(live == live_before && mapped == mapped_before,
         "%s: nothing is left allocated or mapped (%ld blocks, %ld bytes)", T, live - live_before,
         mapped - mapped_before);
  tap_ok(after.started == before.started && after.active == before.active,
         "%s: nothing is counted as started or active", T);
  EXPECT_I64(uvtw_wheel_next_due(wheel), -1, "%s: nothing is pending", T);
  EXPECT_ERR(uvtw_schedule(wheel, 5, on_task, &scheduled, &ticket), 0,
             "%s: the place under max_pending (1) is free again: the next schedule succeeds", T);
  EXPECT_ERR(uvtw_wheel_advance(wheel, 10), 0, "%s: the clock moves past the deadline", T);
  tap_ok(failed.calls == 0 && scheduled.calls == 1 && scheduled.status == 0,
         "%s: only the task that was scheduled runs (failed %d, scheduled %d)", T, failed.calls,
         scheduled.calls);
  if (ticket != SENTINEL_TICKET)
    uvtw_ticket_release(ticket);
  close_all(&loop, wheel, T);
  tap_ok(live == live_start && mapped == mapped_start,
         "%s: the closed wheel leaves nothing allocated or mapped", T);
}

/* Two calls find the slab of their timeout class used up (here: none yet)
 * at once: the one that maps its slab second keeps it as a spare and takes
 * a block of the other's. Both tasks run; nothing is left mapped. */
static void test_slab_race(void) {
  const char *T = "slab race";
  uv_loop_t loop;
  uvtw_wheel_t *wheel = NULL;
  uvtw_options_t options = {.manual_clock = 1};
  task_probe_t outer = {0, 0};
  long mapped_start = mapped;
  if (!open_wheel(&loop, &options, &wheel, T))
    return;
  long made_before = made;
  inside_ran = 0;
  schedule_inside = wheel;
  EXPECT_ERR(uvtw_schedule(wheel, 5, on_task, &outer, NULL), 0,
             "%s: a schedule whose slab is overtaken succeeds", T);
  EXPECT_I64(made - made_before, 2, "%s: two slabs were mapped", T);
  EXPECT_I64(mapped - mapped_start, 2 * POOL_SLAB, "%s: both are mapped", T);
  EXPECT_U64(uvtw__tasks_bytes(wheel), 2 * POOL_SLAB,
             "%s: the pool holds both: the one in use and a spare", T);
  EXPECT_ERR(uvtw_wheel_advance(wheel, 10), 0, "%s: the clock moves past the deadlines", T);
  tap_ok(outer.calls == 1 && outer.status == 0 && inside_ran == 1,
         "%s: both tasks ran once (outer %d, inside %d)", T, outer.calls, inside_ran);
  close_all(&loop, wheel, T);
  EXPECT_I64(mapped, mapped_start, "%s: the closed wheel leaves nothing mapped", T);
}

/* What the pool holds whatever is alive, with one timeout class in use:
 * the spare slabs, the slab being carved, and the budget of empty pages
 * kept in slabs in use. */
#define FIXED_BYTES ((uint64_t)(POOL_SPARES + 1) * POOL_SLAB + (uint64_t)POOL_IDLE * POOL_PAGE)
#define SURVIVOR_BYTES 8192u /* at most: its page and its slab's header page */

enum survivor { PENDING, TICKET_KEPT, CANCEL_QUEUED };
static const char *const survivor_name[] = {"pending", "ran, ticket kept",
                                            "cancelled, not let go of"};

/* 64 x 2,047 tasks of `timeout` ms (67 slabs), every `n`th a survivor of kind `kind`,
 * the others ended (cancelled, or run, and released): the pool's bytes
 * with the survivors alive, and once they have ended too. */
static void survivors_case(enum survivor kind, int n, uint64_t timeout) {
  enum { TASKS = 64 * 2047 };
  static uvtw_ticket_t *tickets[TASKS];
  const char *T = "memory follows what is alive";
  uv_loop_t loop;
  uvtw_wheel_t *wheel = NULL;
  uvtw_options_t options = {.manual_clock = 1};
  task_probe_t probe = {0, 0};
  long mapped_start = mapped;
  if (!open_wheel(&loop, &options, &wheel, T))
    return;
  int failures = 0;
  for (int i = 0; i < TASKS; i++)
    failures += uvtw_schedule(wheel, timeout, on_task, &probe, &tickets[i]) != 0;
  failures += uvtw_wheel_advance(wheel, 0) != 0; /* takes them in */
  uint64_t survivors = (TASKS + (uint64_t)n - 1) / (uint64_t)n;
  for (int i = 0; i < TASKS; i++)
    if (i % n != 0) { /* the tasks around the survivors end */
      if (kind != TICKET_KEPT)
        failures += uvtw_ticket_cancel(tickets[i]) != 0;
      uvtw_ticket_release(tickets[i]);
    }
  failures += uvtw_wheel_advance(wheel, kind == TICKET_KEPT ? timeout + 1 : 0) != 0;
  for (int i = 0; kind == CANCEL_QUEUED && i < TASKS; i += n)
    failures += uvtw_ticket_cancel(tickets[i]) != 0; /* the loop has not read these yet */
  uint64_t held = uvtw__tasks_bytes(wheel);
  tap_ok(failures == 0 && held <= survivors * SURVIVOR_BYTES + FIXED_BYTES,
         "%s: %s, one in %d of %d tasks of %" PRIu64 " ms: %" PRIu64 " bytes for %" PRIu64
         " survivors (at most %u each + %" PRIu64 ")",
         T, survivor_name[kind], n, TASKS, timeout, held, survivors, SURVIVOR_BYTES, FIXED_BYTES);
  for (int i = 0; i < TASKS; i += n) {
    if (kind == PENDING)
      failures += uvtw_ticket_cancel(tickets[i]) != 0;
    uvtw_ticket_release(tickets[i]);
  }
  failures += uvtw_wheel_advance(wheel, 0) != 0; /* lets go of the cancelled ones */
  held = uvtw__tasks_bytes(wheel);
  tap_ok(failures == 0 && held <= FIXED_BYTES,
         "%s: %s, one in %d, %" PRIu64 " ms: once the survivors ended, %" PRIu64
         " bytes (at most %" PRIu64 ")",
         T, survivor_name[kind], n, timeout, held, FIXED_BYTES);
  close_all(&loop, wheel, T);
  EXPECT_I64(mapped, mapped_start, "%s: the closed wheel leaves nothing mapped", T);
}

/* The pool holds at most 8 KiB per task alive plus a fixed part, whatever
 * kind of survivor (pending, run with its ticket kept, cancelled with the
 * cancel not yet read by the loop), one in 1, 64 or 2,047, with timeouts
 * under and over a second; and only the fixed part once they ended. */
static void test_memory_follows_alive(void) {
  static const int every[] = {1, 64, 2047};
  static const uint64_t timeouts[] = {5, 5000};
  for (int kind = PENDING; kind <= CANCEL_QUEUED; kind++)
    for (size_t i = 0; i < sizeof every / sizeof every[0]; i++)
      for (size_t t = 0; t < sizeof timeouts / sizeof timeouts[0]; t++)
        survivors_case((enum survivor)kind, every[i], timeouts[t]);
}

/* A steady flow maps nothing new: 200 rounds of 1,000 tasks of 5 ms, each
 * round run before the next; after the first rounds, the slabs are spares
 * used again, and the pool holds no more after round 200 than after round
 * 10. */
static void test_steady_flow(void) {
  const char *T = "steady flow";
  uv_loop_t loop;
  uvtw_wheel_t *wheel = NULL;
  uvtw_options_t options = {.manual_clock = 1};
  task_probe_t probe = {0, 0};
  if (!open_wheel(&loop, &options, &wheel, T))
    return;
  int failures = 0;
  long made_tenth = 0;
  uint64_t held_tenth = 0;
  for (int round = 0; round < 200; round++) {
    for (int i = 0; i < 1000; i++)
      failures += uvtw_schedule(wheel, 5, on_task, &probe, NULL) != 0;
    failures += uvtw_wheel_advance(wheel, 10) != 0;
    made_tenth = round == 9 ? made : made_tenth;
    held_tenth = round == 9 ? uvtw__tasks_bytes(wheel) : held_tenth;
  }
  tap_ok(failures == 0 && probe.calls == 200000, "%s: 200,000 tasks ran", T);
  EXPECT_I64(made - made_tenth, 0, "%s: nothing was mapped after round 10", T);
  EXPECT_U64(uvtw__tasks_bytes(wheel), held_tenth, "%s: the pool holds as after round 10", T);
  close_all(&loop, wheel, T);
}

/* A ticket kept past the wheel's close keeps its slab, and the shared part
 * it points to, until it is released: then everything goes back. */
static void test_ticket_outlives_wheel(void) {
  const char *T = "ticket outlives wheel";
  uv_loop_t loop;
  uvtw_wheel_t *wheel = NULL;
  uvtw_options_t options = {.manual_clock = 1};
  task_probe_t probe = {0, 0};
  long live_start = live, mapped_start = mapped;
  if (!open_wheel(&loop, &options, &wheel, T))
    return;
  uvtw_ticket_t *kept = NULL;
  EXPECT_ERR(uvtw_schedule(wheel, 5000, on_task, &probe, &kept), 0, "%s: a task with a ticket", T);
  close_all(&loop, wheel, T);
  tap_ok(probe.calls == 1 && probe.status == UV_ECANCELED,
         "%s: the close ended the task with UV_ECANCELED", T);
  tap_ok(mapped > mapped_start && live > live_start,
         "%s: the ticket keeps its slab and the shared part after the close", T);
  EXPECT_ERR(uvtw_ticket_cancel(kept), UV_EALREADY, "%s: the ticket still answers", T);
  uvtw_ticket_release(kept);
  tap_ok(mapped == mapped_start && live == live_start,
         "%s: its release gives back the slab and the shared part", T);
}

/* ---- a caller's mistakes, overflowing deadlines --------------------------- */

static void on_timer(uvtw_timer_t *timer) {
  (void)timer;
}

/* NULL handles and a timer bound to no wheel: UV_EINVAL or nothing, as
 * include/uvtw.h says, and the wheel untouched. */
static void test_caller_mistakes(void) {
  const char *T = "caller mistakes";
  uv_loop_t loop;
  uvtw_wheel_t *wheel = NULL;
  if (!tap_ok(uv_loop_init(&loop) == 0 && uvtw_wheel_new(&loop, NULL, &wheel) == 0,
              "%s: a loop and a wheel", T))
    return;
  uvtw_stats_t before, after;
  uvtw_wheel_stats(wheel, &before);
  uvtw_timer_t unbound;
  uvtw_timer_init(wheel, NULL);
  uvtw_timer_init(NULL, &unbound);
  EXPECT_ERR(uvtw_timer_start(&unbound, on_timer, 10, 0), UV_EINVAL,
             "%s: start of a timer initialized without a wheel: UV_EINVAL", T);
  EXPECT_ERR(uvtw_timer_again(&unbound), UV_EINVAL, "%s: again of a timer never started: UV_EINVAL",
             T);
  EXPECT_ERR(uvtw_timer_stop(&unbound), 0, "%s: stop of an inactive timer: 0", T);
  EXPECT_ERR(uvtw_timer_stop(NULL), UV_EINVAL, "%s: stop(NULL): UV_EINVAL", T);
  EXPECT_ERR(uvtw_timer_again(NULL), UV_EINVAL, "%s: again(NULL): UV_EINVAL", T);
  close_callbacks = 0;
  uvtw_wheel_close(NULL, on_close, NULL);
  uvtw_wheel_stats(wheel, &after);
  tap_ok(
      memcmp(&before, &after, sizeof before) == 0 && close_callbacks == 0,
      "%s: init(NULL timer) and close(NULL wheel) do nothing; the wheel's counters are unchanged",
      T);
  close_all(&loop, wheel, T);
}

/* Deadlines past the end of time saturate: active, never due, on a tick of
 * 4 ms too, where a deadline just short of UINT64_MAX ms rounds up past
 * it; a task's deadline on the loop's clock saturates as well. */
static void test_deadline_overflow(void) {
  const char *T = "deadline overflow";
  uv_loop_t loop;
  uvtw_wheel_t *manual = NULL, *real = NULL;
  uvtw_options_t coarse_manual = {.tick_ms = 4, .manual_clock = 1}, coarse = {.tick_ms = 4};
  if (!tap_ok(uv_loop_init(&loop) == 0 && uvtw_wheel_new(&loop, &coarse_manual, &manual) == 0 &&
                  uvtw_wheel_new(&loop, &coarse, &real) == 0,
              "%s: a loop, a manual and a loop-clock wheel with tick_ms 4", T))
    return;
  uvtw_timer_t a, b, c;
  uvtw_timer_init(manual, &a);
  uvtw_timer_init(manual, &b);
  uvtw_timer_init(real, &c);
  uint64_t now = uvtw_wheel_now(manual);
  EXPECT_ERR(uvtw_timer_start(&a, on_timer, UINT64_MAX - 2 - now, 0), 0,
             "%s: a start due at UINT64_MAX - 2 ms", T);
  EXPECT_I64(uvtw_wheel_next_due(manual), INT64_MAX,
             "%s: rounded up to the tick, it lies past the end: next_due INT64_MAX", T);
  EXPECT_U64(uvtw_timer_get_due_in(&a), UINT64_MAX - now,
             "%s: get_due_in counts to UINT64_MAX ms, where it saturates", T);
  EXPECT_ERR(uvtw_timer_start(&b, on_timer, UINT64_MAX, 0), 0,
             "%s: a start with timeout UINT64_MAX", T);
  EXPECT_ERR(uvtw_wheel_advance(manual, 1000), 0, "%s: the clock moves", T);
  tap_ok(uvtw_timer_is_active(&a) && uvtw_timer_is_active(&b), "%s: both stay active", T);
  EXPECT_ERR(uvtw_timer_start(&c, on_timer, UINT64_MAX - 2 - uvtw_wheel_now(real), 0), 0,
             "%s: the same start on the loop's clock arms the wheel's uv_timer_t", T);
  EXPECT_I64(uvtw_wheel_next_due(real), INT64_MAX, "%s: ... and is never due", T);
  uvtw_ticket_t *ticket = NULL, *manual_ticket = NULL;
  task_probe_t probe = {0, 0};
  EXPECT_ERR(uvtw_schedule(manual, UINT64_MAX, on_task, &probe, &manual_ticket), 0,
             "%s: a task with timeout UINT64_MAX on the manual clock", T);
  EXPECT_I64(uvtw_wheel_next_due(manual), INT64_MAX, "%s: ... is never due", T);
  EXPECT_ERR(uvtw_ticket_cancel(manual_ticket), 0, "%s: ... and is cancelled", T);
  uvtw_ticket_release(manual_ticket);
  EXPECT_ERR(uvtw_schedule(real, UINT64_MAX, on_task, &probe, &ticket), 0,
             "%s: a task with timeout UINT64_MAX on the loop's clock", T);
  EXPECT_I64(uvtw_wheel_next_due(real), INT64_MAX, "%s: ... is never due either", T);
  EXPECT_ERR(uvtw_ticket_cancel(ticket), 0, "%s: ... and is cancelled", T);
  uvtw_ticket_release(ticket);
  uvtw_timer_stop(&a);
  uvtw_timer_stop(&b);
  uvtw_timer_stop(&c);
  uvtw_wheel_close(manual, NULL, NULL);
  close_all(&loop, real, T);
  EXPECT_I64(probe.calls, 0, "%s: the cancelled task never ran", T);
}

int main(int argc, char **argv) {
  static const tap_case_t cases[] = {
      TAP_CASE(descriptors_exhausted), TAP_CASE(memory_wheel_new),
      TAP_CASE(memory_schedule),       TAP_CASE(slab_race),
      TAP_CASE(memory_follows_alive),  TAP_CASE(steady_flow),
      TAP_CASE(ticket_outlives_wheel), TAP_CASE(caller_mistakes),
      TAP_CASE(deadline_overflow),
  };
  tap_diag("libuv %s, uvtw %s", uv_version_string(), uvtw_version_string());
  return tap_run_cases(argc, argv, cases, sizeof cases / sizeof cases[0]);
}
