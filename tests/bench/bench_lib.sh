# shellcheck shell=bash
# Shared pieces of the timing benchmarks (zero_overhead.sh, recompute_trade.sh):
# sourced, never run. Callers define die().

# One BLAS thread per rank (one rank per core); root needs Open MPI's consent.
bench_env() {
  export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 HDF5_USE_FILE_LOCKING=FALSE
  if [[ $(id -u) -eq 0 ]]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
}

# Sets `work`: $WORK (kept) or a fresh /tmp/NAME.XXXXXX removed at exit.
bench_workdir() {
  if [[ -n "${WORK:-}" ]]; then
    work=$WORK; mkdir -p "$work"
  else
    work=$(mktemp -d "/tmp/$1.XXXXXX")
    trap 'rm -rf "$work"' EXIT
  fi
}

# Replaces `trainer` by a private copy in $work, so a rebuild of the build tree
# during the benchmark cannot mix two binaries into one comparison.
bench_private_trainer() {
  trainer_src=$trainer
  trainer=$work/trainer
  cp -p "$trainer_src" "$trainer"
}

# Sets `batch` = train.batch_size of INPUT (the trainer's default, 32, if absent)
# and `micro` = batch / NP: one micro-batch per rank per step.
bench_micro_batch() {
  local input=$1 np=$2
  batch=$(awk -F= '
    /^\[/ { sec = $0 } sec == "[train]" && $1 ~ /^[ \t]*batch_size[ \t]*$/ { v = $2; sub(/#.*/, "", v); gsub(/[ \t]/, "", v); print v }' "$input")
  batch=${batch:-32}
  (( batch % np == 0 )) || die "train.batch_size ($batch) is not a multiple of NP ($np)"
  micro=$(( batch / np ))
}

# The median of the numbers on stdin ("nan" when there are none).
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) { print "nan"; exit }
  print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }

# The step_ms column (rank 0's wall time of the training step itself, no
# evaluation, CRC or logging) of steps WARMUP+1 .. LAST of a metrics.csv written
# with train.log_every = 1. Dies unless there are exactly LAST - WARMUP.
step_ms_times() {
  local csv=$1 warmup=$2 last=$3 times n
  times=$(awk -F, -v w="$warmup" -v last="$last" '
    NR == 1 { for (i = 1; i <= NF; i++) if ($i == "step_ms") c = i; if (!c) exit 1; next }
    $1 > w && $1 <= last { print $c }' "$csv") ||
    die "$csv: no step_ms column"
  n=$(grep -c . <<< "$times" || true)
  (( n == last - warmup )) || die "$csv: expected $((last - warmup)) steps after the warm-up, got $n"
  printf '%s\n' "$times"
}

# The times (s) of steps WARMUP+1 .. LAST-1 of a metrics.csv written with
# train.log_every = 1: differences of consecutive elapsed_s (the last step holds
# the final evaluation). Dies unless there are exactly LAST - WARMUP - 1.
steady_step_times() {
  local csv=$1 warmup=$2 last=$3 times n
  times=$(awk -F, -v w="$warmup" -v last="$last" '
    NR == 1 { for (i = 1; i <= NF; i++) if ($i == "elapsed_s") c = i; if (!c) exit 1; next }
    { if ($1 == prev_step + 1 && $1 > w && $1 < last) print $c - prev; prev = $c; prev_step = $1 }' "$csv") ||
    die "$csv: no elapsed_s column"
  n=$(grep -c . <<< "$times" || true)
  (( n == last - warmup - 1 )) || die "$csv: expected $((last - warmup - 1)) steady steps, got $n"
  printf '%s\n' "$times"
}
