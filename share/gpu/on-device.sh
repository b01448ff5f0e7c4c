#!/usr/bin/env bash
# Runs the one-GPU device tests of the carried CUDA build on the GPU machine.
# Run it THERE, from the repository root of the copy, with the bundle folder that
# share/gpu/prepare.sh wrote carried along (default <repo>/gpu-bundle).
#
#   share/gpu/on-device.sh [--sanitize] [--no-measure] [--only REGEX] [--budget SECONDS]
#                          [--bundle DIR] [--out DIR] [--setup-only]
#
#   --sanitize     first run each test under compute-sanitizer --tool memcheck, then
#                  --tool racecheck (if compute-sanitizer is installed), then plainly
#   --no-measure   do not call the measurements hook tests/bench/gpu/measure.sh
#   --only REGEX   only the gpu tests whose name matches (ctest -R)
#   --budget S     the whole script ends within S seconds (default 510: < 9 minutes);
#                  phases that do not fit are reported NOT RUN
#   --out DIR      results folder (default $OUT/gpu-run, or ./gpu-run when OUT is unset)
#   --setup-only   unpack, relocate, report the environment; run no test
#   --measure-only unpack, relocate, then only the measurements hook, with the whole
#                  budget (a second call of a GPU session, after the tests)
#
# Steps: unpack the .debs with dpkg -x into ${SHARDTRAIN_GPU_PREFIX:-/tmp/shardtrain-gpu-prefix};
# delete the Open MPI plugins whose libraries are not carried (dropped.tsv); link the
# carried sonames into PREFIX/links (class stack always; class system only where the
# image lacks the soname, so a carried libcurl/libssl never shadows the image's);
# relocate Open MPI (OPAL_PREFIX, ...); find the image's CUDA, cuDNN and NCCL libraries;
# restore the build tree (same absolute path when the copy is where it was built,
# otherwise <repo>/<same relative path> with the source, build and mpiexec paths
# rewritten in CTestTestfile.cmake and the other text files of the tree); report the
# environment; run `ctest -L gpu -LE gpu2` (label gpu2: needs two GPUs, see
# tests/gpu/CMakeLists.txt); run the measurements hook if present.
# Results (at most 8 files, each < 16 MiB): summary.txt (one line per test: name, mode,
# result, seconds), environment.txt, setup.log, ctest.log, memcheck.log, racecheck.log,
# measure.log, measure.txt (the hook's own file). Exit: 0 every selected test and the hook
# passed; 1 a test or the hook failed or did not run; 2 setup problem (.deb, library).
# Never runs ldconfig and writes nothing outside PREFIX, the restored build tree and
# the results folder.
set -euo pipefail
t_start=$SECONDS
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
helper=$root/share/gpu/device_helper.py
bundle=${SHARDTRAIN_GPU_BUNDLE:-$root/gpu-bundle}
prefix=${SHARDTRAIN_GPU_PREFIX:-/tmp/shardtrain-gpu-prefix}
run=""
sanitize=0 measure=1 only="" budget=510 setup_only=0 measure_only=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --sanitize) sanitize=1; shift ;;
    --no-measure) measure=0; shift ;;
    --only) only=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    --bundle) bundle=$2; shift 2 ;;
    --out) run=$2; shift 2 ;;
    --setup-only) setup_only=1; shift ;;
    --measure-only) measure_only=1; measure=1; shift ;;
    -h|--help) sed -n '2,35p' "$0"; exit 0 ;;
    *) echo "on-device.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
if [[ -z "$run" ]]; then
  if [[ -n "${OUT:-}" ]]; then run=$OUT/gpu-run; else run=$root/gpu-run; fi
fi
deadline=$((t_start + budget))
ours=(summary.txt environment.txt setup.log ctest.log memcheck.log racecheck.log measure.log measure.txt
      measure-extra.tar.gz sanitizer-logs.tar.gz)
