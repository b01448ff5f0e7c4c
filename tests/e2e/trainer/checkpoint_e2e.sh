#!/usr/bin/env bash
# End-to-end checks of checkpoints and resume (session/checkpointing.hpp), driven by
# CTest (tests/e2e/trainer/CMakeLists.txt). Environment: as trainer_e2e.sh, plus
# CKPT_TOOL (trainer-ckpt). Every case trains the tiny model for 40 steps with a
# checkpoint every 10, so the straight run and the interrupted one share the
# learning-rate schedule, and logs every step. Every resumed job must have
# computed exactly the steps after its checkpoint (check_resumed, e2e_lib.sh).
#   resume NP TAG [--set ...]   40 steps straight vs 20 + resume for 20 at NP ranks: the resumed
#                               job trains exactly steps 21-40; metrics (loss, val_loss, lr,
#                               grad_norm, loss_scale, skipped, weights CRC) bitwise equal
#   elastic                     saved at 4 ranks ZeRO stage 3, resumed at 2 ranks stage 1, at 3
#                               ranks stage 2 and at 1 rank stage 0 with another micro-batch;
#                               saved at 1 rank, resumed at 4 ranks stage 3: each resumes at
#                               the step its checkpoint was written at (20) and trains to 40;
#                               losses within relative 5e-7, grad_norm 5e-6 of the straight run
#   crash NP [--set ...]        SIGKILL of one rank while it writes the step-30 checkpoint
#                               (--pause-in-checkpoint): latest still names step 20, the restart
#                               loads it and continues bitwise as the straight run (with
#                               --set checkpoint.async=true: killed while its background write
#                               is in flight, training having gone on)
#   async NP TAG [--set ...]    checkpoint.async: 40 steps with a checkpoint every 5, written in
#                               the background, against the same run written synchronously: the
#                               metrics bitwise equal, 8 background commits, every checkpoint's
#                               datasets bitwise equal (compare_checkpoints.py) and verified
#   async_signal NP             SIGUSR1 to every rank while the background write of step 20 is
#                               held (--pause-in-checkpoint, released by the test): the job
#                               completes that write and its stop checkpoint, exits 75, and
#                               every checkpoint verifies
#   corrupt NP                  one byte flipped in step 20's /state/exp_avg: trainer-ckpt verify
#                               and an explicit resume reject it (exit 2); resume = "auto" warns,
#                               falls back to step 10 and continues bitwise; a truncated file too
#   refuse NP                   a checkpoint of another model shape is refused (exit 2, no
#                               fallback); resume = "never" over existing checkpoints is refused;
#                               a checkpoint.dir that cannot be created is refused before training
#   complete NP                 a finished run restarted with resume = "auto" trains nothing and
#                               reports the same final validation loss; every_minutes and keep_last
#   rollback NP                 the lineage: 20 steps (checkpoints 5..20), then a job resumed from
#                               step_10 with another optim.lr stopped at 17 (`latest`: step 17); the
#                               next resume = "auto" loads step 17 (its parent chain 17 -> 15 -> 10
#                               -> 5 in `lineage` and in the files), says why and names step 20 as another
#                               lineage's; with step 17 damaged it falls back to step 15, never 20
#   lock NP                     one job per run directory: a second job (NP ranks) on the directory
#                               of a live one is refused (exit 2) naming the holder's host and PID,
#                               the live job's lock untouched and released at its exit (75 after
#                               SIGUSR1); a dead job's lock (this host, PID gone) and an earlier
#                               run of the same Slurm job (SLURM_RESTART_COUNT lower) are taken
#                               over, the dead job's .partial files removed; another Slurm job's
#                               lock on another host is refused; a checkpoint.dir outside the run
#                               directory is locked too
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=e2e_lib.sh
source "$here/e2e_lib.sh"

base=(--set train.steps=40 --set checkpoint.every_steps=10 --set train.log_every=1)

