#!/usr/bin/env bash
# Benchmark: our trainer against PyTorch eager on the same cores, and against
# the machine's GEMM limit (issue 10). Acceptance being measured:
#   - on the quickstart GPT, our tokens/s at the better of our two layouts is at
#     least 1.2x PyTorch's with 2 threads;
#   - on the 12-layer d=512 GPT, our step time is at most 1.25x the FLOP floor
#     (FLOPs per step / measured sgemm rate for the same thread count);
#   - peak RSS per rank is at most 0.6x PyTorch's process RSS (same model, batch);
#   - `trainer --profile` gives the per-op breakdown of both models (in the report).
#
# Usage: tests/bench/torch_parity_speed.sh [--check] [--doc FILE] TRAINER SGEMM_PEAK DATA INPUT [OUT]
#   TRAINER     trainer executable
#   SGEMM_PEAK  tests/bench/sgemm_peak of the same build (the sgemm rate, through kernels/gemm)
#   DATA        Moby Dick HDF5 data set (share/data/fetch-mobydick.sh)
#   INPUT       inputs/quickstart.toml (data and optimizer settings; the model's
#               dimensions and batch are set by this script, the same for all variants)
#   OUT         markdown report path, or - for stdout (default: -)
#   --check     exit 1 when an acceptance point above does not hold
#               (without it the exit code only says whether the measurement ran)
#   --doc FILE  also put the report into FILE (share/doc/benchmarks.md) between
#               its lines "<!-- torch_parity_speed: begin -->" and "... end -->"
#
# Variants (each a fresh process, all on the same data, model and global batch):
#   ours-2x1   mpirun -n 2, OPENBLAS_NUM_THREADS=1 (one rank per core), ZeRO stage
#              ZERO_STAGE, one micro-batch per rank per step;
#   ours-1x2   mpirun -n 1 --bind-to none, OPENBLAS_NUM_THREADS=2 (the GEMMs use
#              both cores, everything else is Kokkos Serial on one), one micro-batch;
#   torch-2t   share/reference/gpt_torch.py train: the same GPT in PyTorch eager,
#              torch.set_num_threads(2), OPENBLAS_NUM_THREADS=1 (PyTorch's own 2
#              intra-op threads; letting OpenBLAS spawn its own threads inside them
#              oversubscribes the cores: measured 2x slower and erratic), AdamW.
# Models: quickstart = L4 H4 C128 T64, batch 16; big = L12 H8 C512 T128, batch 16.
# Method:
#   - rounds of the three variants, the order reversed every other round (A B C,
#     C B A, ...), so machine noise hits all of them;
#   - ours: step times are differences of consecutive elapsed_s of metrics.csv
#     (train.log_every=1, 1 ms resolution; --stop-after-step, so no step holds an
#     evaluation); steps 1..WARMUP and the last are dropped; PyTorch: its own
#     per-step times (perf_counter around data, forward, backward, clip, step),
#     steps 1..WARMUP dropped;
#   - per variant: the median over its runs of each run's median step time;
#     tokens/s = batch * T / that; paired ratios per round;
#   - FLOPs per step: the trainer's own count (its "compute per step" line: 6 x
#     the Linear and LM-head weights x tokens + 6 L T C per token for causal
#     attention); peak: tests/bench/sgemm_peak (N=2048, best of 10) at 2 ranks x 1
#     thread and 1 rank x 2 threads, measured before and after the rounds (the
#     higher is used); floor = FLOPs / peak; PyTorch is held to the 2-thread peak;
#   - RSS: ours, the trainer's "process peak RSS per rank" (VmHWM), largest rank;
#     PyTorch, getrusage ru_maxrss of its process; largest over runs;
#   - then one run of ours-2x1 per model with --profile; its breakdown is quoted.
#
# Environment knobs (defaults in brackets):
#   ZERO_STAGE [3]  WARMUP [5]  QS_STEPS [40]  QS_ROUNDS [5]  BIG_STEPS [35]
#   BIG_ROUNDS [3]  BIG_WARMUP [3]  MPIEXEC [mpirun]  PYTHON [/usr/bin/python3]
#   QS_DIMS ["4 4 128 64 16"]  BIG_DIMS ["12 8 512 128 16"]  (L H C T batch; smaller for a smoke run)
#   WORK [mktemp -d]  scratch directory for runs and logs (kept when set)
# Wall time: about 25 minutes on 2 idle cores (the big model: about 3 s per
# step for us and 6 s for PyTorch).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
check=0 doc=""
while [[ "${1:-}" == --* ]]; do
  case $1 in
    --check) check=1; shift ;;
    --doc) [[ $# -ge 2 ]] || { echo "torch_parity_speed: --doc needs a FILE" >&2; exit 2; }; doc=$2; shift 2 ;;
    *) echo "torch_parity_speed: unknown option $1" >&2; exit 2 ;;
  esac
done
[[ $# -ge 4 ]] || { sed -n '2,58p' "$0"; exit 2; }
trainer=$1; sgemm=$2; data=$3; input=$4; out=${5:--}

ZERO_STAGE=${ZERO_STAGE:-3}
WARMUP=${WARMUP:-5}
QS_STEPS=${QS_STEPS:-40}
QS_ROUNDS=${QS_ROUNDS:-5}
BIG_STEPS=${BIG_STEPS:-35}
BIG_ROUNDS=${BIG_ROUNDS:-3}
BIG_WARMUP=${BIG_WARMUP:-3}
MPIEXEC=${MPIEXEC:-mpirun}
PYTHON=${PYTHON:-/usr/bin/python3}
reference=$root/share/reference/gpt_torch.py

die() { echo "torch_parity_speed: $*" >&2; exit 2; }
log() { echo "torch_parity_speed: $(date +%H:%M:%S) $*" >&2; }
# shellcheck source=tests/bench/bench_lib.sh
source "$root/tests/bench/bench_lib.sh"

[[ -x "$trainer" ]] || die "no trainer executable at $trainer"
[[ -x "$sgemm" ]] || die "no sgemm_peak executable at $sgemm (built with the tests: tests/bench/sgemm_peak)"
[[ -f "$data" ]] || die "no data set at $data (share/data/fetch-mobydick.sh makes it)"
[[ -f "$input" ]] || die "no input file $input"
[[ -x "$PYTHON" ]] || die "no $PYTHON (PyTorch runs through Debian's python3-torch: share/install-deps.sh)"
"$PYTHON" -c 'import torch, h5py' 2>/dev/null || die "$PYTHON lacks torch or h5py (apt-get install python3-torch python3-h5py)"
[[ $ZERO_STAGE =~ ^[0-3]$ ]] || die "ZERO_STAGE must be 0-3"
begin_mark="<!-- torch_parity_speed: begin -->" end_mark="<!-- torch_parity_speed: end -->"
if [[ -n $doc ]]; then  # checked before an hour of measuring, not after
  [[ -w $doc ]] || die "--doc $doc: not a writable file"
  [[ $(grep -cxF "$begin_mark" "$doc") == 1 && $(grep -cxF "$end_mark" "$doc") == 1 ]] ||
    die "--doc $doc: needs exactly one line '$begin_mark' and one '$end_mark'"
fi

bench_env  # OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1, root consent
bench_workdir torch_parity_speed
bench_private_trainer
sgemm_src=$sgemm
cp -p "$sgemm" "$work/sgemm_peak"; sgemm=$work/sgemm_peak

# model name -> "n_layer n_head d_model seq_len batch"
declare -A dims=([quickstart]="${QS_DIMS:-4 4 128 64 16}" [big]="${BIG_DIMS:-12 8 512 128 16}")
for m in quickstart big; do
  [[ ${dims[$m]} =~ ^[0-9]+\ [0-9]+\ [0-9]+\ [0-9]+\ [0-9]+$ ]] || die "$m dimensions '${dims[$m]}': expected \"L H C T B\""
  (( ${dims[$m]##* } % 2 == 0 )) || die "$m: the batch must be even (2 ranks)"
done

# ---------------------------------------------------------------- sgemm peak
peak_2x1=0 peak_1x2=0
measure_peak() {
  local a b
  a=$(OPENBLAS_NUM_THREADS=1 "$MPIEXEC" -n 2 "$sgemm" 2048 10 | awk '/^sgemm_peak/ { print $NF }')
  b=$(OPENBLAS_NUM_THREADS=2 "$MPIEXEC" -n 1 --bind-to none "$sgemm" 2048 10 | awk '/^sgemm_peak/ { print $NF }')
  [[ -n "$a" && -n "$b" ]] || die "sgemm_peak printed no rate"
  log "sgemm peak: 2 ranks x 1 thread $a GFLOP/s, 1 rank x 2 threads $b GFLOP/s"
  peak_2x1=$(awk -v x="$peak_2x1" -v y="$a" 'BEGIN { print (y > x ? y : x) }')
  peak_1x2=$(awk -v x="$peak_1x2" -v y="$b" 'BEGIN { print (y > x ? y : x) }')
  peak_log+="| $1 | $a | $b |"$'\n'
}
peak_log=""

# ---------------------------------------------------------------- one run
# run MODEL VARIANT ROUND STEPS WARMUP: appends "median_ms rss_mib" to $work/MODEL.VARIANT.
run() {
  local model=$1 variant=$2 round=$3 steps=$4 warm=$5 L H C T B
  read -r L H C T B <<< "${dims[$model]}"
  local tag=$model.$variant.$round dir=$work/runs/$model.$variant.$round
  local set=(--set data.path="$data" --set model.n_layer="$L" --set model.n_head="$H" --set model.d_model="$C"
             --set model.seq_len="$T" --set train.batch_size="$B" --set train.steps=100000
             --set train.eval_every=0 --set train.log_every=1 --set train.run_dir="$dir"
             --set parallel.zero_stage="$ZERO_STAGE" --stop-after-step "$steps")
  rm -rf "$dir"
  case $variant in
    ours-2x1)
      OPENBLAS_NUM_THREADS=1 "$MPIEXEC" -n 2 "$trainer" "$input" "${set[@]}" --set train.micro_batch=$((B / 2)) \
        > "$work/$tag.log" 2>&1 || die "$tag failed: $(tail -3 "$work/$tag.log")" ;;
    ours-1x2)
      OPENBLAS_NUM_THREADS=2 "$MPIEXEC" -n 1 --bind-to none "$trainer" "$input" "${set[@]}" --set train.micro_batch="$B" \
        > "$work/$tag.log" 2>&1 || die "$tag failed: $(tail -3 "$work/$tag.log")" ;;
    torch-2t)
      OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=2 "$PYTHON" "$reference" train "$data" --n-layer "$L" --n-head "$H" \
        --d-model "$C" --seq-len "$T" --batch "$B" --steps "$steps" --threads 2 \
        > "$work/$tag.log" 2>&1 || die "$tag failed: $(tail -3 "$work/$tag.log")" ;;
  esac
  local med rss
  if [[ $variant == torch-2t ]]; then
    med=$(awk -v w="$warm" '$1 == "step" && $2 > w { print $6 }' "$work/$tag.log" | median)
    rss=$(awk '$1 == "peak_rss_kib" { printf "%.1f", $2 / 1024 }' "$work/$tag.log")
  else
    med=$(steady_step_times "$dir/metrics.csv" "$warm" "$steps" | awk '{ print $1 * 1000 }' | median)
    rss=$(awk -F: '/^process peak RSS per rank/ { n = split($NF, v, " "); m = 0
                    for (i = 1; i <= n; i++) if (v[i] + 0 > m) m = v[i] + 0; print m }' "$work/$tag.log")
    flops[$model]=$(awk '/^compute per step:/ { print $4 }' "$work/$tag.log")
  fi
  [[ -n "$med" && "$med" != nan && -n "$rss" ]] || die "$tag: no step times or RSS in its output ($work/$tag.log)"
  echo "$med $rss" >> "$work/$model.$variant"
  log "$tag: median step $med ms, peak RSS $rss MiB"
}
declare -A flops

variants=(ours-2x1 ours-1x2 torch-2t)
rounds_of() { [[ $1 == big ]] && echo "$BIG_ROUNDS" || echo "$QS_ROUNDS"; }
steps_of() { [[ $1 == big ]] && echo "$BIG_STEPS" || echo "$QS_STEPS"; }
warm_of() { [[ $1 == big ]] && echo "$BIG_WARMUP" || echo "$WARMUP"; }

start=$(date +%s)
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
measure_peak before
mkdir -p "$work/runs"
for model in quickstart big; do
  rm -f "$work/$model".*
  for ((r = 1; r <= $(rounds_of $model); ++r)); do
    order=("${variants[@]}")
    if (( r % 2 == 0 )); then order=(torch-2t ours-1x2 ours-2x1); fi
    for v in "${order[@]}"; do run "$model" "$v" "$r" "$(steps_of $model)" "$(warm_of $model)"; done
  done
done
measure_peak after

# Profiles (not timed runs): ours-2x1 with --profile.
declare -A profile
for model in quickstart big; do
  read -r L H C T B <<< "${dims[$model]}"
  dir=$work/runs/$model.profile
  rm -rf "$dir"
  OPENBLAS_NUM_THREADS=1 "$MPIEXEC" -n 2 "$trainer" "$input" --profile --set data.path="$data" \
    --set model.n_layer="$L" --set model.n_head="$H" --set model.d_model="$C" --set model.seq_len="$T" \
    --set train.batch_size="$B" --set train.micro_batch=$((B / 2)) --set train.steps=100000 --set train.eval_every=0 \
    --set train.run_dir="$dir" --set parallel.zero_stage="$ZERO_STAGE" --stop-after-step "$(steps_of $model)" \
    > "$work/$model.profile.log" 2>&1 || die "$model profile run failed: $(tail -3 "$work/$model.profile.log")"
  [[ -f $dir/profile.txt ]] || die "$model: --profile wrote no $dir/profile.txt"
  profile[$model]=$(cat "$dir/profile.txt")
  log "$model: profile done"
done
wall=$(( $(date +%s) - start ))

# ---------------------------------------------------------------- report
fail=0
report=$(mktemp "$work/report.XXXXXX")
{
  echo "### Our trainer against PyTorch, and against the sgemm limit"
  echo
  echo "Run $(date -u '+%Y-%m-%d %H:%M UTC'), ${wall} s; commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown);"
  echo "machine: $(getconf _NPROCESSORS_ONLN) cores, $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo), $(awk '/^MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo); load average before the runs: $load_before;"
  echo "PyTorch $("$PYTHON" -c 'import torch; print(torch.__version__)') (Debian python3-torch, OpenBLAS, no MKL); ZeRO stage $ZERO_STAGE for ours."
  echo
  echo "Command: \`tests/bench/torch_parity_speed.sh --check${doc:+ --doc $doc} $trainer_src $sgemm_src $data $input $out\`"
  echo "(knobs: QS_STEPS=$QS_STEPS QS_ROUNDS=$QS_ROUNDS WARMUP=$WARMUP BIG_STEPS=$BIG_STEPS BIG_ROUNDS=$BIG_ROUNDS BIG_WARMUP=$BIG_WARMUP)"
  echo
  echo "sgemm peak (tests/bench/sgemm_peak, N=2048, best of 10; GFLOP/s, aggregate):"
  echo
  echo "| when | 2 ranks x 1 thread | 1 rank x 2 threads |"
  echo "|---|---|---|"
  printf '%s' "$peak_log"
  echo "| used (higher) | $peak_2x1 | $peak_1x2 |"
  for model in quickstart big; do
    read -r L H C T B <<< "${dims[$model]}"
    f=${flops[$model]:-}
    [[ -n "$f" ]] || die "$model: no FLOP count from the trainer"
    echo
    echo "#### Model \`$model\`: L$L H$H C$C T$T, batch $B ($((B * T)) tokens per step), $f GFLOP per step; $(rounds_of $model) rounds of $(steps_of $model) steps, warm-up $(warm_of $model)"
    echo
    echo "| variant | step (median ms) | tokens/s | GFLOP/s | peak for its threads | FLOP floor (ms) | step / floor | peak RSS (MiB, largest process/rank) |"
    echo "|---|---|---|---|---|---|---|---|"
    for v in "${variants[@]}"; do
      med=$(awk '{ print $1 }' "$work/$model.$v" | median)
      rss=$(awk '{ print $2 }' "$work/$model.$v" | sort -g | tail -1)
      peak=$peak_1x2; [[ $v == ours-2x1 ]] && peak=$peak_2x1
      awk -v v="$v" -v m="$med" -v r="$rss" -v f="$f" -v p="$peak" -v tok=$((B * T)) 'BEGIN {
        floor = f / p * 1000
        printf "| %s | %.1f | %.0f | %.1f | %.1f | %.1f | %.3f | %.1f |\n", v, m, tok / (m / 1000), f / (m / 1000), p, floor, m / floor, r }'
      eval "med_${v//-/_}=$med rss_${v//-/_}=$rss"
    done
    # shellcheck disable=SC2154
    best=$med_ours_2x1; best_name=ours-2x1
    if awk -v a="$med_ours_1x2" -v b="$best" 'BEGIN { exit !(a < b) }'; then best=$med_ours_1x2; best_name=ours-1x2; fi
    # Paired per round: torch / ours (the speed-up of ours over PyTorch).
    paired=$(paste -d' ' <(awk '{ print $1 }' "$work/$model.torch-2t") <(awk '{ print $1 }' "$work/$model.$best_name") |
             awk '{ print $1 / $2 }' | median)
    echo
    # shellcheck disable=SC2154
    awk -v b="$best" -v n="$best_name" -v t="$med_torch_2t" -v p="$paired" 'BEGIN {
      printf "Speed-up of %s (our better layout here) over PyTorch 2 threads: %.2fx in tokens/s (paired per round, median: %.2fx).\n", n, t / b, p }'
    # shellcheck disable=SC2154
    awk -v a="$rss_ours_2x1" -v t="$rss_torch_2t" 'BEGIN {
      printf "Peak RSS per rank (ours-2x1) / PyTorch process RSS: %.2f.\n", a / t }'
    if [[ $model == quickstart ]]; then
      if awk -v b="$best" -v t="$med_torch_2t" 'BEGIN { exit !(t / b >= 1.2) }'; then
        echo "- PASS: tokens/s at our better layout >= 1.2x PyTorch 2 threads"
      else echo "- FAIL: tokens/s at our better layout < 1.2x PyTorch 2 threads"; fail=1; fi
    else
      if awk -v m="$med_ours_2x1" -v f="$f" -v p="$peak_2x1" 'BEGIN { exit !(m <= 1.25 * f / p * 1000) }'; then
        echo "- PASS: ours-2x1 step <= 1.25x the FLOP floor (2 ranks x 1 thread peak)"
      else echo "- FAIL: ours-2x1 step > 1.25x the FLOP floor"; fail=1; fi
    fi
    # shellcheck disable=SC2154
    if awk -v a="$rss_ours_2x1" -v t="$rss_torch_2t" 'BEGIN { exit !(a <= 0.6 * t) }'; then
      echo "- PASS: peak RSS per rank <= 0.6x PyTorch's"
    else echo "- FAIL: peak RSS per rank > 0.6x PyTorch's"; fail=1; fi
    echo
    echo "Per-run medians (ms) in run order: $(for v in "${variants[@]}"; do printf '%s: %s; ' "$v" "$(awk '{ printf "%s ", $1 }' "$work/$model.$v")"; done)"
    echo
    echo "\`trainer --profile\` of ours-2x1 (a separate, untimed run of $(steps_of $model) steps):"
    echo
    echo '```'
    echo "${profile[$model]}"
    echo '```'
  done
} > "$report"

if [[ "$out" == - ]]; then cat "$report"; else cp "$report" "$out"; log "report: $out"; fi
if [[ -n $doc ]]; then
  awk -v b="$begin_mark" -v e="$end_mark" -v r="$report" '
    $0 == b { print; while ((getline line < r) > 0) print line; skip = 1; next }
    $0 == e { skip = 0 }
    !skip { print }' "$doc" > "$doc.partial" && mv "$doc.partial" "$doc"
  log "report placed in $doc"
fi
if (( check && fail )); then echo "torch_parity_speed: an acceptance point does not hold (see the report)" >&2; exit 1; fi
exit 0
