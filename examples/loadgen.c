/* loadgen: the clients (see loadgen.h; the server under test: lg_server.c). */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include "loadgen.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MS 1000000ull

const char *const lg_kind_names[LG_KINDS] = {"good keep-alive", "idle keep-alive", "silent",
                                             "slowloris",       "slow body",       "delay+abort"};

enum client_state {
  CS_WAITING, /* not connected yet */
  CS_CONNECTING,
  CS_ACTIVE,
  CS_CLOSING, /* uv_close called on its handles */
  CS_DONE
};

struct lg_client_s {
  uv_tcp_t tcp;
  uv_timer_t timer;
  uv_connect_t connect_req;
  lg_t *lg;
  char *stats_out; /* a /stats fetch not yet answered: where its line goes */
  size_t stats_size;
  uint8_t is_fetch; /* a /stats fetch, not one of the run's clients */
  uint8_t kind;
  uint8_t state;
  uint8_t half_sent; /* good: the first half of a split head is out */
  int handles_open;
  uint32_t rlen;
  uint64_t t_connect, t_connected, t_sent, t_response;
  char path[48];
  char rbuf[3072];
};

static uint64_t rng_next(lg_t *lg) {
  uint64_t x = lg->rng; /* xorshift64 */
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return lg->rng = x;
}

static uint64_t rng_upto(lg_t *lg, uint64_t max) {
  return max == 0 ? 0 : rng_next(lg) % (max + 1);
}

static lg_kind_stats_t *stats_of(lg_client_t *c) {
  return c->is_fetch ? NULL : &c->lg->kind[c->kind];
}

typedef struct send_req_s {
  uv_write_t req;
  char data[];
} send_req_t;

static void client_hang_up(lg_client_t *c);

static void on_sent(uv_write_t *req, int status) {
  (void)status; /* a failed write shows up as a read error */
  free(container_of(req, send_req_t, req));
}

static void client_send(lg_client_t *c, const char *data, size_t len) {
  send_req_t *w = malloc(sizeof *w + len);
  uv_buf_t buf;
  if (w == NULL) {
    client_hang_up(c);
    return;
  }
  memcpy(w->data, data, len);
  buf = uv_buf_init(w->data, (unsigned)len);
  if (uv_write(&w->req, (uv_stream_t *)&c->tcp, &buf, 1, on_sent) != 0) {
    free(w);
    client_hang_up(c);
  }
}

static void client_connect_next(lg_t *lg, int repeats);
static void client_start_connect(lg_client_t *c);

static void on_tick_closed(uv_handle_t *handle) {
  lg_t *lg = handle->data;
  lg->tick_closed = 1;
}

/* The run is over when every client is done and every fetch answered. The
 * loop may hold other handles (the server process): stop it explicitly. */
static void check_finished(lg_t *lg) {
  if (lg->done == lg->count && lg->extra_open == 0 && !uv_is_closing((uv_handle_t *)&lg->tick)) {
    uv_close((uv_handle_t *)&lg->tick, on_tick_closed);
    uv_stop(lg->loop);
  }
}

/* Writes the /stats line (NULL: failed) where the fetch wants it, once. */
static void fetch_answer(lg_client_t *c, const char *line) {
  if (c->stats_out != NULL)
    snprintf(c->stats_out, c->stats_size, "%s", line != NULL ? line : "");
  c->stats_out = NULL;
}

static void on_client_closed(uv_handle_t *handle) {
  lg_client_t *c = handle->data;
  lg_t *lg = c->lg;
  if (--c->handles_open > 0)
    return;
  if (c->is_fetch) {
    fetch_answer(c, NULL);
    free(c);
    lg->extra_open--;
    check_finished(lg);
    return;
  }
  if (lg->config.repeat && c->kind != LG_GOOD && !lg->stopping && !lg->over) {
    c->state = CS_WAITING; /* back in line for another connection */
    if (lg->connecting < lg->config.connects_in_flight)
      client_start_connect(c);
    return;
  }
  c->state = CS_DONE;
  lg->done++;
  check_finished(lg);
}

