#!/usr/bin/env bash
# Checks tests/bench/torch_parity_speed.sh itself on tiny shapes, so that the
# half-hour benchmark does not fail on its own bugs (CTest
# bench_script_smoke_torch_parity; label script-smoke, run by share/test.sh --all, about 4 minutes):
#   1. every variant runs on all three models (ours fp32 and bf16 at 2x1 and 1x2;
#      PyTorch fp32 1i2b (GPTs), fp32 and bf16 2t and DDP over gloo; the CNN on a
#      small MNIST-shaped set made here through `trainer-data mnist`), with
#      OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE set in the environment, and the report has:
#      the OpenBLAS line (OPENBLAS_CHOICE=fastest: each side's chosen core, and what
#      the variables were); both sides' OpenBLAS core candidate tables (issue 50), a
#      wrong core ("unset", planted through BLAS_CORE_PROBE_PLANT) and a crashing one
#      (Prescott, planted) excluded as such, the cores this CPU's flags rule out
#      named, and the choice recounted (the fastest correct loaded core: every core
#      but Sandybridge on PyTorch's side and Nehalem on ours is planted wrong, so the
#      sides must differ from each other and from OpenBLAS's own pick); the CPU line
#      (model name, family, model, as /proc/cpuinfo has them) with each side's
#      OpenBLAS core and oneDNN ISA, PyTorch's the loaded core of its chosen row and
#      ours the trainer's own "host libraries:" line; every PyTorch setup's
#      parallel_info block naming that core from inside its process;
#      for every model, one row per variant with a step time, a CPU use per run,
#      a peak and idle RSS sum and a FLOP floor of the variant's precision and
#      layout (the core_peak table's "used" rate) with the step's ratio to it;
#      the headline (our best against PyTorch's best) and the same-precision
#      ratios naming the right variants; the goal lines of issues 50 and 33 with
#      numbers; the line of the most this core allows (PyTorch's best step over
#      our lowest FLOP floor, and fp32's), recounted, and each speed goal's note
#      when the goal is above it; parallel_info of each PyTorch setup; the --profile blocks of
#      ours-fp32-2x1 and ours-bf16-2x1 with the trainer's FLOP floor line;
#      every run's core-placement probes and its placement; --doc and --readme
#      place the report and the headline between their markers. The per-run
#      medians, the floors and the step placement are recounted here (Python,
#      not the script's awk) from the runs' own logs and metrics.csv files;
#   2. --reproduce against an earlier results file, with OPENBLAS_CHOICE=unset (issue
#      33's rule: no candidate tables, OPENBLAS_CORETYPE unset on both sides, PyTorch's
#      processes at OpenBLAS's own pick): a second run compared with
#      a doctored copy of the first (one variant's step times made 100x, all
#      runs' and each placement's) must report FAIL for the reproduction, with a
#      row per model and variant, and exit 1 under --check; a results file of
#      the wrong shape or of before issue 33's variant names, the arguments of
#      before issue 33 and a bad MIN_PLACED are refused before anything runs (exit 2).
# Usage: torch_parity_smoke.sh BUILD_DIR DATA WORK   (DATA: any tokens file, e.g. the e2e tests' tiny.h5;
#        BUILD_DIR holds trainer, trainer-data and tests/bench/{core_peak,core_latency,sgemm_peak})
set -euo pipefail
build=$1 data=$2 work=$3
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
die() { echo "torch_parity_smoke: FAIL: $*" >&2; exit 1; }
rm -rf "$work"; mkdir -p "$work"
for x in trainer trainer-data tests/bench/core_peak tests/bench/core_latency tests/bench/sgemm_peak; do
  [[ -x $build/$x ]] || die "no $build/$x (build it first)"
done

# A small MNIST-shaped image set: 28x28 random pixels, labels 0-9, 256 train and
# 64 test images, as idx files through the real importer.
/usr/bin/python3 - "$work/idx" <<'PY' || die "could not write the idx files"
import os, struct, sys
import numpy as np
d = sys.argv[1]; os.makedirs(d)
rng = np.random.default_rng(7)
for split, n in (("train", 256), ("t10k", 64)):
    with open(f"{d}/{split}-images-idx3-ubyte", "wb") as f:
        f.write(struct.pack(">IIII", 0x803, n, 28, 28) + rng.integers(0, 256, n * 784, dtype=np.uint8).tobytes())
    with open(f"{d}/{split}-labels-idx1-ubyte", "wb") as f:
        f.write(struct.pack(">II", 0x801, n) + rng.integers(0, 10, n, dtype=np.uint8).tobytes())
PY
"$build/trainer-data" mnist "$work/idx" "$work/mnist.h5" > "$work/mnist.log" 2>&1 || die "trainer-data mnist: $(tail -2 "$work/mnist.log")"

