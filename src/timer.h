/* Loop-thread timers (timer.c), for life.c. */
#ifndef UVTW_TIMER_H
#define UVTW_TIMER_H

#include "core.h"

/* The callback of a timer's entry (the core's fire[0]). */
void uvtw__timer_fire(uvtw_timer_t *entry);

#endif
