#!/usr/bin/env bash
# Randomized checkpoint storage faults (issue 34), label bench (not run in CI).
# Usage: ckpt_faults_random.sh [RUNS (200)] [SEED (1)]
# Environment (set by CTest, tests/bench/CMakeLists.txt): TRAINER, CKPT_TOOL, INJECTOR,
# INPUT (inputs/tiny.toml), DATA, WORK, MPIEXEC, NPFLAG.
# Each run trains the tiny model for 30 steps with a checkpoint every 5 at 2 or 3
# ranks, synchronous or background, with one fault drawn at random: the call
# (open, write, fsync, rename, close of a *.h5.partial file or of `latest.tmp`),
# the rank (rank 0 for rename: only it renames), the occurrence, the errno (EIO, ENOSPC, EDQUOT; 1 in 12 runs the
# call hangs instead, with checkpoint.io_timeout_s = 5), how many calls fail
# (1, 3 or all), and in 1 of 3 runs a stop signal at a random step. A run that
# exits 1 or 75 is restarted without faults (resume = "auto") until it completes.
# Checked for every run: no invocation outlives its `timeout` (a hang); exit
# codes are 0, 1 or 75 only; after every invocation `latest` (when there is one)
# names a file that `trainer-ckpt verify` accepts; the completed run's final
# weights CRC (metrics.csv, step 30) equals the straight run's at that rank
# count. Prints a summary line per run and the totals; exits 1 on any violation.
set -uo pipefail
runs=${1:-200}
seed=${2:-1}
RANDOM=$seed
for v in TRAINER CKPT_TOOL INJECTOR INPUT DATA WORK MPIEXEC NPFLAG; do
  [[ -n "${!v:-}" ]] || { echo "FAIL: $v is not set" >&2; exit 1; }
done
die() { echo "FAIL: $*" >&2; exit 1; }
mkdir -p "$WORK"
common=(--set data.path="$DATA" --set train.steps=30 --set checkpoint.every_steps=5 --set train.log_every=5
        --set train.eval_every=0 --set parallel.collective_timeout_s=60)