export QS_DIMS="2 2 64 32 8" BIG_DIMS="2 2 128 32 8" CNN_DIMS="4,8 5 32 16"
export QS_STEPS=6 WARMUP=2 QS_ROUNDS=2 BIG_STEPS=5 BIG_ROUNDS=1 BIG_WARMUP=1 CNN_STEPS=6 CNN_WARMUP=2 CNN_ROUNDS=1
export SGEMM_N=256 CORE_PEAK_SECONDS=0.2 PROFILE=1 MIN_PLACED=1
# Runs 1 and 2 run PyTorch's bf16 setups on every CPU (their checks count them); run 3
# below checks TORCH_BF16=auto, which drops them where the CPU has no native bf16.
export TORCH_BF16=keep
printf '# doc\n<!-- torch_parity_speed: begin -->\nold\n<!-- torch_parity_speed: end -->\ntail\n' > "$work/doc.md"
printf '# readme\n<!-- torch_parity_speed headline: begin -->\nold\n<!-- torch_parity_speed headline: end -->\ntail\n' > "$work/readme.md"
args=("$build/trainer" "$build/tests/bench/core_peak" "$data" "$work/mnist.h5" "$root/inputs/quickstart.toml")
gpt_variants="ours-fp32-2x1 ours-fp32-1x2 ours-bf16-2x1 ours-bf16-1x2 torch-fp32-1i2b torch-fp32-2t torch-fp32-ddp torch-bf16-2t torch-bf16-ddp"
cnn_variants="ours-fp32-2x1 ours-fp32-1x2 ours-bf16-2x1 ours-bf16-1x2 torch-fp32-2t torch-fp32-ddp torch-bf16-2t torch-bf16-ddp"

# The OpenBLAS core probe on a small GEMM, with planted faults (BLAS_CORE_PROBE_PLANT):
# "unset" wrong and Prescott crashing on both sides, and every other core wrong but
# Sandybridge on PyTorch's side and Nehalem on ours, so that each side must choose its
# one (neither is OpenBLAS's own pick on an AVX2 CPU): a command that missed its side's
# setting then runs another core than its side's table chose, and shows it.
natural=$(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE /usr/bin/python3 "$root/tests/bench/blas_core_probe.py" info |
          sed -n 's/^info openblas_core=\([^ ]*\) .*/\1/p')
[[ -n $natural && $natural != Sandybridge && $natural != Nehalem ]] ||
  die "OpenBLAS's own core here is '$natural': the planted choice needs another than Sandybridge and Nehalem"
plant="unset:wrong,Prescott:crash"
for c in Core2 Nehalem Haswell Zen SkylakeX Cooperlake SapphireRapids; do plant+=",torch/$c:wrong"; done
for c in Core2 Sandybridge Haswell Zen SkylakeX Cooperlake SapphireRapids; do plant+=",lib/$c:wrong"; done
export BLAS_PROBE_N=192 BLAS_PROBE_REPS=3
BLAS_CORE_PROBE_PLANT=$plant \
OPENBLAS_CORETYPE=Haswell OPENBLAS_L2_SIZE=512 WORK=$work/run1 "$root/tests/bench/torch_parity_speed.sh" \
  --doc "$work/doc.md" --readme "$work/readme.md" --results "$work/r1.tsv" "${args[@]}" "$work/report1.md" \
  > "$work/run1.log" 2>&1 || die "run 1 failed: $(tail -5 "$work/run1.log")"
r=$work/report1.md
runs=0
# Every CPU has a bf16 floor (issue 50): AMX, vdpbf16ps, or without native bf16 the
# fp32 FMA unit (bf16 GEMMs then run in fp32), so every row has a floor and a ratio.
for model in quickstart big cnn; do
  vs=$gpt_variants; [[ $model != cnn ]] || vs=$cnn_variants
  rounds=1; [[ $model != quickstart ]] || rounds=2
  for v in $vs; do
    runs=$((runs + rounds))
    # | variant | step | best run | near: ms (steps) | far: ms (steps) | items/s | GFLOP/s | floor ms (PREC peak) |
    #   step / floor | CPU use per run | rss | idle |; the near and far steps add up to at most the timed
    #   steps (4 per run in every model).
    awk -F'|' -v m="$model" -v v="$v" -v rounds="$rounds" '
      function runs(cell) { if (cell ~ /^ - $/) return 0; if (cell !~ /^ [0-9.]+ \([0-9]+\) $/) return -99
                            sub(/.*\(/, "", cell); return cell + 0 }
      /^#### Model/ { cur = ($0 ~ "`" m "`") } cur && $2 == " " v " " {
        n = split($11, c, " "); ok = n == rounds
        for (i = 1; i <= n; i++) ok = ok && c[i] > 0.2 && c[i] < 2.5
        pl = runs($5) + runs($6); ok = ok && pl >= 0 && pl <= 4 * n
        floor = $9 ~ /^ [0-9.e+-]+ \((fp32|bf16) [0-9.]+\) $/ && $10 + 0 > 0
        ok = ok && floor && $7 + 0 > 0 && $8 + 0 > 0
        found = ok && $3 + 0 > 0 && $4 + 0 > 0 && $4 + 0 <= $3 + 0 && $12 + 0 > $13 + 0 && $13 + 0 > 0 }
      END { exit !found }' "$r" || die "$model: no complete row for $v in $r"
    grep -q "^$model	$v	[0-9.]*	[0-9.]*	\([0-9.]*\|-\)	[0-9]*	\([0-9.]*\|-\)	[0-9]*$" "$work/r1.tsv" ||
      die "results file lacks $model $v"
    # The per-run records (median, RSS sum, idle sum, CPU use, the probes before and after, the
    # lowest and highest of all the run's probes, their count): one number each, lowest <= highest.
    awk '{ for (i = 1; i <= 9; i++) if ($i !~ /^[0-9]+(\.[0-9]+)?$/) exit 1 } NF != 9 || $7 > $8 || $9 < 2 { exit 1 }' \
      "$work/run1/$model.$v" || die "$model $v: a malformed per-run record in $work/run1/$model.$v: $(cat "$work/run1/$model.$v")"
    # Every run's timed steps ("ms end", 4 of them) and probes ("T NS", wall clock), on one clock:
    # the run's steps lie between its first probe (before the run) and its last (after it).
    for f in "$work/run1/$model.$v".[0-9]*.steps; do
      awk 'NR == FNR { if (NR == 1) first = $1; last = $1; if (NF != 2 || $2 !~ /^[0-9.]+$/) bad = 1; next }
           { n++; if (NF != 2 || !($1 > 0) || $2 - $1 / 1000 < first || $2 > last) bad = 1 }
           END { exit bad || n != 4 }' "${f%.steps}.probes" "$f" ||
        die "$f: not 4 timed steps inside the run's probes ($(tr '\n' ' ' < "$f") / probes $(tr '\n' ' ' < "${f%.steps}.probes"))"
    done
  done
