#!/usr/bin/python3
# shardtrain/tests/bench/blas_core_probe.py
# Owns the choice of OpenBLAS's kernels (OPENBLAS_CORETYPE) for one side of
# tests/bench/torch_parity_speed.sh (issue 50): which of the x86-64 cores the
# OpenBLAS library knows, and this CPU can run, computes an fp32 GEMM correctly
# and fastest. A DYNAMIC_ARCH OpenBLAS picks its core from CPUID, and on CPUs it
# does not know (Debian's 0.3.21 on an Intel family 6 model 207) it falls back to
# its generic "Prescott" kernels, 3x slower than its SkylakeX ones there.
#
# Usage (run by /usr/bin/python3, which has torch and numpy):
#   blas_core_probe.py choose SIDE [--n N] [--reps R] [--markdown FILE]
#       SIDE: torch (PyTorch's fp32 GEMM, torch.mm, through the OpenBLAS torch
#       loads) or the path of an OpenBLAS library (its cblas_sgemm through ctypes:
#       the one the trainer links). For each candidate, "unset" (OpenBLAS's own
#       pick) and every core in CORES below that the library's file names and this
#       CPU's flags (/proc/cpuinfo) can run, runs `measure` in a fresh process with
#       OPENBLAS_CORETYPE set (OPENBLAS_L2_SIZE unset, 1 thread): an N x N x N fp32
#       GEMM, checked against float64 and timed (the best of at least R GEMMs
#       and 0.5 s, after the checked one; N 1024, R 5 by default). A
#       candidate is excluded when its process fails (a crash: SIGILL, ...; an
#       error; 300 s), when OpenBLAS loaded another core than asked (a name it does
#       not take), or when the result is wrong: some entry's error exceeds the fp32
#       worst-case bound K * 2^-24 * (|A| |B|)_ij (K = N, any summation order).
#       Chosen: the loaded core with the highest GFLOP/s over its correct
#       candidates ("unset" loads one of the named cores: the same kernels measured
#       twice, the better counted), set as "unset" when that is OpenBLAS's own
#       pick (no variable needed), else by its name. Prints
#       "chosen CORE LOADED GFLOPS" on stdout (CORE: unset or the OPENBLAS_CORETYPE
#       value), the table (core, loaded core, GFLOP/s, max rel error, chosen or why
#       excluded) as markdown rows into FILE, and exits 1 when no candidate is correct.
#   blas_core_probe.py info
#       In this process (its environment as given): the core of the OpenBLAS torch
#       loads (openblas_get_corename) and OpenBLAS's version, and oneDNN's ISA and
#       version as torch sees them: dnnl_get_effective_cpu_isa / dnnl_version of the
#       libdnnl torch maps (its enum name, as the trainer prints it), and the "isa:"
#       line that ONEDNN_VERBOSE prints for a convolution. One line:
#       "info openblas_core=C openblas=V onednn_isa=I onednn=V onednn_verbose_isa=TEXT".
#   blas_core_probe.py measure SIDE REF.npz REPS   (what `choose` runs per candidate)
#   blas_core_probe.py library                     (the path of the OpenBLAS torch loads)
#
# Test knob: BLAS_CORE_PROBE_PLANT="CORE:wrong,CORE2:crash,torch/CORE3:wrong" makes
# candidate CORE's result wrong (one entry off by 1e-3 |A||B|) and CORE2's process
# die of SIGILL (CORE may be "unset"); a "torch/" or "lib/" prefix limits a plant to
# that side. The smoke test (tests/bench/torch_parity_smoke.sh) sees a wrong and a
# crashing core excluded, and steers each side to a different core. Not for measuring.
import ctypes
import os
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

