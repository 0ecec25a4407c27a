#!/usr/bin/env python3
"""failed_tests.py JSON...: for each test that did not pass in these Meson
JSON logs, its name, its result, its failed TAP lines and the last lines of
its output, so that the end of CI's output says what failed and how."""
import json
import sys

for path in sys.argv[1:]:
    try:
        lines = open(path).read().splitlines()
    except OSError:
        continue
    for line in lines:
        if not line.strip():
            continue
        try:
            t = json.loads(line)
        except ValueError:
            continue
        if t.get("result") in ("OK", "EXPECTEDFAIL", "SKIP"):
            continue
        out = (t.get("stdout") or "").splitlines()
        err = (t.get("stderr") or "").splitlines()
        print(f"--- {t.get('name', '?')}: {t.get('result')} ({path})")
        for l in [l for l in out if l.startswith("not ok")][:10]:
            print("    " + l)
        for l in (out[-12:] + err[-12:]):
            print("    | " + l[:200])
