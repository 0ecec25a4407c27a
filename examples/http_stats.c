/* http_stats: the example server's statistics (see http_server.h): GET
 * /stats, key=value pairs; GET /metrics, the Prometheus text exposition
 * format (examples/README.md); and the sum over servers (workers).
 *
 * Every field is in one table below, with its /stats key and how the values
 * of several servers combine. The static assertions make the tables cover
 * their structs word for word: a counter added to http_server_counters_t,
 * or taken from uvtw_stats_t's reserved words, fails the build until it has
 * its line here, so that it cannot be dropped from the sum or from /stats.
 *
 * In /metrics the wheel's lateness histogram is a Prometheus histogram as
 * it stands: its buckets (uvtw_late_bucket_max, in ms) become the `le`
 * bounds in seconds, counted cumulatively, with late_total_ms as the _sum. */
#include "http_server_impl.h" /* first: uvtw.h asks for the POSIX uv.h needs */

#include <dirent.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
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
    C_AS("closed_read_ahead", closed[CLOSE_READ_AHEAD]),
    C_AS("closed_client_gone", closed[CLOSE_CLIENT_GONE]),
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

static uint64_t value_at(const void *base, size_t offset) {
  return *(const uint64_t *)((const char *)base + offset);
}

static void add_fields(const field_t *fields, size_t count, void *sum, const void *more) {
  for (size_t i = 0; i < count; i++) {
    uint64_t *to = word(sum, fields[i].offset), from = value_at(more, fields[i].offset);
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

/* The process's resident memory in bytes (Linux's /proc), or -1. */
static long long rss_bytes(void) {
  long long pages = 0, resident = -1;
  FILE *f = fopen("/proc/self/statm", "r");
  if (f == NULL)
    return -1;
  if (fscanf(f, "%lld %lld", &pages, &resident) != 2)
    resident = -1;
  fclose(f);
  return resident < 0 ? -1 : resident * sysconf(_SC_PAGESIZE);
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

/* Appends to the line as snprintf does; once it is full, len >= size. */
static void put(line_t *l, const char *format, ...) {
  va_list args;
  int n;
  if (l->len >= l->size)
    return;
  va_start(args, format);
  n = vsnprintf(l->out + l->len, l->size - l->len, format, args);
  va_end(args);
  if (n > 0)
    l->len += (size_t)n;
}

static void put_fields(line_t *l, const char *sep, const field_t *fields, size_t count,
                       const void *base) {
  for (size_t i = 0; i < count; i++)
    if (fields[i].key != NULL)
      put(l, "%s%s=%" PRIu64, sep, fields[i].key, value_at(base, fields[i].offset));
}

/* A group's heading, on a page of one key=value a line. */
static void heading(line_t *l, int lines, const char *title) {
  if (lines)
    put(l, "%s# %s", l->len > 0 ? "\n" : "", title);
}

size_t http_server_format_stats(const http_server_t *s, const http_server_stats_t *each,
                                unsigned count, int lines, char *out, size_t size) {
  const http_server_config_t *config = &s->config;
  const char *sep = lines ? "\n" : " ";
  http_server_stats_t sum;
  const uvtw_stats_t *ws = &sum.wheel, *end = &sum.second_end, *start = &sum.second_start;
  line_t l = {out, size, 0};
  char q[5][24];
  if (each == NULL) {
    http_server_stats(s, &sum);
  } else {
    memset(&sum, 0, sizeof sum);
    for (unsigned i = 0; i < count; i++)
      http_server_stats_add(&sum, &each[i]);
  }
  heading(&l, lines, "configuration");
  put(&l, "%stimers=%s%sparser=llhttp-%d.%d.%d", lines ? "\n" : "", http_timer_name, sep,
      LLHTTP_VERSION_MAJOR, LLHTTP_VERSION_MINOR, LLHTTP_VERSION_PATCH);
  put(&l,
      "%sheaders_timeout_ms=%" PRIu64 "%srequest_timeout_ms=%" PRIu64
      "%skeep_alive_timeout_ms=%" PRIu64 "%skeep_alive_timeout_buffer_ms=%" PRIu64
      "%ssend_timeout_ms=%" PRIu64 "%smax_loop_delay_ms=%" PRIu64 "%sretry_after_s=%" PRIu64,
      sep, config->headers_timeout, sep, config->request_timeout, sep, config->keep_alive_timeout,
      sep, config->keep_alive_timeout_buffer, sep, config->send_timeout, sep,
      config->max_loop_delay, sep, config->retry_after);
  heading(&l, lines, "connections, requests, closes, timeouts, /delay (counters)");
  put_fields(&l, sep, counter_fields, LENGTH(counter_fields), &sum.counters);
  heading(&l, lines, "memory");
  put(&l, "%sconn_bytes=%zu%stimer_bytes=%zu%srss_kib=%lld", sep, sizeof(conn_t), sep,
      sizeof(http_timer_t), sep, rss_bytes() < 0 ? -1 : rss_bytes() / 1024);
  heading(&l, lines, "the wheel");
  put_fields(&l, sep, wheel_fields, LENGTH(wheel_fields), ws);
  heading(&l, lines, "lateness: the last second, then since the start");
  put(&l,
      "%swheel_late_1s_p50_ms=%s%swheel_late_1s_p99_ms=%s%swheel_late_1s_max_ms=%s"
      "%swheel_late_p50_ms=%s%swheel_late_p99_ms=%s",
      sep, late_quantile(end, start, 0.5, q[0], sizeof q[0]), sep,
      late_quantile(end, start, 0.99, q[1], sizeof q[1]), sep,
      late_quantile(end, start, 1, q[2], sizeof q[2]), sep,
      late_quantile(ws, NULL, 0.5, q[3], sizeof q[3]), sep,
      late_quantile(ws, NULL, 0.99, q[4], sizeof q[4]));
  if (each != NULL) {
    heading(&l, lines, "workers");
    put(&l, "%sworkers=%u%sworker_accepted=", sep, count, sep);
  }
  for (unsigned i = 0; each != NULL && i < count; i++)
    put(&l, i == 0 ? "%" PRIu64 : ",%" PRIu64, each[i].counters.accepted);
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

/* ---- GET /metrics ---------------------------------------------------------- */

static void head(line_t *p, const char *name, const char *type, const char *help) {
  put(p, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One series: `name`, its labels (worker="i" when there are several
 * workers, then `label` if not NULL), a value. */
static void series(line_t *p, const char *name, unsigned count, unsigned worker, const char *label,
                   const char *value) {
  char w[32] = "";
  if (count > 1)
    snprintf(w, sizeof w, "worker=\"%u\"", worker);
  if (w[0] == '\0' && label == NULL)
    put(p, "%s %s\n", name, value);
  else
    put(p, "%s{%s%s%s} %s\n", name, w, w[0] != '\0' && label != NULL ? "," : "",
        label != NULL ? label : "", value);
}

static const char *number(char *out, size_t size, uint64_t value) {
  snprintf(out, size, "%" PRIu64, value);
  return out;
}

/* `ms` in seconds, as short as it is exact: 0, 0.001, 1.25. */
static const char *seconds(char *out, size_t size, uint64_t ms) {
  int n = snprintf(out, size, "%" PRIu64 ".%03u", ms / 1000, (unsigned)(ms % 1000));
  while (n > 0 && out[n - 1] == '0')
    out[--n] = '\0';
  if (n > 0 && out[n - 1] == '.')
    out[--n] = '\0';
  return out;
}

static void lateness(line_t *p, const http_server_stats_t *stats, unsigned count) {
  static const char name[] = "uvtw_timer_lateness_seconds";
  char value[32], le[48];
  head(p, name, "histogram",
       "How late the wheel ran its callbacks: its clock at the callback minus the deadline.");
  for (unsigned w = 0; w < count; w++) {
    const uvtw_stats_t *s = &stats[w].wheel;
    uint64_t below = 0;
    for (unsigned i = 0; i + 1 < UVTW_LATE_BUCKETS; i++) { /* the last bucket is open: +Inf */
      below += s->late[i];
      snprintf(le, sizeof le, "le=\"%s\"", seconds(value, sizeof value, uvtw_late_bucket_max(i)));
      series(p, "uvtw_timer_lateness_seconds_bucket", count, w, le,
             number(value, sizeof value, below));
    }
    below += s->late[UVTW_LATE_BUCKETS - 1];
    series(p, "uvtw_timer_lateness_seconds_bucket", count, w, "le=\"+Inf\"",
           number(value, sizeof value, below));
    series(p, "uvtw_timer_lateness_seconds_sum", count, w, NULL,
           seconds(value, sizeof value, s->late_total_ms));
    series(p, "uvtw_timer_lateness_seconds_count", count, w, NULL,
           number(value, sizeof value, below));
  }
}

#define FIELD(member) offsetof(http_server_stats_t, member)

/* The families with one series per worker, read at `offset` in its stats. */
static const struct {
  const char *name, *type, *help;
  size_t offset;
} simple[] = {
    {"uvtw_timers_started_total", "counter",
     "Timer starts, arming again() calls, repeat re-arms and tasks taken in by the wheel.",
     FIELD(wheel.started)},
    {"uvtw_timers_stopped_total", "counter", "Stops of active timers and won task cancels.",
     FIELD(wheel.stopped)},
    {"uvtw_timers_fired_total", "counter", "Timer and task callbacks run with status 0.",
     FIELD(wheel.fired)},
    {"uvtw_timers_active", "gauge", "Armed timers and tasks taken in, not yet run or cancelled.",
     FIELD(wheel.active)},
    {"uvtw_wheel_wakeups_total", "counter", "Times the wheel's uv_timer_t fired.",
     FIELD(wheel.wakeups)},
    {"uvtw_wheel_wasted_wakeups_total", "counter",
     "Wakeups of the wheel's uv_timer_t that ran no callback.", FIELD(wheel.wasted_wakeups)},
    {"uvtw_wheel_remote_batches_total", "counter",
     "Times the wheel's uv_async_t took in tasks from other threads.", FIELD(wheel.remote_batches)},
    {"http_server_open_connections", "gauge", "Connections open.", FIELD(counters.open)},
    {"http_server_accepted_connections_total", "counter", "Connections accepted.",
     FIELD(counters.accepted)},
    {"http_server_fd_exhausted_total", "counter",
     "Times accepting paused because the process had no descriptor left.",
     FIELD(counters.fd_exhausted)},
    {"http_server_shed_requests_total", "counter",
     "Requests answered 503 because the loop lagged (--max-loop-delay).", FIELD(counters.shed)},
    {"http_server_shedding", "gauge", "1 while the server sheds load.", FIELD(counters.shedding)},
};

static void server(line_t *p, const http_server_stats_t *stats, unsigned count) {
  static const char *const kinds[] = {"headers", "request", "keep_alive", "send", "linger"};
  char value[32], label[48];
  for (size_t f = 0; f < sizeof simple / sizeof simple[0]; f++) {
    head(p, simple[f].name, simple[f].type, simple[f].help);
    for (unsigned w = 0; w < count; w++)
      series(p, simple[f].name, count, w, NULL,
             number(value, sizeof value, value_at(&stats[w], simple[f].offset)));
  }
  head(p, "http_server_responses_total", "counter", "Responses sent, by status class.");
  for (unsigned w = 0; w < count; w++)
    for (unsigned k = 0; k < 5; k++) {
      snprintf(label, sizeof label, "class=\"%uxx\"", k + 1);
      series(p, "http_server_responses_total", count, w, label,
             number(value, sizeof value, stats[w].counters.responses[k]));
    }
  head(p, "http_server_timeouts_total", "counter",
       "Connection timeouts that fired, by kind (headers, request, keep-alive, send, linger).");
  for (unsigned w = 0; w < count; w++) {
    const http_server_counters_t *c = &stats[w].counters;
    const uint64_t fired[] = {c->headers_timeouts, c->request_timeouts,
                              c->closed[CLOSE_KEEPALIVE_TIMEOUT], c->closed[CLOSE_SEND_TIMEOUT],
                              c->linger_timeouts};
    for (unsigned k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
      snprintf(label, sizeof label, "kind=\"%s\"", kinds[k]);
      series(p, "http_server_timeouts_total", count, w, label,
             number(value, sizeof value, fired[k]));
    }
  }
}

/* The process's resident memory and open descriptors, from /proc (Linux). */
static void process(line_t *p) {
  char value[32];
  long long rss = rss_bytes();
  if (rss >= 0) {
    head(p, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.");
    series(p, "process_resident_memory_bytes", 1, 0, NULL,
           number(value, sizeof value, (uint64_t)rss));
  }
  DIR *dir = opendir("/proc/self/fd");
  if (dir != NULL) {
    uint64_t fds = 0;
    struct dirent *entry;
    while ((entry = readdir(dir)) != NULL)
      fds += entry->d_name[0] != '.';
    closedir(dir);
    head(p, "process_open_fds", "gauge", "Number of open file descriptors.");
    series(p, "process_open_fds", 1, 0, NULL, number(value, sizeof value, fds - 1)); /* dir's own */
  }
}

char *http_metrics_format(const http_server_stats_t *stats, unsigned count, size_t *len) {
  line_t p = {NULL, 16384 + (size_t)count * 16384, SIZE_MAX};
  for (; p.len >= p.size; p.size *= 2) { /* another round, larger, if this one did not fit */
    free(p.out);
    p.out = malloc(p.size);
    if (p.out == NULL)
      return NULL;
    p.len = 0;
    lateness(&p, stats, count);
    server(&p, stats, count);
    process(&p);
  }
  *len = p.len;
  return p.out;
}
