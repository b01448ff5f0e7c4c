#!/usr/bin/env bash
# Checks of jobs/train.sbatch and jobs/train-cpu.sbatch that need no cluster
# (CTest slurm_job_scripts): both parse (bash -n); their lifecycle blocks, from
# the "---- lifecycle" line to the end, are identical; misuse exits with code 2
# and one message: outside a Slurm job, no input file, an unreadable input, no
# trainer binary, an unknown launcher.
# Environment: JOBS (the jobs/ directory), INPUT (any readable file).
set -uo pipefail
die() { echo "FAIL: $*" >&2; exit 1; }
[[ -n "${JOBS:-}" && -n "${INPUT:-}" ]] || die "JOBS and INPUT must be set (run through ctest)"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

lifecycle() { sed -n '/^# ---- lifecycle/,$p' "$1"; }
for script in train.sbatch train-cpu.sbatch; do
  [[ -x "$JOBS/$script" ]] || die "$JOBS/$script is missing or not executable"
  bash -n "$JOBS/$script" || die "$script does not parse"
  [[ $(lifecycle "$JOBS/$script" | wc -l) -gt 50 ]] || die "$script has no lifecycle block"
done
diff <(lifecycle "$JOBS/train.sbatch") <(lifecycle "$JOBS/train-cpu.sbatch") ||
  die "the lifecycle blocks of train.sbatch and train-cpu.sbatch differ"

expect() {  # NAME REGEX -- ENV... COMMAND...: exit code 2, one line on stderr matching REGEX, nothing launched
  local name=$1 regex=$2; shift 3
  env "$@" > "$scratch/$name.out" 2> "$scratch/$name.err"
  local rc=$?
  cat "$scratch/$name.err"
  [[ $rc -eq 2 ]] || die "$name: expected exit code 2, got $rc"
  [[ $(wc -l < "$scratch/$name.err") -eq 1 ]] || die "$name: expected one line on stderr"
  grep -Eq "$regex" "$scratch/$name.err" || die "$name: stderr does not match /$regex/"
  ! grep -q launching "$scratch/$name.out" || die "$name: launched something"
}
# A fake trainer that must never run.
printf '#!/bin/sh\necho ran >> %s/ran\n' "$scratch" > "$scratch/trainer"
chmod +x "$scratch/trainer"
for script in train.sbatch train-cpu.sbatch; do
  expect "${script}_outside" "not inside a Slurm job \(SLURM_JOB_ID is not set\): submit with sbatch" -- \
    -u SLURM_JOB_ID SHARDTRAIN_TRAINER="$scratch/trainer" bash "$JOBS/$script" "$INPUT"
  expect "${script}_no_input" "no input file: give INPUT.toml as the first argument or set SHARDTRAIN_INPUT" -- \
    -u SHARDTRAIN_INPUT SLURM_JOB_ID=999999 SHARDTRAIN_TRAINER="$scratch/trainer" bash "$JOBS/$script"
  expect "${script}_bad_input" "cannot read the input file '$scratch/missing.toml'" -- \
    SLURM_JOB_ID=999999 SHARDTRAIN_TRAINER="$scratch/trainer" bash "$JOBS/$script" "$scratch/missing.toml"
  expect "${script}_no_trainer" "the trainer '$scratch/nowhere' is not an executable file" -- \
    SLURM_JOB_ID=999999 SHARDTRAIN_TRAINER="$scratch/nowhere" bash "$JOBS/$script" "$INPUT"
  expect "${script}_not_on_path" "no 'shardtrain-no-such-trainer' on PATH: set SHARDTRAIN_TRAINER" -- \
    SLURM_JOB_ID=999999 SHARDTRAIN_TRAINER=shardtrain-no-such-trainer bash "$JOBS/$script" "$INPUT"
  expect "${script}_launcher" "SHARDTRAIN_LAUNCHER must be auto, srun or mpirun, got 'aprun'" -- \
    SLURM_JOB_ID=999999 SHARDTRAIN_TRAINER="$scratch/trainer" SHARDTRAIN_LAUNCHER=aprun bash "$JOBS/$script" "$INPUT"
done
[[ ! -e "$scratch/ran" ]] || die "a misused script ran the trainer"

# Hybrid MPI + OpenMP: with --cpus-per-task=3 train-cpu.sbatch gives the trainer
# parallel.threads=3, OMP_NUM_THREADS=3 and the binding (a fake mpirun and squeue
# record what they get; a --set of the caller's comes later and wins).
mkdir -p "$scratch/bin"
printf '#!/bin/sh
echo "args: $*" > %s/hybrid
env | grep "^OMP_" >> %s/hybrid
' "$scratch" "$scratch" > "$scratch/bin/mpirun"
printf '#!/bin/sh
exit 1
' > "$scratch/bin/squeue"
chmod +x "$scratch/bin/mpirun" "$scratch/bin/squeue"
env -u OMP_NUM_THREADS -u OMP_PROC_BIND -u OMP_PLACES PATH="$scratch/bin:$PATH" SLURM_JOB_ID=999999 \
  SLURM_CPUS_PER_TASK=3 SHARDTRAIN_LAUNCHER=mpirun SHARDTRAIN_TRAINER="$scratch/trainer" \
  bash "$JOBS/train-cpu.sbatch" "$INPUT" --set optim.lr=1e-3 > "$scratch/hybrid.out" 2>&1 ||
  die "train-cpu.sbatch with SLURM_CPUS_PER_TASK=3 failed: $(tail -3 "$scratch/hybrid.out")"
grep -q "^args: .*--set parallel.threads=3 .*--set optim.lr=1e-3" "$scratch/hybrid" ||
  die "hybrid: the trainer did not get --set parallel.threads=3 before the caller's arguments: $(head -1 "$scratch/hybrid")"
for want in OMP_NUM_THREADS=3 OMP_PROC_BIND=close OMP_PLACES=cores; do
  grep -qx "$want" "$scratch/hybrid" || die "hybrid: the trainer's environment lacks $want: $(tr '\n' ' ' < "$scratch/hybrid")"
done
echo "train-cpu.sbatch -c 3: parallel.threads=3, OMP_NUM_THREADS=3, OMP_PROC_BIND=close, OMP_PLACES=cores"
echo "both scripts parse, share their lifecycle block, and refuse misuse with exit code 2"
