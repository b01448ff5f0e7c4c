#!/usr/bin/env bash
# The preemption-safe lifecycle end to end, on a private one-node Slurm cluster
# (loopback_cluster.sh), driven by CTest (tests/slurm/CMakeLists.txt):
#  1. reference: jobs/train-cpu.sbatch with SHARDTRAIN_LAUNCHER=mpirun, 2 ranks,
#     not interrupted: exit 0, no restart;
#  2. preempted: the same run submitted again (launcher auto: srun --mpi=pmix);
#     once metrics.csv has a row at step PREEMPT_AFTER or later, the batch shell
#     gets SIGUSR1 (`scancel --signal=USR1 --batch`, what --signal=B:USR1@120
#     does before a time limit). Expected: the trainer checkpoints (periodic
#     checkpointing is off, so that checkpoint is the only one) and exits 75, the
#     script requeues the job, Slurm restarts it (SLURM_RESTART_COUNT=1), the
#     trainer resumes from that checkpoint and trains exactly the remaining
#     steps (check_resumed, tests/e2e/trainer/e2e_lib.sh) to the end (exit 0,
#     Restarts=1);
#  3. the preempted run's metrics.csv (every row: step, loss, val_loss, lr,
#     grad_norm, loss_scale, skipped, weights_crc) and its final losses are
#     bitwise those of the reference;
#  4. a plain `scancel` (SIGTERM to everything; the trainer still checkpoints
#     and exits 75) ends the job for good: CANCELLED, not requeued.
# Environment (set by CTest): TRAINER, INPUT, DATA, JOBS (the jobs/ directory),
# CLUSTER (the cluster's directory), WORK, and the MPI variables of testing.cmake.
# Every daemon and job is stopped on exit, whatever happens; the whole test
# gives up after BUDGET seconds (default 140; CTest kills it at 180, and stopping
# the cluster may take up to half a minute).
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../e2e/trainer/e2e_lib.sh
source "$here/../e2e/trainer/e2e_lib.sh"  # die, check_resumed
for v in TRAINER INPUT DATA JOBS CLUSTER WORK; do
  [[ -n "${!v:-}" ]] || die "$v is not set (run through ctest)"
done

STEPS=${STEPS:-300}
PREEMPT_AFTER=${PREEMPT_AFTER:-100}
deadline=$((SECONDS + ${BUDGET:-140}))
model=(--set model.n_layer=4 --set model.d_model=64 --set model.seq_len=64
       --set "train.steps=$STEPS" --set train.log_every=10 --set train.eval_every=50
       --set checkpoint.every_steps=0 --set checkpoint.every_minutes=0)

cleanup() {
  local rc=$?
  trap - EXIT TERM INT
  "$here/loopback_cluster.sh" stop "$CLUSTER"
  exit "$rc"
}
trap cleanup EXIT
trap 'echo "FAIL: killed" >&2; exit 1' TERM INT

phase_start=$SECONDS
"$here/loopback_cluster.sh" start "$CLUSTER" || die "the loopback Slurm cluster did not start"
export SLURM_CONF=$CLUSTER/slurm.conf
echo "cluster up in $((SECONDS - phase_start)) s"
rm -rf "${WORK:?}"
mkdir -p "$WORK"

# "KEY=VALUE" of the job's record (scontrol show job -o).
job_field() {  # JOBID KEY
  timeout 10 scontrol show job -o "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n 1
}

# Waits until the job has ended for good (a requeued job goes back to PENDING).
wait_job_end() {  # JOBID
  local state
  while :; do
    state=$(job_field "$1" JobState)
    case "$state" in
      COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE|PREEMPTED) return 0 ;;
    esac
    [[ $SECONDS -lt $deadline ]] || die "job $1 still $state when the time budget ran out"
    sleep 0.2
  done
}

submit() {  # NAME [VAR=VALUE ...]: submits jobs/train-cpu.sbatch at 2 ranks; prints the job id
  local name=$1; shift
  env SHARDTRAIN_TRAINER="$TRAINER" SHARDTRAIN_RUN_DIR="$WORK/$name" "$@" \
    timeout 20 sbatch --parsable -n 2 --job-name="$name" --chdir="$WORK" --output="$WORK/$name.out" \
    "$JOBS/train-cpu.sbatch" "$INPUT" --set "data.path=$DATA" "${model[@]}"
}

last_step() { awk -F, 'NR > 1 { s = $1 } END { print s + 0 }' "$1" 2>/dev/null || echo 0; }

expect_line() {  # FILE REGEX WHAT
  grep -Eq "$2" "$1" || { cat "$1"; die "$3: no line matching /$2/ in $1"; }
}

# Columns that must agree bitwise: step, loss, val_loss, lr, grad_norm, loss_scale, skipped, weights_crc.
metrics_columns() { cut -d, -f1-5,9-11 "$1"; }
final_losses() { sed -n 's/^done: .*\(final train loss [^|]*| final val loss [0-9.eE+-]*\).*/\1/p' "$1" | tail -n 1; }

# 1. Reference, launched by mpirun inside the job.
phase_start=$SECONDS
ref=$(submit reference SHARDTRAIN_LAUNCHER=mpirun) || die "sbatch of the reference failed"
wait_job_end "$ref"
cat "$WORK/reference.out"
[[ "$(job_field "$ref" JobState)" == COMPLETED && "$(job_field "$ref" ExitCode)" == 0:0 ]] ||
  die "reference job $ref: $(job_field "$ref" JobState), exit $(job_field "$ref" ExitCode)"
