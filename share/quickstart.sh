#!/usr/bin/env bash
# The README's first command: installs what is missing, builds (Release), fetches
# Moby Dick, converts it to an HDF5 data set and trains inputs/quickstart.toml on
# 2 MPI ranks, printing progress and the final validation loss.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build=${BUILD_DIR:-$root/build}

echo "== 1/4 dependencies"
share/install-deps.sh --quickstart
echo "== 2/4 build (Release) into $build"
BUILD_DIR="$build" TARGETS="trainer trainer-data" share/build.sh
echo "== 3/4 data"
share/data/fetch-mobydick.sh "$build/trainer-data" "$build/data/mobydick.h5"
echo "== 4/4 train on 2 ranks (inputs/quickstart.toml)"
# One BLAS thread per rank: one rank per core. Root needs Open MPI's consent.
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
if [[ $(id -u) -eq 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
exec mpirun -np 2 "$build/trainer" inputs/quickstart.toml \
  --set data.path="$build/data/mobydick.h5" --set train.run_dir="$build/runs/quickstart" "$@"
