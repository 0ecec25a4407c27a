/* The libevent half of the event and event-common backends: the event base
 * and the timer that runs workload code inside it. event_loop.c also
 * implements backend_init, backend_fini, backend_version, backend_now_ms,
 * backend_defer, backend_run_once, backend_run, backend_wheel_stats and the
 * timers' calls but start and restart for both. */
#ifndef UVTW_BENCH_EVENT_LOOP_H
#define UVTW_BENCH_EVENT_LOOP_H

#include <event2/event.h>
#include <stdint.h>
#include <sys/time.h>

extern struct event_base *bench_base;
/* The timers (event_loop.c allocates, inits and frees them, and stops and
 * tests them; each backend starts them its own way). */
extern struct event *bench_timers;

/* The callback argument of timer i: its index in the high 32 bits, its note
 * in the low ones (libevent has no data pointer besides the argument). */
void *bench_event_arg(size_t i, uint32_t note);

/* The timer callback both backends assign: hands (index, note) to
 * bench_fired. */
void bench_event_cb(evutil_socket_t fd, short what, void *arg);

struct timeval bench_ms_to_tv(uint64_t ms);

#endif