done
for v in torch-fp32-1i2b torch-fp32-2t torch-fp32-ddp torch-bf16-2t torch-bf16-ddp; do
  grep -q "^\[$v\]" "$r" || die "no parallel_info block for $v"
done
grep -q "at::get_num_threads() : 2" "$r" || die "parallel_info shows no 2-thread setup"
# OpenBLAS (issue 50): each side's core chosen by the probe, recounted from its tables;
# the CPU line; every PyTorch setup ran the chosen core (its own parallel_info line).
/usr/bin/python3 - "$r" "$natural" <<'PY' || die "the OpenBLAS core choice or the CPU line is wrong (above)"
import re, sys
report, natural = open(sys.argv[1]).read(), sys.argv[2]
keep = {"torch": "Sandybridge", "ours": "Nehalem"}  # the one core of each side not planted wrong
bad = []
m = re.search(r"^OpenBLAS: OPENBLAS_CHOICE=fastest: OPENBLAS_L2_SIZE unset in every command; OPENBLAS_CORETYPE per side, "
              r"the fastest correct core \(the tables below\): PyTorch's (\S+), ours (\S+); in the environment they were "
              r"OPENBLAS_CORETYPE=Haswell OPENBLAS_L2_SIZE=512\.$", report, re.M)
if not m:
    sys.exit("torch_parity_smoke: no OpenBLAS line naming each side's chosen core and the environment's variables")
said = {"torch": m.group(1), "ours": m.group(2)}
info = {}
for l in open("/proc/cpuinfo"):
    k, _, v = l.partition(":")
    info.setdefault(k.strip(), v.strip())
flags = set(info["flags"].split())
bound = float(re.search(r"excluded above the fp32 bound \d+ x 2\^-24 = ([0-9.e+-]+)", report).group(1))
needs = {"Prescott": ["pni"], "Core2": ["ssse3"], "Nehalem": ["sse4_2"], "Sandybridge": ["avx"],
         "Haswell": ["avx2", "fma"], "Zen": ["avx2", "fma"], "SkylakeX": ["avx512f"], "Cooperlake": ["avx512f", "avx512_bf16"],
         "SapphireRapids": ["avx512f", "amx_tile"]}
loaded_of = {}
for side, title in (("torch", r"PyTorch \(torch\.mm; /\S+\):"), ("ours", r"Ours \(cblas_sgemm of /\S+, which the trainer links\):")):
    t = re.search(r"^%s\n\n\| OPENBLAS_CORETYPE \|.*\n\|---.*\n((?:\|.*\n)+)" % title, report, re.M)
    if not t:
        bad.append(f"{side}: no candidate table"); continue
    rows = [[c.strip() for c in l.strip().strip("|").split("|")] for l in t.group(1).splitlines()]
    cores = [r[0] for r in rows]
    if cores[0] != "unset" or not {"Prescott", "Haswell", "Zen", "SkylakeX", "Cooperlake"} <= set(cores):
        bad.append(f"{side}: candidates {cores}, expected unset first and at least Prescott Haswell Zen SkylakeX Cooperlake")
    rate = {}
    for core, loaded, gflops, rel, cell in rows:
        if core == "unset" and not cell.startswith("excluded: wrong result"):
            bad.append(f"{side}: the planted wrong result of 'unset' is not excluded: {cell}")
        if core not in ("unset", "Prescott", keep[side]) and cell in ("correct", "**chosen**", "correct (the chosen kernels)"):
            bad.append(f"{side}: {core}, planted wrong, is called {cell}")
        if core == "Prescott" and cell != "excluded: its process failed (killed by SIGILL)":
            bad.append(f"{side}: the planted crash of Prescott is not excluded as such: {cell}")
        missing = [f for f in needs.get(core, []) if f not in flags]
        if missing and not cell.startswith("not run: this CPU lacks") and not cell.startswith("not run: not a core"):
            bad.append(f"{side}: {core} needs {missing}, which this CPU lacks, yet: {cell}")
        if cell.startswith("not run: this CPU lacks") and not missing:
            bad.append(f"{side}: {core} said to need flags this CPU lacks, but it has {needs.get(core)}")
        if cell in ("correct", "**chosen**", "correct (the chosen kernels)"):
            if not float(rel) <= bound or not float(gflops) > 0:
                bad.append(f"{side}: {core} called correct at error {rel} (bound {bound}) and {gflops} GFLOP/s")
            rate[loaded] = max(rate.get(loaded, 0.0), float(gflops))
    if not rate:
        bad.append(f"{side}: no correct core"); continue
    fastest = max(rate, key=rate.get)
    if fastest != keep[side]:
        bad.append(f"{side}: the chosen kernels are {fastest}; the only core not planted wrong is {keep[side]}")
    want = next(r[0] for r in rows if r[1] == fastest and r[4] in ("correct", "**chosen**", "correct (the chosen kernels)"))
    chosen = [r[0] for r in rows if r[4] == "**chosen**"]
    if chosen != [want] or said[side] != want:
        bad.append(f"{side}: chosen {chosen}, the OpenBLAS line says {said[side]}, a recount {want} (fastest loaded core {fastest})")
    loaded_of[side] = fastest
