#!/usr/bin/env bash
# Checks tests/bench/op_compare.sh on tiny shapes (CTest bench_script_smoke_op_compare;
# runs in share/test.sh, about 15 s): the same trainer as BEFORE and AFTER, 2
# rounds; the report must have, for the model, a step-time row and a row per op
# the profile times (linear, attention, adamw, grad_norm among them), each with
# two numbers and a ratio, and the per-run step times of both binaries.
# Usage: op_compare_smoke.sh BUILD_DIR DATA WORK   (DATA: any tokens file, e.g. tiny.h5)
set -euo pipefail
build=$1 data=$2 work=$3
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
die() { echo "op_compare_smoke: FAIL: $*" >&2; exit 1; }
rm -rf "$work"; mkdir -p "$work"
MODELS=quickstart QS_DIMS="2 2 64 32 8" QS_STEPS=5 ROUNDS=2 WORK=$work/run \
  "$root/tests/bench/op_compare.sh" "$build/trainer" "$build/trainer" "$data" "$root/inputs/quickstart.toml" \
  "$work/report.md" > "$work/run.log" 2>&1 || die "op_compare.sh failed: $(tail -5 "$work/run.log")"
r=$work/report.md
grep -q '^| \*\*step time\*\* | [0-9.]* | [0-9.]* | [-+][0-9.]* | [0-9.]* |$' "$r" || die "$r: no step-time row"
for op in linear attention layernorm gelu adamw grad_norm; do
  grep -q "^| $op | [0-9.]* | [0-9.]* | [-+][0-9.]* | [0-9.-]* |$" "$r" || die "$r: no row for $op"
done
grep -q '^Per-run step times (ms): before [0-9.]* [0-9.]* ; after [0-9.]* [0-9.]* $' "$r" ||
  die "$r: per-run step times missing: $(grep Per-run "$r")"
echo "op_compare_smoke: report has the step time, the ops and both binaries' runs"
