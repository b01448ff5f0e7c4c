#!/usr/bin/env bash
# The README's test command.
#
#   share/test.sh [--all] [CTEST ARGS...]
#
# By default (the host suite): installs what is missing (share/install-deps.sh:
# --build first, then --test in the background during the build when run as
# root), builds the host tree (share/build.sh, everything but the CUDA targets) and runs
# every CTest test except those labelled gpu (they need a device), bench (long
# measurements) and script-smoke (the benchmark scripts' own smoke tests):
# `ctest -LE "gpu|bench|script-smoke"`. On a fresh 2-core machine this is the
# part meant to finish within 20 minutes (share/doc/testing.md has the figures).
#
# --all (or SHARDTRAIN_TEST_ALL=1) adds the longer stages; .ci/run passes it:
# - the benchmark scripts' smoke tests (`ctest -L script-smoke`);
# - the OpenMP stage: Kokkos with OpenMP built from Debian's trilinos source
#   (share/kokkos/build-kokkos-openmp.sh), a build against it in
#   ${OMP_BUILD_DIR:-${BUILD_DIR}-omp} (target omp-build) and `ctest -L kokkos-omp`;
# - when nvcc is installed (/usr/local/cuda/bin/nvcc or on PATH), a second build
#   with -DSHARDTRAIN_ENABLE_CUDA=ON in ${CUDA_BUILD_DIR:-${BUILD_DIR}-cuda} of
#   only the CUDA targets (target cuda-build: the CUDA trainer and trainer-data,
#   shardtrain_nccl, nccl_probe, the gpu test executables) and
#   `ctest -L cuda-build`: they compile, link, and fail cleanly without a GPU (the
#   trainer also trains on the host with train.device = "cpu"). No GPU test is run.
# Without --all the script ends by naming the stages it left out.
#
# --all must come first; CTEST ARGS (the rest) go to the host suite's ctest only.
# CTEST_JOBS sets every ctest's -j (default: three times the cores for the host
# suite, twice for the other stages); JOBS the host build's. More jobs than cores,
# because most host tests wait rather than compute (MPI start-up, fsyncs, deadlines
# and watchdogs: share/doc/testing.md measures it: at twice the cores a third of the
# CPU stayed idle); the tests with wall-clock bounds are RUN_SERIAL, so they run
# alone. The OpenMP stage's tests each run up to 4 Kokkos threads: twice the cores.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$root/build}
all=${SHARDTRAIN_TEST_ALL:-0}
[[ $all == 0 || $all == 1 ]] || { echo "test.sh: SHARDTRAIN_TEST_ALL must be 0 or 1, not '$all'" >&2; exit 2; }
if [[ "${1:-}" == "--all" ]]; then all=1; shift; fi
case "${1:-}" in
  -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
esac

# The build's packages first; the packages only the tests need (PyTorch, about
# 80 s, h5py, nodejs, npm, Slurm, strace) install while the build compiles, as
# root (apt-get then needs no password); otherwise before the build.
ctest_jobs=${CTEST_JOBS:-$((2 * $(nproc)))} suite_jobs=${CTEST_JOBS:-$((3 * $(nproc)))}
start=$SECONDS
"$root/share/install-deps.sh" --build
mkdir -p "$build"
test_deps_log=$build/install-deps-test.log test_deps_pid=""
if [[ $(id -u) -eq 0 ]]; then
  "$root/share/install-deps.sh" --test < /dev/null > "$test_deps_log" 2>&1 &
  test_deps_pid=$!
  # Never leave apt-get half done: a failed build still waits for it.
  trap '[[ -z $test_deps_pid ]] || wait "$test_deps_pid" || true' EXIT
else
  "$root/share/install-deps.sh" --test
fi
echo "test.sh: dependencies for the build took $((SECONDS - start)) s"
start=$SECONDS
BUILD_DIR=$build "$root/share/build.sh"
echo "test.sh: host build took $((SECONDS - start)) s"
if [[ -n $test_deps_pid ]]; then
  start=$SECONDS
  pid=$test_deps_pid test_deps_pid=""
  if ! wait "$pid"; then
    cat "$test_deps_log" >&2
    echo "test.sh: installing the test dependencies (share/install-deps.sh --test) failed; its output is above" >&2
    exit 1
  fi
  tail -n 1 "$test_deps_log"
  echo "test.sh: test dependencies (installed during the build) took $((SECONDS - start)) s after it"
fi
start=$SECONDS
(cd "$build" && ctest -LE "gpu|bench|script-smoke" --output-on-failure -j "$suite_jobs" "$@")
echo "test.sh: host suite (ctest -LE \"gpu|bench|script-smoke\") took $((SECONDS - start)) s"

if [[ $all == 0 ]]; then
  echo "test.sh: the host suite passed; the benchmark scripts' smoke tests, the OpenMP Kokkos stage" \
       "and the CUDA build were not run (share/test.sh --all, or SHARDTRAIN_TEST_ALL=1, runs them; .ci/run does)"
  exit 0
fi

# The benchmark scripts' smoke tests (label script-smoke): the half-hour
# benchmarks' drivers (tests/bench/torch_parity_speed.sh, tests/bench/gpu/measure.sh)
# run end to end on tiny shapes, so that a benchmark or a GPU session does not
# fail on its own script's bugs. About 4 minutes of CPU: the trainer's own
# checks are all in the host suite above.
start=$SECONDS
(cd "$build" && ctest -L script-smoke --no-tests=error --output-on-failure -j "$ctest_jobs")
echo "test.sh: the benchmark scripts' smoke tests (ctest -L script-smoke) took $((SECONDS - start)) s"

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
(cd "$omp_build" && ctest -L kokkos-omp --no-tests=error --output-on-failure -j "$ctest_jobs")
echo "test.sh: OpenMP Kokkos build and kokkos-omp tests took $((SECONDS - start)) s"

if [[ -x /usr/local/cuda/bin/nvcc ]] || command -v nvcc >/dev/null 2>&1; then
  cuda_build=${CUDA_BUILD_DIR:-$build-cuda}
  start=$SECONDS
  echo "test.sh: CUDA build (compile, link, no-device checks) in $cuda_build"
  BUILD_DIR=$cuda_build TARGETS=cuda-build JOBS=${CUDA_JOBS:-2} \
    "$root/share/build.sh" -DSHARDTRAIN_ENABLE_CUDA=ON
  echo '*' > "$cuda_build/.gitignore"  # the top-level .gitignore only covers build/
  (cd "$cuda_build" && ctest -L cuda-build --no-tests=error --output-on-failure -j "$ctest_jobs")
  echo "test.sh: CUDA build and cuda-build tests took $((SECONDS - start)) s (no GPU test was run)"
else
  echo "test.sh: CUDA build skipped: nvcc is not installed (neither /usr/local/cuda/bin/nvcc nor on PATH)"
fi
