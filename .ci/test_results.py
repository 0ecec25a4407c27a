#!/usr/bin/env python3
"""test_results.py count|failed JSON...: reads Meson's JSON test logs (one
line per test run; a missing log has none).
  count   prints "passed failed skipped"; a line that is not JSON counts
          as a failure.
  failed  prints, for each test that did not pass, its name, its result,
          its failed TAP lines and the last lines of its output, so that
          the end of CI's output says what failed and how."""
import json
import sys

PASSED = ("OK", "EXPECTEDFAIL")


def runs(paths):
    """Each test run in the logs, as (path, record); None where not JSON."""
    for path in paths:
        try:
            lines = open(path).read().splitlines()
        except OSError:
            continue
        for line in lines:
            if not line.strip():
                continue
            try:
                yield path, json.loads(line)
            except ValueError:
                yield path, None


def count(paths):
    passed = failed = skipped = 0
    for _, t in runs(paths):
        r = t.get("result") if t is not None else None
        if r in PASSED:
            passed += 1
        elif r == "SKIP":
            skipped += 1
        else:
            failed += 1
    print(passed, failed, skipped)


def failed(paths):
    for path, t in runs(paths):
        if t is None or t.get("result") in PASSED + ("SKIP",):
            continue
        out = (t.get("stdout") or "").splitlines()
        err = (t.get("stderr") or "").splitlines()
        print(f"--- {t.get('name', '?')}: {t.get('result')} ({path})")
        for l in [l for l in out if l.startswith("not ok")][:10]:
            print("    " + l)
        for l in (out[-12:] + err[-12:]):
            print("    | " + l[:200])


if __name__ == "__main__":
    {"count": count, "failed": failed}[sys.argv[1]](sys.argv[2:])
