#!/usr/bin/env bash
# Benchmark: the seed's techniques table (issue 48) on a DistilBERT-shaped
# encoder classifier: fp32, bf16, 2 ranks data parallel, ZeRO stages 1-3 and
# recompute none / sqrt / budget, each row with its step time, its process
# memory (VmHWM, max over ranks) against the plan's predicted process peak,
# its planned and measured activations, and the command that ran it.
#
# Usage: tests/bench/encoder_techniques.sh BUILD_DIR [OUT]
#   BUILD_DIR  a build tree with trainer and trainer-data
#   OUT        markdown table path, or - for stdout (default: -)
#
# The model: model.layout = "distilbert" (post-LayerNorm blocks, embedding
# LayerNorm, pre-classifier + ReLU + dropout 0.1 + classifier, [CLS] pooling),
# DistilBERT's depth (N_LAYER = 6) and vocabulary (30,522: the labelled-text
# fixture of the e2e tests, tests/e2e/trainer/make_text_fixture.sh, imported with
# `--tokenizer word-hash --buckets 30520`), and, so that a row takes seconds on
# 2 shared cores, a narrower width and a shorter sequence than DistilBERT's
# 768 / 12 heads / 512 tokens (D_MODEL, N_HEAD, SEQ_LEN below; the full shape is
# inputs/distilbert_finetune.toml). Global batch BATCH samples per step: one
# micro-batch of BATCH at 1 rank, of BATCH / 2 per rank at 2 ranks.
#
# Rows (name: ranks, settings; the reference its step time is compared with):
#   fp32        1 rank, fp32                                   (itself)
#   bf16        1 rank, precision.mode = "bf16"                (fp32)
#   dp2         2 ranks, data parallel, ZeRO 0, recompute none (fp32)
#   zero1..3    2 ranks, parallel.zero_stage = 1..3            (dp2)
#   sqrt        2 ranks, recompute.policy = "sqrt"             (dp2 = recompute none)
#   budget      2 ranks, recompute.policy = "budget", recompute.budget_mb = BUDGET_MB,
#               by default halfway between the plan's activations under "full"
#               and "sqrt" (so that its schedule is neither) (dp2)
# Method (timing on a shared 2-core machine is noisy): ROUNDS rounds, the rows in
# order, then reversed in the next round (interleaved); per run the median of
# step_ms (metrics.csv: rank 0's wall time of the training step itself) over
# steps WARMUP+1..STEPS; per row the median over rounds, and the median over
# rounds of the ratio to its reference's run of the same round (paired). Memory
# from the run directory: process_memory.csv (vmhwm, predicted_process_peak:
# max over ranks, largest over rounds) and memory.csv (activations: the plan
# row, and activations_measured, the model's measured high-water, max over
# ranks). Every run's load average is recorded; the report gives lscpu's model
# name, the load before and after, and the wall time.
#
# Environment knobs (defaults in brackets):
#   N_LAYER [6]  D_MODEL [128]  N_HEAD [2]  SEQ_LEN [128]  BATCH [16]  STEPS [10]
#   WARMUP [3]  ROUNDS [2]  ROWS ["fp32 bf16 dp2 zero1 zero2 zero3 sqrt budget"]  BUDGET_MB [see budget]
#   MPIEXEC [mpirun]  WORK [mktemp -d] (kept when set)
# Wall time: about 6 minutes on 2 idle cores with the defaults.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
[[ $# -ge 1 ]] || { sed -n '2,45p' "$0"; exit 2; }
build=$1; out=${2:--}
trainer=$build/trainer
trainer_data=$build/trainer-data

N_LAYER=${N_LAYER:-6}
D_MODEL=${D_MODEL:-128}
N_HEAD=${N_HEAD:-2}
SEQ_LEN=${SEQ_LEN:-128}
BATCH=${BATCH:-16}
STEPS=${STEPS:-10}
WARMUP=${WARMUP:-3}
ROUNDS=${ROUNDS:-2}
ROWS=${ROWS:-fp32 bf16 dp2 zero1 zero2 zero3 sqrt budget}
MPIEXEC=${MPIEXEC:-mpirun}

die() { echo "encoder_techniques: $*" >&2; exit 2; }
log() { echo "encoder_techniques: $*" >&2; }
# shellcheck source=tests/bench/bench_lib.sh
source "$root/tests/bench/bench_lib.sh"

[[ -x "$trainer" ]] || die "no trainer executable at $trainer"
[[ -x "$trainer_data" ]] || die "no trainer-data executable at $trainer_data"
(( BATCH % 2 == 0 )) || die "BATCH must be even (2 ranks)"
(( STEPS >= WARMUP + 1 )) || die "STEPS must exceed WARMUP"
read -r -a rows <<< "$ROWS"
for r in "${rows[@]}"; do [[ $r =~ ^(fp32|bf16|dp2|zero[123]|sqrt|budget)$ ]] || die "unknown row '$r'"; done

bench_env
export OMPI_MCA_rmaps_base_oversubscribe=1
bench_workdir encoder_techniques
bench_private_trainer

# ---- the data: DistilBERT's vocabulary size from the hashed words of the fixture
data=$work/text.h5
"$root/tests/e2e/trainer/make_text_fixture.sh" "$work/text.csv"
"$trainer_data" csv "$work/text.csv" "$data" --seq-len "$SEQ_LEN" --val-fraction 0.25 --tokenizer word-hash \
  --buckets 30520 > "$work/data.log" 2>&1 || { cat "$work/data.log" >&2; die "trainer-data failed"; }

input=$root/inputs/tiny_encoder.toml
model=(--set data.path="$data" --set model.layout=distilbert --set model.n_layer="$N_LAYER"
       --set model.n_head="$N_HEAD" --set model.d_model="$D_MODEL" --set model.seq_len="$SEQ_LEN"
       --set model.layernorm_eps=1e-12 --set model.dropout=0.1 --set train.batch_size="$BATCH")

# ---- every row's ranks and settings
declare -A np settings ref
np[fp32]=1; settings[fp32]="--set train.micro_batch=$BATCH"; ref[fp32]=fp32
np[bf16]=1; settings[bf16]="--set train.micro_batch=$BATCH --set precision.mode=bf16"; ref[bf16]=fp32
half=$((BATCH / 2))
np[dp2]=2; settings[dp2]="--set train.micro_batch=$half"; ref[dp2]=fp32
for s in 1 2 3; do
  np[zero$s]=2; settings[zero$s]="--set train.micro_batch=$half --set parallel.zero_stage=$s --set parallel.bucket_mb=0"
  ref[zero$s]=dp2
done
np[sqrt]=2; settings[sqrt]="--set train.micro_batch=$half --set recompute.policy=sqrt"; ref[sqrt]=dp2
# budget: BUDGET_MB, or halfway between the plan's activations under full and sqrt (trainer --plan)
plan_activations() {  # POLICY -> MiB per rank
  "$trainer" --plan --ranks 2 "$input" "${model[@]}" --set train.micro_batch="$half" --set recompute.policy="$1" \
    > "$work/plan-$1.txt" 2>&1 || { cat "$work/plan-$1.txt" >&2; die "trainer --plan failed for $1"; }
  sed -n 's/^  activations \([0-9.]*\) MiB per rank.*/\1/p' "$work/plan-$1.txt"
}
act_none=$(plan_activations none); act_sqrt=$(plan_activations sqrt); act_full=$(plan_activations full)
[[ -n "$act_none" && -n "$act_sqrt" && -n "$act_full" ]] || die "cannot parse the plans' activations"
budget_mb=${BUDGET_MB:-$(awk -v a="$act_sqrt" -v b="$act_full" 'BEGIN { printf "%.3f", (a + b) / 2 }')}
np[budget]=2; settings[budget]="--set train.micro_batch=$half --set recompute.policy=budget --set recompute.budget_mb=$budget_mb"
ref[budget]=dp2
log "plan activations per rank at 2 ranks: none $act_none MiB, sqrt $act_sqrt MiB, full $act_full MiB; budget row: budget_mb = $budget_mb"

results=$work/results.txt  # row round step_ms vmhwm predicted act_plan act_measured load
: > "$results"
declare -A commands
run_one() {  # ROW ROUND
  local r=$1 round=$2 dir=$work/$1-r$2 load
  rm -rf "$dir"
  load=$(cut -d' ' -f1 /proc/loadavg)
  # shellcheck disable=SC2206
  local extra=(${settings[$r]})
  local cmd=("$MPIEXEC" -n "${np[$r]}" "$trainer" "$input" "${model[@]}" "${extra[@]}" --set train.steps="$STEPS"
             --set train.eval_every=0 --set train.log_every=1 --set train.run_dir="$dir")
  timeout 1200 "${cmd[@]}" > "$dir.log" 2>&1 || { cat "$dir.log" >&2; die "trainer failed: ${cmd[*]}"; }
  [[ $round -eq 1 ]] && commands[$r]="${cmd[*]}"
  local times med mem pm
  times=$(step_ms_times "$dir/metrics.csv" "$WARMUP" "$STEPS") || exit 2
  med=$(median <<< "$times")
  pm=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; if (!c["vmhwm"] || !c["predicted_process_peak"]) exit 1; next }
    { if ($c["vmhwm"] + 0 > h) h = $c["vmhwm"] + 0; if ($c["predicted_process_peak"] + 0 > p) p = $c["predicted_process_peak"] + 0 }
    END { if (!h || !p) exit 1; print h, p }' "$dir/process_memory.csv") ||
    die "$dir/process_memory.csv: no vmhwm and predicted_process_peak columns, or no rank row"
  mem=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; if (!c["activations"] || !c["activations_measured"]) exit 1; next }
    $1 == "plan" { plan = $c["activations"] + 0; next } { if ($c["activations_measured"] + 0 > m) m = $c["activations_measured"] + 0 }
    END { if (!plan || !m) exit 1; print plan, m }' "$dir/memory.csv") ||
    die "$dir/memory.csv: no activations and activations_measured columns, plan row or rank row"
  echo "$r $round $med $pm $mem $load" >> "$results"
  log "$(printf '%-6s round %s: step %.1f ms, VmHWM %.1f MiB (predicted %.1f), activations %.2f MiB (load %s)' "$r" "$round" \
    "$med" "$(awk -v x="${pm% *}" 'BEGIN { print x / 1048576 }')" "$(awk -v x="${pm#* }" 'BEGIN { print x / 1048576 }')" \
    "$(awk -v x="${mem% *}" 'BEGIN { print x / 1048576 }')" "$load")"
}

