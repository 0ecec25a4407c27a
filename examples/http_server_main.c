/* http_server: the example server's command line. The server itself is
 * http_server.c (see http_server.h); this file parses the options into its
 * configuration and runs it on --workers loops, one per thread, each with a
 * wheel on its loop's clock (http_workers.c), until a signal has shut them
 * down. */
#include "http_workers.h" /* first: uvtw.h asks for the POSIX uv.h needs */

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

/* In parts: a C string literal may be longer than compilers must support. */
static const char *const usage_text[] = {
    "usage: http_server [options]\n"
    "  --host ADDR                 listen address (default 127.0.0.1)\n"
    "  --port N                    0 picks a free port (default 0); prints 'listening on "
    "HOST:PORT'\n"
    "  --workers N                 N threads (default 1, at most 64), each with its own loop,\n"
    "                              wheel and socket on the port (SO_REUSEPORT: the kernel spreads\n"
    "                              connections over them); a connection stays on one worker\n"
    "  --headers-timeout MS        Node's headersTimeout (default 60000): the request head\n"
    "  --request-timeout MS        Node's requestTimeout (default 300000): the whole request\n"
    "  --keep-alive-timeout MS     Node's keepAliveTimeout (default 5000): idle between requests;\n"
    "                              responses advertise 'Keep-Alive: timeout=floor(MS/1000)'\n"
    "  --keep-alive-timeout-buffer MS  Node's keepAliveTimeoutBuffer (default 1000): an idle\n"
    "                              connection closes this much after keepAliveTimeout, so that\n"
    "                              a client that waits the advertised time never races the close\n"
    "  --send-timeout MS           a queued response must be taken by the client within MS\n"
    "                              (default 30000); then the connection closes\n"
    "  --max-header-size BYTES     Node's --max-http-header-size (default 16384): 431 beyond;\n"
    "                              a chunked body's extensions and trailers count too (413)\n"
    "  --max-headers-count N       Node's maxHeadersCount (default 2000): 431 beyond\n"
    "  --max-body-size BYTES       413 beyond, 417 to 'Expect: 100-continue' (default 1048576)\n"
    "  --max-conn-buffered BYTES   answers a client may leave unread (default 2097152); beyond,\n"
    "                              it is cut (closed_slow_reader)\n"
    "  --max-buffered BYTES        bytes the server holds for all clients (default 67108864):\n"
    "                              answers unread and requests pipelined (64 KiB a client, a\n"
    "                              quarter of BYTES in all); beyond, the client holding the most\n"
    "                              is cut (closed_slow_reader, closed_read_ahead)\n"
    "  --allow-half-open           a client that half-closes (EOF) still gets every answer it\n"
    "                              asked for, bounded by the timeouts above; without it (as\n"
    "                              nginx and Node), its EOF ends a pending request: its work is\n"
    "                              cancelled and the connection closed, no byte written\n"
    "                              (closed_client_gone); an answer already queued is sent\n"
    "  --shutdown-grace MS         after SIGTERM/SIGINT, time left to in-flight requests\n"
    "                              (default 10000)\n"
    "  --max-loop-delay MS         shed load when the loop lags (default 0: off): once a second\n"
    "                              each worker compares the p99 lateness of its wheel's callbacks\n"
    "                              in the last second with MS; above it, new requests (all but\n"
    "                              /stats) get 503 with Retry-After and Connection: close until a\n"
    "                              second is back under it (@fastify/under-pressure's\n"
    "                              maxEventLoopDelay, on a p99 rather than a mean)\n"
    "  --no-sample-loop            do not sample the loop every 10 ms (/stats and /metrics then\n"
    "                              show only the lateness of connection timeouts)\n"
    "  --retry-after S             the Retry-After of those 503s (default 10)\n"
    "  --wheel-tick-ms N           uvtw_options_t.tick_ms of the wheel (default 1)\n"
    "  --bench-routes              for tests and benchmarks only: answer GET /spin and /bytes,\n"
    "                              and allow --fail-accept-allocs\n"
    "  --fail-accept-allocs N      fault injection: the first N connection allocations fail\n"
    "0 disables a timeout.\n",
    "Routes: GET|HEAD / (hello), /delay?ms=N (answer after N ms, from\n"
    "the thread pool via uvtw_schedule), with --bench-routes /bytes?n=N (N bytes, N <= 1048576)\n"
    "and /spin?ms=N (blocks the loop N ms, N <= 10000, as a CPU-bound handler does), /stats\n"
    "(one key=value a line under # headings: counters of every worker summed, with the lateness\n"
    "p50, p99 and max of the last second and since start, then workers=N and\n"
    "worker_accepted=A,B,...), /metrics (the Prometheus text format:\n"
    "the lateness histogram, counters and gauges, per worker); POST /upload (counts the body).\n"
    "Signals: the first SIGTERM/SIGINT makes every worker stop accepting, close idle\n"
    "connections and answer requests in flight (with 'Connection: close'); the server exits 0\n"
    "when all are done or the grace period is over, printing what it dropped; a second one\n"
    "exits at once (128+signal).\n"
    "Differences from Node's http.Server: a CONNECT gets 405 and a clean close (Node\n"
    "destroys the socket without a reply); a client that does not read its responses\n"
    "is closed after --send-timeout (Node keeps it forever); more than maxHeadersCount headers\n"
    "get 431 (Node drops the extra headers); a body above --max-body-size gets 413 (Node has\n"
    "no limit); the shutdown grace period (Node's server.close() waits without limit).\n"};

