#!/usr/bin/env bash
# Checkpoint write bandwidth against `dd` with fsync on the same disk.
# Usage: checkpoint_bandwidth.sh [--check] TRAINER DATA INPUT REPORT [NP] [ROUNDS]
# Model: INPUT with 12 blocks of width 256 (9.5 M parameters: fp32 master weights,
# Adam m and v = 114 MB of state per checkpoint), trained 8 steps at NP ranks
# (default 2) with a checkpoint after every step; the trainer logs each write as
# "checkpoint step S: PATH | X MB in T s = B MB/s (write ..., fsync ...)", where T
# runs from the file's creation to the end of every rank's fsync.
# Each round writes the same number of bytes with
#   dd if=/dev/zero of=DIR/dd.bin bs=1M count=MB conv=fsync
# into the same directory, then runs the trainer; rounds interleave the two so
# that both see the same machine. Reported: the median of each and their ratio.
# --check fails when the checkpoint median is below 50% of dd's.
# Environment: MPIEXEC (mpiexec), WORK (scratch directory; default a fresh /tmp dir).
set -euo pipefail
die() { echo "checkpoint_bandwidth: $*" >&2; exit 1; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=bench_lib.sh
source "$here/bench_lib.sh"

check=0
if [[ "${1:-}" == "--check" ]]; then check=1; shift; fi
[[ $# -ge 4 ]] || die "usage: checkpoint_bandwidth.sh [--check] TRAINER DATA INPUT REPORT [NP] [ROUNDS]"
trainer=$1; data=$2; input=$3; report=$4; np=${5:-2}; rounds=${6:-5}
[[ -f "$data" ]] || die "no data set at $data"
mpiexec=${MPIEXEC:-mpiexec}
bench_env
bench_workdir checkpoint_bandwidth
bench_private_trainer

model=(--set model.n_layer=12 --set model.d_model=256 --set model.n_head=8 --set model.seq_len=16
       --set train.steps=8 --set train.batch_size=8 --set train.micro_batch=4 --set train.eval_every=0
       --set train.log_every=1 --set checkpoint.every_steps=1 --set checkpoint.keep_last=1)
ckpt_rates=() dd_rates=() mb=""
for ((r = 1; r <= rounds; ++r)); do
  run="$work/run_$r"
  rm -rf "$run"
  "$mpiexec" -n "$np" "$trainer" "$input" --set data.path="$data" --set train.run_dir="$run" "${model[@]}" \
    > "$work/run_$r.log" 2>&1 || { cat "$work/run_$r.log"; die "trainer failed"; }
  while read -r size rate; do
    mb=$size
    ckpt_rates+=("$rate")
  done < <(sed -n 's/^checkpoint step [0-9]*: .* | \([0-9.]*\) MB in [0-9.]* s = \([0-9.]*\) MB\/s.*/\1 \2/p' "$work/run_$r.log")
  [[ -n "$mb" ]] || { cat "$work/run_$r.log"; die "no checkpoint line in the log"; }
  rm -rf "$run"
  count=$(awk -v m="$mb" 'BEGIN { printf "%d", m * 1e6 / 1048576 + 0.999 }')
  sync
  out=$(dd if=/dev/zero of="$work/dd.bin" bs=1M count="$count" conv=fsync 2>&1 | tail -1)
  rm -f "$work/dd.bin"
  secs=$(sed -n 's/.*copied, \([0-9.e-]*\) s,.*/\1/p' <<< "$out")
  [[ -n "$secs" ]] || die "cannot read dd's time from: $out"
  dd_rates+=("$(awk -v c="$count" -v s="$secs" 'BEGIN { printf "%.1f", c * 1048576 / 1e6 / s }')")
  echo "round $r: checkpoints ${ckpt_rates[*]: -8} MB/s | dd ${dd_rates[-1]} MB/s ($count MiB)"
done

ckpt_median=$(printf '%s\n' "${ckpt_rates[@]}" | median)
# The first writes of a process are slower (warm-up, also seen with plain MPI-IO):
# the medians of each run's first 3 checkpoints and of the rest, separately.
first_median=$(printf '%s\n' "${ckpt_rates[@]}" | awk 'NR % 8 >= 1 && NR % 8 <= 3' | median)
later_median=$(printf '%s\n' "${ckpt_rates[@]}" | awk 'NR % 8 == 0 || NR % 8 >= 4' | median)
dd_median=$(printf '%s\n' "${dd_rates[@]}" | median)
ratio=$(awk -v a="$ckpt_median" -v b="$dd_median" 'BEGIN { printf "%.3f", a / b }')
mkdir -p "$(dirname "$report")"
{
  echo "# Checkpoint write bandwidth ($(date -u +%Y-%m-%d), $(getconf _NPROCESSORS_ONLN) cores, $np ranks)"
  echo
  echo "Model: 12 blocks x 256 wide, fp32; $mb MB of state per checkpoint (master, exp_avg, exp_avg_sq)."
  echo "$rounds rounds, each: one trainer run writing 8 checkpoints, then dd with conv=fsync of the same size."
  echo
  echo "| | median MB/s | samples |"
  echo "|---|---|---|"
  echo "| checkpoint (create to every rank's fsync) | $ckpt_median | ${ckpt_rates[*]} |"
  echo "| checkpoints 1-3 of each run | $first_median | |"
  echo "| checkpoints 4-8 of each run | $later_median | |"
  echo "| dd bs=1M conv=fsync | $dd_median | ${dd_rates[*]} |"
  echo
  echo "Checkpoint / dd = **$ratio** (target >= 0.5)."
} > "$report"
cat "$report"
if (( check )); then
  awk -v r="$ratio" 'BEGIN { exit !(r >= 0.5) }' || die "checkpoint bandwidth is $ratio of dd's (below 0.5)"
fi
