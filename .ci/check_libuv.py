#!/usr/bin/env python3
"""check_libuv.py JSON VERSION: the test binaries' TAP diagnostics name the
libuv they ran on (e.g. "# libuv 1.50.0, uvtw 0.1.0"); every version
printed in this Meson JSON log must be VERSION, and at least one test must
print one. Exits non-zero otherwise."""
import json
import re
import sys

path, want = sys.argv[1], sys.argv[2]
seen = {}
try:
    lines = open(path).read().splitlines()
except OSError as e:
    print(f"libuv check: no test log ({e})")
    sys.exit(1)
pat = re.compile(r"\blibuv:?\s+v?(\d+\.\d+\.\d+)")
for line in lines:
    if not line.strip():
        continue
    t = json.loads(line)
    for out in (t.get("stdout") or "").splitlines():
        if out.startswith("#"):
            for v in pat.findall(out):
                seen.setdefault(v, set()).add(t.get("name", "?").split(" / ")[-1])
if not seen:
    print(f"libuv check: no test printed its libuv version (want {want})")
    sys.exit(1)
for v, names in sorted(seen.items()):
    print(f"libuv check: {', '.join(sorted(names))} ran on libuv {v}")
if set(seen) != {want}:
    print(f"libuv check: FAILED, expected every test on libuv {want}, got {', '.join(sorted(seen))}")
    sys.exit(1)
print(f"libuv check: ok, libuv {want}")
