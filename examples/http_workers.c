/* http_workers: the example server (http_server.c) on N loops, one per
 * thread, for the program (see http_workers.h). A connection lives on the
 * worker that accepted it, its timeouts and its /delay answer on that
 * worker's wheel; the main thread owns the sockets, the signals, the summary.
 *
 * The threads share three things, each under the worker's mutex: the
 * command the main thread posts (drain, drop), the stats a worker publishes
 * each time its loop is about to wait for I/O (other workers read them to
 * answer /stats for the whole process), and the flag saying its loop has
 * ended (after which nobody posts to it). */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* uv.h needs POSIX types under -std=c11 */
#endif
#define _DEFAULT_SOURCE /* SO_REUSEPORT is not POSIX: glibc declares it only so */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <uv.h>

#include "http_workers.h"

enum command { CMD_NONE, CMD_DRAIN, CMD_DROP };

typedef struct workers_s workers_t;

typedef struct worker_s {
  workers_t *all;
  uv_thread_t thread;
  uv_loop_t loop;
  uv_async_t wakeup;    /* the main thread posted a command */
  uv_prepare_t publish; /* before each wait for I/O: publish the stats */
  http_server_config_t config;
  http_server_t *server; /* the worker's thread; the main thread after the join */
  int start_status;      /* written before `started` is posted */
  uv_mutex_t lock;       /* guards the three below */
  enum command command;
  int finished; /* the loop has ended: no command is posted any more */
  http_server_stats_t published;
} worker_t;

struct workers_s {
  worker_t *worker;
  unsigned count;
  const uvtw_options_t *wheel_options;
  uv_sem_t started;    /* posted by each worker once its server started */
  uv_loop_t *loop;     /* the main thread's */
  uv_async_t finished; /* a worker's loop has ended */
  uv_signal_t sigint, sigterm;
  int signals; /* received so far */
  int exit_status;
  uint64_t drain_started_ns, drain_ended_ns;
  _Atomic uint64_t fd_burst_end; /* the workers' descriptors are the process's */
};

/* Binds one socket per worker to host:port, each with SO_REUSEPORT when
 * there are several; port 0 is the port the first one gets. Writes the
 * address bound to `name` ("HOST:PORT"). Returns 0, or -1 after saying why
 * (the sockets bound so far are closed). */
static int bind_sockets(const char *host, int port, unsigned count, int *fds, char *name,
                        size_t name_size) {
  struct sockaddr_storage addr;
  socklen_t len = sizeof addr;
  char ip[INET6_ADDRSTRLEN];
  int ipv6 = strchr(host, ':') != NULL;
  int r = ipv6 ? uv_ip6_addr(host, port, (struct sockaddr_in6 *)&addr)
               : uv_ip4_addr(host, port, (struct sockaddr_in *)&addr);
  unsigned i, j;
  if (r != 0) {
    fprintf(stderr, "http_server: cannot listen on %s:%d: %s\n", host, port, uv_strerror(r));
    return -1;
  }
  for (i = 0; i < count; i++) {
    int one = 1;
    fds[i] = socket(addr.ss_family, SOCK_STREAM, 0);
    if (fds[i] < 0 || setsockopt(fds[i], SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0)
      break;
#ifdef SO_REUSEPORT
    if (count > 1 && setsockopt(fds[i], SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) != 0)
      break;
#endif
    if (bind(fds[i], (struct sockaddr *)&addr,
             ipv6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in)) != 0)
      break;
    if (i == 0 && getsockname(fds[0], (struct sockaddr *)&addr, &len) != 0)
      break; /* the others bind the port the first one got */
  }
  if (i < count) {
    int err = errno;
    if (count > 1)
      fprintf(stderr, "http_server: cannot listen on %s:%d (socket %u of %u): %s\n", host, port,
              i + 1, count, strerror(err));
    else
      fprintf(stderr, "http_server: cannot listen on %s:%d: %s\n", host, port, strerror(err));
    for (j = 0; j <= i; j++) /* fds[i] failed after socket() or in it */
      if (fds[j] >= 0)
        close(fds[j]);
    return -1;
  }
  uv_ip_name((struct sockaddr *)&addr, ip, sizeof ip);
  snprintf(name, name_size, "%s%s%s:%d", ipv6 ? "[" : "", ip, ipv6 ? "]" : "",
           ntohs(ipv6 ? ((struct sockaddr_in6 *)&addr)->sin6_port
                      : ((struct sockaddr_in *)&addr)->sin_port));
  return 0;
}

