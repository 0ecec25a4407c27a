#!/usr/bin/env python3
"""Runs every timer backend on the same workloads and compares them.

Each backend is its own executable (bench_uvtw, bench_uv, bench_ev,
bench_event), run in its own process: libev exports libevent's symbol names,
so the two never share a binary. This script runs them one after another on
each N (rotating the order so machine noise does not always hit the same
backend), then prints one table with every figure and its ratio to uv_timer_t,
checks uvtw against its targets, and writes a CSV file and a chart (gnuplot).

  run_bench.py --bindir build/bench            # full run, a few minutes
  run_bench.py --bindir build/bench --quick    # CI smoke run, under a minute
  run_bench.py --bindir build/bench --big      # adds N = 10^7 (needs ~4 GB)
"""

import argparse
import datetime
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

BACKENDS = [
    ("uvtw", "uvtw", "uvtw (the wheel)"),
    ("uv", "uv_timer_t", "libuv uv_timer_t"),
    ("ev", "ev_timer", "libev ev_timer"),
    ("event", "evtimer", "libevent evtimer"),
]
LABEL = {key: label for key, label, _ in BACKENDS}
MISSING_REASON = {
    "uvtw": "bench_uvtw was not built",
    "uv": "bench_uv was not built",
    "ev": "libev was not found when meson configured the build (cc.find_library('ev') + ev.h)",
    "event": "libevent was not found when meson configured the build (dependency('libevent'))",
}

# (workload, metric, label, is a cost: show the ratio to uv_timer_t)
ROWS = [
    ("cancel", "ns_start", "ns/start", True),
    ("cancel", "ns_stop", "ns/stop", True),
    ("cancel", "ns_fire", "ns/fire (the 10% left)", True),
    ("cancel", "loop_iterations", "loop iterations (fire part)", False),
    ("cancel", "wakeups", "wakeups (uvtw stats)", False),
    ("cancel", "wasted_wakeups", "wasted wakeups (uvtw stats)", False),
    ("bump", "ns_restart", "ns/restart", True),
    ("expire", "ns_fire", "ns/fire", True),
    ("expire", "late_p50_ms", "lateness p50 ms", False),
    ("expire", "late_p99_ms", "lateness p99 ms", False),
    ("expire", "late_max_ms", "lateness max ms", False),
    ("expire", "early_fires", "early firings", False),
    ("expire", "order_violations", "order violations", False),
    ("expire", "fifo_violations", "FIFO violations (equal deadlines)", False),
    ("expire", "loop_iterations", "loop iterations", False),
    ("expire", "wakeups", "wakeups (uvtw stats)", False),
    ("expire", "wasted_wakeups", "wasted wakeups (uvtw stats)", False),
    ("churn", "ns_step", "ns/step (stop+start)", True),
    ("info", "bytes_per_timer", "bytes/timer", True),
]
MT_ROWS = [
    ("init_s", "init s (wall)", True),
    ("dispatch_s", "dispatch s (wall)", True),
    ("cleanup_s", "cleanup s (wall)", True),
    ("total_s", "total s (wall)", True),
    ("cpu_s", "process CPU s", True),
    ("peak_rss_mib", "peak RSS MiB", True),
]
CHART = [
    ("cancel", "ns_start", "cancel: ns/start"),
    ("cancel", "ns_stop", "cancel: ns/stop"),
    ("bump", "ns_restart", "bump: ns/restart"),
    ("churn", "ns_step", "churn: ns/step"),
    ("expire", "ns_fire", "expire: ns/fire"),
    ("cancel", "ns_fire", "cancel: ns/fire (10% left)"),
]


def pow10(n):
    s = "%d" % n
    if s.startswith("1") and set(s[1:]) <= {"0"} and len(s) > 2:
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
    if abs(v) >= 1:
        return "%.2f" % v
    return "%.3f" % v



def ratio_cells(vals, base, ratio):
    """Table cells for one row: each backend's value, with its ratio to
    uv_timer_t's when the row has one."""
    cells = []
    for v in vals:
        if v is None:
            cells.append("-")
        elif ratio and base:
            cells.append("%s (%.2fx)" % (fmt(v), v / base))
        else:
            cells.append(fmt(v))
    return cells

