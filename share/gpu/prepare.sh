#!/usr/bin/env bash
# Prepares the CUDA build for a GPU machine that has no network and no Debian
# packages (see share/doc/gpu.md, "Carrying the build to a GPU machine").
# Runs here, on the Debian 12 build machine; needs no GPU.
#
#   share/gpu/prepare.sh [--build-dir DIR] [--bundle DIR] [--jobs N] [--no-debs] [--no-build]
#
# 1. Builds target cuda-build (Release, -DSHARDTRAIN_ENABLE_CUDA=ON) in
#    ${BUILD_DIR:-<repo>/build-gpu} with share/build.sh.
# 2. Derives the Debian packages the binaries need at run time from the binaries
#    themselves (share/gpu/closure.py: ldd of every executable, dpkg -S, closed
#    over the packages' own ELF files) and prints the list.
# 3. Writes one git-ignored folder, ${GPU_BUNDLE_DIR:-<repo>/gpu-bundle}:
#      debs/               the packages' .deb files (apt-get download, the installed versions)
#      build-tree.tar.xz   the build tree without objects, archives and CMakeFiles
#      data/mobydick.h5    the quickstart's data set, when build/data has it (for
#                          tests/bench/gpu/measure.sh)
#      data/bert-vocab.txt bert-base-uncased's vocab.txt (231 KB), when build/data/bert-vocab
#                          has it (share/data/fetch-bert-vocab.sh): the BERT checks of
#                          measure.sh's hf part (else they use a toy vocab.txt)
#      manifest.txt        paths, commit, date, versions, GLIBC needs, package list
#      packages.tsv libs.tsv dropped.tsv cuda.tsv   what share/gpu/on-device.sh reads
# 4. Prints the folder's size and fails if it and the working tree together are
#    over 64 MiB (what travels to the GPU machine).
# Re-runnable: the build is incremental, .debs already there are kept.
# --no-debs: carry no runtime (no download, empty packages.tsv and libs.tsv;
#   manifest "carried_runtime: none"): on-device.sh then uses the machine's own
#   Open MPI and libraries, for a GPU machine that has this project's Debian
#   packages installed (share/install-deps.sh), and for CI's rehearsal of
#   on-device.sh (tests/cuda_build/on_device_rehearsal.sh).
# --no-build: pack the build tree as it is (step 1 skipped; it must hold a
#   finished cuda-build: CI's rehearsal runs inside ctest of that tree).
set -euo pipefail
start=$SECONDS
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${BUILD_DIR:-$root/build-gpu}
bundle=${GPU_BUNDLE_DIR:-$root/gpu-bundle}
jobs=${JOBS:-2}
limit_kib=$((${GPU_CARRY_LIMIT_MIB:-64} * 1024))   # what travels: working tree + ignored folders
no_debs=0 no_build=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --build-dir) build=$2; shift 2 ;;
    --bundle) bundle=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --no-debs) no_debs=1; shift ;;
    --no-build) no_build=1; shift ;;
    -h|--help) sed -n '2,29p' "$0"; exit 0 ;;
    *) echo "prepare.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
die() { echo "prepare.sh: error: $*" >&2; exit 1; }
mkdir -p "$build" "$bundle"
build=$(cd "$build" && pwd)
bundle=$(cd "$bundle" && pwd)

# --- tools and nvcc ---------------------------------------------------------
for t in git python3 ldd readelf objdump dpkg-query dpkg-deb apt-get tar xz sha256sum; do
  command -v "$t" >/dev/null 2>&1 || die "$t is not installed (needed to derive or pack the bundle)"
done
nvcc=""
tried=()
[[ -z "${CUDACXX:-}" ]] && tried+=("\$CUDACXX (unset)")
runs() { [[ -n "$1" && -x "$1" ]] && "$1" --version >/dev/null 2>&1; }
for cand in "${CUDACXX:-}" /usr/local/cuda/bin/nvcc "$(command -v nvcc 2>/dev/null || true)"; do
  [[ -n "$cand" ]] || continue
  if runs "$cand"; then nvcc=$cand; break; fi
  tried+=("$cand")
