#!/usr/bin/env bash
# End-to-end checks of checkpoint storage faults (issue 34; io/checkpoint_phase.hpp,
# session/checkpoint_session.hpp), driven by CTest (tests/e2e/trainer/CMakeLists.txt).
# Environment: as checkpoint_e2e.sh, plus INJECTOR (tests/support/fault_injector.c,
# loaded with LD_PRELOAD: one rank's open/write/fsync/rename/close of a checkpoint
# file fails with EIO/ENOSPC/EDQUOT, never returns, or is slow).
# Every case trains the tiny model for 30 steps with a checkpoint every 10 at
# parallel.collective_timeout_s = 10 and checkpoint.io_timeout_s = 10, under
# `timeout` (no case may hang), and after every case `latest` names a file that
# `trainer-ckpt verify` accepts and no .partial is left.
#   survive NP MODE CALL RANK NTH ERRNO [FILTER]
#       the fault hits the first checkpoint (step 10), a scheduled one: the job
#       completes (exit 0); rank 0's warning names rank RANK, the phase, the file and
#       the system error; step 10 is abandoned (absent), steps 20 and 30 commit
#   required NP MODE CALL RANK NTH ERRNO WHY
#       the fault hits a checkpoint the job cannot do without (WHY: signal: SIGUSR1 at
#       step 15, end: the end of the run at step 30, walltime: the wall-time guard's
#       (train.time_limit = 4.8 s, no schedule); max: every checkpoint every 5 steps
#       fails, checkpoint.max_failures = 3): exit 1 (never 75) within 20 s (2 x
#       collective_timeout_s) of the fault, the failing rank and the system error on stderr, and
#       the step of the last good checkpoint
#   hang NP MODE CALL RANK NTH
#       the call never returns (storage that stops answering), checkpoint.io_timeout_s = 4:
#       exit 1 within 15 s of the hang, "checkpoint I/O: phase ..." from rank RANK, and
#       not the collective watchdog's message
#   slow NP
#       rank 0's create of the background checkpoint file takes 6 s with
#       collective_timeout_s = 3: the collective watchdog does not fire, the job completes
#   resume NP RANK ERRNO
#       reads (issue 47): after 20 clean steps (checkpoints at 10 and 20), the job
#       resumes (resume = "auto") while rank RANK's reads of the checkpoint files
#       never return (ERRNO HANG) or fail (EIO): exit 1 within 30 s of the start,
#       rank RANK, the phase 'read' and step_00000020.h5 named (and EIO's text);
#       no fallback to step 10 (the file is not bad: the storage is), latest unchanged
#   init_from NP RANK
#       rank RANK's reads of model.init_from's file (an export of a clean run's
#       checkpoint) never return: exit 1 within 30 s, "model.init_from I/O: phase 'read'"
#   data NP RANK
#       rank RANK's reads of the data set never return while it is opened at
#       start-up: exit 1 within 30 s, "data set I/O: phase 'open'" and the data file
#   verify NP RANK
#       `trainer-ckpt verify --io-timeout 5` at NP ranks while rank RANK's reads of
#       the checkpoint never return: exit 1 within 30 s, rank RANK, 'read' and the file
# MODE: sync or async (checkpoint.async). Several cases per invocation: "CASE ... -- CASE ...".
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=e2e_lib.sh
source "$here/e2e_lib.sh"
[[ -f "${INJECTOR:-}" ]] || die "INJECTOR (the fault injector library) is not set or missing: '${INJECTOR:-}'"

errno_text() {  # what strerror says, as the messages carry it
  case $1 in
    EIO) echo "Input/output error" ;; ENOSPC) echo "No space left on device" ;;
    EDQUOT) echo "Disk quota exceeded" ;; *) die "unknown errno $1" ;;
  esac
}

