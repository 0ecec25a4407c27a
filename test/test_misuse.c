/* A careless program's mistakes, diagnosed where a build can see them. A
 * release build compiles no check (its speed is the product's), so there a
 * mistake corrupts memory silently; the debug build (-Dchecks, the default
 * unless the build type is release, minsize or plain) and the sanitizers
 * report it:
 *
 *   ticket_released_twice          ASan: use-after-poison (pool.c poisons a
 *                                  block given back); checks: the abort of
 *                                  tasks.c's reference count check
 *   ticket_used_after_release      ASan: use-after-poison
 *   wheel_closed_after_close_cb    ASan: heap-use-after-free
 *   timer_started_after_wheel_freed ASan: heap-use-after-free
 *   timer_started_from_other_thread TSan: data race
 *   timer_init_while_active        checks: the abort of the wheel's link
 *                                  check at the next unlink beside it
 *   timer_init_while_pending       every build: a crash at the wheel's next
 *                                  pass (no message: no unlink comes first)
 *
 * Each case makes the mistake in a child (this program again, run with
 * `--child NAME`) and checks how it ended: not with status 0, and with the
 * diagnosis on its stderr. A case its build cannot diagnose is skipped,
 * saying which build does. `correct_program` runs the same calls without
 * the mistake: status 0 and nothing on stderr. */
#include <uvtw.h>

#include <errno.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tap.h"

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define UNDER_TSAN 1
#endif
#endif

#define EXEC_FAILED 127 /* the child could not run this program again */

static const char *self; /* argv[0] */

/* ---- the children: each makes one mistake and exits 0 if nothing stops it */

static void on_task(void *arg, int status) {
  (void)arg;
  (void)status;
}

static void on_close(uvtw_wheel_t *wheel, void *arg) {
  (void)wheel;
  *(int *)arg = 1;
}

static void on_timer(uvtw_timer_t *timer) {
  (void)timer;
}

/* A manual-clock wheel on its own loop whose task has run: the loop has
 * let go of it, only the ticket's reference is left. */
static uvtw_ticket_t *task_that_ran(uv_loop_t *loop, uvtw_wheel_t **wheel) {
  uvtw_options_t opts = {.manual_clock = 1};
  uvtw_ticket_t *ticket = NULL;
  if (uv_loop_init(loop) != 0 || uvtw_wheel_new(loop, &opts, wheel) != 0 ||
      uvtw_schedule(*wheel, 0, on_task, NULL, &ticket) != 0 || uvtw_wheel_advance(*wheel, 0) != 0)
    _exit(3);
  return ticket;
}

static void close_and_exit(uv_loop_t *loop, uvtw_wheel_t *wheel) {
  int closed = 0;
  uvtw_wheel_close(wheel, on_close, &closed);
  uv_run(loop, UV_RUN_DEFAULT);
  _exit(closed && uv_loop_close(loop) == 0 ? 0 : 4);
}

static void child_correct_program(void) {
  uv_loop_t loop;
  uvtw_wheel_t *wheel;
  uvtw_ticket_t *ticket = task_that_ran(&loop, &wheel);
  if (uvtw_ticket_cancel(ticket) != UV_EALREADY)
    _exit(5);
  uvtw_ticket_release(ticket);
  close_and_exit(&loop, wheel);
}

static void child_ticket_released_twice(void) {
  uv_loop_t loop;
  uvtw_wheel_t *wheel;
  uvtw_ticket_t *ticket = task_that_ran(&loop, &wheel);
  uvtw_ticket_release(ticket); /* the last reference: the block goes back */
  uvtw_ticket_release(ticket);
  close_and_exit(&loop, wheel);
}

static void child_ticket_used_after_release(void) {
  uv_loop_t loop;
  uvtw_wheel_t *wheel;
  uvtw_ticket_t *ticket = task_that_ran(&loop, &wheel);
  uvtw_ticket_release(ticket);
  (void)uvtw_ticket_cancel(ticket);
  close_and_exit(&loop, wheel);
}