# OpenBLAS's x86-64 cores (its names, as OPENBLAS_CORETYPE takes them) and the
# /proc/cpuinfo flags their kernels need. Older AMD cores (Bulldozer .. Excavator,
# FMA4/XOP kernels) and 32-bit-era ones are not tried; SapphireRapids is tried
# where the library names it (OpenBLAS >= 0.3.22).
AVX512 = ["avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"]
CORES = [
    ("Prescott", ["pni"]),
    ("Core2", ["ssse3"]),
    ("Nehalem", ["sse4_2"]),
    ("Sandybridge", ["avx"]),
    ("Haswell", ["avx2", "fma"]),
    ("Zen", ["avx2", "fma"]),
    ("SkylakeX", AVX512),
    ("Cooperlake", AVX512 + ["avx512_bf16"]),
    ("SapphireRapids", AVX512 + ["avx512_bf16", "amx_bf16", "amx_tile"]),
]
# dnnl_cpu_isa_t (oneDNN 2.x dnnl_types.h): the names the trainer prints too.
MIN_SECONDS = 0.5  # each candidate's timing: at least REPS GEMMs and at least this long, best one counted
ONEDNN_ISA = {0x0: "all", 0x1: "sse41", 0x3: "avx", 0x7: "avx2", 0xf: "avx512_mic", 0x1f: "avx512_mic_4ops",
              0x27: "avx512_core", 0x67: "avx512_core_vnni", 0xe7: "avx512_core_bf16",
              0x3e7: "avx512_core_amx", 0x407: "avx2_vnni"}


def fail(msg):
    print(f"blas_core_probe: {msg}", file=sys.stderr)
    sys.exit(2)


def mapped(part):
    """The path of the first library mapped into this process whose name contains `part`."""
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1]
            if path.startswith("/") and part in os.path.basename(path):
                return path
    return None


def openblas_of_torch():
    __import__("torch")  # loads OpenBLAS (and oneDNN) into this process
    path = mapped("libopenblas")
    if path is None:
        fail("torch loaded no libopenblas (is this Debian's python3-torch?)")
    return path


def openblas_names(lib):
    lib.openblas_get_corename.restype = ctypes.c_char_p
    lib.openblas_get_config.restype = ctypes.c_char_p
    config = lib.openblas_get_config().decode().split()
    return lib.openblas_get_corename().decode(), " ".join(config[:2]).replace("OpenBLAS ", "")


def onednn_of_torch():
    """(isa enum name, version, verbose isa text) of the oneDNN torch runs."""
    import torch
    isa, version = "-", "-"
    path = mapped("libdnnl") or mapped("libmkldnn")
    if path:
        d = ctypes.CDLL(path)

        class Version(ctypes.Structure):
            _fields_ = [("major", ctypes.c_int), ("minor", ctypes.c_int), ("patch", ctypes.c_int),
                        ("hash", ctypes.c_char_p), ("cpu_runtime", ctypes.c_uint), ("gpu_runtime", ctypes.c_uint)]
        d.dnnl_version.restype = ctypes.POINTER(Version)
        v = d.dnnl_version().contents
        version = f"{v.major}.{v.minor}.{v.patch}"
        code = d.dnnl_get_effective_cpu_isa()
        isa = ONEDNN_ISA.get(code, hex(code))
    # ONEDNN_VERBOSE's own words, from a convolution large enough for oneDNN
    # (stdout captured at the file descriptor: oneDNN prints with printf).
    verbose = "-"
    with tempfile.TemporaryFile() as tf:
        sys.stdout.flush()
        saved = os.dup(1)
        os.dup2(tf.fileno(), 1)
        try:
            with torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON):
                torch.nn.functional.conv2d(torch.ones(8, 16, 32, 32), torch.ones(32, 16, 3, 3))
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)
        tf.seek(0)
        for line in tf.read().decode(errors="replace").splitlines():
            if ",isa:" in line:
                verbose = line.split(",isa:", 1)[1].strip()
                break
    return isa, version, verbose


def reference(n):
    """A, B (fp32, seeded), C = A B and |A| |B| in float64 without BLAS (numpy's einsum loops)."""
    rng = np.random.default_rng(50)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    c = np.einsum("ik,kj->ij", a64, b64, optimize=False)
    scale = np.einsum("ik,kj->ij", np.abs(a64), np.abs(b64), optimize=False)
    return a, b, c, scale


