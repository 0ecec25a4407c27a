/* The wheel's life: uvtw_wheel_new and uvtw_wheel_close, its three handles
 * (the core's uv_timer_t and uv_prepare_t, the tasks' uv_async_t), the
 * ring of the open wheels of one loop, references and stats.
 *
 * The wheel's life is a flags word, as libuv keeps a handle's: CLOSING from
 * uvtw_wheel_close on, and the wheel is freed once its open handles have
 * counted down to 0, or where the pass that closed it ends. A program may
 * close the handles itself (a uv_walk that closes every handle): they are
 * counted closed then, and never touched again.
 *
 * The wheels of a loop find each other at uvtw_wheel_new (a ring), so that
 * the core can tell whether another is in its pass (core.c, WAIT). */
#include <stdlib.h>
#include <string.h>

#include "life.h"
#include "tasks.h"
#include "timer.h"

enum { WHEEL_HANDLES = 3 };

/* Once the handles are closed. */
static void finish_close(uvtw_wheel_t *w) {
  if (w->close_cb != NULL)
    w->close_cb(w, w->close_arg);
  uvtw__tasks_release(w->shared);
  free(w);
}

/* Where a pass ends: the tasks queued meanwhile are taken in, and so keep
 * the loop alive from their call. If a callback closed the wheel, the
 * close finishes here if the program had closed the handles (a uv_walk). */
static bool pass_end(uvtw_wheel_t *w) {
  if (!uvtw__closing(w)) {
    uvtw__tasks_drain(w);
    return true;
  }
  if (w->open_handles == 0)
    finish_close(w);
  return false;
}

static void on_async(uv_async_t *handle) {
  uvtw_wheel_t *w = container_of(handle, uvtw_wheel_t, async);
  uvtw__loop_ran(w);
  w->stats.remote_batches += uvtw__tasks_drain(w);
}

/* uv_walk's callback at uvtw_wheel_new: joins the ring of an open wheel on
 * the loop, known by its uv_async_t, whose `data` is that wheel. */
static void find_peer(uv_handle_t *handle, void *arg) {
  uvtw_wheel_t *w = arg;
  uvtw_wheel_t *p = handle->data;
  if (handle->type != UV_ASYNC || w->peer != w || p == w || !uvtw__handle_open(handle) ||
      (uintptr_t)p + offsetof(uvtw_wheel_t, async) != (uintptr_t)handle)
    return;
  w->peer = p->peer;
  p->peer = w;
}

static void leave_peers(uvtw_wheel_t *w) {
  uvtw_wheel_t *p = w;
  while (p->peer != w)
    p = p->peer;
  p->peer = w->peer;
  w->peer = w;
}

int uvtw_wheel_new(uv_loop_t *loop, const uvtw_options_t *opts, uvtw_wheel_t **out) {
  uvtw_options_t o = {0};
  if (opts != NULL)
    o = *opts;
  static const uvtw_options_t defaults; /* all zero */
  if (loop == NULL || out == NULL || o.manual_clock > 1 ||
      memcmp(o.reserved, defaults.reserved, sizeof o.reserved) != 0)
    return UV_EINVAL;
  uvtw_wheel_t *w = calloc(1, sizeof *w);
  if (w == NULL)
    return UV_ENOMEM;
  uvtw__core_init(w, loop, o.tick_ms > 1 ? o.tick_ms : 1, o.manual_clock != 0);
  w->flags |= WHEEL_REF;
  w->peer = w;
  w->fire[0] = uvtw__timer_fire;
  w->fire[1] = uvtw__task_fire;
  w->pass_end = pass_end;
  int err = uvtw__tasks_open(w, o.max_pending);
  if (err == 0 && (err = uv_async_init(loop, &w->async, on_async)) != 0)
    uvtw__tasks_release(w->shared);
  if (err != 0) {
    free(w);
    return err;
  }
  uv_timer_init(loop, &w->timer);
  uv_prepare_init(loop, &w->prepare);
  uv_unref((uv_handle_t *)&w->prepare);
  w->timer.data = w->async.data = w->prepare.data = w;
  w->open_handles = WHEEL_HANDLES;
  uv_walk(loop, find_peer, w);
  uvtw__update_refs(w);
  uv_async_send(&w->async); /* the loop's first iteration runs on_async */
  *out = w;
  return 0;
}

static void on_handle_closed(uv_handle_t *handle) {
  uvtw_wheel_t *w = handle->data;
  if (--w->open_handles == 0)
    finish_close(w);
}

/* Closes a handle of the wheel, unless the program did: then it is closed
 * already, and its loop may be too, so neither is touched again. */
static void close_handle(uvtw_wheel_t *w, uv_handle_t *handle) {
  if (!uvtw__handle_open(handle))
    w->open_handles--;
  else
    uv_close(handle, on_handle_closed);
}

void uvtw_wheel_close(uvtw_wheel_t *w, uvtw_close_cb cb, void *arg) {
  if (w == NULL || uvtw__closing(w))
    return;
  bool in_pass = uvtw__in_pass(w);
  w->flags |= WHEEL_CLOSING;
  leave_peers(w);
  w->close_cb = cb;
  w->close_arg = arg;
  /* Every timer becomes inactive before any task runs with UV_ECANCELED
   * (uvtw__core_close); then the queued tasks end, then those in the
   * wheel, in deadline order. */
  uvtw__core_close(w);
  uvtw__tasks_close(w);
  uvtw__fire_expired(w); /* closing: the tasks' callbacks get UV_ECANCELED */
  close_handle(w, (uv_handle_t *)&w->timer);
  close_handle(w, (uv_handle_t *)&w->async);
  close_handle(w, (uv_handle_t *)&w->prepare);
  /* All three closed by the program: done now, or where the pass ends. */
  if (w->open_handles == 0 && !in_pass)
    finish_close(w);
}

