#!/usr/bin/env python3
"""Runs uvtw, libuv's uv_timer_t, libev's ev_timer, libevent's evtimer, h2o's
h2o_timeout_t lists and libevent's common timeouts on the same workloads and
reports them side by side. The last two keep one list per duration: they run
the workloads whose timeouts come from a fixed set (bump, server) only.

Each backend is its own executable (bench_uvtw, bench_uv, bench_ev,
bench_event, bench_h2o, bench_event_common), run in a fresh process per
repetition: libev exports
libevent's symbol names, so the two never share a binary, and separate
processes keep heaps and caches apart. The repetitions are interleaved and
the order of the backends rotates, so noise on a shared machine spreads over
all of them. Every figure is the median over the repetitions, with the
smallest and largest value beside it.

Prints the machine, the versions and one table (the largest N); writes every
figure at every N to a CSV file and draws the chart (gnuplot) from the same
run.

  run_bench.py --bindir build-rel/bench              # N = 10^4..10^6, 3 repetitions
  run_bench.py --bindir build-rel/bench --quick      # N = 10^4, 1 repetition (CI)
  run_bench.py --bindir build-rel/bench --big        # adds N = 10^7 (about 4 GB of RAM)
"""

import argparse
import csv
import datetime
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

BACKENDS = [
    ("uvtw", "uvtw"),
    ("uv", "uv_timer_t"),
    ("ev", "libev ev_timer"),
    ("event", "libevent evtimer"),
    ("h2o", "h2o timeout lists"),
    ("event-common", "libevent common timeouts"),
    ("h2o-64", "h2o lists, 64 B entries"),
]
# Run only when named in --backends: h2o's lists with each entry padded to
# a uvtw_timer_t's size (see bench/README.md, "Bytes per timer at 10^6").
CONTROLS = ("h2o-64",)
LABEL = dict(BACKENDS)
MISSING_REASON = {
    "uvtw": "bench_uvtw was not built",
    "uv": "bench_uv was not built",
    "ev": "libev was not found when meson configured the build (libev-dev)",
    "event": "libevent was not found when meson configured the build (libevent-dev)",
    "h2o": "libh2o was not found when meson configured the build (libh2o-dev)",
    "event-common": "libevent was not found when meson configured the build (libevent-dev)",
    "h2o-64": "libh2o was not found when meson configured the build (libh2o-dev)",
}
# Backends that keep one list per duration run only these workloads.
FIXED_DURATIONS = ("h2o", "event-common", "h2o-64")
FIXED_WORKLOADS = ("bump", "server")


def exe(b):
    return "bench_" + b.replace("-", "_")

# The table's rows: (workload, metric, label). ns figures are process CPU time
# per operation, made from inside loop callbacks.
ROWS = [
    ("cancel", "ns_start", "start, ns"),
    ("cancel", "ns_stop", "stop (random order), ns"),
    ("bump", "ns_restart", "restart (push back), ns"),
    ("churn", "ns_step", "stop + start (churn), ns"),
    ("expire", "ns_fire", "fire, ns"),
    ("info", "bytes_per_timer", "bytes per timer"),
    ("expire", "late_p99_ms", "fire: lateness p99, ms"),
    ("expire", "fifo_violations", "fire: FIFO violations"),
    ("expire", "wasted_wakeups", "fire: wasted wakeups"),
    ("server", "ns_start", "server: start (open), ns"),
    ("server", "ns_restart", "server: restart (activity), ns"),
    ("server", "ns_phase", "server: stop + start (phase), ns"),
    ("server", "ns_stop", "server: stop (close), ns"),
    ("server", "ns_fire", "server: fire (idle cut), ns"),
    ("server", "late_p99_ms", "server: lateness p99, ms"),
    ("server", "pass_work_max_ms", "server: longest pass's own work, ms"),
    ("server", "fifo_violations", "server: FIFO violations"),
]
# The chart's panels: ns per operation against N.
PANELS = [
    ("cancel", "ns_start", "start"),
    ("cancel", "ns_stop", "stop (random order)"),
    ("bump", "ns_restart", "restart (push back)"),
    ("churn", "ns_step", "stop + start (churn)"),
    ("expire", "ns_fire", "fire"),
    ("server", "ns_start", "server: start (open)"),
    ("server", "ns_restart", "server: restart (activity)"),
    ("server", "ns_phase", "server: stop + start (phase)"),
    ("server", "ns_stop", "server: stop (close)"),
    ("server", "ns_fire", "server: fire (idle cut)"),
]
COLORS = {"uvtw": "#1f77b4", "uv": "#d62728", "ev": "#2ca02c", "event": "#9467bd",
          "h2o": "#ff7f0e", "event-common": "#8c564b", "h2o-64": "#e377c2"}
