#!/usr/bin/env bash
# Proof without a GPU that the bundle is complete: runs share/gpu/on-device.sh HERE,
# in a private mount namespace where this machine's own copies of the carried
# packages are hidden, and checks that every one-GPU test (ctest -L gpu -LE gpu2)
# gets as far as the no-CUDA-device message with all its libraries loaded from the
# bundle, the CUDA dirs, or the base system (glibc, libstdc++, libgcc); that the whole
# plan runs to its end: the smoke reaches the no-device message, the GPU measurements
# are skipped, the Hugging Face check (host quickstart, GPT-2 export, hf_check.py's
# stand-in with PROOF_PYTHON, default /usr/bin/python3, the one process shown the
# hidden OpenBLAS that Debian's PyTorch links) passes; and that
# on-device.sh takes under PROOF_LIMIT_S seconds (default 90).
#
#   share/gpu/namespace-proof.sh [--bundle DIR] [--drop-deb PACKAGE] [--keep]
#
#   --bundle DIR         the bundle to test (default <repo>/gpu-bundle, from prepare.sh)
#   --drop-deb PACKAGE   plant an error: delete PACKAGE's .deb from the proof's copy of
#                        the bundle (the proof must then fail and name the library)
#   --keep               keep the unpacked prefix (otherwise only the results stay)
#
# Needs root (unshare, mount). How the hiding works, all inside
# `unshare --mount --propagation private` (nothing is visible outside, nothing is
# written under /usr, /lib or /etc, ldconfig is never run):
#   for each folder holding files of the carried packages (/usr/lib/x86_64-linux-gnu,
#   /usr/bin, /etc/openmpi, /usr/share/openmpi, ...): bind it read-only to a side
#   path, fill a tmpfs "farm" with symlinks to every entry of the side path except
#   the carried packages' files (dpkg -L) and the symlinks that lead to them, and
#   bind the farm read-only over the folder.
# The packages that the unpacking tools of this machine (dpkg-deb, tar, xz, python3)
# link themselves stay visible (zlib1g, libzstd1): on the GPU machine the image's own
# copies play that part. The working tree is copied to a new path (as the device
# copy will be), so the path rewriting is exercised too.
# Results: /tmp/h-pkg-proof.XXXXXX/{out/gpu-run, hidden.txt, proof.log}.
# Exit 0 when the verdict is PASS, 1 otherwise.
set -euo pipefail
start=$SECONDS
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bundle=$root/gpu-bundle
drop="" keep=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --bundle) bundle=$2; shift 2 ;;
    --drop-deb) drop=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    -h|--help) sed -n '2,31p' "$0"; exit 0 ;;
    *) echo "namespace-proof.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
