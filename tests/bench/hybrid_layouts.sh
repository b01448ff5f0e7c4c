#!/usr/bin/env bash
# Benchmark (issue 36): one rank with 2 threads against 2 ranks of 1 thread, on the
# 12-layer GPT of torch_parity_speed.sh (L12 H8 C512 T128, batch 16, ZeRO stage 2),
# fp32 and bf16, for a Serial-Kokkos build and an OpenMP-Kokkos build:
#   serial-2x1, omp-2x1   mpirun -n 2, parallel.threads=1, micro-batch 8 per rank;
#   serial-1x2, omp-1x2   mpirun -n 1 --bind-to none, parallel.threads=2 (oneDNN's
#                         pool; with OpenMP also Kokkos'), micro-batch 16.
# ROUNDS rounds, the variants in the same order each round; per run `trainer
# --profile` gives the step time and the ops below, the log the process peak RSS.
# OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are unset in every run (as in
# torch_parity_speed.sh); OMP_PROC_BIND=false (Kokkos' OpenMP warns without it).
# Usage: tests/bench/hybrid_layouts.sh SERIAL_TRAINER OMP_TRAINER DATA INPUT
#   DATA   Moby Dick HDF5 data set; INPUT inputs/quickstart.toml
# Environment knobs: ROUNDS [2] STEPS [8] MPIEXEC [mpirun] WORK [mktemp]
# Results: share/doc/benchmarks.md ("Hybrid layouts"), share/doc/kokkos.md.
set -euo pipefail
die() { echo "hybrid_layouts: $*" >&2; exit 2; }
[[ $# -eq 4 ]] || die "usage: $0 SERIAL_TRAINER OMP_TRAINER DATA INPUT"
serial=$1 omp=$2 data=$3 input=$4
ROUNDS=${ROUNDS:-2} STEPS=${STEPS:-8} MPIEXEC=${MPIEXEC:-mpirun}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=bench_lib.sh
source "$here/bench_lib.sh"
bench_env
bench_workdir hybrid_layouts
for b in "$serial" "$omp"; do [[ -x $b ]] || die "not an executable: $b"; done
"$serial" --version | grep -q "Serial" || die "$serial is not a Serial-Kokkos build ($("$serial" --version))"
"$omp" --version | grep -q "OpenMP" || die "$omp is not an OpenMP-Kokkos build ($("$omp" --version))"
echo "hybrid_layouts: $(date -u '+%F %H:%M') UTC, CPU $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo), $(getconf _NPROCESSORS_ONLN) cores; OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset in every run (the environment had OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE-(unset)} OPENBLAS_L2_SIZE=${OPENBLAS_L2_SIZE-(unset)})"
echo "| variant | precision | round | step ms | linear | attention | layernorm | gelu | adamw | process peak RSS (MiB, sum over ranks) |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for (( r = 1; r <= ROUNDS; r++ )); do
  for prec in fp32 bf16; do
    for v in serial-2x1 omp-2x1 serial-1x2 omp-1x2; do
      bin=$serial; [[ $v == omp* ]] && bin=$omp
      np=2 threads=1 mb=8 bind=(); [[ $v == *1x2 ]] && { np=1; threads=2; mb=16; bind=(--bind-to none); }
      d=$work/$v.$prec.$r; rm -rf "$d"
      env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_PROC_BIND=false \
        "$MPIEXEC" -n "$np" "${bind[@]}" "$bin" "$input" --profile --set data.path="$data" \
        --set model.n_layer=12 --set model.n_head=8 --set model.d_model=512 --set model.seq_len=128 \
        --set train.batch_size=16 --set train.micro_batch="$mb" --set train.steps=100000 --set train.eval_every=0 \
        --set train.log_every=1000 --set train.run_dir="$d" --set precision.mode="$prec" \
        --set parallel.zero_stage=2 --set parallel.threads="$threads" --stop-after-step "$STEPS" > "$d.log" 2>&1 ||
        die "$v $prec round $r failed: $(tail -3 "$d.log")"
      rss=$(sed -n 's/.*process peak RSS \([0-9.]*\) MiB per rank.*/\1/p' "$d.log" | head -1)
      [[ -n $rss ]] || die "$d.log: no process peak RSS line"
      awk -v v="$v" -v p="$prec" -v r="$r" -v rss="$rss" -v np="$np" '
        /^  step time / { step = $3 }
        $1 == "linear" || $1 == "attention" || $1 == "layernorm" || $1 == "gelu" || $1 == "adamw" { ms[$1] = $4 }
        END { printf "| %s | %s | %d | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.0f |\n", v, p, r, step,
              ms["linear"], ms["attention"], ms["layernorm"], ms["gelu"], ms["adamw"], rss * np }' "$d/profile.txt"
    done
  done
done
