#!/usr/bin/env bash
# Benchmark: our trainer against PyTorch eager on the same cores, PyTorch set up
# as its users would (issue 21), and against the machine's GEMM limit (issue 10).
# Goals reported (PASS/FAIL lines; --check fails on any FAIL):
#   - quickstart GPT: our best layout's tokens/s is at least 1.2x PyTorch's best
#     setup (issue 10), and 2.0x (issue 23);
#   - 12-layer d=512 GPT: our 2x1 step is at most 1.25x the FLOP floor (issue 10)
#     and 1.12x (issue 23); our best layout is at least 1.35x PyTorch's best (issue 23);
#   - memory: the peak RSS summed over our ranks (ours-2x1) is at most 0.7x the sum
#     over the processes of PyTorch's best setup (issue 23; recompute off);
#   - with --reproduce: every variant's step time within 10% of the earlier
#     run's, compared within the same core placement (below): the median of its
#     near steps against the earlier run's, and of its far steps, where both
#     runs have at least MIN_PLACED steps there (issue 21); the medians over all
#     runs and the best runs are reported beside it;
#   - `trainer --profile` gives the per-op breakdown of both models (in the report).
#
# Usage: tests/bench/torch_parity_speed.sh [--check] [--doc FILE] [--readme FILE] [--results TSV] [--reproduce TSV]
#                                          TRAINER SGEMM_PEAK DATA INPUT [OUT]
#   TRAINER     trainer executable
#   SGEMM_PEAK  tests/bench/sgemm_peak of the same build (the sgemm rate, through kernels/gemm)
#   DATA        Moby Dick HDF5 data set (share/data/fetch-mobydick.sh)
#   INPUT       inputs/quickstart.toml (data and optimizer settings; the model's
#               dimensions and batch are set by this script, the same for all variants)
#   OUT         markdown report path, or - for stdout (default: -)
#   --check     exit 1 when a goal above does not hold (without it the exit code
#               only says whether the measurement ran)
#   --doc FILE  also put the report into FILE (share/doc/benchmarks.md) between
#               its lines "<!-- torch_parity_speed: begin -->" and "... end -->"
#   --readme FILE    also put the headline (one paragraph) into FILE (README.md)
#               between "<!-- torch_parity_speed headline: begin -->" and "... end -->"
#   --results TSV    write a header line, then "model variant median_ms best_run_ms
#               near_median_ms near_steps far_median_ms far_steps" per variant to TSV
#               (- where a placement has no step)
#   --reproduce TSV  compare this run's step times with an earlier run's --results
#               file, variant by variant (the report shows both and the deviation)
#
# Variants (each a fresh process or processes, all on the same data, model,
# global batch and windows):
#   ours-2x1     mpirun -n 2, OPENBLAS_NUM_THREADS=1 (one rank per core), ZeRO stage
#                ZERO_STAGE, one micro-batch per rank per step;
#   ours-1x2     mpirun -n 1 --bind-to none, OPENBLAS_NUM_THREADS=2 (the GEMMs use
#                both cores, everything else is Kokkos Serial on one), one micro-batch;
#   torch-2i1b   share/reference/gpt_torch.py train, PyTorch eager: 2 intra-op threads
#                (torch.set_num_threads(2), OMP_NUM_THREADS=2), OPENBLAS_NUM_THREADS=1;
#   torch-1i2b   1 intra-op thread, OPENBLAS_NUM_THREADS=2 (Debian's PyTorch does its
#                GEMMs in OpenBLAS, which set_num_threads does not reach);
#   torch-2i2b   2 intra-op threads and 2 BLAS threads, OMP_WAIT_POLICY=PASSIVE (so
#                idle OpenMP threads do not spin against OpenBLAS's);
#   torch-ddp    torch.nn.parallel.DistributedDataParallel over gloo, 2 processes x 1
#                thread (1 intra-op, 1 BLAS): the mirror of ours-2x1. The processes are
#                started with the variables torchrun sets (RANK, WORLD_SIZE, MASTER_ADDR,
#                MASTER_PORT), because Debian 12's torchrun (PyTorch 1.13) fails under
#                Python 3.11 ("'NoneType' object has no attribute 'get'" in to_map).
# Models: quickstart = L4 H4 C128 T64, batch 16; big = L12 H8 C512 T128, batch 16.
# Method:
#   - rounds of all variants, the order reversed every other round, so machine
#     noise hits all of them;
#   - the same span on both sides: one training step (data, forward, backward,
#     the gradient norm and clipping, the optimizer; the step's collectives), not
#     the logging around it. Ours: metrics.csv's step_ms (rank 0's wall time of the
#     step, train.log_every=1; not elapsed_s differences, which also hold the
#     per-row weights CRC, a pass over every weight); PyTorch: its own per-step
#     times (perf_counter around data, forward, backward, clip, step; rank 0's
#     with DDP); steps 1..WARMUP dropped on both sides;
#   - per variant: the median over its runs of each run's median step time;
#     tokens/s = batch * T / that; PyTorch's best setup = the PyTorch variant with
#     the lowest median; the headline is our best layout against it, also paired
#     per round (median of the per-round ratios); beside the median, the best
#     run (the lowest of the runs' medians), on which the reproduction goal is
#     checked;
#   - CPU use of every run: (user + system) / wall of the whole run (launcher and
#     its processes, start-up included; bash's time); 2.00 = both cores busy;
#   - FLOPs per step: the trainer's own count (its "compute per step" line); peak:
#     tests/bench/sgemm_peak (N=2048, best of 10) at 2 ranks x 1 thread and 1 rank
#     x 2 threads, measured before and after the rounds (the higher is used);
#     floor = FLOPs / peak; PyTorch is held to the 2-thread peak;
#   - memory: per run, the peak RSS (VmHWM) summed over our ranks (the trainer's
#     "process peak RSS per rank" line) and over PyTorch's processes (getrusage
#     ru_maxrss of each; launchers, mpirun, excluded on both sides); the idle
#     baseline beside it: the RSS of each process before the model exists (ours:
#     "process RSS before the model per rank"; PyTorch: VmRSS after imports and
#     the data set are loaded), summed the same way; largest over runs;
#   - core placement: tests/bench/core_latency (beside SGEMM_PEAK, or CORE_LATENCY)
#     measures the one-way cache-line hand-off between the two CPUs before and
#     after every run, and every PROBE_EVERY seconds during it (--rt: SCHED_FIFO
#     for ~1-4 ms per probe, so that a probe on busy CPUs measures the hand-off,
#     not the scheduler; without root, before and after only). A 2-vCPU VM's host
#     moves its vCPUs between placements that share a last-level cache and
#     placements that do not (here 30-45 against ~170 ns, for seconds to minutes
#     at a time), and setups whose GEMMs run on 2 threads of one process are
#     ~1.4x slower in the second, and the host moves them in the middle of runs.
#     A probe is far when it exceeds FAR_FACTOR x the lowest probe of the whole
#     benchmark. Every probe carries the wall clock, and every timed step its
#     end on the same clock (ours: metrics.csv step_end_unix; PyTorch: "end" on
#     its step lines): a step is near when every probe from the last one before
#     its start to the first one after its end is near, far when all are far,
#     mixed otherwise. Each variant's near and far steps (over all its runs)
#     get their own median (mixed steps only count in the all-runs medians); a
#     run is near, far or mixed the same way, by all its probes;
#   - then one run of ours-2x1 per model with --profile; its breakdown is quoted.
#
# Environment knobs (defaults in brackets):
#   ZERO_STAGE [3]  WARMUP [5]  QS_STEPS [60]  QS_ROUNDS [8]  BIG_STEPS [12]
#   BIG_ROUNDS [3]  BIG_WARMUP [2]  PROFILE [1]  MPIEXEC [mpirun]  PYTHON [/usr/bin/python3]
#   SGEMM_N [2048]  CORE_LATENCY [dirname SGEMM_PEAK/core_latency]  FAR_FACTOR [2.5]  PROBE_EVERY [1]
#   MIN_PLACED [5] (steps a placement needs in both runs to be compared)
#   QS_DIMS ["4 4 128 64 16"]  BIG_DIMS ["12 8 512 128 16"]  (L H C T batch; smaller for a smoke run)
#   WORK [mktemp -d]  scratch directory for runs and logs (kept when set)
# Wall time: about 16 minutes on 2 idle cores (the big model: about 3 s per
# step for us, 3.5-6 s for PyTorch).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
check=0 doc="" readme="" results="" reproduce=""
while [[ "${1:-}" == --* ]]; do
  case $1 in
    --check) check=1; shift ;;
    --readme) [[ $# -ge 2 ]] || { echo "torch_parity_speed: --readme needs a FILE" >&2; exit 2; }; readme=$2; shift 2 ;;
    --results) [[ $# -ge 2 ]] || { echo "torch_parity_speed: --results needs a FILE" >&2; exit 2; }; results=$2; shift 2 ;;
    --reproduce) [[ $# -ge 2 && -r $2 ]] || { echo "torch_parity_speed: --reproduce needs a readable FILE (an earlier --results)" >&2; exit 2; }
                 reproduce=$2; shift 2 ;;
    --doc) [[ $# -ge 2 ]] || { echo "torch_parity_speed: --doc needs a FILE" >&2; exit 2; }; doc=$2; shift 2 ;;
    *) echo "torch_parity_speed: unknown option $1" >&2; exit 2 ;;
  esac
done
[[ $# -ge 4 ]] || { sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 2; }
trainer=$1; sgemm=$2; data=$3; input=$4; out=${5:--}

ZERO_STAGE=${ZERO_STAGE:-3}
WARMUP=${WARMUP:-5}
QS_STEPS=${QS_STEPS:-60}
QS_ROUNDS=${QS_ROUNDS:-8}
BIG_STEPS=${BIG_STEPS:-12}
BIG_ROUNDS=${BIG_ROUNDS:-3}
BIG_WARMUP=${BIG_WARMUP:-2}
PROFILE=${PROFILE:-1}
SGEMM_N=${SGEMM_N:-2048}
MPIEXEC=${MPIEXEC:-mpirun}
PYTHON=${PYTHON:-/usr/bin/python3}
CORE_LATENCY=${CORE_LATENCY:-$(dirname "$sgemm")/core_latency}
FAR_FACTOR=${FAR_FACTOR:-2.5}
PROBE_EVERY=${PROBE_EVERY:-1}
MIN_PLACED=${MIN_PLACED:-5}
reference=$root/share/reference/gpt_torch.py

die() { echo "torch_parity_speed: $*" >&2; exit 2; }
log() { echo "torch_parity_speed: $(date +%H:%M:%S) $*" >&2; }
# shellcheck source=tests/bench/bench_lib.sh
source "$root/tests/bench/bench_lib.sh"
# shellcheck source=tests/support/process_memory.sh
source "$root/tests/support/process_memory.sh"  # check_process_memory: VmHWM within 10% of the prediction

[[ -x "$trainer" ]] || die "no trainer executable at $trainer"
[[ -x "$sgemm" ]] || die "no sgemm_peak executable at $sgemm (built with the tests: tests/bench/sgemm_peak)"
[[ -x "$CORE_LATENCY" ]] || die "no core_latency executable at $CORE_LATENCY (built with the tests: tests/bench/core_latency; or set CORE_LATENCY)"
[[ $FAR_FACTOR =~ ^[0-9]+(\.[0-9]+)?$ ]] && awk -v f="$FAR_FACTOR" 'BEGIN { exit !(f > 1) }' || die "FAR_FACTOR must be a number above 1"
[[ $PROBE_EVERY =~ ^[0-9]+(\.[0-9]+)?$ ]] && awk -v f="$PROBE_EVERY" 'BEGIN { exit !(f >= 0.1) }' || die "PROBE_EVERY must be a number of seconds >= 0.1"
[[ $MIN_PLACED =~ ^[1-9][0-9]*$ ]] || die "MIN_PLACED must be a whole number >= 1"
[[ -f "$data" ]] || die "no data set at $data (share/data/fetch-mobydick.sh makes it)"
[[ -f "$input" ]] || die "no input file $input"
[[ -x "$PYTHON" ]] || die "no $PYTHON (PyTorch runs through Debian's python3-torch: share/install-deps.sh)"
"$PYTHON" -c 'import torch, h5py' 2>/dev/null || die "$PYTHON lacks torch or h5py (apt-get install python3-torch python3-h5py)"
[[ $ZERO_STAGE =~ ^[0-3]$ ]] || die "ZERO_STAGE must be 0-3"
begin_mark="<!-- torch_parity_speed: begin -->" end_mark="<!-- torch_parity_speed: end -->"
hl_begin="<!-- torch_parity_speed headline: begin -->" hl_end="<!-- torch_parity_speed headline: end -->"
marked() {  # marked FILE BEGIN END: checked before the measuring, not after
  [[ -w $1 ]] || die "$1: not a writable file"
  [[ $(grep -cxF "$2" "$1") == 1 && $(grep -cxF "$3" "$1") == 1 ]] ||
    die "$1: needs exactly one line '$2' and one '$3'"
}
# The first line of a --results file: its columns count steps by placement (an
# earlier shape counted runs, and is refused).
results_head="# torch_parity_speed results: model variant median_ms best_run_ms near_median_ms near_steps far_median_ms far_steps"
[[ -z $reproduce ]] || awk -F'\t' -v h="$results_head" 'NR == 1 { if ($0 != h) bad = 1; next }
    NF != 8 || $3 !~ /^[0-9.]+$/ || $6 !~ /^[0-9]+$/ || $8 !~ /^[0-9]+$/ { bad = 1 } END { exit bad || NR < 2 }' "$reproduce" ||
  die "$reproduce: not a --results file of this script (the line '$results_head', then 8 tab-separated columns per line)"
[[ -z $doc ]] || marked "$doc" "$begin_mark" "$end_mark"
[[ -z $readme ]] || marked "$readme" "$hl_begin" "$hl_end"
# place FILE BEGIN END TEXTFILE: replaces what lies between the marker lines.
place() {
  awk -v b="$2" -v e="$3" -v r="$4" '
    $0 == b { print; while ((getline line < r) > 0) print line; skip = 1; next }
    $0 == e { skip = 0 }
    !skip { print }' "$1" > "$1.partial" && mv "$1.partial" "$1"
}

bench_env  # OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1, root consent
bench_workdir torch_parity_speed
bench_private_trainer
sgemm_src=$sgemm
cp -p "$sgemm" "$work/sgemm_peak"; sgemm=$work/sgemm_peak
cp -p "$CORE_LATENCY" "$work/core_latency"
# probe: "T NS": the wall clock now (s since 1970) and the one-way hand-off
# latency between the two CPUs (ns).
probe() {
  local t=$EPOCHREALTIME ns
  ns=$("$work/core_latency" | awk '$1 == "core_latency" { print $NF }') || die "core_latency failed"
  [[ $ns =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "core_latency printed no latency"
  echo "$t $ns"
}
# Probes during a run need real-time priority (see the header); without it, none.
probe_rt=1
"$work/core_latency" --rt > /dev/null 2>&1 || probe_rt=0
# prober FILE: probes every PROBE_EVERY s into FILE ("T NS" per line, as probe) until killed.
prober() {
  local t ns
  while :; do
    t=$EPOCHREALTIME
    ns=$("$work/core_latency" --rt 2>/dev/null | awk '$1 == "core_latency" { print $NF }') || true
    [[ -z $ns ]] || echo "$t $ns" >> "$1"
    sleep "$PROBE_EVERY"
  done
}

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
  a=$(OPENBLAS_NUM_THREADS=1 "$MPIEXEC" -n 2 "$sgemm" "$SGEMM_N" 10 | awk '/^sgemm_peak/ { print $NF }')
  b=$(OPENBLAS_NUM_THREADS=2 "$MPIEXEC" -n 1 --bind-to none "$sgemm" "$SGEMM_N" 10 | awk '/^sgemm_peak/ { print $NF }')
  [[ -n "$a" && -n "$b" ]] || die "sgemm_peak printed no rate"
  log "sgemm peak: 2 ranks x 1 thread $a GFLOP/s, 1 rank x 2 threads $b GFLOP/s"
  peak_2x1=$(awk -v x="$peak_2x1" -v y="$a" 'BEGIN { print (y > x ? y : x) }')
  peak_1x2=$(awk -v x="$peak_1x2" -v y="$b" 'BEGIN { print (y > x ? y : x) }')
  peak_log+="| $1 | $a | $b |"$'\n'
}
peak_log=""

# ---------------------------------------------------------------- one run
# timed TIMEFILE CMD...: runs CMD with bash's time (wall, user, system of CMD and
# every process it waited for) written to TIMEFILE as "wall user sys".
timed() {
  local tf=$1 rc; shift
  local TIMEFORMAT='%R %U %S'
  { time "$@" 2>&3 ; } 3>&2 2> "$tf.raw" && rc=0 || rc=$?  # CMD's stderr: the caller's
  tail -1 "$tf.raw" > "$tf"
  return $rc
}
# The two DDP processes, as torchrun would start them (see the header).
ddp_pair() {
  local log=$1 port=$2 r pids=() rc=0; shift 2
  for r in 0 1; do
    RANK=$r LOCAL_RANK=$r WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      "$@" > "$log.$r" 2>&1 & pids+=($!)
  done
  for r in 0 1; do wait "${pids[$r]}" || rc=1; done
  cat "$log.0" "$log.1" > "$log"
  return $rc
}
ddp_port=$(( 29000 + $$ % 900 ))

# run MODEL VARIANT ROUND STEPS WARMUP: appends
# "median_ms rss_sum_mib idle_sum_mib cpu_use probe_before_ns probe_after_ns
#  lowest_probe_ns highest_probe_ns probes" (before, during and after the run)
# to $work/MODEL.VARIANT.
run() {
  local model=$1 variant=$2 round=$3 steps=$4 warm=$5 L H C T B
  read -r L H C T B <<< "${dims[$model]}"
  local tag=$model.$variant.$round dir=$work/runs/$model.$variant.$round
  local set=(--set data.path="$data" --set model.n_layer="$L" --set model.n_head="$H" --set model.d_model="$C"
             --set model.seq_len="$T" --set train.batch_size="$B" --set train.steps=100000
             --set train.eval_every=0 --set train.log_every=1 --set train.run_dir="$dir"
             --set parallel.zero_stage="$ZERO_STAGE" --stop-after-step "$steps")
  local torch=("$PYTHON" "$reference" train "$data" --n-layer "$L" --n-head "$H" --d-model "$C" --seq-len "$T"
               --batch "$B" --steps "$steps" --parallel-info)
  local log=$work/$tag.log tf=$work/$tag.time
  rm -rf "$dir"
  local lat_before lat_after prober_pid="" p
  p=$(probe); echo "$p" > "$work/$tag.probes"; lat_before=${p#* }
  if (( probe_rt )); then prober "$work/$tag.probes" & prober_pid=$!; fi
  case $variant in
    ours-2x1)
      OPENBLAS_NUM_THREADS=1 timed "$tf" "$MPIEXEC" -n 2 "$trainer" "$input" "${set[@]}" \
        --set train.micro_batch=$((B / 2)) > "$log" 2>&1 ;;
    ours-1x2)
      OPENBLAS_NUM_THREADS=2 timed "$tf" "$MPIEXEC" -n 1 --bind-to none "$trainer" "$input" "${set[@]}" \
        --set train.micro_batch="$B" > "$log" 2>&1 ;;
    torch-2i1b)
      OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=1 timed "$tf" "${torch[@]}" --threads 2 > "$log" 2>&1 ;;
    torch-1i2b)
      OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=2 timed "$tf" "${torch[@]}" --threads 1 > "$log" 2>&1 ;;
    torch-2i2b)
      OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 OMP_WAIT_POLICY=PASSIVE timed "$tf" "${torch[@]}" --threads 2 \
        > "$log" 2>&1 ;;
    torch-ddp)
      ddp_port=$(( ddp_port + 1 ))
      OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 timed "$tf" ddp_pair "$log" "$ddp_port" "${torch[@]}" --threads 1 --ddp ;;
  esac || { [[ -z $prober_pid ]] || kill "$prober_pid"; die "$tag failed: $(tail -3 "$log")"; }
  if [[ -n $prober_pid ]]; then kill "$prober_pid"; wait "$prober_pid" 2>/dev/null || true; fi
  p=$(probe); echo "$p" >> "$work/$tag.probes"; lat_after=${p#* }
  local span
  span=$(awk '$2 ~ /^[0-9.]+$/ { if (n == 0 || $2 < lo) lo = $2; if ($2 > hi) hi = $2; n++ } END { printf "%s %s %d", lo, hi, n }' \
         "$work/$tag.probes")
  [[ $variant != ours-* ]] || check_process_memory "$log" > /dev/null
  local med rss idle cpu
  cpu=$(awk '{ if ($1 > 0) printf "%.2f", ($2 + $3) / $1 }' "$tf")
  # $tag.steps: "ms end" per step after the warm-up (end: the wall clock at the step's end)
  if [[ $variant == torch-* ]]; then
    awk -v w="$warm" '$1 == "step" && $2 > w && $5 == "ms" && $7 == "end" { print $6, $8 }' "$log" > "$work/$tag.steps"
    med=$(awk '{ print $1 }' "$work/$tag.steps" | median)
    rss=$(awk '$1 == "peak_rss_kib" { s += $2; n++ } END { if (n) printf "%.1f", s / 1024 }' "$log")
    idle=$(awk '$1 == "idle_rss_kib" { s += $2; n++ } END { if (n) printf "%.1f", s / 1024 }' "$log")
    [[ -f $work/parallel_info.$variant ]] ||
      { grep '^parallel_info ' "$log" | sed 's/^parallel_info //'; echo "  (this variant's environment: $(
        case $variant in torch-2i1b) echo "OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=1, --threads 2" ;;
                         torch-1i2b) echo "OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=2, --threads 1" ;;
                         torch-2i2b) echo "OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 OMP_WAIT_POLICY=PASSIVE, --threads 2" ;;
                         torch-ddp) echo "2 processes, each OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1, --threads 1, --ddp (gloo)" ;;
        esac))"; } > "$work/parallel_info.$variant"
  else
    awk -F, -v w="$warm" -v last="$steps" '
      NR == 1 { for (i = 1; i <= NF; i++) { if ($i == "step_ms") c = i; if ($i == "step_end_unix") e = i }; if (!c || !e) exit 1; next }
      $1 > w && $1 <= last { print $c, $e }' "$dir/metrics.csv" > "$work/$tag.steps" ||
      die "$dir/metrics.csv: no step_end_unix column (a trainer older than this script?)"
    med=$(awk '{ print $1 }' "$work/$tag.steps" | median)
    rss=$(rank_sum "process peak RSS per rank" "$log")
    idle=$(rank_sum "process RSS before the model per rank" "$log")
    flops[$model]=$(awk '/^compute per step:/ { print $4 }' "$log")
  fi
  (( $(wc -l < "$work/$tag.steps") == steps - warm )) || die "$tag: expected $((steps - warm)) timed steps, got $(wc -l < "$work/$tag.steps") ($log)"
  [[ -n "$med" && "$med" != nan && -n "$rss" && -n "$idle" && -n "$cpu" ]] ||
    die "$tag: no step times, RSS, idle RSS or CPU time in its output ($log, $tf)"
  echo "$med $rss $idle $cpu $lat_before $lat_after $span" >> "$work/$model.$variant"
  log "$tag: median step $med ms, peak RSS (sum) $rss MiB, idle $idle MiB, CPU use $cpu, core hand-off $lat_before/$lat_after ns (all probes: ${span// /, })"
}
declare -A flops
# rank_sum PREFIX LOG: the sum of the per-rank numbers after the last colon of
# LOG's last line starting with PREFIX (the end-of-run report's; the plan
# printed at start-up has some of these lines too).
rank_sum() {
  awk -F: -v p="$1" 'index($0, p) == 1 { n = split($NF, v, " "); s = 0; for (i = 1; i <= n; i++) s += v[i] }
                     END { if (n) printf "%.1f", s }' "$2"
}

