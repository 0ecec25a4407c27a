#!/usr/bin/env python3
"""The docs' C snippets as tests, as Rust's doc tests are: every ```c block
of the Markdown files named is compiled with -std=c11 -Wall -Wextra
-Wpedantic -Werror against include/uvtw.h and libuv, and a whole program
(one that defines main) is linked against the library built here and run:
it must exit 0. One TAP case per block, named FILE:LINE (the fence's line);
arguments other than options keep only the cases whose name contains one.

A block's fence names the language, then words that say how to test it:

  ```c                   a whole translation unit, compiled as it stands: it
                         includes what it uses, as a reader's file would
  ```c fragment          a part of a program. Compiled at file scope after
                         #include <uvtw.h>, <stdio.h> and <stdlib.h>, unless
                         an HTML comment right above the fence (Markdown
                         does not show it) gives the code around it:
                           <!-- fragment context:
                           ...code before...
                           @@ fragment @@
                           ...code after...
                           -->
  excerpt=PATH           (either kind) the block, less its indentation, is
                         a verbatim part of PATH, a file the build compiles
  args=A,B               a whole program is run with these arguments

A word this script does not know fails the block's case, so a typo cannot
skip a block.

The ```sh and ```meson blocks are checked too, as test/doc_commands.py
says (each command names what exists; a meson block sets up in a scratch
consumer project), given the build's directory (--build-root) and meson
(--meson).
"""
import argparse
import os
import re
import subprocess
import sys

import doc_commands

FENCE = re.compile(r"^(\s*)```\s*(\S*)(.*)$")
MAIN = re.compile(r"\bint\s+main\s*\(")
MARKER = "@@ fragment @@"
DEFAULT_PRELUDE = "#include <uvtw.h>\n#include <stdio.h>\n#include <stdlib.h>\n"
RUN_TIMEOUT = 60


def dedent(lines, indent):
    return [l[len(indent):] if l.startswith(indent) else l.lstrip() for l in lines]


def fragment_context(lines, fence_index):
    """The text of a `<!-- fragment context:` comment ending right above
    the fence (blank lines between allowed), or None."""
    i = fence_index - 1
    while i >= 0 and not lines[i].strip():
        i -= 1
    if i < 0 or lines[i].strip() != "-->":
        return None
    end = i
    while i >= 0 and not lines[i].strip().startswith("<!--"):
        i -= 1
    if i < 0 or lines[i].strip() != "<!-- fragment context:":
        return None
    indent = re.match(r"\s*", lines[i]).group(0)
    return "\n".join(dedent(lines[i + 1:end], indent)) + "\n"


