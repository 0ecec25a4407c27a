/* http_stats: summing and formatting the example server's statistics (see
 * http_stats.h, http_server.h).
 *
 * Every field is in one table below, with its /stats key and how the values
 * of several servers combine (most add up; maxima take the largest). The
 * tables must cover their structs word for word (the static assertions):
 * a counter added to http_server_counters_t, or taken from uvtw_stats_t's
 * reserved words, fails the build until it has its line here, so that it
 * cannot be dropped from the sum or from /stats. GET /metrics
 * (http_metrics.c) reads the same structs. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include "http_stats.h"

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

#define COUNTER(key, member, combine)                                                              \
  { key, offsetof(http_server_counters_t, member), combine }

static const field_t counter_fields[] = {
    COUNTER("accepted", accepted, SUM),
    COUNTER("open", open, SUM),
    COUNTER("open_peak", open_peak, SUM), /* a sum of peaks bounds the process's peak */
    COUNTER("accept_errors", accept_errors, SUM),
    COUNTER("accept_nomem", accept_nomem, SUM),
    COUNTER("requests", requests, SUM),
    COUNTER("responses_1xx", responses[0], SUM),
    COUNTER("responses_2xx", responses[1], SUM),
    COUNTER("responses_3xx", responses[2], SUM),
    COUNTER("responses_4xx", responses[3], SUM),
    COUNTER("responses_5xx", responses[4], SUM),
    COUNTER("shed", shed, SUM),
    COUNTER("shedding", shedding, SUM), /* the servers shedding */
    COUNTER("closed_headers_timeout", closed[CLOSE_HEADERS_TIMEOUT], SUM),
    COUNTER("closed_request_timeout", closed[CLOSE_REQUEST_TIMEOUT], SUM),
    COUNTER("closed_keepalive_timeout", closed[CLOSE_KEEPALIVE_TIMEOUT], SUM),
    COUNTER("closed_send_timeout", closed[CLOSE_SEND_TIMEOUT], SUM),
    COUNTER("closed_by_peer", closed[CLOSE_PEER], SUM),
    COUNTER("closed_not_keepalive", closed[CLOSE_NOT_KEEPALIVE], SUM),
    COUNTER("closed_bad_request", closed[CLOSE_BAD_REQUEST], SUM),
    COUNTER("closed_no_memory", closed[CLOSE_NO_MEMORY], SUM),
    COUNTER("closed_shutdown", closed[CLOSE_SHUTDOWN], SUM),
    COUNTER("closed_shed", closed[CLOSE_SHED], SUM),
    COUNTER("received_bytes", received, SUM),
    COUNTER("headers_timeouts", headers_timeouts, SUM),
    COUNTER("request_timeouts", request_timeouts, SUM),
    COUNTER("linger_timeouts", linger_timeouts, SUM),
    COUNTER("drain_answered", drain_answered, SUM),
    COUNTER("drain_dropped", drain_dropped, SUM),
    COUNTER("buffered_bytes", buffered, SUM),
    COUNTER("buffered_bytes_peak", buffered_peak, SUM),
    COUNTER("timers_armed", timers_armed, SUM),
    COUNTER("timers_armed_peak", timers_armed_peak, SUM),
    COUNTER("early_fires", early_fires, SUM),
    COUNTER("late_max_ms", late_max_ms, MAX),
    COUNTER("delay_scheduled", delay_scheduled, SUM),
    COUNTER("delay_fired", delay_fired, SUM),
    COUNTER("delay_cancelled", delay_cancelled, SUM),
    COUNTER("delay_failed", delay_failed, SUM),
    COUNTER("delay_in_flight", delay_in_flight, SUM),
};
_Static_assert(LENGTH(counter_fields) == WORDS(http_server_counters_t),
               "every counter of http_server_counters_t has its line in counter_fields");

#define WHEEL(key, member, combine)                                                                \
  { key, offsetof(uvtw_stats_t, member), combine }

static const field_t wheel_fields[] = {
    WHEEL("wheel_active", active, SUM),
    WHEEL("wheel_started", started, SUM),
    WHEEL("wheel_stopped", stopped, SUM),
    WHEEL("wheel_fired", fired, SUM),
    WHEEL("wheel_cascaded", cascaded, SUM),
    WHEEL("wheel_wakeups", wakeups, SUM),
    WHEEL("wheel_wasted_wakeups", wasted_wakeups, SUM),
    WHEEL("wheel_remote_batches", remote_batches, SUM),
    WHEEL("wheel_late_max_ms", late_max_ms, MAX),
    WHEEL(NULL, late_total_ms, SUM),
};
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

size_t http_stats_format(const http_server_stats_t *stats, const http_server_config_t *config,
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
