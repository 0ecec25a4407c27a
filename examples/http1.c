/* http1: see http1.h. Every byte a client sends counts against a limit as
 * it arrives, and framing is strict (examples/README.md, "Hostile
 * clients"): llhttp's strict mode (meson.build takes no lenient llhttp),
 * none of its lenient flags, and the server's own checks of the header
 * lines (on_headers_complete). The parser pauses at the end of each request. */
#include "http1.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { URL_SKIP_AUTHORITY = 2 };
enum { EXPECT_NONE, EXPECT_CONTINUE, EXPECT_OTHER };
/* The header lines the server reads; the others it only counts. */
enum { FIELD_OTHER, FIELD_HOST, FIELD_EXPECT, FIELD_CODING, FIELD_LENGTH };
enum { CODING_EMPTY = 1, CODING_OTHER = 2 }; /* besides exactly "chunked" */

static http_request_t *request_of(llhttp_t *p) {
  return p->data;
}

static int fail(http_request_t *r, uint16_t status) {
  r->error_status = status;
  return HPE_USER;
}

/* A chunk extension's or a trailer's bytes: counted with the head. */
static int framing(http_request_t *r, size_t len) {
  r->framing += len;
  return r->head_bytes + r->framing > r->limits->max_header_size ? fail(r, 413) : 0;
}

static int on_message_begin(llhttp_t *p) {
  http_request_t *r = request_of(p);
  r->url[0] = '\0';
  r->url_len = r->url_flags = 0;
  r->header_count = r->body_bytes = 0;
  r->hosts = r->lengths = r->codings = r->coding = 0;
  r->field = FIELD_OTHER;
  r->name_len = r->value_len = 0;
  r->expect = EXPECT_NONE;
  r->wants_continue = 0;
  r->error_status = 0;
  r->events |= HTTP_BEGUN;
  return 0;
}

/* HTTP/1.x only; a minor version above 1 is HTTP/1.1 (RFC 9112 2.3). */
static int on_version_complete(llhttp_t *p) {
  return p->http_major == 1 ? 0 : fail(request_of(p), 505);
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
  return 0;
}

static char lower(char ch) {
  return ch >= 'A' && ch <= 'Z' ? (char)(ch - 'A' + 'a') : ch;
}

/* `s` of `len` bytes is `word` (lowercase), case-insensitively. */
static int is_word(const char *s, size_t len, const char *word) {
  size_t i;
  if (len != strlen(word))
    return 0;
  for (i = 0; i < len && lower(s[i]) == word[i]; i++)
    ;
  return i == len;
}

static int on_header_field(llhttp_t *p, const char *at, size_t len) {
  http_request_t *r = request_of(p);
  if (r->head_done && framing(r, len) != 0)
    return HPE_USER; /* trailers */
  for (size_t i = 0; i < len && r->name_len < 255; i++, r->name_len++)
    if (r->name_len < sizeof r->name)
      r->name[r->name_len] = lower(at[i]);
  return 0;
}

static int on_header_field_complete(llhttp_t *p) {
  http_request_t *r = request_of(p);
  static const char *const names[] = {"", "host", "expect", "transfer-encoding", "content-length"};
  if (++r->header_count > r->limits->max_headers_count)
    return fail(r, 431);
  if (r->name_len == 0)
    return fail(r, 400); /* ": chunked": a name no one agrees on */
  r->field = FIELD_OTHER;
  for (uint8_t f = FIELD_HOST; f <= FIELD_LENGTH; f++)
    if (is_word(r->name, r->name_len, names[f])) /* each name fits in r->name */
      r->field = f;
  r->name_len = 0;
  r->value_len = 0;
  r->lengths += r->field == FIELD_LENGTH;
  if (r->field == FIELD_HOST && ++r->hosts > 1)
    return fail(r, 400); /* two Host lines */
  return 0;
}

static int on_header_value(llhttp_t *p, const char *at, size_t len) {
  http_request_t *r = request_of(p);
  if (r->head_done && framing(r, len) != 0)
    return HPE_USER; /* trailers */
  if (r->field == FIELD_OTHER || r->value_len > HTTP_VALUE_MAX)
    return 0;
  if (len > (size_t)(HTTP_VALUE_MAX - r->value_len)) {
    r->value_len = HTTP_VALUE_MAX + 1;
    return 0;
  }
  memcpy(r->value + r->value_len, at, len);
  r->value_len = (uint16_t)(r->value_len + len);
  return 0;
}

