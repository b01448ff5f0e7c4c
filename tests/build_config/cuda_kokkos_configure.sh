#!/usr/bin/env bash
# Issue 36 (label build-config): configuring against a Kokkos that has the CUDA
# backend stops with our message (the top-level CMakeLists.txt, after
# find_package(Kokkos)) instead of failing later in the build. A stub prefix in
# WORK stands in for such a Kokkos: lib/cmake/Kokkos/KokkosConfig.cmake sets what
# an installed Kokkos 3.4.1 built with -DKokkos_ENABLE_CUDA=ON sets (Kokkos_DEVICES
# CUDA;SERIAL, then Kokkos_ENABLE_<device> ON for each, as its
# KokkosConfigCommon.cmake does) and an imported Kokkos::kokkos target, and
# KokkosConfigVersion.cmake reports 3.4.01 (Kokkos' own spelling). The test runs
#   cmake -S SOURCE -B WORK/build -DSHARDTRAIN_KOKKOS_ROOT=WORK/stub
# and passes only when that configure fails with our message (its distinctive
# phrases, matched after CMake's line wrapping is undone), naming the stub.
# Usage: cuda_kokkos_configure.sh CMAKE SOURCE WORK
set -euo pipefail
die() { echo "FAIL: $*" >&2; exit 1; }
[[ $# -eq 3 ]] || die "usage: $0 CMAKE SOURCE WORK"
cmake=$1 source=$2 work=$3
stub=$work/stub
rm -rf "$work"
mkdir -p "$stub/lib/cmake/Kokkos"
cat > "$stub/lib/cmake/Kokkos/KokkosConfigVersion.cmake" <<'VERSION'
# Stub (tests/build_config/cuda_kokkos_configure.sh): Kokkos 3.4.1, any request <= it.
set(PACKAGE_VERSION "3.4.01")
if(PACKAGE_FIND_VERSION AND PACKAGE_VERSION VERSION_LESS PACKAGE_FIND_VERSION)
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
else()
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
  if(PACKAGE_FIND_VERSION STREQUAL PACKAGE_VERSION)
    set(PACKAGE_VERSION_EXACT TRUE)
  endif()
endif()
VERSION
cat > "$stub/lib/cmake/Kokkos/KokkosConfig.cmake" <<'CONFIG'
# Stub (tests/build_config/cuda_kokkos_configure.sh): what Kokkos 3.4.1's installed
# config sets when it was built with the CUDA backend, nothing else.
set(Kokkos_DEVICES CUDA;SERIAL)
foreach(DEV ${Kokkos_DEVICES})
  set(Kokkos_ENABLE_${DEV} ON)
endforeach()
set(Kokkos_CXX_COMPILER "${CMAKE_CURRENT_LIST_DIR}/../../../bin/nvcc_wrapper")
if(NOT TARGET Kokkos::kokkos)
  add_library(Kokkos::kokkos INTERFACE IMPORTED)
endif()
CONFIG

status=0
"$cmake" -S "$source" -B "$work/build" -DSHARDTRAIN_KOKKOS_ROOT="$stub" > "$work/configure.log" 2>&1 || status=$?
[[ $status -ne 0 ]] ||
  die "the configure against a CUDA-enabled Kokkos (stub $stub) succeeded; it must stop with our message (log: $work/configure.log)"
# CMake wraps a message's text and indents the lines: join them back into one.
joined=$(tr -s ' \n' '  ' < "$work/configure.log")
for phrase in "The Kokkos at $stub has the CUDA backend, which needs its nvcc_wrapper as the C++ compiler" \
              "build the host trainer against a Serial or OpenMP Kokkos"; do
  [[ $joined == *"$phrase"* ]] ||
    die "the configure failed (exit $status) but without our message (\"$phrase\"): $(grep -m3 -A3 'CMake Error' "$work/configure.log" | tr '\n' ' ')"
done
echo "PASS: configure against the CUDA-enabled Kokkos stub stopped with our message (exit $status)"