/* A wheel closed, its close callback run: the wheel is freed. */
static uvtw_wheel_t *freed_wheel(uv_loop_t *loop, uvtw_timer_t *timer) {
  uvtw_wheel_t *wheel;
  int closed = 0;
  if (uv_loop_init(loop) != 0 || uvtw_wheel_new(loop, NULL, &wheel) != 0)
    _exit(3);
  uvtw_timer_init(wheel, timer);
  uvtw_wheel_close(wheel, on_close, &closed);
  uv_run(loop, UV_RUN_DEFAULT);
  if (!closed)
    _exit(4);
  return wheel;
}

static void child_wheel_closed_after_close_cb(void) {
  uv_loop_t loop;
  uvtw_timer_t timer;
  uvtw_wheel_t *wheel = freed_wheel(&loop, &timer);
  uvtw_wheel_close(wheel, NULL, NULL); /* "ignored" only until the callback has run */
  _exit(0);
}

static void child_timer_started_after_wheel_freed(void) {
  uv_loop_t loop;
  uvtw_timer_t timer;
  (void)freed_wheel(&loop, &timer);
  (void)uvtw_timer_start(&timer, on_timer, 10, 0);
  _exit(0);
}

static uvtw_wheel_t *shared_wheel;
static uvtw_timer_t other_thread_timer;

static void start_from_other_thread(void *arg) {
  (void)arg;
  uv_sleep(20); /* while the loop thread runs passes */
  uvtw_timer_init(shared_wheel, &other_thread_timer);
  (void)uvtw_timer_start(&other_thread_timer, on_timer, 5, 0);
}

static void on_tick(uvtw_timer_t *timer) {
  if (uvtw_timer_get_repeat(timer) > 0 &&
      uv_now(uvtw_wheel_loop(shared_wheel)) >= *(uint64_t *)timer->data)
    uvtw_timer_stop(timer);
}

static void child_timer_started_from_other_thread(void) {
  uv_loop_t loop;
  uvtw_timer_t tick;
  uv_thread_t thread;
  if (uv_loop_init(&loop) != 0 || uvtw_wheel_new(&loop, NULL, &shared_wheel) != 0)
    _exit(3);
  uint64_t until = uv_now(&loop) + 200;
  uvtw_timer_init(shared_wheel, &tick);
  tick.data = &until;
  uvtw_timer_start(&tick, on_tick, 1, 1);
  if (uv_thread_create(&thread, start_from_other_thread, NULL) != 0)
    _exit(3);
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_thread_join(&thread);
  close_and_exit(&loop, shared_wheel);
}

static void child_timer_init_while_active(void) {
  uv_loop_t loop;
  uvtw_wheel_t *wheel;
  uvtw_timer_t before, timer, after;
  if (uv_loop_init(&loop) != 0 || uvtw_wheel_new(&loop, NULL, &wheel) != 0)
    _exit(3);
  uvtw_timer_init(wheel, &before);
  uvtw_timer_init(wheel, &timer);
  uvtw_timer_init(wheel, &after);
  uvtw_timer_start(&before, on_timer, 10000, 0);
  uvtw_timer_start(&timer, on_timer, 10000, 0);
  uvtw_timer_start(&after, on_timer, 10000, 0);
  uvtw_timer_init(wheel, &timer); /* a struct reused without a stop */
  uvtw_timer_start(&timer, on_timer, 10000, 0);
  uvtw_timer_stop(&before); /* its neighbour links to the reused timer's old place */
  close_and_exit(&loop, wheel);
}

static void child_timer_init_while_pending(void) {
  uv_loop_t loop;
  uvtw_wheel_t *wheel;
  uvtw_timer_t timer;
  if (uv_loop_init(&loop) != 0 || uvtw_wheel_new(&loop, NULL, &wheel) != 0)
    _exit(3);
  uvtw_timer_init(wheel, &timer);
  uvtw_timer_start(&timer, on_timer, 10, 0);
  uvtw_timer_init(wheel, &timer); /* a struct reused without a stop, and not started again */
  uv_run(&loop, UV_RUN_DEFAULT);  /* the next pass walks the timer's old place */
  close_and_exit(&loop, wheel);
}

