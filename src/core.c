/* The scheduling core: entries on the loop's clock, the one uv_timer_t
 * armed to the earliest, passes, and keeping the loop alive. It knows
 * entries with a callback, not timers or tasks (core.h).
 *
 * An entry's life: uvtw__entry_add files its node in the pure wheel
 * (wheel.c) and, if it is now the earliest, arms the wheel's one uv_timer_t
 * to its deadline. When that uv_timer_t fires, on_timer runs a pass:
 * wheel_expire moves every entry due at uv_now() to the expired list, the
 * pass pops them one by one and runs each kind's callback, then pass_end
 * (life.c: the tasks queued meanwhile are taken in). After the pass the
 * uv_timer_t is armed again to the earliest pending deadline.
 *
 * One pass per loop iteration (guarantee 2). The pass collects what is due
 * before it runs any callback, so an entry a callback makes due waits for
 * the next pass, which must come in the next loop iteration, as libuv 1.48
 * and later run a uv_timer_t started in its own timer phase. The arming
 * (enum arming) says what the uv_timer_t and the uv_prepare_t are doing,
 * and set_arming is the one place that starts or stops them:
 *
 *   IDLE --file--> TIMER --due--> IN_PASS --end_pass--> TIMER or IDLE (libuv >= 1.48)
 *                    |              ^     \--end_pass--> WAIT (< 1.48)
 *                    |              |   WAIT --its phase ran--> TIMER, a pass, or HELD
 *                    |              |   HELD --prepare or a filing--> TIMER
 *                    +-> COLLECTED -+
 *
 * Where libuv versions differ, the difference is one arming_policy_t,
 * chosen at uvtw_wheel_new by uv_version() (a shared libuv is upgraded
 * under programs):
 *   - COLLECTED: the uv_timer_t is due in the timer phase under way and a
 *     due entry is filed from another callback of that phase (a uv_timer_t's,
 *     or another wheel's). The pass's entries are expired first, so the new
 *     one waits for the next pass like a uv_timer_t started now. On libuv
 *     >= 1.48 the uv_timer_t is due if libuv has collected it (started but
 *     no longer active); before 1.48, if it is due by now and another wheel
 *     of the loop is in its pass, so that the phase is under way.
 *   - WAIT: libuv < 1.48 runs a uv_timer_t started with 0 inside the timer
 *     phase in that same phase, after every timer due before it. So after a
 *     pass there, and for a due entry filed from another wheel's pass, the
 *     uv_timer_t is started due now, with armed_at the clock then: when it
 *     runs, the rest of the phase has run. What is due by armed_at is held
 *     back (HELD: started for the next tick, to keep the loop alive), and a
 *     uv_prepare_t, which runs once between two timer phases, arms the next
 *     pass; else what the clock made due since runs, as its uv_timer_t
 *     twins do, or the wheel is armed as usual, so that a uv_run that
 *     begins with a timer phase (1.45 to 1.47 in UV_RUN_DEFAULT, 1.44 after
 *     UV_RUN_ONCE) runs what was started before it. A filing on a HELD
 *     wheel arms it to its earliest entry.
 * Everything else follows from using a real uv_timer_t on uv_now(): a
 * wheel timer fires in the loop iteration in which a uv_timer_t started at
 * the same moment with the same timeout fires, and keeps the loop alive
 * exactly as long. The exceptions are in include/uvtw.h; on libuv >= 1.48
 * it is uv_update_time() called by a callback that runs before the pass in
 * the same timer phase: that libuv collected the phase's timers against the time before
 * the update and keeps that time nowhere, so the pass runs what is due by
 * the updated clock, an iteration before a uv_timer_t due in between
 * (include/uvtw.h states it).
 *
 * Keeping the loop alive: `unrefs` counts pending timers that are unref'd,
 * so the pending entries that are referenced (the other timers, and every
 * task) number wheel.count - unrefs. The uv_timer_t is referenced while
 * the wheel is referenced and that number is not 0; being started whenever
 * something is pending, it then keeps the loop alive exactly when a
 * referenced uv_timer_t would. The uv_async_t is referenced until the
 * loop's first iteration, so that a task scheduled before it keeps the
 * loop alive; the uv_prepare_t never is.
 */