variants=(ours-2x1 ours-1x2 torch-2i1b torch-1i2b torch-2i2b torch-ddp)
ours_variants=(ours-2x1 ours-1x2)
torch_variants=(torch-2i1b torch-1i2b torch-2i2b torch-ddp)
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
    if (( r % 2 == 0 )); then order=(); for ((i = ${#variants[@]} - 1; i >= 0; --i)); do order+=("${variants[$i]}"); done; fi
    for v in "${order[@]}"; do run "$model" "$v" "$r" "$(steps_of $model)" "$(warm_of $model)"; done
  done
done
measure_peak after

# Profiles (not timed runs): ours-2x1 with --profile.
declare -A profile
for model in quickstart big; do
  (( PROFILE )) || break
  read -r L H C T B <<< "${dims[$model]}"
  dir=$work/runs/$model.profile
  rm -rf "$dir"
  OPENBLAS_NUM_THREADS=1 "$MPIEXEC" -n 2 "$trainer" "$input" --profile --set data.path="$data" \
    --set model.n_layer="$L" --set model.n_head="$H" --set model.d_model="$C" --set model.seq_len="$T" \
    --set train.batch_size="$B" --set train.micro_batch=$((B / 2)) --set train.steps=100000 --set train.eval_every=0 \
    --set train.run_dir="$dir" --set parallel.zero_stage="$ZERO_STAGE" --stop-after-step "$(steps_of $model)" \
    > "$work/$model.profile.log" 2>&1 || die "$model profile run failed: $(tail -3 "$work/$model.profile.log")"
  check_process_memory "$work/$model.profile.log" > /dev/null
  [[ -f $dir/profile.txt ]] || die "$model: --profile wrote no $dir/profile.txt"
  profile[$model]=$(cat "$dir/profile.txt")
  log "$model: profile done"
done
wall=$(( $(date +%s) - start ))

# Core placement: the lowest probe of the whole benchmark and the far threshold.
lat_min=$(for model in quickstart big; do for v in "${variants[@]}"; do cat "$work/$model.$v"; done; done |
          awk '{ if (m == "" || $7 + 0 < m) m = $7 + 0 } END { print m }')
lat_far=$(awk -v m="$lat_min" -v f="$FAR_FACTOR" 'BEGIN { printf "%.1f", m * f }')
# placed FILE: FILE's records with the run's placement (near, far, mixed) appended.
placed() {
  awk -v t="$lat_far" '{ print $0, ($8 + 0 <= t ? "near" : ($7 + 0 > t ? "far" : "mixed")) }' "$1"
}
# steps_placed MODEL VARIANT: "ms placement" for every timed step of the variant's
# runs. A step [end - ms, end] is near when every probe from the last one before
# its start to the first one after its end is near, far when all are far, and
# mixed otherwise (the placement changed somewhere in that span).
steps_placed() {
  local r
  for ((r = 1; r <= $(rounds_of "$1"); ++r)); do
    awk -v t="$lat_far" '
      NR == FNR { pt[++np] = $1 + 0; pv[np] = $2 + 0; next }
      { e = $2 + 0; s = e - $1 / 1000; lo = 0; hi = 0
        for (i = 1; i <= np; i++) { if (pt[i] <= s) lo = i; if (pt[i] >= e && !hi) hi = i }
        if (!lo || !hi) { print $1, "mixed"; next }
        n = 0; f = 0
        for (i = lo; i <= hi; i++) if (pv[i] <= t) n++; else f++
        print $1, (f == 0 ? "near" : (n == 0 ? "far" : "mixed")) }' \
      "$work/$1.$2.$r.probes" "$work/$1.$2.$r.steps"
  done
}

# ---------------------------------------------------------------- report
fail=0
verdict() {  # verdict OK TEXT: a PASS or FAIL line
  if [[ $1 == 1 ]]; then echo "- PASS: $2"; else echo "- FAIL (below the goal): $2"; fail=1; fi
}
ge() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a >= b) }' && echo 1 || echo 0; }
report=$(mktemp "$work/report.XXXXXX")
results_tsv=$work/results.tsv; echo "$results_head" > "$results_tsv"; : > "$work/headline"
{
  echo "### Our trainer against PyTorch set up as its users would, and against the sgemm limit"
  echo
  echo "Run $(date -u '+%Y-%m-%d %H:%M UTC'), ${wall} s; commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown);"
  echo "machine: $(getconf _NPROCESSORS_ONLN) cores, $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo), $(awk '/^MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo); load average before the runs: $load_before;"
  echo "PyTorch $("$PYTHON" -c 'import torch; print(torch.__version__)') (Debian python3-torch, OpenBLAS, no MKL); ZeRO stage $ZERO_STAGE for ours."
  echo
  echo "Command: \`tests/bench/torch_parity_speed.sh$( ((check)) && echo " --check")${doc:+ --doc $doc}${readme:+ --readme $readme}${results:+ --results $results}${reproduce:+ --reproduce $reproduce} $trainer_src $sgemm_src $data $input $out\`"
  echo "(knobs: QS_STEPS=$QS_STEPS QS_ROUNDS=$QS_ROUNDS WARMUP=$WARMUP BIG_STEPS=$BIG_STEPS BIG_ROUNDS=$BIG_ROUNDS BIG_WARMUP=$BIG_WARMUP)"
  echo
  echo "Variants: ours-2x1 = 2 ranks x 1 thread; ours-1x2 = 1 rank, 2 BLAS threads; torch-2i1b = PyTorch 2 intra-op"
  echo "threads + 1 BLAS thread; torch-1i2b = 1 + 2; torch-2i2b = 2 + 2 with OMP_WAIT_POLICY=PASSIVE; torch-ddp ="
  echo "DistributedDataParallel over gloo, 2 processes x 1 thread. CPU use = (user + system) / wall of the whole run."
  echo "RSS = peak (VmHWM / ru_maxrss) summed over the run's processes (our ranks; PyTorch's processes), launchers"
  echo "excluded; idle = the same processes' RSS before the model exists (largest over runs)."
  echo
  echo "PyTorch's \`torch.__config__.parallel_info()\` in each setup (from its first run):"
  echo
  echo '```'
  for v in "${torch_variants[@]}"; do
    echo "[$v]"; grep -E 'get_num_threads|get_num_interop|omp_get_max_threads|OMP_NUM_THREADS :|parallel backend|MKL not|environment:' \
      "$work/parallel_info.$v" || true
  done
  echo '```'
  echo
  echo "sgemm peak (tests/bench/sgemm_peak, N=$SGEMM_N, best of 10; GFLOP/s, aggregate):"
  echo
  echo "| when | 2 ranks x 1 thread | 1 rank x 2 threads |"
  echo "|---|---|---|"
  printf '%s' "$peak_log"
  echo "| used (higher) | $peak_2x1 | $peak_1x2 |"
  echo
  echo "Core placement (tests/bench/core_latency: the one-way cache-line hand-off between the two CPUs, before and"
  echo "after every run$( ((probe_rt)) && echo " and every ${PROBE_EVERY} s during it, real-time" || echo "; not during runs: no real-time priority here")): lowest probe $lat_min ns;"
  echo "a probe above ${FAR_FACTOR}x that, $lat_far ns, is far. Runs:"
  for model in quickstart big; do for v in "${variants[@]}"; do placed "$work/$model.$v"; done; done |
    awk '{ n[$NF]++; p += $9; if ($8 + 0 > hi) hi = $8 + 0 }
         END { printf "%d near, %d far, %d mixed (placement changed during the run); %d probes, highest %.1f ns.\n", n["near"], n["far"], n["mixed"], p, hi }'
  echo "Each timed step is placed by the probes around it: near when every probe from the last one before the step"
  echo "to the first one after it is near, far when all are far, mixed otherwise. Near and far steps get their own"
  echo "median per variant; mixed steps count only in the medians over all runs."
  for model in quickstart big; do
    read -r L H C T B <<< "${dims[$model]}"
    f=${flops[$model]:-}
    [[ -n "$f" ]] || die "$model: no FLOP count from the trainer"
    echo
    echo "#### Model \`$model\`: L$L H$H C$C T$T, batch $B ($((B * T)) tokens per step), $f GFLOP per step; $(rounds_of $model) rounds of $(steps_of $model) steps, warm-up $(warm_of $model)"
    echo
    echo "| variant | step (median ms) | best run (ms) | near steps: median ms (steps) | far steps: median ms (steps) | tokens/s | GFLOP/s | step / FLOP floor | CPU use (per run) | peak RSS sum (MiB) | idle RSS sum (MiB) |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|"
    declare -A med=() rss=() bestrun=()
    step_split=""
    for v in "${variants[@]}"; do
      med[$v]=$(awk '{ print $1 }' "$work/$model.$v" | median)
      bestrun[$v]=$(awk '{ print $1 }' "$work/$model.$v" | sort -g | head -1)
      rss[$v]=$(awk '{ print $2 }' "$work/$model.$v" | sort -g | tail -1)
      idle=$(awk '{ print $3 }' "$work/$model.$v" | sort -g | tail -1)
      cpus=$(awk '{ printf "%s ", $4 }' "$work/$model.$v")
      steps_placed "$model" "$v" > "$work/$model.$v.placed"
      near_n=$(awk '$2 == "near"' "$work/$model.$v.placed" | wc -l)
      far_n=$(awk '$2 == "far"' "$work/$model.$v.placed" | wc -l)
      mixed_n=$(awk '$2 == "mixed"' "$work/$model.$v.placed" | wc -l)
      step_split+="$v $near_n/$far_n/$mixed_n; "
      near_med=-; (( near_n )) && near_med=$(awk '$2 == "near" { print $1 }' "$work/$model.$v.placed" | median)
      far_med=-; (( far_n )) && far_med=$(awk '$2 == "far" { print $1 }' "$work/$model.$v.placed" | median)
      nearcell="-"; (( near_n )) && nearcell=$(printf '%.1f (%d)' "$near_med" "$near_n")
      farcell="-"; (( far_n )) && farcell=$(printf '%.1f (%d)' "$far_med" "$far_n")
      peak=$peak_1x2; [[ $v == ours-2x1 || $v == torch-ddp ]] && peak=$peak_2x1
      awk -v v="$v" -v m="${med[$v]}" -v br="${bestrun[$v]}" -v nc="$nearcell" -v fc="$farcell" -v r="${rss[$v]}" -v i="$idle" -v c="$cpus" -v f="$f" -v p="$peak" -v tok=$((B * T)) 'BEGIN {
        floor = f / p * 1000
        printf "| %s | %.1f | %.1f | %s | %s | %.0f | %.1f | %.3f | %s| %.1f | %.1f |\n", v, m, br, nc, fc, tok / (m / 1000), f / (m / 1000), m / floor, c, r, i }'
      printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$model" "$v" "${med[$v]}" "${bestrun[$v]}" "$near_med" "$near_n" "$far_med" "$far_n" >> "$results_tsv"
    done
    best=ours-2x1; for v in "${ours_variants[@]}"; do [[ $(ge "${med[$best]}" "${med[$v]}") == 1 ]] && best=$v; done
    tbest=torch-2i1b; for v in "${torch_variants[@]}"; do [[ $(ge "${med[$tbest]}" "${med[$v]}") == 1 ]] && tbest=$v; done
    ratio=$(awk -v t="${med[$tbest]}" -v o="${med[$best]}" 'BEGIN { printf "%.2f", t / o }')
    # Paired per round: PyTorch's best setup / our best layout.
    paired=$(paste -d' ' <(awk '{ print $1 }' "$work/$model.$tbest") <(awk '{ print $1 }' "$work/$model.$best") |
             awk '{ print $1 / $2 }' | median)
    mem=$(awk -v a="${rss[ours-2x1]}" -v t="${rss[$tbest]}" 'BEGIN { printf "%.2f", a / t }')
    floor_ratio=$(awk -v m="${med[ours-2x1]}" -v f="$f" -v p="$peak_2x1" 'BEGIN { printf "%.3f", m / (f / p * 1000) }')
    awk -v m="$model" -v d="L$L C$C T$T, batch $B" -v b="$best" -v tb="$tbest" -v r="$ratio" -v o="${med[$best]}" \
        -v t="${med[$tbest]}" -v fr="$floor_ratio" -v mem="$mem" -v tok=$((B * T)) 'BEGIN {
      printf "- %s GPT (%s): %s %.0f tokens/s against %s %.0f: **%sx**; ours-2x1 step %sx the FLOP floor; peak RSS summed over our 2 ranks %sx PyTorch'"'"'s.\n",
        m, d, b, tok / (o / 1000), tb, tok / (t / 1000), r, fr, mem }' >> "$work/headline"
    echo
    echo "**Headline: $best (our best layout here) is ${ratio}x PyTorch's best setup ($tbest) in tokens/s** (paired per round, median: $(printf '%.2f' "$paired")x)."
    echo -n "Against each PyTorch setup:"
    for v in "${torch_variants[@]}"; do awk -v v="$v" -v t="${med[$v]}" -v o="${med[$best]}" 'BEGIN { printf " %s %.2fx;", v, t / o }'; done
    echo
    echo "Peak RSS summed over our ranks (ours-2x1) / summed over $tbest's processes: $mem; against torch-ddp (the mirror layout): $(awk -v a="${rss[ours-2x1]}" -v t="${rss[torch-ddp]}" 'BEGIN { printf "%.2f", a / t }')."
    if [[ $model == quickstart ]]; then
      verdict "$(ge "$ratio" 1.2)" "tokens/s at our best layout >= 1.2x PyTorch's best setup (issue 10): ${ratio}x"
      verdict "$(ge "$ratio" 2.0)" "tokens/s at our best layout >= 2.0x PyTorch's best setup (issue 23): ${ratio}x"
    else
      verdict "$(ge 1.25 "$floor_ratio")" "ours-2x1 step <= 1.25x the FLOP floor (issue 10): ${floor_ratio}x"
      verdict "$(ge 1.12 "$floor_ratio")" "ours-2x1 step <= 1.12x the FLOP floor (issue 23): ${floor_ratio}x"
      verdict "$(ge "$ratio" 1.35)" "tokens/s at our best layout >= 1.35x PyTorch's best setup (issue 23): ${ratio}x"
    fi
    verdict "$(ge 0.7 "$mem")" "peak RSS summed over our ranks <= 0.7x the sum over PyTorch's best setup's processes (issue 23): $mem"
    echo
    echo "Timed steps by placement (near/far/mixed): ${step_split% }"
    echo
    echo "Per-run medians (ms) in run order, each with its placement and the range of its core hand-off probes (ns): $(for v in "${variants[@]}"; do printf '%s: %s; ' "$v" "$(placed "$work/$model.$v" | awk '{ printf "%.1f (%s %s-%s, %d probes) ", $1, $NF, $7, $8, $9 }')"; done)"
    if (( PROFILE )); then
      echo
      echo "\`trainer --profile\` of ours-2x1 (a separate, untimed run of $(steps_of $model) steps):"
      echo
      echo '```'
      echo "${profile[$model]}"
      echo '```'
    fi
  done
  if [[ -n $reproduce ]]; then
    echo
    echo "#### Reproduction: this run against the earlier run (\`--reproduce $reproduce\`)"
    echo
    echo "The goal compares each variant within the same core placement, step by step: the median of its"
    echo "near steps against the earlier run's, and of its far steps, where both runs have at least"
    echo "MIN_PLACED=$MIN_PLACED steps in that placement; a variant with no placement in common fails. The median"
    echo "over all runs and the best run (the lowest of the runs' medians) are shown beside it: a setup that"
    echo "is slower in the far placement moves them with the share of its steps that landed there."
    echo
    echo "| model | variant | all runs: earlier (ms) | this run (ms) | deviation | best run: earlier | this run | deviation | near: earlier (steps) | this run (steps) | deviation | far: earlier (steps) | this run (steps) | deviation |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    worst=$(awk -F'\t' '
      function dev(a, b) { return (b - a) / a }
      function pct(d) { return sprintf("%+.1f%%", 100 * d) }
      function absv(d) { return d < 0 ? -d : d }
      function cellv(v, n) { return n > 0 ? sprintf("%.1f (%d)", v, n) : "- (0)" }
      FNR == 1 { next }
      NR == FNR { prev[$1 "\t" $2] = $0; next }
      { k = $1 "\t" $2
        if (!(k in prev)) { print "missing " k > "/dev/stderr"; bad = 1; next }
        split(prev[k], p, "\t")
        d = dev(p[3], $3); if (absv(d) > wm) { wm = absv(d); wmv = $1 " " $2 }
        e = dev(p[4], $4); if (absv(e) > wb) { wb = absv(e); wbv = $1 " " $2 }
        common = 0; nd = "-"; fd = "-"
        if (p[6] >= mp && $6 >= mp) { x = dev(p[5], $5); nd = pct(x); common++; if (absv(x) > wp) { wp = absv(x); wpv = $1 " " $2 " near" } }
        if (p[8] >= mp && $8 >= mp) { x = dev(p[7], $7); fd = pct(x); common++; if (absv(x) > wp) { wp = absv(x); wpv = $1 " " $2 " far" } }
        if (!common) { none = none " " $1 "/" $2 }
        printf "| %s | %s | %.1f | %.1f | %s | %.1f | %.1f | %s | %s | %s | %s | %s | %s | %s |\n",
          $1, $2, p[3], $3, pct(d), p[4], $4, pct(e), cellv(p[5], p[6]), cellv($5, $6), nd, cellv(p[7], p[8]), cellv($7, $8), fd }
      END { printf "WORST %.4f %s|%.4f %s|%.4f %s|%s\n", bad ? 9 : wp, wpv, wm, wmv, wb, wbv, none }' mp="$MIN_PLACED" "$reproduce" "$results_tsv")
    grep -v '^WORST' <<< "$worst"
    IFS='|' read -r wp_part wm_part wb_part none <<< "$(grep '^WORST' <<< "$worst" | sed 's/^WORST //')"
    read -r wp wpv <<< "$wp_part"; read -r wm wmv <<< "$wm_part"; read -r wb wbv <<< "$wb_part"
    echo
    ok=$(ge 0.10 "$wp"); [[ -z ${none// /} ]] || ok=0
    verdict "$ok" "every variant's step time within 10% of the earlier run's, within the same core placement: largest deviation $(awk -v w="$wp" 'BEGIN { printf "%.1f%%", 100 * w }') ($wpv)${none:+; no placement in common for:$none}"
    echo "- Beside it: medians over all runs, largest deviation $(awk -v w="$wm" 'BEGIN { printf "%.1f%%", 100 * w }') ($wmv); best runs, $(awk -v w="$wb" 'BEGIN { printf "%.1f%%", 100 * w }') ($wbv)."
  fi
} > "$report"

[[ -z $results ]] || { cp "$results_tsv" "$results"; log "results: $results"; }
if [[ "$out" == - ]]; then cat "$report"; else cp "$report" "$out"; log "report: $out"; fi
if [[ -n $doc ]]; then place "$doc" "$begin_mark" "$end_mark" "$report"; log "report placed in $doc"; fi
if [[ -n $readme ]]; then
  { echo "Measured by \`tests/bench/torch_parity_speed.sh\` on $(getconf _NPROCESSORS_ONLN) cores ($(date -u '+%Y-%m-%d'), commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)), against PyTorch $("$PYTHON" -c 'import torch; print(torch.__version__)') eager at the best of four setups (threads, BLAS threads, DDP):"
    cat "$work/headline"
    echo "Method, goals and the full report: [share/doc/benchmarks.md](share/doc/benchmarks.md)."; } > "$work/headline.md"
  place "$readme" "$hl_begin" "$hl_end" "$work/headline.md"; log "headline placed in $readme"
fi
if (( check && fail )); then echo "torch_parity_speed: a goal does not hold (see the report)" >&2; exit 1; fi
exit 0
