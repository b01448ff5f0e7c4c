#!/usr/bin/env python3
"""Helpers of share/gpu/namespace-proof.sh (build machine, Debian 12, root).

  hide PACKAGES.TSV VISIBLE_PKGS OUTDIR
      The files of the carried packages installed here (dpkg -L; docs left alone),
      minus those of VISIBLE_PKGS (comma-separated), plus every symlink in the same
      folders that resolves to one of them (/usr/bin/mpirun -> /etc/alternatives ->
      mpirun.openmpi, libblas.so.3 -> openblas-pthread/). Paths are /usr-merged.
      Writes OUTDIR/hidden.txt (one path per line) and OUTDIR/roots.txt (the folders
      to cover with a farm: /usr/lib/x86_64-linux-gnu, /usr/bin, /etc/openmpi, ...).
  farm ROOT SIDE FARM HIDDEN.TXT
      Fills FARM (an empty tmpfs) with symlinks to every entry of SIDE (a read-only
      bind of ROOT) except the hidden paths, recursing only into folders that hold
      hidden paths. FARM is then bind-mounted over ROOT by the caller.
  verdict OUTDIR HIDDEN.TXT VISIBLE_SONAMES EXPECTED_TESTS
      Reads on-device.sh's summary.txt, environment.txt and ctest.log; prints one line
      per test and binary; exits 1 unless every expected test reached the no-device
      message with every library resolved (bundle, CUDA dirs, or the base system:
      glibc, libstdc++, libgcc, and the VISIBLE_SONAMES), none from a hidden path,
      no Open MPI plugin failing to load, no setup problem, and plan's checks.
  plan OUTDIR EXPECTED_TESTS SECONDS LIMIT
      The checks of the whole plan without a device alone (plan_checks; CI's
      tests/cuda_build/on_device_rehearsal.sh, where nothing is hidden).
"""
import os
import re
import subprocess
import sys

SKIP = ("/usr/share/doc/", "/usr/share/man/", "/usr/share/lintian/", "/usr/share/bug/", "/usr/share/info/")
BASE = re.compile(r"^(libc|libm|libdl|libpthread|librt|libresolv|libutil|libstdc\+\+|libgcc_s|ld-linux-x86-64)\.so")


def merged(p):
    d, b = os.path.split(p)
    return os.path.join(os.path.realpath(d), b)


def root_of(p):
    parts = p.split("/")
    if p.startswith("/usr/lib/x86_64-linux-gnu/"):
        return "/usr/lib/x86_64-linux-gnu"
    if p.startswith(("/usr/bin/", "/usr/sbin/")):
        return "/".join(parts[:3])
    if p.startswith("/etc/"):
        return "/".join(parts[:3]) if len(parts) > 3 else None
    return "/".join(parts[:4]) if len(parts) > 4 else None


def hide(pkgs_tsv, visible, outdir):
    visible = {v for v in visible.split(",") if v}
    pkgs = [l.split("\t")[0] for l in open(pkgs_tsv) if l.strip() and not l.startswith("#")]
    hidden = set()
    for pkg in pkgs:
        if pkg in visible:
            continue
        r = subprocess.run(["dpkg-query", "-L", pkg], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        for line in r.stdout.splitlines():
            if not line.startswith("/") or line.startswith(SKIP) or line == "/.":
                continue
            if os.path.isdir(line):  # folders (and /lib, a link to usr/lib) stay
                continue
            if os.path.lexists(line):
                hidden.add(merged(line))
    roots = set()
    for p in hidden:
        r = root_of(p)
        if r is None:
            sys.exit(f"proof_helper.py: no farm folder for {p}")
        roots.add(r)
    real_hidden = {os.path.realpath(p) for p in hidden}
    for r in sorted(roots):  # symlinks that lead into hidden files
        for dp, dns, fns in os.walk(r):
            for n in fns + dns:
                p = os.path.join(dp, n)
                if os.path.islink(p) and p not in hidden:
                    t = os.path.realpath(p)
                    if t in real_hidden or merged(t) in hidden:
                        hidden.add(p)
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(outdir, "hidden.txt"), "w") as f:
        f.write("\n".join(sorted(hidden)) + "\n")
    with open(os.path.join(outdir, "roots.txt"), "w") as f:
        f.write("\n".join(sorted(roots)) + "\n")
    print(f"{len(hidden)} files in {len(roots)} folders")