#include "core.h"

/* libuv 1.48 and later collect a timer phase's due timers at its start and
 * run a uv_timer_t started in that phase in the next one. */
#define LIBUV_COLLECTS_DUE_TIMERS (1u << 16 | 48u << 8)

/* The public uvtw_timer_t keeps the wheel's node in a field of its own
 * type, with the same layout. */
_Static_assert(sizeof(((uvtw_timer_t *)0)->node_) == sizeof(wheel_node_t) &&
                   _Alignof(wheel_node_t) <= _Alignof(uvtw_timer_t) &&
                   offsetof(uvtw_timer_t, node_) % _Alignof(wheel_node_t) == 0,
               "uvtw_timer_t.node_ does not match wheel_node_t");

/* ---- arming the uv_timer_t and keeping the loop alive ------------------- */

static void on_timer(uv_timer_t *handle);
static void on_prepare(uv_prepare_t *handle);

void uvtw__update_refs(uvtw_wheel_t *w) {
  if (uvtw__closing(w)) /* the handles are closing */
    return;
  bool may_keep_alive = (w->flags & (WHEEL_REF | WHEEL_MANUAL)) == WHEEL_REF;
  bool keep_alive = may_keep_alive && w->wheel.count > w->unrefs;
  if (uvtw__handle_open(&w->timer))
    (keep_alive ? uv_ref : uv_unref)((uv_handle_t *)&w->timer);
  if (uvtw__handle_open(&w->async))
    (may_keep_alive && !(w->flags & WHEEL_LOOP_RAN) ? uv_ref : uv_unref)((uv_handle_t *)&w->async);
}

void uvtw__loop_ran(uvtw_wheel_t *w) {
  if (w->flags & WHEEL_LOOP_RAN)
    return;
  w->flags |= WHEEL_LOOP_RAN;
  uvtw__update_refs(w);
}

void uvtw__entry_set_unref(uvtw_timer_t *entry, uintptr_t unref) {
  uvtw_wheel_t *w = uvtw__wheel_of(entry);
  if ((entry->wheel_ & ENTRY_UNREF) == unref)
    return;
  entry->wheel_ ^= ENTRY_UNREF;
  if (wheel_node_linked(uvtw__node_of(entry))) {
    w->unrefs = unref ? w->unrefs + 1 : w->unrefs - 1;
    uvtw__update_refs(w);
  }
}

/* The one place that changes the arming and calls libuv for it. In TIMER
 * and HELD the uv_timer_t is started for `deadline` while anything is
 * pending (with nothing, they are IDLE), in WAIT always; COLLECTED and
 * IN_PASS leave it where libuv has it; otherwise it is stopped. The
 * uv_prepare_t runs in WAIT and HELD only. */
static void set_arming(uvtw_wheel_t *w, enum arming to, uint64_t deadline) {
  bool started = to == ARM_TIMER || to == ARM_WAIT || to == ARM_HELD;
  if (started && to != ARM_WAIT && w->wheel.count == 0)
    to = ARM_IDLE, started = false;
  if (started && uvtw__handle_open(&w->timer)) {
    uint64_t due = uvtw__ms_of(w, deadline);
    uint64_t now = uv_now(w->loop);
    uv_timer_start(&w->timer, on_timer, due > now ? due - now : 0, 0);
  } else if (to != ARM_COLLECTED && to != ARM_IN_PASS && uvtw__handle_open(&w->timer)) {
    uv_timer_stop(&w->timer);
  }
  bool prepare = to == ARM_WAIT || to == ARM_HELD;
  if (uvtw__handle_open(&w->prepare))
    (prepare ? uv_prepare_start(&w->prepare, on_prepare) : uv_prepare_stop(&w->prepare));
  w->arming = to;
  w->armed_at = started ? deadline : 0;
}