# Columns that must agree bitwise: step, loss, val_loss, lr, grad_norm, loss_scale, skipped, weights_crc.
same_metrics() {  # A B
  diff <(cut -d, -f1-5,9,10,11 "$1") <(cut -d, -f1-5,9,10,11 "$2") ||
    die "metrics differ: $1 vs $2"
  [[ $(wc -l < "$1") -eq 41 ]] || die "$1: expected 40 rows (every step to 40)"
  echo "bitwise identical: $(($(wc -l < "$1") - 1)) rows of step, loss, val_loss, lr, grad_norm, loss_scale, skipped, weights_crc"
}

latest_of() { cat "$WORK/$1/checkpoints/latest"; }

# The step a checkpoint file holds, as trainer-ckpt reads it.
ckpt_step() { "$CKPT_TOOL" info "$1" | awk '$1 == "step" { print $2 }'; }

# The run in $WORK/NAME stopped (--stop-after-step) after step N with a checkpoint of
# step N, the one `latest` names; prints N as the file holds it.
stopped_at() {  # NAME N
  local file; file="$WORK/$1/checkpoints/$(latest_of "$1")"
  grep -q "^stopped after step $2 of " "$WORK/$1.log" || die "$1: did not stop after step $2"
  grep -q "^checkpoint step $2: $file " "$WORK/$1.log" || die "$1: no checkpoint of step $2 written to $file"
  [[ "$(ckpt_step "$file")" == "$2" ]] || die "$file holds step $(ckpt_step "$file"), not $2"
  ckpt_step "$file"
}

expect_fail() {  # NAME RC REGEX -- runs the rest as the trainer command line; one error line matching REGEX
  local name=$1 want=$2 regex=$3; shift 4
  timeout 120 "$MPIEXEC" "$NPFLAG" "$np" "$TRAINER" "$INPUT" --set data.path="$DATA" "$@" \
    > "$WORK/$name.log" 2> "$WORK/$name.err"
  local rc=$?
  check_process_memory "$WORK/$name.log"
  cat "$WORK/$name.err"
  [[ $rc -ne 124 ]] || die "$name: trainer hung"
  [[ $rc -eq $want ]] || die "$name: expected exit code $want, got $rc"
  [[ $(grep -c '^error' "$WORK/$name.err") -eq 1 ]] || die "$name: expected exactly one error line"
  grep -Eq "$regex" "$WORK/$name.err" || die "$name: the error does not match /$regex/"
}

flip_byte() {  # FILE OFFSET
  local b; b=$(od -An -tu1 -j "$2" -N1 "$1" | tr -d ' ')
  printf "$(printf '\\%03o' $(( b ^ 0x5a )))" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none
}