mkdir -p "$run"
for f in "$run"/* "$run"/.[!.]*; do
  [[ -e "$f" ]] || continue
  n=$(basename "$f"); n=${n%.gz}
  [[ " ${ours[*]} " == *" $n "* ]] || { echo "on-device.sh: error: results folder $run holds $(basename "$f"), not ours: use an empty folder (--out)" >&2; exit 2; }
  rm -f "$f"
done
bundle=$(cd "$bundle" 2>/dev/null && pwd) || { echo "on-device.sh: error: no bundle folder (${SHARDTRAIN_GPU_BUNDLE:-$root/gpu-bundle}); run share/gpu/prepare.sh and carry it" | tee "$run/summary.txt" >&2; exit 2; }
setup_log=$run/setup.log
env_txt=$run/environment.txt
summary=$run/summary.txt
: > "$setup_log"
problems=()
say() { echo "on-device.sh: $*"; echo "$*" >> "$setup_log"; }
problem() { problems+=("$*"); say "PROBLEM: $*"; }
manifest() { sed -n "s/^$1: //p" "$bundle/manifest.txt" | head -n 1; }
[[ -f "$bundle/manifest.txt" ]] || { say "error: $bundle/manifest.txt missing"; exit 2; }

# --- 1. unpack the .debs ------------------------------------------------------------------
marker=.shardtrain-gpu-prefix
if [[ -e "$prefix" && ! -e "$prefix/$marker" ]]; then
  say "error: $prefix exists and was not made by on-device.sh; set SHARDTRAIN_GPU_PREFIX"; exit 2
fi
rm -rf "$prefix"
mkdir -p "$prefix/links" "$prefix/hwloc-plugins" "$prefix/work"
touch "$prefix/$marker"
unpack() {
  if command -v dpkg-deb >/dev/null 2>&1; then dpkg -x "$1" "$prefix"; else python3 "$helper" extract-deb "$1" "$prefix"; fi
}
npkg=0
while IFS=$'\t' read -r pkg ver arch class deb sha installed; do
  [[ "$pkg" == \#* ]] && continue
  f=$bundle/debs/$deb
  if [[ ! -f "$f" ]]; then problem "missing .deb $deb (package $pkg $ver, class $class)"; continue; fi
  if command -v sha256sum >/dev/null 2>&1 && [[ "$(sha256sum "$f" | cut -d' ' -f1)" != "$sha" ]]; then
    problem "checksum of $deb differs from the manifest"
  fi
  unpack "$f" >> "$setup_log" 2>&1 || problem "unpacking $deb failed"
  npkg=$((npkg + 1))
done < "$bundle/packages.tsv"
ndrop=0
while IFS=$'\t' read -r rel pkg why; do
  [[ "$rel" == \#* ]] && continue
  [[ -e "$prefix/$rel" ]] && { rm -f "$prefix/$rel"; ndrop=$((ndrop + 1)); }
done < "$bundle/dropped.tsv"
say "unpacked $npkg .debs into $prefix; deleted $ndrop plugins/libraries whose libraries are not carried (dropped.tsv)"

# --- 2. link the carried sonames ------------------------------------------------------------
# Where the image keeps libraries: the default dirs and /etc/ld.so.conf{,.d} (read, never ldconfig).
sysdirs=(/lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu /lib64 /usr/lib64 /lib /usr/lib)
if [[ -r /etc/ld.so.conf ]]; then
  while read -r d; do [[ -d "$d" ]] && sysdirs+=("$d"); done < <(
    cat /etc/ld.so.conf /etc/ld.so.conf.d/*.conf 2>/dev/null | sed 's/#.*//' | grep -v '^[[:space:]]*include' | tr -s ' \t' '\n' | grep '^/' || true)
