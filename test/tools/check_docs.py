#!/usr/bin/env python3
"""Reruns the commands whose output README.md and docs/*.md quote, and compares.

Markup (docs/check-docs.md explains it for writers): a quoted output is the block right after an
HTML comment naming the command that prints it,

    <!-- check: ./train --resume 1 -o out/empty -->
    ```
    error: ...
    ```

`check-slow:` instead of `check:` marks a command that trains for a while (make check-docs
runs it; --quick, which make test uses, skips it). The block is a fenced block, an indented
block, or a Markdown table:

* a fenced or indented block is compared line by line with the command's output (stdout and
  stderr together). A line `...` stands for any number of output lines, `…` inside a line for
  any text (a timing, a path that differs from machine to machine). Every other character must
  be equal, except numbers: a quoted number must equal the printed one rounded to the decimals
  the quote shows (0.372 matches 0.3716; 0.3716 does not match 0.372).
* a table is compared by its numbers only: every number in its body rows, row after row, against
  every number of the output, with the same rounding.

`CMD | FILTER`: the part before the first unquoted `|` runs once per session (its output is kept),
and each check's filter reads that output: five checks on one `./train` run train once. Commands
run in one scratch directory (the built programs, data/ and test/ linked, scripts/ copied), pages in the
order README.md, docs/reproduce.md (whose default run writes out/, which other pages read), then
the others. Exit status 1 with the page, the line and both texts when a quote does not match.

Names (--names runs this part alone: pure Python, a second, nothing built): every inline code
span of the pages (`...`, outside fenced blocks) is read for the names it gives, and each must
exist in the checkout. A path (a word with a / whose first part is a file or folder at the top of
the checkout, one that starts with ./ or ../, or one that ends in a source extension: .h .cu
.py .md ...) must be a file or folder there, relative to the checkout or to the page's folder;
a bare file name (train.cpp) or a path no top-level folder starts (cooperative_groups/reduce.h)
may also be the end of a path in the checkout; what .gitignore ignores (out/..., ./train) is a
build or run output and is not looked for. A function, `name()` or `Class::name()` (also in
`a.b.name()`), must be defined or called in a source file (.h .cuh .cu .cpp .py .sh, the
makefiles; not the pages): `name(` there, and for Class::name, `Class::name` or a
`class|struct|namespace Class` whose body has `name(`. An option, `--name`, must be in
host/cli.h's option table or written out, `--name`, in a source file. The few names the pages
give that are not the checkout's (llm.c's files, other programs' options) are listed in
NOT_OURS with why. Exit status 1, with the page, the line and the name, for each that is missing.
"""
import argparse
import fnmatch
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from decimal import Decimal, ROUND_HALF_UP

CHECK = re.compile(r"^<!-- check(-slow)?: (.*?) -->\s*$")
UNCHECKED = re.compile(r"^<!-- unchecked: (.*?) -->\s*$")
NUMBER = re.compile(r"\d+(?:,\d{3})*(?:\.\d+)?")


def split_filter(cmd):
    """'A | B | C' -> ('A', 'B | C'): the first | outside quotes that is not part of ||."""
    quote = None
    for i, ch in enumerate(cmd):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "|" and cmd[i - 1:i] != "|" and cmd[i + 1:i + 2] != "|":
            return cmd[:i].strip(), cmd[i + 1:].strip()
    return cmd.strip(), ""