# Figures uvtw must report as zero (its contract), or the run is an error.
CONTRACT = ("early_fires", "order_violations", "fifo_violations")


def pow10(n):
    s = "%d" % n
    if len(s) > 2 and s[0] == "1" and set(s[1:]) == {"0"}:
        return "10^%d" % (len(s) - 1)
    return s


def fmt(v):
    if v is None:
        return "-"
    if v == int(v) and abs(v) < 1e9:
        return "%d" % v
    if abs(v) >= 100:
        return "%.0f" % v
    if abs(v) >= 10:
        return "%.1f" % v
    return "%.2f" % v


class Samples:
    """Every value reported, one per repetition: (backend, workload, n,
    metric) -> [values]."""

    def __init__(self):
        self.values = {}
        self.info = {}

    def parse(self, text):
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 6 and parts[0] == "R":
                _, be, wl, n, metric, value = parts
                self.values.setdefault((be, wl, int(n), metric), []).append(float(value))
            elif len(parts) >= 3 and parts[0] == "I":
                self.info[(parts[1], parts[2])] = " ".join(parts[3:])

    def summary(self, be, wl, n, metric):
        """(median, min, max, count), or None if never reported."""
        v = self.values.get((be, wl, n, metric))
        if not v:
            return None
        return statistics.median(v), min(v), max(v), len(v)


def cell(s):
    if s is None:
        return "-"
    med, lo, hi, count = s
    if count == 1 or lo == hi:
        return fmt(med)
    return "%s (%s–%s)" % (fmt(med), fmt(lo), fmt(hi))


def table(res, backends, n):
    head = ["N = %s" % pow10(n)] + [LABEL[b] for b in backends]
    rows = []
    for wl, metric, label in ROWS:
        cells = [cell(res.summary(b, wl, n, metric)) for b in backends]
        if any(c != "-" for c in cells):
            rows.append([label] + cells)
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
    line = lambda r: "| " + " | ".join(c.rjust(w) if i else c.ljust(w)
                                       for i, (c, w) in enumerate(zip(r, widths))) + " |"
    out = [line(head), "|" + "|".join("-" * (w + 1) + (":" if i else "-")
                                      for i, w in enumerate(widths)) + "|"]
    out += [line(r) for r in rows]
    return "\n".join(out)


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return re.sub(r"\s+", " ", line.split(":", 1)[1].strip())
    except OSError:
        pass
    return platform.processor() or platform.machine()


def memory_gib():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return "%.0f GiB RAM" % (int(line.split()[1]) / 1048576)
    except OSError:
        pass
    return "RAM unknown"


def build_info(bindir):
    """Compiler and build type of the Meson build that made the executables."""
    build = os.path.join(bindir, "..")
    compiler, buildtype = "compiler unknown", "unknown"
    try:
        with open(os.path.join(build, "meson-logs", "meson-log.txt")) as f:
            m = re.search(r"^C compiler for the host machine: .*?\((\w+) ([\d.]+)", f.read(), re.M)
        if m:
            compiler = "%s %s" % m.groups()
    except OSError:
        pass
    try:
        with open(os.path.join(build, "meson-info", "intro-buildoptions.json")) as f:
            buildtype = {o["name"]: o["value"] for o in json.load(f)}.get("buildtype", "unknown")
    except (OSError, KeyError, ValueError):
        pass
    return "%s, buildtype %s" % (compiler, buildtype)


def find_bindir(arg):
    here = os.path.dirname(os.path.abspath(__file__))
    cands = [arg] if arg else [os.getcwd(), os.path.join(here, "..", "build-rel", "bench"),
                               os.path.join(here, "..", "build", "bench")]
    for d in cands:
        if any(os.access(os.path.join(d, exe(k)), os.X_OK) for k, _ in BACKENDS):
            return os.path.abspath(d)
    sys.exit("run_bench.py: no bench_* executables%s; build first "
             "(meson setup build-rel -Dbuildtype=release && meson compile -C build-rel) "
             "and pass --bindir build-rel/bench" % (" in " + arg if arg else " found"))


def run(cmd, verbose):
    if verbose:
        print("$ " + " ".join(cmd), file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr.splitlines():
        # The executables' progress lines only with -v; anything else always.
        if verbose or not re.match(r"^bench [\w-]+: \w+, N=\d+, \d+ repeats$", line):
            print("  " + line, file=sys.stderr, flush=True)
    return proc.returncode, proc.stdout


def write_csv(res, path):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["backend", "workload", "n", "metric", "median", "min", "max", "repetitions"])
        for (be, wl, n, metric) in sorted(res.values):
            med, lo, hi, count = res.summary(be, wl, n, metric)
            w.writerow([be, wl, n, metric, "%.6g" % med, "%.6g" % lo, "%.6g" % hi, count])