/* Another wheel on this loop is running its pass: the timer phase is under
 * way (see WAIT above). */
static bool peer_in_pass(const uvtw_wheel_t *w) {
  for (const uvtw_wheel_t *p = w->peer; p != w; p = p->peer)
    if (uvtw__in_pass(p) && !(p->flags & WHEEL_MANUAL)) /* a manual pass is no phase */
      return true;
  return false;
}

/* libuv >= 1.48: a started uv_timer_t that is no longer active is collected. */
static enum arming due_filed_collecting(const uvtw_wheel_t *w, uint64_t now) {
  (void)now;
  bool collected = w->arming == ARM_TIMER && !uv_is_active((const uv_handle_t *)&w->timer);
  return collected ? ARM_COLLECTED : ARM_TIMER;
}

/* libuv < 1.48: inside the timer phase (a peer's pass), the uv_timer_t is
 * due in it if due by now; otherwise the entry waits for the next one. */
static enum arming due_filed_rereading(const uvtw_wheel_t *w, uint64_t now) {
  if (!peer_in_pass(w))
    return ARM_TIMER;
  return w->arming == ARM_TIMER && w->armed_at <= now ? ARM_COLLECTED : ARM_WAIT;
}

void uvtw__core_init(uvtw_wheel_t *w, uv_loop_t *loop, uint32_t tick_ms, bool manual) {
  w->loop = loop;
  w->tick_ms = tick_ms;
  w->flags |= manual ? WHEEL_MANUAL : 0;
  /* In the wheel, not a static table: the library holds no data of its own. */
  if (uv_version() >= LIBUV_COLLECTS_DUE_TIMERS)
    w->policy = (arming_policy_t){true, ARM_TIMER, due_filed_collecting};
  else
    w->policy = (arming_policy_t){false, ARM_WAIT, due_filed_rereading};
  w->manual_now = uv_now(loop);
  uvtw__wheel_init(&w->wheel, uvtw__now_ticks(w));
}

/* Once no referenced entry is pending, the handles let go of the loop;
 * once nothing is, the uv_timer_t stops. Out of line, so a stop saves no
 * registers (bench/README.md). */
UVTW_NOINLINE void uvtw__release_loop(uvtw_wheel_t *w) {
  uvtw__update_refs(w);
  enum arming a = w->arming;
  if (w->wheel.count == 0 && a != ARM_IDLE && a != ARM_IN_PASS && a != ARM_WAIT)
    set_arming(w, ARM_IDLE, 0);
}

/* Files `entry` and decides the arming (see the top of this file). A
 * COLLECTED pass's entries are expired before the entry is filed; an empty
 * wheel catches up with the clock, so the entry is filed low. */
void uvtw__entry_add(uvtw_wheel_t *w, uvtw_timer_t *entry, uint64_t deadline) {
  uint64_t now = uvtw__now_ticks(w);
  enum arming to = w->arming;
  if (!(w->flags & WHEEL_MANUAL) && (to == ARM_IDLE || to == ARM_TIMER || to == ARM_HELD))
    to = deadline <= now ? w->policy.due_filed(w, now) : ARM_TIMER;
  if ((to == ARM_COLLECTED && w->arming != ARM_COLLECTED) || w->wheel.count == 0)
    uvtw__wheel_expire(&w->wheel, now);
  uvtw__entry_insert(w, entry, deadline);
  /* WAIT holds back what is due now; out of HELD, the earliest entry arms. */
  uint64_t at = to == ARM_WAIT          ? now
                : w->arming == ARM_HELD ? uvtw__wheel_next_deadline(&w->wheel)
                                        : uvtw__node_of(entry)->deadline;
  bool starts =
      to == ARM_TIMER && !(w->flags & WHEEL_MANUAL) && (w->wheel.count == 1 || at < w->armed_at);
  if (to != w->arming || starts)
    set_arming(w, to, at);
}

