/* The command line of every bench_* executable: parses the options, prints
 * the backend's I records and runs the chosen workloads (the list in
 * run_workloads) for each N. See harness.c for the workloads and the output.
 */
#define _GNU_SOURCE
#include "workload.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct options_s {
  size_t ns[16];
  size_t n_count;
  int quick, big;
  const char *workloads;
  unsigned repeats;
  uint64_t seed;
  size_t mt_timers;
  uint64_t server_second;
  const char *n_list;
} options_t;

static void usage(FILE *f, const char *argv0) {
  fprintf(f,
          "usage: %s [--quick] [--big] [--n N[,N...]] [--workloads LIST] [--repeats R]\n"
          "          [--seed S] [--mt-timers M] [--server-second MS]\n"
          "  --quick        N=10^4, one repeat, million_timers with 10^5 timers, a server\n"
          "                 second of 20 ms (CI smoke run)\n"
          "  --big          also N=10^7\n"
          "  --n LIST       timer counts, e.g. 1e4,1e5 (overrides --quick/--big)\n"
          "  --workloads L  any of cancel,bump,expire,churn,server,million_timers,memory\n"
          "                 (default: all but memory, a yardstick of the machine's memory)\n"
          "  --repeats R    repeats per workload (default: 5, 3 at N>=10^6, fewer at 10^7)\n"
          "  --seed S       PRNG seed (default 42)\n"
          "  --mt-timers M  timers in million_timers (default 10^7)\n"
          "  --server-second MS  loop ms per server second in server (default 1000)\n"
          "Prints one record per line: R backend workload n metric value.\n",
          argv0);
}

static int parse_count(const char *s, size_t *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || (*end && *end != ',') || v < 1 || v > 4e9)
    return -1;
  *out = (size_t)(v + 0.5);
  return 0;
}

static int has_word(const char *list, const char *word) {
  size_t len = strlen(word);
  for (const char *p = list; (p = strstr(p, word)) != NULL; p += len)
    if ((p == list || p[-1] == ',') && (p[len] == ',' || p[len] == '\0'))
      return 1;
  return 0;
}

/* Reads one option at argv[*a] (with its value, if any) into *o. 0 if it
 * was read, 1 for --help, -1 for an unknown option or a bad value. */
static int parse_option(options_t *o, int argc, char **argv, int *a) {
  const char *arg = argv[*a];
  const char *val = *a + 1 < argc ? argv[*a + 1] : NULL;
  if (!strcmp(arg, "--quick"))
    o->quick = 1;
  else if (!strcmp(arg, "--big"))
    o->big = 1;
  else if (!strcmp(arg, "--n") && val)
    o->n_list = argv[++*a];
  else if (!strcmp(arg, "--workloads") && val)
    o->workloads = argv[++*a];
  else if (!strcmp(arg, "--repeats") && val)
    o->repeats = (unsigned)strtoul(argv[++*a], NULL, 10);
  else if (!strcmp(arg, "--seed") && val)
    o->seed = strtoull(argv[++*a], NULL, 0);
  else if (!strcmp(arg, "--mt-timers") && val) {
    if (parse_count(argv[++*a], &o->mt_timers) != 0)
      return -1;
  } else if (!strcmp(arg, "--server-second") && val) {
    o->server_second = strtoull(argv[++*a], NULL, 10);
    if (o->server_second == 0 || o->server_second > 100000)
      return -1;
  } else if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
    return 1;
  } else {
    return -1;
  }
  return 0;
}

/* Fills o->ns from --n, or from --quick / --big. -1 on a bad count. */
static int parse_ns(options_t *o) {
  if (o->n_list) {
    for (const char *p = o->n_list; *p && o->n_count < 16;
         p = strchr(p, ',') ? strchr(p, ',') + 1 : "") {
      if (parse_count(p, &o->ns[o->n_count++]) != 0)
        return -1;
    }
  } else if (o->quick) {
    o->ns[o->n_count++] = 10000;
  } else {
    o->ns[o->n_count++] = 10000;
    o->ns[o->n_count++] = 100000;
    o->ns[o->n_count++] = 1000000;
    if (o->big)
      o->ns[o->n_count++] = 10000000;
  }
  return 0;
}

/* Parses the command line into *o. 0 to run, else the exit status (after
 * printing the usage). */
