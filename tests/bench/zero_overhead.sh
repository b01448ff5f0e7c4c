#!/usr/bin/env bash
# Benchmark: the time of one training step under ZeRO stages 0-3 on 2 ranks.
# Acceptance being measured: "with overlap on 2 ranks, a step of ZeRO stage 2
# costs at most 1.1x a step of stage 0".
# Variants (ORDER): 0, 1, 2, 3 = that ZeRO stage (2 and 3 with parallel.overlap=true);
# 2w, 3w = stage 2 or 3 with parallel.overlap=false (each gradient reduction waited
# for: what overlap buys). A trainer without the parallel.overlap key runs 2 and 3
# with its built-in behaviour, and the w variants are skipped.
#
# Usage: tests/bench/zero_overhead.sh [--check] [TRAINER [DATA [INPUT [OUT]]]]
#   TRAINER  trainer executable      (default: $BUILD_DIR/trainer, BUILD_DIR defaults to <repo>/build)
#   DATA     Moby Dick HDF5 data set (default: <dir of TRAINER>/data/mobydick.h5); fetched with
#            share/data/fetch-mobydick.sh and the trainer-data next to TRAINER (or $TRAINER_DATA)
#            when it does not exist
#   INPUT    input file              (default: <repo>/inputs/quickstart.toml)
#   OUT      markdown report path, or - for stdout (default: -)
#   --check  exit 1 when the stage-2 / stage-0 ratio of any measured model exceeds MAX_RATIO
#            (without it the exit code only says whether the measurement ran)
# An empty argument means its default.
#
# Method (timing on a shared 2-core machine is noisy, so variants are interleaved):
#   - every run: NP=2 ranks, train.micro_batch = batch_size / 2 (one micro-batch per rank
#     per step), train.eval_every=0 (only the final evaluation), train.log_every=1 (one
#     metrics.csv row per step);
#   - per-step time = difference of consecutive elapsed_s; steps 1..WARMUP are dropped
#     (warm-up) and so is the last step (its elapsed_s includes the final evaluation);
#   - per run: the median step time; per variant: the median over its runs, and the ratio
#     to stage 0; also the median over rounds of (variant / stage 0 of the same round);
#   - rounds: the variants in ORDER, then reversed in the next round (0 2 1 3 2w,
#     2w 3 1 2 0, ...), so stage 0 and stage 2 alternate A B A B and no variant always
#     runs first;
#   - comm bytes per step per rank: median of metrics.csv comm_bytes (rank 0's payload, training
#     steps only); peak memory: the largest "total" of the trainer's peak-memory table.
#
# Environment knobs (defaults in brackets):
#   NP [2]  STAGES/ORDER ["0 2 1 3 2w"]  WARMUP [5]  MAX_RATIO [1.1]  MPIEXEC [mpirun]
#   STEPS [60] ROUNDS [5]          quickstart model as in INPUT
#   BIG [1]  BIG_STEPS [40] BIG_ROUNDS [3] BIG_SET ["model.n_layer=8 model.d_model=256"]
#            a larger model where communication matters more (BIG=0 skips it)
#   WORK [mktemp -d]  scratch directory for runs, logs and a copy of TRAINER (kept when set,
#                     removed otherwise)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
check=0
if [[ "${1:-}" == "--check" ]]; then check=1; shift; fi
trainer=${1:-${BUILD_DIR:-$root/build}/trainer}
data=${2:-$(dirname "$trainer")/data/mobydick.h5}
input=${3:-$root/inputs/quickstart.toml}
out=${4:--}

NP=${NP:-2}
ORDER=${STAGES:-${ORDER:-0 2 1 3 2w}}
WARMUP=${WARMUP:-5}
MAX_RATIO=${MAX_RATIO:-1.1}
MPIEXEC=${MPIEXEC:-mpirun}
STEPS=${STEPS:-60}
ROUNDS=${ROUNDS:-5}
BIG=${BIG:-1}
BIG_STEPS=${BIG_STEPS:-40}
BIG_ROUNDS=${BIG_ROUNDS:-3}
BIG_SET=${BIG_SET:-model.n_layer=8 model.d_model=256}

die() { echo "zero_overhead: $*" >&2; exit 2; }
log() { echo "zero_overhead: $*" >&2; }
# shellcheck source=tests/bench/bench_lib.sh
source "$root/tests/bench/bench_lib.sh"
# shellcheck source=tests/support/process_memory.sh
source "$root/tests/support/process_memory.sh"  # log_and_reports: the log and the RUN_DIR/report.txt it names

