#!/usr/bin/env python3
"""Which Debian packages the CUDA build needs at run time, derived from the binaries.

Used by share/gpu/prepare.sh (runs on the build machine, Debian 12). Nothing is
taken from memory except three named policies, printed with the result:

  roots    every ELF executable of the build tree (CMakeFiles/ excluded) and the
           mpiexec the CTest files call (its real path);
  closure  `ldd` of each root; every library found is mapped to its package with
           `dpkg -S`; then every ELF file of every package so found is checked
           with `ldd` in turn (this reaches the Open MPI and PMIx plugins, which
           are dlopen'ed and appear in no NEEDED list), until nothing new appears.
           Arch:all packages a carried package depends on that come from the
           same source package (openmpi-common: help texts, mca-params.conf) are
           carried too.
  policies BASE: packages the GPU machine has by definition and that are never
           carried (glibc, libstdc++, libgcc); libraries under the CUDA
           directories are never carried either (the device has its own CUDA,
           cuDNN and NCCL).
           FABRIC: a package file that needs an interconnect library (UCX,
           libfabric, verbs, rdmacm, PSM, PSM2) is not followed: the file is
           listed in dropped.tsv and on-device.sh deletes it (one node, one GPU:
           btl self,vader and pml ob1). A file whose library is not installed
           here is dropped the same way.
           SYSTEM_SEEDS: libraries every distribution ships (zlib, udev, OpenSSL)
           or may ship (libcurl). These packages and whatever is reached only
           through them form class "system": on the device they are linked only
           when the image lacks the soname, so they never shadow the image's
           own. Everything else is class "stack" (MPI, HDF5, Kokkos, BLAS, fmt,
           toml++ and their own libraries) and is always used from the bundle.

Writes to --out: packages.tsv, libs.tsv, dropped.tsv, cuda.tsv, glibc.txt.
"""
import argparse
import collections
import os
import re
import subprocess
import sys

BASE = {"libc6", "libstdc++6", "libgcc-s1", "libc6-dev", "libcrypt1"}
FABRIC = re.compile(r"^lib(ucp|ucs|uct|ucm|fabric|ibverbs|rdmacm|efa|mlx4|mlx5|psm_infinipath|infinipath|psm2)\.so")
SYSTEM_SEEDS = {"zlib1g", "libudev1", "libssl3", "libcurl4"}
DRIVER = re.compile(r"^lib(cuda|nvidia-ml)\.so\.1$")  # the device's driver provides these


def run(cmd, check=True):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if check and r.returncode != 0:
        sys.exit(f"closure.py: {' '.join(cmd[:3])}... failed: {r.stderr.strip()[:400]}")
    return r


def is_elf(path):
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def alternates(path):
    """The path, its real path, and their /usr-merge twins (dpkg registers one of them)."""
    out = []
    for p in (path, os.path.realpath(path)):
        for q in (p, re.sub(r"^/usr/(lib|lib64|bin|sbin)/", r"/\1/", p),
                  re.sub(r"^/(lib|lib64|bin|sbin)/", r"/usr/\1/", p)):
            if q not in out:
                out.append(q)
    return out


_owner_cache = {}


def owners(paths):
    """path -> (package, registered path) for every path dpkg knows (tries the alternates)."""
    want = {}
    for p in paths:
        if p not in _owner_cache:
            want[p] = alternates(p)
    if want:
        cands = sorted({c for cs in want.values() for c in cs})
        found = {}
        for i in range(0, len(cands), 400):
            r = run(["dpkg-query", "-S"] + cands[i:i + 400], check=False)
            for line in r.stdout.splitlines():
                if line.startswith("diversion ") or ": " not in line:
                    continue
                pkgs, f = line.split(": ", 1)
                if "," in pkgs:  # a directory shared by several packages
                    continue
                found[f] = pkgs.split(":")[0]
        for p, cs in want.items():
            _owner_cache[p] = next(((found[c], c) for c in cs if c in found), None)
    return {p: _owner_cache[p] for p in paths}


