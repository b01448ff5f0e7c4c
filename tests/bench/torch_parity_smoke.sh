#!/usr/bin/env bash
# Checks tests/bench/torch_parity_speed.sh itself on tiny shapes, so that the
# hour-long benchmark does not fail on its own bugs (CTest
# bench_script_smoke_torch_parity; runs in share/test.sh, about 2 minutes):
#   1. every variant runs (ours 2x1 and 1x2, PyTorch 2i1b, 1i2b, 2i2b and DDP over
#      gloo), and the report has, for both models, one row per variant with a
#      step time, a CPU use per run and a peak and idle RSS sum; parallel_info of
#      each PyTorch setup; the headline against PyTorch's best; --doc and
#      --readme place the report and the headline between their markers;
#      every run's core-placement probes (tests/bench/core_latency; before, during, after) and its
#      placement; a near and a far column per variant;
#   2. --reproduce against an earlier results file: a second run compared with
#      a doctored copy of the first (one variant's step times doubled, all runs'
#      and each placement's) must report FAIL for the reproduction, with a row
#      per model and variant, and exit 1 under --check; a results file of the
#      wrong shape is refused before anything runs (exit 2).
# Usage: torch_parity_smoke.sh BUILD_DIR DATA WORK   (DATA: any tokens file, e.g. the e2e tests' tiny.h5)
set -euo pipefail
build=$1 data=$2 work=$3
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
die() { echo "torch_parity_smoke: FAIL: $*" >&2; exit 1; }
rm -rf "$work"; mkdir -p "$work"
export QS_DIMS="2 2 64 32 8" BIG_DIMS="2 2 128 32 8" QS_STEPS=6 WARMUP=2 QS_ROUNDS=2 BIG_STEPS=5 BIG_ROUNDS=1 BIG_WARMUP=1
export SGEMM_N=256 PROFILE=0 MIN_PLACED=1
printf '# doc\n<!-- torch_parity_speed: begin -->\nold\n<!-- torch_parity_speed: end -->\ntail\n' > "$work/doc.md"
printf '# readme\n<!-- torch_parity_speed headline: begin -->\nold\n<!-- torch_parity_speed headline: end -->\ntail\n' > "$work/readme.md"
args=("$build/trainer" "$build/tests/bench/sgemm_peak" "$data" "$root/inputs/quickstart.toml")

WORK=$work/run1 "$root/tests/bench/torch_parity_speed.sh" --doc "$work/doc.md" --readme "$work/readme.md" \
  --results "$work/r1.tsv" "${args[@]}" "$work/report1.md" > "$work/run1.log" 2>&1 ||
  die "run 1 failed: $(tail -5 "$work/run1.log")"
r=$work/report1.md
for model in quickstart big; do
  for v in ours-2x1 ours-1x2 torch-2i1b torch-1i2b torch-2i2b torch-ddp; do
    # | variant | step | best run | near: ms (steps) | far: ms (steps) | tokens/s | GFLOP/s | floor |
    #   CPU use per run | rss | idle |; the near and far steps add up to at most the timed steps
    #   (4 per run in both models).
    awk -F'|' -v m="$model" -v v="$v" '
      function runs(cell) { if (cell ~ /^ - $/) return 0; if (cell !~ /^ [0-9.]+ \([0-9]+\) $/) return -99
                            sub(/.*\(/, "", cell); return cell + 0 }
      /^#### Model/ { cur = ($0 ~ "`" m "`") } cur && $2 == " " v " " {
        n = split($10, c, " "); ok = n == (m == "big" ? 1 : 2)
        for (i = 1; i <= n; i++) ok = ok && c[i] > 0.3 && c[i] < 2.5
        pl = runs($5) + runs($6); ok = ok && pl >= 0 && pl <= 4 * n
        found = ok && $3 + 0 > 0 && $4 + 0 > 0 && $4 + 0 <= $3 + 0 && $11 + 0 > $12 + 0 && $12 + 0 > 0 }
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
        die "$f: not 4 timed steps inside the run's probes ($(cat "$f" | tr '\n' ' ') / probes $(cat "${f%.steps}.probes" | tr '\n' ' '))"
    done
  done
done
for v in torch-2i1b torch-1i2b torch-2i2b torch-ddp; do
  grep -q "^\[$v\]" "$r" || die "no parallel_info block for $v"
done
grep -q "at::get_num_threads() : 2" "$r" || die "parallel_info shows no 2-thread setup"
head -1 "$work/r1.tsv" | grep -q '^# torch_parity_speed results: ' || die "the results file has no header line"
# The step placement, recomputed here from the runs' files (Python, not the script's awk).
far=$(sed -n 's/^a probe above [0-9.]*x that, \([0-9.]*\) ns, is far.*/\1/p' "$r")
[[ -n $far ]] || die "the report names no far threshold"
/usr/bin/python3 - "$work/run1" "$far" "$r" <<'PY' || die "the report's steps by placement differ from a recount"
import glob, re, sys
work, far, report = sys.argv[1], float(sys.argv[2]), open(sys.argv[3]).read()
for model in ("quickstart", "big"):
    line = re.search(r"^#### Model `%s`.*?^Timed steps by placement \(near/far/mixed\): ([^\n]*)$" % model, report, re.M | re.S).group(1)
    got = dict(re.findall(r"(\S+) (\d+/\d+/\d+);", line + ";"))
    for v in ("ours-2x1", "ours-1x2", "torch-2i1b", "torch-1i2b", "torch-2i2b", "torch-ddp"):
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
            sys.exit(f"{model} {v}: the report says {got.get(v)}, a recount {want}")