fi
image_has() { local d; for d in "${sysdirs[@]}"; do [[ -e "$d/$1" ]] && { echo "$d/$1"; return 0; }; done; return 1; }
n_stack=0 n_missing=0 n_image=0
image_used=()
while IFS=$'\t' read -r so pkg class rel; do
  [[ "$so" == \#* ]] && continue
  target=$prefix/$rel
  if [[ "$class" == system ]] && img=$(image_has "$so"); then
    n_image=$((n_image + 1)); image_used+=("$so"); echo "link: $so -> image's $img (class system, not linked)" >> "$setup_log"; continue
  fi
  if [[ ! -e "$target" ]]; then problem "$so: $rel is not in the prefix (package $pkg not unpacked?)"; continue; fi
  ln -sfn "$target" "$prefix/links/$so"
  if [[ "$class" == stack ]]; then n_stack=$((n_stack + 1)); else n_missing=$((n_missing + 1)); fi
  echo "link: $so -> $rel (class $class)" >> "$setup_log"
  # alternatives-managed names (libblas.so.3 -> openblas-pthread/) also at the usual place
  if [[ "$(basename "$rel")" != "$so" && ! -e "$prefix/usr/lib/x86_64-linux-gnu/$so" ]]; then
    ln -s "$target" "$prefix/usr/lib/x86_64-linux-gnu/$so"
  fi
done < "$bundle/libs.tsv"
say "linked $n_stack stack sonames and $n_missing system sonames the image lacks into $prefix/links; the image's own copy is used for $n_image (${image_used[*]:-none})"

# Open MPI, relocated: mpirun/mpiexec (alternatives links dpkg -x does not make).
ompi_bin=$prefix/usr/bin
for n in mpirun mpiexec; do [[ -e "$ompi_bin/$n" ]] || ln -s orterun "$ompi_bin/$n"; done
export OPAL_PREFIX=$prefix/usr
export OPAL_SYSCONFDIR=$prefix/etc/openmpi
export PMIX_MCA_mca_base_component_path=$prefix/usr/lib/x86_64-linux-gnu/pmix2/lib/pmix
export OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader}
export OMPI_MCA_pml=${OMPI_MCA_pml:-ob1}
export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
export HWLOC_PLUGINS_PATH=$prefix/hwloc-plugins   # empty: never load the image's hwloc plugins
if ! command -v ssh >/dev/null 2>&1 && ! command -v rsh >/dev/null 2>&1; then
  export OMPI_MCA_plm=${OMPI_MCA_plm:-isolated}    # one node: no remote launcher needed
fi
export PATH=$ompi_bin:$PATH
orig_ldpath=${LD_LIBRARY_PATH:-}
export LD_LIBRARY_PATH=$prefix/links${orig_ldpath:+:$orig_ldpath}

# --- 3. the image's CUDA, cuDNN and NCCL ----------------------------------------------------------
wheel_dirs=()
if command -v python3 >/dev/null 2>&1; then
  mapfile -t wheel_dirs < <(timeout 60 python3 "$helper" wheel-dirs 2>/dev/null || true)
fi
cuda_dirs=()
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
  [[ -d "$d" ]] && cuda_dirs+=("$(cd "$d" && pwd -P)")
done
find_lib() {  # SONAME ENV_OVERRIDE -> first dir holding it, in the order the brief gives
  local so=$1 override=${2:-} d
  local cands=()
  [[ -n "$override" ]] && cands+=("$override")
  case $so in
    libcudnn*|libnccl*) cands+=("${wheel_dirs[@]}" "${cuda_dirs[@]}" /usr/lib/x86_64-linux-gnu) ;;
    *) cands+=("${cuda_dirs[@]}" /usr/lib/x86_64-linux-gnu "${wheel_dirs[@]}") ;;
  esac
  for d in "${cands[@]}"; do [[ -n "$d" && -e "$d/$so" ]] && { echo "$d"; return 0; }; done
  return 1
}
cuda_ld=()
declare -A cuda_found=()
while IFS=$'\t' read -r so path_here; do
  [[ "$so" == \#* ]] && continue
  override=""
  case $so in
    libcudnn*) override=${SHARDTRAIN_CUDNN_LIB:-} ;;
    libnccl*) override=${SHARDTRAIN_NCCL_LIB:-} ;;
  esac
  if d=$(find_lib "$so" "$override"); then
    cuda_found[$so]=$d
    cuda_ld+=("$d")
  else
    problem "$so (CUDA side, built against $path_here) is found nowhere: set SHARDTRAIN_CUDNN_LIB / SHARDTRAIN_NCCL_LIB or install it"
  fi
