"""The docs' ```sh and ```meson blocks as tests, for doc_snippets.py: what
can be checked without running them (no network, no root, no long build).

A ```sh block, line by line (a trailing backslash joins lines; `&&`, `;`,
`|` and `&` separate commands; leading VAR=value words and sudo are
dropped):

  meson SUB ...      SUB is a meson command; every option is one that
                     `meson SUB --help` lists; -Dname=value names an option
                     of this build (its meson-info) with a value it takes;
                     `-C DIR` names a directory some `meson setup DIR` of
                     the docs makes; `meson compile` names targets and
                     `meson test` tests and suites the meson.build files
                     define
  $(pkg-config ...)  runs, on the uvtw-uninstalled.pc this build writes
  PATH words         a word with a "/" that starts at a directory of the
                     source tree names a file there; one under a build
                     directory the docs set up (build/examples/x) names a
                     target of that subdirectory's meson.build; an option
                     of a script of the tree (run_bench.py --bindir)
                     appears in the script

Other commands (sudo, apt-get, cc, curl, node...) are not run: their
path words are checked only.

A ```meson block is a part of a consumer's meson.build: it is set up, with
the blocks above it in the same file, in a scratch project that has this
source tree as its subproject `uvtw` (--force-fallback-for=uvtw) and an
app.c, and `meson setup` must succeed.
"""
import json
import os
import re
import shlex
import shutil
import subprocess

SEPARATORS = {"&&", "||", ";", "|", "&"}
SUBST = re.compile(r"\$\(([^()]*)\)")
ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
SCRATCH_APP = "#include <uvtw.h>\n\nint main(void) {\n  return 0;\n}\n"


class Tree:
    """What the checks read, once: the build's options, the meson.build
    files' text, each meson command's options."""

    def __init__(self, root, build_root, meson):
        self.root, self.build_root, self.meson = root, build_root, meson
        self.setup_dirs = set()
        self._help = {}
        with open(os.path.join(build_root, "meson-info", "intro-buildoptions.json")) as f:
            self.options = {o["name"]: o for o in json.load(f) if not o.get("subproject")}
        self.meson_files = {}
        for d, dirs, files in os.walk(root):
            dirs[:] = [x for x in dirs if not x.startswith(".") and x != "subprojects"
                       and not os.path.exists(os.path.join(d, x, "meson-private"))]
            if "meson.build" in files:
                rel = os.path.relpath(d, root)
                with open(os.path.join(d, "meson.build"), encoding="utf-8") as f:
                    self.meson_files["" if rel == "." else rel] = f.read()

    def defines(self, name, subdir=None):
        """Whether a meson.build (that of `subdir` if given) names `name`."""
        texts = [self.meson_files.get(subdir, "")] if subdir is not None else \
            self.meson_files.values()
        return any(f"'{name}'" in t for t in texts)

    def help(self, sub):
        """The options of `meson SUB`: {flag: takes a value}, or None."""
        if sub not in self._help:
            r = subprocess.run(self.meson + [sub, "--help"], capture_output=True, text=True)
            opts = None
            if r.returncode == 0:
                opts = {}
                for line in r.stdout.splitlines():
                    m = re.match(r"^  (-\S.*?)(?:\s{2,}|$)", line)
                    if not m:
                        continue
                    for spec in m.group(1).split(", "):
                        words = spec.split()
                        opts[words[0]] = len(words) > 1
            self._help[sub] = opts
        return self._help[sub]


def commands(code):
    """Yields each command of a sh block as a list of words, $(...) kept
    whole as one word."""
    text = re.sub(r"\\\n", " ", code)
    for line in text.splitlines():
        subs = []

        def hold(m):
            subs.append(m.group(0))
            return f" __SUBST{len(subs) - 1}__ "

        line = SUBST.sub(hold, line)
        lexer = shlex.shlex(line, posix=True, punctuation_chars="&|;")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        try:
            words = list(lexer)
        except ValueError as e:
            yield ["__UNPARSED__", str(e)]
            continue
        words = [re.sub(r"__SUBST(\d+)__", lambda m: subs[int(m.group(1))], w) for w in words]
        cmd = []
        for w in words + [";"]:
            if w in SEPARATORS:
                while cmd and (ASSIGN.match(cmd[0]) or cmd[0] == "sudo"):
                    cmd.pop(0)
                if cmd:
                    yield cmd
                cmd = []
            else:
                cmd.append(w)


def setup_dirs(code):
    """The build directories a sh block's `meson setup DIR` makes."""
    dirs = set()
    for cmd in commands(code):
        if cmd[:2] == ["meson", "setup"]:
            dirs |= {w for w in cmd[2:3] if not w.startswith("-")}
    return dirs


