#!/usr/bin/env bash
# Checkpoint read bandwidth (issue 47): today's reader (every rank preads its
# slice at offsets rank 0 validated) against the collective MPI-IO read through
# HDF5 it replaced, and both against `dd` reading the same file.
# Usage: checkpoint_read_bandwidth.sh [--check] TRAINER COMPARE CKPT_TOOL DATA INPUT REPORT [NP] [ROUNDS]
#   COMPARE: tests/bench/checkpoint_read_compare (the two read methods, I/O only).
# The file: INPUT with 12 blocks of width 512 (38 M parameters: fp32 master
# weights, Adam m and v = 456 MB of state), trained 1 step at NP ranks (default
# 2) with a checkpoint. Each round, for each of
#   dd      dd if=FILE of=/dev/null bs=1M (the whole file, one process)
#   mpiio   checkpoint_read_compare FILE mpiio under mpiexec -n NP
#   pread   checkpoint_read_compare FILE pread under mpiexec -n NP
#   verify  trainer-ckpt verify FILE under mpiexec -n NP (the real reader:
#           validation, preads and every CRC; its own "checked in T s")
# it is timed twice: cold (FILE's pages dropped first with
# `dd iflag=nocache count=0`, which evicts one file's clean pages without
# root; the system-wide drop_caches needs root and is not used) and warm (FILE
# read once first: the page cache serves it). Each method reports its own
# time (no launcher start-up). Reported: the medians, in MB/s of state bytes
# (dd: of the file's bytes, a few KiB more).
# --check fails when pread's cold median is below 50% of dd's, or below mpiio's.
# Environment: MPIEXEC (mpiexec), WORK (scratch directory; default a fresh /tmp dir).
set -euo pipefail
die() { echo "checkpoint_read_bandwidth: $*" >&2; exit 1; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=bench_lib.sh
source "$here/bench_lib.sh"

check=0
if [[ "${1:-}" == "--check" ]]; then check=1; shift; fi
[[ $# -ge 6 ]] || die "usage: checkpoint_read_bandwidth.sh [--check] TRAINER COMPARE CKPT_TOOL DATA INPUT REPORT [NP] [ROUNDS]"
trainer=$1; compare=$2; ckpt_tool=$3; data=$4; input=$5; report=$6; np=${7:-2}; rounds=${8:-5}
[[ -f "$data" ]] || die "no data set at $data"
[[ -x "$compare" ]] || die "no checkpoint_read_compare at $compare"
mpiexec=${MPIEXEC:-mpiexec}
bench_env
bench_workdir checkpoint_read_bandwidth
bench_private_trainer

run="$work/run"
rm -rf "$run"
"$mpiexec" -n "$np" "$trainer" "$input" --set data.path="$data" --set train.run_dir="$run" \
  --set model.n_layer=12 --set model.d_model=512 --set model.n_head=8 --set model.seq_len=16 \
  --set train.steps=1 --set train.batch_size=8 --set train.micro_batch=4 --set train.eval_every=0 \
  --set checkpoint.every_steps=1 > "$work/train.log" 2>&1 || { cat "$work/train.log"; die "trainer failed"; }
file="$run/checkpoints/step_00000001.h5"
[[ -f "$file" ]] || die "no checkpoint at $file"
file_bytes=$(stat -c %s "$file")

drop() { dd if="$file" iflag=nocache count=0 status=none; }
warm() { cat "$file" > /dev/null; }
# One measurement: prints MB/s.
measure() {  # METHOD
  local out
  case $1 in
    dd) out=$(dd if="$file" of=/dev/null bs=1M 2>&1 | tail -1)
        awk -v b="$file_bytes" -v s="$(sed -n 's/.*copied, \([0-9.e-]*\) s,.*/\1/p' <<< "$out")" \
          'BEGIN { printf "%.1f", b / 1e6 / s }' ;;
    mpiio|pread) out=$("$mpiexec" -n "$np" "$compare" "$file" "$1") || die "$1 failed: $out"
                 awk '{ print $4 }' <<< "$out" ;;
    verify) out=$("$mpiexec" -n "$np" "$ckpt_tool" verify "$file") || die "verify failed: $out"
            awk -v b="$state_bytes" -v s="$(sed -n 's/.* checked in \([0-9.]*\) s on .*/\1/p' <<< "$out")" \
              'BEGIN { printf "%.1f", b / 1e6 / s }' ;;
  esac
}
state_bytes=$("$mpiexec" -n "$np" "$compare" "$file" pread | awk '{ print $2 }')

declare -A rates
methods=(dd mpiio pread verify)
for ((r = 1; r <= rounds; ++r)); do
  line="round $r:"
  for m in "${methods[@]}"; do
    drop
    cold=$(measure "$m")
    warm
    hot=$(measure "$m")
    rates[$m.cold]+="$cold "
    rates[$m.warm]+="$hot "
    line+=" $m $cold/$hot"
  done
  echo "$line MB/s (cold/warm)"
done

med() { tr ' ' '\n' <<< "${rates[$1]}" | sed '/^$/d' | median; }
{
  echo "# Checkpoint read bandwidth"
  echo
  echo "$(date -u +%Y-%m-%d), $(lscpu | sed -n 's/^Model name: *//p'), $np ranks, $rounds rounds;"
  echo "file: $(awk -v b="$file_bytes" 'BEGIN { printf "%.0f", b / 1e6 }') MB (state $(awk -v b="$state_bytes" 'BEGIN { printf "%.0f", b / 1e6 }') MB)."
  echo "cold: the file's pages dropped (dd iflag=nocache count=0) before each read; warm: read once first."
  echo
  echo "| method | cold MB/s (median) | warm MB/s (median) |"
  echo "|---|---|---|"
  for m in "${methods[@]}"; do echo "| $m | $(med "$m.cold") | $(med "$m.warm") |"; done
} | tee "$report"

if (( check )); then
  awk -v p="$(med pread.cold)" -v d="$(med dd.cold)" -v m="$(med mpiio.cold)" \
    'BEGIN { exit !(p >= 0.5 * d && p >= m * 0.9) }' ||
    die "pread's cold median $(med pread.cold) MB/s is below 50% of dd's $(med dd.cold) or below mpiio's $(med mpiio.cold)"
fi