/* Every worker's stats, for /stats and /metrics on `self`'s loop: its own
 * as they are now, the others' as they published them when their loops
 * last waited for I/O. A malloc'd array of *count, or NULL. */
static http_server_stats_t *gather(http_server_t *server, void *arg, unsigned *count) {
  worker_t *self = arg;
  workers_t *all = self->all;
  http_server_stats_t *each = malloc(all->count * sizeof *each);
  if (each == NULL)
    return NULL;
  *count = all->count;
  for (unsigned i = 0; i < all->count; i++) {
    worker_t *w = &all->worker[i];
    if (w == self) {
      http_server_stats(server, &each[i]);
    } else {
      uv_mutex_lock(&w->lock);
      each[i] = w->published;
      uv_mutex_unlock(&w->lock);
    }
  }
  return each;
}

/* ---- A worker --------------------------------------------------------------------- */

static void on_publish(uv_prepare_t *handle) {
  worker_t *w = handle->data;
  http_server_stats_t stats;
  http_server_stats(w->server, &stats);
  uv_mutex_lock(&w->lock);
  w->published = stats;
  uv_mutex_unlock(&w->lock);
}

static void on_wakeup(uv_async_t *handle) {
  worker_t *w = handle->data;
  enum command command;
  uv_mutex_lock(&w->lock);
  command = w->command;
  uv_mutex_unlock(&w->lock);
  if (command == CMD_DROP)
    http_server_shutdown_now(w->server);
  else if (command == CMD_DRAIN)
    http_server_shutdown(w->server);
}

/* The worker's thread: its server, on its loop, until the server has shut
 * down. The wakeup and publish handles do not keep the loop alive; a lone
 * worker answers /stats from its own server and publishes nothing. */
static void worker_main(void *arg) {
  worker_t *w = arg;
  int others = w->all->count > 1;
  w->start_status = http_server_start(&w->server, &w->loop, &w->config, w->all->wheel_options);
  uv_sem_post(&w->all->started);
  if (w->server != NULL) {
    if (others)
      uv_prepare_start(&w->publish, on_publish);
    uv_run(&w->loop, UV_RUN_DEFAULT);
    if (others)
      on_publish(&w->publish); /* the final stats */
  }
  uv_mutex_lock(&w->lock);
  w->finished = 1;
  uv_async_send(&w->all->finished); /* under the lock: see on_worker_finished */
  uv_mutex_unlock(&w->lock);
  uv_close((uv_handle_t *)&w->wakeup, NULL);
  uv_close((uv_handle_t *)&w->publish, NULL);
  uv_run(&w->loop, UV_RUN_DEFAULT);
}

/* Sets up the worker's loop and handles on the main thread, before its
 * thread starts: the main thread may post to it from then on. */
static int worker_init(workers_t *all, worker_t *w, const http_server_config_t *config, int fd) {
  int r;
  w->all = all;
  w->config = *config;
  w->config.listen_fd = fd;
  w->config.gather = gather;
  w->config.stats_arg = w;
  w->config.fd_burst_end = &all->fd_burst_end;
  r = uv_loop_init(&w->loop);
  if (r != 0)
    return r;
  uv_mutex_init(&w->lock);
  uv_async_init(&w->loop, &w->wakeup, on_wakeup);
  uv_prepare_init(&w->loop, &w->publish);
  w->wakeup.data = w;
  w->publish.data = w;
  uv_unref((uv_handle_t *)&w->wakeup);
  uv_unref((uv_handle_t *)&w->publish);
  return 0;
}

