#!/bin/sh
# Requests/s and p99 latency of examples/http_server with uvtw timeouts versus
# the same server on one uv_timer_t per timeout, under wrk, at 1 000 and
# 10 000 keep-alive connections. Loopback only.
#
# usage: examples/bench_http.sh [BUILD_DIR] [DURATION_S] [ROUNDS]
#        (defaults: build 10 2; needs wrk; raises ulimit -n to 20000 or its hard limit)
#
# Every connection arms three timeouts per request (headers and request
# timeouts at its first byte, stopped at the end of the head and of the
# request; keep-alive when the response is written), so the timer work is a
# start/stop churn of 3 timers per request over 1 000 or 10 000 pending ones.
# Rounds alternate the two servers so drift on a shared machine hits both.
set -eu

build=${1:-build}
duration=${2:-10}
rounds=${3:-2}
servers="$build/examples/http_server $build/examples/http_server_uvtimer"
threads=${WRK_THREADS:-2}

command -v wrk >/dev/null || { echo "bench_http.sh: wrk not found" >&2; exit 1; }
for s in $servers; do
  [ -x "$s" ] || { echo "bench_http.sh: $s not built" >&2; exit 1; }
done

hard=$(ulimit -Hn)
want=20000
if [ "$hard" != unlimited ] && [ "$hard" -lt "$want" ]; then want=$hard; fi
ulimit -n "$want"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# run SERVER CONNECTIONS -> "requests/s p99"
run() {
  server=$1 conns=$2
  "$server" --port 0 >"$tmp/out" &
  pid=$!
  i=0
  until grep -q '^listening on' "$tmp/out" 2>/dev/null; do
    i=$((i + 1)); [ $i -lt 100 ] || { echo "server did not start" >&2; kill $pid; exit 1; }
    sleep 0.05
  done
  addr=$(sed -n 's/^listening on //p' "$tmp/out")
  wrk -t"$threads" -c"$conns" -d"${duration}s" --timeout 10s --latency "http://$addr/" \
    >"$tmp/wrk" 2>&1 || true
  kill -TERM $pid
  wait $pid || echo "server exit status $?" >&2
  rps=$(awk '/^Requests\/sec:/ {print $2}' "$tmp/wrk")
  p99=$(awk '$1 == "99%" {print $2}' "$tmp/wrk")
  errs=$(awk '/Socket errors|Non-2xx/ {printf "%s ", $0}' "$tmp/wrk")
  echo "$rps $p99 $errs"
}

printf '%-22s %6s %5s %12s %10s  %s\n' server conns round requests/s p99 errors
for conns in 1000 10000; do
  r=1
  while [ $r -le "$rounds" ]; do
    for s in $servers; do
      run "$s" "$conns" >"$tmp/result"
      read -r rps p99 errs <"$tmp/result" || true
      printf '%-22s %6s %5s %12s %10s  %s\n' "$(basename "$s")" "$conns" "$r" "${rps:-?}" \
        "${p99:-?}" "${errs:-}"
    done
    r=$((r + 1))
  done
done