def farm(root, side, farm_dir, hidden_txt):
    hidden = {l.strip() for l in open(hidden_txt) if l.strip()}
    under = {p for p in hidden if p.startswith(root + "/")}
    dirs_with = set()
    for p in under:
        d = os.path.dirname(p)
        while d.startswith(root + "/") or d == root:
            dirs_with.add(d)
            if d == root:
                break
            d = os.path.dirname(d)
    n_link = n_hidden = 0

    def fill(rel):
        nonlocal n_link, n_hidden
        src = os.path.join(side, rel) if rel else side
        for e in os.listdir(src):
            orig = os.path.join(root, rel, e) if rel else os.path.join(root, e)
            s = os.path.join(src, e)
            dst = os.path.join(farm_dir, rel, e) if rel else os.path.join(farm_dir, e)
            if orig in hidden:
                n_hidden += 1
                continue
            if orig in dirs_with and os.path.isdir(s) and not os.path.islink(s):
                os.mkdir(dst)
                fill(os.path.join(rel, e) if rel else e)
            else:
                os.symlink(s, dst)
                n_link += 1

    fill("")
    print(f"farm {root}: {n_link} entries linked, {n_hidden} hidden")


def plan_checks(run, expected, seconds=None, limit=90):
    """What on-device.sh's whole plan must show without a device (both rehearsals:
    namespace-proof.sh and CI's tests/cuda_build/on_device_rehearsal.sh): no setup
    problem; every expected one-GPU test, and no other, reaching the no-device
    message; the smoke's trainer --version passing and its two device commands
    reaching that message (so the run goes on rather than stopping for a runtime
    that does not load); the GPU measurements skipped and the summary saying why;
    the Hugging Face checks (GPT-2, DistilBERT / BERT) passing on the host; the whole call under LIMIT seconds.
    Prints a line per item; returns the problems found."""
    bad = []
    summary = open(os.path.join(run, "summary.txt")).read().splitlines()
    for l in summary:
        if l.startswith("# setup problems:") and not l.startswith("# setup problems: 0"):
            bad.append("on-device.sh reported setup problems: " + l[len("# setup problems: "):])
    rows = [l.split("\t") for l in summary if not l.startswith("#")]
    plain = {f[0]: (f[2], f[3]) for f in rows if len(f) == 4 and f[1] == "plain"}
    phases = {f[0]: f[2] for f in rows if len(f) == 4 and f[1] in ("smoke", "measure")}
    print("tests (ctest -L gpu -LE gpu2, plain):")
    for t in expected:
        res, secs = plain.get(t, ("NOT IN SUMMARY", "-"))
        ok = res == "FAIL(no CUDA device)"
        print(f"  {'ok  ' if ok else 'FAIL'} {t}: {res} ({secs} s)" +
              (": reached the no-device message" if ok else ""))
        if not ok:
            bad.append(f"{t}: {res}")
    for t in sorted(set(plain) - set(expected)):
        bad.append(f"{t}: ran but is not a gpu1 test")
    print("smoke and measurement phases:")
    for name, want in (("smoke:trainer_loads", "PASS"), ("smoke:nccl_probe", "FAIL(no CUDA device)"),
                       ("smoke:kernel_test", "FAIL(no CUDA device)"),
                       ("measure:kernel-bandwidth", "NOT RUN(no CUDA device)"),
                       ("measure:speed-124M-bf16", "NOT RUN(no CUDA device)"),
                       ("measure:correctness", "NOT RUN(no CUDA device)"), ("measure:hf", "PASS")):
        got = phases.get(name, "NOT IN SUMMARY")
        print(f"  {'ok  ' if got == want else 'FAIL'} {name}: {got}")
        if got != want:
            bad.append(f"{name}: {got} (expected {want})")
    if not any(l.startswith("# NO CUDA DEVICE") for l in summary):
        bad.append("summary.txt does not say that there was no CUDA device")
    md = os.path.join(run, "measure.md")
    hf = [l for l in open(md).read().splitlines() if "hf_check: PASS" in l] if os.path.exists(md) else []
    print("  " + (hf[0] if hf else "measure.md: no passing hf_check line"))
    if not hf:
        bad.append("measure.md has no passing hf_check line")
    hb = [l for l in open(md).read().splitlines() if "hf_bert_check: PASS: client" in l] if os.path.exists(md) else []
    print("  " + (hb[0] if hb else "measure.md: no passing hf_bert_check line"))
    if not hb:
        bad.append("measure.md has no passing hf_bert_check line (DistilBERT / BERT exports, tokenizer)")
    if seconds is not None:
        print(f"on-device.sh took {seconds} s (limit {limit} s)")
        if seconds >= limit:
            bad.append(f"on-device.sh took {seconds} s, the rehearsal's limit is {limit} s")
    return bad


