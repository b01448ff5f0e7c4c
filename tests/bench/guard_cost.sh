#!/usr/bin/env bash
# The numeric guard's cost (issue 49; share/doc/training.md#numerical-faults):
# the quickstart GPT at 2 ranks, every guard off (the defaults) against every
# guard on without a fault (non_finite and loss_spike "skip", the spike check
# from step 21 over a window of 20, the replica check every 50 steps),
# interleaved A B, B A, ... over ROUNDS rounds (default 6) of STEPS steps
# (default 100). Reports the medians of step_ms (the step alone: the loss and
# norm checks) and of the step-to-step elapsed time (which also holds the
# replica checks at the step boundary), each side's median over rounds and
# their ratio on/off.
#   guard_cost.sh TRAINER DATA INPUT REPORT
set -uo pipefail
die() { echo "FAIL: $*" >&2; exit 1; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=bench_lib.sh
source "$here/bench_lib.sh"
(( $# == 4 )) || die "usage: guard_cost.sh TRAINER DATA INPUT REPORT"
trainer=$1 data=$2 input=$3 report=$4
rounds=${ROUNDS:-6} steps=${STEPS:-100} warmup=10
bench_env
bench_workdir guard_cost
bench_private_trainer
mpiexec=${MPIEXEC:-mpirun}
on=(--set guard.non_finite=skip --set guard.loss_spike=skip --set guard.spike_window=20
    --set guard.spike_warmup=20 --set guard.replica_every=50)
declare -A step_med elapsed_med
for ((r = 1; r <= rounds; ++r)); do
  order="off on"; (( r % 2 == 0 )) && order="on off"
  for side in $order; do
    extra=(); [[ $side == on ]] && extra=("${on[@]}")
    dir=$work/${side}_$r
    "$mpiexec" -n 2 "$trainer" "$input" --set data.path="$data" --set train.run_dir="$dir" \
      --set train.steps="$steps" --set train.log_every=1 --set train.eval_every=0 "${extra[@]}" \
      > "$dir.log" 2>&1 || { tail -20 "$dir.log"; die "$side run $r failed"; }
    grep -q '^guard: ' "$dir.log" && die "the guard acted in a run without a fault ($dir.log)"
    step_med[$side]+="$(step_ms_times "$dir/metrics.csv" "$warmup" "$steps" | median) "
    elapsed_med[$side]+="$(steady_step_times "$dir/metrics.csv" "$warmup" "$steps" | median) "
    echo "round $r $side: step_ms median $(step_ms_times "$dir/metrics.csv" "$warmup" "$steps" | median)"
  done
done
of() { tr ' ' '\n' <<< "$1" | grep . | median; }
s_off=$(of "${step_med[off]}") s_on=$(of "${step_med[on]}")
e_off=$(of "${elapsed_med[off]}") e_on=$(of "${elapsed_med[on]}")
model=$(lscpu | sed -n 's/^Model name: *//p')
{
  echo "# Numeric guard cost ($(date -u '+%Y-%m-%d %H:%M UTC'); $model; $rounds rounds of $steps steps, 2 ranks)"
  echo
  echo "| | guards off | guards on | on / off |"
  echo "|---|---|---|---|"
  awk -v a="$s_off" -v b="$s_on" 'BEGIN { printf "| step_ms median of round medians | %.2f | %.2f | %.3f |\n", a, b, b / a }'
  awk -v a="$e_off" -v b="$e_on" 'BEGIN { printf "| step-to-step elapsed (ms) | %.2f | %.2f | %.3f |\n", a * 1e3, b * 1e3, b / a }'
  echo
  echo "round medians of step_ms, off: ${step_med[off]}; on: ${step_med[on]}"
} | tee "$report"
