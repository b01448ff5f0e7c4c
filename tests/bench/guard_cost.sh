#!/usr/bin/env bash
# The numeric guard's cost (issue 49; share/doc/training.md#numerical-faults):
# the quickstart GPT at 2 ranks, every guard off (the defaults) against every
# guard on without a fault (non_finite and loss_spike "skip", the spike check
# from step 21 over a window of 20, the replica check every 50 steps),
# interleaved A B, B A, ... over ROUNDS rounds (default 6) of STEPS steps
# (default 100; of a run of 100,000 steps stopped there by --stop-after-step, so
# that no final evaluation pass is timed). Reports the medians of step_ms (the step alone: the loss and
# norm checks) and of the step-to-step elapsed time (which also holds the
# replica checks at the step boundary), each side's median over rounds and
# their ratio on/off, and the mean step-to-step time (which holds the replica
# check's share however rarely it runs: the median does not).
#   guard_cost.sh TRAINER DATA INPUT REPORT
# Environment: ROUNDS, STEPS, WARMUP (default 10), REPLICA_EVERY (default 50),
# SPIKE_WINDOW (default 20: the window and the steps before the check starts),
# NP (default 2), SET="--set k=v ..." (extra overrides for both sides: the
# 12-layer GPT of torch_parity_speed.sh is
#   SET="--set model.n_layer=12 --set model.n_head=8 --set model.d_model=512
#        --set model.seq_len=128 --set train.batch_size=16 --set train.micro_batch=8
#        --set parallel.zero_stage=2 --set parallel.threads=1"
# with STEPS=30 WARMUP=5 REPLICA_EVERY=10 SPIKE_WINDOW=5).
set -uo pipefail
die() { echo "FAIL: $*" >&2; exit 1; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=bench_lib.sh
source "$here/bench_lib.sh"
(( $# == 4 )) || die "usage: guard_cost.sh TRAINER DATA INPUT REPORT"
trainer=$1 data=$2 input=$3 report=$4
rounds=${ROUNDS:-6} steps=${STEPS:-100} warmup=${WARMUP:-10}
replica_every=${REPLICA_EVERY:-50} np=${NP:-2} spike_window=${SPIKE_WINDOW:-20}
read -r -a extra_set <<< "${SET:-}"
bench_env
bench_workdir guard_cost
bench_private_trainer
mpiexec=${MPIEXEC:-mpirun}
on=(--set guard.non_finite=skip --set guard.loss_spike=skip --set guard.spike_window="$spike_window"
    --set guard.spike_warmup="$spike_window" --set guard.replica_every="$replica_every")
declare -A step_med elapsed_med elapsed_mean
for ((r = 1; r <= rounds; ++r)); do
  order="off on"; (( r % 2 == 0 )) && order="on off"
  for side in $order; do
    extra=(); [[ $side == on ]] && extra=("${on[@]}")
    dir=$work/${side}_$r
    "$mpiexec" -n "$np" "$trainer" "$input" --set data.path="$data" --set train.run_dir="$dir" "${extra_set[@]}" \
      --set train.steps=100000 --stop-after-step "$steps" --set train.log_every=1 --set train.eval_every=0 --set checkpoint.every_steps=0 "${extra[@]}" \
      > "$dir.log" 2>&1 || { tail -20 "$dir.log"; die "$side run $r failed"; }
    grep -q '^guard: ' "$dir.log" && die "the guard acted in a run without a fault ($dir.log)"
    step_med[$side]+="$(step_ms_times "$dir/metrics.csv" "$warmup" "$steps" | median) "
    elapsed_med[$side]+="$(steady_step_times "$dir/metrics.csv" "$warmup" "$steps" | median) "
    elapsed_mean[$side]+="$(steady_step_times "$dir/metrics.csv" "$warmup" "$steps" | awk '{ s += $1 } END { print s / NR }') "
    echo "round $r $side: step_ms median $(step_ms_times "$dir/metrics.csv" "$warmup" "$steps" | median)"
  done
done
of() { tr ' ' '\n' <<< "$1" | grep . | median; }
# The step boundary's own time (elapsed_s step to step, less step_ms: the CRCs,
# logging and agreements after a step), at the steps where the guard's replica
# check runs (done % REPLICA_EVERY == 0) and at the others, over the steady steps
# of every run of a side: the replica check's cost, measured inside each run, so
# the machine's drift between runs cancels.
boundary() {  # SIDE CHECK(1|0): mean ms over the side's runs
  cat "$work/$1"_*/metrics.csv | awk -F, -v w="$warmup" -v last="$steps" -v every="$replica_every" -v want="$2" '
    $1 == "step" { for (i = 1; i <= NF; i++) { if ($i == "elapsed_s") e = i; if ($i == "step_ms") m = i }; prev = ""; next }
    { if (prev != "" && $1 > w && $1 < last && (($1 % every == 0) == want)) { s += 1e3 * ($e - prev) - $m; n++ }
      prev = $e }
    END { printf "%.2f", n ? s / n : 0 }'
}
b_on_check=$(boundary on 1) b_on_other=$(boundary on 0) b_off_check=$(boundary off 1) b_off_other=$(boundary off 0)
s_off=$(of "${step_med[off]}") s_on=$(of "${step_med[on]}")
e_off=$(of "${elapsed_med[off]}") e_on=$(of "${elapsed_med[on]}")
m_off=$(of "${elapsed_mean[off]}") m_on=$(of "${elapsed_mean[on]}")
pair_ratios() {  # round r's on/off ratio of the lists $1 (off) and $2 (on)
  paste <(tr ' ' '\n' <<< "$1" | grep .) <(tr ' ' '\n' <<< "$2" | grep .) | awk '{ printf "%.3f ", $2 / $1 }'
}
model=$(lscpu | sed -n 's/^Model name: *//p')
{
  echo "# Numeric guard cost ($(date -u '+%Y-%m-%d %H:%M UTC'); $model; $rounds rounds of $steps steps, $np ranks; replica_every $replica_every; ${SET:-no extra overrides})"
  echo
  echo "| | guards off | guards on | on / off |"
  echo "|---|---|---|---|"
  awk -v a="$s_off" -v b="$s_on" 'BEGIN { printf "| step_ms median of round medians | %.2f | %.2f | %.3f |\n", a, b, b / a }'
  awk -v a="$e_off" -v b="$e_on" 'BEGIN { printf "| step-to-step elapsed (ms), median | %.2f | %.2f | %.3f |\n", a * 1e3, b * 1e3, b / a }'
  awk -v a="$m_off" -v b="$m_on" 'BEGIN { printf "| step-to-step elapsed (ms), mean (replica checks included) | %.2f | %.2f | %.3f |\n", a * 1e3, b * 1e3, b / a }'
  echo
  echo "round medians of step_ms, off: ${step_med[off]}; on: ${step_med[on]}"
  echo "step boundary (elapsed less step_ms), mean ms: guards on: $b_on_check at the replica-check steps, $b_on_other at the others; guards off: $b_off_check and $b_off_other at the same steps"
  awk -v c="$b_on_check" -v o="$b_on_other" -v k="$replica_every" -v st="$s_off" 'BEGIN { printf "replica check: %.2f ms a check, %.4f%% of a step at replica_every %d\n", c - o, 100 * (c - o) / k / st, k }'
  echo "paired round ratios on/off, step_ms: $(pair_ratios "${step_med[off]}" "${step_med[on]}"); mean step-to-step: $(pair_ratios "${elapsed_mean[off]}" "${elapsed_mean[on]}")"
} | tee "$report"