def ldd(path):
    """soname -> resolved path (None when not found); None when not dynamic."""
    env = dict(os.environ)
    env.pop("LD_LIBRARY_PATH", None)
    r = subprocess.run(["ldd", path], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    if "not a dynamic executable" in r.stdout or "statically linked" in r.stdout:
        return None
    deps = {}
    for line in r.stdout.splitlines():
        line = line.strip()
        m = re.match(r"^(\S+) => not found", line)
        if m:
            deps[m.group(1)] = None
            continue
        m = re.match(r"^(\S+) => (/\S+) \(0x", line)
        if m:
            deps[m.group(1)] = m.group(2)
    return deps


def needed(path):
    r = run(["readelf", "-d", path], check=False)
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", r.stdout)


def glibc_needs(paths):
    """Highest GLIBC_/GLIBCXX_/CXXABI_ version of undefined dynamic symbols, with one file needing it."""
    best = {}
    for p in paths:
        r = run(["objdump", "-T", p], check=False)
        for line in r.stdout.splitlines():
            if "*UND*" not in line:
                continue
            m = re.search(r"\b(GLIBC|GLIBCXX|CXXABI)_([0-9.]+)", line)
            if not m:
                continue
            key, ver = m.group(1), tuple(int(x) for x in m.group(2).split(".") if x)
            if key not in best or ver > best[key][0]:
                best[key] = (ver, p)
    return {k: (".".join(map(str, v)), p) for k, (v, p) in best.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--mpiexec", required=True)
    ap.add_argument("--cuda-dir", action="append", default=[])
    ap.add_argument("--out", required=True)
    ap.add_argument("--cuda-only", action="store_true",
                    help="only cuda.tsv and glibc.txt (the other files get their headers alone): "
                         "prepare.sh --no-debs, where nothing is carried")
    a = ap.parse_args()
    build = os.path.realpath(a.build_dir)
    cuda_dirs = [os.path.realpath(d) for d in a.cuda_dir if os.path.isdir(d)]

    def in_cuda(p):
        rp = os.path.realpath(p)
        return any(rp == d or rp.startswith(d + "/") for d in cuda_dirs)

    roots = []
    for dp, dns, fns in os.walk(build):
        dns[:] = [d for d in dns if d != "CMakeFiles"]
        for fn in fns:
            p = os.path.join(dp, fn)
            if os.path.isfile(p) and not os.path.islink(p) and os.access(p, os.X_OK) and is_elf(p):
                roots.append(p)
    mpiexec = os.path.realpath(a.mpiexec)
    if not is_elf(mpiexec):
        sys.exit(f"closure.py: mpiexec {a.mpiexec} -> {mpiexec} is not an ELF executable")
    roots.sort()
    root_set = set(roots)
    roots.append(mpiexec)

    if a.cuda_only:
        cuda = {}
        for r in roots[:-1]:
            for so, path in (ldd(r) or {}).items():
                if path and in_cuda(path):
                    cuda.setdefault(so, path)
        write_tables(a.out, {}, set(), {}, [], cuda, [("build-tree binaries", sorted(root_set))])
        print(f"closure.py --cuda-only: {len(roots) - 1} executables in the build tree; {len(cuda)} CUDA libraries; "
              "no package carried")
        return
    carried = {}               # package -> reason
    file_pkg = {}              # scanned file -> package ("ROOT" for build-tree executables)
    kept, dropped = [], []     # files whose libraries are followed / files on-device.sh deletes
    libs = {}                  # soname -> (package, registered path)
    cuda = {}                  # soname -> path here
    edges = collections.defaultdict(set)
    queue = list(roots)
    for r in roots:
        file_pkg[r] = "ROOT"
    mp = owners([mpiexec])[mpiexec]
    if not mp:
        sys.exit(f"closure.py: no Debian package owns {mpiexec}")
    carried[mp[0]] = f"owns the mpiexec the CTest files call ({a.mpiexec} -> {mpiexec})"
    file_pkg[mpiexec] = mp[0]
    scanned_pkgs = set()
    seen = set()
    while queue:
        batch, queue = queue, []
        for f in batch:
            if f in seen:
                continue
            seen.add(f)
            deps = ldd(f)
            if deps is None:
                continue
            is_root = f in root_set or f == mpiexec
            missing = [s for s, p in deps.items() if p is None and not DRIVER.match(s)]
            fabric = [s for s in deps if FABRIC.match(s)]
            if is_root and (missing or fabric):
                sys.exit(f"closure.py: {f} needs {', '.join(missing + fabric)}, not installed or an interconnect "
                         "library: install the build's dependencies (share/install-deps.sh) first")
            if missing or fabric:
                dropped.append((f, file_pkg[f], "needs " + ", ".join(
                    [f"{s} (not installed)" for s in missing] + [f"{s} (interconnect)" for s in fabric])))
                continue
            kept.append(f)
            paths = {s: p for s, p in deps.items() if p}
            own = owners([p for p in paths.values() if not in_cuda(p)])
            direct = set(needed(f))
            for s, p in paths.items():
                if in_cuda(p):
                    if is_root:
                        cuda[s] = p
                    continue
                o = own.get(p)
                if not o:
                    sys.exit(f"closure.py: {f} loads {p}, which no Debian package owns")
                pkg, reg = o
                if pkg in BASE:
                    continue
                libs.setdefault(s, (pkg, reg))
                if s in direct:
                    edges[file_pkg[f]].add(pkg)
                if pkg not in carried:
                    carried[pkg] = f"{s} <- {os.path.relpath(f, build) if f in root_set else f}"
        for pkg in sorted(set(carried) - scanned_pkgs):
            scanned_pkgs.add(pkg)
            for line in run(["dpkg-query", "-L", pkg]).stdout.splitlines():
                if os.path.isfile(line) and not os.path.islink(line) and is_elf(line) and line not in seen:
                    file_pkg.setdefault(line, pkg)
                    queue.append(line)
        if not queue:  # same-source arch:all data packages (openmpi-common for openmpi-bin)
            info = package_info(carried)
            for pkg in sorted(carried):
                for dep in info[pkg]["depends"]:
                    if dep in carried or dep in BASE:
                        continue
                    d = package_info([dep]).get(dep)
                    if d and d["arch"] == "all" and d["source"] == info[pkg]["source"]:
                        carried[dep] = f"data package of {pkg} (same source {d['source']}, arch all)"
                        edges[pkg].add(dep)
                        scanned_pkgs.add(dep)

    # Classes: stack = reachable from the roots without entering a system seed.
    stack, todo = set(), ["ROOT", mp[0]]
    while todo:
        n = todo.pop()
        for m in edges.get(n, ()):
            if m not in stack and m not in SYSTEM_SEEDS:
                stack.add(m)
                todo.append(m)
    stack.add(mp[0])
    carried_files = [f for f in kept if f not in root_set]
    write_tables(a.out, carried, stack, libs, dropped, cuda,
                 [("build-tree binaries", sorted(root_set)), ("carried libraries and programs", carried_files)])
    print(f"closure.py: {len(roots) - 1} executables in the build tree + {mpiexec}; "
          f"{len(kept)} ELF files followed, {len(dropped)} dropped; {len(carried)} packages "
          f"({len(stack)} stack, {len(carried) - len(stack)} system)")


def write_tables(out_dir, carried, stack, libs, dropped, cuda, glibc_groups):
    """packages.tsv, libs.tsv, dropped.tsv, cuda.tsv and glibc.txt in out_dir (with
    --cuda-only the first three hold their header lines alone)."""
    info = package_info(carried) if carried else {}
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "packages.tsv"), "w") as out:
        out.write("# package\tversion\tarch\tclass\twhy (first library that pulled it in)\n")
        for pkg in sorted(carried, key=lambda p: (p not in stack, p)):
            i = info[pkg]
            out.write(f"{pkg}\t{i['version']}\t{i['arch']}\t{'stack' if pkg in stack else 'system'}\t{carried[pkg]}\n")
    with open(os.path.join(out_dir, "libs.tsv"), "w") as out:
        out.write("# soname\tpackage\tclass\tpath inside the package (link target on the device)\n")
        for s in sorted(libs):
            pkg, reg = libs[s]
            out.write(f"{s}\t{pkg}\t{'stack' if pkg in stack else 'system'}\t{reg.lstrip('/')}\n")
    with open(os.path.join(out_dir, "dropped.tsv"), "w") as out:
        out.write("# path inside the package\tpackage\twhy on-device.sh deletes it\n")
        for f, pkg, why in sorted(dropped):
            reg = (owners([f])[f] or (pkg, f))[1]
            out.write(f"{reg.lstrip('/')}\t{pkg}\t{why}\n")
    with open(os.path.join(out_dir, "cuda.tsv"), "w") as out:
        out.write("# soname\tpath on the build machine (the device provides its own)\n")
        for s in sorted(cuda):
            out.write(f"{s}\t{os.path.realpath(cuda[s])}\n")
    with open(os.path.join(out_dir, "glibc.txt"), "w") as out:
        for label, files in glibc_groups:
            for k, (v, p) in sorted(glibc_needs(files).items()):
                out.write(f"{label}: {k}_{v} (e.g. {p})\n")


_info_cache = {}


def package_info(pkgs):
    want = [p for p in pkgs if p not in _info_cache]
    if want:
        r = run(["dpkg-query", "-W", "-f", "${Package}\t${Version}\t${Architecture}\t${source:Package}\t${Depends}\n"]
                + want, check=False)
        for line in r.stdout.splitlines():
            name, ver, arch, src, deps = (line.split("\t") + [""] * 5)[:5]
            first = [re.split(r"[\s(:]", alt.strip())[0] for alt in
                     (d.split("|")[0] for d in deps.split(",")) if alt.strip()]
            _info_cache[name] = {"version": ver, "arch": arch, "source": src or name, "depends": first}
    return {p: _info_cache[p] for p in pkgs if p in _info_cache}


if __name__ == "__main__":
    main()