# Runs the trainer into $WORK/NAME with a fault; sets rc, secs; log in $WORK/NAME.log.
# KEEP=1: the run directory is kept (a resume).
run_faulty() {  # NAME NP LIMIT_S CALL RANK NTH ERRNO FILTER trainer-args...
  local name=$1 np=$2 limit=$3 call=$4 rank=$5 nth=$6 err=$7 filter=$8; shift 8
  [[ ${KEEP:-0} == 1 ]] || rm -rf "${WORK:?}/$name"
  mkdir -p "$WORK"
  local t0=$SECONDS fault_at="$WORK/$name.fault_at"
  rm -f "$fault_at"
  # The log is copied line by line, noting when the first fault was injected.
  LD_PRELOAD="$INJECTOR" SHARDTRAIN_FAULT_CALL=$call SHARDTRAIN_FAULT_RANK=$rank SHARDTRAIN_FAULT_NTH=$nth \
    SHARDTRAIN_FAULT_ERRNO=$err SHARDTRAIN_FAULT_PATH=$filter SHARDTRAIN_FAULT_TIMES=${TIMES:-1} \
    timeout -k 5 "$limit" "$MPIEXEC" "$NPFLAG" "$np" "$TRAINER" "$INPUT" \
    --set data.path="$DATA" --set train.run_dir="$WORK/$name" --set train.steps=30 \
    --set checkpoint.every_steps=10 --set parallel.collective_timeout_s=10 --set checkpoint.io_timeout_s=10 \
    "$@" 2>&1 | while IFS= read -r line; do
      printf '%s\n' "$line"
      [[ ! -e "$fault_at" && $line == "fault injector: "*" -> "* ]] && date +%s.%N > "$fault_at"
    done > "$WORK/$name.log"
  rc=${PIPESTATUS[0]}
  secs=$((SECONDS - t0))
  # Seconds from the first injected fault to the end of the job.
  after_fault=$(awk -v end="$(date +%s.%N)" '{ printf "%.1f", end - $1 }' "$fault_at" 2> /dev/null)
  echo "=== $name: exit $rc after $secs s (${after_fault:-?} s after the fault)"
  cat "$WORK/$name.log"
  [[ $rc -ne 124 && $rc -ne 137 ]] || die "$name: still running after $limit s (a hang)"
  grep -q "^fault injector: rank $rank: $call(.*) -> " "$WORK/$name.log" || die "$name: the fault was never injected"
}

# After every case: `latest` (when there is one) names a file trainer-ckpt verifies; no .partial left.
check_dir() {  # NAME
  local dir="$WORK/$1/checkpoints"
  if [[ -f "$dir/latest" ]]; then
    local f; f=$(cat "$dir/latest")
    [[ -f "$dir/$f" ]] || die "$1: latest names $f, which does not exist"
    "$CKPT_TOOL" verify "$dir/$f" > "$WORK/$1.verify" 2>&1 || { cat "$WORK/$1.verify"; die "$1: latest ($f) does not verify"; }
    echo "$1: latest = $f verifies"
  fi
  if compgen -G "$dir/*.partial*" > /dev/null; then ls -l "$dir"; die "$1: a .partial file was left"; fi
}

mode_args() {  # MODE
  case $1 in sync) echo "--set checkpoint.async=false" ;; async) echo "--set checkpoint.async=true" ;;
    *) die "unknown mode $1" ;; esac
}

case_survive() {  # NP MODE CALL RANK NTH ERRNO [FILTER]
  local np=$1 mode=$2 call=$3 rank=$4 nth=$5 err=$6 filter=${7:-.h5.partial}
  local name="faults_survive_${mode}_np${np}_${call}${nth}_r${rank}_${err}_${filter//[^a-z]/}"
  # shellcheck disable=SC2046
  run_faulty "$name" "$np" 120 "$call" "$rank" "$nth" "$err" "$filter" $(mode_args "$mode")
  [[ $rc -eq 0 ]] || die "$name: a failed scheduled checkpoint ended the job (exit $rc)"
  grep -Eq "^warning: checkpoint step 10 failed: rank $rank, phase '[a-z]+'[ :].*$(errno_text "$err").*training goes on" \
    "$WORK/$name.log" || die "$name: no warning naming rank $rank, the phase and '$(errno_text "$err")'"
  [[ $(grep -c '^warning: checkpoint step' "$WORK/$name.log") -eq 1 ]] || die "$name: one warning expected"
  grep -q "^checkpoint step 20: " "$WORK/$name.log" || die "$name: the next checkpoint (step 20) did not commit"
  grep -q "^done: 30 steps" "$WORK/$name.log" || die "$name: training did not complete"
  [[ "$(cat "$WORK/$name/checkpoints/latest")" == step_00000030.h5 ]] || die "$name: latest is not step 30"
  [[ ! -e "$WORK/$name/checkpoints/step_00000010.h5" ]] || die "$name: the failed step-10 checkpoint was kept"
  check_dir "$name"
}