static int digit(char ch) {
  return ch >= '0' && ch <= '9';
}

/* A Host value (RFC 9110 7.2, RFC 3986 3.2.2): uri-host [ ":" port ], where
 * uri-host is a reg-name (an IPv4 address is one) or an IP literal in
 * brackets; no spaces, no list (no comma), one port of at most 65535. */
static int host_valid(const char *s, size_t len) {
  static const char reg_name[] = "-._~%!$&'()*+;=";
  static const char literal[] = ":.abcdefABCDEF";
  size_t i = 0;
  unsigned long port = 0;
  if (len > 0 && s[0] == '[') {
    for (i = 1; i < len && (digit(s[i]) || (s[i] != '\0' && strchr(literal, s[i]) != NULL)); i++)
      ;
    if (i == 1 || i == len || s[i] != ']')
      return 0;
    i++;
  } else {
    for (; i < len && s[i] != ':'; i++)
      if (!digit(s[i]) && !((lower(s[i]) >= 'a' && lower(s[i]) <= 'z')) &&
          (s[i] == '\0' || strchr(reg_name, s[i]) == NULL))
        return 0;
  }
  if (i == len)
    return 1;
  if (s[i++] != ':' || len - i > 5)
    return 0;
  for (; i < len; i++) {
    if (!digit(s[i]))
      return 0;
    port = port * 10 + (unsigned long)(s[i] - '0');
  }
  return port <= 65535;
}

/* The value of a header the server reads, without the whitespace around it
 * (RFC 9110 5.5). */
static int on_header_value_complete(llhttp_t *p) {
  http_request_t *r = request_of(p);
  const char *v = r->value;
  size_t n = r->value_len;
  if (n > HTTP_VALUE_MAX) {
    v = "?"; /* too long: a value no check accepts (a Host, a coding, an expectation) */
    n = 1;
  }
  for (; n > 0 && (v[0] == ' ' || v[0] == '\t'); v++, n--)
    ;
  for (; n > 0 && (v[n - 1] == ' ' || v[n - 1] == '\t'); n--)
    ;
  switch (r->field) {
  case FIELD_HOST:
    return host_valid(v, n) ? 0 : fail(r, 400);
  case FIELD_EXPECT:
    if (r->expect != EXPECT_OTHER)
      r->expect = is_word(v, n, "100-continue") ? EXPECT_CONTINUE : EXPECT_OTHER;
    return 0;
  case FIELD_CODING:
    r->codings++;
    if (n == 0)
      r->coding |= CODING_EMPTY;
    else if (!is_word(v, n, "chunked"))
      r->coding |= CODING_OTHER;
    return 0;
  default: /* FIELD_OTHER, and FIELD_LENGTH: llhttp reads its value */
    return 0;
  }
}

/* The framing is the server's own decision, from the lines it counted, not
 * only llhttp's flags (llhttp 8 sets its Transfer-Encoding flag only once a
 * value byte starts): Transfer-Encoding with Content-Length, in HTTP/1.0, or
 * empty is faulty framing (RFC 9112 6.1, 6.3): 400; any coding but exactly
 * one "chunked" is one the server does not implement: 501. */
static int on_headers_complete(llhttp_t *p) {
  http_request_t *r = request_of(p);
  int has_body = (p->flags & F_CHUNKED) || p->content_length > 0;
  int http11 = p->http_major == 1 && p->http_minor >= 1;
  r->events |= HTTP_HEAD_DONE;
  r->method = p->method;
  /* Upgrade is ignored (RFC 9110 7.8 allows it): the request is answered as
   * HTTP/1.1. A CONNECT is answered 405 once it is complete. */
  p->upgrade = 0;
  if (http11 && r->hosts != 1)
    return fail(r, 400);
  if (r->codings > 0 && (!http11 || r->lengths > 0 || (r->coding & CODING_EMPTY)))
    return fail(r, 400);
  if (r->codings > 1 || (r->coding & CODING_OTHER))
    return fail(r, 501);
  if (r->expect == EXPECT_OTHER)
    return fail(r, 417); /* as Node: an expectation it cannot meet */
  if (p->content_length > r->limits->max_body_size)
    return fail(r, r->expect == EXPECT_CONTINUE ? 417 : 413);
  r->wants_continue = (uint8_t)(r->expect == EXPECT_CONTINUE && has_body && http11);
  /* With a body, a pause, so that http_parse tells the head's bytes from
   * the body's; without, the request ends here and its bytes are the head. */
  return has_body ? HPE_PAUSED : 0;
}

