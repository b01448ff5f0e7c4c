#!/usr/bin/env bash
# The CUDA trainer end to end on GPUs (label gpu; one GPU per rank; built in CI,
# never run here): 30 steps of inputs/tiny.toml at NP ranks (default 2) with
# train.device = "cuda" against the same binary with "cpu": fp32 at ZeRO stage 0
# and 3 (loss curves within 1e-3 relative: cuBLAS and the host BLAS sum in other
# orders), bf16 at stage 2 (3e-2); the device run is bitwise repeatable; a
# checkpoint written on the device resumes on the host and trains exactly the
# remaining steps.
# Environment (CTest): NP, TRAINER, TRAINER_DATA, INPUT, TEXT, WORK, MPIEXEC, NPFLAG.
set -uo pipefail
# shellcheck source=../e2e/trainer/e2e_lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../e2e/trainer/e2e_lib.sh"  # die, check_resumed
die() { echo "FAIL: $*" >&2; exit 1; }
rm -rf "$WORK" && mkdir -p "$WORK"
data=$WORK/tiny.h5
"$TRAINER_DATA" text "$TEXT" "$data" --val-fraction 0.1 > /dev/null || die "trainer-data failed"
run() {  # NAME DEVICE extra-args
  local name=$1 device=$2; shift 2
  timeout 600 "$MPIEXEC" "$NPFLAG" "${NP:-2}" "$TRAINER" "$INPUT" --set data.path="$data" --set train.run_dir="$WORK/$name" \
    --set train.device="$device" "$@" > "$WORK/$name.log" 2>&1 || { cat "$WORK/$name.log"; die "$name failed"; }
}
compare() {  # A B TOL
  paste -d, <(awk -F, 'NR > 1 { print $2 }' "$WORK/$1/metrics.csv") <(awk -F, 'NR > 1 { print $2 }' "$WORK/$2/metrics.csv") |
    awk -F, -v tol="$3" '{ d = $1 - $2; if (d < 0) d = -d; r = d / ($2 < 0 ? -$2 : $2); if (r > worst) worst = r }
      END { printf "max relative loss difference %.3g (tolerance %g)\n", worst, tol; exit worst > tol || NR < 5 }' ||
    die "$1 and $2 differ"
}
for s in 0 3; do
  run cpu_s$s cpu --set parallel.zero_stage=$s
  run cuda_s$s cuda --set parallel.zero_stage=$s
  grep -q '^compute: CUDA device' "$WORK/cuda_s$s.log" || die "cuda_s$s did not run on a CUDA device"
  compare cuda_s$s cpu_s$s 1e-3
done
run cpu_bf16 cpu --set parallel.zero_stage=2 --set precision.mode=bf16
run cuda_bf16 cuda --set parallel.zero_stage=2 --set precision.mode=bf16
compare cuda_bf16 cpu_bf16 3e-2
run cuda_s3_again cuda --set parallel.zero_stage=3
cmp <(cut -d, -f1,2 "$WORK/cuda_s3/metrics.csv") <(cut -d, -f1,2 "$WORK/cuda_s3_again/metrics.csv") ||
  die "two device runs are not bitwise identical"
run ck_cuda cuda --set checkpoint.every_steps=10 --set train.steps=20
run ck_cuda cpu --set checkpoint.every_steps=10 --set train.steps=30
grep -q 'resumed from' "$WORK/ck_cuda.log" || die "the host run did not resume the device checkpoint"
check_resumed "$WORK/ck_cuda.log" "$WORK/ck_cuda" 20 30  # and trained exactly steps 21..30
echo "ok: the CUDA trainer matches the host trainer"