start_date=$(date -u '+%Y-%m-%d %H:%M UTC')
start_load=$(cut -d' ' -f1-3 /proc/loadavg)
start_s=$SECONDS
for (( round = 1; round <= ROUNDS; round++ )); do
  if (( round % 2 )); then seq=("${rows[@]}"); else seq=(); for s in "${rows[@]}"; do seq=("$s" "${seq[@]}"); done; fi
  for r in "${seq[@]}"; do run_one "$r" "$round"; done
done
wall=$(( SECONDS - start_s ))
end_load=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- the table
refs=""
for r in "${rows[@]}"; do refs+="$r=${ref[$r]} "; done
table=$(awk -v order="${rows[*]}" -v refs="$refs" -v batch="$BATCH" '
  function med(a, n,   i, j, x) { for (i = 2; i <= n; i++) { x = a[i]; for (j = i - 1; j >= 1 && a[j] > x; j--) a[j + 1] = a[j]; a[j + 1] = x }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
  BEGIN { split(refs, rr, " "); for (k in rr) { split(rr[k], kv, "="); reference[kv[1]] = kv[2] } }
  { t[$1, $2] = $3; rounds[$1] = ($2 > rounds[$1] ? $2 : rounds[$1])
    if ($4 > hwm[$1]) hwm[$1] = $4; if ($5 > pred[$1]) pred[$1] = $5; plan[$1] = $6; if ($7 > meas[$1]) meas[$1] = $7
    loads[$1] = loads[$1] (loads[$1] == "" ? "" : " ") $8 }
  END {
    n = split(order, rows, " ")
    for (i = 1; i <= n; i++) {
      r = rows[i]; f = reference[r]; k = 0; kr = 0
      for (j = 1; j <= rounds[r]; j++) { v[++k] = t[r, j]; if ((f, j) in t) q[++kr] = t[r, j] / t[f, j] }
      m = med(v, k); ratio = kr ? med(q, kr) : 0
      rs = kr ? sprintf("%.2fx %s", ratio, (r == f ? "(reference)" : "vs " f)) : "(" f " not run)"
      printf "| %s | %.1f | %s | %.0f | %.1f | %.1f | %.3f | %.2f | %.2f | %s |\n", r, m, rs,
        batch / (m / 1000), hwm[r] / 1048576, pred[r] / 1048576, hwm[r] / pred[r], plan[r] / 1048576, meas[r] / 1048576, loads[r]
    }
  }' "$results")

model_name=$(lscpu | sed -n 's/^Model name:[ \t]*//p' | head -1)
bf16_note=""
if bf16_line=$(grep -m1 -o 'bf16: [^;]*' "$work/bf16-r1.log" 2>/dev/null); then
  bf16_note="; the bf16 row's compute line says: $bf16_line"
fi
report() {
  echo "Encoder techniques table (tests/bench/encoder_techniques.sh), $start_date"
  echo
  echo "- Machine: \`lscpu\` model name: $model_name, $(getconf _NPROCESSORS_ONLN) cores; load average before: $start_load, after: $end_load; wall time ${wall} s"
  echo "- Model: DistilBERT-shaped encoder_classifier (layout distilbert), L=$N_LAYER C=$D_MODEL H=$N_HEAD T=$SEQ_LEN vocab 30522, dropout 0.1, global batch $BATCH samples per step"
  echo "- Runs: $ROUNDS rounds interleaved (order reversed every other round), $STEPS steps each, step_ms median over steps $((WARMUP + 1))..$STEPS, then the median over rounds; ratio: median over rounds of the row's step time / its reference's in the same round$bf16_note"
  echo "- Plan at 2 ranks: activations none $act_none MiB, sqrt $act_sqrt MiB, full $act_full MiB per rank; budget row: recompute.budget_mb = $budget_mb"
  if [[ -f "$work/budget-r1.log" ]]; then
    echo "- The budget row's schedule (trainer's recompute plan):"
    echo
    echo '```'
    sed -n '/^recompute plan: policy budget/,/^  activations /p' "$work/budget-r1.log"
    echo '```'
  fi
  echo
  echo "| row | step ms (median) | step time / reference's | samples/s | VmHWM MiB (max rank) | predicted peak MiB | VmHWM / predicted | activations plan MiB | activations measured MiB | load avg of the runs |"
  echo "|---|---|---|---|---|---|---|---|---|---|"
  echo "$table"
  echo
  echo "Commands (round 1; the run directory differs per run):"
  echo
  for r in "${rows[@]}"; do echo "- $r: \`${commands[$r]}\`"; done
}
if [[ "$out" == - ]]; then report; else report > "$out"; log "report: $out"; fi
