#!/usr/bin/env bash
# End-to-end checks of the `trainer` executable, driven by CTest (tests/e2e/trainer/CMakeLists.txt).
# Environment (set by CTest): TRAINER, INPUT (tiny.toml), DATA (tiny.h5), WORK (scratch dir),
# MPIEXEC, NPFLAG.
#   run NP NAME [--set ...]     train into $WORK/NAME, fail on non-zero exit
#   equiv NAME NP REF TOL[/GTOL] [--set ...]  train at NP ranks, logging every step (unless --set
#                               says otherwise); loss and val_loss must match run REF within
#                               relative TOL, grad_norm within GTOL (default TOL; "-": not
#                               compared), every step REF logs (TOL 0: bitwise, weight CRCs included)
#   learn NP NAME MIN_ACC [--set ...]  a classifier trains; final val accuracy >= MIN_ACC, confusion
#                               matrix printed and in confusion.txt, val_accuracy in metrics.csv
#   determinism NP [TAG --set ...]  two runs at NP ranks; losses (and weight CRCs) must be
#                               bitwise identical
#   in-memory NP TAG [--set ...]  a classifier with data.in_memory "on" and "off": bitwise the
#                               same losses, evaluations and weight CRCs; each start-up line says
#                               how the samples are read, the plan counts the held bytes only
#                               when held; "auto" over data.in_memory_limit_mb reads the file
#   bad-input NP CASE REGEX     a broken input must give exit 2, ONE message matching REGEX, no hang
#                               (cnn_bad_label: a label out of range, found when the data set is
#                               loaded into memory)
#   zero-accounting NP STAGE [MODE]  measured peak bytes per rank == the plan, model state == the
#                               ZeRO formula for precision MODE (fp32, fp16, bf16) within 2%; every
#                               rank's payload per step and kind of collective == its exact
#                               expectation (comm_expect.py: from the printed layout and ZeRO's
#                               schedule, stage 3's cached groups included); COMM_EXPECT_FLAGS
#                               plants an error in the expectation (must fail); bytes on the
#                               wire: runs of 30 and 34 steps under Open MPI's pml monitoring
#                               dump, per rank (dump B - dump A) == (total model B - A) exactly,
#                               no call unmodelled (share/tools/wire_table.py prints payload,
#                               ring, measured, model, ZeRO theory, the algorithms);
#                               WIRE_TABLE_PLANT=R:B plants an error in a dump (must fail)
#   overflow NP STAGE           fp16 with an inf planted by the last rank at step 5: step 5 is
#                               skipped on every rank, the loss scale halves, the weights are
#                               bitwise unchanged by it (CRC), training goes on and learns
#   mixed-memory NP MODE        activation + parameter bytes per rank of MODE <= 0.55x fp32's
#   skip-abort NP               fp16 stuck at a minimum loss scale of 1e30 (every gradient
#                               overflows): steps 1-3 skipped with a warning each, then exit 1
#                               with one message naming max_consecutive_skips = 3
#   replicas NP RANK [--set ...]  ZeRO stage 0: rank RANK's replica of the weights moved by one
#                               ulp after step 3 (--perturb-weights): the weights CRC check of
#                               step 3 ends the run with exit 1 and one message naming RANK as
#                               the rank that holds another CRC than the rest; steps 1-2 logged
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=e2e_lib.sh
source "$here/e2e_lib.sh"

