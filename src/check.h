/* The invariant checkers' one macro (-Dchecks). A checker returns NULL if
 * every invariant holds, else the name of the first that fails; each lives
 * beside what it checks (wheel.c, core.c, pool.c, tasks.c, life.c). */
#ifndef UVTW_CHECK_H
#define UVTW_CHECK_H

/* One invariant of a checker: returns its name if it fails. */
#define INVARIANT(holds, name)                                                                     \
  do {                                                                                             \
    if (!(holds))                                                                                  \
      return name;                                                                                 \
  } while (0)

#endif