case "${1:-}" in
  resume)
    np=$2; tag=$3; shift 3
    run_trainer "$np" "ck_${tag}_straight" "${base[@]}" "$@"
    run_trainer "$np" "ck_${tag}" "${base[@]}" "$@" --stop-after-step 20
    grep -q '^stopped after step 20 of 40' "$WORK/ck_${tag}.log" || die "did not stop after step 20"
    [[ "$(latest_of "ck_${tag}")" == step_00000020.h5 ]] || die "latest does not name step 20"
    LOG="$WORK/ck_${tag}.resume.log" train_in "$np" "ck_${tag}" "${base[@]}" "$@"
    grep -q "^resumed from $WORK/ck_${tag}/checkpoints/step_00000020.h5: step 20, 160 samples" \
      "$WORK/ck_${tag}.resume.log" || die "did not resume from step 20"
    check_resumed "$WORK/ck_${tag}.resume.log" "$WORK/ck_${tag}" 20 40
    same_metrics "$WORK/ck_${tag}_straight/metrics.csv" "$WORK/ck_${tag}/metrics.csv"
    ;;
  elastic)
    # Every step of the 40 against the straight run, relative: loss and val_loss 5e-7,
    # grad_norm 5e-6 (measured at most 9.5e-9 loss, 7.2e-8 val_loss, 9.9e-7 grad_norm
    # over the four resumes; the grad_norm differences grow in the late steps).
    el_tol=(5e-7 5e-6)
    run_trainer 4 ck_el_straight "${base[@]}" --set parallel.zero_stage=3
    run_trainer 4 ck_el_s3_np4 "${base[@]}" --set parallel.zero_stage=3 --stop-after-step 20
    # The step the checkpoint was written at; every resumed job must resume there and end at train.steps (40).
    written=$(stopped_at ck_el_s3_np4 20) || exit 1
    for target in "2 1" "3 2" "1 0"; do
      read -r np stage <<< "$target"
      name="ck_el_to_s${stage}_np$np"
      rm -rf "${WORK:?}/$name"; cp -r "$WORK/ck_el_s3_np4" "$WORK/$name"
      extra=(); [[ $np -eq 1 ]] && extra=(--set train.micro_batch=3)  # another micro-batch split too
      LOG="$WORK/$name.resume.log" train_in "$np" "$name" "${base[@]}" --set parallel.zero_stage="$stage" "${extra[@]}"
      grep -Eq "written by 4 ranks at ZeRO stage 3 in fp32, now $np ranks? at stage $stage" "$WORK/$name.resume.log" ||
        die "the resume line does not name the change of ranks and stage"
      check_resumed "$WORK/$name.resume.log" "$WORK/$name" "$written" 40
      compare "$WORK/ck_el_straight/metrics.csv" "$WORK/$name/metrics.csv" "${el_tol[@]}"
    done
    # Upwards: saved by 1 rank (padded to 16 elements), resumed by 4 at stage 3 (padded to 64:
    # the last rank's shard reaches past the file's vectors, which read as zeros).
    run_trainer 1 ck_el_s0_np1 "${base[@]}" --stop-after-step 20
    written=$(stopped_at ck_el_s0_np1 20) || exit 1
    LOG="$WORK/ck_el_s0_np1.resume.log" train_in 4 ck_el_s0_np1 "${base[@]}" --set parallel.zero_stage=3
    grep -q "written by 1 rank at ZeRO stage 0 in fp32, now 4 ranks at stage 3" "$WORK/ck_el_s0_np1.resume.log" ||
      die "the resume line does not name the change of ranks and stage"
    check_resumed "$WORK/ck_el_s0_np1.resume.log" "$WORK/ck_el_s0_np1" "$written" 40
    compare "$WORK/ck_el_straight/metrics.csv" "$WORK/ck_el_s0_np1/metrics.csv" "${el_tol[@]}"
    ;;
  crash)
    np=$2; shift 2; extra=("$@")
    name="ck_crash_np$np${extra[*]:+_async}"; dir="$WORK/$name/checkpoints"
    run_trainer "$np" "${name}_straight" "${base[@]}"
    rm -rf "${WORK:?}/$name"
    timeout 300 "$MPIEXEC" "$NPFLAG" "$np" "$TRAINER" "$INPUT" --set data.path="$DATA" \
      --set train.run_dir="$WORK/$name" "${base[@]}" "${extra[@]}" --pause-in-checkpoint 30 > "$WORK/$name.log" 2>&1 &
    job=$!
    victim=$((np - 1))
    for _ in $(seq 1200); do  # up to 120 s for every rank to pause mid-write
      n=$(ls "$dir"/step_00000030.h5.partial.paused.* 2>/dev/null | wc -l)
      [[ $n -eq $np ]] && break
      kill -0 "$job" 2>/dev/null || break
      sleep 0.1
    done
    [[ -s "$dir/step_00000030.h5.partial.paused.$victim" ]] || { cat "$WORK/$name.log"; die "the ranks did not pause"; }
    pid=$(cat "$dir/step_00000030.h5.partial.paused.$victim")
    echo "killing rank $victim (pid $pid) with SIGKILL while it writes step 30"
    kill -KILL "$pid"
    wait "$job"; rc=$?
    check_process_memory "$WORK/$name.log"
    cat "$WORK/$name.log"
    [[ $rc -ne 0 && $rc -ne 124 ]] || die "the killed job exited with $rc"
    [[ -e "$dir/step_00000030.h5.partial" && ! -e "$dir/step_00000030.h5" ]] || die "expected only a .partial of step 30"
    [[ "$(latest_of "$name")" == step_00000020.h5 ]] || die "latest does not name step 20 after the crash"
    if [[ ${#extra[@]} -gt 0 ]]; then
      grep -q '^checkpoint step 30: staged .* writing in the background' "$WORK/$name.log" ||
        die "the step-30 checkpoint was not written in the background"
    fi
    LOG="$WORK/$name.restart.log" train_in "$np" "$name" "${base[@]}" "${extra[@]}"
    check_resumed "$WORK/$name.restart.log" "$WORK/$name" 20 40
    same_metrics "$WORK/${name}_straight/metrics.csv" "$WORK/$name/metrics.csv"
    ls "$dir"
    [[ -z "$(ls "$dir" | grep partial)" ]] || die "the interrupted write was not cleaned up"
    [[ "$(ls "$dir" | grep -c '^step_.*\.h5$')" -eq 3 ]] || die "expected keep_last = 3 checkpoints"
    ;;
  async)
    np=$2; tag=$3; shift 3
    every=(--set train.steps=40 --set checkpoint.every_steps=5 --set checkpoint.keep_last=8 --set train.log_every=1)
    run_trainer "$np" "ck_${tag}_sync" "${every[@]}" "$@"
    run_trainer "$np" "ck_${tag}_async" "${every[@]}" --set checkpoint.async=true "$@"
    same_metrics "$WORK/ck_${tag}_sync/metrics.csv" "$WORK/ck_${tag}_async/metrics.csv"
    n=$(grep -c '^checkpoint step [0-9]*: .* in the background | training blocked [0-9.]* s' "$WORK/ck_${tag}_async.log")
    [[ $n -eq 8 ]] || die "expected 8 checkpoints committed in the background, found $n"
    grep -q 'in the background' "$WORK/ck_${tag}_sync.log" && die "the synchronous run wrote in the background"
    grep -Eq '^  ckpt_staging +[0-9]+\.[0-9]*[1-9][0-9]* MiB' "$WORK/ck_${tag}_async.log" || die "no ckpt_staging in the async run's plan"
    grep -Eq '^  ckpt_staging +0\.000 MiB' "$WORK/ck_${tag}_sync.log" || die "ckpt_staging planned without checkpoint.async"
    for s in 5 10 15 20 25 30 35 40; do
      f=$(printf 'step_%08d.h5' "$s")
      /usr/bin/python3 "$here/compare_checkpoints.py" "$WORK/ck_${tag}_sync/checkpoints/$f" \
        "$WORK/ck_${tag}_async/checkpoints/$f" --replace "$WORK/ck_${tag}_sync" "$WORK/ck_${tag}_async" || die "step $s: the async checkpoint differs from the synchronous one"
      "$CKPT_TOOL" verify "$WORK/ck_${tag}_async/checkpoints/$f" > /dev/null || die "step $s: the async checkpoint does not verify"
    done
    [[ "$(latest_of "ck_${tag}_async")" == step_00000040.h5 ]] || die "latest does not name step 40"
    ;;
  async_signal)
    np=$2; name="ck_asig_np$np"; dir="$WORK/$name/checkpoints"
    rm -rf "${WORK:?}/$name"
    timeout 300 "$MPIEXEC" "$NPFLAG" "$np" "$TRAINER" "$INPUT" --set data.path="$DATA" \
      --set train.run_dir="$WORK/$name" --set train.steps=100000 --set checkpoint.every_steps=10 \
      --set checkpoint.async=true --set train.log_every=1 --pause-in-checkpoint 20 > "$WORK/$name.log" 2>&1 &
    job=$!
    for _ in $(seq 1200); do  # up to 120 s for every rank's writer to pause
      n=$(ls "$dir"/step_00000020.h5.partial.paused.* 2>/dev/null | wc -l)
      [[ $n -eq $np ]] && break
      kill -0 "$job" 2>/dev/null || break
      sleep 0.1
    done
    [[ $n -eq $np ]] || { cat "$WORK/$name.log"; die "the writers did not pause"; }
    for m in "$dir"/step_00000020.h5.partial.paused.*; do kill -USR1 "$(cat "$m")"; done
    echo "SIGUSR1 sent to every rank while the step-20 write is held"
    sleep 2
    touch "$dir/step_00000020.h5.partial.resume"  # releases the writers (--pause-in-checkpoint)
    wait "$job"; rc=$?
    cat "$WORK/$name.log"
    check_process_memory "$WORK/$name.log"
    [[ $rc -eq 75 ]] || die "expected exit code 75 after SIGUSR1, got $rc"
    stop=$(sed -n 's/^stopping after step \([0-9]*\) of .*/\1/p' "$WORK/$name.log")
    [[ -n $stop && $stop -gt 20 ]] || die "no stop after step 20 reported"
    grep -q '^checkpoint step 20: .* in the background' "$WORK/$name.log" || die "the held step-20 write was not completed"
    [[ "$(latest_of "$name")" == "$(printf 'step_%08d.h5' "$stop")" ]] || die "latest does not name the stop step $stop"
    for f in "$dir"/step_*.h5; do "$CKPT_TOOL" verify "$f" > /dev/null || die "$f does not verify"; done
    [[ -z "$(ls "$dir" | grep 'partial$')" ]] || die "a .partial file is left"
    ;;
  corrupt)
    np=$2; name="ck_corrupt_np$np"; dir="$WORK/$name/checkpoints"
    run_trainer "$np" "${name}_straight" "${base[@]}"
    run_trainer "$np" "$name" "${base[@]}" --stop-after-step 20
    good="$dir/step_00000020.h5"
    "$CKPT_TOOL" verify "$good" || die "trainer-ckpt verify rejects a good checkpoint"
    cp "$good" "$WORK/$name.truncated.h5"
    truncate -s $(( $(stat -c %s "$good") / 2 )) "$WORK/$name.truncated.h5"
    off=$("$CKPT_TOOL" info "$good" | sed -n 's|.*/state/exp_avg .*file offset \([0-9]*\).*|\1|p')
    [[ -n "$off" && "$off" -gt 0 ]] || die "no file offset of /state/exp_avg from trainer-ckpt info"
    flip_byte "$good" $((off + 1000))
    "$CKPT_TOOL" verify "$good" > "$WORK/$name.verify" 2>&1; rc=$?
    cat "$WORK/$name.verify"
    [[ $rc -eq 2 ]] || die "trainer-ckpt verify: expected exit 2 on the damaged file, got $rc"
    grep -q '/state/exp_avg.*CHECKSUM MISMATCH' "$WORK/$name.verify" || die "verify does not name /state/exp_avg"
    expect_fail "${name}_explicit" 2 "step_00000020\.h5: dataset /state/exp_avg: checksum mismatch" -- \
      --set train.run_dir="$WORK/${name}_explicit" "${base[@]}" --set checkpoint.resume="$good"
    expect_fail "${name}_truncated" 2 "$name\.truncated\.h5: .*(truncated|damaged)" -- \
      --set train.run_dir="$WORK/${name}_truncated" "${base[@]}" --set checkpoint.resume="$WORK/$name.truncated.h5"
    LOG="$WORK/$name.resume.log" train_in "$np" "$name" "${base[@]}"
    grep -q "^warning: $good: dataset /state/exp_avg: checksum mismatch.*falling back to the previous complete checkpoint" \
      "$WORK/$name.resume.log" || die "no fallback warning naming the damaged file"
    check_resumed "$WORK/$name.resume.log" "$WORK/$name" 10 40  # fell back to step 10
    same_metrics "$WORK/${name}_straight/metrics.csv" "$WORK/$name/metrics.csv"
    ;;
  refuse)
    np=$2; name="ck_refuse_np$np"
    run_trainer "$np" "$name" "${base[@]}" --stop-after-step 10
    expect_fail "${name}_shape" 2 "step_00000010\.h5: the checkpoint's model does not match .*tensor 'wpe.weight' has shape \(16, 32\) there, \(12, 32\) here" -- \
      --set train.run_dir="$WORK/$name" "${base[@]}" --set model.seq_len=12
    grep -q 'falling back' "$WORK/${name}_shape.err" && die "an incompatible model must not fall back"
    expect_fail "${name}_never" 2 "checkpoint\.resume = \"never\", but checkpoint\.dir .* already holds 1 checkpoint" -- \
      --set train.run_dir="$WORK/$name" "${base[@]}" --set checkpoint.resume=never
    [[ "$(latest_of "$name")" == step_00000010.h5 ]] || die "the refused runs touched the checkpoints"
    # A checkpoint.dir that cannot be created is refused before training.
    expect_fail "${name}_dir" 2 "checkpoint\.dir: cannot create directory '$WORK/$name\.log/ck'" -- \
      --set train.run_dir="$WORK/${name}_dir" "${base[@]}" --set checkpoint.dir="$WORK/$name.log/ck"
    [[ ! -e "$WORK/${name}_dir/metrics.csv" ]] || die "it trained with a checkpoint.dir it cannot use"
    ;;
  complete)
    np=$2; name="ck_complete_np$np"
    run_trainer "$np" "$name" --set train.steps=40 --set checkpoint.every_minutes=0.00001 \
      --set checkpoint.keep_last=2 --set train.eval_every=0
    [[ $(grep -c '^checkpoint step' "$WORK/$name.log") -ge 2 ]] || die "every_minutes wrote fewer than 2 checkpoints"
    [[ $(ls "$WORK/$name/checkpoints" | grep -c '^step_.*\.h5$') -eq 2 ]] || die "keep_last = 2 not kept"
    [[ "$(latest_of "$name")" == step_00000040.h5 ]] || die "no final checkpoint at step 40"
    LOG="$WORK/$name.again.log" train_in "$np" "$name" --set train.steps=40 --set checkpoint.every_minutes=0.00001 \
      --set checkpoint.keep_last=2 --set train.eval_every=0
    grep -q '^nothing to train: the checkpoint is at step 40 and train.steps = 40' "$WORK/$name.again.log" ||
      die "a finished run trained again"
    check_resumed "$WORK/$name.again.log" "$WORK/$name" 40 40
    a=$(sed -n 's/.*final val loss \([0-9.]*\).*/\1/p' "$WORK/$name.log")
    b=$(sed -n 's/.*final val loss \([0-9.]*\).*/\1/p' "$WORK/$name.again.log")
    [[ -n "$a" && "$a" == "$b" ]] || die "final val loss differs: '$a' vs '$b'"
    ;;
  rollback)
    np=$2; name="ck_rollback_np$np"; dir="$WORK/$name/checkpoints"
    every=(--set train.steps=40 --set checkpoint.every_steps=5 --set checkpoint.keep_last=10 --set train.log_every=1)
    run_trainer "$np" "$name" "${every[@]}" --stop-after-step 20
    [[ "$(latest_of "$name")" == step_00000020.h5 ]] || die "latest does not name step 20"
    # Rolled back: from step 10, with a change, stopped at 17.
    LOG="$WORK/$name.branch.log" train_in "$np" "$name" "${every[@]}" --set optim.lr=1e-3 \
      --set checkpoint.resume="$dir/step_00000010.h5" --stop-after-step 17
    grep -q "^resumed from $dir/step_00000010.h5: step 10," "$WORK/$name.branch.log" || die "the branch did not start at step 10"
    [[ "$(latest_of "$name")" == step_00000017.h5 ]] || die "latest does not name step 17"
    grep -qx "$(printf 'step_00000017.h5\tstep_00000015.h5')" "$dir/lineage" || die "lineage: 17's parent is not 15"
    grep -qx "$(printf 'step_00000015.h5\tstep_00000010.h5')" "$dir/lineage" || die "lineage: 15's parent is not 10"
    "$CKPT_TOOL" info "$dir/step_00000017.h5" | grep -Eq '^  parent +step_00000015\.h5$' || die "step 17's file does not name its parent"
    [[ -e "$dir/step_00000020.h5" ]] || die "the abandoned lineage's step 20 was removed"
    # A copy with step 17 damaged: the fallback follows the lineage (15), never step 20.
    rm -rf "${WORK:?}/${name}_damaged"; cp -r "$WORK/$name" "$WORK/${name}_damaged"
    off=$("$CKPT_TOOL" info "$dir/step_00000017.h5" | sed -n 's|.*/state/exp_avg .*file offset \([0-9]*\).*|\1|p')
    flip_byte "$WORK/${name}_damaged/checkpoints/step_00000017.h5" $((off + 100))
    LOG="$WORK/$name.fallback.log" train_in "$np" "${name}_damaged" "${every[@]}" --set optim.lr=1e-3 --stop-after-step 18
    grep -q "falling back to the previous complete checkpoint of its lineage, $WORK/${name}_damaged/checkpoints/step_00000015.h5" \
      "$WORK/$name.fallback.log" || die "no fallback to step 15 of the lineage"
    grep -q "^resumed from $WORK/${name}_damaged/checkpoints/step_00000015.h5: step 15," "$WORK/$name.fallback.log" ||
      die "the fallback did not resume from step 15"
    # The automatic resume of the rolled-back run: step 17, not 20.
    LOG="$WORK/$name.auto.log" train_in "$np" "$name" "${every[@]}" --set optim.lr=1e-3 --stop-after-step 19
    grep -q "^resumed from $dir/step_00000017.h5: step 17," "$WORK/$name.auto.log" || die "resume = auto did not load step 17"
    grep -q '^resume: checkpoint.resume = "auto": `latest` names step_00000017.h5; falling back only to its lineage.s older checkpoints (step_00000015.h5 and 2 more); not of this lineage, never loaded automatically: step_00000020.h5' \
      "$WORK/$name.auto.log" || die "the resume does not say why step 17 and not step 20"
    grep -q '^stopped after step 19 of 40' "$WORK/$name.auto.log" || die "the resumed job did not train 18-19"
    echo "rollback: resume = auto loaded step 17 (latest), not 20; damaged 17 fell back to 15"
    ;;
  lock)
    np=$2; name="ck_lock_np$np"; run="$WORK/$name"; lock="$run/shardtrain.lock"
    rm -rf "${WORK:?}/$name" "$WORK/$name".*
    # A live job (1 rank, long) holds the directory.
    timeout 300 "$MPIEXEC" "$NPFLAG" 1 "$TRAINER" "$INPUT" --set data.path="$DATA" --set train.run_dir="$run" \
      --set train.steps=1000000 --set train.log_every=100 --set train.eval_every=0 > "$WORK/$name.live.log" 2>&1 &
    live=$!
    for _ in $(seq 600); do [[ -s "$lock" ]] && grep -q '^step ' "$WORK/$name.live.log" 2>/dev/null && break; sleep 0.1; done
    [[ -s "$lock" ]] || { cat "$WORK/$name.live.log"; die "the live job holds no lock file"; }
    cat "$lock"
    holder_pid=$(sed -n 's/^pid=//p' "$lock"); host=$(hostname)
    before=$(cat "$lock")
    expect_fail "${name}_second" 2 "train\.run_dir '$run' is in use by another job \(host $host, PID $holder_pid, started [0-9T:Z-]+; lock file $lock\)" -- \
      --set train.run_dir="$run" --set train.steps=5
    [[ "$(cat "$lock")" == "$before" ]] || die "the refused job touched the live job's lock"
    kill -USR1 "$holder_pid"; wait "$live"; rc=$?  # the rank itself: `timeout` would die of the signal
    [[ $rc -eq 75 ]] || { cat "$WORK/$name.live.log"; die "the live job exited with $rc, expected 75"; }
    [[ ! -e "$lock" ]] || die "the live job did not release its lock at exit"
    # A dead job's lock (this host, its PID gone) and its .partial files: taken over, removed.
    sh -c 'exit 0' & dead=$!; wait "$dead"
    printf 'host=%s\npid=%s\npid_start=1\nslurm_job_id=\nslurm_restart_count=0\nstarted=2026-01-01T00:00:00Z\n' "$host" "$dead" > "$lock"
    mkdir -p "$run/checkpoints"; touch "$run/checkpoints/step_00000099.h5.partial" "$run/checkpoints/step_00000099.h5.partial.paused.0"
    LOG="$WORK/$name.dead.log" train_in "$np" "$name" --set train.steps=10 --set checkpoint.every_steps=5
    grep -q "^note: train.run_dir '$run': took over the lock of a job that is gone (host $host, PID $dead, started 2026-01-01T00:00:00Z): its process (PID $dead on this host) no longer exists" \
      "$WORK/$name.dead.log" || die "no note of the dead job's lock taken over"
    [[ -z "$(ls "$run/checkpoints" | grep partial)" ]] || die "the dead job's .partial files were left"
    [[ ! -e "$lock" ]] || die "the lock was not released at exit"
    # An earlier run of this Slurm job (requeued; its node is another): taken over.
    printf 'host=other-node\npid=12345\npid_start=1\nslurm_job_id=4242\nslurm_restart_count=0\nstarted=2026-01-01T00:00:00Z\n' > "$lock"
    timeout 120 "$MPIEXEC" "$NPFLAG" "$np" env SLURM_JOB_ID=4242 SLURM_RESTART_COUNT=1 "$TRAINER" "$INPUT" \
      --set data.path="$DATA" --set train.run_dir="$run" --set train.steps=12 --set checkpoint.every_steps=5 \
      > "$WORK/$name.requeue.log" 2>&1; rc=$?
    cat "$WORK/$name.requeue.log"
    [[ $rc -eq 0 ]] || die "the requeued Slurm job exited with $rc"
    grep -q "took over the lock of a job that is gone (host other-node, PID 12345, Slurm job 4242 (restart 0), started .*): Slurm requeued job 4242 (restart 0 -> 1)" \
      "$WORK/$name.requeue.log" || die "no note of the requeued job taking over"
    [[ ! -e "$lock" ]] || die "the lock was not released at exit"
    # Another Slurm job's lock, on another host: refused (it may be running).
    printf 'host=other-node\npid=12345\npid_start=1\nslurm_job_id=4242\nslurm_restart_count=0\nstarted=2026-01-01T00:00:00Z\n' > "$lock"
    timeout 120 "$MPIEXEC" "$NPFLAG" "$np" env SLURM_JOB_ID=4243 "$TRAINER" "$INPUT" --set data.path="$DATA" \
      --set train.run_dir="$run" --set train.steps=12 > "$WORK/$name.other.log" 2> "$WORK/$name.other.err"; rc=$?
    cat "$WORK/$name.other.err"
    [[ $rc -eq 2 ]] || die "another Slurm job's lock: expected exit 2, got $rc"
    grep -q "is in use by another job (host other-node, PID 12345, Slurm job 4242 (restart 0)" "$WORK/$name.other.err" ||
      die "the refusal does not name the holder"
    # A checkpoint.dir outside the run directory is locked too (checkpoints on).
    outside="$WORK/${name}_outside_ckpt"; rm -rf "$outside"; mkdir -p "$outside"
    printf 'host=other-node\npid=12345\npid_start=1\nslurm_job_id=\nslurm_restart_count=0\nstarted=2026-01-01T00:00:00Z\n' > "$outside/shardtrain.lock"
    expect_fail "${name}_outside" 2 "checkpoint\.dir '$outside' is in use by another job \(host other-node, PID 12345, started 2026-01-01T00:00:00Z; lock file $outside/shardtrain\.lock\)" -- \
      --set train.run_dir="$WORK/${name}_other_run" --set checkpoint.dir="$outside" --set checkpoint.every_steps=5 --set train.steps=5
    [[ ! -e "$WORK/${name}_other_run/shardtrain.lock" ]] || die "the refused job kept its run directory's lock"
    echo "lock: a live job's directory refused; dead and requeued holders taken over; released at exit"
    ;;
  *)
    die "usage: checkpoint_e2e.sh resume|elastic|crash|corrupt|refuse|complete|rollback|lock ..." ;;
esac