def measure(side, ref_path, reps):
    if os.environ.get("OPENBLAS_NUM_THREADS") != "1":
        fail("measure needs OPENBLAS_NUM_THREADS=1 (one thread: the rate of one core)")
    ref = np.load(ref_path)
    a, b, c64, scale = ref["a"], ref["b"], ref["c"], ref["scale"]
    n = a.shape[0]
    asked = os.environ.get("OPENBLAS_CORETYPE", "unset")
    # This side's plants: "CORE:what" for both sides, "torch/CORE:what" or "lib/CORE:what" for one.
    plant = [p.split("/", 1)[-1] for p in os.environ.get("BLAS_CORE_PROBE_PLANT", "").split(",")
             if "/" not in p or p.split("/", 1)[0] == ("torch" if side == "torch" else "lib")]
    if f"{asked}:crash" in plant:
        os.kill(os.getpid(), signal.SIGILL)
    if side == "torch":
        import torch
        torch.set_num_threads(1)
        lib = ctypes.CDLL(openblas_of_torch())
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)

        def gemm():
            return torch.mm(ta, tb).numpy()
    else:
        lib = ctypes.CDLL(side)
        lib.openblas_set_num_threads(1)
        out = np.zeros((n, n), dtype=np.float32)
        lib.cblas_sgemm.argtypes = [ctypes.c_int] * 6 + [ctypes.c_float, ctypes.c_void_p, ctypes.c_int,
                                                         ctypes.c_void_p, ctypes.c_int, ctypes.c_float,
                                                         ctypes.c_void_p, ctypes.c_int]

        def gemm():
            # CblasRowMajor 101, CblasNoTrans 111
            lib.cblas_sgemm(101, 111, 111, n, n, n, 1.0, a.ctypes.data, n, b.ctypes.data, n, 0.0, out.ctypes.data, n)
            return out
    loaded, version = openblas_names(lib)
    c = gemm()  # warm-up, and the result checked
    if f"{asked}:wrong" in plant:
        c = c.copy()
        c[n // 2, n // 3] += 1e-3 * scale[n // 2, n // 3]
    err = np.abs(c.astype(np.float64) - c64) / scale
    rel = float(np.max(err)) if np.all(np.isfinite(c)) else float("inf")
    best, done, start = float("inf"), 0, time.perf_counter()
    while done < reps or time.perf_counter() - start < MIN_SECONDS:
        t = time.perf_counter()
        gemm()
        best = min(best, time.perf_counter() - t)
        done += 1
    print(f"measure {asked} {loaded} {2.0 * n ** 3 / best / 1e9:.2f} {rel:.3e} {n} {version}")


def cpu_flags():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


def choose(side, n, reps, markdown):
    lib_path = side if side != "torch" else None
    if lib_path is None:
        # The library torch loads, found in a child (this process must not load torch
        # before the candidates' environments are set: OpenBLAS reads them once).
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "library"], capture_output=True, text=True)
        if out.returncode != 0:
            fail(f"could not start torch: {out.stderr.strip()[-300:]}")
        lib_path = out.stdout.split()[-1]
    elif not os.path.isfile(side):
        fail(f"no OpenBLAS library at {side}")
    with open(lib_path, "rb") as f:
        blob = f.read()
    flags = cpu_flags()
    candidates = [("unset", "")]
    for core, needs in CORES:
        missing = [x for x in needs if x not in flags]
        if b"\0" + core.encode() + b"\0" not in blob:
            candidates.append((core, f"not run: not a core of this OpenBLAS ({os.path.basename(lib_path)})"))
        elif missing:
            candidates.append((core, "not run: this CPU lacks " + " ".join(missing)))
        else:
            candidates.append((core, ""))
    bound = n * 2.0 ** -24
    rows = []  # (core, loaded, gflops, rel, why): why empty when correct
    with tempfile.TemporaryDirectory() as tmp:
        ref = os.path.join(tmp, "ref.npz")
        a, b, c, scale = reference(n)
        np.savez(ref, a=a, b=b, c=c, scale=scale)
        for core, skip in candidates:
            if skip:
                rows.append((core, "-", None, None, skip))
                continue
            env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
            env.pop("OPENBLAS_L2_SIZE", None)
            env.pop("OPENBLAS_CORETYPE", None)
            if core != "unset":
                env["OPENBLAS_CORETYPE"] = core
            try:
                p = subprocess.run([sys.executable, os.path.abspath(__file__), "measure", side, ref, str(reps)],
                                   env=env, capture_output=True, text=True, timeout=300)
            except subprocess.TimeoutExpired:
                rows.append((core, "-", None, None, "excluded: no result in 300 s"))
                continue
            line = [x for x in p.stdout.splitlines() if x.startswith("measure ")]
            if p.returncode != 0 or not line:
                why = (f"killed by {signal.Signals(-p.returncode).name}" if p.returncode < 0
                       else f"exit {p.returncode}: {(p.stderr.strip().splitlines() or ['no output'])[-1][:120]}")
                rows.append((core, "-", None, None, "excluded: its process failed (" + why + ")"))
                continue
            _, asked, loaded, gflops, rel, _, version = line[0].split()
            gflops, rel = float(gflops), float(rel)
            if core != "unset" and loaded.lower() != core.lower():
                rows.append((core, loaded, gflops, rel, f"excluded: OpenBLAS loaded {loaded}, not {core}"))
            elif not rel <= bound:
                rows.append((core, loaded, gflops, rel, f"excluded: wrong result (error above the bound {bound:.1e})"))
            else:
                rows.append((core, loaded, gflops, rel, ""))
    # The rate of a loaded core: the best of the correct candidates that loaded it
    # ("unset" loads one of the named cores: the same kernels, measured twice).
    rate = {}
    for core, loaded, gflops, rel, why in rows:
        if gflops is not None and not why:
            rate[loaded] = max(rate.get(loaded, 0.0), gflops)
    chosen = None
    if rate:
        fastest = max(rate, key=rate.get)
        # "unset" when OpenBLAS's own pick is that core (no variable needed), else its name.
        chosen = next(r for r in rows if r[1] == fastest and not r[4] and r[2] is not None)
        chosen = (chosen[0], fastest, rate[fastest])
    if markdown:
        with open(markdown, "w") as f:
            for core, loaded, gflops, rel, why in rows:
                cell = why or ("**chosen**" if chosen and core == chosen[0] else
                               "correct (the chosen kernels)" if chosen and loaded == chosen[1] else "correct")
                f.write(f"| {core} | {loaded} | {'-' if gflops is None else f'{gflops:.1f}'} | "
                        f"{'-' if rel is None else f'{rel:.1e}'} | {cell} |\n")
    for core, loaded, gflops, rel, why in rows:
        print(f"blas_core_probe: {core}: loaded {loaded}, {gflops} GFLOP/s, max rel error {rel}; "
              f"{why or 'correct'}", file=sys.stderr)
    if not chosen:
        print(f"blas_core_probe: no candidate core computed the GEMM correctly ({lib_path})", file=sys.stderr)
        sys.exit(1)
    print(f"chosen {chosen[0]} {chosen[1]} {chosen[2]:.1f}")


