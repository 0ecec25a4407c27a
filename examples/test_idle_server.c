/* Drives examples/idle_server as a child process over 127.0.0.1 with plain
 * POSIX sockets: idle clients are cut at the idle timeout (300 ms), active
 * ones are not, SLOW requests get their answer or TIMEOUT at the request
 * deadline (1000 ms), and SIGINT ends the server with status 0. Every wait
 * is bounded by poll(), so a broken server fails a check instead of hanging.
 * The server is started and stopped as the load test's is (lg_server.c).
 *
 *   test_idle_server PATH_TO_IDLE_SERVER */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "loadgen.h"
#include "tap.h"

#define IDLE_MS 300

static uv_loop_t *loop;
static lg_server_t server;

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Reads one line (without '\n') into buf within timeout_ms. Returns its
 * length, -1 on EOF or error, -2 on timeout. */
static int read_line(int fd, char *buf, size_t size, int timeout_ms) {
  int64_t end = now_ms() + timeout_ms;
  size_t len = 0;
  for (;;) {
    struct pollfd p = {fd, POLLIN, 0};
    int64_t left = end - now_ms();
    if (left <= 0 || poll(&p, 1, (int)left) == 0)
      return -2;
    char ch;
    ssize_t n = read(fd, &ch, 1);
    if (n <= 0)
      return -1;
    if (ch == '\n') {
      buf[len] = '\0';
      return (int)len;
    }
    if (len + 1 < size)
      buf[len++] = ch;
  }
}

static int dial(void) {
  struct sockaddr_in addr;
  memset(&addr, 0, sizeof addr);
  addr.sin_family = AF_INET;
  addr.sin_port = htons((uint16_t)server.port);
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd >= 0 && connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
    close(fd);
    fd = -1;
  }
  return fd;
}

static int send_str(int fd, const char *s) {
  return write(fd, s, strlen(s)) == (ssize_t)strlen(s);
}

static void test_idle_cut(void) {
  char line[300];
  int fd = dial();
  if (!tap_ok(fd >= 0, "an idle client connects"))
    return;
  tap_ok(send_str(fd, "hello\n") && read_line(fd, line, sizeof line, 2000) >= 0 &&
             strcmp(line, "hello") == 0,
         "a plain line is echoed at once");
  int64_t last = now_ms();
  int n = read_line(fd, line, sizeof line, 3000);
  tap_ok(n >= 0 && strcmp(line, "idle timeout") == 0, "the idle client is told why");
  n = read_line(fd, line, sizeof line, 3000);
  int64_t elapsed = now_ms() - last;
  tap_ok(n == -1, "then the server closes the connection");
  tap_ok(elapsed >= 250 && elapsed <= 3000, "closed %lld ms after the last byte (300 ms idle)",
         (long long)elapsed);
  close(fd);
}

static void test_active_kept(void) {
  char line[300], want[32];
  int fd = dial(), echoes = 0;
  if (!tap_ok(fd >= 0, "an active client connects"))
    return;
  for (int i = 0; i < 10; i++) {
    struct timespec gap = {0, 100 * 1000000L};
    nanosleep(&gap, NULL);
    snprintf(want, sizeof want, "line %d", i);
    send_str(fd, want);
    send_str(fd, "\n");
    if (read_line(fd, line, sizeof line, 1000) >= 0 && strcmp(line, want) == 0)
      echoes++;
  }
  EXPECT_I64(echoes, 10, "a line every 100 ms for 1 s: every echo, never cut at 300 ms");
  close(fd);
}

static void test_slow(void) {
  char line[300];
  int fd = dial();
  if (!tap_ok(fd >= 0, "a SLOW client connects"))
    return;
  int64_t t0 = now_ms();
  int n = send_str(fd, "SLOW 50\n") ? read_line(fd, line, sizeof line, 2000) : -1;
  int64_t took = now_ms() - t0;
  tap_ok(n >= 0 && strcmp(line, "DONE") == 0, "SLOW 50 is answered DONE");
  tap_ok(took >= 45 && took < 1000, "after %lld ms (50 ms asked)", (long long)took);
  t0 = now_ms();
  n = send_str(fd, "SLOW 5000\n") ? read_line(fd, line, sizeof line, 3000) : -1;
  took = now_ms() - t0;
  tap_ok(n >= 0 && strcmp(line, "TIMEOUT") == 0,
         "SLOW 5000 is answered TIMEOUT, not cut by the idle timeout meanwhile");
  tap_ok(took >= 950 && took <= 2500, "at the request deadline: %lld ms (1000 ms)",
         (long long)took);
  close(fd);
}

static void test_sigint(void) {
  char line[300];
  int fd = dial();
  tap_ok(fd >= 0 && send_str(fd, "x\n") && read_line(fd, line, sizeof line, 2000) >= 0,
         "a client is connected when SIGINT comes");
  int64_t t0 = now_ms();
  tap_ok(lg_server_stop(loop, &server, SIGINT, 3000) == 0, "SIGINT: the server exits 0 in %lld ms",
         (long long)(now_ms() - t0));
  tap_ok(fd >= 0 && read_line(fd, line, sizeof line, 1000) == -1,
         "and the client's connection is closed");
  if (fd >= 0)
    close(fd);
}

int main(int argc, char **argv) {
  signal(SIGPIPE, SIG_IGN);
  if (argc < 2) {
    fprintf(stderr, "usage: test_idle_server PATH_TO_IDLE_SERVER\n");
    return 2;
  }
  loop = uv_default_loop();
  if (tap_ok(lg_server_start(loop, &server, argv[1], "0 300") == 0,
             "the server prints its port (%d)", server.port)) {
    test_idle_cut();
    test_active_kept();
    test_slow();
    test_sigint();
  }
  return tap_done();
}
