#!/usr/bin/env python3
"""count_results.py JSON...: prints "passed failed skipped" over Meson's
JSON test logs (one line per test run). A missing log counts nothing; a
line that is not JSON counts as a failure."""
import json
import sys

passed = failed = skipped = 0
for path in sys.argv[1:]:
    try:
        lines = open(path).read().splitlines()
    except OSError:
        continue
    for line in lines:
        if not line.strip():
            continue
        try:
            r = json.loads(line).get("result")
        except ValueError:
            failed += 1
            continue
        if r in ("OK", "EXPECTEDFAIL"):
            passed += 1
        elif r == "SKIP":
            skipped += 1
        else:
            failed += 1
print(passed, failed, skipped)