die() { echo "namespace-proof.sh: error: $*" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || die "needs root (unshare --mount, mount)"
for t in unshare mount python3 dpkg-query git tar; do command -v "$t" >/dev/null 2>&1 || die "$t is missing"; done
[[ -f "$bundle/manifest.txt" ]] || die "no bundle at $bundle: run share/gpu/prepare.sh first"
bundle=$(cd "$bundle" && pwd)
helper=$root/share/gpu/proof_helper.py
scratch=$(mktemp -d /tmp/h-pkg-proof.XXXXXX)
echo "namespace-proof.sh: scratch $scratch"

# The device copy: the working tree as git sends it, plus the bundle, at a new path.
mkdir -p "$scratch/repo"
(cd "$root" && git ls-files -co --exclude-standard -z | tar --null -T - -cf -) | tar -xf - -C "$scratch/repo"
cp -a "$bundle" "$scratch/repo/gpu-bundle"
if [[ -n "$drop" ]]; then
  deb=$(awk -F'\t' -v p="$drop" '$1 == p { print $5 }' "$bundle/packages.tsv")
  [[ -n "$deb" ]] || die "--drop-deb $drop: no such package in $bundle/packages.tsv"
  rm -f "$scratch/repo/gpu-bundle/debs/$deb"
  echo "namespace-proof.sh: PLANTED ERROR: deleted $deb from the proof's copy of the bundle"
fi

# Which carried packages the tools on-device.sh runs before its library path is set link.
owner() {  # a library path -> the package dpkg registered it under (tries the /usr-merge twins)
  local c r
  r=$(readlink -f "$1")
  for c in "$1" "$r" "${1/#\/usr\/lib\//\/lib\/}" "${r/#\/usr\/lib\//\/lib\/}" "${1/#\/lib\//\/usr\/lib\/}"; do
    if out=$(dpkg-query -S "$c" 2>/dev/null); then echo "${out%%:*}"; return 0; fi
  done
  return 0
}
visible_pkgs=()
for tool in dpkg-deb tar xz gzip python3 bash sed grep find sha256sum; do
  p=$(command -v "$tool") || continue
  while read -r lib; do
    o=$(owner "$lib")
    if [[ -n "$o" ]] && grep -q "^$o	" "$bundle/packages.tsv" && [[ " ${visible_pkgs[*]} " != *" $o "* ]]; then
      visible_pkgs+=("$o")
    fi
  done < <(ldd "$p" 2>/dev/null | awk '/=> \// { print $3 }')
done
visible=$(IFS=,; echo "${visible_pkgs[*]}")
visible_sonames=$(awk -F'\t' -v v=",$visible," 'index(v, "," $2 ",") { printf "%s,", $1 }' "$bundle/libs.tsv")
echo "namespace-proof.sh: left visible, because this machine's dpkg-deb/tar/xz/python3 link them (on the device the image's own copies do this): ${visible:-none}"
python3 "$helper" hide "$bundle/packages.tsv" "$visible" "$scratch" | sed 's/^/namespace-proof.sh: hiding /'
mapfile -t roots < "$scratch/roots.txt"
echo "namespace-proof.sh: folders covered by a farm: ${roots[*]}"
echo "namespace-proof.sh: hidden sonames in /usr/lib/x86_64-linux-gnu (full list of $(wc -l < "$scratch/hidden.txt") files: $scratch/hidden.txt):"
grep -E '^/usr/lib/x86_64-linux-gnu/.*\.so\.[0-9]+$' "$scratch/hidden.txt" | sed 's|^/usr/lib/x86_64-linux-gnu/||' |
  tr '\n' ' ' | fold -s -w 110 | sed 's/^/    /'; echo
echo "    + $(grep -c '/openmpi3/mca_\|/pmix_mca' "$scratch/hidden.txt") Open MPI/PMIx plugins; in /usr/bin: $(grep '^/usr/bin/' "$scratch/hidden.txt" | sed 's|^/usr/bin/||' | grep -E '^(mpi|orte|ompi)' | tr '\n' ' ')..."
echo "    + $(grep -c -v -e '^/usr/lib/x86_64-linux-gnu/' -e '^/usr/bin/' "$scratch/hidden.txt") files in $(grep -v -e '^/usr/lib/x86_64-linux-gnu$' -e '^/usr/bin$' "$scratch/roots.txt" | tr '\n' ' ')"

# The expected tests (from the build tree prepare.sh made).
build_old=$(sed -n 's/^build_dir: //p' "$bundle/manifest.txt")
expected=$(tar -xJOf "$bundle/build-tree.tar.xz" ./tests/gpu/CTestTestfile.cmake |
  awk '/^set_tests_properties/ && match($0, /LABELS "[^"]*"/) {
         labels = ";" substr($0, RSTART + 8, RLENGTH - 9) ";"
         if (index(labels, ";gpu;") && !index(labels, ";gpu2;")) { match($0, /\[=\[[^]]*\]=\]/); print substr($0, RSTART + 3, RLENGTH - 6) } }' |
  paste -sd, -)
[[ -n "$expected" ]] || die "no test labelled gpu1 in the bundle's tests/gpu/CTestTestfile.cmake"

