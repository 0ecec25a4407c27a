/* http_metrics: GET /metrics for the example server (see http_server.h).
 *
 * The wheel's lateness histogram is a Prometheus histogram as it stands:
 * its buckets (uvtw_late_bucket_max, in ms) become the `le` bounds in
 * seconds, counted cumulatively, with late_total_ms as the _sum. Buckets
 * of several workers add up, so `sum by (le)` of the workers' series is
 * the whole process's histogram, and any quantile is computed at query
 * time (histogram_quantile), unlike quantiles computed in the process,
 * which cannot be summed. The other families are the wheel's counters,
 * the server's requests by status class, open connections, timeouts by
 * kind and shed requests, and the process's memory and descriptors under
 * the names Prometheus's own client libraries use. */
#include "http_server.h" /* first: uvtw.h asks for the POSIX uv.h needs */

#include <dirent.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct page_s {
  char *text;
  size_t len, cap;
  int full; /* a put did not fit */
} page_t;

static void put(page_t *p, const char *format, ...) {
  va_list args;
  int n;
  va_start(args, format);
  n = vsnprintf(p->text + p->len, p->cap - p->len, format, args);
  va_end(args);
  if (n < 0 || (size_t)n >= p->cap - p->len)
    p->full = 1;
  else
    p->len += (size_t)n;
}

static void head(page_t *p, const char *name, const char *type, const char *help) {
  put(p, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One series: `name`, its labels (worker="i" when there are several
 * workers, then `label` if not NULL), a value. */
static void series(page_t *p, const char *name, unsigned count, unsigned worker, const char *label,
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

static void lateness(page_t *p, const http_server_stats_t *stats, unsigned count) {
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

static uint64_t at(const http_server_stats_t *stats, size_t offset) {
  uint64_t value;
  memcpy(&value, (const char *)stats + offset, sizeof value);
  return value;
}

static void server(page_t *p, const http_server_stats_t *stats, unsigned count) {
  static const char *const kinds[] = {"headers", "request", "keep_alive", "send", "linger"};
  char value[32], label[48];
  for (size_t f = 0; f < sizeof simple / sizeof simple[0]; f++) {
    head(p, simple[f].name, simple[f].type, simple[f].help);
    for (unsigned w = 0; w < count; w++)
      series(p, simple[f].name, count, w, NULL,
             number(value, sizeof value, at(&stats[w], simple[f].offset)));
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
static void process(page_t *p) {
  char value[32];
  unsigned long size = 0, resident = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (f != NULL) {
    if (fscanf(f, "%lu %lu", &size, &resident) == 2) {
      head(p, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.");
      series(p, "process_resident_memory_bytes", 1, 0, NULL,
             number(value, sizeof value, (uint64_t)resident * (uint64_t)sysconf(_SC_PAGESIZE)));
    }
    fclose(f);
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
  page_t p = {NULL, 0, 16384 + (size_t)count * 16384, 1};
  while (p.full) {
    free(p.text);
    p.text = malloc(p.cap);
    if (p.text == NULL)
      return NULL;
    p.len = 0;
    p.full = 0;
    lateness(&p, stats, count);
    server(&p, stats, count);
    process(&p);
    p.cap *= 2; /* for another round, if this one did not fit */
  }
  *len = p.len;
  return p.text;
}