cpu = re.search(r"^\*\*CPU: (.*) \(family (\S+) model (\S+); (.*)\)\. PyTorch ran OpenBLAS core (\S+) \(OpenBLAS [0-9.]+\), "
                r"oneDNN ISA (\S+) \(oneDNN [0-9.]+; ONEDNN_VERBOSE: [^)]+\), OPENBLAS_CORETYPE=(\S+); ours OpenBLAS core (\S+) "
                r"\(OpenBLAS [0-9.]+\), oneDNN ISA (\S+) \(oneDNN [0-9.]+\), OPENBLAS_CORETYPE=(\S+)\.\*\*$", report, re.M)
if not cpu:
    bad.append("no CPU line naming the CPU and each side's OpenBLAS core and oneDNN ISA with its OPENBLAS_CORETYPE")
else:
    name, fam, model, flagtext, tcore, tisa, tset, ocore, oisa, oset = cpu.groups()
    if (name, fam, model) != (info["model name"], info["cpu family"], info["model"]):
        bad.append(f"the CPU line names {name} family {fam} model {model}; /proc/cpuinfo: {info['model name']} "
                   f"family {info['cpu family']} model {info['model']}")
    if ("no avx2" in flagtext) == ("avx2" in flags) or ("no avx512" in flagtext) == ("avx512f" in flags) or \
       ("no amx" in flagtext) == ("amx_tile" in flags):
        bad.append(f"the CPU line's flags '{flagtext}' disagree with /proc/cpuinfo")
    isas = {"sse41", "avx", "avx2", "avx2_vnni", "avx512_core", "avx512_core_vnni", "avx512_core_bf16", "avx512_core_amx"}
    if tisa not in isas or oisa not in isas:
        bad.append(f"oneDNN ISAs '{tisa}' (PyTorch) / '{oisa}' (ours): not dnnl_cpu_isa_t names")
    for side, core, setting in (("torch", tcore, tset), ("ours", ocore, oset)):
        if side in loaded_of and (core != loaded_of[side] or setting != said[side]):
            bad.append(f"{side} ran OpenBLAS core {core} with OPENBLAS_CORETYPE={setting}; chosen {said[side]}, loading {loaded_of[side]}")
    for v in ("torch-fp32-1i2b", "torch-fp32-2t", "torch-fp32-ddp", "torch-bf16-2t", "torch-bf16-ddp"):
        block = re.search(r"^\[%s\]\n((?:(?!\[torch-).*\n)*)" % v, report, re.M)
        if not block or f"OpenBLAS core: {tcore}\n" not in block.group(1) or \
           f"OPENBLAS_CORETYPE={said['torch']} OPENBLAS_L2_SIZE=(unset))" not in block.group(1):
            bad.append(f"{v}: its parallel_info block does not show OpenBLAS core {tcore} under OPENBLAS_CORETYPE={said['torch']}")
for b in bad:
    print("torch_parity_smoke: " + b, file=sys.stderr)
sys.exit(1 if bad else 0)
PY
# The core_peak table: before, after and used rows with numbers; the library GEMM rate labelled.
grep -q '^| when | fp32 FMA, 2 ranks x 1 thread | bf16 floor unit, 2 ranks x 1 thread | fp32 FMA, 1 rank (x 2) | bf16 floor unit, 1 rank (x 2) | library GEMM rate (not a floor)' "$r" ||
  die "no core_peak table with the library GEMM rate labelled"
grep -q "^This core's peak (tests/bench/core_peak, .*; units: fp32: fp32 on .*; bf16: bf16 on .*; oneDNN ISA .*): the FLOP floor" "$r" ||
  die "the core_peak table does not name the floors' units and oneDNN's ISA"
for w in before after; do
  grep -q "^| $w | [0-9.]* | [0-9.]* | [0-9.]* x 2 = [0-9.]* | [0-9.]* x 2 = [0-9.]* | [0-9.]* | [0-9.]* |$" "$r" || die "no core_peak row '$w' with numbers"
