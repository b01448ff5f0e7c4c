#!/usr/bin/env bash
# How long training is blocked per checkpoint: checkpoint.async = true against
# synchronous checkpoints (issue 24).
# Usage: checkpoint_async.sh [--check] TRAINER DATA INPUT REPORT [NP] [ROUNDS]
# Model: INPUT with 12 blocks of width 256 (9.5 M parameters; fp32 master
# weights, Adam m and v = 114 MB of state per checkpoint), sequences of 16,
# batch 8, 70 steps at NP ranks (default 2) with a checkpoint every 10 steps
# (6 checkpoints before the one at the end of the run). Rounds (default 3) run
# the synchronous and the asynchronous run alternately, the order reversed
# every other round.
# Measured, per checkpoint but the last (a run's end waits for its last write
# whichever way it is written):
#   - blocked, by the loop's clock: metrics.csv (train.log_every = 1) gives each
#     step's elapsed_s (us resolution) and step_ms (the step alone); before row
#     s the loop spends gap(s) = (elapsed_s(s) - elapsed_s(s-1)) - step_ms(s)
#     outside the step (the boundary, the weights CRC, logging). A checkpoint of
#     step S is staged (async) or written (sync) in gap(S+1); an async write's
#     commit is taken in the gap of the row after the progress line it follows
#     in the log. The excess of those rows' gaps over the median gap of the
#     other rows, summed and divided by the checkpoints, is the time a checkpoint
#     blocks training by a clock that knows nothing of how the trainer accounts
#     for it (the log only says which rows);
#   - the whole cost of a checkpoint to training: the excess of every row's gap
#     over that median plus the extra step time of the steps an async write
#     overlaps (the writer thread shares the cores), per checkpoint;
#   - beside it, the trainer's own figure: sync, the "commit C s" of each
#     checkpoint line; async, "training blocked X s (staging, waiting)";
#   - the cost of the background write to the steps it overlaps: the median
#     step_ms of the 3 steps after each checkpoint against the median of the
#     other steps, in the async runs (the writer thread shares the cores);
#   - the sync write's bandwidth, for scale.
# --check fails when the async median blocked time is above 10% of the sync
# median (both by the loop's clock).
# Environment: MPIEXEC (mpiexec), WORK (scratch directory; default a fresh /tmp dir).
set -euo pipefail
die() { echo "checkpoint_async: $*" >&2; exit 1; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=bench_lib.sh
source "$here/bench_lib.sh"

check=0
if [[ "${1:-}" == "--check" ]]; then check=1; shift; fi
[[ $# -ge 4 ]] || die "usage: checkpoint_async.sh [--check] TRAINER DATA INPUT REPORT [NP] [ROUNDS]"
trainer=$1; data=$2; input=$3; report=$4; np=${5:-2}; rounds=${6:-3}
[[ -x "$trainer" ]] || die "no trainer executable at $trainer"
[[ -f "$data" ]] || die "no data set at $data"
[[ -f "$input" ]] || die "no input file $input"
[[ $np =~ ^[1-9][0-9]*$ && $rounds =~ ^[1-9][0-9]*$ ]] || die "NP and ROUNDS must be positive integers"
mpiexec=${MPIEXEC:-mpiexec}
bench_env
bench_workdir checkpoint_async
bench_private_trainer

steps=${STEPS:-70} every=${EVERY:-10}
model=(--set model.n_layer="${LAYERS:-12}" --set model.d_model="${WIDTH:-256}" --set model.n_head=8
       --set model.seq_len=16 --set train.steps="$steps" --set train.batch_size=8 --set train.micro_batch=$((8 / np > 0 ? 8 / np : 1))
       --set train.eval_every=0 --set train.log_every=1 --set checkpoint.every_steps="$every" --set checkpoint.keep_last=2)
last=$(( (steps - 1) / every * every ))  # the last checkpoint before the run's end
(( last >= every )) || die "STEPS ($steps) must allow a checkpoint before the last step (EVERY $every)"

# rows LOG LAST: the rows (steps) whose gap holds a checkpoint's work in the
# trainer's log: S+1 for each checkpoint S <= LAST, and for each commit line of
# a checkpoint S <= LAST the step after the progress line before it.
rows() {
  awk -v last="$2" '/^step +[0-9]+\/[0-9]+ \|/ { split($0, a, /[ \/]+/); cur = a[2] }
    /^checkpoint step [0-9]+: / { s = $3; sub(":", "", s); if (s + 0 > last) next
      if ($0 !~ / staged /) print cur + 1                       # the write (sync) or the commit (async)
      if ($0 ~ / staged / || $0 !~ /in the background/) print s + 1 }' "$1" | sort -un
}
# excess CSV LAST ROWS: "blocked whole baseline" in ms: the gaps of ROWS above the
# median gap of the other rows 2..LAST+1, summed; every such row's excess,
# summed; that median.
excess() {
  awk -F, -v last="$2" -v rowlist="$3" 'BEGIN { n = split(rowlist, r, " "); for (i = 1; i <= n; i++) mark[r[i]] = 1 }
    NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
    { s = $(col["step"]); e = $(col["elapsed_s"]); m = $(col["step_ms"])
      if (s > 1 && s <= last + 1) { gap[s] = (e - pe) * 1000 - m; if (!(s in mark)) v[++k] = gap[s] }
      pe = e }
    END { if (k < 3) exit 1
          for (i = 2; i <= k; i++) { x = v[i]; j = i - 1; while (j > 0 && v[j] > x) { v[j + 1] = v[j]; j-- } v[j + 1] = x }
          med = (k % 2) ? v[(k + 1) / 2] : (v[k / 2] + v[k / 2 + 1]) / 2
          for (s in gap) { x = gap[s] - med; if (s in mark) blocked += x; if (x > 0) whole += x }
          printf "%.3f %.3f %.3f\n", blocked, whole, med }' "$1"
}

sync_blocked=() async_blocked=() sync_own=() async_own=() sync_mbs=() after=() other=() async_whole=()
n_ckpt=$(( last / every ))
for ((r = 1; r <= rounds; ++r)); do
  order=(sync async); (( r % 2 == 0 )) && order=(async sync)
  for mode in "${order[@]}"; do
    run=$work/run_${mode}_$r log=$work/run_${mode}_$r.log
    rm -rf "$run"
    extra=(); [[ $mode == async ]] && extra=(--set checkpoint.async=true)
    "$mpiexec" -n "$np" "$trainer" "$input" --set data.path="$data" --set train.run_dir="$run" "${model[@]}" "${extra[@]}" \
      > "$log" 2>&1 || { tail -20 "$log"; die "$mode run $r failed"; }
    marked=$(rows "$log" "$last" | tr '\n' ' ')
    [[ $(wc -w <<< "$marked") -ge $n_ckpt ]] || die "$mode run $r: found the rows of fewer than $n_ckpt checkpoints in $log"
    read -r sum whole base <<< "$(excess "$run/metrics.csv" "$last" "$marked")" ||
      die "$mode run $r: too few rows in $run/metrics.csv"
    per=$(awk -v s="$sum" -v n="$n_ckpt" 'BEGIN { printf "%.2f", s / n }')
    if [[ $mode == sync ]]; then
      sync_blocked+=("$per")
      while read -r c rate; do sync_own+=("$(awk -v c="$c" 'BEGIN { printf "%.2f", c * 1000 }')"); sync_mbs+=("$rate"); done < <(
        awk -v last="$last" '/^checkpoint step [0-9]*: / { s = $3; sub(":", "", s)
          if (s + 0 <= last) { match($0, /commit [0-9.]+ s/); c = substr($0, RSTART + 7, RLENGTH - 9)
                               match($0, /= [0-9.]+ MB\/s/); b = substr($0, RSTART + 2, RLENGTH - 7); print c, b } }' "$log")
    else
      async_blocked+=("$per")
      slow=$(awk -F, -v every="$every" -v last="$last" 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
        { s = $(col["step"]); if (s <= every || s > last + every) next; k = (s - 1) % every
          if (k >= 1 && k <= 3) a[++na] = $(col["step_ms"]); else if (k >= 5) o[++no] = $(col["step_ms"]) }
        END { for (i = 1; i <= na; i++) sa += a[i]; for (i = 1; i <= no; i++) so += o[i]
              printf "%.3f", (na && no) ? 3 * (sa / na - so / no) : 0 }' "$run/metrics.csv")
      async_whole+=("$(awk -v w="$whole" -v n="$n_ckpt" -v sl="$slow" 'BEGIN { printf "%.2f", w / n + sl }')")
      grep -q 'in the background | training blocked' "$log" || die "async run $r: no background checkpoint in $log"
      while read -r b; do async_own+=("$(awk -v b="$b" 'BEGIN { printf "%.2f", b * 1000 }')"); done < <(
        awk -v last="$last" '/in the background \| training blocked/ { s = $3; sub(":", "", s)
          if (s + 0 <= last) { match($0, /training blocked [0-9.]+ s/); print substr($0, RSTART + 17, RLENGTH - 19) } }' "$log")
      while read -r kind ms; do
        if [[ $kind == after ]]; then after+=("$ms"); else other+=("$ms"); fi
      done < <(awk -F, -v every="$every" -v last="$last" 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
        { s = $(col["step"]); if (s <= every || s > last + every) next
          k = (s - 1) % every; print (k >= 1 && k <= 3 ? "after" : (k >= 5 ? "other" : "skip")), $(col["step_ms"]) }' \
        "$run/metrics.csv" | grep -v '^skip')
    fi
    echo "round $r $mode: blocked per checkpoint (loop's clock) $per ms (rows $marked; baseline gap $base ms)" >&2
  done
done

med() { printf '%s\n' "$@" | median; }
s_med=$(med "${sync_blocked[@]}") a_med=$(med "${async_blocked[@]}")
ratio=$(awk -v a="$a_med" -v s="$s_med" 'BEGIN { printf "%.3f", a / s }')
state_mb=$(sed -n 's/^checkpoint step [0-9]*: .* | \([0-9.]*\) MB in .*/\1/p' "$work/run_sync_1.log" | head -1)
pass=$(awk -v r="$ratio" 'BEGIN { print (r <= 0.10) ? 1 : 0 }')
{
  echo "### Training blocked per checkpoint: checkpoint.async against synchronous"
  echo
  echo "Run $(date -u '+%Y-%m-%d %H:%M UTC'); $(getconf _NPROCESSORS_ONLN) cores, $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo); $np ranks;"
  echo "state per checkpoint $state_mb MB (12 blocks x 256, fp32 master weights and Adam moments); $steps steps, a checkpoint every"
  echo "$every ($n_ckpt measured per run, the one at the run's end excluded); $rounds rounds, sync and async alternating."
  echo "Command: \`tests/bench/checkpoint_async.sh$( ((check)) && echo " --check") $trainer_src $data $input $report $np $rounds\`"
  echo
  echo "| | median (ms) | per run or per checkpoint (ms) |"
  echo "|---|---|---|"
  echo "| sync: blocked per checkpoint, loop's clock | $s_med | ${sync_blocked[*]} |"
  echo "| async: blocked per checkpoint, loop's clock | $a_med | ${async_blocked[*]} |"
  echo "| sync: the trainer's commit time | $(med "${sync_own[@]}") | ${sync_own[*]} |"
  echo "| async: the trainer's \"training blocked\" (staging + waiting) | $(med "${async_own[@]}") | ${async_own[*]} |"
  echo "| async: whole cost to training per checkpoint (every gap's excess + the overlapped steps' extra time) | $(med "${async_whole[@]}") | ${async_whole[*]} |"
  echo "| async: step_ms of the 3 steps after a checkpoint (write in flight) | $(med "${after[@]}") | ${#after[@]} steps |"
  echo "| async: step_ms of the other steps | $(med "${other[@]}") | ${#other[@]} steps |"
  echo
  echo "Sync write bandwidth (trainer's line): median $(med "${sync_mbs[@]}") MB/s."
  echo
  if (( pass )); then
    echo "- PASS: async blocked time per checkpoint <= 10% of the synchronous write's (loop's clock): ${ratio}x"
  else
    echo "- FAIL (below the goal): async blocked time per checkpoint <= 10% of the synchronous write's (loop's clock): ${ratio}x"
  fi
} > "$work/report.md"
cat "$work/report.md"
[[ "$report" == - ]] || cp "$work/report.md" "$report"
(( check && !pass )) && exit 1
exit 0