case_required() {  # NP MODE CALL RANK NTH ERRNO WHY
  local np=$1 mode=$2 call=$3 rank=$4 nth=$5 err=$6 why=$7
  local name="faults_required_${why}_${mode}_np${np}_${call}${nth}_r${rank}_${err}" extra=() step last
  case $why in
    signal) extra=(--signal-at-step 15:0); step=15; last="the last good checkpoint is step 10 " ;;
    end) step=30; last="the last good checkpoint is step 20 " ;;
    max) extra=(--set checkpoint.every_steps=5 --set checkpoint.max_failures=3); step=15
         last="this run has no good checkpoint" ;;
    walltime) extra=(--set checkpoint.every_steps=0 --set train.steps=1000000 --set train.time_limit=0.08)
              step='[0-9]+'; last="this run has no good checkpoint" ;;
    *) die "unknown reason $why" ;;
  esac
  # shellcheck disable=SC2046
  TIMES=$([[ $why == max ]] && echo 0 || echo 1) \
    run_faulty "$name" "$np" 120 "$call" "$rank" "$nth" "$err" .h5.partial $(mode_args "$mode") "${extra[@]}"
  [[ $rc -eq 1 ]] || die "$name: exit $rc, expected 1 (never 75: a requeue would resume from older state)"
  # Bound: 2 x collective_timeout_s from the fault to the end of the job.
  awk -v t="$after_fault" 'BEGIN { exit !(t != "" && t <= 20) }' ||
    die "$name: ended ${after_fault:-?} s after the fault (bound: 20 s = 2 x collective_timeout_s)"
  local msg="^error: checkpoint step $step failed: rank $rank, phase '[a-z]+'[ :].*$(errno_text "$err")"
  grep -Eq "$msg" "$WORK/$name.log" || die "$name: no error naming step $step, rank $rank and '$(errno_text "$err")'"
  grep -q "$last" "$WORK/$name.log" || die "$name: the message does not say '$last'"
  case $why in
    max) grep -q "3 failed checkpoint(s) in a row (checkpoint.max_failures = 3)" "$WORK/$name.log" ||
           die "$name: max_failures not named"
         [[ $(grep -c '^warning: checkpoint step' "$WORK/$name.log") -eq 2 ]] || die "$name: 2 warnings expected" ;;
    *) grep -q "ending with exit code 1, not 75" "$WORK/$name.log" || die "$name: does not say why not 75" ;;
  esac
  grep -q '^stopping after step' "$WORK/$name.log" && die "$name: claims a complete stop checkpoint"
  check_dir "$name"
  case $why in
    signal) [[ "$(cat "$WORK/$name/checkpoints/latest")" == step_00000010.h5 ]] || die "$name: latest moved" ;;
    end) [[ "$(cat "$WORK/$name/checkpoints/latest")" == step_00000020.h5 ]] || die "$name: latest moved" ;;
    max|walltime) [[ ! -e "$WORK/$name/checkpoints/latest" ]] || die "$name: a latest without a good checkpoint" ;;
  esac
  [[ $why != walltime ]] || grep -q "cannot do without it (the wall-time guard" "$WORK/$name.log" ||
    die "$name: the wall-time guard is not named"
}