done
if [[ -z "$nvcc" ]]; then
  command -v nvcc >/dev/null 2>&1 || tried+=("nvcc on PATH (none)")
  die "nvcc not found or does not run (tried: ${tried[*]}; each must run 'nvcc --version'); install the CUDA toolkit or set CUDACXX=/path/to/nvcc"
fi
git -C "$root" rev-parse --git-dir >/dev/null 2>&1 || die "$root is not a git working tree (the size check counts what git sends)"
if [[ "$bundle" == "$root"/* ]] && ! git -C "$root" check-ignore -q "$bundle"; then
  die "$bundle is inside the repository but not git-ignored: add it to .gitignore (only ignored folders can be carried)"
fi
if [[ "$build" == "$root"/* ]] && ! git -C "$root" check-ignore -q "$build"; then
  echo '*' > "$build/.gitignore"   # as share/test.sh does for its CUDA build: keep it out of the working tree
fi

# --- 1. build -------------------------------------------------------------------
t0=$SECONDS
if [[ -f "$build/CMakeCache.txt" ]]; then
  old=$(sed -n 's/^CMAKE_CUDA_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt" | head -n 1)
  if [[ -n "$old" && "$(readlink -f "$old")" != "$(readlink -f "$nvcc")" ]]; then
    die "$build was configured with CUDA compiler $old, not $nvcc: remove $build or pass --build-dir"
  fi
fi
if [[ "${CMAKE_CXX_COMPILER_LAUNCHER:-}${CMAKE_CUDA_COMPILER_LAUNCHER:-}" == *ccache* ]]; then
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$root}  # relative paths: a clean clone elsewhere hits the cache
fi
buildlog=$build/prepare-build.log
if (( no_build )); then
  [[ -f "$build/CMakeCache.txt" && -x "$build/trainer" ]] || die "--no-build: $build holds no finished CUDA build (CMakeCache.txt, trainer)"
  grep -q '^SHARDTRAIN_ENABLE_CUDA:BOOL=ON' "$build/CMakeCache.txt" || die "--no-build: $build is not a CUDA build (SHARDTRAIN_ENABLE_CUDA)"
  echo "prepare.sh: --no-build: packing $build as it is"
else
  echo "prepare.sh: building cuda-build (Release, CUDA on, $jobs jobs) in $build with $nvcc"
  if ! CUDACXX=$nvcc BUILD_DIR=$build TARGETS=cuda-build JOBS=$jobs "$root/share/build.sh" -DSHARDTRAIN_ENABLE_CUDA=ON >"$buildlog" 2>&1; then
    tail -n 40 "$buildlog" >&2
    die "the CUDA build failed (log: $buildlog)"
  fi
fi
build_s=$((SECONDS - t0))
echo "prepare.sh: build done in ${build_s} s (log: $buildlog)"
cache() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt" | head -n 1; }
mpiexec=$(cache MPIEXEC_EXECUTABLE)
[[ -x "$mpiexec" ]] || die "MPIEXEC_EXECUTABLE ($mpiexec) from $build/CMakeCache.txt is not executable"

# --- 2. packages -------------------------------------------------------------------
t0=$SECONDS
meta=$(mktemp -d /tmp/h-pkg-prepare.XXXXXX)
trap 'rm -rf "$meta"' EXIT
cuda_root=$(cd "$(dirname "$nvcc")/.." && pwd -P)
cuda_args=(--cuda-dir "$cuda_root")
for d in /usr/local/cuda /usr/local/cuda/lib /usr/local/cuda/lib64 \
         "$(dirname "$(cache SHARDTRAIN_CUDNN_LIBRARY)")" "$(dirname "$(cache SHARDTRAIN_NCCL_LIBRARY)")"; do
  [[ -d "$d" ]] && cuda_args+=(--cuda-dir "$d")
done
python3 "$root/share/gpu/closure.py" --build-dir "$build" --mpiexec "$mpiexec" "${cuda_args[@]}" --out "$meta" \
  $( ((no_debs)) && echo --cuda-only)
echo "prepare.sh: runtime packages (class stack: always used from the bundle; system: only where the image lacks the soname):"
awk -F'\t' '!/^#/ { printf "  %-34s %-32s %-6s %s\n", $1, $2, $4, $5 }' "$meta/packages.tsv"

# --- 3a. .debs ------------------------------------------------------------------------
if (( no_debs )); then
  rm -rf "$bundle/debs"; mkdir -p "$bundle/debs"
  printf '# package\tversion carried\tarch\tclass\tdeb\tsha256\tversion installed here\n' > "$meta/packages-debs.tsv"
  echo "prepare.sh: --no-debs: no runtime carried (the machine's own Open MPI and libraries will be used)"
  debs_s=0
else
mkdir -p "$bundle/debs"
declare -A want=() candidate=()
while read -r p c; do candidate[$p]=$c; done < <(
  apt-cache policy $(awk -F'\t' '!/^#/ { print $1 }' "$meta/packages.tsv") 2>/dev/null |
    awk '/^[^ ].*:$/ { sub(/:$/, ""); sub(/:[a-z0-9]+$/, ""); p = $0 } /^  Candidate:/ { print p, $2 }')
printf '# package\tversion carried\tarch\tclass\tdeb\tsha256\tversion installed here\n' > "$meta/packages-debs.tsv"
while IFS=$'\t' read -r pkg ver arch class why; do
  [[ "$pkg" == \#* ]] && continue
  # The installed version (the one the build linked) if the archive still has it.
  # Otherwise the archive's candidate (a Debian 12 stable/security update or binNMU; the
  # package name carries the soname, so the ABI is the same), with a note: for class
  # stack only of the same upstream version; for class system any (those are used only
  # where the image lacks the soname).
  installed=$ver
  name=$pkg; [[ "$arch" != all ]] && name="$pkg:$arch"
  upstream() { local v=$1; [[ "$class" == system ]] && { echo any; return; }; [[ "$v" == *-* ]] && v=${v%-*}; echo "$v"; }
  cand=${candidate[$pkg]:-}
  cand_ok() { [[ -n "$cand" && "$cand" != "$installed" && "$(upstream "$cand")" == "$(upstream "$installed")" ]]; }
  deb=""
  for f in "$bundle/debs/${pkg}"_*.deb; do   # already there (a re-run): the same choice, no network
    [[ -f "$f" && "$(dpkg-deb -f "$f" Package)" == "$pkg" ]] || continue
    fver=$(dpkg-deb -f "$f" Version)
    if [[ "$fver" == "$installed" ]]; then deb=$f; ver=$fver; break; fi
    if [[ "$fver" == "$cand" ]] && cand_ok; then deb=$f; ver=$fver; fi
  done
  if [[ -z "$deb" ]]; then
    if (cd "$bundle/debs" && apt-get download -q -o APT::Sandbox::User=root "$name=$installed" >/dev/null 2>"$meta/apt.err"); then
      ver=$installed
    elif cand_ok && (cd "$bundle/debs" && apt-get download -q -o APT::Sandbox::User=root "$name=$cand" >/dev/null 2>>"$meta/apt.err"); then
      ver=$cand
    else
      cat "$meta/apt.err" >&2
      die "apt-get download $name=$installed failed (no network, or this installed version is gone from the archive and no acceptable other version is there ($class class; candidate: ${cand:-none}))"
    fi
    for f in "$bundle/debs/${pkg}"_*.deb; do
      if [[ -f "$f" && "$(dpkg-deb -f "$f" Version)" == "$ver" ]]; then deb=$f; fi
    done
    [[ -n "$deb" ]] || die "apt-get download $name=$ver left no .deb in $bundle/debs"
  fi
  [[ "$ver" != "$installed" ]] &&
    echo "prepare.sh: note: $pkg $installed (installed here) is not in the archive; carrying $ver ($class class)"
  want[$(basename "$deb")]=1
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$pkg" "$ver" "$arch" "$class" "$(basename "$deb")" \
    "$(sha256sum "$deb" | cut -d' ' -f1)" "$installed" >> "$meta/packages-debs.tsv"
done < "$meta/packages.tsv"
for f in "$bundle/debs"/*.deb; do
  [[ -n "${want[$(basename "$f")]:-}" ]] || { echo "prepare.sh: removing stale $(basename "$f")"; rm -f "$f"; }
done
debs_s=$((SECONDS - t0))

fi

# --- 3b. build tree ---------------------------------------------------------------------
# Kept: executables, CTestTestfile.cmake files, CMakeCache.txt, generated sources and
# anything else the tests may read. Left out: objects, static archives, CMakeFiles/
# (compiler checks, dependency files), Makefiles/ninja files, Testing/, our build log.
t0=$SECONDS
tarball=$bundle/build-tree.tar.xz
(cd "$build" && find . \( -name CMakeFiles -o -name Testing \) -prune -o \( -type f -o -type l \) \
    ! -name '*.o' ! -name '*.a' ! -name '*.d' ! -name '*.obj' ! -name Makefile ! -name cmake_install.cmake \
    ! -name '*.ninja' ! -name '.ninja_*' ! -name prepare-build.log ! -name .gitignore -print0 |
  LC_ALL=C sort -z | tar --null -T - --owner=0 --group=0 -cf - | xz -9 -T1 > "$tarball.tmp")
mv "$tarball.tmp" "$tarball"
tar_s=$((SECONDS - t0))
tree_files=$(tar -tJf "$tarball" | grep -vc '/$' || true)

# --- 3b'. the quickstart's data set for tests/bench/gpu/measure.sh (the GPU machine has no network)
mkdir -p "$bundle/data"
if [[ -f "$root/build/data/mobydick.h5" ]]; then
  cp "$root/build/data/mobydick.h5" "$bundle/data/mobydick.h5"
  echo "prepare.sh: carrying build/data/mobydick.h5 ($(du -k "$bundle/data/mobydick.h5" | cut -f1) KiB) for the GPU measurements"
else
  rm -f "$bundle/data/mobydick.h5"
  echo "prepare.sh: note: build/data/mobydick.h5 is absent (share/quickstart.sh or share/data/fetch-mobydick.sh makes it); the GPU measurements will use synthetic tokens for the quickstart model"
fi
if [[ -f "$root/build/data/bert-vocab/vocab.txt" ]]; then
  cp "$root/build/data/bert-vocab/vocab.txt" "$bundle/data/bert-vocab.txt"
  echo "prepare.sh: carrying build/data/bert-vocab/vocab.txt for the BERT checks of the GPU measurements"
else
  rm -f "$bundle/data/bert-vocab.txt"
  echo "prepare.sh: note: build/data/bert-vocab/vocab.txt is absent (share/data/fetch-bert-vocab.sh build/data/bert-vocab makes it); the BERT checks will use a toy vocab.txt"
fi

# --- 3c. manifest -------------------------------------------------------------------------
cp "$meta/packages-debs.tsv" "$bundle/packages.tsv"
cp "$meta/libs.tsv" "$meta/dropped.tsv" "$meta/cuda.tsv" "$bundle/"
hdr() { grep -hE "^#define $2 +[0-9]+" "$1" 2>/dev/null | awk '{print $3}' | head -n 1; }
cudnn_inc=$(cache SHARDTRAIN_CUDNN_INCLUDE_DIR); nccl_inc=$(cache SHARDTRAIN_NCCL_INCLUDE_DIR)
cudnn_ver="$(hdr "$cudnn_inc/cudnn_version.h" CUDNN_MAJOR).$(hdr "$cudnn_inc/cudnn_version.h" CUDNN_MINOR).$(hdr "$cudnn_inc/cudnn_version.h" CUDNN_PATCHLEVEL)"
nccl_ver="$(hdr "$nccl_inc/nccl.h" NCCL_MAJOR).$(hdr "$nccl_inc/nccl.h" NCCL_MINOR).$(hdr "$nccl_inc/nccl.h" NCCL_PATCH)"
rel_build=""
[[ "$build" == "$root"/* ]] && rel_build=${build#"$root"/}
commit=$(git -C "$root" rev-parse HEAD)
dirty=$(git -C "$root" status --porcelain --untracked-files=no | grep -q . && echo " (tracked files modified)" || true)
{
  echo "# shardtrain GPU bundle, written by share/gpu/prepare.sh; read by share/gpu/on-device.sh"
  echo "format: 1"
  echo "carried_runtime: $( ((no_debs)) && echo none || echo debs)"
  echo "source_root: $root"
  echo "build_dir: $build"
  echo "build_dir_relative: $rel_build"
  echo "mpiexec: $mpiexec"
  echo "git_commit: $commit$dirty"
  echo "git_branch: $(git -C "$root" rev-parse --abbrev-ref HEAD)"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "build_host: $(. /etc/os-release && echo "$PRETTY_NAME"), $(uname -m), glibc $(ldd --version | head -n 1 | awk '{print $NF}')"
  echo "nvcc: $nvcc, $("$nvcc" --version | grep -o 'release [0-9.]*, V[0-9.]*')"
  echo "cuda_architectures: $(cache CMAKE_CUDA_ARCHITECTURES)"
  echo "cudnn: $cudnn_ver ($(cache SHARDTRAIN_CUDNN_LIBRARY) -> $(readlink -f "$(cache SHARDTRAIN_CUDNN_LIBRARY)"))"
  echo "nccl: $nccl_ver ($(cache SHARDTRAIN_NCCL_LIBRARY) -> $(readlink -f "$(cache SHARDTRAIN_NCCL_LIBRARY)"))"
  echo "build_tree: build-tree.tar.xz, $tree_files files"
  echo
  echo "## GLIBC / GLIBCXX / CXXABI versions needed (objdump -T, undefined symbols)"
  cat "$meta/glibc.txt"
  echo
  echo "## CUDA libraries the binaries link (not carried: the device provides them)"
  grep -v '^#' "$meta/cuda.tsv" || true
  echo
  echo "## Packages (packages.tsv): package, version carried, arch, class, deb, version installed here"
  grep -v '^#' "$bundle/packages.tsv" | cut -f1-5,7 || true
  echo
  echo "## Files on-device.sh deletes after unpacking (dropped.tsv)"
  grep -v '^#' "$meta/dropped.tsv" | cut -f1,3 || true
} > "$bundle/manifest.txt"
rm -f "$bundle"/*.tmp

# --- 4. size ---------------------------------------------------------------------------------
tree_kib=$(cd "$root" && git ls-files -co --exclude-standard -z | du -c --files0-from=- | tail -n 1 | cut -f1)
bundle_kib=$(du -sk "$bundle" | cut -f1)
debs_kib=$(du -sk "$bundle/debs" | cut -f1)
tar_kib=$(du -sk "$tarball" | cut -f1)
npk=$(grep -vc '^#' "$bundle/packages.tsv" || true)
mib() { awk -v k="$1" 'BEGIN { printf "%.1f MiB", k / 1024 }'; }
echo "prepare.sh: bundle $bundle: $(mib "$bundle_kib") (debs/: $npk packages, $(mib "$debs_kib"); build-tree.tar.xz: $tree_files files, $(mib "$tar_kib"))"
echo "prepare.sh: working tree as git sends it: $(mib "$tree_kib"); together $(mib $((bundle_kib + tree_kib))) of the $(mib "$limit_kib") that travel"
echo "prepare.sh: took $((SECONDS - start)) s (build ${build_s} s, packages ${debs_s} s, tarball ${tar_s} s)"
if (( bundle_kib > limit_kib - tree_kib )); then
  echo "prepare.sh: FAIL: the bundle ($(mib "$bundle_kib")) is over $(mib "$limit_kib") minus the working tree ($(mib "$tree_kib")) = $(mib $((limit_kib - tree_kib)))" >&2
  exit 1
fi
echo "prepare.sh: OK; carry it with the working tree: run(carry=[\"${bundle#"$root"/}\"], command=\"share/gpu/on-device.sh\")"
