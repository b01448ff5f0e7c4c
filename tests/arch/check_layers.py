#!/usr/bin/env python3
# tests/arch/check_layers.py
# Checks that the layers of shardtrain only point down (share/doc/architecture.md#layering):
# reads every `#include "..."` of the code under src/, kernels/ and io/ (tests are exempt),
# builds the graph of folder dependencies, prints it, and fails (exit 1), naming the file and
# the include, when
#   - core includes anything outside core (it is the leaf),
#   - kernels/ or io/ include anything outside core and themselves,
#   - any cycle between folders exists (each edge of one cycle is shown with one include).
# Folders: src/<name>/** is <name> (backend/cuda is backend, dist/mpi and dist/nccl are dist,
# kernels/cuda is kernels); src/main.cpp is `main`. An include is resolved like the compiler
# does here (next to the file, then src/, then the repository root); one that names no file
# in the tree (a system or generated header such as version.hpp) is not an edge.
# Usage: check_layers.py REPO_ROOT
import os
import re
import sys

ROOTS = ("src", "kernels", "io")
EXTS = (".hpp", ".cpp", ".cu", ".cuh", ".h", ".inl")
LEAF = "core"
ONLY_ON_CORE = ("kernels", "io")  # may include core and themselves, nothing else
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def folder_of(rel):
    parts = rel.split("/")
    if parts[0] == "src":
        return parts[1] if len(parts) > 2 else "main"
    return parts[0]


def resolve(root, rel, inc):
    for base in (os.path.dirname(rel), "src", ""):
        cand = os.path.normpath(os.path.join(base, inc))
        if not cand.startswith("..") and os.path.isfile(os.path.join(root, cand)):
            return cand.replace(os.sep, "/")
    return None


def scan(root):
    """Returns {(from, to): [(file, line, include), ...]} over every resolved include."""
    edges = {}
    for top in ROOTS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames.sort()
            for name in sorted(filenames):
                if not name.endswith(EXTS):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/")
                with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
                    for n, text in enumerate(f, 1):
                        m = INCLUDE.match(text)
                        if not m:
                            continue
                        target = resolve(root, rel, m.group(1))
                        if target is None or not target.startswith(ROOTS):
                            continue
                        a, b = folder_of(rel), folder_of(target)
                        if a != b:
                            edges.setdefault((a, b), []).append((rel, n, m.group(1)))
    return edges


def find_cycle(nodes, graph):
    """One cycle as a list of nodes [n0, n1, ..., n0], or None (iterative DFS, sorted order)."""
    state = {n: 0 for n in nodes}  # 0 new, 1 on the stack, 2 done
    for start in sorted(nodes):
        if state[start]:
            continue
        stack = [(start, iter(sorted(graph.get(start, ()))))]
        path = [start]
        state[start] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[node] = 2
                stack.pop()
                path.pop()
            elif state[nxt] == 1:
                return path[path.index(nxt):] + [nxt]
            elif state[nxt] == 0:
                state[nxt] = 1
                path.append(nxt)
                stack.append((nxt, iter(sorted(graph.get(nxt, ())))))
    return None


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: check_layers.py REPO_ROOT")
    root = sys.argv[1]
    edges = scan(root)
    graph, nodes = {}, set()
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
        nodes.update((a, b))

    print("folder dependency graph (folder -> folders it includes; includes per edge):")
    for a in sorted(nodes):
        deps = ", ".join(f"{b} ({len(edges[(a, b)])})" for b in sorted(graph.get(a, ())))
        print(f"  {a:8} -> {deps if deps else '(nothing: a leaf)'}")

    failures = []
    for (a, b), sites in sorted(edges.items()):
        if a == LEAF or (a in ONLY_ON_CORE and b != LEAF):
            allowed = "nothing outside core" if a == LEAF else "only core and itself"
            for rel, n, inc in sites:
                failures.append(f'{rel}:{n}: #include "{inc}": {a}/ may include {allowed}, not {b}/')

    # Report every cycle: find one, name it, drop its first edge, look again.
    remaining = {a: set(bs) for a, bs in graph.items()}
    while (cycle := find_cycle(nodes, remaining)) is not None:
        lines = [f"cycle between folders: {' -> '.join(cycle)}"]
        for a, b in zip(cycle, cycle[1:]):
            rel, n, inc = edges[(a, b)][0]
            more = len(edges[(a, b)]) - 1
            lines.append(f'    {a} -> {b}: {rel}:{n}: #include "{inc}"' + (f" (+{more} more)" if more else ""))
        failures.append("\n".join(lines))
        remaining[cycle[0]].discard(cycle[1])

    if failures:
        print(f"\nFAIL: {len(failures)} layering violation(s):")
        for f in failures:
            print("  " + f)
        return 1
    levels, done = [], set()
    while len(done) < len(nodes):  # each level includes only lower levels (the graph is acyclic)
        ready = sorted(n for n in nodes - done if graph.get(n, set()) <= done)
        levels.append(ready)
        done.update(ready)
    print("\nOK: no cycle; core is a leaf; kernels/ and io/ include only core. Layers, lowest first:")
    print("  " + " < ".join("{" + ", ".join(level) + "}" for level in levels))
    return 0


if __name__ == "__main__":
    sys.exit(main())