typedef struct child_s {
  const char *name;
  void (*run)(void);
} child_t;

#define CHILD(name)                                                                                \
  { #name, child_##name }
static const child_t children[] = {
    CHILD(correct_program),
    CHILD(ticket_released_twice),
    CHILD(ticket_used_after_release),
    CHILD(wheel_closed_after_close_cb),
    CHILD(timer_started_after_wheel_freed),
    CHILD(timer_started_from_other_thread),
    CHILD(timer_init_while_active),
    CHILD(timer_init_while_pending),
};

static int run_child(const char *name) {
  for (size_t i = 0; i < sizeof children / sizeof children[0]; i++)
    if (strcmp(children[i].name, name) == 0)
      children[i].run();
  fprintf(stderr, "no child named %s\n", name);
  return 2;
}

/* ---- the parent: runs a child and reads how it ended -------------------- */

typedef struct ending_s {
  int exited;    /* exit status, or -1 if killed */
  int signalled; /* the signal that ended it, or 0 */
  char err[65536];
} ending_t;

static void run(const char *name, ending_t *end) {
  int fds[2];
  memset(end, 0, sizeof *end);
  end->exited = -1;
  fflush(stdout);
  if (pipe(fds) != 0)
    return;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 2);
    close(fds[0]);
    close(fds[1]);
    execl(self, self, "--child", name, (char *)NULL);
    _exit(EXEC_FAILED);
  }
  close(fds[1]);
  size_t len = 0;
  ssize_t n;
  while ((n = read(fds[0], end->err + len, sizeof end->err - 1 - len)) > 0 ||
         (n < 0 && errno == EINTR))
    len += n > 0 ? (size_t)n : 0;
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
    ;
  if (WIFEXITED(status))
    end->exited = WEXITSTATUS(status);
  else if (WIFSIGNALED(status))
    end->signalled = WTERMSIG(status);
}

/* The first lines of the child's stderr, as diagnostics. */
static void show(const ending_t *end) {
  const char *line = end->err;
  for (int i = 0; i < 8 && *line != '\0'; i++) {
    const char *eol = strchr(line, '\n');
    int len = eol != NULL ? (int)(eol - line) : (int)strlen(line);
    tap_diag("  child: %.*s", len, line);
    line = eol != NULL ? eol + 1 : line + len;
  }
}

/* The child `name` makes its mistake and is stopped with `diagnosis` on
 * its stderr, naming `where` (the call that made it, for a sanitizer's
 * report). */
static void expect_diagnosed(const char *name, const char *diagnosis, const char *where)
    __attribute__((unused)); /* a release build without a sanitizer diagnoses nothing */
static void expect_diagnosed(const char *name, const char *diagnosis, const char *where) {
  ending_t end;
  run(name, &end);
  if (end.exited == EXEC_FAILED) {
    tap_skip("this program could not run itself again (an emulator?)", name);
    return;
  }
  tap_ok(end.exited != 0, "%s: the child does not end with status 0 (status %d, signal %d)", name,
         end.exited, end.signalled);
  tap_ok(strstr(end.err, diagnosis) != NULL, "%s: its stderr says \"%s\"", name, diagnosis);
  if (where != NULL)
    tap_ok(strstr(end.err, where) != NULL, "%s: the report names %s", name, where);
  show(&end);
}

static void test_correct_program(void) {
  ending_t end;
  run("correct_program", &end);
  if (end.exited == EXEC_FAILED) {
    tap_skip("this program could not run itself again (an emulator?)", "correct_program");
    return;
  }
  EXPECT_I64(end.exited, 0,
             "correct_program: schedule, run, cancel (too late), release once: status 0");
  tap_ok(end.err[0] == '\0', "correct_program: nothing on stderr");
  show(&end);
}