PY
grep -q '^[0-9]* near, [0-9]* far, [0-9]* mixed (placement changed during the run); [0-9]* probes, highest [0-9.]* ns\.$' "$r" ||
  die "no core placement summary in $r"
[[ $(grep -o '[0-9.]* (\(near\|far\|mixed\) [0-9.]*-[0-9.]*, [0-9]* probes)' "$r" | wc -l) == 18 ]] ||
  die "the per-run lists do not tag all 18 runs with a placement and its probes"
[[ $(grep -c '^\*\*Headline: ours-[12]x[12] .* PyTorch.s best setup (torch-' "$r") == 2 ]] || die "no headline per model"
grep -q '^old$' "$work/doc.md" && die "--doc left the old report"
grep -q '^### Our trainer against PyTorch' "$work/doc.md" || die "--doc did not place the report"
[[ $(grep -c '^- \(quickstart\|big\) GPT .* tokens/s against torch-' "$work/readme.md") == 2 ]] || die "--readme did not place the headline"
tail -1 "$work/readme.md" | grep -qx tail || die "--readme lost the text after the markers"

# A results file of the wrong shape (the 4 columns of before the placement
# columns) is refused before anything is measured.
cut -f1-4 "$work/r1.tsv" > "$work/r4.tsv"
rc=0
WORK=$work/run_bad "$root/tests/bench/torch_parity_speed.sh" --reproduce "$work/r4.tsv" "${args[@]}" - \
  > "$work/run_bad.log" 2>&1 || rc=$?
[[ $rc == 2 ]] && grep -q "r4.tsv: not a --results file" "$work/run_bad.log" && [[ ! -d $work/run_bad/runs ]] ||
  die "a 4-column --reproduce file was not refused before measuring (exit $rc): $(tail -2 "$work/run_bad.log")"

# The previous shape (8 columns counting runs, no header line) and a bad
# MIN_PLACED are refused the same way.
tail -n +2 "$work/r1.tsv" > "$work/r8.tsv"
rc=0
WORK=$work/run_bad8 "$root/tests/bench/torch_parity_speed.sh" --reproduce "$work/r8.tsv" "${args[@]}" - \
  > "$work/run_bad8.log" 2>&1 || rc=$?
[[ $rc == 2 ]] && grep -q "r8.tsv: not a --results file" "$work/run_bad8.log" && [[ ! -d $work/run_bad8/runs ]] ||
  die "a --reproduce file without the header line was not refused before measuring (exit $rc): $(tail -2 "$work/run_bad8.log")"
rc=0
MIN_PLACED=0 WORK=$work/run_bad_mp "$root/tests/bench/torch_parity_speed.sh" "${args[@]}" - > "$work/run_bad_mp.log" 2>&1 || rc=$?
[[ $rc == 2 ]] && grep -q "MIN_PLACED must be a whole number" "$work/run_bad_mp.log" && [[ ! -d $work/run_bad_mp/runs ]] ||
  die "MIN_PLACED=0 was not refused before measuring (exit $rc): $(tail -2 "$work/run_bad_mp.log")"

# A doctored earlier run: the first ours-2x1 step times (quickstart) made 100x
# (all runs, best run, and each placement's median where it has runs; 100x so
# that tiny runs' noise on a loaded machine cannot hide it).
awk -F'\t' 'BEGIN { OFS = "\t" } !d && $2 == "ours-2x1" { $3 *= 100; $4 *= 100; if ($6 > 0) $5 *= 100; if ($8 > 0) $7 *= 100; d = 1 } { print }' \
  "$work/r1.tsv" > "$work/r0.tsv"
rc=0
WORK=$work/run2 "$root/tests/bench/torch_parity_speed.sh" --check --reproduce "$work/r0.tsv" "${args[@]}" \
  "$work/report2.md" > "$work/run2.log" 2>&1 || rc=$?
[[ $rc == 1 ]] || die "--check with a doctored --reproduce file exited $rc, expected 1: $(tail -3 "$work/run2.log")"
grep -q "^- FAIL (below the goal): every variant's step time within 10% of the earlier run's, within the same core placement" "$work/report2.md" ||
  die "the doctored reproduction did not FAIL in the report"
# ... and for the doctored variant: each placement both runs have shows it
# (about -99%), or the variant is named as having no placement in common.
awk -F'|' '$2 == " quickstart " && $3 == " ours-2x1 " {
    row = 1; for (i = 12; i <= 15; i += 3) if ($i !~ /^ - $/) { seen = 1; if ($i + 0 > -50) bad = 1 } }
  /^- FAIL .*no placement in common for:.* quickstart\/ours-2x1( |$)/ { none = 1 }
  END { exit !(row && !bad && (seen || none)) }' "$work/report2.md" ||
  die "the doctored variant's per-placement deviation is not in the reproduction table: $(grep '| quickstart | ours-2x1 |' "$work/report2.md")"
cell='[0-9.-]* ([0-9]*) | [0-9.-]* ([0-9]*) | \([-+][0-9.]*%\|-\)'
[[ $(grep -c "^| \\(quickstart\\|big\\) | \\(ours\\|torch\\)-[a-z0-9-]* | [0-9.]* | [0-9.]* | [-+][0-9.]*% | [0-9.]* | [0-9.]* | [-+][0-9.]*% | $cell | $cell |\$" "$work/report2.md") == 12 ]] ||
  die "the reproduction table lacks a row per model and variant"
echo "torch_parity_smoke: PASS (reports in $work)"
