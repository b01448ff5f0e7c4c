#!/usr/bin/env python3
"""Every C++ or CUDA source over 600 lines says why at its top (issue 47).

    check_file_length.py PROJECT_SOURCE_DIR

Walks src/, kernels/, io/ and tests/ (not build trees or hidden folders) for .cpp
and .cu files. A file of more than 600 lines must carry, within its first 15
lines, one comment line holding "This file is long because" and its reason.
Prints each source over the limit with its reason, then fails naming every file
(and its line count) that has none.
"""
import os
import sys

LIMIT = 600
HEAD = 15
MARK = "This file is long because"


def sources(root):
    for top in ("src", "kernels", "io", "tests"):
        for d, dirs, files in os.walk(os.path.join(root, top)):
            dirs[:] = sorted(x for x in dirs if not x.startswith((".", "build")))
            for f in sorted(files):
                if f.endswith((".cpp", ".cu")):
                    yield os.path.join(d, f)


def main():
    if len(sys.argv) != 2 or not os.path.isdir(sys.argv[1]):
        print("usage: check_file_length.py PROJECT_SOURCE_DIR", file=sys.stderr)
        return 2
    root = sys.argv[1]
    bad, seen = [], 0
    for path in sources(root):
        seen += 1
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().split("\n")
        n = len(lines) - 1 if lines and lines[-1] == "" else len(lines)
        if n <= LIMIT:
            continue
        rel = os.path.relpath(path, root)
        reason = next((l.strip() for l in lines[:HEAD] if MARK in l), None)
        if reason:
            print(f"{rel}: {n} lines: {reason}")
        else:
            bad.append(f"{rel}: {n} lines, over {LIMIT}, and no line '// {MARK} ...' in its first {HEAD} lines")
    if seen == 0:
        print(f"check_file_length: no .cpp or .cu file under {root}/src, kernels, io, tests", file=sys.stderr)
        return 1
    for b in bad:
        print(b, file=sys.stderr)
    print(f"check_file_length: {seen} sources, {len(bad)} over {LIMIT} lines without a reason")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
