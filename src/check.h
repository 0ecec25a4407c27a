/* The checks build's two macros (-Dchecks). A checker returns NULL if every
 * invariant holds, else the name of the first that fails; each lives beside
 * what it checks (wheel.c, core.c, pool.c, tasks.c, life.c). A program's
 * mistake that the library can see where it happens stops the program with
 * a message; a release build compiles neither. */
#ifndef UVTW_CHECK_H
#define UVTW_CHECK_H

#ifdef UVTW_CHECKS
#include <stdio.h>
#include <stdlib.h>

/* A mistake of the program's: "uvtw: " and the message on stderr, then abort. */
#define MISUSE(mistake, ...)                                                                       \
  do {                                                                                             \
    if (mistake) {                                                                                 \
      fprintf(stderr, "uvtw: " __VA_ARGS__);                                                       \
      abort();                                                                                     \
    }                                                                                              \
  } while (0)
#else
#define MISUSE(mistake, ...) ((void)0)
#endif

/* One invariant of a checker: returns its name if it fails. */
#define INVARIANT(holds, name)                                                                     \
  do {                                                                                             \
    if (!(holds))                                                                                  \
      return name;                                                                                 \
  } while (0)

#endif
