#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, and runs every
# CTest test except those labelled gpu (they need a device) and bench (long
# measurements).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/share/install-deps.sh"
BUILD_DIR=${BUILD_DIR:-$root/build} "$root/share/build.sh"
cd "${BUILD_DIR:-$root/build}"
ctest -LE "gpu|bench" --output-on-failure -j "${CTEST_JOBS:-2}" "$@"