class ShCase:
    def __init__(self, tree, name, code):
        self.tree, self.name, self.code = tree, name, code

    def run(self):
        problems, checked = [], 0
        for cmd in commands(self.code):
            if cmd[0] == "__UNPARSED__":
                problems.append(f"cannot split a line: {cmd[1]}")
                continue
            for w in cmd:
                for sub in SUBST.findall(w):
                    checked += 1
                    problems += self.pkg_config(shlex.split(sub))
            if cmd[0] == "meson":
                checked += 1
                problems += self.meson_command(cmd)
            for i, w in enumerate(cmd):
                n, p = self.path_word(w, cmd, i)
                checked += n
                problems += p
        if problems:
            return False, "commands name what exists", problems
        return True, f"commands name what exists ({checked} names checked, nothing run)", []

    def pkg_config(self, words):
        if not words or words[0] != "pkg-config":
            return []
        env = dict(os.environ)
        uninstalled = os.path.join(self.tree.build_root, "meson-uninstalled")
        env["PKG_CONFIG_PATH"] = uninstalled + os.pathsep + env.get("PKG_CONFIG_PATH", "")
        r = subprocess.run(words, capture_output=True, text=True, env=env)
        if r.returncode != 0:
            return [f"$({' '.join(words)}) fails on this build's uninstalled .pc: "
                    + r.stderr.strip()]
        return []

    def meson_command(self, cmd):
        if self.tree.meson is None:
            return []
        if len(cmd) < 2:
            return ["`meson` without a command"]
        sub = cmd[1]
        opts = self.tree.help(sub)
        if opts is None:
            return [f"`meson {sub}`: not a meson command"]
        problems, positional, wd, suites = [], [], None, []
        words = cmd[2:]
        i = 0
        while i < len(words):
            w = words[i]
            i += 1
            if not w.startswith("-") or w == "-":
                positional.append(w)
                continue
            flag, value = w, None
            if w.startswith("--") and "=" in w:
                flag, value = w.split("=", 1)
            elif not w.startswith("--") and len(w) > 2:
                flag, value = w[:2], w[2:]
            if flag not in opts:
                problems.append(f"`meson {sub}` has no option {flag}")
                continue
            if opts[flag] and value is None:
                value = words[i] if i < len(words) else None
                i += 1
            if flag == "-D":
                problems += self.option(value or "")
            elif flag == "-C":
                wd = value
            elif flag == "--suite":
                suites.append(value)
        if wd is not None and wd not in self.tree.setup_dirs:
            problems.append(f"-C {wd}: no `meson setup {wd}` in the docs")
        if sub == "setup" and not positional:
            problems.append("`meson setup` without a build directory")
        if sub == "compile":
            problems += [f"`meson compile`: no meson.build defines a target '{t}'"
                         for t in positional if not self.tree.defines(t.split("/")[-1].split(":")[0])]
        if sub == "test":
            problems += [f"`meson test`: no meson.build defines a test '{t}'"
                         for t in positional if not self.tree.defines(t)]
            problems += [f"`meson test --suite {s}`: no meson.build names a suite '{s}'"
                         for s in suites if not self.tree.defines(s)]
        return problems

    def option(self, assignment):
        name, _, value = assignment.partition("=")
        if ":" in name:  # a subproject's option
            return []
        o = self.tree.options.get(name)
        if o is None:
            return [f"-D{name}: no such option in this build"]
        if o["type"] == "boolean" and value not in ("true", "false"):
            return [f"-D{name}={value}: a boolean is true or false"]
        choices = o.get("choices")
        if o["type"] == "combo" and value not in choices:
            return [f"-D{name}={value}: not one of {', '.join(choices)}"]
        if o["type"] == "array" and choices:
            bad = [v for v in value.split(",") if v not in choices]
            if bad:
                return [f"-D{name}={value}: {', '.join(bad)} not among {', '.join(choices)}"]
        if o["type"] == "integer" and not re.fullmatch(r"-?\d+", value):
            return [f"-D{name}={value}: not an integer"]
        return []

    def path_word(self, w, cmd, i):
        """(checks made, problems) for one word that may be a path."""
        if "/" not in w or w.startswith(("-", "/", "./", "$", "~")) or "://" in w:
            return 0, []
        w = w.rstrip("/")
        first, _, rest = w.partition("/")
        if first in self.tree.setup_dirs:
            sub, target = os.path.split(rest)
            if rest in self.tree.meson_files or (sub in self.tree.meson_files
                                                 and self.tree.defines(target, sub)):
                return 1, []  # a build subdirectory, or a target built there
            return 1, [f"{w}: no meson.build of the source tree builds {rest}"]
        if not os.path.exists(os.path.join(self.tree.root, first)):
            return 0, []  # not a path of the tree (a file the reader makes)
        path = os.path.join(self.tree.root, w)
        if not os.path.exists(path):
            return 1, [f"{w}: no such file in the source tree"]
        problems = []
        if os.path.isfile(path) and w.endswith((".py", ".sh")):
            with open(path, encoding="utf-8") as f:
                text = f.read()
            for opt in cmd[i + 1:]:
                flag = opt.split("=", 1)[0]
                if flag.startswith("--") and flag not in text:
                    problems.append(f"{w}: the script has no option {flag}")
        return 1, problems


class MesonCase:
    def __init__(self, tree, work, name, code, before):
        self.tree, self.work, self.name = tree, work, name
        self.code, self.before = code, before

    def run(self):
        what = "sets up in a consumer's meson.build (uvtw as its subproject)"
        if self.tree.meson is None:
            return True, what + " # SKIP meson not found", []
        d = os.path.join(self.work, re.sub(r"[^A-Za-z0-9]+", "_", self.name) + "_meson")
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(os.path.join(d, "subprojects"))
        os.symlink(os.path.abspath(self.tree.root), os.path.join(d, "subprojects", "uvtw"))
        try:
            return self.setup(d, what)
        finally:  # no link back into the source tree is left in the build
            shutil.rmtree(d, ignore_errors=True)

    def setup(self, d, what):
        with open(os.path.join(d, "meson.build"), "w", encoding="utf-8") as f:
            f.write("project('app', 'c')\n" + "".join(self.before) + self.code)
        with open(os.path.join(d, "app.c"), "w", encoding="utf-8") as f:
            f.write(SCRATCH_APP)
        build = os.path.join(d, "build")
        cmd = self.tree.meson + ["setup", "--force-fallback-for=uvtw", build, d]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            return False, what, [" ".join(cmd)] + (r.stdout + r.stderr).splitlines()[-20:]
        return True, what, []