def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def find_bindir(arg):
    here = os.path.dirname(os.path.abspath(__file__))
    cands = [arg] if arg else [os.getcwd(), here,
                               os.path.join(here, "..", "build-bench", "bench"),
                               os.path.join(here, "..", "build", "bench")]
    for d in cands:
        if d and any(os.access(os.path.join(d, "bench_" + k), os.X_OK) for k, _, _ in BACKENDS):
            return os.path.abspath(d)
    sys.exit("run_bench.py: no bench_* executables found%s; build first "
             "(meson compile -C build) and pass --bindir build/bench" %
             (" in " + arg if arg else ""))


class Results:
    def __init__(self):
        self.samples = {}  # (backend, workload, n, metric) -> [value per run]
        self.info = {}     # (backend, key) -> text

    def parse(self, text):
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 6 and parts[0] == "R":
                _, be, wl, n, metric, value = parts
                self.samples.setdefault((be, wl, int(n), metric), []).append(float(value))
            elif len(parts) >= 3 and parts[0] == "I":
                self.info[(parts[1], parts[2])] = " ".join(parts[3:])

    @property
    def values(self):
        return {k: statistics.median(v) for k, v in self.samples.items()}

    def get(self, be, wl, n, metric):
        v = self.samples.get((be, wl, n, metric))
        return statistics.median(v) if v else None


def run(cmd, log):
    log("$ " + " ".join(cmd))
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr.splitlines():
        log("  " + line)
    if proc.returncode != 0:
        log("  FAILED with exit status %d" % proc.returncode)
    return proc.returncode, proc.stdout


def table(res, backends, ns, mt_n):
    cols = ["workload", "metric", "N"] + [LABEL[b] for b in backends]
    rows = []
    for wl, metric, label, ratio in ROWS:
        for n in ns:
            vals = [res.get(b, wl, n, metric) for b in backends]
            if all(v is None for v in vals):
                continue
            base = res.get("uv", wl, n, metric)
            rows.append([wl, label, pow10(n)] + ratio_cells(vals, base, ratio))
    if mt_n:
        for metric, label, ratio in MT_ROWS:
            vals = [res.get(b, "million_timers", mt_n, metric) for b in backends]
            if all(v is None for v in vals):
                continue
            base = res.get("uv", "million_timers", mt_n, metric)
            rows.append(["million_timers", label, pow10(mt_n)] + ratio_cells(vals, base, ratio))
    widths = [max(len(str(r[i])) for r in rows + [cols]) for i in range(len(cols))]
    out = []
    line = lambda r: "| " + " | ".join(str(c).ljust(w) for c, w in zip(r, widths)) + " |"
    out.append(line(cols))
    out.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    prev = None
    for r in rows:
        out.append(line(r if r[0] != prev else [""] + r[1:]))
        prev = r[0]
    return "\n".join(out)


def targets(res, mt_n):
    """uvtw's targets at N = 10^6 (churn also at 10^7, million_timers as ratios)."""
    M = 1000000
    checks = []

    def at_most(what, value, limit, unit=""):
        if value is None:
            checks.append((what, "not run", "<= %s%s" % (fmt(limit), unit), None))
        else:
            checks.append((what, fmt(value) + unit, "<= %s%s" % (fmt(limit), unit), value <= limit))

    u = lambda wl, metric, n=M: res.get("uvtw", wl, n, metric)
    at_most("cancel ns/start @10^6", u("cancel", "ns_start"), 15)
    at_most("cancel ns/stop @10^6", u("cancel", "ns_stop"), 30)
    at_most("bump ns/restart @10^6", u("bump", "ns_restart"), 25)
    at_most("churn ns/step @10^6", u("churn", "ns_step"), 50)
    at_most("expire ns/fire @10^6", u("expire", "ns_fire"), 100)
    at_most("churn ns/step @10^7", u("churn", "ns_step", 10 * M), 120)
    at_most("bytes/timer", u("info", "bytes_per_timer"), 56)
    at_most("expire wasted wakeups @10^6", u("expire", "wasted_wakeups"), 0)
    at_most("expire lateness p99 @10^6", u("expire", "late_p99_ms"), 1, " ms")
    for metric, label, limit in [("init_s", "million_timers init wall", 0.1),
                                 ("cpu_s", "million_timers process CPU", 0.2),
                                 ("peak_rss_mib", "million_timers peak RSS", 0.4)]:
        a = res.get("uvtw", "million_timers", mt_n, metric) if mt_n else None
        b = res.get("uv", "million_timers", mt_n, metric) if mt_n else None
        what = "%s (%s timers) vs uv_timer_t" % (label, pow10(mt_n) if mt_n else "-")
        if a is None or not b:
            checks.append((what, "not run", "<= %.1fx" % limit, None))
        else:
            checks.append((what, "%.3fx" % (a / b), "<= %.1fx" % limit, a / b <= limit))
    out = ["| target | uvtw | limit | met |", "|---|---|---|---|"]
    for what, value, limit, ok in checks:
        out.append("| %s | %s | %s | %s |" % (what, value, limit,
                                             "n/a" if ok is None else "yes" if ok else "NO"))
    return "\n".join(out), checks