[[ -x "$trainer" ]] || die "no trainer executable at $trainer"
[[ -f "$input" ]] || die "no input file $input"
read -r -a order <<< "$ORDER"
[[ " ${order[*]} " == *" 0 "* ]] || die "ORDER must contain stage 0 (the reference)"
for v in "${order[@]}"; do [[ $v =~ ^([0-3]|[23]w)$ ]] || die "unknown variant '$v' in ORDER (0 1 2 3 2w 3w)"; done
(( STEPS >= WARMUP + 2 && BIG_STEPS >= WARMUP + 2 )) || die "STEPS must exceed WARMUP + 1"

# The data set: fetch and convert it if it is absent.
if [[ ! -f "$data" ]]; then
  tool=${TRAINER_DATA:-$(dirname "$trainer")/trainer-data}
  [[ -x "$tool" ]] || die "$data does not exist and there is no trainer-data at $tool to make it"
  log "data set $data is absent; fetching it"
  "$root/share/data/fetch-mobydick.sh" "$tool" "$data" >&2
fi

bench_env

bench_workdir zero_overhead
bench_private_trainer

# Does this trainer know parallel.overlap? (--plan checks the config and exits.)
has_overlap=0
if "$trainer" --plan --ranks "$NP" "$input" --set data.path="$data" --set parallel.overlap=true >/dev/null 2>&1; then
  has_overlap=1
else
  log "this trainer has no parallel.overlap key: stages 2 and 3 run as built, w variants skipped"
  kept=(); for v in "${order[@]}"; do [[ $v == *w ]] || kept+=("$v"); done; order=("${kept[@]}")
fi

# micro_batch = batch_size / NP: one micro-batch per rank per step.
bench_micro_batch "$input" "$NP"


results=$work/results.txt   # model variant round median_step_s steady_steps comm_bytes peak_mib load1
: > "$results"
commands=()

