// The C++ side of the consumer tests: uvtw.h compiles as C++ (extern "C",
// -pedantic -Werror) and links with pkg-config's flags.
#include <uvtw.h>

#include <cstdio>
#include <cstring>

namespace {

int fired = 0;

void on_timer(uvtw_timer_t *) {
  fired++;
}

} // namespace

int main() {
  uv_loop_t loop;
  uvtw_wheel_t *wheel = nullptr;
  uvtw_timer_t timer;
  char version[32];
  std::snprintf(version, sizeof version, "%d.%d.%d", UVTW_VERSION_MAJOR, UVTW_VERSION_MINOR,
                UVTW_VERSION_PATCH);
  if (std::strcmp(version, uvtw_version_string()) != 0) {
    std::printf("FAILED: header version %s, library %s\n", version, uvtw_version_string());
    return 1;
  }
  if (uv_loop_init(&loop) != 0 || uvtw_wheel_new(&loop, nullptr, &wheel) != 0) {
    std::printf("FAILED: a loop and a wheel open\n");
    return 1;
  }
  uvtw_timer_init(wheel, &timer);
  uvtw_timer_start(&timer, on_timer, 1, 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  uvtw_wheel_close(wheel, nullptr, nullptr);
  uv_run(&loop, UV_RUN_DEFAULT);
  bool ok = fired == 1 && uv_loop_close(&loop) == 0;
  std::printf("%s: C++ consumer, uvtw %s, timer fired %d time(s)\n", ok ? "ok" : "FAILED",
              uvtw_version_string(), fired);
  return ok ? 0 : 1;
}
