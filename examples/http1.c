/* http1: see http1.h. The head's size counts the bytes llhttp hands to
 * the callbacks (method, URL, version, header names and values); the
 * body's, the bytes of on_body. One request at a time: the parser pauses
 * at the end of each, so that the bytes after it wait until the request is
 * answered. */
#include "http1.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { URL_SKIP_AUTHORITY = 2 };
enum { EXPECT_NONE, EXPECT_CONTINUE, EXPECT_OTHER };

static http_request_t *request_of(llhttp_t *p) {
  return p->data;
}

/* Counts the bytes of the head; beyond the limit the request gets 431. */
static int head_grow(http_request_t *r, size_t len) {
  r->head_bytes += (uint32_t)(len < UINT32_MAX - r->head_bytes ? len : UINT32_MAX - r->head_bytes);
  if (r->head_bytes > r->limits->max_header_size) {
    r->error_status = 431;
    return HPE_USER;
  }
  return 0;
}

static int on_message_begin(llhttp_t *p) {
  http_request_t *r = request_of(p);
  r->url_len = 0;
  r->url[0] = '\0';
  r->url_flags = 0;
  r->head_bytes = 0;
  r->header_count = 0;
  r->body_bytes = 0;
  r->expect = EXPECT_NONE;
  r->expect_field = 0;
  r->expect_value = 0;
  r->wants_continue = 0;
  r->error_status = 0;
  r->events |= HTTP_BEGUN;
  return 0;
}

static int on_method(llhttp_t *p, const char *at, size_t len) {
  (void)at;
  return head_grow(request_of(p), len);
}

/* Keeps the path (an absolute-form target, "http://host/path", routes by its
 * path); a URL longer than HTTP_URL_MAX matches no route. */
static int on_url(llhttp_t *p, const char *at, size_t len) {
  http_request_t *r = request_of(p);
  static const char http[] = "http://", https[] = "https://";
  for (size_t i = 0; i < len; i++) {
    char ch = at[i];
    if (r->url_flags & URL_SKIP_AUTHORITY) {
      if (ch != '/')
        continue;
      r->url_flags &= (uint8_t)~URL_SKIP_AUTHORITY;
    }
    if (r->url_len == HTTP_URL_MAX - 1) {
      r->url_flags |= HTTP_URL_TRUNCATED;
      break;
    }
    r->url[r->url_len++] = ch;
    r->url[r->url_len] = '\0';
    if (strcmp(r->url, http) == 0 || strcmp(r->url, https) == 0) {
      r->url_len = 0;
      r->url[0] = '\0';
      r->url_flags |= URL_SKIP_AUTHORITY;
    }
  }
  return head_grow(r, len);
}

static int on_version(llhttp_t *p, const char *at, size_t len) {
  (void)at;
  return head_grow(request_of(p), len);
}

/* Matches `s` against `word` incrementally, case-insensitively; *pos is the
 * length matched so far, 0xff once it cannot match. */
static void match_word(uint8_t *pos, const char *word, size_t word_len, const char *s, size_t len) {
  for (size_t i = 0; i < len && *pos != 0xff; i++) {
    char ch = s[i];
    if (ch >= 'A' && ch <= 'Z')
      ch = (char)(ch - 'A' + 'a');
    if (*pos >= word_len || word[*pos] != ch)
      *pos = 0xff;
    else
      (*pos)++;
  }
}

static const char expect_name[] = "expect", expect_continue[] = "100-continue";

static int on_header_field(llhttp_t *p, const char *at, size_t len) {
  http_request_t *r = request_of(p);
  match_word(&r->expect_field, expect_name, sizeof expect_name - 1, at, len);
  return head_grow(r, len);
}

static int on_header_field_complete(llhttp_t *p) {
  http_request_t *r = request_of(p);
  if (++r->header_count > r->limits->max_headers_count) {
    r->error_status = 431;
    return HPE_USER;
  }
  return 0;
}

static int on_header_value(llhttp_t *p, const char *at, size_t len) {
  http_request_t *r = request_of(p);
  if (r->expect_field == sizeof expect_name - 1)
    match_word(&r->expect_value, expect_continue, sizeof expect_continue - 1, at, len);
  return head_grow(r, len);
}

static int on_header_value_complete(llhttp_t *p) {
  http_request_t *r = request_of(p);
  if (r->expect_field == sizeof expect_name - 1)
    r->expect = r->expect_value == sizeof expect_continue - 1 ? EXPECT_CONTINUE : EXPECT_OTHER;
  r->expect_field = 0;
  r->expect_value = 0;
  return 0;
}

