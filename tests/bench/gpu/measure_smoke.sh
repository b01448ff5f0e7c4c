#!/usr/bin/env bash
# CTest gpu_measure_script_smoke: measure.sh --cpu-smoke must finish, and its
# table must hold one row per run (ours and PyTorch eager, both models) with a
# positive ms/step, and ours a tracked memory peak, and the hf part (host
# quickstart checkpoint, GPT-2 export, share/gpu/hf_check.py's stand-in; the
# DistilBERT and BERT exports through share/gpu/hf_bert_check.py's stand-in) must
# pass, and --profile must append one profile table per model, so that a broken parser (or awk code only gawk understands) fails here
# rather than on a GPU.
# Arguments: BUILD_DIR OUT_DIR.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
rm -rf "$2"
"$here/measure.sh" "$1" "$2" --cpu-smoke --profile > "$2.log" 2>&1 || { cat "$2.log"; echo "FAIL: measure.sh --cpu-smoke failed"; exit 1; }
report=$2/measure.md
for run in ours_big_fp32 torch_eager_big_fp32 ours_qs_fp32 torch_eager_qs_fp32; do
  row=$(grep "^| $run |" "$report") || { cat "$report"; echo "FAIL: no row for $run"; exit 1; }
  ms=$(echo "$row" | awk -F'|' '{ gsub(/ /, "", $5); print $5 }')
  awk -v ms="$ms" 'BEGIN { exit !(ms + 0 > 0) }' || { echo "$row"; echo "FAIL: $run: ms/step '$ms' is not positive"; exit 1; }
  if [[ $run == ours_* ]]; then
    # The step alone beside ms/step: positive and not above it.
    line=$(grep -- "^- $run: the step alone (metrics.csv step_ms) " "$report") ||
      { cat "$report"; echo "FAIL: no step-alone line for $run"; exit 1; }
    alone=$(sed 's/.*step_ms) \([0-9.e+-]*\) ms of .*/\1/' <<< "$line")
    awk -v a="$alone" -v ms="$ms" 'BEGIN { exit !(a + 0 > 0 && a + 0 <= ms + 0) }' ||
      { echo "$line"; echo "FAIL: $run: the step alone '$alone' is not in (0, $ms]"; exit 1; }
    tracked=$(echo "$row" | awk -F'|' '{ gsub(/ /, "", $10); print $10 }')
    awk -v t="$tracked" 'BEGIN { exit !(t + 0 > 0) }' || { echo "$row"; echo "FAIL: $run: no tracked peak"; exit 1; }
  fi
done
# --profile: one more run of ours per model with the trainer's profile table in the report.
n=$(grep -c '^profile of [0-9]* training steps' "$report" || true)
[[ $n == 2 ]] || { cat "$report"; echo "FAIL: $n profile tables in the report (--profile, 2 models: expected 2)"; exit 1; }
grep -q '^  linear ' "$report" || { cat "$report"; echo "FAIL: the profile tables have no linear row"; exit 1; }
# The repeatability check (timed run against its --profile run, bitwise) ran for both models.
n=$(grep -c 'two runs (timed, --profile) bitwise equal in loss and gradient norm over 8 steps: PASS' "$report" || true)
[[ $n == 2 ]] || { cat "$report"; echo "FAIL: $n repeatability lines (expected 2, one per model)"; exit 1; }
grep -q 'hf_check: PASS: client stand-in' "$report" || { cat "$report"; echo "FAIL: no passing hf_check line (the hf part)"; exit 1; }
for line in 'hf_bert_check: PASS: distilbert loss: stand-in' 'hf_bert_check: PASS: bert loss: stand-in' 'hf_bert_check: PASS: client stand-in'; do
  grep -q "$line" "$report" || { cat "$report"; echo "FAIL: no '$line' line (the hf part's BERT family)"; exit 1; }
done
[[ -s $2/measure-logs.tar.xz ]] || { echo "FAIL: no log archive"; exit 1; }
echo "ok: measure.sh --cpu-smoke --profile wrote a row for each of the 4 runs, 2 profile tables, and the hf part (GPT-2, DistilBERT, BERT) passed"