static void test_ticket_released_twice(void) {
#if defined(UNDER_ASAN)
  expect_diagnosed("ticket_released_twice", "AddressSanitizer: use-after-poison",
                   "uvtw_ticket_release");
#elif defined(UVTW_CHECKS)
  expect_diagnosed("ticket_released_twice", "uvtw: a ticket's reference count went below 0", NULL);
#else
  tap_skip("a release build checks nothing: -Dchecks=true or -Db_sanitize=address diagnose it",
           "ticket_released_twice");
#endif
}

static void test_ticket_used_after_release(void) {
#if defined(UNDER_ASAN)
  expect_diagnosed("ticket_used_after_release", "AddressSanitizer: use-after-poison",
                   "uvtw_ticket_cancel");
#else
  tap_skip("only -Db_sanitize=address diagnoses it", "ticket_used_after_release");
#endif
}

static void test_wheel_closed_after_close_cb(void) {
#if defined(UNDER_ASAN)
  expect_diagnosed("wheel_closed_after_close_cb", "AddressSanitizer: heap-use-after-free",
                   "uvtw_wheel_close");
#else
  tap_skip("only -Db_sanitize=address diagnoses it", "wheel_closed_after_close_cb");
#endif
}

static void test_timer_started_after_wheel_freed(void) {
#if defined(UNDER_ASAN)
  expect_diagnosed("timer_started_after_wheel_freed", "AddressSanitizer: heap-use-after-free",
                   "uvtw_timer_start");
#else
  tap_skip("only -Db_sanitize=address diagnoses it", "timer_started_after_wheel_freed");
#endif
}

static void test_timer_started_from_other_thread(void) {
#if defined(UNDER_TSAN)
  expect_diagnosed("timer_started_from_other_thread", "ThreadSanitizer: data race", NULL);
#else
  tap_skip("only -Db_sanitize=thread diagnoses it", "timer_started_from_other_thread");
#endif
}

static void test_timer_init_while_active(void) {
#if defined(UVTW_CHECKS)
  expect_diagnosed("timer_init_while_active", "uvtw: an entry's neighbours do not link to it",
                   NULL);
#else
  tap_skip("a release build checks nothing: -Dchecks=true diagnoses it", "timer_init_while_active");
#endif
}

/* Nothing unlinks beside the timer's old place before the wheel's next pass
 * walks it and meets the links the init cleared: every build stops there
 * (a segmentation fault, or a sanitizer's report of one), the checks build
 * without a message of its own. */
static void test_timer_init_while_pending(void) {
  ending_t end;
  run("timer_init_while_pending", &end);
  if (end.exited == EXEC_FAILED) {
    tap_skip("this program could not run itself again (an emulator?)", "timer_init_while_pending");
    return;
  }
  tap_ok(end.exited != 0,
         "timer_init_while_pending: the child is stopped at the next pass, not left running on a "
         "corrupt wheel (status %d, signal %d)",
         end.exited, end.signalled);
  show(&end);
}

int main(int argc, char **argv) {
  self = argv[0];
  if (argc == 3 && strcmp(argv[1], "--child") == 0)
    return run_child(argv[2]);
  tap_diag("libuv %s, uvtw %s", uv_version_string(), uvtw_version_string());
  static const tap_case_t cases[] = {
      TAP_CASE(correct_program),
      TAP_CASE(ticket_released_twice),
      TAP_CASE(ticket_used_after_release),
      TAP_CASE(wheel_closed_after_close_cb),
      TAP_CASE(timer_started_after_wheel_freed),
      TAP_CASE(timer_started_from_other_thread),
      TAP_CASE(timer_init_while_active),
      TAP_CASE(timer_init_while_pending),
  };
  return tap_run_cases(argc, argv, cases, sizeof cases / sizeof cases[0]);
}