static int on_headers_complete(llhttp_t *p) {
  http_request_t *r = request_of(p);
  int has_body = (p->flags & F_CHUNKED) || p->content_length > 0;
  r->events |= HTTP_HEAD_DONE;
  r->method = p->method;
  /* Upgrade is ignored (RFC 9110 7.8 allows it): the request is answered as
   * HTTP/1.1. A CONNECT is answered 405 once it is complete. */
  p->upgrade = 0;
  if (r->expect == EXPECT_OTHER) {
    r->error_status = 417; /* as Node: an expectation it cannot meet */
    return HPE_USER;
  }
  if (p->content_length > r->limits->max_body_size) {
    r->error_status = r->expect == EXPECT_CONTINUE ? 417 : 413;
    return HPE_USER;
  }
  r->wants_continue = (uint8_t)(r->expect == EXPECT_CONTINUE && has_body && p->http_major == 1 &&
                                p->http_minor >= 1);
  return 0;
}

static int on_body(llhttp_t *p, const char *at, size_t len) {
  http_request_t *r = request_of(p);
  (void)at;
  if (len > r->limits->max_body_size - r->body_bytes) {
    r->error_status = 413;
    return HPE_USER;
  }
  r->body_bytes += (uint32_t)len;
  return 0;
}

static int on_message_complete(llhttp_t *p) {
  http_request_t *r = request_of(p);
  r->keep_alive = (uint8_t)llhttp_should_keep_alive(p);
  if (r->url_flags & URL_SKIP_AUTHORITY) { /* "http://host" alone: the root */
    r->url[0] = '/';
    r->url[1] = '\0';
    r->url_len = 1;
  }
  return HPE_PAUSED; /* one request at a time */
}

static const llhttp_settings_t settings = {
    .on_message_begin = on_message_begin,
    .on_method = on_method,
    .on_url = on_url,
    .on_version = on_version,
    .on_header_field = on_header_field,
    .on_header_field_complete = on_header_field_complete,
    .on_header_value = on_header_value,
    .on_header_value_complete = on_header_value_complete,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

void http_request_init(http_request_t *r, const http_limits_t *limits) {
  memset(r, 0, sizeof *r);
  llhttp_init(&r->parser, HTTP_REQUEST, &settings);
  r->parser.data = r;
  r->limits = limits;
}

enum http_parse_result http_parse(http_request_t *r, const char *data, size_t len, size_t *used) {
  llhttp_errno_t e;
  r->events = 0;
  e = llhttp_execute(&r->parser, data, len);
  if (e == HPE_OK) {
    *used = len;
    return HTTP_PARSE_MORE;
  }
  if (e == HPE_PAUSED) {
    *used = (size_t)(llhttp_get_error_pos(&r->parser) - data);
    llhttp_resume(&r->parser);
    return HTTP_PARSE_DONE;
  }
  if (r->error_status == 0)
    r->error_status = 400;
  return HTTP_PARSE_ERROR;
}

const char *http_reason(int status) {
  switch (status) {
  case 400:
    return "Bad Request";
  case 405:
    return "Method Not Allowed";
  case 408:
    return "Request Timeout";
  case 413:
    return "Payload Too Large";
  case 417:
    return "Expectation Failed";
  case 431:
    return "Request Header Fields Too Large";
  default:
    return NULL;
  }
}

static const char head_format[] = "HTTP/1.1 %d %s\r\n"
                                  "Content-Type: %s\r\n"
                                  "Content-Length: %zu\r\n"
                                  "%sConnection: %s\r\n"
                                  "%s\r\n";

size_t http_response_size(const char *reason, const char *type, const char *extra,
                          size_t body_len) {
  static const char keep_alive[] = "keep-alive", timeout[] = "Keep-Alive: timeout=\r\n";
  return sizeof head_format + 3 + 20 + strlen(reason) + strlen(type) + strlen(extra) +
         sizeof keep_alive + sizeof timeout + 20 + body_len;
}

size_t http_response_format(char *out, size_t size, int status, const char *reason,
                            const char *type, const char *extra, const char *body, size_t body_len,
                            int send_body, int close, uint64_t keep_alive_timeout) {
  char timeout[48] = "";
  size_t n;
  if (!close && keep_alive_timeout > 0) /* what a client may count on, as Node says it */
    snprintf(timeout, sizeof timeout, "Keep-Alive: timeout=%" PRIu64 "\r\n",
             keep_alive_timeout / 1000);
  n = (size_t)snprintf(out, size, head_format, status, reason, type, body_len, extra,
                       close ? "close" : "keep-alive", timeout);
  if (send_body) {
    memcpy(out + n, body, body_len);
    n += body_len;
  }
  return n;
}

int http_pipeline_keep(http_pipeline_t *p, const char *data, size_t len, size_t *grown) {
  *grown = 0;
  if (p->off > 0) {
    memmove(p->data, p->data + p->off, p->len - p->off);
    p->len -= p->off;
    p->off = 0;
  }
  if (p->len + len > p->cap) {
    char *more = realloc(p->data, p->len + len);
    if (more == NULL)
      return -1;
    *grown = p->len + len - p->cap;
    p->cap = (uint32_t)(p->len + len);
    p->data = more;
  }
  memcpy(p->data + p->len, data, len);
  p->len += (uint32_t)len;
  return 0;
}

void http_pipeline_free(http_pipeline_t *p) {
  free(p->data);
  p->data = NULL;
  p->len = p->off = p->cap = 0;
}