done < "$bundle/cuda.tsv"
# cuDNN and NCCL dirs first, then the toolkit (nvrtc for cuDNN's runtime-compiled engines), then the wheels.
ld=("$prefix/links")
for d in "${cuda_ld[@]}" "${cuda_dirs[@]}" "${wheel_dirs[@]}"; do
  [[ " ${ld[*]} " == *" $d "* ]] || ld+=("$d")
done
LD_LIBRARY_PATH=$(IFS=:; echo "${ld[*]}")${orig_ldpath:+:$orig_ldpath}
export LD_LIBRARY_PATH
for so in "${!cuda_found[@]}"; do say "cuda: $so from ${cuda_found[$so]}"; done

# --- 4. the build tree ------------------------------------------------------------------------------------
src_old=$(manifest source_root)
build_old=$(manifest build_dir)
rel=$(manifest build_dir_relative)
mpiexec_old=$(manifest mpiexec)
if [[ -n "$rel" ]]; then build=$root/$rel; else build=${SHARDTRAIN_GPU_BUILD:-/tmp/shardtrain-gpu-build}; fi
bmark=.shardtrain-restored
if [[ "$build" == "$build_old" && -f "$build/CMakeCache.txt" && ! -e "$build/$bmark" ]]; then
  say "build tree: using $build in place (this is the machine and path it was built at)"
else
  if [[ -e "$build" && ! -e "$build/$bmark" ]]; then
    say "error: $build exists and was not restored by on-device.sh; move it away or set SHARDTRAIN_GPU_BUILD"; exit 2
  fi
  rm -rf "$build"
  mkdir -p "$build"
  tar -xJf "$bundle/build-tree.tar.xz" -C "$build"
  touch "$build/$bmark"
  esc() { printf '%s' "$1" | sed 's/[][\.*^$|/]/\\&/g'; }
  new_mpiexec=$ompi_bin/mpiexec
  subst=()
  [[ "$build_old" != "$build" ]] && subst+=(-e "s|$(esc "$build_old")|$(esc "$build")|g")
  [[ "$src_old" != "$root" ]] && subst+=(-e "s|$(esc "$src_old")|$(esc "$root")|g")
  subst+=(-e "s|\([\"=]\)$(esc "$mpiexec_old")\([\";[:space:]]\)|\1$(esc "$new_mpiexec")\2|g")
  nfix=0
  while IFS= read -r -d '' f; do
    if grep -qF -e "$build_old" -e "$src_old" -e "$mpiexec_old" "$f"; then sed -i "${subst[@]}" "$f"; nfix=$((nfix + 1)); fi
  done < <(find "$build" -type f ! -name "$bmark" -size -4M -exec grep -IlZ . {} + 2>/dev/null || true)
  left_over=$( (grep -rlF --include=CTestTestfile.cmake -e "\"$mpiexec_old\"" "$build" 2>/dev/null || true) | wc -l)
  if [[ "$src_old" != "$root" ]]; then
    left_over=$((left_over + $( (grep -rlF --include=CTestTestfile.cmake -e "$src_old/" "$build" 2>/dev/null || true) | wc -l)))
  fi
  say "build tree: restored at $build (built at $build_old, sources $src_old -> $root); rewrote paths and mpiexec ($mpiexec_old -> $new_mpiexec) in $nfix text files"
  (( left_over == 0 )) || problem "$left_over CTestTestfile.cmake files still hold the old paths"
fi

