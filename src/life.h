/* The wheel's life (life.c): its invariant checker, for tests. */
#ifndef UVTW_LIFE_H
#define UVTW_LIFE_H

#include "uvtw.h"

#ifdef UVTW_CHECKS
/* The invariant checker (-Dchecks): NULL, or the invariant that fails.
 * Loop thread, outside the wheel's callbacks, or inside another handle's;
 * O(slots + entries). It checks the pure wheel's structure (wheel.c), then
 * every entry, the counts and the references, the arming (core.c), and the
 * tasks and the counters other threads share (tasks.c). */
const char *uvtw__check(const uvtw_wheel_t *w);
#endif

#endif