# Inside the namespace: side binds, farms, checks, on-device.sh.
mkdir -p "$scratch/mnt"
export scratch helper
inner='
set -euo pipefail
i=0
while read -r r; do
  i=$((i + 1)); side=$scratch/mnt/side$i; farm=$scratch/mnt/farm$i
  mkdir -p "$side" "$farm"
  mount --bind "$r" "$side"; mount -o remount,bind,ro "$side"
  mount -t tmpfs -o size=64m,mode=755 h-pkg-farm "$farm"
  python3 "$helper" farm "$r" "$side" "$farm" "$scratch/hidden.txt" | sed "s/^/  /"
  mount --bind "$farm" "$r"; mount -o remount,bind,ro "$r"
  [[ $r == /usr/lib/x86_64-linux-gnu ]] && libside=$side
done < "$scratch/roots.txt"
# The GPU machine'"'"'s Python brings its own PyTorch and libraries. Here its stand-in is
# this machine'"'"'s python3 with Debian'"'"'s PyTorch, which links libblas.so.3 (OpenBLAS, a
# carried package, so hidden): that one process is shown the hidden folder'"'"'s side copy.
cat > "$scratch/python3-host" <<WRAP
#!/bin/bash
export LD_LIBRARY_PATH=${libside:-/nonexistent}/openblas-pthread:${libside:-/nonexistent}\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
exec ${PROOF_PYTHON:-/usr/bin/python3} "\$@"
WRAP
chmod +x "$scratch/python3-host"
echo "inside the namespace:"
for f in /usr/lib/x86_64-linux-gnu/libmpi.so.40 /usr/lib/x86_64-linux-gnu/libcurl.so.4 /usr/lib/x86_64-linux-gnu/libhdf5_openmpi.so.103 \
         /usr/lib/x86_64-linux-gnu/libblas.so.3 /usr/bin/mpirun /usr/bin/mpiexec /usr/bin/orterun /etc/openmpi/openmpi-mca-params.conf; do
  if [[ -e $f ]]; then echo "  STILL VISIBLE: $f"; exit 3; else echo "  hidden: $f"; fi
done
echo "  the original build tree without the bundle (ldd '"$build_old"'/trainer): $(ldd '"$build_old"'/trainer 2>&1 | grep -c "not found") libraries not found"
cd "$scratch/repo"
rc=0
t0=$(date +%s)
PYTHON=$scratch/python3-host SHARDTRAIN_GPU_PREFIX=$scratch/prefix share/gpu/on-device.sh --out "$scratch/out/gpu-run" || rc=$?
echo $(( $(date +%s) - t0 )) > "$scratch/ondevice_seconds"
echo "on-device.sh exit code: $rc, $(cat "$scratch/ondevice_seconds") s"
'
t0=$SECONDS
set +e
unshare --mount --propagation private bash -c "$inner" 2>&1 | tee "$scratch/proof.log"
ns_rc=${PIPESTATUS[0]}
set -e
ns_s=$((SECONDS - t0))
[[ $ns_rc -eq 0 ]] || echo "namespace-proof.sh: the namespace part exited with $ns_rc"
(( keep )) || rm -rf "$scratch/prefix"
echo
echo "namespace-proof.sh: verdict (results in $scratch/out/gpu-run):"
rc=0
if [[ -f "$scratch/out/gpu-run/summary.txt" ]]; then
  python3 "$helper" verdict "$scratch/out/gpu-run" "$scratch/hidden.txt" "$visible_sonames" "$expected" \
    "$(cat "$scratch/ondevice_seconds" 2>/dev/null || echo 9999)" "${PROOF_LIMIT_S:-90}" || rc=$?
else
  echo "VERDICT: FAIL: on-device.sh left no summary"; rc=1
fi
(( ns_rc == 0 )) || rc=1
echo "namespace-proof.sh: took $((SECONDS - start)) s (namespace part $ns_s s)"
exit $rc