/* ---- passes ---------------------------------------------------------------- */

void uvtw__fire_expired(uvtw_wheel_t *w) {
  wheel_node_t *node;
  while ((node = uvtw__wheel_first_expired(&w->wheel)) != NULL) {
    /* While this callback runs, the entry after next in the entry's list,
     * which most likely fires after next, is fetched (both its lines, if it
     * straddles two), and the next entry's `data` (a task's argument),
     * which its callback most likely reads first. */
    wheel_node_t *next = node->next;
    uvtw__wheel_pop(&w->wheel, node);
    if (!wheel_is_head(&w->wheel, next)) {
      UVTW_PREFETCH(next->next);
      UVTW_PREFETCH((char *)next->next + 64);
      UVTW_PREFETCH(container_of(next, uvtw_timer_t, node_)->data);
    }
    uvtw_timer_t *entry = container_of(node, uvtw_timer_t, node_);
    uvtw__entry_unlinked(w, entry);
    w->fire[(entry->wheel_ & ENTRY_TASK) != 0](entry); /* the entry may be freed from here on */
  }
}

/* Expires everything due at `now` (ticks) unless COLLECTED did, and runs
 * the callbacks. A callback may close the wheel: then the wheel stays
 * allocated until end_pass. */
static void run_pass(uvtw_wheel_t *w, uint64_t now) {
  if (w->arming != ARM_COLLECTED)
    uvtw__wheel_expire(&w->wheel, now);
  set_arming(w, ARM_IN_PASS, 0);
  uvtw__fire_expired(w);
}

/* After run_pass: pass_end, then arms the uv_timer_t for the next pass;
 * WAIT holds back the entries due by now (see the top of this file). False
 * if a callback closed the wheel. */
static bool end_pass(uvtw_wheel_t *w) {
  if (!w->pass_end(w))
    return false;
  enum arming to = w->flags & WHEEL_MANUAL ? ARM_IDLE : w->policy.after_pass;
  set_arming(w, to, to == ARM_WAIT ? uvtw__now_ticks(w) : uvtw__wheel_next_deadline(&w->wheel));
  return true;
}

bool uvtw__pass(uvtw_wheel_t *w, uint64_t now) {
  uvtw__manual_set(w, uvtw__ms_of(w, now));
  run_pass(w, now);
  return end_pass(w);
}

static void on_timer(uv_timer_t *handle) {
  uvtw_wheel_t *w = container_of(handle, uvtw_wheel_t, timer);
  uint64_t now = uvtw__now_ticks(w);
  uint64_t next = uvtw__wheel_next_deadline_exact(&w->wheel);
  /* WAIT holds back what is due at armed_at, HELD what was due before it */
  uint64_t held = w->arming == ARM_WAIT ? w->armed_at : w->armed_at - 1;
  if ((w->arming == ARM_WAIT || w->arming == ARM_HELD) && next <= held) {
    set_arming(w, ARM_HELD, now + 1); /* not in this timer phase, nor while the clock moves in it */
    return;
  }
  if ((w->arming == ARM_WAIT || w->arming == ARM_HELD) && next > now) {
    set_arming(w, ARM_TIMER, next); /* the rest of the pass's timer phase has run */
    return;
  }
  uint64_t fired = w->stats.fired;
  w->stats.wakeups++;
  run_pass(w, now);
  w->stats.wasted_wakeups += w->stats.fired == fired;
  end_pass(w);
}

/* libuv < 1.48: the next iteration has begun; the next pass may come. */
static void on_prepare(uv_prepare_t *handle) {
  uvtw_wheel_t *w = container_of(handle, uvtw_wheel_t, prepare);
  set_arming(w, ARM_TIMER, uvtw__wheel_next_deadline(&w->wheel));
}