done
grep -q '^| used (higher) | [0-9.]* | [0-9.]* | [0-9.]* | [0-9.]* | | |$' "$r" || die "no 'used' core_peak row"
head -1 "$work/r1.tsv" | grep -q '^# torch_parity_speed results v2 ' || die "the results file has no v2 header line"
# The --profile blocks: fp32 and bf16 of every model, each with the trainer's FLOP floor line.
[[ $(grep -c '^`trainer --profile` of ours-\(fp32\|bf16\)-2x1 ' "$r") == 6 ]] || die "not 6 --profile blocks (fp32 and bf16, 3 models)"
[[ $(grep -c '^  FLOP floor: [0-9.]* ms per step' "$r") == 6 ]] || die "the --profile blocks lack the trainer's FLOP floor line"

# Recounts from the runs' own files (Python, not the script's awk): each run's median
# step, the floors, the headline and same-precision ratios, the goal lines, and the
# step placement.
far=$(sed -n 's/^a probe above [0-9.]*x that, \([0-9.]*\) ns, is far.*/\1/p' "$r")
[[ -n $far ]] || die "the report names no far threshold"
/usr/bin/python3 - "$work/run1" "$far" "$r" "$gpt_variants" "$cnn_variants" <<'PY' || die "a recount differs from the report (above)"
import csv, glob, re, statistics, sys
work, far, report = sys.argv[1], float(sys.argv[2]), open(sys.argv[3]).read()
variants = {"quickstart": sys.argv[4].split(), "big": sys.argv[4].split(), "cnn": sys.argv[5].split()}
warm = {"quickstart": 2, "big": 1, "cnn": 2}
last = {"quickstart": 6, "big": 5, "cnn": 6}
bad = []
used = re.search(r"^\| used \(higher\) \| ([0-9.]+) \| ([0-9.]+) \| ([0-9.]+) \| ([0-9.]+) \| \| \|$", report, re.M)
peak = {("fp32", True): used.group(1), ("bf16", True): used.group(2), ("fp32", False): used.group(3), ("bf16", False): used.group(4)}
for model, vs in variants.items():
    sec = re.search(r"^#### Model `%s`.*?(?=^#### |\Z)" % model, report, re.M | re.S).group(0)
    gflop = float(re.search(r", ([0-9.e+-]+) GFLOP per step;", sec).group(1))
    med = {}
    for v in vs:
        # Each run's median step, from its log (PyTorch's "step S loss L ms M end E" lines) or
        # metrics.csv (ours: step_ms), steps after the warm-up.
        recs = [float(l.split()[0]) for l in open(f"{work}/{model}.{v}")]
        for r, rec in enumerate(recs, 1):
            if v.startswith("torch-"):
                ms = [float(l.split()[5]) for l in open(f"{work}/{model}.{v}.{r}.log")
                      if l.startswith("step ") and int(l.split()[1]) > warm[model]]
            else:
                rows = csv.DictReader(open(f"{work}/runs/{model}.{v}.{r}/metrics.csv"))
                ms = [float(x["step_ms"]) for x in rows if warm[model] < int(x["step"]) <= last[model]]
            if len(ms) != last[model] - warm[model] or abs(statistics.median(ms) - rec) > 2e-5 * rec:  # the record: awk's 6 digits
                bad.append(f"{model} {v} run {r}: the record says {rec}, its own steps' median is "
                           f"{statistics.median(ms) if ms else None} over {len(ms)} steps")
        med[v] = statistics.median(recs)
        row = re.search(r"^\| %s \| (.*)$" % re.escape(v), sec, re.M).group(1).split(" | ")
        cell = row[6]
        prec, layout = v.split("-")[1], v.split("-")[2]
        ratio = float(row[7])
        want = peak[(prec, layout in ("2x1", "ddp"))]
        m = re.fullmatch(r"[0-9.e+-]+ \((fp32|bf16) ([0-9.]+)\)", cell)
        if not m or m.group(1) != prec or m.group(2) != want:
            bad.append(f"{model} {v}: floor cell '{cell}', expected the {prec} peak {want} "
                       f"({'2 ranks' if layout in ('2x1', 'ddp') else '1 rank x 2'})")
        elif abs(ratio - med[v] / (gflop / float(want) * 1000)) > 1e-3 * ratio + 1e-3:
            bad.append(f"{model} {v}: step / floor {ratio}, recount {med[v] / (gflop / float(want) * 1000):.3f}")
    ours = min((v for v in vs if v.startswith("ours-")), key=lambda v: med[v])
    theirs = min((v for v in vs if v.startswith("torch-")), key=lambda v: med[v])
    h = re.search(r"^\*\*Headline: (\S+) \(our best, any precision and layout\) is ([0-9.]+)x PyTorch's best "
                  r"\((\S+), any precision and setup\) in (tokens|images)/s\*\* \(paired per round, median: [0-9.]+x\)\.$", sec, re.M)
    if not h or h.group(1) != ours or h.group(3) != theirs or abs(float(h.group(2)) - med[theirs] / med[ours]) > 0.006:
        bad.append(f"{model}: headline {h.groups() if h else None}, recount {ours} / {theirs} {med[theirs] / med[ours]:.2f}")
    s = re.search(r"^Same precision: fp32 (\S+) / (\S+) ([0-9.]+)x; bf16 (\S+) / (\S+) ([0-9.]+)x ", sec, re.M)
    for i, prec in ((1, "fp32"), (4, "bf16")):
        o = min((v for v in vs if v.startswith(f"ours-{prec}-")), key=lambda v: med[v])
        t = min((v for v in vs if v.startswith(f"torch-{prec}-")), key=lambda v: med[v])
        if not s or (s.group(i), s.group(i + 1)) != (o, t) or abs(float(s.group(i + 2)) - med[t] / med[o]) > 0.006:
            bad.append(f"{model}: same-precision {prec} {s.groups() if s else None}, recount {o} / {t} {med[t] / med[o]:.2f}")
    # The most this core allows: PyTorch's best step over the lowest floor of ours; fp32:
    # PyTorch's best fp32 over ours-fp32-2x1's floor; a goal above it says so.
    floors = {v: gflop / float(peak[(v.split("-")[1], v.split("-")[2] in ("2x1", "ddp"))]) * 1000 for v in vs}
    reach = med[theirs] / min(floors[v] for v in vs if v.startswith("ours-"))
    t32 = min((v for v in vs if v.startswith("torch-fp32-")), key=lambda v: med[v])
    reach32 = med[t32] / floors["ours-fp32-2x1"]
    a = re.search(r"^The most this core allows \(PyTorch's best step / our FLOP floor, a step at this core's peak\): "
                  r"any precision ([0-9.]+)x \((\S+) [0-9.]+ ms / [0-9.e+]+ ms\); fp32 ([0-9.]+)x \((\S+) / [0-9.e+]+ ms\)\.$", sec, re.M)
    if not a or a.group(2) != theirs or a.group(4) != t32 or abs(float(a.group(1)) - reach) > 0.006 + 2e-3 * reach \
            or abs(float(a.group(3)) - reach32) > 0.006 + 2e-3 * reach32:
        bad.append(f"{model}: the most this core allows {a.groups() if a else None}, recount {theirs} {reach:.2f}, {t32} {reach32:.2f}")
    goal = {"quickstart": 3.0, "big": 2.0, "cnn": 2.5}[model]
    above = re.search(r"^- (?:PASS|FAIL \(below the goal\)): (?:tokens/s of our best|our best step) \(\S+\) >= [0-9.]+x.*?"
                      r"(; the goal is above what this core allows \(([0-9.]+)x at its peak\))?$", sec, re.M)
    if not above or bool(above.group(1)) != (goal > float(a.group(1) if a else reach)):
        bad.append(f"{model}: the goal line's 'above what this core allows' note does not match goal {goal} against {reach:.2f}")
    goals = {"quickstart": [r"tokens/s of our best \(\S+\) >= 3x PyTorch's best \(\S+\) \(issue 50\)"],
             "big": [r"tokens/s of our best \(\S+\) >= 2\.0x PyTorch's best \(\S+\) \(issue 50\)",
                     r"tokens/s of our best fp32 >= 1\.3x PyTorch's best fp32 \(\S+ / \S+; issue 50\)",
                     r"ours-fp32-2x1 step <= 1\.4x the fp32 floor", r"ours-bf16-2x1 step <= 2\.0x the bf16 floor"],
             "cnn": [r"our best step \(\S+\) >= 2\.5x faster than PyTorch's best \(\S+\) \(issue 50\)"]}[model]
    goals += [r"peak RSS summed over our best's ranks \(\S+\) <= 0\.7x", r"every run of ours: VmHWM within"]
    for g in goals:
        number = r"[^:]*[0-9]"
        if not re.search(r"^- (PASS|FAIL \(below the goal\)): %s.*: %s" % (g, number), sec, re.M):
            bad.append(f"{model}: no goal line '{g}' with a number")
    # The step placement.
    line = re.search(r"^Timed steps by placement \(near/far/mixed\): ([^\n]*)$", sec, re.M).group(1)
    got = dict(re.findall(r"(\S+) (\d+/\d+/\d+);", line + ";"))
    for v in vs:
        n = {"near": 0, "far": 0, "mixed": 0}
        for steps in glob.glob(f"{work}/{model}.{v}.*.steps"):
            probes = [tuple(map(float, l.split())) for l in open(steps[:-6] + ".probes")]
            for l in open(steps):
                ms, end = map(float, l.split())
                start = end - ms / 1000
                before = [i for i, (t, _) in enumerate(probes) if t <= start]
                after = [i for i, (t, _) in enumerate(probes) if t >= end]
                span = [p for _, p in probes[before[-1]:after[0] + 1]]
                n["near" if max(span) <= far else "far" if min(span) > far else "mixed"] += 1
        want = f"{n['near']}/{n['far']}/{n['mixed']}"
        if got.get(v) != want:
            bad.append(f"{model} {v}: the report's placement says {got.get(v)}, a recount {want}")
