#!/usr/bin/env bash
# End-to-end checks of the run's lifecycle (session/lifecycle.hpp, parallel/watchdog.hpp),
# driven by CTest (tests/e2e/trainer/CMakeLists.txt). Environment: as
# trainer_e2e.sh, plus CKPT_TOOL (trainer-ckpt).
#   signals NP ROUNDS   SIGUSR1 to a random rank at a random moment, ROUNDS times: every
#                       run ends with exit code 75 and a complete checkpoint (trainer-ckpt
#                       verify) of the step it stopped at; the resumed job trains exactly
#                       the remaining steps (check_resumed) and finishes with bitwise
#                       the losses and weight CRCs of an uninterrupted run
#   storm NP ROUNDS     a storm of SIGUSR1 (thousands a second) to every rank from a
#                       random moment after step 20 until a rank exits, on the
#                       slurm test's model (8 layers, d_model = 64: the MLP's K = 256
#                       runs oneDNN's jit f32 GEMM with its stack pointer on the heap
#                       on AVX2, session/lifecycle.cpp) with a batch of 64, so that
#                       the step the storm lands in is long: every run ends with exit code 75 and a
#                       complete checkpoint, no rank aborts (a signal handled on the
#                       computing thread wrote its frame over the heap: "corrupted
#                       size vs. prev_size", the slurm_preempt_requeue crash)
#   wall-time NP        train.time_limit = 6 s on a run that needs minutes: the guard lets it
#                       train, then stops it in time with a complete checkpoint and exit 75
#   rank-failure NP     SIGKILL of one rank mid-training ends the whole mpirun within 60 s
#                       with a non-zero status, and no process of the run is left
#   rank-throws NP      one rank throws in step 5 (--throw-at-step): its message is printed
#                       and the whole job ends (MPI_Abort) with exit code 1, no process left
#   stall NP [STAGE]    a rank stalled before the gradient reduction (--stall-in-collective)
#                       at ZeRO stage STAGE (default 0): the others' watchdog names the
#                       collective (stage 0: the gradient all-reduce; 2: the pairwise
#                       reduce-scatter; 3: it or the norm's all-reduce) and the step, and the job ends
#                       within 60 s with a non-zero status, no process left
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=e2e_lib.sh
source "$here/e2e_lib.sh"

# A run of some seconds at 2 ranks: the tiny model, 3000 steps, a periodic
# checkpoint every 500 (so that some signals land during a write).
long=(--set train.steps=3000 --set train.log_every=100 --set train.eval_every=0 --set checkpoint.every_steps=500)
# The signals rounds: half of that run (1500 steps, a checkpoint every 250: the same
# share of signals landing during a write), each round a whole run in CPU time (the
# signalled part and its resume), so the suite's largest CPU consumer costs half.
sig_steps=1500
sig_long=(--set train.steps=$sig_steps --set train.log_every=100 --set train.eval_every=0 --set checkpoint.every_steps=250)

# Starts the trainer in the background into $WORK/NAME; sets `job` (mpirun's pid)
# and `job_log` (its log, $WORK/NAME.log).
start_trainer() {  # NP NAME extra-args...
  local np=$1 name=$2; shift 2
  job_log=$WORK/$name.log
  timeout 300 "$MPIEXEC" "$NPFLAG" "$np" "$TRAINER" "$INPUT" --set data.path="$DATA" \
    --set train.run_dir="$WORK/$name" "$@" > "$job_log" 2>&1 &
  job=$!
}

# The trainer processes (ranks) of the run writing into $WORK/NAME.
rank_pids() { pgrep -f -- "train.run_dir=$WORK/$1( |$)" | while read -r p; do
  [[ "$(cat /proc/"$p"/comm 2>/dev/null)" == trainer ]] && echo "$p"; done; }

# Waits (up to 60 s) until the log of NAME shows LINE.
wait_for_line() {  # NAME REGEX
  for _ in $(seq 600); do
    grep -Eq "$2" "$WORK/$1.log" 2>/dev/null && return 0
    kill -0 "$job" 2>/dev/null || break
    sleep 0.1
  done
  cat "$WORK/$1.log"; die "$1: no line /$2/ in the log"
}