/* Closes the connection; `by_server` says who ended it. */
static void client_close(lg_client_t *c, int by_server) {
  lg_kind_stats_t *ks = stats_of(c);
  uint64_t now = uv_hrtime();
  if (c->state == CS_CLOSING || c->state == CS_DONE)
    return;
  if (ks != NULL && c->state == CS_ACTIVE) {
    ks->open--;
    c->lg->open--;
    if (by_server) {
      uint64_t lower_ref = c->kind == LG_IDLE ? c->t_sent : c->t_connect;
      uint64_t upper_ref = c->kind == LG_IDLE ? c->t_response : c->t_connected;
      ks->closed_by_server++;
      if (lower_ref != 0 && now - lower_ref < ks->lower_min_ns)
        ks->lower_min_ns = now - lower_ref;
      if (upper_ref != 0 && now - upper_ref > ks->upper_max_ns)
        ks->upper_max_ns = now - upper_ref;
    } else {
      ks->closed_by_client++;
    }
  }
  c->state = CS_CLOSING;
  c->handles_open = 2;
  /* A hang-up client resets the connection: a plain close sends only a FIN,
   * which the server takes for a half-close and still answers. */
  if (c->kind != LG_DELAY_ABORT || by_server || uv_tcp_close_reset(&c->tcp, on_client_closed) != 0)
    uv_close((uv_handle_t *)&c->tcp, on_client_closed);
  uv_close((uv_handle_t *)&c->timer, on_client_closed);
}

static void client_hang_up(lg_client_t *c) {
  client_close(c, 0);
}

/* Good clients: one request, its head sometimes split in two writes. */
static void good_send_request(lg_client_t *c);

static void on_good_timer(uv_timer_t *timer) {
  lg_client_t *c = timer->data;
  if (c->half_sent) {
    static const char rest[] = "User-Agent: uvtw-loadgen\r\n\r\n";
    c->half_sent = 0;
    client_send(c, rest, sizeof rest - 1);
    c->t_sent = uv_hrtime();
    return;
  }
  if (c->lg->stopping)
    client_hang_up(c);
  else
    good_send_request(c);
}

static void good_send_request(lg_client_t *c) {
  lg_t *lg = c->lg;
  char head[160];
  int n;
  if (lg->config.delay_max_ms > 0 && rng_upto(lg, 3) == 0)
    snprintf(c->path, sizeof c->path, "/delay?ms=%llu",
             (unsigned long long)rng_upto(lg, lg->config.delay_max_ms));
  else
    snprintf(c->path, sizeof c->path, "/");
  n = snprintf(head, sizeof head, "GET %s HTTP/1.1\r\nHost: %s\r\n", c->path, lg->config.host);
  if (rng_upto(lg, 2) == 0) { /* split: the rest after a pause */
    client_send(c, head, (size_t)n);
    c->half_sent = 1;
    uv_timer_start(&c->timer, on_good_timer, rng_upto(lg, lg->config.split_gap_max_ms), 0);
  } else {
    n += snprintf(head + n, sizeof head - (size_t)n, "User-Agent: uvtw-loadgen\r\n\r\n");
    client_send(c, head, (size_t)n);
    c->t_sent = uv_hrtime();
  }
}

static void on_trickle(uv_timer_t *timer) {
  lg_client_t *c = timer->data;
  if (c->kind == LG_SLOWLORIS)
    client_send(c, "X-Slow: 1\r\n", 11);
  else
    client_send(c, "x", 1);
}

static void on_abort_timer(uv_timer_t *timer) {
  client_hang_up(timer->data);
}

/* A complete response arrived. */
static void on_response(lg_client_t *c, int status, const char *body, size_t body_len) {
  lg_kind_stats_t *ks = stats_of(c);
  lg_t *lg = c->lg;
  c->t_response = uv_hrtime();
  if (c->is_fetch) {
    char line[4096];
    size_t n = body_len < sizeof line - 1 ? body_len : sizeof line - 1;
    memcpy(line, body, n);
    line[n] = '\0';
    if (n > 0 && line[n - 1] == '\n')
      line[n - 1] = '\0';
    fetch_answer(c, status == 200 ? line : NULL);
    client_hang_up(c);
    return;
  }
  ks->responses++;
  if (status == 408)
    ks->status_408++;
  if (status != 200)
    ks->bad_status++;
  if (c->kind == LG_GOOD) {
    if (lg->stopping)
      client_hang_up(c);
    else
      uv_timer_start(&c->timer, on_good_timer, rng_upto(lg, lg->config.think_max_ms), 0);
  }
}

/* Parses responses out of rbuf: our server always sends Content-Length. */
static void parse_responses(lg_client_t *c) {
  for (;;) {
    char *end = NULL, *cl;
    size_t head_len, total;
    long length = 0;
    int status = 0;
    c->rbuf[c->rlen] = '\0';
    end = strstr(c->rbuf, "\r\n\r\n");
    if (end == NULL)
      return;
    head_len = (size_t)(end - c->rbuf) + 4;
    sscanf(c->rbuf, "HTTP/1.%*d %d", &status);
    cl = strstr(c->rbuf, "Content-Length:"); /* our server spells it so */
    if (cl != NULL && cl < end)
      length = atol(cl + 15);
    total = head_len + (size_t)length;
    if (total > sizeof c->rbuf - 1) { /* not ours to parse */
      c->rlen = 0;
      return;
    }
    if (c->rlen < total)
      return;
    on_response(c, status, c->rbuf + head_len, (size_t)length);
    if (c->state != CS_ACTIVE)
      return;
    memmove(c->rbuf, c->rbuf + total, c->rlen - total);
    c->rlen -= (uint32_t)total;
  }
}