case "${1:-}" in
  run)
    np=$2; name=$3; shift 3
    run_trainer "$np" "$name" "$@"
    ;;
  equiv)
    name=$2; np=$3; ref=$4; tol=${5%%/*}; gtol=${5#*/}; shift 5
    run_trainer "$np" "$name" --set train.log_every=1 "$@"
    compare "${REF_WORK:-$WORK}/$ref/metrics.csv" "$WORK/$name/metrics.csv" "$tol" "$gtol"
    if [[ "$tol" == 0 ]]; then
      diff <(awk -F, 'NR > 1 { print $1, $11 }' "${REF_WORK:-$WORK}/$ref/metrics.csv") \
           <(awk -F, 'NR > 1 { print $1, $11 }' "$WORK/$name/metrics.csv") || die "weight CRCs differ"
      echo "bitwise identical losses and weight CRCs"
    fi
    # The loss must actually fall (by MIN_DROP, default 0.3 nats), or equal curves prove nothing.
    awk -F, -v drop="${MIN_DROP:-0.3}" 'NR == 2 { first = $2 }
      END { if (!($2 < first - drop)) { print "loss did not fall by " drop ": " first " -> " $2; exit 1 } }' \
      "$WORK/$name/metrics.csv" || die "training did not learn"
    ;;
  learn)  # NP NAME MIN_ACCURACY [--set ...]: a classifier learns and reports its evaluation
    np=$2; name=$3; min=$4; shift 4
    run_trainer "$np" "$name" "$@"
    log="$WORK/$name.log"; dir="$WORK/$name"
    acc=$(sed -n 's/^done: .* | val accuracy \([0-9.]*\) (error .*/\1/p' "$log")
    [[ -n "$acc" ]] || die "no final val accuracy in the log"
    awk -v a="$acc" -v m="$min" 'BEGIN { exit !(a >= m) }' || die "val accuracy $acc below $min"
    echo "final val accuracy $acc (>= $min)"
    grep -q '^confusion matrix of the validation split' "$log" || die "no confusion matrix printed"
    grep -q '^accuracy ' "$dir/confusion.txt" || die "no confusion.txt in the run directory"
    # Every row with a validation loss has its accuracy, and only those.
    awk -F, 'NR > 1 && (($3 == "") != ($13 == "")) { print "row " $1 ": val_loss and val_accuracy disagree"; bad = 1 }
             NR > 1 && $13 != "" { n++ } END { if (n < 2) { print "fewer than 2 evaluations"; bad = 1 }; exit bad }' \
      "$dir/metrics.csv" || die "metrics.csv val_accuracy column"
    ;;
  in-memory)  # NP TAG [--set ...]: data.in_memory "on" and "off", bitwise the same run; "auto" over its limit
    np=$2; tag=$3; shift 3
    on="mem_on_$tag"; off="mem_off_$tag"; auto="mem_auto_$tag"
    run_trainer "$np" "$on" --set data.in_memory=on --set train.log_every=1 "$@"
    run_trainer "$np" "$off" --set data.in_memory=false --set train.log_every=1 "$@"
    grep -Eq '; held in memory: [0-9.e+-]+ MiB per rank \(data\.in_memory = "on"\), read in [0-9.]+ s\)$' "$WORK/$on.log" ||
      die "the start-up line does not say the data set is held in memory"
    grep -q '^  data holds the data set in memory: [0-9.]* MiB' "$WORK/$on.log" || die "the plan does not count it"
    grep -q '; read from the file per micro-batch (data.in_memory = "off"))$' "$WORK/$off.log" ||
      die "the start-up line of the \"off\" run does not say it reads the file"
    ! grep -q '^  data holds the data set in memory' "$WORK/$off.log" || die "the \"off\" plan holds the data set"
    compare "$WORK/$on/metrics.csv" "$WORK/$off/metrics.csv" 0
    diff <(awk -F, 'NR > 1 { print $1, $11 }' "$WORK/$on/metrics.csv") \
         <(awk -F, 'NR > 1 { print $1, $11 }' "$WORK/$off/metrics.csv") || die "weight CRCs differ"
    echo "in memory and from the file: bitwise identical losses, evaluations and weight CRCs"
    run_trainer "$np" "$auto" --set data.in_memory_limit_mb=0.001 --set train.steps=2 --set train.eval_every=0 "$@"
    grep -Eq '; read from the file per micro-batch \(data\.in_memory = "auto": [0-9.e+-]+ MiB per rank is above data\.in_memory_limit_mb = 0\.001\)\)$' \
      "$WORK/$auto.log" || die "\"auto\" over its limit does not say it reads the file"
    ;;
  determinism)
    np=$2; tag=${3:-}; shift $(( $# >= 3 ? 3 : 2 ))
    run_trainer "$np" "det_a${tag}_np$np" "$@"
    run_trainer "$np" "det_b${tag}_np$np" "$@"
    compare "$WORK/det_a${tag}_np$np/metrics.csv" "$WORK/det_b${tag}_np$np/metrics.csv" 0
    crc_col() { awk -F, 'NR > 1 { print $11 }' "$1"; }
    [[ "$(crc_col "$WORK/det_a${tag}_np$np/metrics.csv")" == "$(crc_col "$WORK/det_b${tag}_np$np/metrics.csv")" ]] ||
      die "weight CRCs differ"
    echo "bitwise identical losses and weight CRCs over $(losses "$WORK/det_a${tag}_np$np/metrics.csv" | wc -l) rows"
    ;;
  overflow)
    np=$2; stage=$3; name="overflow_s${stage}_np$np"
    # hysteresis 1: the first overflow halves the scale (with the default 2 it
    # would take two); a small init scale keeps the tiny model clear of real overflows.
    run_trainer "$np" "$name" --set precision.mode=fp16 --set parallel.zero_stage="$stage" \
      --set precision.hysteresis=1 --set train.log_every=1 --inject-overflow 5:$((np - 1))
    log="$WORK/$name.log"; csv="$WORK/$name/metrics.csv"
    grep -E "^step 5: gradient overflow \(inf/NaN\), step skipped; loss scale 65536 -> 32768; first non-finite gradient in [a-z_0-9.]+" "$log" ||
      die "no overflow line for step 5 naming a tensor"
    [[ $(grep -c "gradient overflow" "$log") -eq 1 ]] || die "expected exactly one overflow line"
    awk -F, 'NR == 1 { next }
      { scale[$1] = $9; skip[$1] = $10; crc[$1] = $11; loss[$1] = $2; last = $1 }
      END {
        bad = 0
        for (s = 1; s <= last; ++s) if (skip[s] != (s == 5)) { print "step " s ": skipped = " skip[s]; bad = 1 }
        if (scale[4] != 65536 || scale[5] != 65536 || scale[6] != 32768) { print "scale 4/5/6: " scale[4] " " scale[5] " " scale[6]; bad = 1 }
        if (crc[5] != crc[4]) { print "weights changed by the skipped step: " crc[4] " -> " crc[5]; bad = 1 }
        if (crc[6] == crc[5] || crc[4] == crc[3]) { print "weights did not change on normal steps"; bad = 1 }
        if (!(loss[last] < loss[1] - 0.3)) { print "training did not continue to learn: " loss[1] " -> " loss[last]; bad = 1 }
        printf "step 5 skipped, scale 65536 -> %s, weights crc %s unchanged, loss %s -> %s\n", scale[6], crc[5], loss[1], loss[last]
        exit bad
      }' "$csv" || die "overflow handling wrong"
    ;;
  skip-abort)
    np=$2; name="skip_abort_np$np"
    rm -rf "$WORK/$name"
    timeout 300 "$MPIEXEC" "$NPFLAG" "$np" "$TRAINER" "$INPUT" --set data.path="$DATA" \
      --set train.run_dir="$WORK/$name" --set precision.mode=fp16 --set precision.init_scale=1e30 \
      --set precision.min_scale=1e30 --set precision.max_consecutive_skips=3 --set train.log_every=1 \
      > "$WORK/$name.log" 2> "$WORK/$name.err"
    rc=$?
    check_process_memory "$WORK/$name.log"
    cat "$WORK/$name.log" "$WORK/$name.err"
    [[ $rc -ne 124 ]] || die "trainer hung"
    [[ $rc -eq 1 ]] || die "expected exit code 1, got $rc"
    [[ $(grep -c '^error: ' "$WORK/$name.err") -eq 1 ]] || die "expected exactly one error line"
    grep -q '^error: step 3: 3 consecutive steps skipped .*max_consecutive_skips = 3' "$WORK/$name.err" ||
      die "the error does not name the limit"
    [[ $(grep -c '^warning: step [12]: loss scale is at precision.min_scale' "$WORK/$name.err") -eq 2 ]] ||
      die "expected a min-scale warning for steps 1 and 2"
    [[ $(grep -c 'step skipped' "$WORK/$name.log") -eq 3 ]] || die "expected 3 skipped steps logged"
    ;;
  replicas)
    np=$2; victim=$3; shift 3; name="replicas_np${np}_r$victim"
    rm -rf "${WORK:?}/$name"
    timeout 120 "$MPIEXEC" "$NPFLAG" "$np" "$TRAINER" "$INPUT" --set data.path="$DATA" \
      --set train.run_dir="$WORK/$name" --set parallel.zero_stage=0 --set train.log_every=1 "$@" \
      --perturb-weights "3:$victim" > "$WORK/$name.log" 2> "$WORK/$name.err"
    rc=$?
    check_process_memory "$WORK/$name.log"
    cat "$WORK/$name.err"
    [[ $rc -ne 124 ]] || die "trainer hung"
    [[ $rc -eq 1 ]] || die "expected exit code 1, got $rc"
    [[ $(grep -c '^error' "$WORK/$name.err") -eq 1 ]] || die "expected exactly one error line"
    # The others, in the order the message lists them: the agreeing ranks.
    others=$(seq 0 $((np - 1)) | grep -vx "$victim" | paste -sd, | sed 's/,/, /g')
    [[ $np -eq 2 ]] && s="" || s="s"
    [[ $np -eq 2 ]] && h="holds" || h="hold"
    grep -Eq "^error: step 3: the ranks' replicas of the weights differ at ZeRO stage 0 .*: rank $victim holds weights_crc [0-9a-f]{8}, rank$s $others $h weights_crc [0-9a-f]{8}\$" \
      "$WORK/$name.err" || die "the error does not name rank $victim as the one whose replica differs"
    [[ "$(awk -F, 'NR > 1 { print $1 }' "$WORK/$name/metrics.csv" | paste -sd' ')" == "1 2" ]] ||
      die "expected metrics rows for steps 1 and 2 only"
    ;;
  bad-hook)
    # NP VALUE [OPTION]: OPTION VALUE (default --inject-overflow; every STEP[:RANK]
    # test hook) is refused with exit 2 and one message.
    np=$2; value=$3; option=${4:---inject-overflow}; name="bad_hook_np$np"
    timeout 60 "$MPIEXEC" "$NPFLAG" "$np" "$TRAINER" "$INPUT" --set data.path="$DATA" \
      --set train.run_dir="$WORK/$name" "$option" "$value" > "$WORK/$name.log" 2> "$WORK/$name.err"
    rc=$?
    check_process_memory "$WORK/$name.log"
    cat "$WORK/$name.err"
    [[ $rc -eq 2 ]] || die "expected exit code 2, got $rc"
    [[ $(grep -c '^error: ' "$WORK/$name.err") -eq 1 ]] || die "expected exactly one error line"
    grep -q "^error: $option $value: expected STEP\[:RANK\] with STEP >= 1 and 0 <= RANK < $np" \
      "$WORK/$name.err" || die "the message does not say what was expected"
    [[ ! -e "$WORK/$name/metrics.csv" ]] || die "it trained"
    ;;
  recompute-memory)
    # NP LAYERS POLICY [--set ...]: tracked activation peak per rank == the plan (5%), and
    # the measured activation high-water (the recompute stack's, memory.csv's
    # activations_measured) == the plan to the byte on every rank, as the report says.
    np=$2; layers=$3; policy=$4; shift 4; name="rcmem_L${layers}_${policy}_np$np"
    run_trainer "$np" "$name" --set model.n_layer="$layers" --set recompute.policy="$policy" \
      --set train.steps=3 --set train.eval_every=0 "$@"
    grep -A6 '^recompute plan' "$WORK/$name.log"
    awk -F, '$1 == "plan" { plan = $5 } $1 ~ /^[0-9]+$/ { if ($5 > peak) peak = $5 }
      END { r = (peak - plan) / plan; if (r < 0) r = -r
            printf "activations: tracked %d bytes, plan %d bytes (%.4f)\n", peak, plan, r; exit !(r <= 0.05) }' \
      "$WORK/$name/memory.csv" || die "activation peak differs from the plan by more than 5%"
    awk -F, -v np="$np" '
      NR == 1 { for (i = 1; i <= NF; i++) if ($i == "activations_measured") c = i; if (!c) { print "no activations_measured column"; exit 1 }; next }
      $1 == "plan" { plan = $c; next }
      $1 ~ /^[0-9]+$/ { rows++; used[$1] = $c }
      END {
        if (rows != np || plan == "") { print "expected " np " rank rows and a plan row"; exit 1 }
        for (r = 0; r < np; r++) {
          printf "rank %d: activations measured %d bytes, plan %d bytes\n", r, used[r], plan
          if (used[r] != plan) bad = 1
        }
        exit bad
      }' "$WORK/$name/memory.csv" || die "measured activation high-water differs from the plan"
    log_and_reports "$WORK/$name.log" | grep -q "^activations measured: the high-water equals the plan ([0-9]* bytes) on every rank" ||
      die "the report does not say the measured activation high-water equals the plan"
    ;;
  recompute-cap)
    # NP: train.memory_limit_mb between the predicted process peaks of policy budget and
    # policy none (measured by `trainer --plan` in a job of NP ranks: RSS before the
    # model + tracked plan + collective scratch) trains under budget; none is refused.
    np=$2; name="rccap_np$np"
    # Micro-batches of 16 make policy none's activations (6.9 MiB) stand 5 MiB above the
    # budget's, well clear of the ~1 MiB by which RSS before the model varies between jobs
    # (at micro-batch 4 the gap was 1.2 MiB and one CI run measured the two 0.6 MiB apart).
    set_args=(--set model.n_layer=12 --set train.batch_size=32 --set train.micro_batch=16)
    peak_of() {  # POLICY: the predicted process peak of `trainer --plan` in MiB
      local extra=(--set recompute.policy="$1")
      [[ $1 == budget ]] && extra+=(--set recompute.budget_mb=1.5)
      timeout 60 "$MPIEXEC" "$NPFLAG" "$np" "$TRAINER" --plan "$INPUT" --set data.path="$DATA" "${set_args[@]}" \
        "${extra[@]}" > "$WORK/$name.$1.plan" 2>&1 || { cat "$WORK/$name.$1.plan"; die "--plan failed"; }
      awk '/^predicted process peak per rank/ { print $6 }' "$WORK/$name.$1.plan"
    }
    budget=$(peak_of budget); none=$(peak_of none)
    cap=$(awk -v a="$budget" -v b="$none" 'BEGIN { print int((a + b) * 50 + 0.5) / 100 }')  # as the trainer prints it
    echo "predicted process peak: policy budget $budget MiB, none $none MiB; memory_limit_mb = $cap"
    awk -v a="$budget" -v b="$none" 'BEGIN { exit !(b - a >= 3) }' ||
      die "the two predictions are too close to tell apart from run-to-run RSS noise"
    run_trainer "$np" "$name" "${set_args[@]}" --set recompute.policy=budget --set recompute.budget_mb=1.5 \
      --set train.memory_limit_mb="$cap" \
      --set train.steps=5
    rm -rf "$WORK/${name}_none"
    timeout 120 "$MPIEXEC" "$NPFLAG" "$np" "$TRAINER" "$INPUT" --set data.path="$DATA" \
      --set train.run_dir="$WORK/${name}_none" "${set_args[@]}" \
      --set recompute.policy=none --set train.memory_limit_mb="$cap" > "$WORK/${name}_none.log" 2> "$WORK/${name}_none.err"
    rc=$?
    check_process_memory "$WORK/${name}_none.log"
    cat "$WORK/${name}_none.err"
    [[ $rc -eq 2 ]] || die "policy none under the cap: expected exit code 2, got $rc"
    [[ $(grep -c '^error: ' "$WORK/${name}_none.err") -eq 1 ]] || die "expected one error line"
    grep -Eq "train.memory_limit_mb = $cap MiB, but the predicted process peak is [0-9.]+ MiB per rank \([0-9.]+ MiB short: process before the model [0-9.]+" \
      "$WORK/${name}_none.err" || die "the refusal does not name the shortfall"
    ;;
  process-limit)
    # NP: train.memory_limit_mb above the tracked plan total but below the
    # predicted process peak (the plan's total + RSS before the model + MPI
    # collective scratch, from `trainer --plan` in a job of NP ranks) is refused
    # with exit 2 and a message naming the terms: the limit applies to the process.
    np=$2; name="process_limit_np$np"
    timeout 60 "$MPIEXEC" "$NPFLAG" "$np" "$TRAINER" --plan "$INPUT" --set data.path="$DATA" \
      > "$WORK/$name.plan" 2>&1 || { cat "$WORK/$name.plan"; die "--plan failed"; }
    grep '^  total\|^predicted process peak' "$WORK/$name.plan"
    tracked=$(awk '/^  total/ { printf "%.2f", $2 }' "$WORK/$name.plan")  # as the refusal prints it
    peak=$(awk '/^predicted process peak per rank/ { print $6 }' "$WORK/$name.plan")
    [[ -n $tracked && -n $peak ]] || die "--plan printed no tracked total or predicted process peak"
    cap=$(awk -v a="$tracked" -v b="$peak" 'BEGIN { print int((a + b) * 50 + 0.5) / 100 }')
    awk -v a="$tracked" -v b="$peak" -v c="$cap" 'BEGIN { exit !(b - a >= 8 && c > a + 2 && c < b - 2) }' ||
      die "tracked total $tracked MiB and predicted process peak $peak MiB too close to put a limit between"
    echo "tracked plan $tracked MiB < memory_limit_mb $cap < predicted process peak $peak MiB"
    rm -rf "${WORK:?}/$name"
    timeout 120 "$MPIEXEC" "$NPFLAG" "$np" "$TRAINER" "$INPUT" --set data.path="$DATA" \
      --set train.run_dir="$WORK/$name" --set train.memory_limit_mb="$cap" > "$WORK/$name.log" 2> "$WORK/$name.err"
    rc=$?
    cat "$WORK/$name.err"
    [[ $rc -ne 124 ]] || die "trainer hung"
    [[ $rc -eq 2 ]] || die "memory_limit_mb $cap between the tracked plan and the process peak: expected exit code 2, got $rc"
    [[ $(grep -c '^error: ' "$WORK/$name.err") -eq 1 ]] || die "expected exactly one error line"
    grep -Eq "train\.memory_limit_mb = $cap MiB, but the predicted process peak is [0-9.]+ MiB per rank \([0-9.]+ MiB short: process before the model [0-9.]+, scratch \(MPI collective or checkpoint I/O\) [0-9.]+, and the plan's $tracked" \
      "$WORK/$name.err" || die "the refusal does not name the process terms and the plan's $tracked MiB"
    [[ ! -e "$WORK/$name/metrics.csv" ]] || die "it trained"
    echo "refused: the limit applies to the predicted process peak, not the tracked plan"
    ;;
  mixed-memory)
    np=$2; mode=$3
    run_trainer "$np" "mem_fp32_np$np" --set train.steps=2
    run_trainer "$np" "mem_${mode}_np$np" --set train.steps=2 --set precision.mode="$mode"
    # memory.csv columns: rank,parameters,gradients,optimizer_state,activations,...
    paste -d, <(awk -F, '$1 == "plan" || $1 ~ /^[0-9]+$/' "$WORK/mem_fp32_np$np/memory.csv") \
              <(awk -F, '$1 == "plan" || $1 ~ /^[0-9]+$/' "$WORK/mem_${mode}_np$np/memory.csv") |
      awk -F, -v mode="$mode" '{ n = NF / 2; a32 = $2 + $5; a16 = $(n + 2) + $(n + 5); r = a16 / a32
             printf "rank %s: parameters + activations %d (%s) vs %d (fp32) bytes: %.4f\n", $1, a16, mode, a32, r
             if (r > 0.55) bad = 1 } END { exit bad }' || die "$mode parameter + activation bytes above 0.55x fp32"
    ;;
  bad-input)
    np=$2; case_name=$3; regex=$4
    dir="$WORK/bad_$case_name"; rm -rf "$dir"; mkdir -p "$dir"
    input="$dir/input.toml"
    sed -e "s|^path = .*|path = \"$DATA\"|" "$INPUT" > "$input"
    case "$case_name" in
      syntax)      sed -i 's/^n_layer = 2/n_layer = 2 2/' "$input" ;;
      unknown_key) sed -i 's/^n_layer = 2/n_layers = 2/' "$input" ;;
      negative_lr) sed -i 's/^lr = .*/lr = -1e-3/' "$input" ;;
      missing_data) sed -i "s|^path = .*|path = \"$dir/no_such.h5\"|" "$input" ;;
      not_hdf5)    cp "$INPUT" "$dir/fake.h5"; sed -i "s|^path = .*|path = \"$dir/fake.h5\"|" "$input" ;;
      data_too_short) sed -i 's/^seq_len = .*/seq_len = 512/' "$input" ;;
      memory_limit) sed -i 's/^log_every = .*/log_every = 5\nmemory_limit_mb = 0.1/' "$input" ;;
      recompute_budget) printf '\n[recompute]\npolicy = "budget"\nbudget_mb = 0.01\n' >> "$input" ;;
      mlp_recompute) printf '\n[recompute]\npolicy = "sqrt"\n' >> "$input" ;;
      mlp_on_text) sed -i "s|^path = .*|path = \"${DATA%/*}/text.h5\"|" "$input" ;;
      cnn_kernel)  sed -i 's/^conv_kernel = .*/conv_kernel = 7/' "$input" ;;
      cnn_bad_label) sed -i "s|^path = .*|path = \"${DATA%/*}/images_bad_label.h5\"|" "$input" ;;
      tokens_big_chunk|tokens_external|tokens_deflate)  # crafted with h5py (craft_tokens.py)
        /usr/bin/python3 "$here/craft_tokens.py" "$DATA" "$dir/crafted.h5" "${case_name#tokens_}" ||
          die "craft_tokens.py failed"
        sed -i "s|^path = .*|path = \"$dir/crafted.h5\"|" "$input" ;;
      d_model_overflow) sed -i 's/^d_model = .*/d_model = 2147483644/' "$input" ;;
      readonly_ckpt_dir) printf '\n[checkpoint]\nevery_steps = 5\ndir = "/sys"\n' >> "$input" ;;
      fused_on_host)  # cuDNN's flash attention asked for where the run computes on the host
        sed -i 's/^seq_len = 16/seq_len = 16\nattention = "fused"/; s/^log_every = 5/log_every = 5\ndevice = "cpu"/' "$input"
        printf '\n[precision]\nmode = "bf16"\n' >> "$input" ;;
      flash_on_host)  # our tiled CUDA attention asked for where the run computes on the host (fp32)
        sed -i 's/^seq_len = 16/seq_len = 16\nattention = "flash"/; s/^log_every = 5/log_every = 5\ndevice = "cpu"/' "$input" ;;
      gemm_lt_on_host)  # cuBLASLt's Linear asked for where the run computes on the host
        sed -i 's/^seq_len = 16/seq_len = 16\ngemm = "cublaslt"/; s/^log_every = 5/log_every = 5\ndevice = "cpu"/' "$input" ;;
      candidate_kernels_on_host)  # the CUDA kernels not yet run on a device, asked for on the host
        sed -i 's/^log_every = 5/log_every = 5\ndevice = "cpu"\ndevice_kernels = "candidate"/' "$input" ;;
      gelu_epilogue_on_host)  # the GELU in cuBLASLt's epilogues asked for where the run computes on the host
        sed -i 's/^seq_len = 16/seq_len = 16\ngelu = "epilogue"/; s/^log_every = 5/log_every = 5\ndevice = "cpu"/' "$input" ;;
      *) die "unknown case $case_name" ;;
    esac
    start=$(date +%s)
    timeout 120 "$MPIEXEC" "$NPFLAG" "$np" "$TRAINER" "$input" --set train.run_dir="$dir/run" \
      > "$dir/out.log" 2> "$dir/err.log"
    rc=$?
    check_process_memory "$dir/out.log"
    echo "exit code $rc after $(( $(date +%s) - start )) s"; echo "--- stderr:"; cat "$dir/err.log"
    [[ $rc -ne 124 ]] || die "trainer hung"
    [[ $rc -eq 2 ]] || die "expected exit code 2, got $rc"
    n=$(grep -c '^error: ' "$dir/err.log")
    [[ $n -eq 1 ]] || die "expected exactly one error line, got $n"
    grep -Eq "$regex" "$dir/err.log" || die "error message does not match /$regex/"
    ;;
  zero-accounting)
    np=$2; stage=$3; mode=${4:-fp32}; name="accounting_s${stage}_np${np}_$mode"
    # One bucket per group, 8 blocks at stage 3 (more groups than the three
    # gather buffers, so some are kept from forward to backward and some are
    # gathered again); every rank's payload must be exact (comm_expect.py).
    # Each run writes Open MPI's pml monitoring dump into its own directory;
    # every row logged (train.log_every = 1) so the loop is the same every step.
    layers=2; [[ $stage -eq 3 ]] && layers=8
    same=(--set parallel.zero_stage="$stage" --set train.micro_batch=8 --set train.eval_every=0
          --set parallel.bucket_mb=0 --set model.n_layer=$layers --set precision.mode="$mode" --set train.log_every=1)
    wire_run() {  # NAME STEPS: a run with its dump in $WORK/NAME.dump
      rm -rf "$WORK/$1.dump"; mkdir -p "$WORK/$1.dump"
      OMPI_MCA_pml_monitoring_enable=1 OMPI_MCA_pml_monitoring_enable_output=3 \
        OMPI_MCA_pml_monitoring_filename="$WORK/$1.dump/prof" run_trainer "$np" "$1" "${same[@]}" --set train.steps="$2"
    }
    wire_run "$name" 30
    log="$WORK/$name.log"
    psi=$(sed -n 's/^memory plan per rank: .*(\([0-9]*\) padded).*/\1/p' "$log")
    [[ -n "$psi" ]] || die "no plan line in the log"
    log_and_reports "$log" | grep -A$((np + 3)) '^communication layout'
    # shellcheck disable=SC2086
    /usr/bin/python3 "$here/comm_expect.py" "$log" "$layers" ${COMM_EXPECT_FLAGS:-} ||
      die "a rank's payload differs from its exact expectation"
    awk -F, -v n="$np" -v stage="$stage" -v psi="$psi" -v mode="$mode" '
      function rel(a, b) { d = a - b; if (d < 0) d = -d; return b > 0 ? d / b : d }
      NR == 1 { next }
      $1 == "plan" { for (i = 2; i <= NF; ++i) plan[i] = $i; next }
      { rows++; for (i = 2; i <= NF; ++i) v[rows, i] = $i; cols = NF }
      END {
        if (rows != n) { print "expected " n " rank rows, got " rows; exit 1 }
        for (r = 1; r <= rows; ++r) for (i = 2; i <= cols; ++i)
          if (rel(v[r, i], plan[i]) > 0.02) { print "rank " r - 1 " column " i ": " v[r, i] " bytes vs plan " plan[i]; bad = 1 }
        # ZeRO model state in bytes per (padded) parameter: fp32, or 16-bit
        # parameters and gradients with fp32 master weights, m and v
        if (mode == "fp32") f = (stage == 0) ? 16 : (stage == 1) ? 8 + 8 / n : (stage == 2) ? 4 + 12 / n : 16 / n
        else f = (stage == 0) ? 16 : (stage == 1) ? 4 + 12 / n : (stage == 2) ? 2 + 14 / n : 16 / n
        for (r = 1; r <= rows; ++r) {
          state = v[r, 2] + v[r, 3] + v[r, 4]
          if (rel(state, f * psi) > 0.02) { print "rank " r - 1 ": model state " state " bytes vs ZeRO " f * psi; bad = 1 }
        }
        printf "%s model state %d bytes per rank; ZeRO formula %.4g x Psi = %d bytes (Psi = %d)\n", mode, v[1, 2] + v[1, 3] + v[1, 4], f, f * psi, psi
        exit bad
      }' "$WORK/$name/memory.csv" || die "accounting does not match"
    # Bytes on the wire: the same run with 4 more steps; per rank, the dumps'
    # difference == the difference of the wire model's totals, exactly, no call
    # unmodelled, and the loop's payload beyond the step is only the stop
    # agreement (16 B) and the weights CRC (16 N B). WIRE_TABLE_PLANT plants an error.
    wire_run "${name}_more" 34
    /usr/bin/python3 "$here/../../../share/tools/wire_table.py" "$log" "$WORK/$name.dump" \
      "$WORK/${name}_more.log" "$WORK/${name}_more.dump" --extra-payload $((16 + 16 * np)) ||
      die "bytes on the wire: a rank's row is marked <-- (measured != model, a call not modelled, or other loop payload)"
    ;;
  *)
    die "usage: trainer_e2e.sh run|equiv|determinism|bad-input|zero-accounting ..." ;;
esac
