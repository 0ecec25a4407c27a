/* demo: the crowd of examples/README.md against each server named, one
 * after the other, and what the timeouts did to it.
 * usage: demo PATH/TO/http_server [PATH/TO/http_server_uvtimer ...] */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "loadgen.h"

enum {
  GOOD = 100,
  IDLE = 2000,
  SILENT = 1000,
  SLOWLORIS = 200,
  SLOW_BODY = 50,
  ABORT = 50,
  CLIENTS = GOOD + IDLE + SILENT + SLOWLORIS + SLOW_BODY + ABORT
};

#define LOAD_MS 9000

typedef struct demo_s {
  lg_server_t server;
  long rss_base_kib, rss_peak_kib;
  char end_stats[4096];
} demo_t;

static uv_loop_t *loop;

static void on_tick(lg_t *lg) {
  demo_t *d = lg->data;
  long rss = lg_server_rss_kib(&d->server);
  if (rss > d->rss_peak_kib)
    d->rss_peak_kib = rss;
}

/* A kind's row. The client cannot see when the server started a timeout,
 * only two moments around it (the legend under the table), so the first
 * cut is counted from the earlier one and the last cut from the later one:
 * two figures, not a range. */
static void print_kind_row(const lg_t *lg, int kind, const char *expect) {
  const lg_kind_stats_t *ks = &lg->kind[kind];
  char first[16] = "", last[16] = "";
  if (ks->closed_by_server > 0 && kind != LG_GOOD && ks->lower_min_ns != UINT64_MAX) {
    snprintf(first, sizeof first, "%.1f", (double)ks->lower_min_ns / 1e6);
    snprintf(last, sizeof last, "%.1f", (double)ks->upper_max_ns / 1e6);
  }
  printf("  %-16s %7" PRIu64 " %8" PRIu64 " %9" PRIu64 " %9" PRIu64 " %10s %10s  %s\n",
         lg_kind_names[kind], ks->clients, ks->connections, ks->responses, ks->closed_by_server,
         first, last, expect);
}

