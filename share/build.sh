#!/usr/bin/env bash
# Configures and builds shardtrain (Release) into ${BUILD_DIR:-build}.
# TARGETS="a b" builds only those targets (default: everything, tests included).
# Extra arguments go to the CMake configure step.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$root/build}
jobs=${JOBS:-$(nproc)}
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
if [[ -n "${TARGETS:-}" ]]; then
  # shellcheck disable=SC2086
  cmake --build "$build" -j "$jobs" --target $TARGETS
else
  cmake --build "$build" -j "$jobs"
fi