# --- 5. environment report -------------------------------------------------------------------------------
classify() {  # a resolved library path -> bundle|cuda|image
  case $1 in
    "$prefix"/*) echo bundle ;;
    *) local d; for d in "${cuda_ld[@]}" "${cuda_dirs[@]}" "${wheel_dirs[@]}"; do [[ "$1" == "$d"/* ]] && { echo cuda; return; }; done
       echo image ;;
  esac
}
bins=()
while IFS= read -r -d '' f; do
  head -c 4 "$f" 2>/dev/null | grep -q 'ELF' && bins+=("$f")
done < <(find "$build" -type f -perm -u+x -not -path '*/CMakeFiles/*' -print0 | sort -z)
ldd_problems=0
{
  echo "# shardtrain on-device environment report, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "bundle: commit $(manifest git_commit), prepared $(manifest date) on $(manifest build_host)"
  echo "built with: $(manifest nvcc); cuDNN $(manifest cudnn); NCCL $(manifest nccl); sm $(manifest cuda_architectures)"
  echo "repo root here: $root; build tree: $build; prefix: $prefix"
  echo "host: $(uname -srm); $( (. /etc/os-release && echo "$PRETTY_NAME") 2>/dev/null || echo 'no /etc/os-release')"
  echo "glibc: $(ldd --version 2>/dev/null | head -n 1)"
  for d in "${sysdirs[@]}"; do
    if [[ -e "$d/libstdc++.so.6" ]]; then
      echo "libstdc++: $d/libstdc++.so.6, newest $(grep -ao 'GLIBCXX_3\.4\.[0-9]*' "$d/libstdc++.so.6" | sort -uV | tail -n 1)"; break
    fi
  done
  echo "bundle needs: $(sed -n 's/^build-tree binaries: //p; s/^carried libraries and programs: /carried: /p' "$bundle/manifest.txt" | tr '\n' ';')"
  echo
  echo "## nvidia-smi"
  if command -v nvidia-smi >/dev/null 2>&1; then
    timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap,pci.bus_id --format=csv 2>&1 || true
    timeout 30 nvidia-smi 2>&1 || true
  else
    echo "nvidia-smi: not found"
  fi
  [[ -r /proc/driver/nvidia/version ]] && cat /proc/driver/nvidia/version
  echo
  echo "## toolkit and wheels"
  nv=$(command -v nvcc || true); [[ -z "$nv" && -x /usr/local/cuda/bin/nvcc ]] && nv=/usr/local/cuda/bin/nvcc
  echo "nvcc: ${nv:-not found} $([[ -n "$nv" ]] && "$nv" --version | grep -o 'release [0-9.]*, V[0-9.]*')"
  cs=$(command -v compute-sanitizer || true); [[ -z "$cs" && -x /usr/local/cuda/bin/compute-sanitizer ]] && cs=/usr/local/cuda/bin/compute-sanitizer
  echo "compute-sanitizer: ${cs:-not found} $([[ -n "$cs" ]] && timeout 20 "$cs" --version 2>/dev/null | grep -i version | head -n 1)"
  if command -v python3 >/dev/null 2>&1; then
    timeout 60 python3 -m pip show nvidia-cudnn-cu13 nvidia-nccl-cu13 nvidia-cublas nvidia-cublas-cu13 nvidia-cuda-runtime torch 2>/dev/null |
      grep -E '^(Name|Version|Location):' | paste - - - || echo "pip show: nothing"
  fi
  echo "wheel lib dirs: ${wheel_dirs[*]:-none}"
  echo "toolkit lib dirs: ${cuda_dirs[*]:-none}"
  for so in $(printf '%s\n' "${!cuda_found[@]}" | sort); do
    echo "cuda: $so -> ${cuda_found[$so]}/$so ($(readlink -f "${cuda_found[$so]}/$so"))"
  done
  echo
  echo "## environment"
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  env | grep -E '^(OPAL_|OMPI_|PMIX_|HWLOC_)' | sort
  echo "image copies used (class system): ${image_used[*]:-none}"
  echo
  echo "## Open MPI (relocated)"
  echo "mpiexec: $(command -v mpiexec) -> $(readlink -f "$(command -v mpiexec)")"
  timeout 30 mpiexec --version 2>&1 | head -n 1 || true
  if timeout 60 mpiexec -n 2 true > "$prefix/work/mpi-check.log" 2>&1; then
    echo "mpiexec -n 2 true: ok"
  else
    echo "mpiexec -n 2 true: FAILED"; cat "$prefix/work/mpi-check.log"
  fi
  echo
  echo "## libraries each binary of the build tree resolves (ldd): bundle = $prefix, cuda = CUDA/cuDNN/NCCL dirs, image = the image's own"
} > "$env_txt" 2>&1
grep -q '^mpiexec -n 2 true: FAILED' "$env_txt" && problem "mpiexec -n 2 true failed (environment.txt)"
for b in "${bins[@]}"; do
  out=$(ldd "$b" 2>&1 || true)
  nb=0 nc=0 ni=0 bad=()
  while IFS= read -r line; do
    line=${line#"${line%%[![:space:]]*}"}
    if [[ "$line" == *"version \`"*"not found"* || "$line" == *"no version information"* ]]; then
      bad+=("$line"); echo "  $line  [VERSION]"
    elif [[ "$line" == *"not found"* ]]; then
      bad+=("${line%% *} NOT FOUND"); echo "  $line  [NOT FOUND]"
    elif [[ "$line" =~ ^([^[:space:]]+)\ =\>\ (/[^[:space:]]+) ]]; then
      c=$(classify "${BASH_REMATCH[2]}")
      case $c in bundle) nb=$((nb + 1)) ;; cuda) nc=$((nc + 1)) ;; image) ni=$((ni + 1)) ;; esac
      echo "  ${BASH_REMATCH[1]} => ${BASH_REMATCH[2]}  [$c]"
    fi
  done <<< "$out" > "$prefix/work/ldd.txt"
  if (( ${#bad[@]} )); then
    ldd_problems=$((ldd_problems + ${#bad[@]}))
    echo "ldd ${b#"$build"/}: PROBLEM: ${bad[*]}"
  else
    echo "ldd ${b#"$build"/}: ok ($nb bundle, $nc cuda, $ni image)"
  fi >> "$env_txt"
  cat "$prefix/work/ldd.txt" >> "$env_txt"
done
echo "ldd problems: $ldd_problems" >> "$env_txt"
(( ldd_problems == 0 )) || problem "ldd: $ldd_problems unresolved libraries or versions (environment.txt)"
say "environment: $(grep -m1 -E '^[^,]+, [0-9.]+, ' "$env_txt" || echo 'no GPU listed by nvidia-smi'); ${#bins[@]} binaries, ldd problems: $ldd_problems"
say "setup took $((SECONDS - t_start)) s"

# --- 6. tests ----------------------------------------------------------------------------------------------------
sum_lines=()
add_sum() { sum_lines+=("$(printf '%s\t%s\t%s\t%s' "$1" "$2" "$3" "$4")"); }
verdict() {  # RC OUTPUT-FILE -> result word
  local rc=$1 f=$2 lib
  if lib=$(grep -o 'error while loading shared libraries: [^:]*' "$f" 2>/dev/null | head -n 1) && [[ -n "$lib" ]]; then
    echo "FAIL(library missing: ${lib##*: })"
  elif grep -q -e 'needs a CUDA device and found none' -e 'no CUDA device available' -e 'the gpu tests need a CUDA device' "$f" 2>/dev/null && (( rc != 0 )); then
    echo "FAIL(no CUDA device)"
  elif (( rc == 0 )); then echo PASS
  elif (( rc == 124 || rc == 137 )); then echo TIMEOUT
  elif (( rc == 86 )); then echo "SANITIZER-ERRORS"
  else echo "FAIL(rc $rc)"
  fi
}
ctest_sel=(-L gpu -LE gpu2)
[[ -n "$only" ]] && ctest_sel+=(-R "$only")
mapfile -t selected < <(cd "$build" && ctest -N "${ctest_sel[@]}" 2>/dev/null | sed -n 's/^ *Test *#[0-9]*: //p')
mapfile -t two_gpu < <(cd "$build" && ctest -N -L gpu2 ${only:+-R "$only"} 2>/dev/null | sed -n 's/^ *Test *#[0-9]*: //p')
for t in "${two_gpu[@]}"; do add_sum "$t" - "NOT RUN(needs 2 GPUs: label gpu2)" 0; done
say "selected ${#selected[@]} one-GPU tests (ctest ${ctest_sel[*]}): ${selected[*]:-none}"
(( ${#selected[@]} || measure_only )) || problem "no test selected"
hook=$root/tests/bench/gpu/measure.sh
measure_reserve=0
[[ $measure == 1 && -f "$hook" ]] && measure_reserve=90
plain_deadline=$((deadline - measure_reserve - 15))

if (( setup_only )); then
  say "--setup-only: no test run"
else
  if (( sanitize && !measure_only )); then
    cs=$(command -v compute-sanitizer || true); [[ -z "$cs" && -x /usr/local/cuda/bin/compute-sanitizer ]] && cs=/usr/local/cuda/bin/compute-sanitizer
    if [[ -z "$cs" ]]; then
      say "--sanitize: compute-sanitizer not found (PATH, /usr/local/cuda/bin): sanitizer runs skipped"
      for t in "${selected[@]}"; do add_sum "$t" sanitize "NOT RUN(no compute-sanitizer)" 0; done
    elif ! command -v python3 >/dev/null 2>&1; then
      say "--sanitize: python3 not found (needed to read ctest --show-only=json-v1): sanitizer runs skipped"
    else
      scripts=$prefix/work/tests
      (cd "$build" && ctest --show-only=json-v1 "${ctest_sel[@]}" > "$prefix/work/tests.json")
      python3 "$helper" test-scripts "$prefix/work/tests.json" "$scripts"
      # Leave the plain run at least 180 s.
      san_deadline=$((plain_deadline - 180))
      for tool in memcheck racecheck; do
        log=$run/$tool.log
        : > "$log"
        for t in "${selected[@]}"; do
          budget_t=$((san_deadline - SECONDS)); (( budget_t > 150 )) && budget_t=150
          if (( budget_t < 15 )); then add_sum "$t" "$tool" "NOT RUN(time budget)" 0; continue; fi
          echo "===== $t under compute-sanitizer --tool $tool (timeout $budget_t s)" >> "$log"
          t0=$SECONDS
          rc=0
          timeout -k 10 "$budget_t" "$scripts/$t.sh" "$cs" --tool "$tool" --error-exitcode 86 --print-limit 50 \
            > "$prefix/work/out.txt" 2>&1 || rc=$?
          cat "$prefix/work/out.txt" >> "$log"
          r=$(verdict "$rc" "$prefix/work/out.txt")
          echo "===== $t: $r ($((SECONDS - t0)) s)" >> "$log"
          add_sum "$t" "$tool" "$r" "$((SECONDS - t0))"
          say "$tool: $t: $r ($((SECONDS - t0)) s)"
        done
      done
    fi
  fi

  # Plain ctest. Tests with a TIMEOUT property keep it (300 s for the mpi ones);
  # --stop-time and the outer timeout end everything at the plain-phase deadline.
  plain_left=$((plain_deadline - SECONDS))
  if (( measure_only )); then
    say "--measure-only: no test run"
  elif (( plain_left < 20 )); then
    for t in "${selected[@]}"; do add_sum "$t" plain "NOT RUN(time budget)" 0; done
  else
    per=$(( plain_left < 180 ? plain_left : 180 ))
    stop=$(date -d "@$(( $(date +%s) + plain_left - 5 ))" +%H:%M:%S)
    say "ctest ${ctest_sel[*]} (per-test timeout $per s, stop at $stop, $plain_left s left)"
    rc=0
    (cd "$build" && timeout -k 10 "$plain_left" ctest "${ctest_sel[@]}" -V --timeout "$per" --stop-time "$stop" \
      --no-tests=error) > "$run/ctest.log" 2>&1 || rc=$?
    declare -A tnum=()
    while IFS=$'\t' read -r num name secs; do
      tnum[$name]=$num
      grep "^$num: " "$run/ctest.log" | sed "s/^$num: //" > "$prefix/work/out-$num.txt" || true
      st=$(grep -E "Test +#$num: " "$run/ctest.log" | tail -n 1)
      if [[ "$st" == *" Passed "* ]]; then trc=0
      elif [[ "$st" == *Timeout* ]]; then trc=124
      else trc=1; fi
      add_sum "$name" plain "$(verdict "$trc" "$prefix/work/out-$num.txt")" "$secs"
    done < <(sed -nE 's/^ *[0-9]+\/[0-9]+ Test +#([0-9]+): ([^ ]+) .* ([0-9.]+) sec.*$/\1\t\2\t\3/p' "$run/ctest.log")
    for t in "${selected[@]}"; do
      [[ -n "${tnum[$t]:-}" ]] || add_sum "$t" plain "NOT RUN(ctest rc $rc; see ctest.log)" 0
    done
  fi

  # Measurements hook (written by someone else; called only if it exists).
  if (( measure )); then
    if [[ -f "$hook" ]]; then
      mleft=$((deadline - SECONDS - 15))
      if (( mleft < 30 )); then
        add_sum measure.sh hook "NOT RUN(time budget)" 0
      else
        say "measurements hook $hook ($mleft s)"
        t0=$SECONDS rc=0
        (cd "$root" && SHARDTRAIN_BUILD_DIR=$build SHARDTRAIN_SOURCE_DIR=$root SHARDTRAIN_GPU_RUN_DIR=$run \
          SHARDTRAIN_MEASURE_OUT=$run/measure.txt SHARDTRAIN_MEASURE_SECONDS=$mleft MPIEXEC=$ompi_bin/mpiexec \
          timeout -k 10 "$mleft" bash "$hook") > "$run/measure.log" 2>&1 || rc=$?
        add_sum measure.sh hook "$(verdict "$rc" "$run/measure.log")" "$((SECONDS - t0))"
      fi
    else
      say "no measurements hook at ${hook#"$root"/}: skipped"
    fi
  fi
fi

# --- 7. results: summary, at most 8 files, each < 16 MiB ------------------------------------------------------
{
  echo "# shardtrain on-device run $(date -u +%Y-%m-%dT%H:%M:%SZ): commit $(manifest git_commit)"
  echo "# gpu: $(grep -m1 -E '^[^,]+, [0-9.]+, ' "$env_txt" || echo 'none listed by nvidia-smi')"
  echo "# mode: $( ((sanitize)) && echo 'sanitize+plain' || echo plain)${only:+, --only $only}; ${#selected[@]} one-GPU tests selected; took $((SECONDS - t_start)) s of $budget"
  echo "# setup problems: ${#problems[@]}${problems[*]:+: ${problems[*]}}"
  echo "# test<TAB>mode<TAB>result<TAB>seconds"
  printf '%s\n' "${sum_lines[@]}"
} > "$summary"
shopt -s nullglob
extra=()
for f in "$run"/*; do
  case $(basename "$f") in
    summary.txt|environment.txt|setup.log|ctest.log|memcheck.log|racecheck.log|measure.log|measure.txt) ;;
    *) extra+=("$(basename "$f")") ;;
  esac
done
if (( ${#extra[@]} )); then  # the hook wrote more than measure.txt: keep it as one archive
  tar -czf "$prefix/work/extra.tgz" -C "$run" "${extra[@]}" && rm -rf "${extra[@]/#/$run/}" &&
    mv "$prefix/work/extra.tgz" "$run/measure-extra.tar.gz"
fi
files=("$run"/*)
if (( ${#files[@]} > 8 )); then
  tar -czf "$prefix/work/logs.tgz" -C "$run" memcheck.log racecheck.log 2>/dev/null && rm -f "$run/memcheck.log" "$run/racecheck.log" &&
    mv "$prefix/work/logs.tgz" "$run/sanitizer-logs.tar.gz"
fi
for f in "$run"/*; do
  [[ "$f" == *.gz ]] && continue
  sz=$(stat -c %s "$f")
  if (( sz > 15 * 1024 * 1024 )); then  # keep the head and the tail
    { head -c $((7 * 1024 * 1024)) "$f"; printf '\n[... %s bytes cut by on-device.sh ...]\n' "$sz"; tail -c $((7 * 1024 * 1024)) "$f"; } > "$f.cut" && mv "$f.cut" "$f"
  fi
  (( sz > 4 * 1024 * 1024 )) && gzip -9 "$f"
done
echo "on-device.sh: results in $run ($(ls "$run" | wc -l) files):"
cat "$summary"
if (( ${#problems[@]} )); then exit 2; fi
if (( setup_only )); then exit 0; fi
grep -v '^#' "$summary" | awk -F'\t' '($2 == "plain" || $2 == "hook") && $3 != "PASS" { bad = 1 } END { exit bad }' || exit 1
exit 0