def chart(res, backends, ns, path, log):
    gnuplot = shutil.which("gnuplot")
    if not gnuplot:
        log("gnuplot not installed: no chart")
        return False
    tmp = tempfile.mkdtemp(prefix="uvtw-bench-")
    term = "pngcairo size 1500,950 font ',10'"
    if subprocess.run([gnuplot, "-e", "set terminal pngcairo"], stdout=subprocess.DEVNULL,
                      stderr=subprocess.DEVNULL).returncode != 0:
        term = "png size 1500,950"
    script = ["set terminal %s" % term, "set output '%s'" % path,
              "set multiplot layout 2,3 title 'uvtw benchmark: CPU ns per operation "
              "(lower is better), log scales'",
              "set logscale xy", "set grid", "set key top left font ',9'",
              "set format x '10^{%L}'", "set xlabel 'N (pending timers)'",
              "set ylabel 'ns/op'", "set xrange [%g:%g]" % (min(ns) / 2, max(ns) * 2)]
    for i, (wl, metric, title) in enumerate(CHART):
        plots = []
        for b in backends:
            pts = [(n, res.get(b, wl, n, metric)) for n in ns]
            pts = [(n, v) for n, v in pts if v is not None and v > 0]
            if not pts:
                continue
            fn = os.path.join(tmp, "%d_%s.dat" % (i, b))
            with open(fn, "w") as f:
                for n, v in pts:
                    f.write("%d %g\n" % (n, v))
            plots.append("'%s' using 1:2 with linespoints lw 2 pt 7 title '%s' noenhanced" % (fn, LABEL[b]))
        yardstick = () if metric == "ns_fire" else (
            ("ns_random_touch", "memory: 1 random touch"),
            ("ns_dependent_miss", "memory: 1 dependent miss"),
            ("ns_list_move", "memory: 1 list move (floor)"))
        for metric_m, label_m in yardstick:
            pts = [(n, res.get("uv", "memory", n, metric_m)) for n in ns]
            pts = [(n, v) for n, v in pts if v]
            if pts:
                fn = os.path.join(tmp, "%d_%s.dat" % (i, metric_m))
                with open(fn, "w") as f:
                    for n, v in pts:
                        f.write("%d %g\n" % (n, v))
                style = {"ns_random_touch": "dt 2 lw 1 lc rgb 'gray50'",
                         "ns_dependent_miss": "dt 3 lw 1 lc rgb 'gray30'",
                         "ns_list_move": "dt 4 lw 1 lc rgb 'gray10'"}[metric_m]
                plots.append("'%s' using 1:2 with lines %s title '%s' noenhanced"
                             % (fn, style, label_m))
        script.append("set title '%s'" % title)
        if i == 1:
            script.append("unset key")  # one legend, in the first panel
        if any("noenhanced" in p and "memory:" not in p for p in plots):
            script.append("plot " + ", ".join(plots))
        else:  # nothing measured for this panel
            script += ["set label 1 'not run' at graph 0.5,0.5 center",
                       "plot [%g:%g] [1:10] 0 notitle" % (min(ns) / 2, max(ns) * 2),
                       "unset label 1"]
    script.append("unset multiplot")
    sp = os.path.join(tmp, "chart.gp")
    with open(sp, "w") as f:
        f.write("\n".join(script) + "\n")
    proc = subprocess.run([gnuplot, sp], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    shutil.rmtree(tmp, ignore_errors=True)
    if proc.returncode != 0:
        log("gnuplot failed: " + proc.stderr.strip())
        return False
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bindir", help="directory with the bench_* executables (build/bench)")
    ap.add_argument("--quick", action="store_true",
                    help="N = 10^4, one repeat, million_timers with 10^5 timers (CI)")
    ap.add_argument("--big", action="store_true", help="also N = 10^7 (needs ~4 GB of RAM)")
    ap.add_argument("--n", help="comma-separated timer counts, e.g. 1e4,1e6")
    ap.add_argument("--repeats", type=int, help="repeats per workload (default: by N)")
    ap.add_argument("--backends", help="comma-separated subset of uvtw,uv,ev,event")
    ap.add_argument("--mt-timers", help="timers in million_timers (default 10^7; 10^5 quick)")
    ap.add_argument("--workloads", default="cancel,bump,expire,churn",
                    help="subset of cancel,bump,expire,churn (million_timers: see below)")
    ap.add_argument("--runs", type=int, default=1,
                    help="run every backend process this many times per N, interleaved, and "
                         "report the median over runs (a shared machine's noise hits whole "
                         "processes; default 1)")
    ap.add_argument("--no-million", action="store_true", help="skip million_timers")
    ap.add_argument("--mt-repeats", type=int,
                    help="million_timers runs per backend, median taken (default 3; 1 quick)")
    ap.add_argument("--million-all", action="store_true",
                    help="run million_timers on libev and libevent too (default: uvtw, uv)")
    ap.add_argument("--csv", help="CSV output path (default: BINDIR/bench.csv)")
    ap.add_argument("--chart", help="PNG chart path (default: BINDIR/bench.png)")
    ap.add_argument("--table", help="also write the report (markdown) to this path")
    ap.add_argument("--replot", metavar="CSV",
                    help="redraw the chart (--chart) from a CSV of an earlier run; runs nothing")
    ap.add_argument("--seed", default="42")
    ap.add_argument("-v", "--verbose", action="store_true", help="echo backend progress")
    args = ap.parse_args()

    if args.replot:
        res = Results()
        with open(args.replot) as f:
            next(f)
            for line in f:
                b, wl, n, metric, v = line.strip().split(",")[:5]
                res.samples[(b, wl, int(n), metric)] = [float(v)]
        ns = sorted({n for (b, wl, n, m) in res.samples if wl in ("cancel", "churn")})
        backends = [k for k, _, _ in BACKENDS if any(b == k for (b, _, _, _) in res.samples)]
        out = args.chart or "bench.png"
        return 0 if chart(res, backends, ns, out, lambda m: print(m, file=sys.stderr)) else 1

    bindir = find_bindir(args.bindir)
    csv_path = args.csv or os.path.join(bindir, "bench.csv")
    png_path = args.chart or os.path.join(bindir, "bench.png")
    started = datetime.datetime.now(datetime.timezone.utc)

    progress = re.compile(r"^(\$ |  bench \w+: (\w+, N=\d+, \d+ repeats|million_timers, \d+ timers)$"
                          r"|  \w+: [\d.]+ seconds \w+$)")

    def log(msg):  # backend warnings always show; progress only with -v
        if args.verbose or not progress.match(msg):
            print(msg, file=sys.stderr, flush=True)

    if args.n:
        ns = [int(float(x)) for x in args.n.split(",") if x]
    elif args.quick:
        ns = [10000]
    else:
        ns = [10000, 100000, 1000000] + ([10000000] if args.big else [])
    mt_n = None if args.no_million else int(float(args.mt_timers or (1e5 if args.quick else 1e7)))

    wanted = args.backends.split(",") if args.backends else [k for k, _, _ in BACKENDS]
    backends, notes = [], []
    for key, _, full in BACKENDS:
        if key not in wanted:
            continue
        exe = os.path.join(bindir, "bench_" + key)
        if os.access(exe, os.X_OK):
            backends.append(key)
        else:
            notes.append("%s: MISSING, left out of the comparison: %s." % (full, MISSING_REASON[key]))
    for n in notes:
        print("NOTE: " + n, file=sys.stderr)
    if "uv" not in backends:
        sys.exit("run_bench.py: bench_uv is required (every ratio is to uv_timer_t)")

    res = Results()
    failed = []
    common = ["--seed", args.seed] + (["--quick"] if args.quick else [])
    if args.repeats:
        common += ["--repeats", str(args.repeats)]
    mt_repeats = args.mt_repeats or (1 if args.quick else 3)
    for r in range(mt_repeats if mt_n else 0):
        for b in backends:  # interleaved, so noise spreads over both
            if b in ("uvtw", "uv") or args.million_all:
                log("million_timers: %s, %s timers, run %d of %d" %
                    (LABEL[b], pow10(mt_n), r + 1, mt_repeats))
                rc, out = run([os.path.join(bindir, "bench_" + b), "--workloads",
                               "million_timers", "--mt-timers", str(mt_n)], log)
                res.parse(out)
                if rc:
                    failed.append("%s million_timers" % b)
    log("memory yardstick (N cache lines in random order)")
    rc, out = run([os.path.join(bindir, "bench_uv"), "--workloads", "memory", "--n",
                   ",".join(str(n) for n in ns)], log)
    res.parse(out)
    for i, n in enumerate(ns):
        for r in range(max(args.runs, 1)):
            k = (i + r) % len(backends)
            order = backends[k:] + backends[:k]
            for b in order:
                log("N=%s: %s" % (pow10(n), LABEL[b]))
                rc, out = run([os.path.join(bindir, "bench_" + b), "--workloads",
                               args.workloads, "--n", str(n)] + common, log)
                res.parse(out)
                if rc:
                    failed.append("%s N=%d" % (b, n))
    finished = datetime.datetime.now(datetime.timezone.utc)

    versions = sorted(set(v for (b, k), v in res.info.items() if k == "version"))
    cmd = " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:])
    head = [
        "uvtw benchmark, %s (%.0f s)" % (started.strftime("%Y-%m-%d %H:%M UTC"),
                                         (finished - started).total_seconds()),
        "command: %s" % cmd,
        "CPU: %s, %d cores; load average at the end %s" % (cpu_model(), os.cpu_count() or 0,
                                                          loadavg()),
        "versions: %s" % "; ".join(versions),
        "ns = process CPU time per operation, median of repeats%s; ratio in parentheses is to "
        "uv_timer_t in this run." % (" and of %d runs" % args.runs if args.runs > 1 else ""),
        "million_timers: median of %d runs per backend." % mt_repeats if mt_n else "",
        "lateness: loop-clock ms past the deadline (past the first loop iteration after the "
        "starts, for deadlines the starts themselves overran).",
    ] + ["NOTE: " + n for n in notes]
    head = [h for h in head if h]
    tab = table(res, backends, ns, mt_n)
    mem = ["Memory yardstick, N cache lines in the workloads' random order: ns per "
           "independent touch / per dependent miss (a list walk or heap step) / per "
           "list move (a random 56-byte record unlinked from one of 5 doubly linked "
           "lists and appended to one, inline: the floor of a churn step or a restart "
           "for timers on intrusive lists):"]
    for n in ns:
        a = res.get("uv", "memory", n, "ns_random_touch")
        b = res.get("uv", "memory", n, "ns_dependent_miss")
        c = res.get("uv", "memory", n, "ns_list_move")
        if a is not None and b is not None:
            mem.append("  N=%s: %s / %s / %s" % (pow10(n), fmt(a), fmt(b),
                                                 fmt(c) if c is not None else "-"))
    tab += "\n\n" + "\n".join(mem)
    tgt, checks = targets(res, mt_n)
    report = "\n".join(head) + "\n\n" + tab + "\n\nuvtw targets:\n\n" + tgt + "\n"
    print(report)

    with open(csv_path, "w") as f:
        f.write("backend,workload,n,metric,value,ratio_to_uv\n")
        for (b, wl, n, metric), v in sorted(res.values.items()):
            base = res.get("uv", wl, n, metric)
            f.write("%s,%s,%d,%s,%.6g,%s\n" % (b, wl, n, metric, v,
                                               "%.4f" % (v / base) if base else ""))
    print("CSV: %s" % csv_path)
    if chart(res, backends, ns, png_path, log):
        print("chart: %s" % png_path)
    if args.table:
        with open(args.table, "w") as f:
            f.write(report)

    problems = []
    for n in ns:
        for metric in ("early_fires", "order_violations", "fifo_violations"):
            v = res.get("uvtw", "expire", n, metric)
            if v:
                problems.append("uvtw broke its contract: %s = %d at N=%s" % (metric, v, pow10(n)))
    for p in problems:
        print("ERROR: " + p, file=sys.stderr)
    if failed:
        print("ERROR: failed runs: " + ", ".join(failed), file=sys.stderr)
    return 1 if failed or problems else 0


if __name__ == "__main__":
    sys.exit(main())