static void usage(int status) {
  for (size_t i = 0; i < sizeof usage_text / sizeof usage_text[0]; i++)
    fputs(usage_text[i], status == 0 ? stdout : stderr);
  exit(status);
}

/* A decimal number up to `max`; else the usage and exit 2. */
static uint64_t parse_number(const char *s, uint64_t max) {
  char *end;
  unsigned long long v;
  if (s == NULL)
    usage(2);
  errno = 0;
  v = strtoull(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || s[0] == '-' || v > max)
    usage(2);
  return v;
}

static void parse_args(int argc, char **argv, http_server_config_t *config,
                       uvtw_options_t *wheel_options, unsigned *workers) {
  int i = 1;
  while (i < argc) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)
      usage(0);
    else if (strcmp(a, "--headers-timeout") == 0)
      config->headers_timeout = parse_number(v, UINT64_MAX);
    else if (strcmp(a, "--request-timeout") == 0)
      config->request_timeout = parse_number(v, UINT64_MAX);
    else if (strcmp(a, "--keep-alive-timeout") == 0)
      config->keep_alive_timeout = parse_number(v, UINT64_MAX);
    else if (strcmp(a, "--keep-alive-timeout-buffer") == 0)
      config->keep_alive_timeout_buffer = parse_number(v, UINT64_MAX);
    else if (strcmp(a, "--send-timeout") == 0)
      config->send_timeout = parse_number(v, UINT64_MAX);
    else if (strcmp(a, "--shutdown-grace") == 0)
      config->shutdown_grace = parse_number(v, UINT64_MAX);
    else if (strcmp(a, "--max-header-size") == 0)
      config->max_header_size = parse_number(v, UINT64_MAX);
    else if (strcmp(a, "--max-headers-count") == 0)
      config->max_headers_count = parse_number(v, UINT64_MAX);
    else if (strcmp(a, "--max-body-size") == 0)
      config->max_body_size = parse_number(v, UINT32_MAX);
    else if (strcmp(a, "--max-conn-buffered") == 0)
      config->max_conn_buffered = parse_number(v, UINT64_MAX);
    else if (strcmp(a, "--max-buffered") == 0)
      config->max_buffered = parse_number(v, UINT64_MAX);
    else if (strcmp(a, "--max-loop-delay") == 0)
      config->max_loop_delay = parse_number(v, UINT64_MAX);
    else if (strcmp(a, "--no-sample-loop") == 0) {
      config->sample_loop = 0;
      i--; /* takes no value */
    } else if (strcmp(a, "--retry-after") == 0)
      config->retry_after = parse_number(v, UINT32_MAX);
    else if (strcmp(a, "--allow-half-open") == 0) {
      config->allow_half_open = 1;
      i--; /* takes no value */
    } else if (strcmp(a, "--bench-routes") == 0) {
      config->bench_routes = 1;
      i--; /* takes no value */
    } else if (strcmp(a, "--fail-accept-allocs") == 0)
      config->fail_accept_allocs = parse_number(v, UINT64_MAX);
    else if (strcmp(a, "--wheel-tick-ms") == 0)
      wheel_options->tick_ms = (uint32_t)parse_number(v, UINT32_MAX);
    else if (strcmp(a, "--port") == 0)
      config->port = (int)parse_number(v, 65535);
    else if (strcmp(a, "--workers") == 0) {
      *workers = (unsigned)parse_number(v, HTTP_WORKERS_MAX);
      if (*workers == 0)
        usage(2);
    } else if (strcmp(a, "--host") == 0 && v != NULL)
      config->host = v;
    else
      usage(2);
    i += 2;
  }
  if (config->fail_accept_allocs > 0 && !config->bench_routes) {
    fputs("http_server: --fail-accept-allocs needs --bench-routes\n", stderr);
    exit(2);
  }
}

/* Best effort: many idle connections need many descriptors. */
static void raise_fd_limit(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

int main(int argc, char **argv) {
  http_server_config_t config;
  uvtw_options_t wheel_options;
  unsigned workers = 1;
  http_server_config_init(&config);
  memset(&wheel_options, 0, sizeof wheel_options);
  parse_args(argc, argv, &config, &wheel_options, &workers);
  raise_fd_limit();
  signal(SIGPIPE, SIG_IGN); /* a client that went away is an error code, not a signal */
  return http_workers_run(&config, &wheel_options, workers);
}
