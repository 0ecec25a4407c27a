/* http_stats: the example server's statistics as GET /stats shows them, and
 * summed over servers (workers) for the program (see http_server.h).
 *
 * Every field is in one table below, with its /stats key and how the values
 * of several servers combine (most add up; maxima take the largest). The
 * tables must cover their structs word for word (the static assertions):
 * a counter added to http_server_counters_t, or taken from uvtw_stats_t's
 * reserved words, fails the build until it has its line here, so that it
 * cannot be dropped from the sum or from /stats. GET /metrics
 * (http_metrics.c) reads the same structs. */
#include "http_conn.h" /* first: uvtw.h asks for the POSIX uv.h needs */

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <llhttp.h>

#include "http_timer.h"

#define LENGTH(array) (sizeof(array) / sizeof((array)[0]))
#define WORDS(type) (sizeof(type) / sizeof(uint64_t))

enum combine { SUM, MAX };

typedef struct field_s {
  const char *key; /* in /stats; NULL: summed, not shown */
  size_t offset;
  enum combine combine;
} field_t;

/* A counter shown under its own name, under another, or taken as a maximum.
 * Peaks add up (a sum of peaks bounds the process's peak), and `shedding`
 * counts the servers shedding. */
#define C(member)                                                                                  \
  { #member, offsetof(http_server_counters_t, member), SUM }
#define C_AS(key, member)                                                                          \
  { key, offsetof(http_server_counters_t, member), SUM }
#define C_MAX(member)                                                                              \
  { #member, offsetof(http_server_counters_t, member), MAX }

static const field_t counter_fields[] = {
    C(accepted),
    C(open),
    C(open_peak),
    C(accept_errors),
    C(fd_exhausted),
    C(accept_nomem),
    C(requests),
    C_AS("responses_1xx", responses[0]),
    C_AS("responses_2xx", responses[1]),
    C_AS("responses_3xx", responses[2]),
    C_AS("responses_4xx", responses[3]),
    C_AS("responses_5xx", responses[4]),
    C(shed),
    C(shedding),
    C_AS("closed_headers_timeout", closed[CLOSE_HEADERS_TIMEOUT]),
    C_AS("closed_request_timeout", closed[CLOSE_REQUEST_TIMEOUT]),
    C_AS("closed_keepalive_timeout", closed[CLOSE_KEEPALIVE_TIMEOUT]),
    C_AS("closed_send_timeout", closed[CLOSE_SEND_TIMEOUT]),
    C_AS("closed_by_peer", closed[CLOSE_PEER]),
    C_AS("closed_not_keepalive", closed[CLOSE_NOT_KEEPALIVE]),
    C_AS("closed_bad_request", closed[CLOSE_BAD_REQUEST]),
    C_AS("closed_no_memory", closed[CLOSE_NO_MEMORY]),
    C_AS("closed_shutdown", closed[CLOSE_SHUTDOWN]),
    C_AS("closed_shed", closed[CLOSE_SHED]),
    C_AS("closed_unavailable", closed[CLOSE_UNAVAILABLE]),
    C_AS("closed_slow_reader", closed[CLOSE_SLOW_READER]),
    C_AS("received_bytes", received),
    C(headers_timeouts),
    C(request_timeouts),
    C(linger_timeouts),
    C(drain_answered),
    C(drain_dropped),
    C_AS("buffered_bytes", buffered),
    C_AS("buffered_bytes_peak", buffered_peak),
    C(timers_armed),
    C(timers_armed_peak),
    C(early_fires),
    C_MAX(late_max_ms),
    C(delay_scheduled),
    C(delay_fired),
    C(delay_cancelled),
    C(delay_failed),
    C(delay_in_flight)};
_Static_assert(LENGTH(counter_fields) == WORDS(http_server_counters_t),
               "every counter of http_server_counters_t has its line in counter_fields");

#define W(member)                                                                                  \
  { "wheel_" #member, offsetof(uvtw_stats_t, member), SUM }

static const field_t wheel_fields[] = {
    W(active),
    W(started),
    W(stopped),
    W(fired),
    W(cascaded),
    W(wakeups),
    W(wasted_wakeups),
    W(remote_batches),
    {"wheel_late_max_ms", offsetof(uvtw_stats_t, late_max_ms), MAX},
    {NULL, offsetof(uvtw_stats_t, late_total_ms), SUM}};
/* The histogram's buckets add up one by one; the reserved words are 0. */
_Static_assert(LENGTH(wheel_fields) + UVTW_LATE_BUCKETS + LENGTH(((uvtw_stats_t *)0)->reserved) ==
                   WORDS(uvtw_stats_t),
               "every counter of uvtw_stats_t has its line in wheel_fields");

static uint64_t *word(void *base, size_t offset) {
  return (uint64_t *)((char *)base + offset);
}

static uint64_t value(const void *base, size_t offset) {
  return *(const uint64_t *)((const char *)base + offset);
}

static void add_fields(const field_t *fields, size_t count, void *sum, const void *more) {
  for (size_t i = 0; i < count; i++) {
    uint64_t *to = word(sum, fields[i].offset), from = value(more, fields[i].offset);
    if (fields[i].combine == SUM)
      *to += from;
    else if (from > *to)
      *to = from;
  }
}

static void wheel_add(uvtw_stats_t *sum, const uvtw_stats_t *more) {
  add_fields(wheel_fields, LENGTH(wheel_fields), sum, more);
  for (int i = 0; i < UVTW_LATE_BUCKETS; i++)
    sum->late[i] += more->late[i];
}

void http_server_stats_add(http_server_stats_t *sum, const http_server_stats_t *more) {
  add_fields(counter_fields, LENGTH(counter_fields), &sum->counters, &more->counters);
  wheel_add(&sum->wheel, &more->wheel);
  wheel_add(&sum->second_start, &more->second_start);
  wheel_add(&sum->second_end, &more->second_end);
}

static long rss_kib(void) {
  long pages = 0, resident = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (f == NULL)
    return -1;
  if (fscanf(f, "%ld %ld", &pages, &resident) != 2)
    resident = -1;
  fclose(f);
  return resident < 0 ? -1 : resident * (sysconf(_SC_PAGESIZE) / 1024);
}

/* A lateness quantile for /stats: the bucket's upper bound in ms, or "-"
 * when no callback ran in the window. */
static const char *late_quantile(const uvtw_stats_t *now, const uvtw_stats_t *since, double q,
                                 char *out, size_t size) {
  int64_t ms = uvtw_stats_late_quantile(now, since, q);
  if (ms < 0)
    return "-";
  snprintf(out, size, "%" PRId64, ms);
  return out;
}

typedef struct line_s {
  char *out;
  size_t size, len;
} line_t;

static void put(line_t *l, const char *format, ...) {
  va_list args;
  int n;
  va_start(args, format);
  n = vsnprintf(l->out + l->len, l->len < l->size ? l->size - l->len : 0, format, args);
  va_end(args);
  if (n > 0)
    l->len += (size_t)n;
}

static void put_fields(line_t *l, const field_t *fields, size_t count, const void *base) {
  for (size_t i = 0; i < count; i++)
    if (fields[i].key != NULL)
      put(l, " %s=%" PRIu64, fields[i].key, value(base, fields[i].offset));
}

static size_t stats_format(const http_server_stats_t *stats, const http_server_config_t *config,
                           size_t conn_bytes, size_t timer_bytes, char *out, size_t size) {
  const uvtw_stats_t *ws = &stats->wheel, *end = &stats->second_end, *start = &stats->second_start;
  line_t l = {out, size, 0};
  char q[5][24];
  put(&l, "timers=%s parser=llhttp-%d.%d.%d", http_timer_name, LLHTTP_VERSION_MAJOR,
      LLHTTP_VERSION_MINOR, LLHTTP_VERSION_PATCH);
  put(&l,
      " headers_timeout_ms=%" PRIu64 " request_timeout_ms=%" PRIu64
      " keep_alive_timeout_ms=%" PRIu64 " keep_alive_timeout_buffer_ms=%" PRIu64
      " send_timeout_ms=%" PRIu64 " max_loop_delay_ms=%" PRIu64 " retry_after_s=%" PRIu64,
      config->headers_timeout, config->request_timeout, config->keep_alive_timeout,
      config->keep_alive_timeout_buffer, config->send_timeout, config->max_loop_delay,
      config->retry_after);
  put_fields(&l, counter_fields, LENGTH(counter_fields), &stats->counters);
  put(&l, " conn_bytes=%zu timer_bytes=%zu rss_kib=%ld", conn_bytes, timer_bytes, rss_kib());
  put_fields(&l, wheel_fields, LENGTH(wheel_fields), ws);
  put(&l,
      " wheel_late_1s_p50_ms=%s wheel_late_1s_p99_ms=%s wheel_late_1s_max_ms=%s"
      " wheel_late_p50_ms=%s wheel_late_p99_ms=%s",
      late_quantile(end, start, 0.5, q[0], sizeof q[0]),
      late_quantile(end, start, 0.99, q[1], sizeof q[1]),
      late_quantile(end, start, 1, q[2], sizeof q[2]),
      late_quantile(ws, NULL, 0.5, q[3], sizeof q[3]),
      late_quantile(ws, NULL, 0.99, q[4], sizeof q[4]));
  return l.len < size ? l.len : size - 1;
}

void http_server_stats(const http_server_t *s, http_server_stats_t *stats) {
  stats->counters = s->counters;
  if (s->wheel != NULL)
    uvtw_wheel_stats(s->wheel, &stats->wheel);
  else
    stats->wheel = s->wheel_final;
  stats->second_start = s->watch.second_start;
  stats->second_end = s->watch.second_end;
}

size_t http_server_format_stats(const http_server_t *s, const http_server_stats_t *stats, char *out,
                                size_t size) {
  http_server_stats_t own;
  if (stats == NULL) {
    http_server_stats(s, &own);
    stats = &own;
  }
  return stats_format(stats, &s->config, conn_bytes(), http_timer_size, out, size);
}