static int on_body(llhttp_t *p, const char *at, size_t len) {
  http_request_t *r = request_of(p);
  (void)at;
  if (len > r->limits->max_body_size - r->body_bytes)
    return fail(r, 413);
  r->body_bytes += (uint32_t)len;
  return 0;
}

static int on_chunk_extension(llhttp_t *p, const char *at, size_t len) {
  (void)at;
  return framing(request_of(p), len);
}

static int on_message_complete(llhttp_t *p) {
  http_request_t *r = request_of(p);
  r->keep_alive = (uint8_t)llhttp_should_keep_alive(p);
  if (r->url_flags & URL_SKIP_AUTHORITY) { /* "http://host" alone: the root */
    r->url[0] = '/';
    r->url[1] = '\0';
    r->url_len = 1;
  }
  r->events |= HTTP_DONE;
  return HPE_PAUSED; /* one request at a time */
}

static const llhttp_settings_t settings = {
    .on_message_begin = on_message_begin,
    .on_url = on_url,
    .on_version_complete = on_version_complete,
    .on_header_field = on_header_field,
    .on_header_field_complete = on_header_field_complete,
    .on_header_value = on_header_value,
    .on_header_value_complete = on_header_value_complete,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_chunk_extension_name = on_chunk_extension,
    .on_chunk_extension_value = on_chunk_extension,
    .on_message_complete = on_message_complete,
};

void http_request_init(http_request_t *r, const http_limits_t *limits) {
  memset(r, 0, sizeof *r);
  llhttp_init(&r->parser, HTTP_REQUEST, &settings);
  r->parser.lenient_flags |= LENIENT_VERSION; /* any digit.digit: on_version_complete decides */
  r->parser.data = r;
  r->limits = limits;
}

enum http_parse_result http_parse(http_request_t *r, const char *data, size_t len, size_t *used) {
  size_t off = 0;
  int again = 0; /* the head just ended: the request may end with no byte more */
  r->events = 0;
  while (off < len || again) {
    /* In the head, llhttp gets at most one byte past the limit. */
    uint64_t room = r->limits->max_header_size - r->head_bytes;
    size_t n = r->head_done || len - off <= room ? len - off : (size_t)room + 1;
    llhttp_errno_t e;
    again = 0;
    e = llhttp_execute(&r->parser, data + off, n);
    size_t taken = e == HPE_PAUSED ? (size_t)(llhttp_get_error_pos(&r->parser) - (data + off)) : n;
    if (e != HPE_OK && e != HPE_PAUSED) {
      if (r->error_status == 0) /* llhttp's own: a coding after "chunked" is not implemented */
        r->error_status = e == HPE_INVALID_TRANSFER_ENCODING ? 501 : 400;
      return HTTP_PARSE_ERROR;
    }
    if (!r->head_done)
      r->head_bytes += taken;
    off += taken;
    if (r->head_bytes > r->limits->max_header_size) {
      r->error_status = 431;
      return HTTP_PARSE_ERROR;
    }
    if (e == HPE_PAUSED) {
      llhttp_resume(&r->parser);
      if (!(r->events & HTTP_DONE)) { /* the end of a head before a body */
        r->head_done = again = 1;
        continue;
      }
      *used = off; /* the end of the request */
      r->head_done = 0;
      r->head_bytes = r->framing = 0;
      return HTTP_PARSE_DONE;
    }
  }
  *used = len;
  return HTTP_PARSE_MORE;
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
  case 501:
    return "Not Implemented";
  case 505:
    return "HTTP Version Not Supported";
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
