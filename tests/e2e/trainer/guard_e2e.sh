#!/usr/bin/env bash
# End-to-end checks of the numeric guard ([guard], session/numeric_guard.hpp,
# share/doc/training.md#numerical-faults), driven by CTest
# (tests/e2e/trainer/CMakeLists.txt). Environment: as trainer_e2e.sh. Every run
# is the tiny GPT for 20-30 steps with a checkpoint every 5 (a few seconds).
#   nan-rollback NP RANK [--set ...]   a NaN in rank RANK's gradient at step 12 (bf16)
#                       with guard.non_finite = "rollback": step 12's row says
#                       non_finite/rollback and the window 80-96 (global sample
#                       indices: the same at any rank count), the log names step 12
#                       and rank RANK, training goes on from step 10 and ends with a
#                       finite loss; a second run is bitwise the first (metrics.csv)
#   nan-abort NP RANK   the same NaN with the default policy ("abort"): exit code 1
#                       and one error naming step 12 and rank RANK
#   flip-rollback NP RANK STAGE   a bit flipped in rank RANK's parameters after step 20
#                       with guard.replica_every = 5: the replica check of step 20
#                       names rank RANK, the run rolls back to step 15 and the
#                       replicas agree at every later check (25, 30 and before each
#                       checkpoint; exit code 0)
#   diverge NP          optim.lr = 30 (far too high) with rollback on non-finite and
#                       spike faults, a checkpoint every step (the first fault comes
#                       early), guard.max_rollbacks = 2: two rollbacks, then exit
#                       code 1 with one message saying what to change
#   min-scale NP        fp16 overflowing at precision.min_scale in every step with
#                       guard.min_scale_steps = 2: exit code 1 at step 2, naming the fault
#   spike-skip NP       a loss multiplied by 1000 at step 12 with guard.loss_spike =
#                       "skip": step 12 is skipped (its weights CRC is step 11's) and
#                       marked loss_spike/skip
#   bitwise NP [--set ...]   every guard on (rollback, replica check every step) and no
#                       fault: losses, gradient norms and weight CRCs bitwise those of
#                       the run without them
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=e2e_lib.sh
source "$here/e2e_lib.sh"

base=(--set train.steps=30 --set train.log_every=1 --set train.eval_every=0 --set checkpoint.every_steps=5)

# The value of metrics.csv column NAME at the first row of step STEP with a non-empty fault.
fault_row() {  # CSV STEP
  awk -F, -v s="$2" 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
    $1 == s && $c["fault"] != "" { print $c["fault"] " " $c["skipped_samples"] " " $c["skipped"]; exit }' "$1"
}

# Runs the trainer expecting exit code 1; the error lines in $WORK/NAME.err.
run_failing() {  # NP NAME extra-args...
  local np=$1 name=$2; shift 2
  rm -rf "${WORK:?}/$name"; mkdir -p "$WORK"
  timeout 300 "$MPIEXEC" "$NPFLAG" "$np" "$TRAINER" "$INPUT" --set data.path="$DATA" \
    --set train.run_dir="$WORK/$name" "$@" > "$WORK/$name.log" 2> "$WORK/$name.err"
  local rc=$?
  cat "$WORK/$name.log" "$WORK/$name.err"
  [[ $rc -ne 124 ]] || die "trainer hung"
  [[ $rc -eq 1 ]] || die "expected exit code 1, got $rc"
  [[ $(grep -c '^error' "$WORK/$name.err") -eq 1 ]] || die "expected exactly one error line"
}

