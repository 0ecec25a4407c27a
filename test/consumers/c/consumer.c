/* A program that uses an installed uvtw the way a user's would: it is built
 * by .ci/stage-consumers with pkg-config's flags (also -std=c11 -pedantic
 * -Werror), by CMake through find_package(uvtw), and by a Meson parent
 * project with uvtw as a subproject. It runs one timer and one task and
 * checks the version macros against the library. Exit status 0: all good. */
/* <time.h> before uvtw.h, with nothing defined but uvtw's flags: clock_gettime
 * is declared whatever the order (-std=c11 hides POSIX; the flags show it). */
#include <time.h>

#include <uvtw.h>

#include <stdio.h>
#include <string.h>

/* Names the library used to export; a program may define its own now. */
int wheel_init(void);
int mpsc_push(void);
int wheel_init(void) {
  return 1;
}
int mpsc_push(void) {
  return 1;
}

static int timer_fired, task_status = -1;

static void on_timer(uvtw_timer_t *timer) {
  (void)timer;
  timer_fired++;
}

static void on_task(void *arg, int status) {
  (void)arg;
  task_status = status;
}

static int check(int ok, const char *what) {
  printf("%s: %s\n", ok ? "ok" : "FAILED", what);
  return ok ? 0 : 1;
}

int main(void) {
  uv_loop_t loop;
  uvtw_wheel_t *wheel;
  uvtw_timer_t timer;
  char version[32];
  int failed = 0;

  snprintf(version, sizeof version, "%d.%d.%d", UVTW_VERSION_MAJOR, UVTW_VERSION_MINOR,
           UVTW_VERSION_PATCH);
  printf("uvtw %s (header %s), libuv %s\n", uvtw_version_string(), version, uv_version_string());
  failed += check(strcmp(version, uvtw_version_string()) == 0,
                  "the header's version macros name the library's version");

#ifndef _WIN32 /* POSIX; MinGW declares it but links it only with winpthread */
  struct timespec ts;
  failed += check(clock_gettime(CLOCK_MONOTONIC, &ts) == 0, "POSIX's clock_gettime is declared");
#endif

  if (uv_loop_init(&loop) != 0 || uvtw_wheel_new(&loop, NULL, &wheel) != 0)
    return check(0, "a loop and a wheel open");
  uvtw_timer_init(wheel, &timer);
  failed += check(uvtw_timer_start(&timer, on_timer, 5, 0) == 0, "a timer starts");
  failed += check(uvtw_schedule(wheel, 1, on_task, NULL, NULL) == 0, "a task is scheduled");
  uv_run(&loop, UV_RUN_DEFAULT);
  failed += check(timer_fired == 1, "the timer fired once");
  failed += check(task_status == 0, "the task ran with status 0");

  uvtw_wheel_close(wheel, NULL, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  failed += check(uv_loop_close(&loop) == 0, "the loop closes with nothing left");
  failed += check(wheel_init() + mpsc_push() == 2, "the program's own wheel_init and mpsc_push");
  return failed == 0 ? 0 : 1;
}