def read_csv(path):
    """Samples from a CSV this script wrote, as (median, min, max) triples."""
    res = Samples()
    with open(path) as f:
        for row in csv.DictReader(f):
            key = (row["backend"], row["workload"], int(row["n"]), row["metric"])
            res.values[key] = [float(row["min"]), float(row["median"]), float(row["max"])]
    return res


def chart(res, backends, ns, path, subtitle):
    """One PNG: a panel of ns per operation against N for each operation,
    one line per backend, median with a bar from min to max."""
    gnuplot = shutil.which("gnuplot")
    if not gnuplot:
        print("gnuplot is not installed (apt-get install gnuplot-nox): no chart",
              file=sys.stderr)
        return False
    tmp = tempfile.mkdtemp(prefix="uvtw-bench-")
    term = "pngcairo size 1800,1250 font ',11'"
    if subprocess.run([gnuplot, "-e", "set terminal pngcairo"], stdout=subprocess.DEVNULL,
                      stderr=subprocess.DEVNULL).returncode != 0:
        term = "png size 1800,1250"
    lo_x, hi_x = min(ns) / 2.5, max(ns) * 2.5
    script = ["set terminal %s" % term, "set output '%s'" % path,
              "set multiplot layout 3,4 title \"CPU time per operation, median and min-max "
              "(lower is better)\\n%s\" noenhanced" % subtitle.replace('"', "'"),
              "set logscale xy", "set grid",
              "set xrange [%g:%g]" % (lo_x, hi_x),
              "set xtics (%s)" % ", ".join("'%s' %d" % (pow10(n).replace("^", "^{") + "}"
                                                        if "^" in pow10(n) else pow10(n), n)
                                           for n in ns),
              "set xlabel 'timers pending (N)'", "set ylabel 'ns'", "unset key"]
    for i, (wl, metric, title) in enumerate(PANELS):
        plots = []
        for b in backends:
            pts = [(n, res.summary(b, wl, n, metric)) for n in ns]
            pts = [(n, s) for n, s in pts if s is not None and s[1] > 0]
            if not pts:
                continue
            fn = os.path.join(tmp, "%d_%s.dat" % (i, b))
            with open(fn, "w") as f:
                for n, (med, lo, hi, _) in pts:
                    f.write("%d %g %g %g\n" % (n, med, lo, hi))
            plots.append("'%s' using 1:2:3:4 with yerrorlines lw 2 pt 7 ps 0.8 lc rgb '%s' "
                         "title '%s' noenhanced" % (fn, COLORS[b], LABEL[b]))
        script.append("set title '%s'" % title)
        if plots:
            script.append("plot " + ", ".join(plots))
        else:
            script += ["set label 1 'not run' at graph 0.5,0.5 center",
                       "plot [%g:%g] [1:10] 0 notitle" % (lo_x, hi_x), "unset label 1"]
    # The last panel holds the legend.
    script += ["unset title", "unset border", "unset tics", "unset grid", "unset xlabel",
               "unset ylabel", "unset logscale", "set xrange [0:1]", "set yrange [0:1]",
               "set key center center font ',13' spacing 1.6"]
    script.append("plot " + ", ".join("NaN with linespoints lw 2 pt 7 lc rgb '%s' title '%s' "
                                      "noenhanced" % (COLORS[b], LABEL[b]) for b in backends))
    script.append("unset multiplot")
    sp = os.path.join(tmp, "chart.gp")
    with open(sp, "w") as f:
        f.write("\n".join(script) + "\n")
    proc = subprocess.run([gnuplot, sp], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    shutil.rmtree(tmp, ignore_errors=True)
    if proc.returncode != 0:
        print("gnuplot failed: " + proc.stderr.strip(), file=sys.stderr)
        return False
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bindir", help="directory with the bench_* executables (build-rel/bench)")
    ap.add_argument("--n", help="comma-separated timer counts (default 1e4,1e5,1e6)")
    ap.add_argument("--reps", type=int,
                    help="repetitions: fresh processes per backend and N (default 3; 1 with "
                         "--quick)")
    ap.add_argument("--quick", action="store_true",
                    help="N = 10^4, 1 repetition, one repeat inside it (a smoke run)")
    ap.add_argument("--big", action="store_true", help="also N = 10^7 (about 4 GB of RAM)")
    ap.add_argument("--backends",
                    help="subset of uvtw,uv,ev,event,h2o,event-common,h2o-64 (default: all built "
                         "but h2o-64)")
    ap.add_argument("--workloads", default="cancel,bump,expire,churn,server",
                    help="subset of cancel,bump,expire,churn,server")
    ap.add_argument("--server-second", metavar="MS",
                    help="loop ms per server second in server (default 1000; 20 with --quick)")
    ap.add_argument("--seed", default="42", help="seed of the operation sequences")
    ap.add_argument("--csv", help="CSV of every figure (default BINDIR/bench.csv)")
    ap.add_argument("--chart", help="PNG chart (default BINDIR/chart.png)")
    ap.add_argument("--replot", metavar="CSV",
                    help="redraw the chart from a CSV this script wrote; runs nothing")
    ap.add_argument("-v", "--verbose", action="store_true", help="show every command")
    args = ap.parse_args()

    if args.replot:
        res = read_csv(args.replot)
        ns = sorted({n for (_, wl, n, _) in res.values if wl != "info"})
        backends = [b for b, _ in BACKENDS if any(k[0] == b for k in res.values)]
        return 0 if chart(res, backends, ns, args.chart or "chart.png", "") else 1

    bindir = find_bindir(args.bindir)
    csv_path = args.csv or os.path.join(bindir, "bench.csv")
    png_path = args.chart or os.path.join(bindir, "chart.png")
    if args.n:
        ns = sorted(int(float(x)) for x in args.n.split(",") if x)
    elif args.quick:
        ns = [10000]
    else:
        ns = [10000, 100000, 1000000] + ([10000000] if args.big else [])
    reps = args.reps or (1 if args.quick else 3)

    wanted = (args.backends.split(",") if args.backends
              else [b for b, _ in BACKENDS if b not in CONTROLS])
    backends = []
    for b, label in BACKENDS:
        if b not in wanted:
            continue
        if os.access(os.path.join(bindir, exe(b)), os.X_OK):
            backends.append(b)
        else:
            print("note: %s is left out: %s" % (label, MISSING_REASON[b]), file=sys.stderr)
    if not backends:
        sys.exit("run_bench.py: none of the requested backends is built")

    started = datetime.datetime.now(datetime.timezone.utc)
    res = Samples()
    failed = []
    extra = ["--seed", args.seed] + (["--quick"] if args.quick else [])
    if args.server_second:
        extra += ["--server-second", args.server_second]
    workloads = args.workloads.split(",")
    for i, n in enumerate(ns):
        for r in range(reps):
            k = (i + r) % len(backends)
            for b in backends[k:] + backends[:k]:
                print("N = %s, repetition %d of %d: %s" % (pow10(n), r + 1, reps, LABEL[b]),
                      file=sys.stderr, flush=True)
                mine = [w for w in workloads
                        if b not in FIXED_DURATIONS or w in FIXED_WORKLOADS]
                if not mine:
                    continue
                rc, out = run([os.path.join(bindir, exe(b)), "--workloads",
                               ",".join(mine), "--n", str(n)] + extra, args.verbose)
                res.parse(out)
                if rc:
                    failed.append("%s at N = %s (exit status %d)" % (b, pow10(n), rc))
    minutes = (datetime.datetime.now(datetime.timezone.utc) - started).total_seconds() / 60

    versions = list(dict.fromkeys(res.info[(b, "version")] for b in backends
                                  if (b, "version") in res.info))
    machine = "%s, %d cores, %s; %s %s" % (cpu_model(), os.cpu_count() or 0, memory_gib(),
                                          platform.system(), platform.release())
    head = [
        "uvtw benchmark, %s, %.0f min" % (started.strftime("%Y-%m-%d %H:%M UTC"), minutes),
        "command: %s" % " ".join(["bench/run_bench.py"] + sys.argv[1:]),
        "machine: %s" % machine,
        "build: %s" % build_info(bindir),
        "versions: %s" % "; ".join(versions),
        "Each cell: median over %d repetition%s (a fresh process each), min-max in "
        "parentheses. ns = process CPU time per operation, every operation made from inside "
        "a loop callback." % (reps, "s" if reps > 1 else ""),
    ]
    fixed = [LABEL[b] for b in backends if b in FIXED_DURATIONS]
    if fixed:
        head.append("%s keep one list per duration: they run bump and server only (- "
                    "elsewhere)." % " and ".join(fixed))
    print("\n".join(head) + "\n\n" + table(res, backends, ns[-1]) + "\n")

    write_csv(res, csv_path)
    print("every N: %s" % csv_path)
    subtitle = "%s; %s" % (cpu_model(), "; ".join(versions))
    if chart(res, backends, ns, png_path, subtitle):
        print("chart: %s" % png_path)

    errors = ["%s reported %s = %s at N = %s" % (LABEL[be], metric, fmt(v), pow10(n))
              for (be, wl, n, metric), vals in sorted(res.values.items())
              if metric in CONTRACT and be == "uvtw" for v in vals if v]
    errors += ["failed run: " + f for f in failed]
    for e in errors:
        print("error: " + e, file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
