#!/usr/bin/env bash
# ZeRO scale: how large a GPT each stage can train at NP ranks in the same
# per-rank memory budget. Acceptance being measured: "at 4 ranks, stage 3 trains
# a model at least 3x larger than stage 0 can in the same per-rank memory
# budget; shown with --plan and with a real run under a memory_limit_mb the
# trainer enforces (it refuses to start when the plan exceeds the limit)".
#
# Usage: tests/bench/zero_scale.sh [--run] TRAINER DATA INPUT [OUT]
#   TRAINER  trainer executable
#   DATA     an HDF5 token data set (Moby Dick in the bench; any in the plan-only test)
#   INPUT    base input file (the model shape below overrides it)
#   OUT      markdown report path, or - for stdout (default: -)
#   --run    also train: for stage 0 and stage 3, the largest model that fits trains
#            STEPS steps under train.memory_limit_mb = BUDGET_MB (its tracked peak per
#            rank and every rank's VmHWM, from process_memory.csv, must stay within the
#            budget), and one more layer is refused with exit code 2 and the
#            memory_limit_mb message, before anything large is allocated.
# Without --run only `trainer --plan` is used (seconds a plan; no model is allocated,
# only the collective probe's gradient-sized buffer).
# Exit 1 when the stage-3 / stage-0 parameter ratio is below MIN_RATIO, a run fails, or
# a run's VmHWM exceeds BUDGET_MB or differs from its predicted process peak by more than
# PROCESS_TOL [0.10].
#
# Method: the model is widened to MODEL (d_model 512, 8 heads, 64 tokens, one
# sequence per micro-batch: parameters dominate, as in the models ZeRO is for);
# for each stage a binary search over n_layer finds the deepest model whose plan
# (`MPIEXEC -n NP trainer --plan --set train.memory_limit_mb=BUDGET_MB`) is accepted.
# The plan runs at the real rank count, so its predicted process peak (RSS before
# the model + tracked plan + the probed MPI collective scratch) is the one the
# real run checks against the limit; `trainer --plan --ranks NP` in one process
# could neither measure an NP-rank job's fixed term nor probe its collectives.
#
# Environment knobs: STAGES ["0 1 2 3"] the stages searched, in increasing order, 0 and 3 among them
#   (the suite's plan-only test searches "0 3"), NP [4]  BUDGET_MB [640]  MIN_RATIO [3]  STEPS [3]  MPIEXEC [mpirun]  PROCESS_TOL [0.10]
#   MODEL ["model.d_model=512 model.n_head=8 model.seq_len=64 train.micro_batch=1 train.batch_size=4"]
#   WORK [mktemp -d] scratch directory (kept when set)
set -euo pipefail