def main(argv):
    if len(argv) >= 2 and argv[1] == "info" and len(argv) == 2:
        __import__("torch")
        core, version = openblas_names(ctypes.CDLL(openblas_of_torch()))
        isa, dversion, verbose = onednn_of_torch()
        print(f"info openblas_core={core} openblas={version} onednn_isa={isa} onednn={dversion} "
              f"onednn_verbose_isa={verbose.replace(' ', '_')}")
    elif len(argv) == 2 and argv[1] == "library":
        print(openblas_of_torch())
    elif len(argv) == 5 and argv[1] == "measure":
        measure(argv[2], argv[3], int(argv[4]))
    elif len(argv) >= 3 and argv[1] == "choose":
        side, n, reps, markdown, rest = argv[2], 1024, 5, None, argv[3:]
        while rest:
            if rest[0] in ("--n", "--reps", "--markdown") and len(rest) >= 2:
                if rest[0] == "--markdown":
                    markdown = rest[1]
                elif not rest[1].isdigit() or int(rest[1]) < 1:
                    fail(f"{rest[0]} needs a whole number >= 1, got {rest[1]}")
                elif rest[0] == "--n":
                    n = int(rest[1])
                else:
                    reps = int(rest[1])
                rest = rest[2:]
            else:
                fail(f"unknown argument {rest[0]}")
        choose(side, n, reps, markdown)
    else:
        with open(os.path.abspath(__file__)) as f:  # the usage: this file's top comment
            lines = f.read().splitlines()[1:]
        sys.stderr.write("\n".join(l[2:] for l in lines[:next(i for i, l in enumerate(lines) if not l.startswith("#"))]) + "\n")
        sys.exit(2)


if __name__ == "__main__":
    main(sys.argv)