static void on_client_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buf) {
  lg_client_t *c = handle->data;
  (void)suggested;
  if (c->rlen >= sizeof c->rbuf - 1)
    c->rlen = 0; /* garbage: drop it */
  *buf = uv_buf_init(c->rbuf + c->rlen, (unsigned)(sizeof c->rbuf - 1 - c->rlen));
}

static void on_client_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf) {
  lg_client_t *c = stream->data;
  (void)buf;
  if (nread < 0) {
    client_close(c, 1);
    return;
  }
  c->rlen += (uint32_t)nread;
  parse_responses(c);
}

/* What each kind sends once connected (good clients: good_send_request);
 * the Host is the server's address. */
static const char stats_request[] = "GET /stats HTTP/1.1\r\nHost: %s\r\n\r\n";
static const char *const first_request[LG_KINDS] = {
    [LG_IDLE] = "GET / HTTP/1.1\r\nHost: %s\r\n\r\n",
    [LG_SLOWLORIS] = "GET / HTTP/1.1\r\nHost: %s\r\n",
    [LG_SLOW_BODY] = "POST /upload HTTP/1.1\r\nHost: %s\r\nContent-Length: 100000\r\n\r\n",
    [LG_DELAY_ABORT] = "GET /delay?ms=5000 HTTP/1.1\r\nHost: %s\r\n\r\n"};

static void on_connected(uv_connect_t *req, int status) {
  lg_client_t *c = req->data;
  lg_t *lg = c->lg;
  lg_kind_stats_t *ks = stats_of(c);
  char head[160];
  int n;
  if (!c->is_fetch) {
    lg->connecting--;
    client_connect_next(lg, 0);
  }
  if (c->state != CS_CONNECTING)
    return; /* hung up meanwhile */
  if (status < 0) {
    if (ks != NULL)
      ks->connect_errors++;
    client_hang_up(c);
    return;
  }
  c->t_connected = uv_hrtime();
  c->state = CS_ACTIVE;
  if (ks != NULL) {
    ks->connections++;
    if (++ks->open > ks->open_peak)
      ks->open_peak = ks->open;
    if (++lg->open > lg->open_peak)
      lg->open_peak = lg->open;
  }
  uv_read_start((uv_stream_t *)&c->tcp, on_client_alloc, on_client_read);
  if (c->kind == LG_GOOD && ks != NULL) {
    good_send_request(c);
    return;
  }
  if (ks == NULL || first_request[c->kind] != NULL) {
    n = snprintf(head, sizeof head, ks == NULL ? stats_request : first_request[c->kind],
                 lg->config.host);
    c->t_sent = uv_hrtime(); /* before the write: the server may answer before it returns */
    client_send(c, head, (size_t)n);
  }
  if (ks != NULL && (c->kind == LG_SLOWLORIS || c->kind == LG_SLOW_BODY))
    uv_timer_start(&c->timer, on_trickle, lg->config.trickle_ms, lg->config.trickle_ms);
  else if (ks != NULL && c->kind == LG_DELAY_ABORT)
    uv_timer_start(&c->timer, on_abort_timer, lg->config.abort_after_ms, 0);
}

static void client_start_connect(lg_client_t *c) {
  lg_t *lg = c->lg;
  struct sockaddr_in addr;
  int r;
  c->rlen = 0;
  c->half_sent = 0;
  c->t_connect = c->t_connected = c->t_sent = c->t_response = 0;
  uv_tcp_init(lg->loop, &c->tcp);
  uv_timer_init(lg->loop, &c->timer);
  c->tcp.data = c;
  c->timer.data = c;
  c->connect_req.data = c;
  c->state = CS_CONNECTING;
  if (!c->is_fetch)
    lg->connecting++;
  uv_ip4_addr(lg->config.host, lg->config.port, &addr);
  c->t_connect = uv_hrtime();
  r = uv_tcp_connect(&c->connect_req, &c->tcp, (const struct sockaddr *)&addr, on_connected);
  if (r != 0) {
    lg_kind_stats_t *ks = stats_of(c);
    if (!c->is_fetch)
      lg->connecting--;
    if (ks != NULL)
      ks->connect_errors++;
    client_hang_up(c);
  }
}

