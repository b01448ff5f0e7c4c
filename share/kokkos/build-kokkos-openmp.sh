#!/usr/bin/env bash
# Builds Kokkos 3.4.1 with the OpenMP (and Serial) backend from Debian 12's own
# Trilinos 13.2.0 source package, into a cache prefix, for
#   cmake -DSHARDTRAIN_KOKKOS_ROOT=PREFIX ...
# Debian ships Kokkos only as part of Trilinos and only with the Serial backend;
# HPC users build Kokkos with OpenMP themselves (Spack, modules). This is that
# build, reproducible here: the source comes through apt (a private sources list
# with a deb-src entry, signed by Debian's archive key; the system's sources are
# never edited), the upstream tarball's SHA-256 is pinned, and only
# packages/kokkos is extracted and built (Kokkos' own CMake build, core and
# containers, shared libraries). A prefix that already holds this build is reused.
#
# Usage: share/kokkos/build-kokkos-openmp.sh [PREFIX]
#   PREFIX  default ${XDG_CACHE_HOME:-$HOME/.cache}/shardtrain/kokkos-3.4.1-openmp
# Prints the prefix on its last line. Needs network once (deb.debian.org), cmake,
# g++ and apt-get; about 170 MB of download and 10-60 s of compiling.
set -euo pipefail

die() { echo "build-kokkos-openmp: $*" >&2; exit 1; }
prefix=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/shardtrain/kokkos-3.4.1-openmp}
readonly version=13.2.0 debian_rev=13.2.0-4
readonly orig_sha256=0ddb47784ba7b8a6b9a07a4822b33be508feb4ccd54301b2a5d10c9e54524b90
readonly stamp="kokkos 3.4.1 openmp+serial from trilinos_${version}.orig.tar.gz ${orig_sha256}"

if [[ -f $prefix/lib/cmake/Kokkos/KokkosConfig.cmake && -f $prefix/shardtrain-kokkos.stamp &&
      $(cat "$prefix/shardtrain-kokkos.stamp") == "$stamp" ]]; then
  echo "build-kokkos-openmp: reusing $prefix ($stamp)" >&2
  echo "$prefix"
  exit 0
fi
for tool in cmake g++ apt-get tar sha256sum; do
  command -v "$tool" > /dev/null || die "needs $tool (share/install-deps.sh installs it)"
done

start=$(date +%s)
work=$(mktemp -d "${TMPDIR:-/tmp}/shardtrain-kokkos.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/apt/lists/partial" "$work/apt/cache/archives/partial" "$work/apt/sources.d" "$work/src"
cat > "$work/apt/sources.d/debian-src.sources" <<SOURCES
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
apt_opts=(-o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts="$work/apt/sources.d"
          -o Dir::State::Lists="$work/apt/lists" -o Dir::Cache="$work/apt/cache" -o APT::Sandbox::User=root)
echo "build-kokkos-openmp: fetching Debian's trilinos $debian_rev source (about 166 MB)" >&2
apt-get "${apt_opts[@]}" -q update > "$work/apt-update.log" 2>&1 ||
  die "apt-get update of the private deb-src list failed: $(tail -3 "$work/apt-update.log")"
(cd "$work/src" && apt-get "${apt_opts[@]}" -q source --download-only "trilinos=$debian_rev") > "$work/apt-source.log" 2>&1 ||
  die "apt-get source trilinos=$debian_rev failed: $(tail -3 "$work/apt-source.log")"
tarball=$work/src/trilinos_${version}.orig.tar.gz
[[ -f $tarball ]] || die "apt-get source did not leave $tarball"
echo "$orig_sha256  $tarball" | sha256sum -c --quiet - || die "$tarball: SHA-256 differs from the pinned $orig_sha256"

echo "build-kokkos-openmp: extracting packages/kokkos" >&2
tar -xzf "$tarball" -C "$work/src" --wildcards '*/packages/kokkos/*'
source_dir=$(echo "$work"/src/*/packages/kokkos)
[[ -f $source_dir/CMakeLists.txt ]] || die "no packages/kokkos/CMakeLists.txt in $tarball"

echo "build-kokkos-openmp: building Kokkos (OpenMP + Serial) into $prefix" >&2
cmake -S "$source_dir" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$prefix" \
  -DCMAKE_CXX_STANDARD=17 -DBUILD_SHARED_LIBS=ON -DKokkos_ENABLE_OPENMP=ON -DKokkos_ENABLE_SERIAL=ON \
  -DKokkos_ENABLE_TESTS=OFF -DKokkos_ENABLE_EXAMPLES=OFF > "$work/configure.log" 2>&1 ||
  die "configure failed: $(tail -5 "$work/configure.log")"
cmake --build "$work/build" -j "$(nproc)" > "$work/build.log" 2>&1 || die "build failed: $(tail -5 "$work/build.log")"
rm -rf "$prefix"
cmake --install "$work/build" > "$work/install.log" 2>&1 || die "install failed: $(tail -5 "$work/install.log")"
echo "$stamp" > "$prefix/shardtrain-kokkos.stamp"
echo "build-kokkos-openmp: done in $(( $(date +%s) - start )) s: $prefix" >&2
echo "$prefix"
