#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, and runs every
# CTest test except those labelled gpu (they need a device) and bench (long
# measurements).
# Then the OpenMP stage (below): Kokkos with OpenMP built from Debian's trilinos
# source, a build against it in ${OMP_BUILD_DIR:-${BUILD_DIR}-omp} (target
# omp-build) and `ctest -L kokkos-omp`.
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

# The OpenMP stage (issue 36): Kokkos 3.4.1 with OpenMP built from Debian's own
# trilinos source (share/kokkos/build-kokkos-openmp.sh, about 20 s), the trainer
# and the kernel / parity tests built against it, and the kokkos-omp tests: every
# kernel and parity test at 1, 2 and 4 Kokkos threads, and the trainer's curves
# bitwise equal at 1, 2 and 4 threads and to the Serial build's above.
omp_build=${OMP_BUILD_DIR:-$build-omp}
start=$SECONDS
echo "test.sh: OpenMP Kokkos stage in $omp_build"
mkdir -p "$omp_build"
echo '*' > "$omp_build/.gitignore"  # the top-level .gitignore only covers build/
kokkos_prefix=$("$root/share/kokkos/build-kokkos-openmp.sh" "${KOKKOS_OMP_PREFIX:-$omp_build/kokkos-openmp}" | tail -1)
BUILD_DIR=$omp_build TARGETS=omp-build JOBS=${OMP_JOBS:-2} "$root/share/build.sh" \
  -DSHARDTRAIN_KOKKOS_ROOT="$kokkos_prefix" -DSHARDTRAIN_SERIAL_TRAINER="$build/trainer"
(cd "$omp_build" && ctest -L kokkos-omp --no-tests=error --output-on-failure -j "${CTEST_JOBS:-2}")
echo "test.sh: OpenMP Kokkos build and kokkos-omp tests took $((SECONDS - start)) s"

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
