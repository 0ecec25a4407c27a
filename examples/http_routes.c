/* http_routes: the example server's routes (the list: --help). /spin and
 * /bytes answer only with config.bench_routes: neither belongs on a server
 * facing the internet. While the loop lags (max_loop_delay) a new request
 * gets 503, except /stats and /metrics, which show the lag. */
#include "http_routes.h" /* first: uvtw.h asks for the POSIX uv.h needs */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DELAY_MAX 3600000       /* the longest /delay?ms=N, in ms */
#define SPIN_MAX 10000          /* the longest /spin?ms=N, in ms */
#define BYTES_MAX (1024 * 1024) /* the largest /bytes?n=N answer */

static const char not_found[] = "not found\n";

/* A new request while the loop lags: 503, and the connection closes, so
 * that the client retries later or elsewhere, as under-pressure answers. */
static void shed(conn_t *c) {
  static const char body[] = "loop delay over the limit\n";
  char retry[48];
  snprintf(retry, sizeof retry, "Retry-After: %" PRIu64 "\r\n", c->server->config.retry_after);
  c->server->counters.shed++;
  c->close_reason = CLOSE_SHED;
  conn_respond_with(c, 503, "Service Unavailable", "text/plain", retry, body, sizeof body - 1, 1);
}

/* A CPU-bound handler: blocks the loop for ms, then answers. The loop's
 * clock is updated after it, so that the answer's timeouts count from the
 * real time; the callbacks that fell due meanwhile run late, and the wheel
 * counts how late. */
static void spin(conn_t *c, uint64_t ms) {
  char body[64];
  int n = snprintf(body, sizeof body, "spun %" PRIu64 " ms\n", ms);
  uv_sleep((unsigned)ms);
  uv_update_time(c->server->loop);
  conn_respond(c, 200, "OK", body, (size_t)n, 0);
}

static char filler[BYTES_MAX]; /* the body of /bytes: set once, then read only */

static void filler_setup(void) {
  memset(filler, 'x', sizeof filler);
}

static void bytes(conn_t *c, uint64_t n) {
  static uv_once_t filler_once = UV_ONCE_INIT;
  uv_once(&filler_once, filler_setup);
  conn_respond(c, 200, "OK", filler, (size_t)n, 0);
}

static void stats(conn_t *c) {
  http_server_t *s = c->server;
  unsigned count = 0;
  http_server_stats_t *each =
      s->config.gather != NULL ? s->config.gather(s, s->config.stats_arg, &count) : NULL;
  char body[4096];
  size_t n = http_server_format_stats(s, each, count, 1, body, sizeof body - 1);
  free(each);
  body[n++] = '\n';
  conn_respond(c, 200, "OK", body, n, 0);
}

/* The Prometheus page (http_stats.c) of this server, or of every server
 * the config's hook gathers. */
static void metrics(conn_t *c) {
  static const char no_memory[] = "no memory\n";
  http_server_t *s = c->server;
  http_server_stats_t own, *each = &own;
  unsigned count = 1;
  size_t len = 0;
  char *page;
  if (s->config.gather != NULL)
    each = s->config.gather(s, s->config.stats_arg, &count);
  else
    http_server_stats(s, &own);
  page = each != NULL ? http_metrics_format(each, count, &len) : NULL;
  if (each != &own)
    free(each);
  if (page == NULL) {
    conn_respond(c, 503, "Service Unavailable", no_memory, sizeof no_memory - 1, 0);
    return;
  }
  conn_respond_with(c, 200, "OK", HTTP_METRICS_TYPE, "", page, len, 0);
  free(page);
}

/* The rest of `url` after `prefix` (a string literal), or NULL. */
#define AFTER(url, prefix)                                                                         \
  (strncmp(url, prefix, sizeof prefix - 1) == 0 ? (url) + sizeof prefix - 1 : NULL)

/* A number up to `max` in *n, or a 400 answer. */
static int parse_number(conn_t *c, const char *digits, uint64_t max, uint64_t *n) {
  static const char bad[] = "bad number\n";
  char *end;
  unsigned long long v = strtoull(digits, &end, 10);
  if (end == digits || *end != '\0' || digits[0] == '-' || v > max) {
    conn_respond(c, 400, "Bad Request", bad, sizeof bad - 1, 0);
    return 0;
  }
  *n = v;
  return 1;
}

void routes_handle(conn_t *c) {
  static const char hello[] = "hello\n";
  const http_request_t *r = &c->request;
  const char *url = r->url;
  int get = r->method == HTTP_GET || r->method == HTTP_HEAD;
  int bench = c->server->config.bench_routes;
  const char *arg;
  uint64_t n;
  if (c->shed && !(get && (strcmp(url, "/stats") == 0 || strcmp(url, "/metrics") == 0)))
    shed(c);
  else if (r->method == HTTP_CONNECT)
    conn_fail(c, 405); /* not a proxy: an answer and a clean close */
  else if (r->url_flags & HTTP_URL_TRUNCATED)
    conn_respond(c, 404, "Not Found", not_found, sizeof not_found - 1, 0);
  else if (get && strcmp(url, "/") == 0)
    conn_respond(c, 200, "OK", hello, sizeof hello - 1, 0);
  else if (get && (arg = AFTER(url, "/delay?ms=")) != NULL) {
    if (parse_number(c, arg, DELAY_MAX, &n))
      delay_start(c, n);
  } else if (get && bench && (arg = AFTER(url, "/spin?ms=")) != NULL) {
    if (parse_number(c, arg, SPIN_MAX, &n))
      spin(c, n);
  } else if (get && bench && (arg = AFTER(url, "/bytes?n=")) != NULL) {
    if (parse_number(c, arg, BYTES_MAX, &n))
      bytes(c, n);
  } else if (get && strcmp(url, "/stats") == 0)
    stats(c);
  else if (get && strcmp(url, "/metrics") == 0)
    metrics(c);
  else if (r->method == HTTP_POST && strcmp(url, "/upload") == 0) {
    char body[64];
    int len = snprintf(body, sizeof body, "received %" PRIu32 " bytes\n", r->body_bytes);
    conn_respond(c, 200, "OK", body, (size_t)len, 0);
  } else
    conn_respond(c, 404, "Not Found", not_found, sizeof not_found - 1, 0);
}
