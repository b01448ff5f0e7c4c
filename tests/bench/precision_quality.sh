#!/usr/bin/env bash
# Mixed-precision quality: the quickstart model trained in fp32, fp16 and bf16
# for the same steps on the same data. Acceptance being measured: "on the
# quickstart model, fp16 and bf16 reach a validation loss within 2% of fp32
# after the same number of steps".
#
# Usage: tests/bench/precision_quality.sh [--check] TRAINER DATA INPUT [OUT]
#   TRAINER  trainer executable
#   DATA     Moby Dick HDF5 data set (share/data/fetch-mobydick.sh)
#   INPUT    inputs/quickstart.toml
#   OUT      markdown report path, or - for stdout (default: -)
#   --check  exit 1 when a 16-bit final validation loss is more than MAX_REL (0.02)
#            above or below fp32's
# Every run: NP (2) ranks, EVAL_EVERY (500) steps between validation passes on the
# first 512 windows, the final pass over the whole validation split. Extra --set
# arguments for every run go in SET (e.g. SET="train.steps=600" for a quick look).
# Wall time: about 4 minutes per mode on 2 idle cores (fp16/bf16 a little slower).
set -euo pipefail

check=0
if [[ "${1:-}" == "--check" ]]; then check=1; shift; fi
[[ $# -ge 3 ]] || { sed -n '2,18p' "$0"; exit 2; }
trainer=$1; data=$2; input=$3; out=${4:--}
NP=${NP:-2}
EVAL_EVERY=${EVAL_EVERY:-500}
MAX_REL=${MAX_REL:-0.02}
MPIEXEC=${MPIEXEC:-mpirun}
MODES=${MODES:-fp32 fp16 bf16}
if [[ -n "${WORK:-}" ]]; then mkdir -p "$WORK"; else WORK=$(mktemp -d); trap 'rm -rf "$WORK"' EXIT; fi
extra=()
for kv in ${SET:-}; do extra+=(--set "$kv"); done

for mode in $MODES; do
  start=$(date +%s)
  echo "precision_quality: $mode ..."
  "$MPIEXEC" -n "$NP" "$trainer" "$input" --set "data.path=$data" --set "precision.mode=$mode" \
    --set "train.eval_every=$EVAL_EVERY" --set "train.run_dir=$WORK/$mode" "${extra[@]}" \
    > "$WORK/$mode.log" 2>&1 || { cat "$WORK/$mode.log"; echo "$mode run failed" >&2; exit 1; }
  echo "$(( $(date +%s) - start ))" > "$WORK/$mode.seconds"
  tail -4 "$WORK/$mode.log"
done

report=$WORK/report.md
{
  echo "### Validation loss by step, quickstart model, $NP ranks"
  echo
  echo "Input \`$(basename "$input")\`; validation every $EVAL_EVERY steps on its first 512 windows, the last row on the whole split. Extra settings: \`${SET:-none}\`."
  echo
  header="| step |"; rule="|---|"
  for mode in $MODES; do header+=" $mode |"; rule+="---|"; done
  echo "$header"; echo "$rule"
  # step -> val per mode
  awk -F, -v modes="$MODES" '
    FNR == 1 { m++; next }
    $3 != "" { v[$1, m] = $3; steps[$1] = 1 }
    END {
      n = split(modes, names, " ")
      k = 0; for (s in steps) order[++k] = s + 0
      for (i = 1; i <= k; ++i) for (j = i + 1; j <= k; ++j) if (order[j] < order[i]) { t = order[i]; order[i] = order[j]; order[j] = t }
      for (i = 1; i <= k; ++i) { line = "| " order[i] " |"; for (j = 1; j <= n; ++j) line = line sprintf(" %.4f |", v[order[i], j]); print line }
    }' $(for mode in $MODES; do echo "$WORK/$mode/metrics.csv"; done)
  echo
  echo "| mode | final val loss | relative to fp32 | skipped steps | final loss scale | parameters + activations per rank (MiB, rank 0) | wall (s) |"
  echo "|---|---|---|---|---|---|---|"
} > "$report"
ref=""
bad=0
for mode in $MODES; do
  final=$(awk -F, 'NR > 1 && $3 != "" { v = $3 } END { printf "%.4f", v }' "$WORK/$mode/metrics.csv")
  skipped=$(awk -F, 'NR > 1 && $10 == 1 { n++ } END { print n + 0 }' "$WORK/$mode/metrics.csv")
  scale=$(awk -F, 'NR > 1 { s = $9 } END { print s }' "$WORK/$mode/metrics.csv")
  [[ -n "$ref" ]] || ref=$final
  rel=$(awk -v a="$final" -v b="$ref" 'BEGIN { printf "%+.2f%%", 100 * (a - b) / b }')
  pa=$(awk -F, '$1 == "0" { printf "%.3f", ($2 + $5) / 1048576 }' "$WORK/$mode/memory.csv")
  echo "| $mode | $final | $rel | $skipped | $scale | $pa | $(cat "$WORK/$mode.seconds") |" >> "$report"
  echo "$mode: final val $final ($rel vs ${MODES%% *})"
  if [[ $check -eq 1 ]] && ! awk -v a="$final" -v b="$ref" -v m="$MAX_REL" 'BEGIN { d = (a - b) / b; if (d < 0) d = -d; exit !(d <= m) }'; then
    echo "$mode is more than $MAX_REL from ${MODES%% *}" >&2; bad=1
  fi
done
if [[ "$out" == "-" ]]; then cat "$report"; else cp "$report" "$out"; echo "report: $out"; fi
exit $bad
