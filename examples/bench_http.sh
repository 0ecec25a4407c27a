#!/bin/sh
# examples/http_server under wrk, as rows of a Markdown table: requests/s,
# p50 and p99 latency, and the CPU wrk and the server took, in cores (CPU
# seconds per second of the run), with the load average before and after.
#
# usage: examples/bench_http.sh [BUILD_DIR] [DURATION_S] [timers [ROUNDS]]
#        (defaults: build 10; needs wrk, and node for the load table;
#        WRK_THREADS, default 2; raises ulimit -n to 20000 or its hard limit)
#
# By default, the load table of examples/README.md. With `timers`:
# http_server against http_server_uvtimer, GET / at 1,000 and 10,000
# keep-alive connections, ROUNDS times (default 2). Every request
# arms three timeouts (headers and request at its first byte, stopped at
# the end of the head and of the request; keep-alive when the response is
# written), so the timer work is a start/stop churn of 3 timers per request
# over 1,000 or 10,000 pending ones. Rounds alternate the two servers so
# that drift on a shared machine hits both.
set -eu

build=${1:-build}
duration=${2:-10}
mode=${3:-load}
rounds=${4:-2}
threads=${WRK_THREADS:-2}
here=$(dirname "$0")
ticks=$(getconf CLK_TCK)

command -v wrk >/dev/null || { echo "bench_http.sh: wrk not found" >&2; exit 1; }
[ "$mode" = timers ] || command -v node >/dev/null || { echo "bench_http.sh: node not found" >&2; exit 1; }
for s in http_server http_server_uvtimer; do
  [ -x "$build/examples/$s" ] || { echo "bench_http.sh: $build/examples/$s not built" >&2; exit 1; }
done

hard=$(ulimit -Hn)
want=20000
if [ "$hard" != unlimited ] && [ "$hard" -lt "$want" ]; then want=$hard; fi
ulimit -n "$want"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# CPU ticks (user + system) of a live process.
cpu_ticks() {
  sed 's/^.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'
}

# The CPU seconds (user + system) of the shell's waited-for children so
# far, from the second line of `times` written to a file (a command
# substitution would run it in a subshell, whose children are others).
children_seconds() {
  awk 'NR == 2 { split($1, u, /[ms]/); split($2, s, /[ms]/); print u[1] * 60 + u[2] + s[1] * 60 + s[2] }' "$1"
}

# run NAME CONNS PATH COMMAND... -> one row of the table
run() {
  name=$1 conns=$2 path=$3
  shift 3
  rm -f "$tmp/out" # else the wait below may read the last server's address
  "$@" >"$tmp/out" &
  pid=$!
  i=0
  until grep -q '^listening on' "$tmp/out" 2>/dev/null; do
    i=$((i + 1)); [ $i -lt 100 ] || { echo "server did not start" >&2; kill $pid; exit 1; }
    sleep 0.05
  done
  addr=$(sed -n 's/^listening on //p' "$tmp/out")
  server0=$(cpu_ticks $pid)
  times >"$tmp/times0"
  wrk -t"$threads" -c"$conns" -d"${duration}s" --timeout 10s --latency "http://$addr$path" \
    >"$tmp/wrk" 2>&1 || true
  times >"$tmp/times1"
  wrk0=$(children_seconds "$tmp/times0")
  wrk1=$(children_seconds "$tmp/times1")
  server1=$(cpu_ticks $pid)
  kill -TERM $pid
  wait $pid || echo "$name: server exit status $?" >&2
  awk -v name="$name" -v conns="$conns" -v path="$path" -v d="$duration" \
      -v wrk="$(echo "$wrk0 $wrk1" | awk '{print $2 - $1}')" \
      -v srv="$(( server1 - server0 ))" -v hz="$ticks" '
    /^Requests\/sec:/ { rps = $2 }
    $1 == "50%" { p50 = $2 }
    $1 == "99%" { p99 = $2 }
    /Socket errors|Non-2xx/ { errs = errs " " $0 }
    END {
      printf "| %s | `%s` | %s | %s | %s | %s | %.2f | %.2f |%s\n", name, path, conns, rps, p50, p99,
        wrk / d, srv / hz / d, errs
    }' "$tmp/wrk"
}

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores; wrk -t$threads, ${duration} s per run"
echo
echo "| server | route | connections | requests/s | p50 | p99 | wrk, cores | server, cores |"
echo "|---|---|---|---|---|---|---|---|"
if [ "$mode" = timers ]; then
  for conns in 1000 10000; do
    r=1
    while [ $r -le "$rounds" ]; do
      for s in http_server http_server_uvtimer; do
        run "$s, round $r" "$conns" / "$build/examples/$s" --port 0
      done
      r=$((r + 1))
    done
  done
else
  for w in 1 2; do
    run "http_server --workers $w" 200 / "$build/examples/http_server" --port 0 --workers $w
  done
  run "Node $(node --version) http.Server" 200 / node "$here/node_http_server.js"
  for w in 1 2; do
    run "http_server --workers $w" 1000 "/delay?ms=50" "$build/examples/http_server" --port 0 --workers $w
  done
  run "Node $(node --version) http.Server" 1000 "/delay?ms=50" node "$here/node_http_server.js"
fi
echo
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