def blocks(root, name, langs=("c",)):
    """Yields (name, line, code, words, context, lang) for each block in one
    of `langs`."""
    lines = open(os.path.join(root, name), encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, lang, rest = m.group(1), m.group(2), m.group(3)
        j = i + 1
        while j < len(lines) and not re.match(r"^\s*```\s*$", lines[j]):
            j += 1
        if lang in langs:
            code = "\n".join(dedent(lines[i + 1:j], indent)) + "\n"
            yield name, i + 1, code, rest.split(), fragment_context(lines, i), lang
        i = j + 1


class Case:
    def __init__(self, root, work, cc, cflags, ldflags, name, line, code, words, context, lang):
        self.root, self.work, self.cc = root, work, cc
        self.cflags, self.ldflags = cflags, ldflags
        self.name = f"{name}:{line}"
        self.code, self.context = code, context
        self.fragment, self.excerpt, self.args, self.unknown = False, None, [], []
        for w in words:
            if w == "fragment":
                self.fragment = True
            elif w.startswith("excerpt="):
                self.excerpt = w[len("excerpt="):]
            elif w.startswith("args="):
                self.args = w[len("args="):].split(",")
            else:
                self.unknown.append(w)

    def source(self):
        if not self.fragment:
            return self.code
        if self.context is None:
            return DEFAULT_PRELUDE + self.code
        if MARKER not in self.context:
            raise ValueError(f"its fragment context has no '{MARKER}' line")
        return self.context.replace(MARKER + "\n", self.code, 1)

    def run(self):
        """Returns (ok, description, diagnostics)."""
        if self.unknown:
            return False, "fence words known", [f"unknown words after ```c: {' '.join(self.unknown)}"]
        if self.context is not None and not self.fragment:
            return False, "fence words known", ["a fragment context above a block not marked fragment"]
        if self.excerpt is not None:
            path = os.path.join(self.root, self.excerpt)
            try:
                text = open(path, encoding="utf-8").read()
            except OSError as e:
                return False, f"an excerpt of {self.excerpt}", [str(e)]
            if self.code not in text:
                return False, f"an excerpt of {self.excerpt}", [
                    f"the block is not a verbatim part of {self.excerpt}: copy it again"]
        try:
            src = self.source()
        except ValueError as e:
            return False, "compiles", [str(e)]
        base = os.path.join(self.work, re.sub(r"[^A-Za-z0-9]+", "_", self.name))
        with open(base + ".c", "w", encoding="utf-8") as f:
            f.write(src)
        whole = MAIN.search(src) is not None
        if whole:
            cmd = self.cc + self.cflags + [base + ".c", "-o", base] + self.ldflags
        else:
            cmd = self.cc + self.cflags + ["-c", base + ".c", "-o", base + ".o"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            return False, "compiles" + (" and links" if whole else ""), [
                " ".join(cmd)] + (r.stdout + r.stderr).splitlines()
        if not whole:
            return True, "compiles (a fragment, not run)", []
        try:
            r = subprocess.run([base] + self.args, capture_output=True, text=True,
                               timeout=RUN_TIMEOUT)
        except subprocess.TimeoutExpired:
            return False, "runs", [f"still running after {RUN_TIMEOUT} s"]
        if r.returncode != 0:
            return False, "runs and exits 0", [f"exit status {r.returncode}"] + (
                r.stdout + r.stderr).splitlines()[-30:]
        return True, "compiles, links, runs and exits 0", []


def command_cases(a, docs):
    """The cases of the sh and meson blocks (test/doc_commands.py)."""
    tree = doc_commands.Tree(a.source_root, a.build_root, a.meson)
    found = {doc: list(blocks(a.source_root, doc, ("sh", "meson"))) for doc in docs}
    for doc in docs:
        for b in found[doc]:
            if b[5] == "sh":
                tree.setup_dirs |= doc_commands.setup_dirs(b[2])
    cases = []
    for doc in docs:
        before = []
        for name, line, code, words, _, lang in found[doc]:
            if lang == "sh":
                cases.append(doc_commands.ShCase(tree, f"{name}:{line}", code))
            else:
                cases.append(doc_commands.MesonCase(tree, a.work_dir, f"{name}:{line}", code,
                                                    list(before)))
                before.append(code)
    return cases


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--source-root", required=True)
    ap.add_argument("--work-dir", required=True)
    ap.add_argument("--cc", action="append", required=True, help="the compiler, one word each")
    ap.add_argument("--cflag", action="append", default=[])
    ap.add_argument("--ldflag", action="append", default=[])
    ap.add_argument("--doc", action="append", required=True,
                    help="a Markdown file, or a directory: its *.md files; from the root")
    ap.add_argument("--build-root", help="the build's directory: checks the sh and meson blocks")
    ap.add_argument("--meson", action="append", help="meson's command, one word each")
    ap.add_argument("only", nargs="*", help="run only cases whose name contains one of these")
    a = ap.parse_args()
    os.makedirs(a.work_dir, exist_ok=True)
    docs = []
    for doc in a.doc:
        path = os.path.join(a.source_root, doc)
        if os.path.isdir(path):
            docs += sorted(os.path.join(doc, f) for f in os.listdir(path) if f.endswith(".md"))
        else:
            docs.append(doc)
    cases = []
    for doc in docs:
        found = list(blocks(a.source_root, doc))
        cases += [Case(a.source_root, a.work_dir, a.cc, a.cflag, a.ldflag, *b) for b in found]
    if a.build_root:
        cases += command_cases(a, docs)
    if a.only:
        cases = [c for c in cases if any(o in c.name for o in a.only)]
    elif not cases:
        # A parser that found nothing would pass everything.
        print(f"not ok 1 - a ```c block in {', '.join(docs)}")
        print("1..1")
        return 1
    failed = 0
    for n, c in enumerate(cases, 1):
        ok, what, diag = c.run()
        print(f"{'ok' if ok else 'not ok'} {n} - {c.name} {what}")
        for d in diag:
            print(f"# {d}")
        failed += not ok
        sys.stdout.flush()
    print(f"1..{len(cases)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