uv_loop_t *uvtw_wheel_loop(const uvtw_wheel_t *w) {
  return w->loop;
}

void uvtw_wheel_ref(uvtw_wheel_t *w) {
  w->flags |= WHEEL_REF;
  uvtw__update_refs(w);
}

void uvtw_wheel_unref(uvtw_wheel_t *w) {
  w->flags &= ~(unsigned)WHEEL_REF;
  uvtw__update_refs(w);
}

int64_t uvtw_wheel_next_due(const uvtw_wheel_t *w) {
  if (w->wheel.count == 0)
    return -1;
  uint64_t next = uvtw__wheel_next_deadline_exact(&w->wheel);
  if (next == UINT64_MAX)
    return INT64_MAX;
  uint64_t due = uvtw__ms_of(w, next);
  uint64_t now = uvtw__clock_ms(w);
  if (due <= now)
    return 0;
  return due - now > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)(due - now);
}

void uvtw_wheel_stats(const uvtw_wheel_t *w, uvtw_stats_t *out) {
  *out = w->stats;
  out->started += w->wheel.next_seq; /* every start, repeat and task filed takes one */
  out->active = w->wheel.count;
  out->cascaded = w->wheel.cascaded;
  uvtw__tasks_stats(w, out);
}

const char *uvtw_version_string(void) {
  return UVTW_VERSION_STRING;
}

/* ---- the invariant checker (-Dchecks) ---------------------------------------- */

#ifdef UVTW_CHECKS
/* GCOVR_EXCL_START: the checker's failing branches run only on a broken library. */

/* The pending entries of one list, counted into c[]: entries, unrefs,
 * tasks, tasks cancelled in the wheel. */
static const char *check_list(const uvtw_wheel_t *w, const wheel_node_t *head, uint64_t c[4]) {
  for (const wheel_node_t *node = head->next; node != head; node = node->next) {
    const uvtw_timer_t *entry = container_of(node, uvtw_timer_t, node_);
    bool task = entry->wheel_ & ENTRY_TASK;
    INVARIANT(uvtw__wheel_of(entry) == w, "an entry is filed in another wheel");
    /* armed_at is no later than any deadline, but where entries are held back */
    INVARIANT(w->arming == ARM_WAIT || w->arming == ARM_HELD || node->deadline >= w->armed_at,
              "an entry before armed_at");
    INVARIANT(!task || uvtw__task_check(entry, &c[3]), "a task in the wheel is not pending");
    INVARIANT(task || entry->cb_ != NULL, "a pending timer has no callback");
    c[0]++, c[1] += (entry->wheel_ & ENTRY_UNREF) != 0, c[2] += task;
  }
  return NULL;
}

const char *uvtw__check(const uvtw_wheel_t *w) {
  int64_t linked = uvtw__tasks_linked(w); /* before the walk: see uvtw__tasks_check */
  const char *error = uvtw__wheel_check(&w->wheel);
  uint64_t c[4] = {0};
  if (error == NULL)
    error = check_list(w, &w->wheel.expired, c);
  for (unsigned i = 0; i < WHEEL_SLOT_COUNT && error == NULL; i++)
    error = check_list(w, &w->wheel.slots[i], c);
  if (error != NULL)
    return error;
  INVARIANT(c[0] == w->wheel.count && c[1] == w->unrefs, "the counts disagree with the lists");
  /* Closing: nothing left, out of the ring, IDLE (a pass it closed in is
   * over), the handles closing (not checked). */
  INVARIANT(!uvtw__closing(w) || (c[0] == 0 && w->peer == w && w->arming == ARM_IDLE),
            "a closed wheel holds on");
  /* Handles the program closed (a uv_walk) are not checked: they are left alone. */
  bool open = uvtw__handle_open(&w->timer) && uvtw__handle_open(&w->async) &&
              uvtw__handle_open(&w->prepare);
  if (!uvtw__closing(w) && open) {
    INVARIANT(w->open_handles == WHEEL_HANDLES, "an open wheel counts a handle closed");
    if ((error = uvtw__arming_check(w)) != NULL)
      return error;
    /* The handles keep the loop alive as a referenced uv_timer_t would, and
     * before the loop's first iteration for the tasks queued; the
     * uv_prepare_t never. */
    bool may_keep_alive = (w->flags & (WHEEL_REF | WHEEL_MANUAL)) == WHEEL_REF;
    INVARIANT(uv_has_ref((const uv_handle_t *)&w->timer) == (may_keep_alive && c[0] > c[1]),
              "the uv_timer_t's reference disagrees with the referenced entries");
    INVARIANT(uv_has_ref((const uv_handle_t *)&w->async) ==
                  (may_keep_alive && !(w->flags & WHEEL_LOOP_RAN)),
              "the uv_async_t's reference is wrong");
    INVARIANT(!uv_has_ref((const uv_handle_t *)&w->prepare), "the uv_prepare_t is referenced");
    INVARIANT(w->wheel.now <= uvtw__now_ticks(w), "the wheel's time is ahead of its clock");
    for (const uvtw_wheel_t *p = w->peer; p != w; p = p->peer) /* the open wheels of one loop */
      INVARIANT(p->loop == w->loop && !uvtw__closing(p),
                "the ring holds a closed or foreign wheel");
  }
  return uvtw__tasks_check(w, linked, c[2], c[3]);
}
/* GCOVR_EXCL_STOP */
#endif