case_hang() {  # NP MODE CALL RANK NTH
  local np=$1 mode=$2 call=$3 rank=$4 nth=$5
  local name="faults_hang_${mode}_np${np}_${call}${nth}_r${rank}"
  # shellcheck disable=SC2046
  run_faulty "$name" "$np" 60 "$call" "$rank" "$nth" HANG .h5.partial $(mode_args "$mode") \
    --set checkpoint.io_timeout_s=4
  [[ $rc -eq 1 ]] || die "$name: exit $rc, expected 1"
  grep -Eq "^error \(rank $rank\): checkpoint I/O: phase '[a-z]+' of .*step_00000010\.h5\.partial has not finished on this rank after [0-9.]+ s \(checkpoint\.io_timeout_s = 4\)" \
    "$WORK/$name.log" || die "$name: no checkpoint I/O deadline message from rank $rank"
  grep -q "watchdog:" "$WORK/$name.log" && die "$name: the collective watchdog fired before the I/O deadline"
  awk -v t="$after_fault" 'BEGIN { exit !(t != "" && t <= 15) }' ||
    die "$name: ended ${after_fault:-?} s after the call hung (bound: 15 s; checkpoint.io_timeout_s = 4)"
  check_dir_after_kill "$name"
}

# A killed job may leave its .partial (the next commit removes it); latest must still verify.
check_dir_after_kill() {  # NAME
  local dir="$WORK/$1/checkpoints"
  [[ ! -f "$dir/latest" ]] || "$CKPT_TOOL" verify "$dir/$(cat "$dir/latest")" > /dev/null ||
    die "$1: latest does not verify"
}

case_slow() {  # NP
  local np=$1 name="faults_slow_np$1"
  SHARDTRAIN_FAULT_SLOW_S=6 run_faulty "$name" "$np" 120 open 0 1 SLOW .h5.partial --set checkpoint.async=true \
    --set parallel.collective_timeout_s=3
  [[ $rc -eq 0 ]] || die "$name: slow checkpoint storage ended the job (exit $rc)"
  grep -q "watchdog:" "$WORK/$name.log" && die "$name: the collective watchdog fired on slow checkpoint storage"
  grep -q "^done: 30 steps" "$WORK/$name.log" || die "$name: training did not complete"
  [[ "$(cat "$WORK/$name/checkpoints/latest")" == step_00000030.h5 ]] || die "$name: latest is not step 30"
  check_dir "$name"
}

# A clean run of STEPS steps (checkpoints every 10) into $WORK/NAME.
train_clean() {  # NAME NP STEPS trainer-args...
  local name=$1 np=$2 steps=$3; shift 3
  rm -rf "${WORK:?}/$name"; mkdir -p "$WORK"
  timeout -k 5 300 "$MPIEXEC" "$NPFLAG" "$np" "$TRAINER" "$INPUT" --set data.path="$DATA" \
    --set train.run_dir="$WORK/$name" --set train.steps="$steps" --set checkpoint.every_steps=10 "$@" \
    > "$WORK/$name.clean.log" 2>&1 || { cat "$WORK/$name.clean.log"; die "$name: the clean run failed"; }
}

# The bound of the read cases: the whole job, from its start (deadline 10 s).
check_read_bound() {  # NAME
  (( secs <= 30 )) || die "$1: ended after $secs s (bound: 30 s with checkpoint.io_timeout_s = 10)"
  grep -q "watchdog:" "$WORK/$1.log" && die "$1: the collective watchdog fired, not the I/O deadline"
  return 0
}

case_resume() {  # NP RANK ERRNO
  local np=$1 rank=$2 err=$3 name="faults_resume_np$1_r$2_$3"
  train_clean "$name" "$np" 20
  local ckpt="$WORK/$name/checkpoints/step_00000020.h5"
  [[ -f $ckpt ]] || die "$name: the clean run left no step-20 checkpoint"
  KEEP=1 run_faulty "$name" "$np" 60 read "$rank" 1 "$err" checkpoints/step_ --set checkpoint.resume=auto
  [[ $rc -eq 1 ]] || die "$name: exit $rc, expected 1"
  check_read_bound "$name"
  if [[ $err == HANG ]]; then
    grep -Eq "^error \(rank $rank\): checkpoint I/O: phase 'read' of .*step_00000020\.h5 has not finished on this rank after [0-9.]+ s \(checkpoint\.io_timeout_s = 10\)" \
      "$WORK/$name.log" || die "$name: no I/O deadline message naming rank $rank, phase 'read' and step_00000020.h5"
  else
    grep -Eq "^error: rank $rank, phase 'read'.*step_00000020\.h5.*$(errno_text "$err")" "$WORK/$name.log" ||
      die "$name: no error naming rank $rank, phase 'read', step_00000020.h5 and '$(errno_text "$err")'"
  fi
  grep -q "falling back" "$WORK/$name.log" && die "$name: failing storage was taken for a damaged file (fallback)"
  [[ "$(cat "$WORK/$name/checkpoints/latest")" == step_00000020.h5 ]] || die "$name: latest moved"
  check_dir "$name"
}

