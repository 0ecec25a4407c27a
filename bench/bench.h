/* The benchmark's backend interface.
 *
 * One executable per timer backend (bench_uvtw, bench_uv, bench_ev,
 * bench_event, bench_h2o, bench_event_common): each links the shared
 * harness, workloads and command line (harness.c, workload_*.c, main.c; see
 * workload.h) with exactly one backend_*.c that implements the
 * functions below. libev exports symbols with
 * libevent's names, so the two must never share a process; one process per
 * backend also keeps heaps, caches and peak RSS apart.
 *
 * Timers are numbered 0..n-1 and preallocated by backend_timers_alloc. Every
 * timed operation is made from inside a loop callback (backend_defer), as a
 * server makes them from its I/O callbacks; the workloads only call the
 * functions below, so every backend sees the same sequence of operations.
 */
#ifndef BENCH_H
#define BENCH_H

#include <stddef.h>
#include <stdint.h>

/* ---- Implemented by each backend_*.c ----------------------------------- */

/* Short name used in the output ("uvtw", "uv", "ev", "event", "h2o",
 * "event-common"). */
extern const char *const backend_name;

/* 1 for a backend that keeps one list per timeout duration (h2o's
 * h2o_timeout_t, libevent's common timeouts): it takes only a few distinct
 * timeouts, so it runs the workloads whose timeouts come from a fixed set
 * (bump, server) and skips the others, saying so. 0 for a general timer. */
extern const int backend_fixed_durations;

/* Creates the loop (and for uvtw the wheel). 0 on success. */
int backend_init(void);
void backend_fini(void);

/* Library name and version, e.g. "libuv 1.44.2". */
const char *backend_version(void);

/* Bytes one pending timer costs: sizeof the timer object plus any per-timer
 * entry the backend keeps elsewhere (libev's heap cell, libevent's heap
 * pointer). `note` says what was counted. */
size_t backend_timer_bytes(const char **note);

/* Allocates room for n timers without touching it (million_timers counts the
 * page faults in its init phase, as libuv's benchmark does), with
 * bench_timers_memory. 0 on success. */
int backend_timers_alloc(size_t n);
/* Initializes timer i (inactive). */
void backend_timer_init(size_t i);
/* Frees the array; every timer must be inactive (and closed, for uv). */
void backend_timers_free(void);
/* Releases the timers' handles (uv_close for uv_timer_t; nothing for the
 * others) and runs the loop until that is done. */
void backend_timers_close(void);

/* Attaches `note` to timer i (inactive), kept in the timer itself: its
 * `data` pointer (libevent: its callback argument). Its callback hands it
 * back to bench_fired, so per-fire bookkeeping reads what the fired timer
 * carries, as an application reads the request its timer is part of, not
 * a separate array indexed by timer (at 10^6 timers, a cache miss per fire
 * of the harness's own). Not timed. */
void backend_set_note(size_t i, uint32_t note);

/* One-shot start of timer i `timeout_ms` from the loop clock; restarts it if
 * it is active. When it fires the backend calls bench_fired(i, note). */
void backend_start(size_t i, uint64_t timeout_ms);
/* Restarts an active timer ("push the idle timeout back"); each backend uses
 * its own idiom for this (libev: ev_timer_again). */
void backend_restart(size_t i, uint64_t timeout_ms);
void backend_stop(size_t i);
/* 1 if timer i is pending. Not timed. */
int backend_active(size_t i);

/* The loop clock in milliseconds (uv_now, ev_now, libevent's cached time). */
double backend_now_ms(void);

/* Runs fn(arg) from a loop callback `delay_ms` from now (a uv_timer_t for uv
 * and uvtw, the backend's own timer for libev and libevent). One at a time:
 * a call replaces a deferral that has not run yet. */
void backend_defer(uint64_t delay_ms, void (*fn)(void *), void *arg);

/* One loop iteration, blocking until something is due. */
void backend_run_once(void);
/* Runs the loop until nothing keeps it alive (million_timers). */
void backend_run(void);

/* Wheel counters (uvtw only). Returns 0 and fills *out, or -1 if the
 * backend has none. */
typedef struct bench_wheel_stats_s {
  uint64_t wakeups;
  uint64_t wasted_wakeups;
  uint64_t cascaded;
  uint64_t late_max_ms;
} bench_wheel_stats_t;
int backend_wheel_stats(bench_wheel_stats_t *out);

/* ---- Implemented by harness.c ------------------------------------------ */

/* Called by the backend from timer i's callback, with its note (0 if none
 * was set). */
extern void (*bench_fired)(size_t i, uint32_t note);

/* `size` bytes starting on a cache line (64 bytes), or NULL; free() frees
 * them. Every backend keeps its timers there, as a server that cares about
 * misses lays out its connections: an object of up to 64 bytes then spans
 * one line when its size divides 64, and the backends compare by what they
 * touch, not by where malloc happened to put the array (bench/README.md). */
void *bench_timers_memory(size_t size);

#endif /* BENCH_H */
