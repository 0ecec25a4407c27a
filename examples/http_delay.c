/* http_delay: GET /delay?ms=N (see http_routes.h).
 *
 * The request is complete on the loop thread; a worker thread of libuv's
 * pool renders the answer and schedules its sending with uvtw_schedule, the
 * one wheel call made from another thread: the task crosses to the loop
 * through the wheel's queue and runs there when due. Its ticket lets the
 * loop withdraw it (uvtw_ticket_cancel) if the connection closes first.
 *
 * A job is owned by the loop thread. Two things hold it: the thread pool,
 * from delay_start until delay_after_work, and the wheel, from delay_start
 * until the answer's task has run, or its cancel has won, or it is known
 * never to have been scheduled. delay_drop gives back one hold; the last
 * frees the job, in the one place that does. */
#include "http_routes.h" /* first: uvtw.h asks for the POSIX uv.h needs */

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct delay_job_s {
  uv_work_t work;
  http_server_t *server;    /* loop thread only */
  uvtw_wheel_t *wheel;      /* the server's: the worker schedules the answer on it */
  conn_t *conn;             /* loop thread only; NULL once answered or the connection closed */
  uint64_t delay_ms;        /* set before queueing; read by the worker */
  uint64_t requested_ns;    /* uv_hrtime() when the request was complete */
  uvtw_ticket_t *scheduled; /* written by the worker; the loop reads it in delay_after_work */
  int schedule_status;      /* likewise */
  uvtw_ticket_t *ticket;    /* loop thread: `scheduled`, once delay_after_work has run */
  int holds;                /* loop thread: 2, 1, then freed */
  size_t body_len;
  char body[64]; /* written by the worker before uvtw_schedule */
} delay_job_t;

/* Gives back `n` holds (0 to 2). */
static void delay_drop(delay_job_t *job, int n) {
  if ((job->holds -= n) > 0)
    return;
  if (job->ticket != NULL)
    uvtw_ticket_release(job->ticket); /* the only release of this ticket */
  free(job);
}

/* Sends the answer, if the connection still waits for it. */
static void delay_answer(delay_job_t *job, int status, const char *body, size_t len) {
  conn_t *c = job->conn;
  if (c == NULL)
    return;
  c->job = NULL;
  job->conn = NULL;
  conn_respond(c, status, status == 200 ? "OK" : "Service Unavailable", body, len, status != 200);
}

/* Withdraws the answer's task, once the connection is gone. Returns the
 * holds this gives back: the wheel's if the cancel won (one that loses
 * found the task run, which gave it back). */
static int delay_withdraw(delay_job_t *job) {
  if (uvtw_ticket_cancel(job->ticket) != 0)
    return 0;
  job->server->counters.delay_cancelled++;
  return 1;
}

/* Loop thread, when the deadline is due (status 0) or the wheel closed
 * (UV_ECANCELED). May run before or after delay_after_work. */
static void delay_due(void *arg, int status) {
  delay_job_t *job = arg;
  if (status == 0) {
    job->server->counters.delay_fired++;
    delay_answer(job, 200, job->body, job->body_len);
  } else {
    static const char closing[] = "shutting down\n";
    delay_answer(job, 503, closing, sizeof closing - 1);
  }
  delay_drop(job, 1); /* the wheel's hold */
}

/* Worker thread: renders the answer and puts its deadline on the wheel. The
 * deadline counts from the request, not from when the pool got to it. */
static void delay_work(uv_work_t *req) {
  delay_job_t *job = (delay_job_t *)req; /* its first member */
  uint64_t waited_ms = (uv_hrtime() - job->requested_ns) / 1000000;
  uint64_t left = job->delay_ms > waited_ms ? job->delay_ms - waited_ms : 0;
  int n = snprintf(job->body, sizeof job->body, "delayed %" PRIu64 " ms\n", job->delay_ms);
  job->body_len = (size_t)n < sizeof job->body ? (size_t)n : sizeof job->body - 1;
  job->schedule_status = uvtw_schedule(job->wheel, left, delay_due, job, &job->scheduled);
}

/* Loop thread, once delay_work returned (or was cancelled by uv_cancel). */
static void delay_after_work(uv_work_t *req, int status) {
  delay_job_t *job = (delay_job_t *)req;
  http_server_t *s = job->server;
  int back = 1; /* the pool's hold */
  s->counters.delay_in_flight--;
  if (status == UV_ECANCELED || job->schedule_status != 0) {
    static const char cannot[] = "cannot schedule\n";
    if (status == UV_ECANCELED)
      s->counters.delay_cancelled++; /* never ran: the connection is gone */
    else
      s->counters.delay_failed++;
    delay_answer(job, 503, cannot, sizeof cannot - 1);
    back++; /* and the wheel's: nothing was scheduled */
  } else {
    s->counters.delay_scheduled++;
    job->ticket = job->scheduled;
    if (job->conn == NULL)
      back += delay_withdraw(job); /* the connection closed, or the answer went, meanwhile */
  }
  delay_drop(job, back);
  s->released(s);
}

/* The connection is closing: its answer will never be sent. */
static void delay_abandon(void *arg) {
  delay_job_t *job = arg;
  job->conn = NULL;
  if (job->ticket == NULL)
    uv_cancel((uv_req_t *)&job->work); /* in the pool: delay_after_work withdraws it */
  else
    delay_drop(job, delay_withdraw(job));
}

void delay_start(conn_t *c, uint64_t ms) {
  http_server_t *s = c->server;
  delay_job_t *job = calloc(1, sizeof *job);
  int r;
  if (job == NULL) {
    conn_close(c, CLOSE_NO_MEMORY);
    return;
  }
  job->server = s;
  job->wheel = s->wheel;
  job->conn = c;
  job->delay_ms = ms;
  job->requested_ns = uv_hrtime();
  job->holds = 2;
  r = uv_queue_work(s->loop, &job->work, delay_work, delay_after_work);
  assert(r == 0); /* it fails only without a work callback */
  (void)r;
  s->counters.delay_in_flight++;
  c->job = job;
  c->abandon = delay_abandon;
}
