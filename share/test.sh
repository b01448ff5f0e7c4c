#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, and runs every
# CTest test except those labelled gpu (they need a device) and bench (long
# measurements).
# Then, when nvcc is installed (/usr/local/cuda/bin/nvcc or on PATH), a second
# build with -DSHARDTRAIN_ENABLE_CUDA=ON in ${CUDA_BUILD_DIR:-${BUILD_DIR}-cuda}
# builds only the CUDA targets (target cuda-build: the CUDA trainer and
# trainer-data, shardtrain_nccl, nccl_probe, the gpu test executables) and runs
# `ctest -L cuda-build`: they compile, link, and fail cleanly without a GPU (the
# trainer also trains on the host with train.device = "cpu"). No GPU test is run. Extra arguments go to the
# first ctest only.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$root/build}
"$root/share/install-deps.sh"
BUILD_DIR=$build "$root/share/build.sh"
(cd "$build" && ctest -LE "gpu|bench" --output-on-failure -j "${CTEST_JOBS:-2}" "$@")

if [[ -x /usr/local/cuda/bin/nvcc ]] || command -v nvcc >/dev/null 2>&1; then
  cuda_build=${CUDA_BUILD_DIR:-$build-cuda}
  start=$SECONDS
  echo "test.sh: CUDA build (compile, link, no-device checks) in $cuda_build"
  BUILD_DIR=$cuda_build TARGETS=cuda-build JOBS=${CUDA_JOBS:-2} \
    "$root/share/build.sh" -DSHARDTRAIN_ENABLE_CUDA=ON
  echo '*' > "$cuda_build/.gitignore"  # the top-level .gitignore only covers build/
  (cd "$cuda_build" && ctest -L cuda-build --no-tests=error --output-on-failure -j "${CTEST_JOBS:-2}")
  echo "test.sh: CUDA build and cuda-build tests took $((SECONDS - start)) s (no GPU test was run)"
else
  echo "test.sh: CUDA build skipped: nvcc is not installed (neither /usr/local/cuda/bin/nvcc nor on PATH)"
fi