def read_checks(path):
    """Yields (line number of the first quoted line, slow, command, kind, quoted lines); for an
    <!-- unchecked: WHY --> comment, (its line number, None, WHY, "unchecked", [])."""
    lines = open(path, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        m, u = CHECK.match(lines[i]), UNCHECKED.match(lines[i])
        i += 1
        if u:
            yield i, None, u.group(1), "unchecked", []
        if not m:
            continue
        slow, cmd = bool(m.group(1)), m.group(2)
        while i < len(lines) and not lines[i].strip():
            i += 1
        if i >= len(lines):
            raise SystemExit(f"{path}:{i}: a check comment with no block after it")
        start, line = i, lines[i]
        if line.lstrip().startswith("```"):
            indent = len(line) - len(line.lstrip())
            i += 1
            block = []
            while i < len(lines) and not lines[i].lstrip().startswith("```"):
                block.append(lines[i][indent:])
                i += 1
            i += 1
            yield start + 2, slow, cmd, "lines", block
        elif line.startswith("    "):
            block = []
            while i < len(lines) and (lines[i].startswith("    ") or
                                      (not lines[i].strip() and i + 1 < len(lines) and lines[i + 1].startswith("    "))):
                block.append(lines[i][4:])
                i += 1
            yield start + 1, slow, cmd, "lines", block
        elif line.startswith("|"):
            block = []
            while i < len(lines) and lines[i].startswith("|"):
                block.append(lines[i])
                i += 1
            yield start + 3, slow, cmd, "table", block[2:]  # after the header and the |---| row
        else:
            raise SystemExit(f"{path}:{start + 1}: a check comment must be followed by a fenced block, "
                             "an indented block or a table")


def number_matches(quoted, printed):
    """The printed number, rounded to the quoted one's decimals, reads as the quoted one."""
    q, p = quoted.replace(",", ""), printed.replace(",", "")
    q_decimals = len(q.split(".")[1]) if "." in q else 0
    p_decimals = len(p.split(".")[1]) if "." in p else 0
    if q_decimals > p_decimals:  # the quote claims digits the program does not print
        return False
    step = Decimal(1).scaleb(-q_decimals)
    return Decimal(p).quantize(step, rounding=ROUND_HALF_UP) == Decimal(q)


def line_matches(quoted, printed):
    """A quoted line against a printed one: text equal, numbers to the quote's precision, … any text."""
    pattern, numbers = "", []
    for part in re.split(r"(…|\d+(?:,\d{3})*(?:\.\d+)?)", quoted.rstrip()):
        if part == "…":
            pattern += ".*?"
        elif NUMBER.fullmatch(part):
            pattern += r"(\d+(?:,\d{3})*(?:\.\d+)?)"
            numbers.append(part)
        else:
            pattern += re.escape(part)
    m = re.fullmatch(pattern, printed.rstrip())
    return bool(m) and all(number_matches(q, p) for q, p in zip(numbers, m.groups()))


def block_matches(quoted, printed):
    """Quoted lines against the output: in order, all of them, `...` for any run of lines.
    Returns None when they match, else (index of the quoted line, the output line beside it)."""
    # the longest prefix of the quote that some alignment matches tells where it went wrong
    best = [0, 0]

    def match(qi, pi):
        if qi > best[0]:
            best[0], best[1] = qi, pi
        if qi == len(quoted):
            return pi == len(printed)
        if quoted[qi].strip() == "...":
            return any(match(qi + 1, k) for k in range(pi, len(printed) + 1))
        return pi < len(printed) and line_matches(quoted[qi], printed[pi]) and match(qi + 1, pi + 1)

    if match(0, 0):
        return None
    qi, pi = best
    qi = min(qi, len(quoted) - 1)
    while qi < len(quoted) - 1 and quoted[qi].strip() == "...":
        qi += 1
    return qi, printed[pi] if pi is not None and pi < len(printed) else "(no more output)"


def table_matches(rows, printed):
    """The numbers of the table's rows against the output's. None or (row index, quoted, printed)."""
    out = NUMBER.findall("\n".join(printed))
    k = 0
    for r, row in enumerate(rows):
        for q in NUMBER.findall(row):
            if k >= len(out) or not number_matches(q, out[k]):
                return r, q, out[k] if k < len(out) else "(no more numbers)"
            k += 1
    if k < len(out):
        return len(rows) - 1, "(end of the table)", " ".join(out[k:k + 8])
    return None


def scratch_dir(root):
    """A directory in which the pages' commands run: what they write stays out of the checkout."""
    work = tempfile.mkdtemp(prefix="check_docs.")
    shutil.copytree(os.path.join(root, "scripts"), os.path.join(work, "scripts"))
    for name in ["train", "train_gpt", "train_gpt_cpu", "data", "Makefile", "cpu.mk", "gpu.mk",
                 "test"]:  # (test/golden/hf/: docs/converting.md's folders)
        if os.path.exists(os.path.join(root, name)):
            os.symlink(os.path.join(root, name), os.path.join(work, name))
    return work


# ---- names: the files, functions and options the pages name must exist ----

SPAN = re.compile(r"(?<!`)(`+)(?!`)((?:(?!\n[ \t]*\n).)+?)(?<!`)\1(?!`)", re.S)  # inline code, within a paragraph
SOURCE_EXT = (".h", ".cuh", ".cu", ".cpp", ".py", ".sh", ".mk")
PATH_EXT = SOURCE_EXT + (".md", ".txt", ".cfg", ".json")
FUNCTION = re.compile(r"(?<![\w:.*])((?:[A-Za-z_]\w*::)*)(?:[A-Za-z_]\w*\.)*([A-Za-z_][\w*]*)\(\)")  # * as in a glob
OPTION = re.compile(r"(?<![\w-])(--[A-Za-z][\w-]*)")
# Names the pages give that are not this checkout's, so not looked for in it; each says why.
NOT_OURS = {
    # the build script of llm.c's sources, which scripts/gpu_check.sh runs (docs/gpu.md)
    "build.sh",
    # doctest's header: installed, or a copy brought along (docs/gpu.md)
    "doctest.h",
    # what scripts/gpu_check.sh writes in its --out folder (docs/gpu.md)
    "summary.md",
    # the reader's own text file, in docs/reproduce.md's example of text_to_shards.py
    "book.txt",
    # a header of another project, in a compiler's message that docs/cpu-runtime.md quotes
    "torch/types.h",
}


def page_spans(path):
    """(line number, text) of each inline code span of a page, outside fenced blocks."""
    lines, fenced = [], False
    for line in open(path, encoding="utf-8").read().split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            lines.append("")
        else:
            lines.append("" if fenced else line)
    text = "\n".join(lines)
    for m in SPAN.finditer(text):
        yield text.count("\n", 0, m.start()) + 1, " ".join(m.group(2).split())


def without_comments(name, text):
    """A source's text without its comments: // and /* */ in C++ and CUDA, # in Python, shell, make."""
    if name.endswith((".h", ".cuh", ".cu", ".cpp")):
        return re.sub(r"/\*.*?\*/|//[^\n]*", " ", text, flags=re.S)
    return re.sub(r"(^|\s)#[^\n]*", r"\1", text)


class Tree:
    """What the checkout holds: its files, its sources' text, .gitignore's patterns."""

    def __init__(self, root):
        self.root = root
        self.files, self.dirs = set(), set()
        self.ignored = []  # (folder of the .gitignore, pattern), each folder's read before its contents
        for d, subdirs, files in os.walk(root):
            rel = os.path.relpath(d, root)
            rel = "" if rel == "." else rel + "/"
            if ".gitignore" in files:
                for line in open(os.path.join(d, ".gitignore"), encoding="utf-8"):
                    line = line.strip()
                    if line and not line.startswith("#") and not line.startswith("!"):
                        self.ignored.append((rel.rstrip("/"), line))
            # what git ignores is not walked (build/, out/, .deps/: outputs, possibly large)
            subdirs[:] = sorted(s for s in subdirs if s != ".git" and not self.is_ignored(rel + s, True))
            self.dirs.update(rel + s for s in subdirs)
            self.files.update(rel + f for f in files if not self.is_ignored(rel + f))
        self.top = {p.split("/")[0] for p in self.files | self.dirs}
        sources = [f for f in self.files
                   if (f.endswith(SOURCE_EXT) or os.path.basename(f) == "Makefile") and not f.startswith("docs/")]
        texts = {f: open(os.path.join(root, f), encoding="utf-8", errors="replace").read() for f in sorted(sources)}
        # options as written anywhere (a script's usage is its header comment); functions in the
        # code only, comments taken out ("after a step (device-wide)" is no function step)
        self.options = set(re.findall(r"(?<![\w-])(--[A-Za-z][\w-]*)", "\n".join(texts.values())))
        self.text = "\n".join(without_comments(f, t) for f, t in texts.items())
        self.called = set(re.findall(r"\b([A-Za-z_]\w*)\s*\(", self.text))
        cli = os.path.join(root, "host/cli.h")
        if os.path.exists(cli):  # the option table's rows: {"name", 'n' or 0, "kind", ...
            self.options |= {"--" + n for n in re.findall(r'\{"([a-z][\w-]*)",\s*(?:\'.\'|0),\s*"', open(cli).read())}

    def is_ignored(self, path, is_dir=False):
        """.gitignore's patterns, simply: /a/b anchored at its folder, a/ folders only, *.o any name."""
        is_dir = is_dir or path.endswith("/")
        for folder, pat in self.ignored:
            if folder and not path.startswith(folder + "/"):
                continue
            parts = path[len(folder) + 1 if folder else 0:].strip("/").split("/")
            dirs_only, anchored = pat.endswith("/"), pat.startswith("/") or "/" in pat.rstrip("/")
            pat = pat.strip("/")
            # the components a match may end at: any, but the last only when it may be a folder
            ends = range(1, len(parts) + 1) if is_dir or not dirs_only else range(1, len(parts))
            if anchored:
                k = pat.count("/") + 1
                if k in ends and fnmatch.fnmatchcase("/".join(parts[:k]), pat):
                    return True
            elif any(fnmatch.fnmatchcase(parts[k - 1], pat) for k in ends):
                return True
        return False

    def has_path(self, path, page_dir):
        p = os.path.normpath(path).rstrip("/")
        for base in ("", page_dir):
            q = os.path.normpath(os.path.join(base, p))
            if q in self.files or q in self.dirs or q == ".":
                return True
            if self.is_ignored(q, path.endswith("/")):  # a build or run output
                return True
            if any(q + ext in self.files for ext in (".cu", ".cpp")):  # a program built from its source
                return True
        # a bare name, or a path no top-level entry starts: the end of a path in the checkout
        if "/" not in p or (p.split("/")[0] not in self.top and not path.startswith(".")):
            return any(f == p or f.endswith("/" + p) for f in self.files | self.dirs)
        return False

    def has_function(self, scope, name):
        if "*" in name:  # flash_*_tiles(): one of them at least
            return any(fnmatch.fnmatchcase(n, name) for n in self.called)
        if not scope:
            return name in self.called
        cls = scope.rstrip(":").split("::")[-1]
        if re.search(rf"\b{re.escape(scope)}{re.escape(name)}\b", self.text):
            return True
        for m in re.finditer(rf"\b(?:class|struct|namespace)\s+{re.escape(cls)}\b[^;{{]*\{{", self.text):
            depth, i = 1, m.end()
            while depth and i < len(self.text):  # the body, by its braces
                depth += {"{": 1, "}": -1}.get(self.text[i], 0)
                i += 1
            if re.search(rf"\b{re.escape(name)}\s*\(", self.text[m.end():i]):
                return True
        return False


def path_words(span):
    """The words of a span that look like paths in the checkout."""
    for word in span.split():
        word = word.strip("()[],;:'\"")
        word = re.sub(r":\d+$", "", word)  # file:line
        word = word.split("#")[0]
        if not word or word.startswith(("-", "/", "~")) or "://" in word or re.search(r"[*?{}$<>|=…@%\\]", word):
            continue
        if not re.fullmatch(r"[\w.+/-]+", word) or not re.search(r"[A-Za-z]", word):
            continue
        stem = os.path.basename(word).split(".")[0]
        if not stem or (stem.isupper() and len(stem) > 1):  # .cu, an extension; NAME.cu, ./PROGRAM, placeholders
            continue
        yield word


def check_names(pages, root, docs_root=None):
    """Every file, function and option the pages name exists in the checkout at root; pages from
    docs_root (a copy of the checkout's pages) name paths as if they were in root. Returns the
    number missing, each printed with its page and line."""
    tree = Tree(root)
    missing = checked = 0
    for page in pages:
        base = docs_root or root
        name = os.path.relpath(page, base) if os.path.abspath(page).startswith(base + os.sep) else page
        page_dir = os.path.dirname(name) if not os.path.isabs(name) else ""
        for line_no, span in page_spans(page):
            found = []
            for word in path_words(span):
                if (("/" in word and (word.split("/")[0] in tree.top or word.startswith(".")))
                        or word.endswith(PATH_EXT)):
                    found.append(("file", word, word in NOT_OURS or tree.has_path(word, page_dir)))
            for m in FUNCTION.finditer(span):
                scope, fname = m.group(1), m.group(2)
                shown = scope + fname + "()"
                found.append(("function", shown, shown in NOT_OURS or fname + "()" in NOT_OURS or tree.has_function(scope, fname)))
            for m in OPTION.finditer(span):
                found.append(("option", m.group(1), m.group(1) in NOT_OURS or m.group(1) in tree.options))
            for kind, what, ok in found:
                checked += 1
                if not ok:
                    missing += 1
                    print(f"MISSING {name}:{line_no}: {kind} {what}: not in the checkout"
                          f" (in `{span}`)")
    print(f"names: {checked} checked, {missing} missing")
    return missing


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("pages", nargs="*", help="pages to check (default: README.md, docs/*.md)")
    ap.add_argument("--quick", action="store_true", help="skip the check-slow: commands (they train)")
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                    help="the checkout whose programs run (default: this one)")
    ap.add_argument("--list", action="store_true", help="list the checks, run nothing")
    ap.add_argument("--names", action="store_true",
                    help="only check that the files, functions and options the pages name exist; run nothing")
    ap.add_argument("--docs-root", metavar="DIR",
                    help="the pages are DIR/README.md and DIR/docs/*.md, a copy of the checkout's (default: --root)")
    args = ap.parse_args()
    root = os.path.abspath(args.root)
    docs_root = os.path.abspath(args.docs_root) if args.docs_root else root
    if not os.path.isfile(os.path.join(docs_root, "README.md")) and not args.pages:
        print(f"check_docs: --docs-root {args.docs_root}: no README.md there", file=sys.stderr)
        return 2
    pages = args.pages or ([os.path.join(docs_root, p) for p in ["README.md", "docs/reproduce.md"]] +
                           sorted(p for p in glob.glob(os.path.join(docs_root, "docs/*.md"))
                                  if not p.endswith("/reproduce.md")))
    missing = 0 if args.list else check_names(pages, root, docs_root)
    if args.names:
        return 1 if missing else 0
    work = scratch_dir(root)
    outputs = {}  # base command -> its output lines
    passed = failed = skipped = 0
    try:
        for page in pages:
            name = os.path.relpath(page, root) if page.startswith(root) else page
            for line_no, slow, cmd, kind, block in read_checks(page):
                where = f"{name}:{line_no}"
                if kind == "unchecked":
                    print(f"UNCHECKED {where}: {cmd}")
                    continue
                if args.list:
                    print(f"{where}: {'check-slow' if slow else 'check'}: {cmd}")
                    continue
                if slow and args.quick:
                    print(f"SKIP {where}: {cmd} (check-slow; make check-docs runs it)")
                    skipped += 1
                    continue
                base, filt = split_filter(cmd)
                if base not in outputs:
                    start = time.time()
                    run = subprocess.run(["bash", "-c", base], cwd=work, stdout=subprocess.PIPE,
                                         stderr=subprocess.STDOUT, timeout=1800)
                    outputs[base] = run.stdout.decode("utf-8", "replace")
                    print(f"ran {base} ({time.time() - start:.0f} s, exit status {run.returncode})", flush=True)
                text = outputs[base]
                if filt:
                    text = subprocess.run(["bash", "-c", filt], cwd=work, input=text.encode(),
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT).stdout.decode("utf-8", "replace")
                printed = text.rstrip("\n").split("\n") if text.strip() else []
                if kind == "lines":
                    bad = block_matches(block, printed)
                    if bad is None:
                        print(f"PASS {where}: {cmd}")
                        passed += 1
                        continue
                    qi, got = bad
                    print(f"FAIL {where}: {cmd}\n  {name}:{line_no + qi} quotes: {block[qi]}\n"
                          f"  the command prints:  {got}")
                else:
                    bad = table_matches(block, printed)
                    if bad is None:
                        print(f"PASS {where}: {cmd}")
                        passed += 1
                        continue
                    r, q, got = bad
                    print(f"FAIL {where}: {cmd}\n  {name}:{line_no + r} quotes {q} in: {block[r]}\n"
                          f"  the command prints {got} (its numbers, in order: {' '.join(NUMBER.findall(text))[:200]})")
                failed += 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if not args.list:
        print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed or missing else 0


if __name__ == "__main__":
    sys.exit(main())
