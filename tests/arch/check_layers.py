#!/usr/bin/env python3
# tests/arch/check_layers.py
# Checks that the layers of shardtrain only point down (share/doc/architecture.md#layering):
# reads every `#include "..."` of the code under src/, kernels/ and io/ (tests are exempt;
# .hpp/.cpp/.cu/.cuh/.h/.inl and the X-macro lists and textual includes, .def and .inc),
# builds the graph of folder dependencies, prints it, and fails (exit 1), naming the file, the
# line and the include, when
#   - a folder includes a folder that its row of the doc's table (the "may include" column,
#     "nothing" for none) does not list; a folder with no row in the table also fails,
#   - the table itself no longer says that core is the leaf and that kernels/ and io/ include
#     only core,
#   - any cycle between folders exists (each edge of one cycle is shown with one include).
# Folders: src/<name>/** is <name>, kernels/** is kernels, io/** is io; src/main.cpp is `main`.
# Subfolders (backend/cuda, parallel/mpi, parallel/nccl, kernels/cuda) belong to their folder, as the
# doc says: they take its row of the table, and a folder and its own subfolders may include
# each other. The graph is printed with each subfolder as its own node, and every violation
# names the subfolders of its include (e.g. `main -> parallel (parallel/mpi)`).
# An include is resolved like the compiler does here (next to the file, then src/, then the
# repository root); one that names no file in the tree (a system or generated header such as
# version.hpp) is not an edge.
# Usage: check_layers.py REPO_ROOT
import os
import re
import sys

ROOTS = ("src", "kernels", "io")
EXTS = (".hpp", ".cpp", ".cu", ".cuh", ".h", ".inl", ".def", ".inc")
DOC = "share/doc/architecture.md"
LEAF = "core"
ONLY_ON_CORE = ("kernels", "io")  # the layering rules: may include core and themselves, nothing else
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
ROW = re.compile(r"^\|\s*`([^`]+)`(?:\s*\(`main\.cpp`\))?\s*\|")


def node_of(rel):
    """The folder or subfolder of a file: core, parallel/mpi, kernels/cuda, main, ..."""
    parts = rel.split("/")
    if parts[0] == "src":
        return "/".join(parts[1:-1]) if len(parts) > 2 else "main"
    return "/".join(parts[:-1])


def folder_of(node):
    return node.split("/")[0]


def read_table(root):
    """{folder: set of folders it may include} from the layering table of the doc."""
    allowed = {}
    with open(os.path.join(root, DOC), encoding="utf-8") as f:
        for line in f:
            m = ROW.match(line)
            if not m:
                continue
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            name = m.group(1)
            folder = "main" if name == "src" else name[len("src/"):] if name.startswith("src/") else name
            may = cells[-1]
            allowed[folder] = set() if may == "nothing" else {x.strip() for x in may.split(",") if x.strip()}
    return allowed


def resolve(root, rel, inc):
    for base in (os.path.dirname(rel), "src", ""):
        cand = os.path.normpath(os.path.join(base, inc))
        if not cand.startswith("..") and os.path.isfile(os.path.join(root, cand)):
            return cand.replace(os.sep, "/")
    return None


def scan(root):
    """Returns {(from node, to node): [(file, line, include), ...]} over every resolved include."""
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
                        a, b = node_of(rel), node_of(target)
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
    node_edges = scan(root)
    table = read_table(root)

    print("dependency graph (folder or subfolder -> what it includes; includes per edge):")
    node_graph, all_nodes = {}, set()
    for a, b in node_edges:
        node_graph.setdefault(a, set()).add(b)
        all_nodes.update((a, b))
    for a in sorted(all_nodes):
        deps = ", ".join(f"{b} ({len(node_edges[(a, b)])})" for b in sorted(node_graph.get(a, ())))
        print(f"  {a:13} -> {deps if deps else '(nothing: a leaf)'}")

    # Folders: subfolders merged into their folder; includes between a folder and its own
    # subfolders are inside the folder.
    edges = {}
    for (a, b), sites in sorted(node_edges.items()):
        fa, fb = folder_of(a), folder_of(b)
        if fa != fb:
            edges.setdefault((fa, fb), []).extend((rel, n, inc, a, b) for rel, n, inc in sites)
    graph, nodes = {}, {folder_of(n) for n in all_nodes}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)

    failures = []
    if not table:
        failures.append(f"{DOC}: no layering table (rows like `| `src/core` | ... | nothing |`)")
    else:
        for folder, rule in ((LEAF, set()),) + tuple((f, {LEAF}) for f in ONLY_ON_CORE):
            if folder in table and table[folder] != rule:
                failures.append(f"{DOC}: the row of {folder} allows {', '.join(sorted(table[folder])) or 'nothing'}; "
                                f"the layering rules say {folder} may include {', '.join(sorted(rule)) or 'nothing'}")
        for folder in sorted(nodes - table.keys()):
            failures.append(f"{DOC}: folder {folder} has no row in the table (what may it include?)")
        for (a, b), sites in sorted(edges.items()):
            if a in table and b not in table[a]:
                may = ", ".join(sorted(table[a])) or "nothing"
                for rel, n, inc, na, nb in sites:
                    via = f" ({na} -> {nb})" if (na, nb) != (a, b) else ""
                    failures.append(f'{rel}:{n}: #include "{inc}": {a}/ may include {may} ({DOC}), '
                                    f"not {b}/{via}")

    # Report every cycle: find one, name it, drop its first edge, look again.
    remaining = {a: set(bs) for a, bs in graph.items()}
    while (cycle := find_cycle(nodes, remaining)) is not None:
        lines = [f"cycle between folders: {' -> '.join(cycle)}"]
        for a, b in zip(cycle, cycle[1:]):
            rel, n, inc, na, nb = edges[(a, b)][0]
            more = len(edges[(a, b)]) - 1
            via = f" ({na} -> {nb})" if (na, nb) != (a, b) else ""
            lines.append(f'    {a} -> {b}{via}: {rel}:{n}: #include "{inc}"' + (f" (+{more} more)" if more else ""))
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
    print(f"\nOK: every include is allowed by the table of {DOC} (core is the leaf; kernels/ and io/ "
          "include only core); no cycle between folders. Layers, lowest first:")
    print("  " + " < ".join("{" + ", ".join(level) + "}" for level in levels))
    return 0


if __name__ == "__main__":
    sys.exit(main())
