#!/usr/bin/env bash
# CTest cuda_build_on_device_rehearsal (label cuda-build): the GPU session's one
# call, share/gpu/on-device.sh, run here end to end without a GPU, so that a change
# to it (or to tests/bench/gpu/measure.sh) that breaks its flow fails in CI and not
# in a GPU session's 15 minutes. A copy of the working tree at a new path (as the
# device copy is), a bundle from `share/gpu/prepare.sh --no-debs` over this CUDA
# build (no download: this machine's own Open MPI and libraries stand in for the
# carried runtime, which share/gpu/namespace-proof.sh proves separately, as root),
# then the whole on-device.sh with its default budget. It must:
#  - restore the build tree at the new path and rewrite the paths in it;
#  - pass the smoke's `trainer --version` and see both device commands end with the
#    no-device message, say `# NO CUDA DEVICE` and skip the GPU measurements;
#  - run every one-GPU test (ctest -L gpu -LE gpu2) to its no-device message;
#  - pass the Hugging Face phase on the host (hf_check.py's stand-in, PYTHON);
#  - end with exit 1 (the tests cannot pass without a device) in under 90 s, with
#    its summary written.
# Arguments: BUILD_DIR (the CUDA build) SOURCE_DIR. Environment: PYTHON. The work
# folder is a new one under TMPDIR (outside the build tree, which is packed), kept
# when the test fails.
set -euo pipefail
build=$1 src=$2
work=$(mktemp -d "${TMPDIR:-/tmp}/shardtrain-on-device-rehearsal.XXXXXX")
die() { echo "FAIL: $* (work folder kept: $work)" >&2; exit 1; }
mkdir -p "$work/repo"
(cd "$src" && git ls-files -co --exclude-standard -z | tar --null -T - -cf -) | tar -xf - -C "$work/repo"
# A clean clone has no build/data/mobydick.h5: measure.sh then makes a synthetic set.
"$src/share/gpu/prepare.sh" --build-dir "$build" --bundle "$work/repo/gpu-bundle" --no-debs --no-build > "$work/prepare.log" 2>&1 ||
  { tail -20 "$work/prepare.log"; die "prepare.sh --no-debs failed (log $work/prepare.log)"; }
grep -q '^carried_runtime: none$' "$work/repo/gpu-bundle/manifest.txt" || die "the manifest does not say carried_runtime: none"
t0=$SECONDS rc=0
(cd "$work/repo" && SHARDTRAIN_GPU_PREFIX=$work/prefix share/gpu/on-device.sh --out "$work/out") > "$work/on-device.log" 2>&1 || rc=$?
secs=$((SECONDS - t0))
summary=$work/out/summary.txt
[[ -f $summary ]] || { tail -30 "$work/on-device.log"; die "on-device.sh left no summary.txt"; }
cat "$summary"
[[ $rc -eq 1 ]] || die "on-device.sh exited $rc; without a device the tests fail, so 1 is expected"
grep -q 'rewrote paths and mpiexec' "$work/out/setup.log" || die "the build tree was not restored at the new path"
expected=$(cd "$build" && ctest -N -L gpu -LE gpu2 | sed -n 's/^ *Test *#[0-9]*: //p' | paste -sd, -)
[[ -n $expected ]] || die "no one-GPU test in $build"
# The plan's checks, shared with share/gpu/namespace-proof.sh.
"${PYTHON:-python3}" "$src/share/gpu/proof_helper.py" plan "$work/out" "$expected" "$secs" 90 || die "the plan's checks failed (above)"
rm -rf "$work"