def report(bad, what):
    if bad:
        print("VERDICT: FAIL")
        for b in bad:
            print("  - " + b)
        return 1
    print("VERDICT: PASS: " + what)
    return 0


def verdict(outdir, hidden_txt, visible_sonames, expected, seconds=None, limit=90):
    hidden = {l.strip() for l in open(hidden_txt) if l.strip()}
    visible = {v for v in visible_sonames.split(",") if v}
    expected = [t for t in expected.split(",") if t]
    run = os.path.join(outdir)
    env = open(os.path.join(run, "environment.txt")).read().splitlines()
    ctest = open(os.path.join(run, "ctest.log"), errors="replace").read() if os.path.exists(
        os.path.join(run, "ctest.log")) else ""
    bad = plan_checks(run, expected, seconds, limit)
    print("libraries (ldd of every binary in the restored build tree):")
    cur = None
    from_system = set()
    for l in env:
        m = re.match(r"^ldd (\S+): (.*)$", l)
        if m and m.group(1) != "problems":
            cur = m.group(1)
            print(f"  {cur}: {m.group(2)}")
            if not m.group(2).startswith("ok"):
                bad.append(f"ldd {cur}: {m.group(2)}")
            continue
        m = re.match(r"^  (\S+) => (\S+)  \[(\w+)\]$", l)
        if m and cur:
            so, path, cls = m.groups()
            if merged(path) in hidden or os.path.realpath(path) in hidden:
                bad.append(f"{cur}: {so} resolved to hidden {path}")
            if cls == "image":
                from_system.add(so)
                if not BASE.match(so) and so not in visible:
                    bad.append(f"{cur}: {so} from the system ({path}), neither base nor left visible")
    print("  resolved to the system: " + " ".join(sorted(from_system)) +
          f" (allowed: glibc, libstdc++, libgcc and the left-visible {' '.join(sorted(visible)) or 'none'})")
    for pat in ("mca_base_component_repository_open: unable to open", "error while loading shared libraries"):
        n = ctest.count(pat)
        if n:
            bad.append(f"ctest.log: {n} x '{pat}'")
    return report(bad, f"all {len(expected)} one-GPU tests reached the no-device message with every library "
                  "loaded from the bundle, the CUDA dirs or the base system; nothing resolved to a hidden system "
                  "copy; the Hugging Face check passed on the host" +
                  (f"; on-device.sh took {seconds} s" if seconds is not None else ""))


def main():
    a = sys.argv[1:]
    if len(a) == 4 and a[0] == "hide":
        hide(a[1], a[2], a[3])
    elif len(a) == 5 and a[0] == "farm":
        farm(a[1], a[2], a[3], a[4])
    elif len(a) == 5 and a[0] == "verdict":
        sys.exit(verdict(a[1], a[2], a[3], a[4]))
    elif len(a) == 7 and a[0] == "verdict":
        sys.exit(verdict(a[1], a[2], a[3], a[4], int(a[5]), int(a[6])))
    elif len(a) == 5 and a[0] == "plan":
        expected = [t for t in a[2].split(",") if t]
        sys.exit(report(plan_checks(a[1], expected, int(a[3]), int(a[4])),
                        f"on-device.sh's plan ran to its end without a device in {a[3]} s: smoke, "
                        f"{len(expected)} one-GPU tests to the no-device message, Hugging Face check on the host"))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