case_init_from() {  # NP RANK
  local np=$1 rank=$2 name="faults_init_from_np$1_r$2"
  train_clean "${name}_src" "$np" 10
  "$CKPT_TOOL" export "$WORK/${name}_src/checkpoints/step_00000010.h5" "$WORK/$name.init.safetensors" \
    > "$WORK/$name.export.log" 2>&1 || { cat "$WORK/$name.export.log"; die "$name: export failed"; }
  run_faulty "$name" "$np" 60 read "$rank" 1 HANG "$name.init.safetensors" \
    --set model.init_from="$WORK/$name.init.safetensors"
  [[ $rc -eq 1 ]] || die "$name: exit $rc, expected 1"
  check_read_bound "$name"
  grep -Eq "^error \(rank $rank\): model\.init_from I/O: phase 'read' of .*$name\.init\.safetensors has not finished on this rank" \
    "$WORK/$name.log" || die "$name: no I/O deadline message naming rank $rank, phase 'read' and the file"
}

case_data() {  # NP RANK
  local np=$1 rank=$2 name="faults_data_np$1_r$2"
  run_faulty "$name" "$np" 60 read "$rank" 1 HANG "$(basename "$DATA")"
  [[ $rc -eq 1 ]] || die "$name: exit $rc, expected 1"
  check_read_bound "$name"
  grep -Eq "^error \(rank $rank\): data set I/O: phase 'open' of .*$(basename "$DATA") has not finished on this rank" \
    "$WORK/$name.log" || die "$name: no I/O deadline message naming rank $rank, phase 'open' and the data set"
}

case_verify() {  # NP RANK
  local np=$1 rank=$2 name="faults_verify_np$1_r$2"
  train_clean "$name" "$np" 10
  local ckpt="$WORK/$name/checkpoints/step_00000010.h5" t0=$SECONDS
  LD_PRELOAD="$INJECTOR" SHARDTRAIN_FAULT_CALL=read SHARDTRAIN_FAULT_RANK=$rank SHARDTRAIN_FAULT_ERRNO=HANG \
    SHARDTRAIN_FAULT_PATH=step_00000010.h5 timeout -k 5 60 "$MPIEXEC" "$NPFLAG" "$np" "$CKPT_TOOL" verify "$ckpt" \
    --io-timeout 5 > "$WORK/$name.log" 2>&1
  rc=$? secs=$((SECONDS - t0))
  echo "=== $name: exit $rc after $secs s"
  cat "$WORK/$name.log"
  [[ $rc -ne 124 && $rc -ne 137 ]] || die "$name: still running after 60 s (a hang)"
  [[ $rc -eq 1 ]] || die "$name: exit $rc, expected 1"
  (( secs <= 30 )) || die "$name: ended after $secs s (bound: 30 s with --io-timeout 5)"
  grep -Eq "^error \(rank $rank\): checkpoint I/O: phase 'read' of .*step_00000010\.h5 has not finished on this rank after [0-9.]+ s \(checkpoint\.io_timeout_s = 5\)" \
    "$WORK/$name.log" || die "$name: no I/O deadline message naming rank $rank, phase 'read' and the file"
}

# Cases separated by "--".
args=("$@")
i=0
while (( i < ${#args[@]} )); do
  one=()
  while (( i < ${#args[@]} )) && [[ ${args[i]} != -- ]]; do one+=("${args[i]}"); i=$((i + 1)); done
  i=$((i + 1))
  (( ${#one[@]} > 0 )) || continue
  kind=${one[0]}
  case $kind in
    survive|required|hang|slow|resume|init_from|data|verify) "case_$kind" "${one[@]:1}" ;;
    *) die "unknown case '$kind'" ;;
  esac
done
echo "PASS"
