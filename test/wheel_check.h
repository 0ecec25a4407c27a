/* The pure wheel's invariant checker, shared by the model test
 * (test_wheel.c) and the wheel's fuzz target (fuzz/fuzz_wheel.c). */
#ifndef UVTW_TEST_WHEEL_CHECK_H
#define UVTW_TEST_WHEEL_CHECK_H

#include "wheel.h"

/* Checks every invariant of a wheel: list links, occupancy bits, each
 * entry's slot and the slot minimums, the order of level-0 slots and of the
 * expired list, the entry count, the second walk. Returns NULL if all
 * hold, else what is broken. O(slots + entries). */
const char *wheel_check(const wheel_t *w);

#endif