final_crc() { awk -F, 'NR == 1 { for (i = 1; i <= NF; ++i) if ($i == "weights_crc") c = i }
                       NR > 1 && $1 == 30 { v = $c } END { print v }' "$1/metrics.csv"; }

check_latest() {  # DIR TAG
  local dir="$1/checkpoints"
  [[ -f "$dir/latest" ]] || return 0
  "$CKPT_TOOL" verify "$dir/$(cat "$dir/latest")" > /dev/null 2>&1 ||
    die "$2: latest ($(cat "$dir/latest")) does not verify"
}

declare -A straight
for np in 2 3; do
  rm -rf "${WORK:?}/straight_np$np"
  timeout -k 5 300 "$MPIEXEC" "$NPFLAG" "$np" "$TRAINER" "$INPUT" "${common[@]}" \
    --set train.run_dir="$WORK/straight_np$np" > "$WORK/straight_np$np.log" 2>&1 || die "straight run at $np ranks failed"
  straight[$np]=$(final_crc "$WORK/straight_np$np")
  [[ -n "${straight[$np]}" ]] || die "no weights_crc at step 30 in the straight run at $np ranks"
  echo "straight run at $np ranks: final weights_crc ${straight[$np]}"
done

calls=(open write fsync rename close)
errnos=(EIO ENOSPC EDQUOT)
survived=0 ended=0 hung=0 stopped=0 restarts=0 with_fault=0 t_start=$SECONDS
for ((i = 1; i <= runs; ++i)); do
  np=$((2 + RANDOM % 2))
  mode=$([[ $((RANDOM % 2)) -eq 0 ]] && echo false || echo true)
  call=${calls[RANDOM % 5]}
  rank=$((RANDOM % np))
  [[ $call == rename ]] && rank=0  # only rank 0 renames
  case $call in
    open) nth=$((1 + RANDOM % 16)) ;; write) nth=$((1 + RANDOM % 40)) ;; close) nth=$((1 + RANDOM % 16)) ;;
    fsync) nth=$((1 + RANDOM % 6)) ;; rename) nth=$((1 + RANDOM % 6)) ;;
  esac
  err=${errnos[RANDOM % 3]}
  (( RANDOM % 12 == 0 )) && err=HANG
  times=$(( (r = RANDOM % 6) < 4 ? 1 : (r == 4 ? 3 : 0) ))
  filter=.h5.partial
  [[ $call == rename && $((RANDOM % 2)) -eq 0 ]] && filter=latest.tmp
  extra=()
  (( RANDOM % 3 == 0 )) && extra=(--signal-at-step "$((1 + RANDOM % 29)):$((RANDOM % np))")
  name="run_$i" dir="$WORK/random/run_$i"
  rm -rf "$dir"; mkdir -p "$WORK/random"
  tag="run $i: np $np async=$mode $call#$nth rank $rank $err x$times filter $filter ${extra[*]}"
  t0=$(date +%s.%N)
  LD_PRELOAD="$INJECTOR" SHARDTRAIN_FAULT_CALL=$call SHARDTRAIN_FAULT_RANK=$rank SHARDTRAIN_FAULT_NTH=$nth \
    SHARDTRAIN_FAULT_ERRNO=$err SHARDTRAIN_FAULT_TIMES=$times SHARDTRAIN_FAULT_PATH=$filter \
    timeout -k 5 120 "$MPIEXEC" "$NPFLAG" "$np" "$TRAINER" "$INPUT" "${common[@]}" --set train.run_dir="$dir" \
    --set checkpoint.async=$mode --set checkpoint.io_timeout_s=5 "${extra[@]}" > "$WORK/random/$name.log" 2>&1
  rc=$?
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  [[ $rc -ne 124 && $rc -ne 137 ]] || { cat "$WORK/random/$name.log"; die "$tag: hung (killed after 120 s)"; }
  [[ $rc -eq 0 || $rc -eq 1 || $rc -eq 75 ]] || { cat "$WORK/random/$name.log"; die "$tag: exit $rc"; }
  check_latest "$dir" "$tag"
  fired=$(grep -c '^fault injector: .* -> ' "$WORK/random/$name.log")
  (( fired > 0 )) && with_fault=$((with_fault + 1))
  outcome="exit $rc"
  if [[ $rc -eq 1 ]]; then
    grep -Eq "^error: checkpoint step [0-9]+ failed: rank [0-9]+, phase|checkpoint I/O: " "$WORK/random/$name.log" ||
      { cat "$WORK/random/$name.log"; die "$tag: exit 1 without a checkpoint failure's message"; }
    grep -q "checkpoint I/O: " "$WORK/random/$name.log" && hung=$((hung + 1)) || ended=$((ended + 1))
  elif [[ $rc -eq 75 ]]; then stopped=$((stopped + 1))
  else survived=$((survived + 1)); fi
  # Restart without faults until the run completes (a stop signal only fires once: the hook is not passed again).
  tries=0
  while [[ $rc -ne 0 ]]; do
    tries=$((tries + 1)); restarts=$((restarts + 1))
    (( tries <= 3 )) || die "$tag: did not complete after 3 restarts"
    timeout -k 5 120 "$MPIEXEC" "$NPFLAG" "$np" "$TRAINER" "$INPUT" "${common[@]}" --set train.run_dir="$dir" \
      --set checkpoint.async=$mode > "$WORK/random/$name.restart$tries.log" 2>&1
    rc=$?
    [[ $rc -ne 124 && $rc -ne 137 ]] || die "$tag: restart $tries hung"
    check_latest "$dir" "$tag (restart $tries)"
    [[ $rc -eq 0 ]] || { cat "$WORK/random/$name.restart$tries.log"; die "$tag: restart $tries exited $rc"; }
  done
  crc=$(final_crc "$dir")
  [[ "$crc" == "${straight[$np]}" ]] || die "$tag: final weights_crc $crc, the straight run's is ${straight[$np]}"
  echo "$tag: $outcome after $secs s ($fired fault(s) injected), $tries restart(s), final weights_crc $crc ok"
  rm -rf "$dir"
done
echo "random checkpoint faults: $runs runs ($with_fault with a fault injected) in $((SECONDS - t_start)) s: $survived completed," \
  "$ended ended with exit 1 (a needed checkpoint or max_failures), $hung ended by the I/O deadline," \
  "$stopped stopped with 75; $restarts restarts; no hang, every latest verified, every final weights_crc" \
  "equal to the straight run's"
