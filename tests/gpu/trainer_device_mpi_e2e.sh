#!/usr/bin/env bash
# Many ranks on one GPU (label gpu1; built in CI, run by share/gpu/on-device.sh):
# inputs/tiny.toml for 20 steps at NP ranks (2 or 3) sharing one device with the
# MPI device collectives (parallel.device_collectives = "mpi",
# parallel.share_device = true) against the same binary on the host at the same
# rank count: ZeRO stages 0-3 in fp32 (every step's loss and gradient norm within
# 1e-5 relative), bf16
# and fp16 at stages 1 and 3 (3e-2: the device's 16-bit kernels round other
# than the host's); two device runs bitwise equal. Without a device the trainer
# stops at bring-up (exit 1) and this script fails; every run is under timeout.
# Environment (CTest): NP, TRAINER, TRAINER_DATA, INPUT, TEXT, WORK, MPIEXEC, NPFLAG.
set -uo pipefail
die() { echo "FAIL: $*" >&2; exit 1; }
rm -rf "$WORK" && mkdir -p "$WORK"
data=$WORK/tiny.h5
"$TRAINER_DATA" text "$TEXT" "$data" --val-fraction 0.1 > /dev/null || die "trainer-data failed"
shared=(--set parallel.device_collectives=mpi --set parallel.share_device=true)
run() {  # NAME DEVICE extra-args
  local name=$1 device=$2; shift 2
  timeout 600 "$MPIEXEC" "$NPFLAG" "${NP:-2}" "$TRAINER" "$INPUT" --set data.path="$data" --set train.run_dir="$WORK/$name" \
    --set train.device="$device" --set train.steps=20 --set train.log_every=1 "$@" > "$WORK/$name.log" 2>&1 || { cat "$WORK/$name.log"; die "$name failed"; }
}
compare() {  # A B TOL: every step's loss (column 2) and gradient norm (column 5)
  local col
  for col in 2 5; do
    paste -d, <(awk -F, -v c=$col 'NR > 1 { print $c }' "$WORK/$1/metrics.csv") \
      <(awk -F, -v c=$col 'NR > 1 { print $c }' "$WORK/$2/metrics.csv") |
      awk -F, -v tol="$3" -v col=$col '{ d = $1 - $2; if (d < 0) d = -d; r = d / ($2 < 0 ? -$2 : $2); if (r > worst) worst = r }
        END { printf "column %d: max relative difference %.3g (tolerance %g)\n", col, worst, tol; exit worst > tol || NR < 20 }' ||
      die "$1 and $2 differ (metrics.csv column $col)"
  done
}
for s in 0 1 2 3; do
  run cpu_s$s cpu --set parallel.zero_stage=$s
  run cuda_s$s cuda --set parallel.zero_stage=$s "${shared[@]}"
  grep -q '^compute: CUDA device' "$WORK/cuda_s$s.log" || die "cuda_s$s did not run on a CUDA device"
  compare cuda_s$s cpu_s$s 1e-5
done
for mode in bf16 fp16; do
  for s in 1 3; do
    run cpu_${mode}_s$s cpu --set parallel.zero_stage=$s --set precision.mode=$mode
    run cuda_${mode}_s$s cuda --set parallel.zero_stage=$s --set precision.mode=$mode "${shared[@]}"
    compare cuda_${mode}_s$s cpu_${mode}_s$s 3e-2
  done
done
run cuda_s3_again cuda --set parallel.zero_stage=3 "${shared[@]}"
cmp <(cut -d, -f1,2,5 "$WORK/cuda_s3/metrics.csv") <(cut -d, -f1,2,5 "$WORK/cuda_s3_again/metrics.csv") ||
  die "two device runs are not bitwise identical"
run cuda_bf16_s3_again cuda --set parallel.zero_stage=3 --set precision.mode=bf16 "${shared[@]}"
cmp <(cut -d, -f1,2,5 "$WORK/cuda_bf16_s3/metrics.csv") <(cut -d, -f1,2,5 "$WORK/cuda_bf16_s3_again/metrics.csv") ||
  die "two bf16 device runs are not bitwise identical"
echo "ok: ${NP:-2} ranks on one GPU with the MPI device collectives match the host trainer"
