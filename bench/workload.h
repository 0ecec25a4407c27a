/* Between the harness (harness.c), the workloads (workload_*.c) and the
 * command line (main.c): the harness's clocks, PRNG, statistics, output and
 * the state one workload run shares with it, and each workload's entry.
 * See harness.c for what the workloads measure and how they print it.
 */
#ifndef BENCH_WORKLOAD_H
#define BENCH_WORKLOAD_H

#include "bench.h"

#include <stddef.h>
#include <stdint.h>

/* ---- Clocks, PRNG, statistics, output (harness.c) ----------------------- */

uint64_t cpu_ns(void);  /* process CPU time */
uint64_t wall_ns(void); /* CLOCK_MONOTONIC */
/* Seeds the PRNG for one repeat of one workload (a WL_* below). */
void rng_seed(uint64_t seed, uint64_t workload, uint64_t repeat);
/* Uniform in [0, bound), bound < 2^32. */
uint32_t rng_below(uint32_t bound);
/* Sets v to a random permutation of 0..n-1. */
void shuffle(uint32_t *v, size_t n);
int cmp_double(const void *a, const void *b);
int cmp_float(const void *a, const void *b);
/* Sorts v and returns its median. */
double median(double *v, size_t n);
/* malloc that exits on failure. */
void *xmalloc(size_t size);
/* Prints one record: R <backend> <workload> <n> <metric> <value>. */
void record(const char *workload, size_t n, const char *metric, double value);

/* The PRNG streams, one per workload (memory reuses churn's). */
enum { WL_CANCEL = 1, WL_BUMP, WL_EXPIRE, WL_CHURN, WL_SERVER };

/* ---- Running code inside the loop (harness.c) --------------------------- */

/* Runs fn(arg) from a loop callback delay_ms from now and returns after it. */
void in_loop(uint64_t delay_ms, void (*fn)(void *), void *arg);

extern uint64_t iterations; /* backend_run_once calls made while waiting for fires */
extern size_t fired;        /* timer callbacks seen by the current hook */
extern size_t fire_target;  /* when `fired` reaches it, fire_done_cpu is taken */
extern uint64_t fire_done_cpu;
extern uint64_t fire_begin_cpu;   /* CPU time when the measured fire phase began */
extern size_t fired_before_begin; /* callbacks that ran before it (slow starts) */
extern uint64_t fire_iterations;  /* iterations that ran at least one timer */
extern size_t unexpected_fires;
/* The longest pass's own work (server's idle cut only), see harness.c. */
extern int measure_pass_work;
extern uint64_t pass_work_max_ns;

/* Counts the current iteration in fire_iterations once, from a callback. */
void note_fire_iteration(void);
/* Runs loop iterations until `fired` reaches target. */
void wait_fired(size_t target);
/* A bench_fired hook that counts unexpected_fires. */
void fire_unexpected(size_t i, uint32_t note);

/* Shared state of one workload run. */
extern size_t n_timers;
extern uint32_t *timeouts; /* per timer, or per step */
extern uint32_t *order;    /* a permutation of timers, or random timer per step */
extern size_t op_begin, op_end;
extern uint64_t cpu_spent;
extern float *lateness; /* per callback, ms (expire, server) */

/* Loop clocks that are not integer milliseconds (libev's double seconds,
 * libevent's microseconds converted through wall-clock time) may round a hair
 * below the deadline; beyond this it counts as early. */
#define EARLY_TOLERANCE_MS 0.01

/* In-loop steps: stop timers 0..n_timers-1; start each with timeouts[i]. */
void stop_all(void *arg);
void start_all_from_timeouts(void *arg);
/* The wheel's counters since *before; -1 if the backend has none. */
int wheel_stats_delta(const bench_wheel_stats_t *before, bench_wheel_stats_t *delta);

enum { STEP_BATCHES = 16 };
/* Runs `steps` operations as STEP_BATCHES in-loop calls of `batch`, >= 1 ms
 * apart, storing each one's ns per operation in out[b] (see harness.c). */
void run_batches(size_t steps, void (*batch)(void *), double *out);

/* ---- The workloads (workload_<name>.c) ---------------------------------- */

void run_cancel(size_t n, unsigned repeats, uint64_t seed);
void run_bump(size_t n, unsigned repeats, uint64_t seed);
void run_expire(size_t n, unsigned repeats, uint64_t seed);
void run_churn(size_t n, unsigned repeats, uint64_t seed);
/* Loop ms per server second (--server-second). */
extern uint64_t server_second_ms;
void run_server(size_t n, unsigned repeats, uint64_t seed);
void run_memory(size_t n, uint64_t seed);
/* million_timers in a child process forked before anything big is
 * allocated, so the peak RSS it reports is its own. 0 on success. */
int million_timers_in_child(size_t m);

#endif /* BENCH_WORKLOAD_H */