for b in bad:
    print("torch_parity_smoke: " + b, file=sys.stderr)
sys.exit(1 if bad else 0)
PY
grep -q '^[0-9]* near, [0-9]* far, [0-9]* mixed (placement changed during the run); [0-9]* probes, highest [0-9.]* ns\.$' "$r" ||
  die "no core placement summary in $r"
[[ $(grep -o '[0-9.]* (\(near\|far\|mixed\) [0-9.]*-[0-9.]*, [0-9]* probes)' "$r" | wc -l) == "$runs" ]] ||
  die "the per-run lists do not tag all $runs runs with a placement and its probes"
[[ $(grep -c '^\*\*Headline: ours-\(fp32\|bf16\)-[12]x[12] (our best.* PyTorch.s best (torch-' "$r") == 3 ]] || die "no headline per model"
grep -q '^old$' "$work/doc.md" && die "--doc left the old report"
grep -q '^### Our trainer against PyTorch' "$work/doc.md" || die "--doc did not place the report"
[[ $(grep -c '^- \(quickstart GPT\|big GPT\|MNIST CNN\) .* \(tokens\|images\)/s against torch-.*same precision: fp32 [0-9.]*x, bf16 [0-9.]*x; ours-fp32-2x1 step [0-9.]*x the fp32 floor' "$work/readme.md") == 3 ]] ||
  die "--readme did not place the headline (a line per model)"