/* Starts connects while fewer than connects_in_flight are pending: first the
 * clients not yet started, then (if `repeats`: a scan, so only from the tick)
 * clients waiting to repeat. */
static void client_connect_next(lg_t *lg, int repeats) {
  size_t i;
  while (lg->connecting < lg->config.connects_in_flight && lg->next_to_connect < lg->count &&
         !lg->over)
    client_start_connect(&lg->clients[lg->next_to_connect++]);
  if (!repeats || !lg->config.repeat || lg->stopping || lg->over)
    return;
  for (i = 0; i < lg->next_to_connect && lg->connecting < lg->config.connects_in_flight; i++)
    if (lg->clients[i].state == CS_WAITING)
      client_start_connect(&lg->clients[i]);
}

static void on_tick(uv_timer_t *timer) {
  lg_t *lg = timer->data;
  uint64_t now = uv_hrtime();
  size_t i;
  if (!lg->stopping && now - lg->started_ns >= lg->config.stop_after_ms * MS) {
    lg->stopping = 1;
    for (i = 0; i < lg->count; i++) {
      lg_client_t *c = &lg->clients[i];
      if (c->state == CS_WAITING && c->kind != LG_GOOD && i < lg->next_to_connect) {
        c->state = CS_DONE; /* repeating client between connections */
        lg->done++;
      }
    }
  }
  if (!lg->over && now >= lg->deadline_ns) {
    lg->over = 1;
    for (i = 0; i < lg->count; i++) {
      lg_client_t *c = &lg->clients[i];
      if (c->state == CS_WAITING) {
        c->state = CS_DONE;
        lg->done++;
      } else {
        client_hang_up(c);
      }
    }
  }
  if (lg->config.repeat && !lg->stopping)
    client_connect_next(lg, 1);
  if (lg->on_tick != NULL && !lg->over)
    lg->on_tick(lg);
  check_finished(lg);
}

int lg_init(lg_t *lg, uv_loop_t *loop, const lg_config_t *config, const uint32_t *count_of) {
  size_t i, count = 0;
  uint8_t k;
  memset(lg, 0, sizeof *lg);
  for (k = 0; count_of != NULL && k < LG_KINDS; k++)
    count += count_of[k];
  lg->loop = loop;
  lg->config = *config;
  if (lg->config.connects_in_flight == 0)
    lg->config.connects_in_flight = 256;
  lg->rng = config->seed != 0 ? config->seed : 0x9e3779b97f4a7c15ull;
  lg->clients = calloc(count > 0 ? count : 1, sizeof *lg->clients);
  if (lg->clients == NULL)
    return UV_ENOMEM;
  lg->count = count;
  for (i = 0; i < LG_KINDS; i++)
    lg->kind[i].lower_min_ns = UINT64_MAX;
  for (i = 0, k = 0; i < count; i++) {
    while (lg->kind[k].clients == count_of[k]) /* the clients of each kind in turn */
      k++;
    lg->clients[i].lg = lg;
    lg->clients[i].kind = k;
    lg->clients[i].state = CS_WAITING;
    lg->kind[k].clients++;
  }
  uv_timer_init(loop, &lg->tick);
  lg->tick.data = lg;
  return 0;
}

void lg_fetch_stats(lg_t *lg, char *out, size_t size) {
  lg_client_t *c = calloc(1, sizeof *c);
  snprintf(out, size, "%s", "");
  if (c == NULL)
    return;
  c->lg = lg;
  c->is_fetch = 1;
  c->stats_out = out;
  c->stats_size = size;
  lg->extra_open++;
  client_start_connect(c);
}

int lg_run(lg_t *lg, uint64_t max_ms) {
  signal(SIGPIPE, SIG_IGN);
  lg->started_ns = uv_hrtime();
  lg->deadline_ns = lg->started_ns + max_ms * MS;
  uv_timer_start(&lg->tick, on_tick, 100, 100);
  client_connect_next(lg, 0);
  check_finished(lg);
  uv_run(lg->loop, UV_RUN_DEFAULT);
  while (!lg->tick_closed)
    uv_run(lg->loop, UV_RUN_NOWAIT);
  return lg->over ? UV_ETIMEDOUT : 0;
}

void lg_free(lg_t *lg) {
  free(lg->clients);
  lg->clients = NULL;
}

double lg_elapsed_ms(const lg_t *lg) {
  return (double)(uv_hrtime() - lg->started_ns) / 1e6;
}