void uvtw__core_close(uvtw_wheel_t *w) {
  set_arming(w, ARM_IDLE, 0); /* in a pass too: what is left of it runs nothing */
  uvtw__wheel_expire(&w->wheel, UINT64_MAX);
  wheel_node_t *node = w->wheel.expired.next;
  while (node != &w->wheel.expired) {
    uvtw_timer_t *entry = container_of(node, uvtw_timer_t, node_);
    node = node->next;
    if (!(entry->wheel_ & ENTRY_TASK))
      uvtw__entry_remove(w, entry);
  }
}

/* ---- the arming's checker (-Dchecks) ----------------------------------------- */

#ifdef UVTW_CHECKS
/* GCOVR_EXCL_START: the checker's failing branches run only on a broken library. */

/* libuv >= 1.48 collects a timer phase's due uv_timer_ts at its start:
 * stopped, into a queue of that phase linked through each handle's heap
 * node, from which each is unlinked (linked to itself) before its callback.
 * A uv_timer_t is collected by the phase under way if it is stopped and so
 * linked (the node is named by the uv.h compiled against; its place is the
 * same on every libuv). */
static bool collected_by_phase(const uv_timer_t *t) {
#if UV_VERSION_HEX >= 0x013000
  const void *const *node = (const void *const *)&t->node;
#else
  const void *const *node = (const void *const *)t->heap_node;
#endif
  return !uv_is_active((const uv_handle_t *)t) && node[0] != (const void *)node;
}

const char *uvtw__arming_check(const uvtw_wheel_t *w) {
  enum arming a = w->arming;
  bool timer = uv_is_active((const uv_handle_t *)&w->timer), empty = w->wheel.count == 0;
  bool started = a == ARM_TIMER || a == ARM_WAIT || a == ARM_HELD, manual = w->flags & WHEEL_MANUAL;
  bool collects = w->policy.collects, collected = collects && collected_by_phase(&w->timer);
  bool waits = a == ARM_WAIT || a == ARM_HELD;
  uint64_t due = uvtw__ms_of(w, w->armed_at), now = uv_now(w->loop);
  INVARIANT(a != ARM_IN_PASS, "checked inside a pass"); /* the checker runs between passes */
  INVARIANT(!manual || (a == ARM_IDLE && !timer), "a manual clock armed its uv_timer_t");
  INVARIANT(a != ARM_IDLE || (!timer && (empty || manual)), "IDLE with a timer or entries");
  INVARIANT(a != ARM_TIMER || (!empty && (timer || collected)), "TIMER not armed nor collected");
  /* COLLECTED: libuv >= 1.48 holds it in the phase's queue; older libuvs in the heap */
  INVARIANT(a != ARM_COLLECTED || (!empty && (collects ? collected : timer)), "COLLECTED, not due");
  INVARIANT(!waits || (!collects && timer), "WAIT or HELD on libuv >= 1.48, or not started");
  INVARIANT(a != ARM_HELD || !empty, "HELD with nothing held");
  INVARIANT(a != ARM_WAIT || due <= now, "WAIT's uv_timer_t not due now");
  INVARIANT(waits == uv_is_active((const uv_handle_t *)&w->prepare), "prepare not WAIT nor HELD");
  INVARIANT(started || w->armed_at == 0, "armed_at set with nothing armed"); /* the fast path */
  INVARIANT(!started || uv_timer_get_due_in(&w->timer) == (due > now ? due - now : 0),
            "the uv_timer_t is not due at armed_at");
  uint64_t next = uvtw__wheel_next_deadline_exact(&w->wheel);
  INVARIANT(a != ARM_TIMER || w->armed_at <= next,
            "the uv_timer_t is armed after the earliest deadline");
  return NULL;
}
/* GCOVR_EXCL_STOP */
#endif