case "${1:-}" in
  nan-rollback)
    np=$2; victim=$3; shift 3
    guard=(--set precision.mode=bf16 --set guard.non_finite=rollback --inject-nan "12:$victim" "$@")
    for run in a b; do
      name="guard_nan_rollback_np${np}_$run"
      run_trainer "$np" "$name" "${base[@]}" "${guard[@]}" > /dev/null
    done
    csv="$WORK/guard_nan_rollback_np${np}_a/metrics.csv"; log="$WORK/guard_nan_rollback_np${np}_a.log"
    grep -E "^guard: step 12: gradient overflow \(inf/NaN\) .*own gradient of rank $victim \(in [a-z_0-9.]+\) before the reduction; guard.non_finite = \"rollback\": every rank reloaded .*step_00000010.h5 \(step 10\) and skips the 16 samples \[80, 96\)" "$log" ||
      { cat "$log"; die "no guard line naming step 12, rank $victim and the rollback to step 10"; }
    [[ "$(fault_row "$csv" 12)" == "non_finite/rollback 80-96 1" ]] ||
      die "step 12's row: '$(fault_row "$csv" 12)', expected 'non_finite/rollback 80-96 1'"
    awk -F, 'NR > 1 { n[$1]++; last = $1; loss = $2 }
      END { if (n[11] != 2 || n[12] != 2 || n[13] != 1) { print "steps 11, 12, 13 logged " n[11] ", " n[12] ", " n[13] " times (expected 2, 2, 1)"; exit 1 }
            if (last != 30 || loss != loss + 0 || loss ~ /nan|inf/) { print "last row: step " last ", loss " loss; exit 1 }
            printf "steps 11-12 trained again after the rollback; step 30 loss %s\n", loss }' "$csv" ||
      die "the run did not go on from step 10 to a finite end"
    # The second pass of step 11 starts from the same weights (step 10's checkpoint)
    # on other samples (96 on, not 80): its loss must differ from the first pass's.
    awk -F, 'NR > 1 && $1 == 11 { l[++n] = $2 } END { if (n != 2 || l[1] == l[2]) { print "step 11 losses: " l[1] ", " l[2]; exit 1 } }' "$csv" ||
      die "the second pass of step 11 trained on the same samples: the window was not skipped"
    grep -q '^numeric guard: 1 rollback(s), 0 step(s) skipped' "$WORK/guard_nan_rollback_np${np}_a/report.txt" ||
      die "report.txt does not record the rollback"
    cols() { awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
      { print $1, $c["loss"], $c["grad_norm"], $c["weights_crc"], $c["fault"], $c["skipped_samples"] }' "$1"; }
    diff <(cols "$csv") <(cols "$WORK/guard_nan_rollback_np${np}_b/metrics.csv") ||
      die "two runs with the same injected fault differ"
    echo "rollback at step 12 to step 10, samples 80-96 skipped; two runs bitwise equal ($(wc -l < "$csv") rows)"
    ;;
  nan-abort)
    np=$2; victim=$3; shift 3; name="guard_nan_abort_np$np"
    run_failing "$np" "$name" "${base[@]}" --set precision.mode=bf16 --inject-nan "12:$victim" "$@"
    grep -Eq "^error: step 12: gradient overflow \(inf/NaN\) .*own gradient of rank $victim \(in [a-z_0-9.]+\) before the reduction.*guard.non_finite = \"abort\": ending the run; .*lower optim.lr" \
      "$WORK/$name.err" || die "the error does not name step 12, rank $victim and what to change"
    ;;
  flip-rollback)
    np=$2; victim=$3; stage=$4; shift 4; name="guard_flip_np${np}_s$stage"
    run_trainer "$np" "$name" "${base[@]}" --set parallel.zero_stage="$stage" --set guard.replica=rollback \
      --set guard.replica_every=5 --flip-bit "20:$victim" "$@" > /dev/null
    log="$WORK/$name.log"; csv="$WORK/$name/metrics.csv"
    grep -q "^test hook --flip-bit: rank $victim flips a bit" "$log" || die "the bit was not flipped"
    grep -Eq "^guard: step 20: the ranks' replicas of the .* differ at ZeRO stage $stage .*: rank $victim holds weights_crc [0-9a-f]{8}, ranks? [0-9, ]+ holds? weights_crc [0-9a-f]{8}; guard.replica = \"rollback\": every rank reloaded .*step_00000015.h5 \(step 15\)" "$log" ||
      die "no guard line naming rank $victim at step 20 and the rollback to step 15"
    [[ "$(fault_row "$csv" 20)" == "replica/rollback 120-160 1" ]] ||
      die "step 20's row: '$(fault_row "$csv" 20)', expected 'replica/rollback 120-160 1'"
    grep -Eq "^guard: step 20: .* \(rollback 1 of at most 3\); the replicas agree again \(the (fp32 weights|parameters) on $np ranks\)\$" "$log" ||
      die "the rollback did not check that the replicas agree again"
    [[ $(grep -c '^guard: ' "$log") -eq 1 ]] || die "expected one guard line: the replicas must agree at every later check"
    [[ $(awk -F, 'NR > 1 { last = $1 } END { print last }' "$csv") == 30 ]] || die "the run did not finish"
    echo "rank $victim's flipped bit named at step 20, rolled back to step 15; replicas agree at every later check"
    ;;
  diverge)
    np=$2; shift 2; name="guard_diverge_np$np"
    run_failing "$np" "$name" "${base[@]}" --set checkpoint.every_steps=1 --set precision.mode=bf16 \
      --set optim.lr=30 --set optim.min_lr=1 --set optim.warmup_steps=1 --set optim.grad_clip=0 --set guard.non_finite=rollback \
      --set guard.loss_spike=rollback --set guard.spike_window=1 --set guard.spike_warmup=0 \
      --set guard.max_rollbacks=2 "$@"
    [[ $(grep -c '^guard: step [0-9]*: .*(rollback [12] of at most 2)' "$WORK/$name.log") -eq 2 ]] ||
      die "expected two rollbacks before the end"
    grep -Eq '^error: step [0-9]+: .*the fault came back after 2 rollback\(s\) \(guard.max_rollbacks = 2\): ending the run; the model diverges: lower optim.lr \(now 30\)' \
      "$WORK/$name.err" || die "the error does not say the rollbacks are used up and what to change"
    ;;
  min-scale)
    np=$2; shift 2; name="guard_min_scale_np$np"
    # Every step overflows at the minimum scale (1e30): the second in a row is the fault.
    run_failing "$np" "$name" "${base[@]}" --set precision.mode=fp16 --set precision.init_scale=1e30 \
      --set precision.min_scale=1e30 --set guard.min_scale_steps=2 "$@"
    grep -Eq '^error: step 2: 2 overflowing steps in a row at the minimum loss scale 1e\+30 \(guard.min_scale_steps = 2\); .*guard.non_finite = "abort": ending the run' \
      "$WORK/$name.err" || die "the error does not name the minimum-scale fault at step 2"
    ;;
  spike-skip)
    np=$2; shift 2; name="guard_spike_skip_np$np"
    run_trainer "$np" "$name" "${base[@]}" --set guard.loss_spike=skip --set guard.spike_window=3 \
      --set guard.spike_warmup=5 --multiply-loss "12:$((np - 1))x1000" "$@" > /dev/null
    csv="$WORK/$name/metrics.csv"
    [[ "$(fault_row "$csv" 12)" == "loss_spike/skip  1" ]] ||
      die "step 12's row: '$(fault_row "$csv" 12)', expected 'loss_spike/skip  1'"
    awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
      { crc[$1] = $c["weights_crc"]; f[$1] = $c["fault"] }
      END { for (s in f) if (f[s] != "" && s != 12) { print "a fault at step " s; exit 1 }
            if (crc[12] != crc[11] || crc[13] == crc[12]) { print "weights CRC 11/12/13: " crc[11] " " crc[12] " " crc[13]; exit 1 } }' \
      "$csv" || die "step 12 was not the only skipped step, or it changed the weights"
    echo "the 1000x loss of step 12 skipped; the weights unchanged by it"
    ;;
  bitwise)
    np=$2; shift 2
    run_trainer "$np" "guard_off_np$np" "${base[@]}" "$@" > /dev/null
    run_trainer "$np" "guard_on_np$np" "${base[@]}" --set guard.non_finite=rollback --set guard.loss_spike=rollback \
      --set guard.spike_warmup=0 --set guard.spike_window=1 --set guard.spike_factor=2 \
      --set guard.replica=rollback --set guard.replica_every=1 "$@" > /dev/null
    grep -q '^guard: ' "$WORK/guard_on_np$np.log" && die "the guard acted on a run without a fault"
    cols() { awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
      { print $1, $c["loss"], $c["grad_norm"], $c["weights_crc"], $c["loss_scale"], $c["skipped"] }' "$1"; }
    diff <(cols "$WORK/guard_off_np$np/metrics.csv") <(cols "$WORK/guard_on_np$np/metrics.csv") ||
      die "the guards changed a run without a fault"
    echo "guards on, no fault: bitwise the run without them ($(cols "$WORK/guard_on_np$np/metrics.csv" | wc -l) rows)"
    ;;
  *) die "unknown mode '${1:-}'" ;;
esac