static int parse_args(options_t *o, int argc, char **argv) {
  *o = (options_t){.workloads = "cancel,bump,expire,churn,server,million_timers", .seed = 42};
  for (int a = 1; a < argc; a++) {
    int rc = parse_option(o, argc, argv, &a);
    if (rc != 0) {
      usage(rc > 0 ? stdout : stderr, argv[0]);
      return rc > 0 ? 0 : 2;
    }
  }
  if (parse_ns(o) != 0) {
    usage(stderr, argv[0]);
    return 2;
  }
  if (o->mt_timers == 0)
    o->mt_timers = o->quick ? 100000 : 10000000;
  server_second_ms = o->server_second ? o->server_second : o->quick ? 20 : 1000;
  return -1;
}

/* Prints the backend's I records and, for a backend with one list per
 * duration, keeps only the workloads it can run. Returns timer_bytes. */
static size_t print_info(options_t *o) {
  const char *note;
  size_t bytes = backend_timer_bytes(&note);
  printf("I %s version %s\n", backend_name, backend_version());
  printf("I %s timer_bytes %zu %s\n", backend_name, bytes, note);
  if (backend_fixed_durations) {
    /* Timeouts drawn from a range (or, in million_timers, one more ms every
     * 1000 timers) would need a list each. */
    printf("I %s skipped cancel,expire,churn,million_timers (one list per duration: fixed "
           "durations only)\n",
           backend_name);
    static char kept[64];
    snprintf(kept, sizeof kept, "%s%s%s", has_word(o->workloads, "bump") ? "bump," : "",
             has_word(o->workloads, "server") ? "server," : "",
             has_word(o->workloads, "memory") ? "memory" : "");
    o->workloads = kept;
  }
  fflush(stdout);
  return bytes;
}

/* The workloads run at each N, in this order, with their repeats. */
static void run_workloads(const options_t *o, size_t n) {
  unsigned rep = o->repeats ? o->repeats : o->quick ? 1 : n >= 10000000 ? 1 : n >= 1000000 ? 3 : 5;
  unsigned rep_steps = o->repeats ? o->repeats : o->quick || n >= 1000000 ? 1 : 3;
  unsigned rep_expire = o->repeats ? o->repeats : o->quick ? 1 : n >= 1000000 ? 1 : 3;
  const struct {
    const char *name;
    void (*run)(size_t n, unsigned repeats, uint64_t seed);
    unsigned repeats;
  } runs[] = {{"cancel", run_cancel, rep},
              {"bump", run_bump, rep_steps},
              {"expire", run_expire, rep_expire},
              {"churn", run_churn, rep_steps},
              {"server", run_server, rep_steps}};
  for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
    if (!has_word(o->workloads, runs[k].name))
      continue;
    fprintf(stderr, "bench %s: %s, N=%zu, %u repeats\n", backend_name, runs[k].name, n,
            runs[k].repeats);
    runs[k].run(n, runs[k].repeats, o->seed);
  }
}

/* Runs every workload at N = n on n fresh timers. 0 on success. */
static int run_n(const options_t *o, size_t n, size_t bytes) {
  n_timers = n;
  if (backend_timers_alloc(n) != 0) {
    fprintf(stderr, "bench %s: cannot allocate %zu timers\n", backend_name, n);
    return 1;
  }
  for (size_t i = 0; i < n; i++)
    backend_timer_init(i);
  record("info", n, "bytes_per_timer", (double)bytes);
  if (has_word(o->workloads, "memory"))
    run_memory(n, o->seed);
  run_workloads(o, n);
  backend_timers_close();
  backend_timers_free();
  return 0;
}

int main(int argc, char **argv) {
  options_t o;
  int rc = parse_args(&o, argc, argv);
  if (rc >= 0)
    return rc;
  size_t bytes = print_info(&o);

  if (has_word(o.workloads, "million_timers")) {
    fprintf(stderr, "bench %s: million_timers, %zu timers\n", backend_name, o.mt_timers);
    if (million_timers_in_child(o.mt_timers) != 0) {
      fprintf(stderr, "bench %s: million_timers failed\n", backend_name);
      return 1;
    }
  }
  if (backend_init() != 0) {
    fprintf(stderr, "bench %s: cannot create the loop\n", backend_name);
    return 1;
  }
  for (size_t k = 0; k < o.n_count; k++)
    if (run_n(&o, o.ns[k], bytes) != 0)
      return 1;
  backend_fini();
  return 0;
}
