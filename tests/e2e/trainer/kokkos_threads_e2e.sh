#!/usr/bin/env bash
# Issue 36: the trainer against an OpenMP Kokkos gives bitwise the same curve at
# every Kokkos thread count, and the same as the Serial build. Every host kernel
# writes each output element from one iteration with its sums in a fixed order
# (the only Kokkos parallel_reduce calls count integers), so the thread count
# cannot change a bit; a float reduction split across threads would (planted in
# layernorm's backward: this test fails).
# Runs (tiny GPT, 40 steps, loss / grad_norm / weights_crc of every logged step):
#   - fp32 and bf16, 1 rank, --kokkos-threads 1, 2 and 4 (oneDNN: 1 thread): equal;
#     the run header must say "Kokkos ... OpenMP, N threads";
#   - the same runs of SERIAL_TRAINER (the Debian-Kokkos build), when given: equal;
#   - 2 ranks x parallel.threads 2 (Kokkos and oneDNN) twice, and 3 ranks x 2
#     threads twice (8 sequences do not divide by 3): each pair equal.
# Usage: kokkos_threads_e2e.sh TRAINER INPUT DATA WORK [SERIAL_TRAINER]
# Environment: MPIEXEC (default mpirun), the MPI variables of the suite.
set -euo pipefail
die() { echo "FAIL: $*" >&2; exit 1; }
[[ $# -ge 4 && $# -le 5 ]] || die "usage: $0 TRAINER INPUT DATA WORK [SERIAL_TRAINER]"
trainer=$1 input=$2 data=$3 work=$4 serial=${5:-}
mpiexec=${MPIEXEC:-mpirun}
export OMP_PROC_BIND=${OMP_PROC_BIND:-false}  # Kokkos' OpenMP warns without it
rm -rf "$work"; mkdir -p "$work"

# run BINARY NP NAME args...: prints the curve's digest "loss,grad_norm,crc per row".
run() {
  local bin=$1 np=$2 name=$3; shift 3
  timeout 300 "$mpiexec" -n "$np" --bind-to none "$bin" "$input" --set data.path="$data" \
    --set train.run_dir="$work/$name" --set train.steps=40 --set train.log_every=5 "$@" \
    > "$work/$name.log" 2>&1 || die "$name exited with $? ($(tail -3 "$work/$name.log"))"
  [[ -s $work/$name/metrics.csv ]] || die "$name: no metrics.csv"
  awk -F, 'NR > 1 { print $1, $2, $5, $11 }' "$work/$name/metrics.csv" > "$work/$name.curve"
}
same() {  # same A B: the curves of runs A and B are textually equal
  cmp -s "$work/$1.curve" "$work/$2.curve" ||
    die "$1 and $2 differ: $(diff "$work/$1.curve" "$work/$2.curve" | head -4 | tr '\n' ' ')"
  echo "ok: $1 == $2 ($(wc -l < "$work/$1.curve") rows, last: $(tail -1 "$work/$1.curve"))"
}

for prec in fp32 bf16; do
  for t in 1 2 4; do
    run "$trainer" 1 "$prec.k$t" --set precision.mode="$prec" --kokkos-threads="$t"
    grep -q "^compute: host (Kokkos [0-9.]* OpenMP, $t threads\?;" "$work/$prec.k$t.log" ||
      die "$prec.k$t: the run header does not say Kokkos OpenMP with $t threads: $(grep '^compute:' "$work/$prec.k$t.log")"
  done
  same "$prec.k1" "$prec.k2"
  same "$prec.k1" "$prec.k4"
  if [[ -n $serial ]]; then
    run "$serial" 1 "$prec.serial" --set precision.mode="$prec"
    grep -q "^compute: host (Kokkos [0-9.]* Serial" "$work/$prec.serial.log" || die "$serial is not a Serial-Kokkos build"
    same "$prec.k1" "$prec.serial"
  fi
done
for np in 2 3; do
  run "$trainer" "$np" "np$np.a" --set parallel.threads=2
  run "$trainer" "$np" "np$np.b" --set parallel.threads=2
  grep -q "^compute: host (Kokkos [0-9.]* OpenMP, 2 threads; oneDNN [0-9.]* on .*(2 threads per rank" "$work/np$np.a.log" ||
    die "np$np: parallel.threads=2 did not reach Kokkos and oneDNN: $(grep '^compute:' "$work/np$np.a.log")"
  same "np$np.a" "np$np.b"
done
echo "PASS: bitwise the same curves at Kokkos threads 1, 2, 4${serial:+ and in the Serial build}; repeatable at 2 and 3 ranks x 2 threads"