static int run_one(const char *exe) {
  static const char args[] = "--port 0 --headers-timeout 2000 --request-timeout 4000 "
                             "--keep-alive-timeout 1000 --keep-alive-timeout-buffer 0";
  static const uint32_t count[LG_KINDS] = {
      [LG_GOOD] = GOOD,           [LG_IDLE] = IDLE,           [LG_SILENT] = SILENT,
      [LG_SLOWLORIS] = SLOWLORIS, [LG_SLOW_BODY] = SLOW_BODY, [LG_DELAY_ABORT] = ABORT};
  demo_t d;
  lg_config_t config;
  lg_t lg, fetch;
  const char *final;
  uint64_t stop_started;
  long long open_peak;
  int uvtw;
  int r;

  memset(&d, 0, sizeof d);
  r = lg_server_start(loop, &d.server, exe, args);
  if (r != 0) {
    fprintf(stderr, "demo: cannot start %s: %s\n", exe, uv_strerror(r));
    return 1;
  }
  d.rss_base_kib = d.rss_peak_kib = lg_server_rss_kib(&d.server);

  memset(&config, 0, sizeof config);
  config.host = d.server.host;
  config.port = d.server.port;
  config.connects_in_flight = 256;
  config.stop_after_ms = LOAD_MS;
  config.think_max_ms = 500;
  config.split_gap_max_ms = 500;
  config.delay_max_ms = 1500;
  config.trickle_ms = 200;
  config.abort_after_ms = 300;
  config.repeat = 1;
  config.seed = 2024;

  printf("== %s on %s:%d: headers 2000 ms, request 4000 ms, keep-alive 1000 ms; "
         "%d clients reconnecting for %d s, then finishing ==\n",
         exe, d.server.host, d.server.port, CLIENTS, LOAD_MS / 1000);
  fflush(stdout);
  lg_init(&lg, loop, &config, count);
  lg.data = &d;
  lg.on_tick = on_tick;
  r = lg_run(&lg, LOAD_MS + 15000);
  printf("load ran %.1f s%s\n\n", lg_elapsed_ms(&lg) / 1000, r != 0 ? " (cut short)" : "");

  lg_init(&fetch, loop, &config, NULL);
  lg_fetch_stats(&fetch, d.end_stats, sizeof d.end_stats);
  lg_run(&fetch, 5000);
  lg_free(&fetch);

  printf("  %-16s %7s %8s %9s %9s %10s %10s  %s\n", "clients", "count", "conns", "answers",
         "cut off", "first cut", "last cut", "expected");
  print_kind_row(&lg, LG_GOOD, "never cut off");
  print_kind_row(&lg, LG_IDLE, "keepAliveTimeout 1000 after the response");
  print_kind_row(&lg, LG_SILENT, "headersTimeout 2000 after connect");
  print_kind_row(&lg, LG_SLOWLORIS, "headersTimeout 2000 after connect");
  print_kind_row(&lg, LG_SLOW_BODY, "requestTimeout 4000 after connect");
  print_kind_row(&lg, LG_DELAY_ABORT, "they hang up: /delay ticket cancelled");
  printf("  (ms on the client's clock. first cut: the shortest time from the client's connect\n"
         "   call (idle: the request sent) to a cut; last cut: the longest from the connection\n"
         "   made (idle: the response read). The server starts each timeout between the two, on\n"
         "   libuv's clock, read once per loop iteration in whole ms, so a cut may come up to\n"
         "   about 1 ms under the timeout here; the server's own clock, below, counts any that\n"
         "   fired early.)\n\n");

  stop_started = uv_hrtime();
  r = lg_server_stop(loop, &d.server, SIGTERM, 10000);
  final = strstr(d.server.out_buf, "stats ");
  if (final == NULL)
    final = d.end_stats;
  uvtw = strstr(final, "timers=uvtw") != NULL;
  open_peak = lg_stat(final, "open_peak");
  printf("server (%s connection timers)\n", uvtw ? "uvtw" : "uv_timer_t");
  printf("  requests %lld; closed by keepAliveTimeout %lld, headersTimeout %lld, "
         "requestTimeout %lld, the client %lld\n",
         lg_stat(final, "requests"), lg_stat(final, "closed_keepalive_timeout"),
         lg_stat(final, "closed_headers_timeout"), lg_stat(final, "closed_request_timeout"),
         lg_stat(final, "closed_by_peer"));
  printf("  /delay tasks from worker threads: scheduled %lld, fired %lld, cancelled %lld\n",
         lg_stat(final, "delay_scheduled"), lg_stat(final, "delay_fired"),
         lg_stat(final, "delay_cancelled"));
  printf("  connection timeouts: %lld fired early; %s at most %lld ms late; "
         "%lld timers pending at peak for %lld connections\n",
         lg_stat(final, "early_fires"), uvtw ? "the wheel's callbacks (/delay too)" : "each",
         lg_stat(final, uvtw ? "wheel_late_max_ms" : "late_max_ms"),
         lg_stat(final, "timers_armed_peak"), open_peak);
  printf("  the wheel: %lld timers started, %lld fired, %lld cascaded, on %lld wakeups of "
         "its one uv_timer_t (%lld wasted)\n",
         lg_stat(final, "wheel_started"), lg_stat(final, "wheel_fired"),
         lg_stat(final, "wheel_cascaded"), lg_stat(final, "wheel_wakeups"),
         lg_stat(final, "wheel_wasted_wakeups"));
  printf("  memory per connection: %lld B struct (3 timers x %lld B)", lg_stat(final, "conn_bytes"),
         lg_stat(final, "timer_bytes"));
  if (open_peak > 0 && d.rss_peak_kib > d.rss_base_kib)
    printf("; RSS %ld -> %ld KiB = %.0f B per open connection", d.rss_base_kib, d.rss_peak_kib,
           (double)(d.rss_peak_kib - d.rss_base_kib) * 1024.0 / (double)open_peak);
  printf("\n  SIGTERM -> exit status %" PRId64 "%s in %.0f ms\n\n", d.server.exit_status,
         d.server.term_signal ? " (killed)" : "", (double)(uv_hrtime() - stop_started) / 1e6);
  printf("raw: %s\n\n", final);
  fflush(stdout);
  lg_free(&lg);
  return r == 0 && lg.kind[LG_GOOD].closed_by_server == 0 ? 0 : 1;
}

int main(int argc, char **argv) {
  int i, failed = 0;
  const char *why;
  if (argc < 2) {
    fprintf(stderr, "usage: %s PATH/TO/http_server [PATH/TO/another_server ...]\n", argv[0]);
    return 2;
  }
  why = lg_raise_fd_limit(CLIENTS + 100);
  if (why != NULL)
    fprintf(stderr, "demo: %s: expect connect errors\n", why);
  loop = uv_default_loop();
  for (i = 1; i < argc; i++)
    failed |= run_one(argv[i]);
  uv_run(loop, UV_RUN_DEFAULT);
  uv_loop_close(loop);
  return failed;
}
