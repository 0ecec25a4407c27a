/* loadgen: the server under test (see loadgen.h). */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include "loadgen.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static void on_server_exit(uv_process_t *process, int64_t status, int term_signal) {
  lg_server_t *s = container_of(process, lg_server_t, process);
  s->exited = 1;
  s->exit_status = status;
  s->term_signal = term_signal;
  uv_close((uv_handle_t *)process, NULL);
}

static void on_server_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buf) {
  lg_server_t *s = container_of(handle, lg_server_t, out);
  size_t room = sizeof s->out_buf - 1 - s->out_len;
  (void)suggested;
  if (room == 0) { /* keep only the tail: the final stats line matters */
    memmove(s->out_buf, s->out_buf + sizeof s->out_buf / 2, sizeof s->out_buf / 2);
    s->out_len = sizeof s->out_buf / 2 - 1;
    room = sizeof s->out_buf - 1 - s->out_len;
  }
  *buf = uv_buf_init(s->out_buf + s->out_len, (unsigned)room);
}

static void on_server_output(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf) {
  lg_server_t *s = container_of(stream, lg_server_t, out);
  const char *line;
  char address[80], *colon; /* HOST:PORT, HOST maybe [IPv6] */
  (void)buf;
  if (nread < 0) {
    s->out_open = 0;
    uv_close((uv_handle_t *)stream, NULL);
    return;
  }
  s->out_len += (size_t)nread;
  s->out_buf[s->out_len] = '\0';
  line = s->port == 0 ? strstr(s->out_buf, "listening on ") : NULL;
  if (line != NULL && strchr(line, '\n') != NULL &&
      sscanf(line, "listening on %79[^\n]", address) == 1 &&
      (colon = strrchr(address, ':')) != NULL && (size_t)(colon - address) < sizeof s->host) {
    memcpy(s->host, address, (size_t)(colon - address));
    s->host[colon - address] = '\0';
    s->port = atoi(colon + 1);
  }
}

static void on_wait_timer(uv_timer_t *timer) {
  *(int *)timer->data = 1;
}

/* Appends the space-separated words of `text` (split in place) to argv. */
static int split_words(char *text, char **argv, int argc, int max) {
  char *word, *save;
  for (word = strtok_r(text, " ", &save); word != NULL && argc < max;
       word = strtok_r(NULL, " ", &save))
    argv[argc++] = word;
  return argc;
}

int lg_server_start(uv_loop_t *loop, lg_server_t *s, const char *exe, const char *args) {
  char *argv[64];
  char wrapper[512], words[512];
  int argc, r, timed_out = 0;
  uv_process_options_t options;
  uv_stdio_container_t stdio[3];
  uv_timer_t wait_timer;
  const char *env = getenv("HTTP_SERVER_WRAPPER");

  memset(s, 0, sizeof *s);
  snprintf(wrapper, sizeof wrapper, "%s", env != NULL ? env : "");
  snprintf(words, sizeof words, "%s", args);
  argc = split_words(wrapper, argv, 0, 40);
  argv[argc++] = (char *)exe;
  argv[split_words(words, argv, argc, 63)] = NULL;

  uv_pipe_init(loop, &s->out, 0);
  memset(&options, 0, sizeof options);
  stdio[0].flags = UV_IGNORE;
  stdio[1].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
  stdio[1].data.stream = (uv_stream_t *)&s->out;
  stdio[2].flags = UV_INHERIT_FD;
  stdio[2].data.fd = 2;
  options.file = argv[0];
  options.args = argv;
  options.exit_cb = on_server_exit;
  options.stdio = stdio;
  options.stdio_count = 3;
  r = uv_spawn(loop, &s->process, &options);
  if (r != 0) {
    uv_close((uv_handle_t *)&s->out, NULL);
    uv_close((uv_handle_t *)&s->process, NULL);
    uv_run(loop, UV_RUN_DEFAULT);
    return r;
  }
  s->out_open = 1;
  uv_read_start((uv_stream_t *)&s->out, on_server_alloc, on_server_output);

  uv_timer_init(loop, &wait_timer);
  wait_timer.data = &timed_out;
  uv_timer_start(&wait_timer, on_wait_timer, 10000, 0);
  while (s->port == 0 && !s->exited && !timed_out)
    uv_run(loop, UV_RUN_ONCE);
  uv_close((uv_handle_t *)&wait_timer, NULL);
  uv_run(loop, UV_RUN_NOWAIT);
  if (s->port != 0)
    return 0;
  if (!s->exited)
    uv_process_kill(&s->process, SIGKILL);
  while (!s->exited || s->out_open)
    uv_run(loop, UV_RUN_ONCE);
  return UV_ECONNREFUSED;
}

int lg_server_stop(uv_loop_t *loop, lg_server_t *s, int signum, uint64_t timeout_ms) {
  uv_timer_t wait_timer;
  int timed_out = 0;
  if (!s->exited)
    uv_process_kill(&s->process, signum);
  uv_timer_init(loop, &wait_timer);
  wait_timer.data = &timed_out;
  uv_timer_start(&wait_timer, on_wait_timer, timeout_ms, 0);
  while ((!s->exited || s->out_open) && !timed_out)
    uv_run(loop, UV_RUN_ONCE);
  if (!s->exited) {
    uv_process_kill(&s->process, SIGKILL);
    while (!s->exited)
      uv_run(loop, UV_RUN_ONCE);
  }
  uv_close((uv_handle_t *)&wait_timer, NULL);
  if (s->out_open) {
    uv_close((uv_handle_t *)&s->out, NULL);
    s->out_open = 0;
  }
  uv_run(loop, UV_RUN_NOWAIT);
  return !timed_out && s->exit_status == 0 && s->term_signal == 0 ? 0 : -1;
}

long lg_server_rss_kib(const lg_server_t *s) {
  char path[64], line[256];
  long kib = -1;
  FILE *f;
  snprintf(path, sizeof path, "/proc/%d/status", s->process.pid);
  f = fopen(path, "r");
  if (f == NULL)
    return -1;
  while (fgets(line, sizeof line, f) != NULL)
    if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
      break;
  fclose(f);
  return kib;
}

long long lg_stat(const char *line, const char *key) {
  size_t klen = strlen(key);
  const char *p = line;
  while (p != NULL && (p = strstr(p, key)) != NULL) {
    if ((p == line || p[-1] == ' ' || p[-1] == '\n') && p[klen] == '=')
      return atoll(p + klen + 1);
    p += klen;
  }
  return -1;
}

const char *lg_raise_fd_limit(unsigned long needed) {
  static char why[128];
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
    return "getrlimit(RLIMIT_NOFILE) failed";
  if (rl.rlim_cur >= needed)
    return NULL;
  if (rl.rlim_max < needed)
    rl.rlim_max = needed; /* only root may raise the hard limit */
  rl.rlim_cur = needed;
  if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
    snprintf(why, sizeof why, "RLIMIT_NOFILE cannot be raised to %lu (hard limit %lu)", needed,
             (unsigned long)rl.rlim_max);
    return why;
  }
  return NULL;
}
