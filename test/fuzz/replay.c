/* Replays a fuzz target's corpus without libFuzzer (TAP): the target's
 * LLVMFuzzerTestOneInput on each file of a directory, one case per file,
 * in name order. A failed check in the target aborts the run, saying which
 * check and where (fuzz.h); a file that ran through is `ok`.
 *
 *   replay_fuzz_wheel CORPUS_DIR [NAME...]   (files whose name contains a
 *                                             NAME; none: all)
 *
 * Meson runs it on test/fuzz/corpus/<target>/, so an input that once
 * failed stays a test: `meson test -C build fuzz_api --test-args crash-`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "fuzz.h"
#include "tap.h"

/* The whole file, in a buffer of exactly its size (ASan sees a read past
 * its end); *size its length. NULL if it cannot be read. */
static uint8_t *read_file(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (f == NULL)
    return NULL;
  size_t capacity = 4096, length = 0;
  uint8_t *data = malloc(capacity);
  size_t got;
  while (data != NULL && (got = fread(data + length, 1, capacity - length, f)) > 0) {
    length += got;
    if (length == capacity) {
      uint8_t *bigger = realloc(data, capacity *= 2);
      if (bigger == NULL)
        free(data);
      data = bigger;
    }
  }
  fclose(f);
  uint8_t *exact = data != NULL ? malloc(length > 0 ? length : 1) : NULL;
  if (exact != NULL)
    memcpy(exact, data, length);
  free(data);
  *size = length;
  return exact;
}

static char *copy_of(const char *name) {
  size_t size = strlen(name) + 1;
  char *copy = malloc(size);
  if (copy != NULL)
    memcpy(copy, name, size);
  return copy;
}

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s CORPUS_DIR [NAME...]\n", argv[0]);
    return 2;
  }
  uv_fs_t req;
  uv_dirent_t entry;
  char *names[4096];
  size_t n = 0;
  int r = uv_fs_scandir(NULL, &req, argv[1], 0, NULL);
  if (r < 0) {
    printf("1..0 # SKIP cannot read %s: %s\n", argv[1], uv_strerror(r));
    return 1;
  }
  while (n < sizeof names / sizeof names[0] && uv_fs_scandir_next(&req, &entry) != UV_EOF)
    if (entry.type == UV_DIRENT_FILE || entry.type == UV_DIRENT_UNKNOWN)
      if ((names[n] = copy_of(entry.name)) != NULL)
        n++;
  uv_fs_req_cleanup(&req);
  qsort(names, n, sizeof names[0], by_name);
  tap_diag("corpus %s: %zu files", argv[1], n);
  size_t ran = 0;
  for (size_t i = 0; i < n; i++) {
    if (tap_case_selected_(names[i], argc - 1, argv + 1)) { /* by the NAMEs after the directory */
      char path[4096];
      size_t size = 0;
      snprintf(path, sizeof path, "%s/%s", argv[1], names[i]);
      uint8_t *data = read_file(path, &size);
      if (data == NULL) {
        tap_ok(0, "%s: the file can be read", names[i]);
      } else {
        LLVMFuzzerTestOneInput(data, size); /* a failed check aborts */
        tap_ok(1, "%s (%zu bytes): every check held", names[i], size);
      }
      ran++;
      free(data);
    }
    free(names[i]);
  }
  if (ran == 0 && argc > 2) {
    printf("1..0 # SKIP no file name contains an argument given\n");
    return 0;
  }
  return tap_done();
}