[[ "$(job_field "$ref" Restarts)" == 0 ]] || die "the reference job was restarted"
expect_line "$WORK/reference.out" "launching: mpirun -n 2 " "reference launcher"
expect_line "$WORK/reference.out" "trainer finished \(exit 0\): done" "reference end"
[[ $(last_step "$WORK/reference/metrics.csv") -eq $STEPS ]] || die "the reference did not reach step $STEPS"
check_process_memory "$WORK/reference.out"
echo "reference: $STEPS steps in $((SECONDS - phase_start)) s (job $ref)"

# 2. Preempted after step PREEMPT_AFTER, requeued, resumed.
phase_start=$SECONDS
job=$(submit preempted) || die "sbatch of the preempted run failed"
while [[ $(last_step "$WORK/preempted/metrics.csv") -lt $PREEMPT_AFTER ]]; do
  state=$(job_field "$job" JobState)
  [[ "$state" == PENDING || "$state" == RUNNING || "$state" == CONFIGURING ]] || {
    cat "$WORK/preempted.out"; die "job $job is $state before step $PREEMPT_AFTER"; }
  [[ $SECONDS -lt $deadline ]] || die "no step $PREEMPT_AFTER in $WORK/preempted/metrics.csv in time"
  sleep 0.1
done
at=$(last_step "$WORK/preempted/metrics.csv")
echo "preempting job $job at step $at: scancel --signal=USR1 --batch $job"
timeout 10 scancel --signal=USR1 --batch "$job" || die "scancel --signal=USR1 --batch $job failed"
wait_job_end "$job"
echo "--- $WORK/preempted.out"
cat "$WORK/preempted.out"
echo "---"
state=$(job_field "$job" JobState); code=$(job_field "$job" ExitCode); restarts=$(job_field "$job" Restarts)
echo "job $job: JobState=$state ExitCode=$code Restarts=$restarts ($((SECONDS - phase_start)) s)"
[[ "$state" == COMPLETED && "$code" == 0:0 ]] || die "job $job ended $state with exit code $code"
[[ "$restarts" == 1 ]] || die "job $job: Restarts=$restarts, expected 1"

out=$WORK/preempted.out
dir=$WORK/preempted/checkpoints
expect_line "$out" "received SIGUSR1: asking the trainer to checkpoint and exit \(SIGUSR1 to srun" "signal forwarded"
expect_line "$out" "trainer asked to be requeued \(exit 75\): requeueing job $job " "requeue"
expect_line "$out" "job $job: 2 ranks on 1 node\(s\) .*restart 1 \(SLURM_RESTART_COUNT\)" "restart count"
expect_line "$out" "trainer finished \(exit 0\): done" "end"
[[ $(grep -c 'launching: srun --mpi=pmix --kill-on-bad-exit=1 ' "$out") -eq 2 ]] || die "expected two launches with srun --mpi=pmix"

# The signal's checkpoint is the only one, after the preemption point, before the end.
[[ -s "$dir/latest" ]] || die "no $dir/latest"
ckpt=$(cat "$dir/latest")
step=$((10#$(sed -n 's/^step_\([0-9]*\)\.h5$/\1/p' <<< "$ckpt")))
[[ $step -ge $at && $step -lt $STEPS ]] || die "the checkpoint $ckpt is not between step $at and $STEPS"
[[ "$(cd "$dir" && ls step_*.h5)" == "$ckpt" ]] || die "expected only $ckpt in $dir: $(ls "$dir")"
expect_line "$out" "^stopping after step $step of $STEPS: SIGUSR1 received by rank [01]; the checkpoint of step $step is complete; exit code 75" "the trainer's stop"
expect_line "$out" "^resumed from $dir/$ckpt: step $step" "resume"
[[ $(grep -c '^done: ' "$out") -eq 1 ]] || die "expected one 'done:' line"
# The restarted job trained exactly steps step+1..STEPS (its own count, its progress lines, metrics.csv).
check_resumed "$out" "$WORK/preempted" "$step" "$STEPS"
check_process_memory "$out"  # both launches' reports

# 3. Bitwise the reference.
diff <(metrics_columns "$WORK/reference/metrics.csv") <(metrics_columns "$WORK/preempted/metrics.csv") ||
  die "metrics.csv of the preempted run differs from the reference"
a=$(final_losses "$WORK/reference.out"); b=$(final_losses "$out")
[[ -n "$a" && "$a" == "$b" ]] || die "final losses differ: reference '$a', preempted '$b'"
echo "bitwise identical: $(($(wc -l < "$WORK/reference/metrics.csv") - 1)) rows of step, loss, val_loss, lr, grad_norm, loss_scale, skipped, weights_crc; $a"
echo "preempted at step $at, checkpoint step $step, requeued, resumed, finished"

# 4. scancel means stop: no requeue.
cancel=$(submit cancelled) || die "sbatch of the cancelled run failed"
while [[ $(last_step "$WORK/cancelled/metrics.csv") -lt 20 ]]; do
  [[ $SECONDS -lt $deadline ]] || die "no step 20 in $WORK/cancelled/metrics.csv in time"
  sleep 0.1
done
timeout 10 scancel "$cancel" || die "scancel $cancel failed"
wait_job_end "$cancel"
cat "$WORK/cancelled.out"
[[ "$(job_field "$cancel" JobState)" == CANCELLED && "$(job_field "$cancel" Restarts)" == 0 ]] ||
  die "job $cancel: $(job_field "$cancel" JobState), Restarts=$(job_field "$cancel" Restarts); expected CANCELLED, 0"
sleep 7  # longer than the requeue delay (cred_expire=5): a requeued job would be back by now
[[ "$(job_field "$cancel" JobState)" == CANCELLED ]] || die "job $cancel came back after scancel"
expect_line "$WORK/cancelled.out" "not requeueing" "no requeue after scancel"
echo "scancel: job $cancel CANCELLED, not requeued; test took $SECONDS s"