run=0
if [[ "${1:-}" == "--run" ]]; then run=1; shift; fi
[[ $# -ge 3 ]] || { sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 2; }
trainer=$1; data=$2; input=$3; out=${4:--}
NP=${NP:-4}
BUDGET_MB=${BUDGET_MB:-640}
MIN_RATIO=${MIN_RATIO:-3}
STEPS=${STEPS:-3}
MPIEXEC=${MPIEXEC:-mpirun}
STAGES=${STAGES:-0 1 2 3}
read -r -a stage_list <<< "$STAGES"
[[ ${stage_list[0]:-} == 0 && ${stage_list[-1]:-} == 3 ]] || { echo "STAGES must start with 0 and end with 3 (got: $STAGES)" >&2; exit 2; }
MODEL=${MODEL:-model.d_model=512 model.n_head=8 model.seq_len=64 train.micro_batch=1 train.batch_size=4}
if [[ -n "${WORK:-}" ]]; then mkdir -p "$WORK"; else WORK=$(mktemp -d); trap 'rm -rf "$WORK"' EXIT; fi

sets=(--set "data.path=$data" --set "train.memory_limit_mb=$BUDGET_MB")
for kv in $MODEL; do sets+=(--set "$kv"); done

# plan STAGE LAYERS: prints "<parameters> <tracked total MiB> <predicted process peak MiB>";
# exit status 0 when the predicted process peak fits the budget, 2 when refused.
# Each (STAGE, LAYERS) is planned once: a repeat reads the saved log and exit status.
plan() {
  local log="$WORK/plan_s$1_L$2.log" rc=0
  if [[ -f "$log.rc" ]]; then
    rc=$(< "$log.rc")
  else
    "$MPIEXEC" -n "$NP" "$trainer" --plan "$input" "${sets[@]}" --set "parallel.zero_stage=$1" \
      --set "model.n_layer=$2" > "$log" 2>&1 || rc=$?
    echo "$rc" > "$log.rc"
  fi
  awk '/^memory plan per rank/ { for (i = 1; i <= NF; ++i) if ($i == "parameters") p = $(i - 1) }
       /^  total/ { t = $2 } /^predicted process peak per rank:/ { q = $6 } END { print p, t, q }' "$log"
  if [[ $rc -ne 0 && $rc -ne 2 ]] || ! grep -q '^predicted process peak per rank: ' "$log"; then
    echo "trainer --plan failed (exit $rc) or printed no predicted process peak:" >&2; cat "$log" >&2; exit 1
  fi
  if [[ $rc -eq 2 ]] && ! grep -q 'memory_limit_mb.*predicted process peak' "$log"; then
    echo "trainer --plan exited 2 without the memory_limit_mb refusal:" >&2; cat "$log" >&2; exit 1
  fi
  return $rc
}

# deepest STAGE FITS: largest n_layer whose plan fits (0 if none does), given that
# FITS layers fit (a higher stage keeps less per rank than a lower one, so the lower
# stage's answer is where its search starts; 0 for the first stage searched).
deepest() {
  local lo=$2 hi=$(($2 > 0 ? 2 * $2 : 1))
  if [[ $lo -gt 0 ]] && ! plan "$1" "$lo" > /dev/null; then
    echo "stage $1 does not fit the $lo layers a lower stage fits: the plan is not monotone in the stage" >&2; exit 1
  fi
  while plan "$1" "$hi" > /dev/null; do lo=$hi; hi=$((hi * 2)); [[ $hi -le 4096 ]] || break; done
  while [[ $((hi - lo)) -gt 1 ]]; do
    local mid=$(((lo + hi) / 2))
    if plan "$1" "$mid" > /dev/null; then lo=$mid; else hi=$mid; fi
  done
  echo "$lo"
}

report=$WORK/report.md
{
  echo "### ZeRO scale: largest GPT per stage at $NP ranks in $BUDGET_MB MiB per rank"
  echo
  echo "Model: \`$MODEL\`, n_layer searched with \`$MPIEXEC -n $NP trainer --plan\`; the limit"
  echo "applies to the predicted process peak per rank (RSS before the model + tracked plan +"
  echo "MPI collective scratch; a refused plan is not probed for scratch)."
  echo
  echo "| stage | max n_layer | parameters | tracked plan per rank (MiB) | predicted process peak per rank (MiB) | one more layer: predicted (MiB) |"
  echo "|---|---|---|---|---|---|"
} > "$report"
declare -A layers params predicted
fits=0
for stage in "${stage_list[@]}"; do
  L=$(deepest "$stage" "$fits")
  fits=$L
  [[ $L -gt 0 ]] || { echo "stage $stage: not even one layer fits $BUDGET_MB MiB" >&2; exit 1; }
  read -r p t q < <(plan "$stage" "$L")
  read -r _ _ q1 < <(plan "$stage" $((L + 1)) || true)
  layers[$stage]=$L; params[$stage]=$p; predicted[$stage]=$q
  echo "| $stage | $L | $p | $t | $q | $q1 |" >> "$report"
  echo "stage $stage: n_layer $L, $p parameters, tracked plan $t MiB, predicted process peak $q MiB per rank (n_layer $((L + 1)): $q1 MiB)"
done
ratio=$(awk -v a="${params[3]}" -v b="${params[0]}" 'BEGIN { printf "%.2f", a / b }')
{ echo; echo "Stage 3 / stage 0 parameters: **${ratio}x** (required: >= ${MIN_RATIO}x)."; } >> "$report"
echo "stage 3 / stage 0 parameters: ${ratio}x"
bad=0
awk -v r="$ratio" -v m="$MIN_RATIO" 'BEGIN { exit !(r >= m) }' || { echo "ratio below $MIN_RATIO" >&2; bad=1; }

if [[ $run -eq 1 ]]; then
  {
    echo
    echo "Real runs, \`$MPIEXEC -n $NP trainer\` with \`train.memory_limit_mb = $BUDGET_MB\`, $STEPS steps:"
    echo
    echo "| stage | n_layer | parameters | result | tracked peak per rank, max over ranks (MiB) | predicted process peak (MiB) | VmHWM, max over ranks (MiB) | VmHWM / predicted, per rank | final loss | wall (s) |"
    echo "|---|---|---|---|---|---|---|---|---|---|"
  } >> "$report"
  for stage in 0 3; do
    L=${layers[$stage]}
    dir=$WORK/run_s${stage}
    start=$(date +%s)
    rc=0
    "$MPIEXEC" -n "$NP" "$trainer" "$input" "${sets[@]}" --set "parallel.zero_stage=$stage" \
      --set "model.n_layer=$L" --set "train.steps=$STEPS" --set train.eval_every=0 \
      --set train.log_every=1 --set optim.warmup_steps=1 --set "train.run_dir=$dir" \
      > "$dir.log" 2>&1 || rc=$?
    wall=$(( $(date +%s) - start ))
    cat "$dir.log"
    if [[ $rc -ne 0 ]]; then echo "stage $stage at n_layer $L failed (exit $rc)" >&2; bad=1; continue; fi
    peak=$(awk -F, '$1 ~ /^[0-9]+$/ && $NF > m { m = $NF } END { printf "%.1f", m / 1048576 }' "$dir/memory.csv")
    loss=$(awk -F, 'NR > 1 { l = $2 } END { printf "%.4f", l }' "$dir/metrics.csv")
    awk -v p="$peak" -v b="$BUDGET_MB" 'BEGIN { exit !(p <= b) }' || { echo "stage $stage peak $peak MiB over budget" >&2; bad=1; }
    # The process: every rank's VmHWM (process_memory.csv: rank, rss_before_model,
    # collective_scratch, tracked_plan, predicted_process_peak, vmhwm; bytes) under the
    # limit, and within PROCESS_TOL (default 10%) of its rank's predicted process peak.
    [[ -s "$dir/process_memory.csv" ]] || { echo "stage $stage: no $dir/process_memory.csv" >&2; bad=1; continue; }
    read -r hwm pred ratios < <(awk -F, 'NR > 1 { if ($6 > h) h = $6; if ($5 > q) q = $5
        r = r (r == "" ? "" : " ") sprintf("%.3f", $5 > 0 ? $6 / $5 : 0) }
        END { printf "%.1f %.1f %s\n", h / 1048576, q / 1048576, r }' "$dir/process_memory.csv")
    awk -v p="$hwm" -v b="$BUDGET_MB" 'BEGIN { exit !(p > 0 && p <= b) }' ||
      { echo "stage $stage VmHWM $hwm MiB over the limit $BUDGET_MB MiB" >&2; bad=1; }
    for q in $ratios; do
      awk -v q="$q" -v t="${PROCESS_TOL:-0.10}" 'BEGIN { exit !(q >= 1 - t && q <= 1 + t) }' ||
        { echo "stage $stage: VmHWM / predicted process peak $q outside 1 +- ${PROCESS_TOL:-0.10}" >&2; bad=1; }
    done
    echo "stage $stage: VmHWM, max over ranks, $hwm MiB (limit $BUDGET_MB MiB; predicted $pred MiB; VmHWM / predicted per rank: $ratios)"
    echo "| $stage | $L | ${params[$stage]} | trained | $peak | $pred | $hwm | $ratios | $loss | $wall |" >> "$report"

    # One more layer: refused before allocation, exit 2, naming the limit.
    rc=0
    "$MPIEXEC" -n "$NP" "$trainer" "$input" "${sets[@]}" --set "parallel.zero_stage=$stage" \
      --set "model.n_layer=$((L + 1))" --set "train.run_dir=$dir.over" > "$dir.over.log" 2>&1 || rc=$?
    cat "$dir.over.log"
    if [[ $rc -ne 2 ]] || ! grep -q 'memory_limit_mb' "$dir.over.log"; then
      echo "stage $stage at n_layer $((L + 1)): expected a refusal (exit 2), got exit $rc" >&2; bad=1
    fi
    echo "| $stage | $((L + 1)) | | refused (exit $rc) | | | | | | |" >> "$report"
  done
  # The stage-3 model under stage 0: refused too.
  rc=0
  "$MPIEXEC" -n "$NP" "$trainer" "$input" "${sets[@]}" --set parallel.zero_stage=0 \
    --set "model.n_layer=${layers[3]}" --set "train.run_dir=$WORK/run_s0_big" > "$WORK/s0_big.log" 2>&1 || rc=$?
  msg=$(grep -m1 '^error' "$WORK/s0_big.log" || true)
  echo "stage 0 with the stage-3 model: exit $rc: $msg"
  [[ $rc -eq 2 ]] || { echo "expected exit 2" >&2; bad=1; }
  { echo; echo "The stage-3 model (n_layer ${layers[3]}) under stage 0: exit $rc,"; echo; echo "    $msg"; } >> "$report"
fi

if [[ "$out" == "-" ]]; then cat "$report"; else cp "$report" "$out"; echo "report: $out"; fi
exit $bad
