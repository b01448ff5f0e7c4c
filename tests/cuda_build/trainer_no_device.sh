#!/usr/bin/env bash
# The CUDA build's trainer on a machine (or CUDA_VISIBLE_DEVICES) without a GPU
# (label cuda-build): with train.device = "auto" (the CUDA build's default) and
# "cuda" it must exit 1 with one message naming the missing device, the rank and
# CUDA's error, plus how to train on the host, before anything is allocated or
# written (no run directory); with train.device = "cpu" the same binary trains
# on the host.
# Environment (CTest): TRAINER, TRAINER_DATA, INPUT, TEXT, WORK, MPIEXEC, NPFLAG.
set -uo pipefail
die() { echo "FAIL: $*" >&2; exit 1; }
# shellcheck source=../support/process_memory.sh
source "$(dirname "${BASH_SOURCE[0]}")/../support/process_memory.sh"  # check_process_memory
rm -rf "$WORK" && mkdir -p "$WORK"
data=$WORK/tiny.h5
"$TRAINER_DATA" text "$TEXT" "$data" --val-fraction 0.1 > "$WORK/data.log" 2>&1 || { cat "$WORK/data.log"; die "trainer-data failed"; }

for np in 1 2; do
  for device in auto cuda; do
    name=nodev_${device}_np$np
    args=(--set data.path="$data" --set train.run_dir="$WORK/$name")
    [[ $device == auto ]] || args+=(--set train.device=$device)
    timeout 120 "$MPIEXEC" "$NPFLAG" "$np" "$TRAINER" "$INPUT" "${args[@]}" > "$WORK/$name.log" 2>&1
    rc=$?
    cat "$WORK/$name.log"
    [[ $rc -eq 1 ]] || die "$name: exit code $rc, expected 1 (no CUDA device)"
    grep -Eq '^error: .*no CUDA device available to rank 0 \(cudaGetDeviceCount: ' "$WORK/$name.log" ||
      die "$name: no 'no CUDA device available to rank 0 (cudaGetDeviceCount: ...)' message"
    grep -q 'train.device = "cpu"' "$WORK/$name.log" || die "$name: the message does not say how to train on the host"
    [[ $(grep -c '^error:' "$WORK/$name.log") -eq 1 ]] || die "$name: the error is not printed exactly once"
    ! grep -q 'Segmentation\|core dumped\|terminate called' "$WORK/$name.log" || die "$name: crashed"
    [[ ! -e $WORK/$name ]] || die "$name: a run directory was created before the device check"
    echo "ok: $name exits 1 with the no-device message"
  done
done

name=host_np2
timeout 300 "$MPIEXEC" "$NPFLAG" 2 "$TRAINER" "$INPUT" --set data.path="$data" --set train.run_dir="$WORK/$name" \
  --set train.device=cpu --set train.steps=10 > "$WORK/$name.log" 2>&1
rc=$?
cat "$WORK/$name.log"
[[ $rc -eq 0 ]] || die "train.device = cpu: exit code $rc"
check_process_memory "$WORK/$name.log"
grep -q '^compute: host' "$WORK/$name.log" || die "train.device = cpu did not run on the host"
[[ $(awk -F, 'NR > 1' "$WORK/$name/metrics.csv" | wc -l) -ge 2 ]] || die "no metrics rows"
echo "ok: the CUDA build's trainer trains on the host with train.device = \"cpu\""
