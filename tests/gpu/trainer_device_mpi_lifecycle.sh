#!/usr/bin/env bash
# Checkpoints, the stop signal and a stalled rank with 2 ranks sharing ONE GPU over
# the MPI device collectives (label gpu1; built in CI, run by share/gpu/on-device.sh).
# inputs/tiny.toml, ZeRO stage 3, fp32:
#   crossing  a sharded checkpoint of step 10 written by 2 device ranks, resumed by
#             3 device ranks and by 2 host ranks; one written by 2 host ranks resumed
#             by 3 device ranks: every step's loss and gradient norm to step 20
#             within 1e-5 relative of the straight run at the resuming side;
#   signal    SIGUSR1 to one rank process of a device run: every rank checkpoints,
#             exit 75; resumed, the metrics are bitwise those of the straight run;
#   stall     one rank sleeps inside step 5's gradient reduction
#             (--stall-in-collective 5:1): the watchdog ends the job with exit != 0
#             within 60 s, rank 0's message naming the collective and the step.
# Without a device the trainer stops at bring-up (exit 1) and this script fails.
# Environment (CTest): TRAINER, TRAINER_DATA, INPUT, TEXT, WORK, MPIEXEC, NPFLAG.
set -uo pipefail
rm -rf "$WORK"
# shellcheck source=../e2e/trainer/e2e_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../e2e/trainer/e2e_lib.sh"  # die, check_resumed
data=$WORK/tiny.h5
"$TRAINER_DATA" text "$TEXT" "$data" --val-fraction 0.1 > /dev/null || die "trainer-data failed"
shared=(--set parallel.device_collectives=mpi --set parallel.share_device=true)
common=(--set parallel.zero_stage=3 --set train.log_every=1 --set checkpoint.every_steps=10)
args() {  # NP NAME DEVICE: the command line of one run (the rest appended)
  local np=$1 name=$2 device=$3
  cmd=("$MPIEXEC" "$NPFLAG" "$np" "$TRAINER" "$INPUT" --set data.path="$data" --set train.run_dir="$WORK/$name"
    --set train.device="$device" "${common[@]}")
  [[ $device == cuda ]] && cmd+=("${shared[@]}")
}
run() {  # NP NAME DEVICE extra-args: must exit 0
  local np=$1 name=$2 device=$3; shift 3
  args "$np" "$name" "$device"
  timeout 300 "${cmd[@]}" "$@" >> "$WORK/$name.log" 2>&1 || { cat "$WORK/$name.log"; die "$name failed"; }
  [[ $device != cuda ]] || grep -q '^compute: CUDA device' "$WORK/$name.log" || die "$name did not run on a CUDA device"
}
compare_rows() {  # A B TOL: every step's loss (column 2) and gradient norm (column 5), 20 rows
  local col
  for col in 2 5; do
    paste -d, <(awk -F, -v c=$col 'NR > 1 { print $c }' "$WORK/$1/metrics.csv") \
      <(awk -F, -v c=$col 'NR > 1 { print $c }' "$WORK/$2/metrics.csv") |
      awk -F, -v tol="$3" -v col=$col '{ d = $1 - $2; if (d < 0) d = -d; r = d / ($2 < 0 ? -$2 : $2); if (r > worst) worst = r }
        END { printf "column %d: max relative difference %.3g (tolerance %g), %d rows\n", col, worst, tol, NR; exit worst > tol || NR != 20 }' ||
      die "$1 and $2 differ (metrics.csv column $col)"
  done
}

