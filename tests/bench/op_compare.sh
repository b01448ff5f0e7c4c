#!/usr/bin/env bash
# Benchmark: two trainer binaries (before and after a kernel change) side by side,
# op by op, with `trainer --profile` on the models of torch_parity_speed.sh
# (issue 23: "measure each change side by side before you keep it").
#
# Usage: tests/bench/op_compare.sh BEFORE AFTER DATA INPUT [OUT]
#   BEFORE, AFTER  trainer executables (private copies are run, so a rebuild of
#                  the build tree during the benchmark changes nothing)
#   DATA           Moby Dick HDF5 data set (share/data/fetch-mobydick.sh)
#   INPUT          inputs/quickstart.toml (the models' dimensions and batch are set
#                  here, as torch_parity_speed.sh sets them)
#   OUT            markdown report path, or - for stdout (default: -)
# Method: 2 ranks x 1 thread (OPENBLAS_NUM_THREADS=1), ZeRO stage ZERO_STAGE, one
# micro-batch per rank; ROUNDS rounds, each running both binaries, the order
# alternating (before after, after before, ...). Each run's profile.txt gives
# ms/step per op (mean over ranks; the job's first step excluded) and the step
# time; the report has, per model and op, the median over the runs of each
# binary, the change and after/before. The profile's step time is the mean
# over ranks of the timed ops plus the untimed rest.
# OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are unset in the measured commands of
# both binaries (a user would not force OpenBLAS's AVX2 kernels; this machine's
# environment sets them for tests and CI); the report says what they were.
# Environment knobs: ZERO_STAGE [3] ROUNDS [3] QS_STEPS [40] BIG_STEPS [8]
#   PRECISION [fp32] (precision.mode of both runs: fp32, bf16 or fp16)
#   MODELS ["quickstart big"] QS_DIMS ["4 4 128 64 16"] BIG_DIMS ["12 8 512 128 16"]
#   MPIEXEC [mpirun]  WORK (keep the runs there)
set -euo pipefail
die() { echo "op_compare: $*" >&2; exit 2; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=bench_lib.sh
source "$here/bench_lib.sh"
[[ $# -ge 4 && $# -le 5 ]] || die "usage: $0 BEFORE AFTER DATA INPUT [OUT]"
before=$1 after=$2 data=$3 input=$4 out=${5:--}
for f in "$before" "$after"; do [[ -x $f ]] || die "$f: not an executable"; done
[[ -f $data ]] || die "$data: no such data set"
[[ -f $input ]] || die "$input: no such input"
ZERO_STAGE=${ZERO_STAGE:-3} ROUNDS=${ROUNDS:-3} QS_STEPS=${QS_STEPS:-40} BIG_STEPS=${BIG_STEPS:-8}
MODELS=${MODELS:-quickstart big} MPIEXEC=${MPIEXEC:-mpirun} PRECISION=${PRECISION:-fp32}
[[ $PRECISION =~ ^(fp32|bf16|fp16)$ ]] || die "PRECISION must be fp32, bf16 or fp16"
openblas_env="OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE-(unset)} OPENBLAS_L2_SIZE=${OPENBLAS_L2_SIZE-(unset)}"
declare -A dims=([quickstart]="${QS_DIMS:-4 4 128 64 16}" [big]="${BIG_DIMS:-12 8 512 128 16}")
bench_env
bench_workdir op_compare
cp -p "$before" "$work/before"
cp -p "$after" "$work/after"
log() { echo "op_compare: $(date -u +%H:%M:%S) $*" >&2; }

# profile MODEL WHICH ROUND: appends "op ms" lines (and "step ms") to $work/MODEL.WHICH.ROUND
profile() {
  local model=$1 which=$2 round=$3 L H C T B steps dir
  read -r L H C T B <<< "${dims[$model]}"
  steps=$([[ $model == big ]] && echo "$BIG_STEPS" || echo "$QS_STEPS")
  dir=$work/runs/$model.$which.$round
  rm -rf "$dir"; mkdir -p "$work/runs"
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE \
  "$MPIEXEC" -n 2 "$work/$which" "$input" --profile --set data.path="$data" --set model.n_layer="$L" \
    --set model.n_head="$H" --set model.d_model="$C" --set model.seq_len="$T" --set train.batch_size="$B" \
    --set train.micro_batch=$((B / 2)) --set train.steps=100000 --set train.eval_every=0 \
    --set train.log_every=1000 --set train.run_dir="$dir" --set parallel.zero_stage="$ZERO_STAGE" \
    --set precision.mode="$PRECISION" --stop-after-step "$steps" > "$dir.log" 2>&1 || die "$model $which round $round failed: $(tail -3 "$dir.log")"
  [[ -f $dir/profile.txt ]] || die "$model $which: no $dir/profile.txt"
  awk '/^  step time / { print "step", $3; next }
       NF >= 6 && $3 ~ /^[0-9.]+$/ && $4 ~ /^[0-9.]+$/ { print $1, $4; next }
       $1 == "(untimed)" { print $1, $3 }' "$dir/profile.txt" > "$work/$model.$which.$round"
  [[ -s $work/$model.$which.$round ]] || die "$dir/profile.txt: no rows"
  log "$model $which round $round: step $(awk '$1 == "step" { print $2 }' "$work/$model.$which.$round") ms"
}

for model in $MODELS; do
  for (( r = 1; r <= ROUNDS; r++ )); do
    if (( r % 2 )); then profile "$model" before "$r"; profile "$model" after "$r"
    else profile "$model" after "$r"; profile "$model" before "$r"; fi
  done
done

report() {
  echo "Measured by \`tests/bench/op_compare.sh\` ($(date -u '+%Y-%m-%d %H:%M') UTC, $(getconf _NPROCESSORS_ONLN) cores): 2 ranks x 1 thread, ZeRO stage $ZERO_STAGE, precision $PRECISION, $ROUNDS rounds per binary, order alternating; \`trainer --profile\` ms per step (mean over ranks), median over runs. CPU: $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo). OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset in both binaries' runs (the environment had $openblas_env)."
  echo
  echo "- before: \`$before\` (sha256 $(sha256sum "$work/before" | cut -c1-12))"
  echo "- after: \`$after\` (sha256 $(sha256sum "$work/after" | cut -c1-12))"
  for model in $MODELS; do
    local L H C T B steps
    read -r L H C T B <<< "${dims[$model]}"
    steps=$([[ $model == big ]] && echo "$BIG_STEPS" || echo "$QS_STEPS")
    echo
    echo "Model \`$model\`: L$L H$H C$C T$T, batch $B; runs of $steps steps"
    echo
    echo "| op | before (ms/step) | after (ms/step) | change (ms) | after / before |"
    echo "|---|---|---|---|---|"
    local ops op b a
    ops=$(cat "$work/$model".before.* | awk '{ if (!($1 in s)) { s[$1] = 1; print $1 } }')
    for op in $ops; do
      b=$(cat "$work/$model".before.* | awk -v o="$op" '$1 == o { print $2 }' | median)
      a=$(cat "$work/$model".after.* | awk -v o="$op" '$1 == o { print $2 }' | median)
      awk -v o="$op" -v b="$b" -v a="$a" 'BEGIN {
        r = (b > 0 && a != "nan") ? sprintf("%.3f", a / b) : "-"
        printf "| %s | %.2f | %.2f | %+.2f | %s |\n", (o == "step" ? "**step time**" : o), b, a, a - b, r }'
    done
    echo
    echo "Per-run step times (ms): before $(for r in $(seq "$ROUNDS"); do awk '$1 == "step" { printf "%s ", $2 }' "$work/$model.before.$r"; done); after $(for r in $(seq "$ROUNDS"); do awk '$1 == "step" { printf "%s ", $2 }' "$work/$model.after.$r"; done)"
  done
}
if [[ $out == - ]]; then report; else report > "$out"; log "report: $out"; fi