tail -1 "$work/readme.md" | grep -qx tail || die "--readme lost the text after the markers"

# Refused before anything is measured (exit 2, no runs directory): results files of the
# wrong shape (4 columns; no header line; the header and variant names of before issue 33),
# the arguments of before issue 33 (TRAINER SGEMM_PEAK DATA INPUT), and MIN_PLACED=0.
refused() {  # refused NAME PATTERN CMD...: CMD exits 2 with PATTERN in its output, before measuring
  local name=$1 pattern=$2 rc=0; shift 2
  WORK=$work/$name "$@" > "$work/$name.log" 2>&1 || rc=$?
  [[ $rc == 2 ]] && grep -q "$pattern" "$work/$name.log" && [[ ! -d $work/$name/runs ]] ||
    die "$name: not refused before measuring (exit $rc): $(tail -2 "$work/$name.log")"
}
cut -f1-4 "$work/r1.tsv" > "$work/r4.tsv"
refused run_bad "r4.tsv: not a --results file" "$root/tests/bench/torch_parity_speed.sh" --reproduce "$work/r4.tsv" "${args[@]}" -
tail -n +2 "$work/r1.tsv" > "$work/r8.tsv"
refused run_bad8 "r8.tsv: not a --results file" "$root/tests/bench/torch_parity_speed.sh" --reproduce "$work/r8.tsv" "${args[@]}" -
{ echo "# torch_parity_speed results: model variant median_ms best_run_ms near_median_ms near_steps far_median_ms far_steps"
  printf 'quickstart\tours-2x1\t34.2\t33.7\t34.2\t373\t34.5\t39\n'; } > "$work/r_old.tsv"
refused run_bad_old "r_old.tsv: not a --results file .*before issue 33" "$root/tests/bench/torch_parity_speed.sh" --reproduce "$work/r_old.tsv" "${args[@]}" -
refused run_bad_args "the arguments are TRAINER CORE_PEAK DATA MNIST INPUT" "$root/tests/bench/torch_parity_speed.sh" \
  "$build/trainer" "$build/tests/bench/sgemm_peak" "$data" "$root/inputs/quickstart.toml" -
MIN_PLACED=0 refused run_bad_mp "MIN_PLACED must be a whole number" "$root/tests/bench/torch_parity_speed.sh" "${args[@]}" -

# A doctored earlier run: the first ours-fp32-2x1 step times (quickstart) made 100x
# (all runs, best run, and each placement's median where it has runs; 100x so
# that tiny runs' noise on a loaded machine cannot hide it).
awk -F'\t' 'BEGIN { OFS = "\t" } !d && $2 == "ours-fp32-2x1" { $3 *= 100; $4 *= 100; if ($6 > 0) $5 *= 100; if ($8 > 0) $7 *= 100; d = 1 } { print }' \
  "$work/r1.tsv" > "$work/r0.tsv"
rc=0
OPENBLAS_CORETYPE=Prescott OPENBLAS_L2_SIZE=256 OPENBLAS_CHOICE=unset PROFILE=0 QS_ROUNDS=1 WORK=$work/run2 "$root/tests/bench/torch_parity_speed.sh" --check \
  --reproduce "$work/r0.tsv" "${args[@]}" "$work/report2.md" > "$work/run2.log" 2>&1 || rc=$?
[[ $rc == 1 ]] || die "--check with a doctored --reproduce file exited $rc, expected 1: $(tail -3 "$work/run2.log")"
# OPENBLAS_CHOICE=unset: issue 33's rule, no candidate tables, both sides at OpenBLAS's own
# pick although the environment forced Prescott.
grep -q "^OpenBLAS: OPENBLAS_CHOICE=unset: OPENBLAS_L2_SIZE unset in every command; OPENBLAS_CORETYPE unset on both sides (each OpenBLAS picks its own core from CPUID); in the environment they were OPENBLAS_CORETYPE=Prescott OPENBLAS_L2_SIZE=256\.$" "$work/report2.md" ||
  die "OPENBLAS_CHOICE=unset: the report's OpenBLAS line does not say so"
