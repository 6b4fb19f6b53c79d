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
run in one scratch directory (the built programs and data/ linked, scripts/ copied), pages in the
order README.md, docs/reproduce.md (whose default run writes out/, which other pages read), then
the others. Exit status 1 with the page, the line and both texts when a quote does not match.
"""
import argparse
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
    for name in ["train", "train_gpt", "train_gpt_cpu", "data", "Makefile", "cpu.mk", "gpu.mk"]:
        if os.path.exists(os.path.join(root, name)):
            os.symlink(os.path.join(root, name), os.path.join(work, name))
    return work


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("pages", nargs="*", help="pages to check (default: README.md, docs/*.md)")
    ap.add_argument("--quick", action="store_true", help="skip the check-slow: commands (they train)")
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                    help="the checkout whose programs run (default: this one)")
    ap.add_argument("--list", action="store_true", help="list the checks, run nothing")
    args = ap.parse_args()
    root = os.path.abspath(args.root)
    pages = args.pages or ([os.path.join(root, p) for p in ["README.md", "docs/reproduce.md"]] +
                           sorted(p for p in glob.glob(os.path.join(root, "docs/*.md"))
                                  if not p.endswith("/reproduce.md")))
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
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