# run_one MODEL VARIANT ROUND STEPS [--set overrides...]
run_one() {
  local model=$1 variant=$2 round=$3 steps=$4; shift 4
  local stage=${variant%w} ov=()
  if (( has_overlap && stage >= 2 )); then
    if [[ $variant == *w ]]; then ov=(--set parallel.overlap=false); else ov=(--set parallel.overlap=true); fi
  fi
  local dir=$work/$model-s$variant-r$round
  rm -rf "$dir"
  local load; load=$(cut -d' ' -f1 /proc/loadavg)
  local cmd=("$MPIEXEC" -n "$NP" "$trainer" "$input" --set data.path="$data" --set train.run_dir="$dir"
             --set train.steps="$steps" --set train.eval_every=0 --set train.log_every=1
             --set train.micro_batch="$micro" --set parallel.zero_stage="$stage" "${ov[@]}" "$@")
  if ! timeout 900 "${cmd[@]}" > "$dir.log" 2>&1; then
    cat "$dir.log" >&2; die "trainer failed: ${cmd[*]}"
  fi
  [[ $round -eq 1 ]] && commands+=("${cmd[*]}")
  local csv=$dir/metrics.csv
  [[ -s "$csv" ]] || die "no metrics.csv in $dir"
  local times; times=$(steady_step_times "$csv" "$WARMUP" "$steps") || exit 2
  local n=$((steps - WARMUP - 1))
  local med; med=$(median <<< "$times")
  local comm; comm=$(awk -F, 'NR > 1 { print $8 }' "$csv" | median)
  local peak; peak=$(awk '/^peak memory per rank/ { t = 1; next }
    t && $1 ~ /^[0-9]+$/ && NF >= 9 { if ($NF > m) m = $NF; next } t && $1 != "rank" { t = 0 }
    END { print (m == "" ? "nan" : m) }' <(log_and_reports "$dir.log"))
  echo "$model $variant $round $med $n $comm $peak $load" >> "$results"
  log "$(printf '%-10s variant %-2s round %s: median step %.1f ms over %d steps (load %s)' \
    "$model" "$variant" "$round" "$(awk -v x="$med" 'BEGIN { print x * 1000 }')" "$n" "$load")"
}

# run_model MODEL STEPS ROUNDS [--set overrides...]
run_model() {
  local model=$1 steps=$2 rounds=$3; shift 3
  local r s seq
  for (( r = 1; r <= rounds; r++ )); do
    if (( r % 2 )); then seq=("${order[@]}"); else seq=(); for s in "${order[@]}"; do seq=("$s" "${seq[@]}"); done; fi
    for s in "${seq[@]}"; do run_one "$model" "$s" "$r" "$steps" "$@"; done
  done
}

# The knobs given in the environment, to show in the report's command line.
knobs=""
for v in NP STAGES ORDER WARMUP MAX_RATIO STEPS ROUNDS BIG BIG_STEPS BIG_ROUNDS BIG_SET; do
  if [[ -n "$(printenv "$v" || true)" ]]; then knobs+="$v=$(printf '%q' "$(printenv "$v")") "; fi
done
start_date=$(date -u '+%Y-%m-%d %H:%M UTC')
start_load=$(cut -d' ' -f1-3 /proc/loadavg)
start_s=$SECONDS
models=("quickstart")
run_model quickstart "$STEPS" "$ROUNDS"
if [[ "$BIG" == 1 ]]; then
  big_args=(); for kv in $BIG_SET; do big_args+=(--set "$kv"); done
  models+=("big")
  run_model big "$BIG_STEPS" "$BIG_ROUNDS" "${big_args[@]}"
fi
wall=$(( SECONDS - start_s ))
end_load=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- report
cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)  # nproc obeys OMP_NUM_THREADS, set to 1 above
cpu=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=$(git -C "$root" status --porcelain -- src kernels io 2>/dev/null | grep -q . && echo " (src/kernels/io modified)" || true)
bin_sum=$(sha256sum "$trainer" | cut -c1-12)
bin_date=$(date -u -r "$trainer" '+%Y-%m-%d %H:%M UTC')
fail=0
report() {
  local m
  echo "## ZeRO step-time overhead, $NP ranks"
  echo
  echo "- **Date:** $start_date; wall time of the benchmark ${wall} s"
  echo "- **Machine:** $cores cores (nproc), $cpu; load average (1/5/15 min) $start_load at start, $end_load at end"
  echo "- **Binary:** \`$trainer_src\` (sha256 $bin_sum…, built $bin_date; run from a copy in the scratch directory); source tree at $commit$dirty"
  local shown; shown=$(printf ' %q' "$@")
  echo "- **Command:** \`${knobs}tests/bench/zero_overhead.sh$shown\`"
  echo "- **Method:** $NP ranks, train.micro_batch = $micro (batch_size $batch / $NP ranks: one micro-batch per rank per step)," \
       "per-step time from consecutive \`elapsed_s\` in metrics.csv, steps 1-$WARMUP (warm-up) and the last step" \
       "(final evaluation) dropped; variants interleaved in rounds (order \`${order[*]}\`, reversed every other round)."
  if (( has_overlap )); then
    echo "  Stages 2 and 3 run with \`--set parallel.overlap=true\`; variants 2w and 3w with \`parallel.overlap=false\`" \
         "(each gradient reduce-scatter waited for before backward continues)."
  else
    echo "  This trainer has no \`parallel.overlap\` key: stages 2 and 3 run with its built-in behaviour."
  fi
  echo "  Median step = median over runs of each run's median step. Paired ratio = median over rounds of" \
       "(variant / stage 0 of the same round), with its min-max. Comm = payload per training step of rank 0 (bytes handed to collectives);" \
       "peak = largest per-rank total of the tracked allocator."
  for m in "${models[@]}"; do
    local steps=$STEPS rounds=$ROUNDS extra=""
    if [[ $m == big ]]; then steps=$BIG_STEPS; rounds=$BIG_ROUNDS; extra=" --set ${BIG_SET// / --set }"; fi
    echo
    echo "### Model \`$m\`: $(basename "$input")$extra, $steps steps, $rounds rounds, $((steps - WARMUP - 1)) steady steps per run"
    echo
    echo "Trainer command (stage 0, round 1):"
    echo
    echo '```'
    local c; for c in "${commands[@]}"; do [[ $c == *"run_dir=$work/$m-s0-r1 "* ]] && { echo "$c"; break; }; done
    echo '```'
    echo
    echo "| ZeRO stage | overlap | median step (ms) | per-run medians (ms) | ratio to stage 0 | paired ratio (min-max) | comm per step per rank (MB) | peak memory per rank (MiB) |"
    echo "|---|---|---|---|---|---|---|---|"
    awk -v m="$m" -v hv="$has_overlap" '
      $1 != m { next }
      { key = $2; runs[key] = runs[key] sprintf("%s%.1f", (nrun[key]++ ? " " : ""), $4 * 1000); t[key, $3] = $4
        comm[key] = $6; peak[key] = $7; if (!(key in seen)) { seen[key] = 1; stages[++ns] = key } if ($3 > nr) nr = $3 }
      function med(a, n,   i, j, x) { for (i = 2; i <= n; i++) { x = a[i]; for (j = i - 1; j >= 1 && a[j] > x; j--) a[j + 1] = a[j]; a[j + 1] = x }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
      END {
        for (k = 1; k <= ns; k++) { s = stages[k]; n = 0; for (r = 1; r <= nr; r++) if ((s, r) in t) v[++n] = t[s, r]; M[s] = med(v, n) }
        # rows in the order 0 1 2 2w 3 3w
        nl = split("0 1 2 2w 3 3w", list, " ")
        for (li = 1; li <= nl; li++) {
          s = list[li]
          if (!(s in M)) continue
          n = 0; lo = 1e9; hi = 0
          for (r = 1; r <= nr; r++) if (((s "", r) in t) && (("0", r) in t)) { q = t[s "", r] / t["0", r]; p[++n] = q; if (q < lo) lo = q; if (q > hi) hi = q }
          pr = n ? sprintf("%.3f (%.3f-%.3f)", med(p, n), lo, hi) : "-"
          ov = s ~ /w$/ ? "off" : (s + 0 >= 2 ? (hv ? "on" : "built-in") : "-")
          printf "| %d | %s | %.1f | %s | %.3f | %s | %.3f | %.2f |\n", s + 0, ov, M[s ""] * 1000, runs[s ""], M[s ""] / M["0"], pr, comm[s ""] / 1e6, peak[s ""]
        }
      }' "$results"
  done
  echo
  echo "### Acceptance: stage 2 step <= $MAX_RATIO x stage 0 step"
  echo
  for m in "${models[@]}"; do
    local line
    line=$(awk -v m="$m" -v lim="$MAX_RATIO" '
      $1 == m && ($2 == "0" || $2 == "2") { v[$2, ++n[$2]] = $4 }
      function med(a, k,   i, j, x) { for (i = 2; i <= k; i++) { x = a[i]; for (j = i - 1; j >= 1 && a[j] > x; j--) a[j + 1] = a[j]; a[j + 1] = x }
        return k % 2 ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2 }
      END {
        if (!n[0] || !n[2]) { print "SKIP stage 0 or stage 2 not measured"; exit }
        for (i = 1; i <= n[0]; i++) a[i] = v[0, i]; m0 = med(a, n[0]); delete a
        for (i = 1; i <= n[2]; i++) a[i] = v[2, i]; m2 = med(a, n[2])
        r = m2 / m0
        printf "%s %.1f ms / %.1f ms = %.3f\n", (r <= lim ? "HOLDS" : "FAILS"), m2 * 1000, m0 * 1000, r }' "$results")
    [[ $line == FAILS* ]] && fail=1
    echo "- \`$m\`: ${line%% *}: stage 2 / stage 0 = ${line#* } (limit $MAX_RATIO)"
  done
  echo
  echo "<details><summary>Every run (model, variant, round, median step ms, steady steps, 1-min load average before the run)</summary>"
  echo
  echo "| model | variant | round | median step (ms) | steps | load |"
  echo "|---|---|---|---|---|---|"
  awk '{ printf "| %s | %s | %s | %.1f | %s | %s |\n", $1, $2, $3, $4 * 1000, $5, $8 }' "$results"
  echo
  echo "</details>"
}
args=("$@")
[[ $check == 1 ]] && args=(--check "${args[@]}")
if [[ "$out" == - ]]; then
  report "${args[@]}"
else
  mkdir -p "$(dirname "$out")"
  report "${args[@]}" > "$out"
  cat "$out"
  log "report written to $out"
fi
if [[ $check == 1 && $fail == 1 ]]; then
  log "stage 2 step exceeds $MAX_RATIO x stage 0 step"
  exit 1
fi
exit 0
