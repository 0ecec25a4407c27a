/* The libuv-loop half of the uv and uvtw backends: the default loop and the
 * timer that runs workload code inside it. uv_loop.c also implements
 * backend_now_ms, backend_defer, backend_run_once and backend_run for both. */
#ifndef UVTW_BENCH_UV_LOOP_H
#define UVTW_BENCH_UV_LOOP_H

#include <uv.h>

extern uv_loop_t *bench_loop;

/* Opens the default loop and the (unreferenced) kick timer; 0 or -1. */
int bench_loop_init(void);

/* Closes the kick timer, runs the loop out and closes it. */
void bench_loop_fini(void);

#endif
