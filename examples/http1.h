/* http1: HTTP/1 on the wire for the example server. Requests are parsed by
 * llhttp (Node's own parser) under the server's rules: the limits of a
 * request and the status code each breach gets, Expect: 100-continue, the
 * path a request is routed by. Responses are written out whole. It knows
 * nothing of sockets or timers: the connection (http_conn.c) feeds it
 * bytes, acts on what it reports, and sends what it formats. */
#ifndef UVTW_EXAMPLES_HTTP1_H
#define UVTW_EXAMPLES_HTTP1_H

#include <stddef.h>
#include <stdint.h>

#include <llhttp.h>

#define HTTP_URL_MAX 64    /* a longer path matches no route */
#define HTTP_VALUE_MAX 272 /* Host, Expect, Transfer-Encoding: a longer one is invalid */

typedef struct http_limits_s {
  uint64_t max_header_size;   /* bytes of the head on the wire (431 beyond), then with them of a
                                 body's chunk extensions and trailers (413 beyond) */
  uint64_t max_headers_count; /* 431 beyond */
  uint64_t max_body_size;     /* bytes, at most UINT32_MAX; 413 beyond (417 with 100-continue) */
} http_limits_t;

enum http_parse_result {
  HTTP_PARSE_MORE,  /* every byte was taken; the request is not complete */
  HTTP_PARSE_DONE,  /* a request is complete; bytes after it were not taken */
  HTTP_PARSE_ERROR, /* error_status says how to answer; then close */
};

/* What happened in the last http_parse call, besides its result. */
enum { HTTP_BEGUN = 1, HTTP_HEAD_DONE = 2, HTTP_DONE = 4 };

typedef struct http_request_s {
  llhttp_t parser;
  const http_limits_t *limits;
  uint64_t head_bytes; /* of the current head, on the wire */
  uint64_t framing;    /* of the current body: chunk extensions and trailers */
  uint32_t header_count;
  uint32_t body_bytes;    /* data */
  uint16_t error_status;  /* with HTTP_PARSE_ERROR: 400, 413, 417 or 431 */
  uint8_t events;         /* HTTP_BEGUN, HTTP_HEAD_DONE, HTTP_DONE: set by http_parse */
  uint8_t method;         /* llhttp_method_t, once the head is done */
  uint8_t keep_alive;     /* once done: the connection may carry another request */
  uint8_t wants_continue; /* once the head is done: send 100 Continue before the body */
  uint8_t url_len;
  uint8_t url_flags;          /* HTTP_URL_TRUNCATED, and while parsing, skipping an authority */
  uint8_t expect;             /* none, 100-continue, or another expectation (417) */
  uint8_t head_done;          /* the head is parsed: the body's bytes follow */
  uint8_t field;              /* the header line being parsed, if one the server reads */
  uint8_t name_len;           /* of the current header name, at most 255 */
  uint16_t value_len;         /* of the value kept, HTTP_VALUE_MAX + 1: longer */
  uint8_t hosts;              /* Host lines seen */
  uint8_t lengths;            /* Content-Length lines seen */
  uint8_t codings;            /* Transfer-Encoding lines seen */
  uint8_t coding;             /* what they said: CODING_EMPTY, CODING_OTHER bits */
  char name[20];              /* the current header name, lowercased, its first bytes */
  char value[HTTP_VALUE_MAX]; /* the value of a header the server reads */
  char url[HTTP_URL_MAX];     /* the path and query, an absolute form's authority left out */
} http_request_t;

enum { HTTP_URL_TRUNCATED = 1 };

void http_request_init(http_request_t *request, const http_limits_t *limits);

/* Parses up to the end of one request; *used: the bytes taken. */
enum http_parse_result http_parse(http_request_t *request, const char *data, size_t len,
                                  size_t *used);

/* The bytes a client pipelined while a request is answered: [off, len) of
 * data, cap allocated. */
typedef struct http_pipeline_s {
  char *data;
  uint32_t len, off, cap;
} http_pipeline_t;

/* Appends, dropping what was parsed first; *grown: bytes newly allocated.
 * Returns 0, or -1 without memory. */
int http_pipeline_keep(http_pipeline_t *p, const char *data, size_t len, size_t *grown);
void http_pipeline_free(http_pipeline_t *p); /* gives back p->cap bytes */

/* The reason phrase of an error status the server sends, or NULL. */
const char *http_reason(int status);

/* Formats a response into `out` (of `size` bytes, enough for the head and
 * the body: http_response_size): the status line, Content-Type,
 * Content-Length (body_len, sent or not), the lines in `extra` (each ending
 * in CRLF), Connection, the body if `send_body`. Returns its length. */
size_t http_response_size(const char *reason, const char *type, const char *extra, size_t body_len);
size_t http_response_format(char *out, size_t size, int status, const char *reason,
                            const char *type, const char *extra, const char *body, size_t body_len,
                            int send_body, int close, uint64_t keep_alive_timeout);

#endif