# --- crossing ---------------------------------------------------------------------------
run 2 cuda_np2 cuda --set train.steps=20
run 3 cuda_np3 cuda --set train.steps=20
run 2 cpu_np2 cpu --set train.steps=20
run 2 cuda_x cuda --set train.steps=20 --stop-after-step 10
run 2 cpu_x cpu --set train.steps=20 --stop-after-step 10
cp -r "$WORK/cuda_x" "$WORK/cuda_to_cuda3"
cp -r "$WORK/cuda_x" "$WORK/cuda_to_cpu2"
cp -r "$WORK/cpu_x" "$WORK/cpu_to_cuda3"
run 3 cuda_to_cuda3 cuda --set train.steps=20
check_resumed "$WORK/cuda_to_cuda3.log" "$WORK/cuda_to_cuda3" 10 20
compare_rows cuda_to_cuda3 cuda_np3 1e-5
run 2 cuda_to_cpu2 cpu --set train.steps=20
check_resumed "$WORK/cuda_to_cpu2.log" "$WORK/cuda_to_cpu2" 10 20
compare_rows cuda_to_cpu2 cpu_np2 1e-5
run 3 cpu_to_cuda3 cuda --set train.steps=20
check_resumed "$WORK/cpu_to_cuda3.log" "$WORK/cpu_to_cuda3" 10 20
compare_rows cpu_to_cuda3 cuda_np3 1e-5
echo "ok: checkpoints crossed 2 device ranks -> 3 device ranks, 2 device -> 2 host, 2 host -> 3 device"

# --- the stop signal on the device --------------------------------------------------------
steps=400
run 2 sig_straight cuda --set train.steps=$steps --set checkpoint.every_steps=0
args 2 sig cuda
timeout 300 "${cmd[@]}" --set train.steps=$steps --set checkpoint.every_steps=0 > "$WORK/sig.log" 2>&1 &
job=$!
for _ in $(seq 1200); do
  grep -Eq '^step +5/' "$WORK/sig.log" 2>/dev/null && break
  kill -0 "$job" 2>/dev/null || break
  sleep 0.05
done
mapfile -t pids < <(pgrep -f -- "train.run_dir=$WORK/sig( |$)" | while read -r p; do
  [[ "$(cat /proc/"$p"/comm 2>/dev/null)" == trainer ]] && echo "$p"; done)
[[ ${#pids[@]} -eq 2 ]] || { wait "$job"; cat "$WORK/sig.log"; die "found ${#pids[@]} rank processes after step 5, expected 2"; }
kill -USR1 "${pids[1]}"
wait "$job"; rc=$?
[[ $rc -eq 75 ]] || { cat "$WORK/sig.log"; die "exit code $rc after SIGUSR1, expected 75"; }
stop=$(sed -n 's/^stopping after step \([0-9]*\) of .*/\1/p' "$WORK/sig.log")
[[ -n $stop && $stop -lt $steps ]] || { cat "$WORK/sig.log"; die "no 'stopping after step' line before step $steps"; }
run 2 sig cuda --set train.steps=$steps --set checkpoint.every_steps=0
check_resumed "$WORK/sig.log" "$WORK/sig" "$stop" "$steps"
cmp <(cut -d, -f1,2,5 "$WORK/sig_straight/metrics.csv") <(cut -d, -f1,2,5 "$WORK/sig/metrics.csv") ||
  die "the resumed device run's metrics differ from the straight run's"
echo "ok: SIGUSR1 stopped the device run after step $stop (exit 75); resumed, bitwise the straight run ($steps steps)"

# --- a rank stalled inside a device collective ----------------------------------------------
args 2 stall cuda
t0=$SECONDS
timeout 120 "${cmd[@]}" --set train.steps=20 --set parallel.collective_timeout_s=3 --stall-in-collective 5:1 \
  > "$WORK/stall.log" 2>&1
rc=$?
elapsed=$((SECONDS - t0))
grep -E 'watchdog|test hook|^error' "$WORK/stall.log"
[[ $rc -ne 0 && $rc -ne 124 ]] || { cat "$WORK/stall.log"; die "exit code $rc after a stall (124: hung)"; }
(( elapsed <= 60 )) || die "the job took $elapsed s to end after the stall (bound 60)"
grep -Eq "^error \(rank 0\): watchdog: .+ at step 5 has not completed after 3\.[0-9] s \(parallel\.collective_timeout_s = 3\)" \
  "$WORK/stall.log" || die "no watchdog report naming the collective and the step"
pgrep -f -- "train.run_dir=$WORK/stall( |$)" > /dev/null && die "processes of the stalled job are left"
echo "ok: a rank stalled in a device collective ended the job in $elapsed s (watchdog 3 s)"
