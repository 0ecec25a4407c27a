/* The lateness histogram's public calls: the buckets' bounds and quantiles
 * of a window between two copies of the stats. The wheel counts in
 * core.c (uvtw__note_fired), through uvtw__late_bucket in late.h. Both
 * calls read only their arguments: any thread. */
#include "late.h"

uint64_t uvtw_late_bucket_max(unsigned i) {
  if (i >= UVTW_LATE_BUCKETS - 1)
    return UINT64_MAX;
  if (i < LATE_SUBS) /* the exact buckets below the first power of two */
    return i;
  return LATE_BUCKET_MIN(i + 1) - 1;
}

/* The nearest rank of the q-quantile of n values, max(1, ceil(q * n)), and
 * never above n (q * n in double may round up past it). As for the decimal
 * q the user wrote: a q * n within 1e-9 * n of an integer is that integer
 * (0.56 * 100 is 56.000000000000007 in double; its rank is 56), so the
 * ceiling is taken of q * n - 1e-9 * n. */
static uint64_t nearest_rank(double q, uint64_t n) {
  double x = q * (double)n - 1e-9 * (double)n;
  if (x >= (double)n)
    return n;
  if (x <= 0)
    return 1;
  uint64_t rank = (uint64_t)x;
  if ((double)rank < x)
    rank++;
  return rank;
}

int64_t uvtw_stats_late_quantile(const uvtw_stats_t *now, const uvtw_stats_t *since, double q) {
  if (now == NULL || !(q >= 0 && q <= 1)) /* the comparisons are false for NaN */
    return UV_EINVAL;
  uint64_t window[UVTW_LATE_BUCKETS];
  uint64_t n = 0;
  for (unsigned i = 0; i < UVTW_LATE_BUCKETS; i++) {
    uint64_t before = since != NULL ? since->late[i] : 0;
    if (before > now->late[i])
      return UV_EINVAL;
    window[i] = now->late[i] - before;
    n = uvtw__add_saturating(n, window[i]);
  }
  if (n == 0)
    return UV_EAGAIN;
  uint64_t rank = nearest_rank(q, n);
  uint64_t seen = 0;
  unsigned i = 0;
  while ((seen = uvtw__add_saturating(seen, window[i])) < rank)
    i++;
  return i == UVTW_LATE_BUCKETS - 1 ? (int64_t)LATE_OPEN_MIN : (int64_t)uvtw_late_bucket_max(i);
}