# Waits for mpirun (pid $job) to end within LIMIT seconds; sets rc and elapsed;
# a run that printed the memory report (a stopped one) has its VmHWM checked
# against the predicted process peak (check_process_memory).
wait_job() {  # LIMIT
  local start=$SECONDS
  for _ in $(seq $(($1 * 10))); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
  elapsed=$((SECONDS - start))
  kill -0 "$job" 2>/dev/null && { kill -KILL "$job"; die "mpirun still running after $1 s"; }
  wait "$job"; rc=$?
  check_process_memory "$job_log"
}

no_leftovers() {  # NAME
  sleep 1
  local left; left=$(pgrep -f -- "train.run_dir=$WORK/$1( |$)" || true)
  [[ -z "$left" ]] || { ps -o pid,stat,etime,args -p $left; die "processes of the run are left behind"; }
}

case "${1:-}" in
  signals)
    np=$2; rounds=$3
    t0=$(date +%s.%N)
    run_trainer "$np" sig_straight "${sig_long[@]}" > /dev/null
    span=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", (b - a) * 0.6 }')
    echo "uninterrupted run: signals go out 0 to $span s (60% of its duration) after start-up"
    for ((i = 1; i <= rounds; ++i)); do
      name="sig_round$i"
      delay=$(awk -v r="$RANDOM" -v s="$span" 'BEGIN { printf "%.2f", r / 32767 * s }')
      # The delay is drawn from the uninterrupted run's duration; on a loaded
      # machine a run can be faster than that one was and finish before the
      # signal: then the round is repeated with half the delay (3 tries), and a
      # fourth time with the signal as soon as the run directory is printed.
      signalled=0
      for try in 1 2 3 4; do
        (( try < 4 )) || delay=0
        rm -rf "${WORK:?}/$name"
        start_trainer "$np" "$name" "${sig_long[@]}"
        wait_for_line "$name" '^run directory:'
        sleep "$delay"
        mapfile -t pids < <(rank_pids "$name")
        if [[ ${#pids[@]} -ne $np ]] && ! kill -0 "$job" 2>/dev/null && grep -q '^done:' "$WORK/$name.log"; then
          wait "$job"
          check_process_memory "$job_log"
          echo "round $i: the run finished before the signal ${delay} s after start-up; again with half the delay"
          delay=$(awk -v d="$delay" 'BEGIN { printf "%.2f", d / 2 }')
          continue
        fi
        [[ ${#pids[@]} -eq $np ]] || die "round $i: found ${#pids[@]} rank processes, expected $np"
        victim=$((RANDOM % np))
        echo "round $i: SIGUSR1 to rank process ${pids[$victim]} (of ${pids[*]}) ${delay} s after start-up"
        kill -USR1 "${pids[$victim]}"
        wait_job 120
        if [[ $rc -eq 0 ]] && grep -q '^done:' "$WORK/$name.log"; then
          echo "round $i: the run finished before the signal took effect; again with half the delay"
          delay=$(awk -v d="$delay" 'BEGIN { printf "%.2f", d / 2 }')
          continue
        fi
        signalled=1
        break
      done
      # (rc would otherwise be the previous round's 75.)
      (( signalled )) || die "round $i: each of 4 runs finished before its signal, the last one sent at start-up"
      grep -E '^(stopping|checkpoint step|error)' "$WORK/$name.log"
      [[ $rc -eq 75 ]] || { cat "$WORK/$name.log"; die "round $i: exit code $rc, expected 75"; }
      step=$(sed -n 's/^stopping after step \([0-9]*\) of .*/\1/p' "$WORK/$name.log")
      [[ -n "$step" ]] || die "round $i: no 'stopping after step' line"
      file=$(printf '%s/%s/checkpoints/step_%08d.h5' "$WORK" "$name" "$step")
      [[ "$(cat "$WORK/$name/checkpoints/latest")" == "$(basename "$file")" ]] || die "round $i: latest does not name step $step"
      "$CKPT_TOOL" verify "$file" > /dev/null || die "round $i: the checkpoint of step $step does not verify"
      LOG="$WORK/$name.resume.log" train_in "$np" "$name" "${sig_long[@]}" > /dev/null
      check_resumed "$WORK/$name.resume.log" "$WORK/$name" "$step" "$sig_steps"
      diff <(cut -d, -f1,2,3,9,10,11 "$WORK/sig_straight/metrics.csv") <(cut -d, -f1,2,3,9,10,11 "$WORK/$name/metrics.csv") ||
        die "round $i: the resumed run's metrics differ from the uninterrupted run's"
      echo "round $i: stopped at step $step with exit 75, resumed, bitwise the uninterrupted curve"
    done
    ;;
  storm)
    np=$2; rounds=$3
    mkdir -p "$WORK"
    wide=(--set model.d_model=64 --set model.n_layer=8 --set model.seq_len=64 --set train.steps=3000
          --set train.batch_size=64 --set train.log_every=10 --set train.eval_every=10 --set checkpoint.every_steps=0)
    for ((i = 1; i <= rounds; ++i)); do
      name="storm_round$i"
      rm -rf "${WORK:?}/$name"
      start_trainer "$np" "$name" "${wide[@]}"
      wait_for_line "$name" '^step +20/'  # past two evaluations
      sleep "$(awk -v r="$RANDOM" 'BEGIN { printf "%.2f", r / 32767 }')"
      mapfile -t pids < <(rank_pids "$name")
      [[ ${#pids[@]} -eq $np ]] || die "round $i: found ${#pids[@]} rank processes, expected $np"
      # Until every rank has exited (at most 60 s): the step, the stop agreement,
      # the checkpoint and the way out all run under the storm.
      sent=0 storm_end=$((SECONDS + 60))
      while kill -0 "${pids[@]}" 2>/dev/null && [[ $SECONDS -lt $storm_end ]]; do
        for _ in $(seq 50); do kill -USR1 "${pids[@]}" 2>/dev/null || break; done
        sent=$((sent + 50))
      done
      wait_job 120
      echo "round $i: about $sent SIGUSR1 to each of ${pids[*]}; exit code $rc"
      ! grep -Eq 'corrupted|malloc|free\(\)|Aborted|Segmentation|received signal' "$WORK/$name.log" ||
        { cat "$WORK/$name.log"; die "round $i: a rank crashed under the signal storm"; }
      [[ $rc -eq 75 ]] || { cat "$WORK/$name.log"; die "round $i: exit code $rc, expected 75"; }
      step=$(sed -n 's/^stopping after step \([0-9]*\) of .*SIGUSR1 received by rank .*/\1/p' "$WORK/$name.log")
      [[ -n "$step" ]] || { cat "$WORK/$name.log"; die "round $i: no 'stopping after step N of 3000: SIGUSR1 received' line"; }
      file=$(printf '%s/%s/checkpoints/step_%08d.h5' "$WORK" "$name" "$step")
      "$CKPT_TOOL" verify "$file" > /dev/null || die "round $i: the checkpoint of step $step does not verify"
      no_leftovers "$name"
      echo "round $i: stopped at step $step with exit 75 and a complete checkpoint under the storm"
    done
    ;;
  wall-time)
    np=$2; name="walltime_np$np"; rm -rf "${WORK:?}/$name"
    t0=$(date +%s.%N)
    start_trainer "$np" "$name" --set train.steps=1000000 --set train.log_every=1000 --set train.eval_every=0 \
      --set train.time_limit=0.1
    wait_job 60
    cat "$WORK/$name.log" | grep -E '^(stopping|checkpoint step|error)'
    [[ $rc -eq 75 ]] || { cat "$WORK/$name.log"; die "exit code $rc, expected 75"; }
    step=$(sed -n 's/^stopping after step \([0-9]*\) of 1000000: the wall-time guard.*/\1/p' "$WORK/$name.log")
    [[ -n "$step" ]] || die "no wall-time stop line"
    (( step >= 100 )) || die "stopped after step $step: the guard should let the run train until near the limit"
    # What the limit protects is the checkpoint: it must be complete before the
    # 6 s (counted from the trainer's start, which is after mpirun's own start,
    # so measuring from the launch is conservative). The job's exit after it
    # (memory report, MPI_Finalize, mpirun's teardown) may take a moment more on
    # a loaded machine: Slurm allows KillWait (30 s by default) for that.
    file="$WORK/$name/checkpoints/$(cat "$WORK/$name/checkpoints/latest")"
    t1=$(date +%s.%N)
    ck=$(awk -v a="$t0" -v b="$(stat -c %.9Y "$file")" 'BEGIN { printf "%.2f", b - a }')
    total=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
    awk -v c="$ck" 'BEGIN { exit !(c <= 6.0) }' || die "the checkpoint was complete only $ck s after the launch (limit 6 s)"
    awk -v t="$total" 'BEGIN { exit !(t <= 10.0) }' || die "the job ended only $total s after the launch (limit 6 s + 4 s to exit)"
    "$CKPT_TOOL" verify "$file" > /dev/null || die "the checkpoint does not verify"
    echo "stopped by the wall-time guard at step $step: checkpoint complete $ck s and job ended $total s after the launch (limit 6 s from the trainer's start)"
    ;;
  rank-failure)
    np=$2; name="rankfail_np$np"; rm -rf "${WORK:?}/$name"
    start_trainer "$np" "$name" "${long[@]}"
    wait_for_line "$name" '^step +100/'
    mapfile -t pids < <(rank_pids "$name")
    [[ ${#pids[@]} -eq $np ]] || die "found ${#pids[@]} rank processes, expected $np"
    echo "SIGKILL to rank process ${pids[-1]}"
    kill -KILL "${pids[-1]}"
    wait_job 60
    tail -5 "$WORK/$name.log"
    [[ $rc -ne 0 ]] || die "mpirun exited 0 after a rank was killed"
    no_leftovers "$name"
    echo "mpirun ended $elapsed s after the kill with status $rc; no process left"
    ;;
  rank-throws)
    np=$2; name="throw_np$np"; rm -rf "${WORK:?}/$name"
    start_trainer "$np" "$name" --throw-at-step 5:$((np - 1))
    wait_job 60
    grep -E '^error' "$WORK/$name.log"
    [[ $rc -eq 1 ]] || die "exit code $rc, expected 1"
    grep -q "^error (rank $((np - 1))): .*test hook --throw-at-step: rank $((np - 1)) fails in step 5" "$WORK/$name.log" ||
      die "the failing rank's message was not printed"
    no_leftovers "$name"
    echo "the job ended $elapsed s after its start with the failing rank's message; no process left"
    ;;
  stall)
    np=$2; stage=${3:-0}; name="stall_s${stage}_np$np"; rm -rf "${WORK:?}/$name"
    # Stage 0: the gradient all-reduce. Stages 2 and 3: rank 0 waits in the pairwise
    # reduce-scatter or, its exchanges done, in the norm's all-reduce that follows:
    # the stalled rank stops after its backward, with every bucket's exchange already
    # posted, and whether rank 0's receives complete without it calling MPI again
    # (eager messages, Open MPI's single-copy transfers) depends on message sizes and
    # timing (stage 2 at 2 ranks read the all-reduce in a loaded CI rehearsal,
    # 2026-11-29). Either way the watchdog names the collective and the step.
    collective='all_reduce \([0-9]+ x F32\)'
    [[ $stage -ge 2 ]] && collective='(wait for ireduce_scatter_v \([0-9]+ x F32\)|all_reduce \(1 x F64\))'

    start_trainer "$np" "$name" --set parallel.collective_timeout_s=3 --set parallel.zero_stage="$stage" \
      --stall-in-collective 5:$((np - 1))
    wait_job 60
    cat "$WORK/$name.log" | grep -E 'watchdog|test hook'
    [[ $rc -ne 0 ]] || die "exit code 0 after a stall"
    grep -Eq "^error \(rank 0\): watchdog: $collective at step 5 has not completed after 3\.[0-9] s \(parallel\.collective_timeout_s = 3\)" \
      "$WORK/$name.log" || die "no watchdog report naming the collective ($collective) and the step"
    no_leftovers "$name"
    echo "the watchdog ended the job $elapsed s after its start; no process left"
    ;;
  *)
    die "usage: lifecycle_e2e.sh signals|storm|wall-time|rank-failure|stall ..." ;;
esac