/* ---- The main thread ----------------------------------------------------------------- */

/* Posts `command` to every worker whose loop still runs. */
static void post_all(workers_t *all, enum command command) {
  unsigned i;
  for (i = 0; i < all->count; i++) {
    worker_t *w = &all->worker[i];
    uv_mutex_lock(&w->lock);
    if (!w->finished && command > w->command) {
      w->command = command;
      uv_async_send(&w->wakeup);
    }
    uv_mutex_unlock(&w->lock);
  }
}

/* A worker sends this under its lock after setting `finished`, so once every
 * flag is seen set here no send is still to come and the handle may close. */
static void on_worker_finished(uv_async_t *handle) {
  workers_t *all = handle->data;
  unsigned i, done = 0;
  if (uv_is_closing((uv_handle_t *)handle))
    return;
  for (i = 0; i < all->count; i++) {
    uv_mutex_lock(&all->worker[i].lock);
    done += (unsigned)all->worker[i].finished;
    uv_mutex_unlock(&all->worker[i].lock);
  }
  if (done < all->count)
    return;
  all->drain_ended_ns = uv_hrtime();
  uv_close((uv_handle_t *)&all->finished, NULL);
  uv_close((uv_handle_t *)&all->sigint, NULL);
  uv_close((uv_handle_t *)&all->sigterm, NULL);
}

/* First signal: every worker drains. Second: they drop what is in flight
 * and the process exits at once, with 128 + the signal. */
static void on_signal(uv_signal_t *handle, int signum) {
  workers_t *all = handle->data;
  if (all->signals++ == 0) {
    all->drain_started_ns = uv_hrtime();
    post_all(all, CMD_DRAIN);
  } else {
    fprintf(stderr, "http_server: second signal: exiting at once\n");
    all->exit_status = 128 + signum;
    post_all(all, CMD_DROP);
  }
}

/* The shutdown line and the final stats, summed over the workers, whose
 * threads have ended after publishing their last stats. */
static void print_final(workers_t *all) {
  http_server_stats_t sum, one;
  char line[4096];
  unsigned i, count = 0;
  http_server_stats_t *each = gather(all->worker[0].server, &all->worker[0], &count);
  memset(&sum, 0, sizeof sum);
  for (i = 0; i < all->count; i++) {
    http_server_stats(all->worker[i].server, &one);
    http_server_stats_add(&sum, &one);
  }
  printf("shutdown: answered %" PRIu64 " requests in flight, dropped %" PRIu64
         " connections with a request in flight, after %" PRIu64 " ms\n",
         sum.counters.drain_answered, sum.counters.drain_dropped,
         (all->drain_ended_ns - all->drain_started_ns) / 1000000);
  http_server_format_stats(all->worker[0].server, each, count, 0, line, sizeof line);
  free(each);
  printf("stats %s\n", line);
  fflush(stdout);
}

/* Starts a thread per worker until one cannot start: that worker and the
 * ones after it are marked finished, their sockets closed. Returns how many
 * started (the caller then drains those). */
static unsigned start_threads(workers_t *all) {
  unsigned i, started;
  int r = 0;
  for (started = 0; started < all->count; started++) {
    worker_t *w = &all->worker[started];
    r = uv_thread_create(&w->thread, worker_main, w);
    if (r != 0)
      break;
  }
  if (r == 0)
    return started;
  fprintf(stderr, "http_server: cannot start worker %u: %s\n", started, uv_strerror(r));
  for (i = started; i < all->count; i++) {
    uv_mutex_lock(&all->worker[i].lock);
    all->worker[i].finished = 1;
    uv_mutex_unlock(&all->worker[i].lock);
    close(all->worker[i].config.listen_fd);
  }
  return started;
}

