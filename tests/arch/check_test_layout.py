#!/usr/bin/env python3
# tests/arch/check_test_layout.py
# Checks that the unit tests mirror the source (share/doc/architecture.md#tests-mirror-the-source):
# every file under tests/unit/ is
#   - tests/unit/<folder>/<name>_test.cpp, a test, where <folder> is a source folder (src/<folder>,
#     kernels, io, or a subfolder of one of them such as kernels/cuda, mirrored under the same
#     path; `support` stands for tests/support, the test harness), and <name> is the base name of
#     a source file in that folder (<name>.cpp/.hpp/.cu/.cuh/.def/.inc/...: gelu_test.cpp tests
#     kernels/gelu.*), or such a base name followed by `_<aspect>` for a second test file of one
#     source (gpt_activation_high_water_test.cpp tests one behaviour of model/gpt.*);
#   - tests/unit/<folder>/<anything>_test_<anything>.hpp, a helper shared by that folder's tests
#     (config_test_support.hpp, kernel_test_util.hpp): the `_test_` keeps it from looking like
#     the mirror of a source header;
#   - a CMakeLists.txt or *.cmake file.
# Anything else is a violation, printed with its path and what was expected; exit 1 on any.
# Usage: check_test_layout.py REPO_ROOT
import os
import re
import sys

SOURCE_EXTS = (".cpp", ".hpp", ".h", ".c", ".cu", ".cuh", ".def", ".inc", ".inl")
TEST = re.compile(r"^([a-z0-9]+(?:_[a-z0-9]+)*)_test\.cpp$")
HELPER = re.compile(r"^[a-z0-9_]*_test_[a-z0-9_]*\.hpp$")
BUILD_FILES = re.compile(r"^(CMakeLists\.txt|.*\.cmake)$")
CODE_EXTS = (".cpp", ".cc", ".c", ".cu", ".cxx", ".hpp", ".h", ".cuh", ".hh")


def source_dir(root, folder):
    """The source folder that tests/unit/<folder> mirrors (relative to root), or None."""
    parts = folder.split("/")
    if parts[0] == "support":
        cand = "/".join(["tests"] + parts)
    elif parts[0] in ("kernels", "io"):
        cand = folder
    else:
        cand = "src/" + folder
    return cand if os.path.isdir(os.path.join(root, cand)) else None


def bases(root, sdir):
    """Base names (up to the first dot) of the source files directly in sdir."""
    out = set()
    for name in os.listdir(os.path.join(root, sdir)):
        if os.path.isfile(os.path.join(root, sdir, name)) and name.endswith(SOURCE_EXTS):
            out.add(name.split(".", 1)[0])
    return out


def all_source_folders(root):
    """{base name: [source folder, ...]} over every source folder (for the hint of a misplaced test)."""
    where = {}
    tops = [("src", "src")] + [(t, t) for t in ("kernels", "io")] + [("tests/support", "tests/support")]
    for top, _ in tops:
        for dirpath, dirnames, _files in os.walk(os.path.join(root, top)):
            dirnames.sort()
            rel = os.path.relpath(dirpath, root).replace(os.sep, "/")
            if rel == "src":
                continue
            for b in bases(root, rel):
                where.setdefault(b, []).append(rel)
    return where


def mirror_of(sdir):
    """tests/unit/<folder> for a source folder (the inverse of source_dir)."""
    if sdir.startswith("src/"):
        return sdir[len("src/"):]
    if sdir.startswith("tests/support"):
        return "support" + sdir[len("tests/support"):]
    return sdir


def stem_source(name, names):
    """The longest source base name that `name` is, or starts with followed by `_`; None if none."""
    best = None
    for b in names:
        if name == b or name.startswith(b + "_"):
            if best is None or len(b) > len(best):
                best = b
    return best


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: check_test_layout.py REPO_ROOT")
    root = sys.argv[1]
    unit = os.path.join(root, "tests", "unit")
    where = all_source_folders(root)
    violations, tests, helpers = [], 0, 0
    for dirpath, dirnames, filenames in os.walk(unit):
        dirnames.sort()
        folder = os.path.relpath(dirpath, unit).replace(os.sep, "/")
        for fname in sorted(filenames):
            path = f"tests/unit/{fname}" if folder == "." else f"tests/unit/{folder}/{fname}"
            if BUILD_FILES.match(fname):
                continue
            if folder == ".":
                violations.append(f"{path}: a test lives in the folder of what it tests: expected "
                                  f"tests/unit/<folder>/<name>_test.cpp")
                continue
            sdir = source_dir(root, folder)
            if sdir is None:
                violations.append(f"{path}: tests/unit/{folder}/ mirrors no source folder (there is no "
                                  f"src/{folder}/): expected tests/unit/<folder>/ for src/<folder>, kernels, "
                                  f"io, a subfolder of one of them, or support (tests/support)")
                continue
            names = bases(root, sdir)
            if fname.endswith((".hpp", ".h", ".cuh", ".hh")):
                if HELPER.match(fname):
                    helpers += 1
                else:
                    violations.append(f"{path}: a helper header of the tests is named <x>_test_<y>.hpp "
                                      f"(e.g. {folder.split('/')[-1]}_test_support.hpp)")
                continue
            if not fname.endswith(CODE_EXTS):
                violations.append(f"{path}: unexpected file: tests/unit/ holds <name>_test.cpp, "
                                  f"<x>_test_<y>.hpp helpers and CMake files")
                continue
            m = TEST.match(fname)
            if not m:
                stem = fname.rsplit(".", 1)[0]
                if stem.startswith("test_"):
                    stem = stem[len("test_"):]
                elif stem.endswith("_test"):
                    stem = stem[: -len("_test")]
                violations.append(f"{path}: expected tests/unit/{folder}/{stem}_test.cpp "
                                  f"(<source name>[_<aspect>]_test.cpp)")
                continue
            name = m.group(1)
            if stem_source(name, names) is not None:
                tests += 1
                continue
            # Misplaced (the source is in another folder) or named after no source.
            hints = []
            for b in sorted({b for b in where if name == b or name.startswith(b + "_")}, key=len, reverse=True):
                for other in where[b]:
                    hints.append(f"tests/unit/{mirror_of(other)}/{fname} ({other}/{b}.*)")
            expected = ("expected " + " or ".join(hints)) if hints else (
                f"expected <name> of a source file {sdir}/<name>.* (or <name>_<aspect>)")
            violations.append(f"{path}: no source {sdir}/{name}.* (nor {sdir}/<source>.* with "
                              f"{name} = <source>_<aspect>): {expected}")

    if violations:
        print(f"FAIL: {len(violations)} file(s) of tests/unit/ do not mirror the source:")
        for v in violations:
            print("  " + v)
        return 1
    print(f"OK: {tests} tests under tests/unit/<folder>/<name>_test.cpp, each named after a source "
          f"file of its folder; {helpers} helper header(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
