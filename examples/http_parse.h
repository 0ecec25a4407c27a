/* http_parse: the example server's HTTP/1 parsing rules on llhttp (Node's
 * own parser): the limits of a request and the status code each breach
 * gets, Expect: 100-continue, and the path a request is routed by. It knows
 * nothing of sockets or timers: the connection (http_conn.c) feeds it bytes
 * and acts on what it reports. */
#ifndef UVTW_EXAMPLES_HTTP_PARSE_H
#define UVTW_EXAMPLES_HTTP_PARSE_H

#include <stddef.h>
#include <stdint.h>

#include <llhttp.h>

#define HTTP_URL_MAX 64 /* a longer path matches no route */

typedef struct http_limits_s {
  uint64_t max_header_size;   /* bytes of the head; 431 beyond */
  uint64_t max_headers_count; /* 431 beyond */
  uint64_t max_body_size;     /* bytes, at most UINT32_MAX; 413 beyond (417 with 100-continue) */
} http_limits_t;

enum http_parse_result {
  HTTP_PARSE_MORE,  /* every byte was taken; the request is not complete */
  HTTP_PARSE_DONE,  /* a request is complete; bytes after it were not taken */
  HTTP_PARSE_ERROR, /* error_status says how to answer; then close */
};

/* What happened in the last http_parse call, besides its result. */
enum { HTTP_BEGUN = 1, HTTP_HEAD_DONE = 2 };

typedef struct http_request_s {
  llhttp_t parser;
  const http_limits_t *limits;
  uint32_t head_bytes; /* of the current head */
  uint32_t header_count;
  uint32_t body_bytes;
  uint16_t error_status;  /* with HTTP_PARSE_ERROR: 400, 413, 417 or 431 */
  uint8_t events;         /* HTTP_BEGUN, HTTP_HEAD_DONE: set by http_parse */
  uint8_t method;         /* llhttp_method_t, once the head is done */
  uint8_t keep_alive;     /* once done: the connection may carry another request */
  uint8_t wants_continue; /* once the head is done: send 100 Continue before the body */
  uint8_t url_len;
  uint8_t url_flags;      /* HTTP_URL_TRUNCATED, and while parsing, skipping an authority */
  uint8_t expect_field;   /* matched length of "expect" in the header name; 0xff: no */
  uint8_t expect_value;   /* matched length of "100-continue" in its value; 0xff: no */
  uint8_t expect;         /* none, 100-continue, or another expectation (417) */
  char url[HTTP_URL_MAX]; /* the path and query, an absolute form's authority left out */
} http_request_t;

enum { HTTP_URL_TRUNCATED = 1 };

void http_request_init(http_request_t *request, const http_limits_t *limits);

/* Parses up to the end of one request; *used: the bytes taken. */
enum http_parse_result http_parse(http_request_t *request, const char *data, size_t len,
                                  size_t *used);

#endif