/* Frees what the workers leave once their threads have ended. */
static int workers_free(workers_t *all, unsigned started) {
  int status = 0;
  unsigned i;
  for (i = 0; i < all->count; i++) {
    worker_t *w = &all->worker[i];
    if (i >= started) { /* its thread never ran its loop */
      uv_close((uv_handle_t *)&w->wakeup, NULL);
      uv_close((uv_handle_t *)&w->publish, NULL);
      uv_run(&w->loop, UV_RUN_DEFAULT);
    }
    if (uv_loop_close(&w->loop) != 0) {
      fprintf(stderr, "http_server: worker %u: its loop still has handles open\n", i);
      status = 1;
    }
    if (w->server != NULL && http_server_wheel(w->server) == NULL)
      http_server_free(w->server);
    uv_mutex_destroy(&w->lock);
  }
  free(all->worker);
  return status;
}

int http_workers_run(const http_server_config_t *config, const uvtw_options_t *wheel_options,
                     unsigned count) {
  workers_t all;
  int fds[HTTP_WORKERS_MAX];
  char name[INET6_ADDRSTRLEN + 16];
  unsigned i, started;
  int failed = 0;
  if (count < 1 || count > HTTP_WORKERS_MAX) {
    fprintf(stderr, "http_server: --workers must be 1 to %d\n", HTTP_WORKERS_MAX);
    return 2;
  }
#ifndef SO_REUSEPORT
  if (count > 1) {
    fprintf(stderr,
            "http_server: --workers %u: more than one worker needs SO_REUSEPORT, "
            "which this platform lacks\n",
            count);
    return 2;
  }
#endif
  memset(&all, 0, sizeof all);
  all.count = count;
  all.wheel_options = wheel_options;
  all.loop = uv_default_loop();
  all.worker = calloc(count, sizeof *all.worker);
  if (all.worker == NULL) {
    fprintf(stderr, "http_server: no memory for %u workers\n", count);
    return 1;
  }
  if (bind_sockets(config->host, config->port, count, fds, name, sizeof name) != 0) {
    free(all.worker);
    return 1;
  }
  for (i = 0; i < count; i++) {
    int r = worker_init(&all, &all.worker[i], config, fds[i]);
    if (r != 0) {
      fprintf(stderr, "http_server: worker %u: uv_loop_init: %s\n", i, uv_strerror(r));
      exit(1); /* no thread runs yet */
    }
  }
  uv_sem_init(&all.started, 0);
  uv_async_init(all.loop, &all.finished, on_worker_finished);
  all.finished.data = &all;
  uv_signal_init(all.loop, &all.sigint);
  uv_signal_init(all.loop, &all.sigterm);
  all.sigint.data = all.sigterm.data = &all;
  uv_signal_start(&all.sigint, on_signal, SIGINT);
  uv_signal_start(&all.sigterm, on_signal, SIGTERM);
  started = start_threads(&all);
  failed = started < count;
  for (i = 0; i < started; i++)
    uv_sem_wait(&all.started);
  for (i = 0; i < started; i++)
    failed |= all.worker[i].start_status != 0;
  if (failed) {
    all.signals = 1; /* a signal now drops what is in flight */
    all.drain_started_ns = uv_hrtime();
    post_all(&all, CMD_DRAIN);
    on_worker_finished(&all.finished); /* in case no worker started */
  } else {
    printf("listening on %s\n", name);
    fflush(stdout);
  }
  uv_run(all.loop, UV_RUN_DEFAULT);
  for (i = 0; i < started; i++)
    uv_thread_join(&all.worker[i].thread);
  if (!failed)
    print_final(&all);
  uv_sem_destroy(&all.started);
  if (workers_free(&all, started) != 0 || uv_loop_close(all.loop) != 0)
    return 1;
  return failed ? 1 : all.exit_status;
}