grep -q "^OpenBLAS core candidates" "$work/report2.md" && die "OPENBLAS_CHOICE=unset: the report has candidate tables"
grep -q "^\*\*CPU: .* PyTorch ran OpenBLAS core $natural (.*, OPENBLAS_CORETYPE unset; ours OpenBLAS core $natural (.*, OPENBLAS_CORETYPE unset\.\*\*$" "$work/report2.md" ||
  die "OPENBLAS_CHOICE=unset: the CPU line does not show both sides at OpenBLAS's own core $natural"
[[ $(grep -c "^  (this variant's environment: .*OPENBLAS_CORETYPE unset OPENBLAS_L2_SIZE=(unset))" "$work/report2.md") == 5 &&
   $(grep -c "^OpenBLAS core: $natural$" "$work/report2.md") == 5 ]] ||
  die "OPENBLAS_CHOICE=unset: the PyTorch setups' parallel_info blocks do not show OPENBLAS_CORETYPE unset and core $natural"
grep -q "^- FAIL (below the goal): every variant's step time within 10% of the earlier run's, within the same core placement" "$work/report2.md" ||
  die "the doctored reproduction did not FAIL in the report"
# ... and for the doctored variant: each placement both runs have shows it
# (about -99%), or the variant is named as having no placement in common.
awk -F'|' '$2 == " quickstart " && $3 == " ours-fp32-2x1 " {
    row = 1; for (i = 12; i <= 15; i += 3) if ($i !~ /^ - $/) { seen = 1; if ($i + 0 > -50) bad = 1 } }
  /^- FAIL .*no placement in common for:.* quickstart\/ours-fp32-2x1( |$)/ { none = 1 }
  END { exit !(row && !bad && (seen || none)) }' "$work/report2.md" ||
  die "the doctored variant's per-placement deviation is not in the reproduction table: $(grep '| quickstart | ours-fp32-2x1 |' "$work/report2.md")"
cell='[0-9.-]* ([0-9]*) | [0-9.-]* ([0-9]*) | \([-+][0-9.]*%\|-\)'
[[ $(grep -c "^| \\(quickstart\\|big\\|cnn\\) | \\(ours\\|torch\\)-\\(fp32\\|bf16\\)-[a-z0-9]* | [0-9.]* | [0-9.]* | [-+][0-9.]*% | [0-9.]* | [0-9.]* | [-+][0-9.]*% | $cell | $cell |\$" "$work/report2.md") == 26 ]] ||
  die "the reproduction table lacks a row per model and variant (26)"
refused run_bad_bf16 "TORCH_BF16 must be auto, keep or drop" env TORCH_BF16=maybe "$root/tests/bench/torch_parity_speed.sh" "${args[@]}" -

# 3. TORCH_BF16=auto: PyTorch's bf16 setups dropped, and the report says why, exactly
# where core_peak reports no native bf16 (bf16_native 0); kept elsewhere. Then the
# same-precision line has no bf16 ratio and the report still has every model's headline.
native=$("$build/tests/bench/core_peak" 0.05 | awk '$1 == "core_peak" { for (i = 2; i < NF; i += 2) if ($i == "bf16_native") print $(i + 1) }')
[[ $native == 0 || $native == 1 ]] || die "core_peak printed no bf16_native (got '$native')"
TORCH_BF16=auto PROFILE=0 QS_ROUNDS=1 WORK=$work/run3 "$root/tests/bench/torch_parity_speed.sh" "${args[@]}" "$work/report3.md" \
  > "$work/run3.log" 2>&1 || die "run 3 (TORCH_BF16=auto) failed: $(tail -5 "$work/run3.log")"
r3=$work/report3.md
[[ $(grep -c '^\*\*Headline: ' "$r3") == 3 ]] || die "TORCH_BF16=auto: not one headline per model"
if [[ $native == 0 ]]; then
  grep -q "^PyTorch's bf16 setups (torch-bf16-2t, torch-bf16-ddp) not run: this CPU has no native bf16 (core_peak bf16_native 0)" "$r3" ||
    die "TORCH_BF16=auto without native bf16: the report does not say PyTorch's bf16 setups were dropped, and why"
  grep -q '^| torch-bf16-' "$r3" && die "TORCH_BF16=auto without native bf16: the report has torch-bf16 rows"
  [[ $(grep -c "^Same precision: fp32 .*; bf16 ours-bf16-[12]x[12] / - not run (TORCH_BF16) " "$r3") == 3 ]] ||
    die "TORCH_BF16=auto without native bf16: the same-precision lines do not say bf16 was not run"
  echo "TORCH_BF16=auto on a CPU without native bf16: PyTorch's bf16 setups dropped, the report says why"
else
  grep -q "not run: this CPU has no native bf16" "$r3" && die "TORCH_BF16=auto with native bf16: PyTorch's bf16 setups were dropped"
  grep -q '^| torch-bf16-ddp ' "$r3" || die "TORCH_BF16=auto with native bf16: no torch-bf16-ddp row"
  echo "TORCH_BF16=auto on a CPU with native bf16: PyTorch's bf16 setups kept"
fi
echo "torch_parity_smoke: PASS (reports in $work)"
