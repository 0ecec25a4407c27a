/* Fuzz target: the example server's HTTP/1 parser (examples/http1.c), the
 * code that reads what a client sends, built alone with llhttp.
 *
 * The input's first byte chooses the limits (Node's defaults, or small
 * ones: a 256-byte head, 8 headers, a 64-byte body), its second how the
 * rest is cut; the rest is what a client sends on one connection. The
 * bytes are parsed twice, as the server parses them: whole, and in pieces
 * whose lengths the second byte's generator chooses (1 to 64 bytes, the
 * way a slow or hostile client sends them), each piece parsed up to its
 * end or the end of a request, what follows a request parsed next.
 *
 * Checked:
 *   - the cut never changes what the server sees: the same requests
 *     (method, path, body length, keep-alive) in the same order, and an
 *     error in both or in neither;
 *   - a request the parser lets through is within its limits: its body at
 *     most max_body_size, at most max_headers_count headers, and a path
 *     that is a C string shorter than HTTP_URL_MAX;
 *   - an error is one of the statuses the server answers it with (400,
 *     413, 417, 431, 501, 505);
 *   - nothing is read outside the buffers, nothing leaks (ASan, LSan and
 *     UBSan in the libFuzzer build). */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "fuzz.h"
#include "http1.h"

#define CHECK(cond, what) FUZZ_CHECK(&input, cond, what)

enum { REQUESTS_MAX = 64 };

typedef struct seen_s {
  struct {
    uint8_t method, keep_alive;
    uint32_t body_bytes;
    char url[HTTP_URL_MAX];
  } request[REQUESTS_MAX];
  size_t requests;
  uint16_t error_status; /* 0: no error */
} seen_t;

static fuzz_input_t input;

/* Parses `len` bytes at `data` as one piece: up to its end, request after
 * request, as the connection does with what it read and what it kept. */
static void parse_piece(http_request_t *r, const http_limits_t *limits, seen_t *seen,
                        const char *data, size_t len) {
  while (seen->error_status == 0) {
    size_t used = 0;
    enum http_parse_result result = http_parse(r, data, len, &used);
    if (result == HTTP_PARSE_ERROR) {
      int s = r->error_status;
      CHECK(s == 400 || s == 413 || s == 417 || s == 431 || s == 501 || s == 505,
            "an error status the server sends");
      seen->error_status = r->error_status;
      return;
    }
    if (result == HTTP_PARSE_MORE)
      return;
    CHECK(used <= len, "a request ends within what was given");
    CHECK(r->body_bytes <= limits->max_body_size, "a body within max_body_size");
    CHECK(r->header_count <= limits->max_headers_count, "headers within max_headers_count");
    CHECK(r->url_len < HTTP_URL_MAX && r->url[r->url_len] == '\0', "the path is a C string");
    if (seen->requests < REQUESTS_MAX) {
      seen->request[seen->requests].method = r->method;
      seen->request[seen->requests].keep_alive = r->keep_alive;
      seen->request[seen->requests].body_bytes = r->body_bytes;
      memcpy(seen->request[seen->requests].url, r->url, HTTP_URL_MAX);
    }
    seen->requests++;
    data += used;
    len -= used;
    if (len == 0)
      return;
  }
}

/* Cuts [data, data + len) into pieces of 1 to 64 bytes from `seed`. */
static void parse_cut(const http_limits_t *limits, seen_t *seen, const char *data, size_t len,
                      uint32_t seed) {
  http_request_t r;
  http_request_init(&r, limits);
  while (len > 0 && seen->error_status == 0) {
    seed = seed * 1103515245u + 12345u;
    size_t piece = 1 + (seed >> 16) % 64;
    if (piece > len)
      piece = len;
    /* A piece in a buffer of exactly its size: ASan sees a read past it. */
    char *copy = malloc(piece);
    CHECK(copy != NULL, "memory for a piece");
    memcpy(copy, data, piece);
    parse_piece(&r, limits, seen, copy, piece);
    free(copy);
    data += piece;
    len -= piece;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static seen_t whole, cut;
  http_limits_t limits = {16384, 2000, 1048576};
  http_request_t r;
  input = (fuzz_input_t){data, size, 0};
  if (fuzz_byte(&input) & 1)
    limits = (http_limits_t){256, 8, 64};
  uint32_t seed = fuzz_byte(&input);
  const char *bytes = (const char *)data + input.at;
  size_t len = size - input.at;
  memset(&whole, 0, sizeof whole);
  memset(&cut, 0, sizeof cut);
  http_request_init(&r, &limits);
  if (len > 0)
    parse_piece(&r, &limits, &whole, bytes, len);
  parse_cut(&limits, &cut, bytes, len, seed);
  input.at = size;
  CHECK(whole.requests == cut.requests, "the cut changes not how many requests there are");
  CHECK((whole.error_status != 0) == (cut.error_status != 0),
        "the cut changes not whether it errs");
  for (size_t i = 0; i < whole.requests && i < REQUESTS_MAX; i++) {
    CHECK(whole.request[i].method == cut.request[i].method, "the cut changes no method");
    CHECK(whole.request[i].keep_alive == cut.request[i].keep_alive, "nor keep-alive");
    CHECK(whole.request[i].body_bytes == cut.request[i].body_bytes, "nor a body's length");
    CHECK(memcmp(whole.request[i].url, cut.request[i].url, HTTP_URL_MAX) == 0, "nor a path");
  }
  return 0;
}
