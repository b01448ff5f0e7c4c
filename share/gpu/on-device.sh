#!/usr/bin/env bash
# The GPU session's one call (issue 32): runs on the GPU machine, from the repository
# root of the copy, with the bundle folder that share/gpu/prepare.sh wrote carried along
# (default <repo>/gpu-bundle), and brings back everything in at most 8 files.
#
#   share/gpu/on-device.sh [--budget SECONDS] [--only REGEX] [--no-measure] [--no-sanitize]
#                          [--bundle DIR] [--out DIR] [--setup-only]
#
#   --budget S     the whole script ends within S seconds (default 540); every phase has
#                  its own deadline that leaves room for the phases after it, and one that
#                  does not fit is reported NOT RUN(time budget)
#   --only REGEX   only the gpu tests whose name matches (ctest -R)
#   --no-measure   no measurement (tests/bench/gpu/measure.sh)
#   --no-sanitize  no compute-sanitizer phase
#   --measure ARGS instead of the measurement plan (c and e below), one call of
#                  tests/bench/gpu/measure.sh with these arguments (one string, split
#                  on spaces), in the time the tests leave: a short re-check after a
#                  fix, e.g. --measure "--parts speed --precisions bf16 --models big
#                  --who ours,eager --profile"
#   --out DIR      results folder (default $OUT/gpu-run, or ./gpu-run when OUT is unset)
#   --setup-only   unpack, relocate, report the environment; run nothing
#
# Setup: unpack the .debs with dpkg -x into ${SHARDTRAIN_GPU_PREFIX:-/tmp/shardtrain-gpu-prefix};
# delete the Open MPI plugins whose libraries are not carried (dropped.tsv); link the
# carried sonames into PREFIX/links (class stack always; class system only where the
# image lacks the soname, so a carried libcurl/libssl never shadows the image's);
# relocate Open MPI (OPAL_PREFIX, ...); find the image's CUDA, cuDNN and NCCL libraries;
# restore the build tree (same absolute path when the copy is where it was built,
# otherwise <repo>/<same relative path> with the source, build and mpiexec paths
# rewritten in CTestTestfile.cmake and the other text files of the tree); report the
# environment (environment.txt: nvidia-smi, versions, ldd of every binary).
# Then the plan, each phase with its deadline (default budget 540 s):
#   a. one environment line (GPU, driver, the CUDA/cuBLAS/cuDNN/NCCL libraries used and
#      the image's wheels) and a smoke of a few seconds: the trainer's --version (every
#      carried library loads), nccl_probe under mpiexec and one kernel test. A library
#      that does not load, or a trainer --version that fails under mpiexec, stops the
#      run here, with the summary
#      saying which; no CUDA device (this machine's rehearsal) runs the tests only to
#      their no-device messages and skips the GPU measurements;
#   b. every one-GPU test, `ctest -L gpu -LE gpu2 -j 3`, each with its own timeout (at
#      most 150 s; the CTest files' TIMEOUT properties are lowered to it), the newest
#      first (SHARDTRAIN_GPU_FIRST_TESTS, default gpu_lt_linear, gpu_flash_attention,
#      gpu_cudnn_sdpa, gpu_device_training_np1; not with --only). Label gpu2 (two GPUs) is listed NOT RUN.
#      The phase gets at least SHARDTRAIN_GPU_TESTS_MIN_S (default 150) where the budget
#      allows; a short budget shortens the measurements instead. -j: SHARDTRAIN_GPU_TEST_JOBS;
#   c. measurements: first (45 s) the kernel bandwidth microbenchmark
#      (tests/bench/gpu/kernel_bandwidth.cpp, gpu_kernel_bandwidth --type bf16: each
#      memory-bound op of the step, default and candidate, at the 124M GPT's sizes,
#      against the device's copy rate and peak; its table into measure.md); then
#      tests/bench/gpu/measure.sh: the 124M GPT in bf16, ours against
#      PyTorch eager and torch.compile, ours with model.attention = "unfused" and with
#      "flash" (A/B against today's default "auto", cuDNN's fused attention in 16 bits,
#      in the same call; two runs of each bitwise equal) and with model.gemm =
#      "cublas" (after PyTorch's rows; A/B against the default "auto", cuBLASLt), with
#      train.device_kernels = "candidate" (the kernels not yet run on a device), and with
#      model.gelu = "epilogue" (last: the MLP's GELU in cuBLASLt's epilogues; A/B against the
#      default "separate"), then each of ours under --profile (210 s; a tight budget
#      reports the candidate and gelu rows NOT RUN first), the fp32 quickstart GPU against host and
#      the checkpoint crossings (75 s), then Hugging Face (80 s; on the host when there is
#      no device): GPT2LMHeadModel on our safetensors export, and (issue 48) our trainer's
#      DistilBERT- and BERT-shaped classifiers exported with --names distilbert|bert and
#      loaded by transformers' own ...ForSequenceClassification (loss against ours, logits
#      against bert_torch.py, 1e-4), BertTokenizer's ids against trainer-data's (exact);
#   d. compute-sanitizer memcheck and racecheck on the kernel tests without their
#      GPT-2-sized cases (racecheck not on the cuDNN tests, whose hazards were all
#      cuDNN's own: share/doc/gpu.md), only when at least 150 s remain;
#   e. the 124M GPT in fp32 and fp16 (ours, "flash" in both, "unfused" in fp16), in what is left.
# Results, rewritten after each phase (a call cut short still brings back what ran):
# summary.txt (the environment line, then one line per smoke, test and phase: name,
# phase, result, seconds), environment.txt, setup.log, ctest.log, measure.md (the
# tables and verdicts), measure.log, measure-logs.tar.xz, sanitizer.log.
# Exit: 0 nothing failed; 1 a test, a check or a phase failed; 2 setup problem (.deb,
# library, the runtime does not load). Never runs ldconfig and writes nothing outside
# PREFIX, the restored build tree and the results folder.
set -euo pipefail
t_start=$SECONDS
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
helper=$root/share/gpu/device_helper.py
bundle=${SHARDTRAIN_GPU_BUNDLE:-$root/gpu-bundle}
prefix=${SHARDTRAIN_GPU_PREFIX:-/tmp/shardtrain-gpu-prefix}
run=""
sanitize=1 measure=1 only="" budget=540 setup_only=0 measure_args=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --no-sanitize) sanitize=0; shift ;;
    --no-measure) measure=0; shift ;;
    --measure) measure_args=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    --bundle) bundle=$2; shift 2 ;;
    --out) run=$2; shift 2 ;;
    --setup-only) setup_only=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "on-device.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
if [[ -z "$run" ]]; then
  if [[ -n "${OUT:-}" ]]; then run=$OUT/gpu-run; else run=$root/gpu-run; fi
fi
deadline=$((t_start + budget))
ours=(summary.txt environment.txt setup.log ctest.log measure.md measure.log measure-logs.tar.xz sanitizer.log)
mkdir -p "$run"
for f in "$run"/* "$run"/.[!.]*; do
  [[ -e "$f" ]] || continue
  n=$(basename "$f"); n=${n%.gz}; n=${n%.tmp}
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

if [[ "$(manifest carried_runtime)" == none ]]; then
  # prepare.sh --no-debs: this machine's own Open MPI (the one the build used) and libraries.
  ompi_bin=$(dirname "$(manifest mpiexec)")
  [[ -x $ompi_bin/mpiexec ]] || problem "the bundle carries no runtime (prepare.sh --no-debs) and $ompi_bin/mpiexec is not here"
  say "the bundle carries no runtime (prepare.sh --no-debs): this machine's own Open MPI ($ompi_bin) and libraries are used"
else
  # Open MPI, relocated: mpirun/mpiexec (alternatives links dpkg -x does not make).
  ompi_bin=$prefix/usr/bin
  for n in mpirun mpiexec; do [[ -e "$ompi_bin/$n" ]] || ln -s orterun "$ompi_bin/$n"; done
  export OPAL_PREFIX=$prefix/usr
  export OPAL_SYSCONFDIR=$prefix/etc/openmpi
  export PMIX_MCA_mca_base_component_path=$prefix/usr/lib/x86_64-linux-gnu/pmix2/lib/pmix
  export HWLOC_PLUGINS_PATH=$prefix/hwloc-plugins   # empty: never load the image's hwloc plugins
fi
export OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader}
export OMPI_MCA_pml=${OMPI_MCA_pml:-ob1}
export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
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
  left_over=0
  if [[ "$new_mpiexec" != "$mpiexec_old" ]]; then
    left_over=$( (grep -rlF --include=CTestTestfile.cmake -e "\"$mpiexec_old\"" "$build" 2>/dev/null || true) | wc -l)
  fi
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

# --- 6. the plan: smoke, tests, measurements, sanitizer ------------------------------------------------------------
# Every phase has its own deadline and leaves room for the phases after it; the
# summary is rewritten after each phase (and on exit), so a call cut short still
# brings back what ran.
sum_lines=()
add_sum() { sum_lines+=("$(printf '%s\t%s\t%s\t%s' "$1" "$2" "$3" "$4")"); write_summary; }
env_line=""
stop_reason=""
no_device=0
write_summary() {
  {
    echo "# shardtrain on-device run $(date -u +%Y-%m-%dT%H:%M:%SZ): commit $(manifest git_commit)"
    echo "# env: ${env_line:-not read yet}"
    echo "# plan: budget $budget s; took $((SECONDS - t_start)) s so far${only:+; --only $only}; measurements $( ((measure)) && echo on || echo off); sanitizer $( ((sanitize)) && echo 'if >= 150 s remain' || echo off)"
    echo "# setup problems: ${#problems[@]}${problems[*]:+: ${problems[*]}}"
    [[ -n $stop_reason ]] && echo "# STOPPED EARLY: $stop_reason"
    (( no_device )) && echo "# NO CUDA DEVICE: the tests ran only to their no-device messages (each binary loads its libraries); the GPU measurements were not run"
    echo "# name<TAB>phase<TAB>result<TAB>seconds"
    printf '%s\n' "${sum_lines[@]}"
  } > "$summary.tmp" && mv "$summary.tmp" "$summary"
}
trap 'write_summary' EXIT
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
left() { echo $((deadline - SECONDS)); }
# The deadline of a phase that may take CAP seconds and must leave RESERVE for the later ones (seconds since start).
phase_end() { local e=$((SECONDS + $1)) r=$((deadline - $2)); (( e < r )) && echo "$e" || echo "$r"; }

# 6a. environment line, then a smoke of a few seconds: NCCL's bootstrap and one kernel test.
gpu_line=$(timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -n 1 || true)
pipv=$(timeout 60 python3 -m pip show nvidia-cuda-runtime nvidia-cublas nvidia-cudnn-cu13 nvidia-nccl-cu13 torch 2>/dev/null |
  awk '/^Name:/ { n = $2 } /^Version:/ { printf "%s%s %s", sep, n, $2; sep = ", " }' || true)
libv=""
for so in $(printf '%s\n' "${!cuda_found[@]}" | sort); do libv+="${libv:+, }$(basename "$(readlink -f "${cuda_found[$so]}/$so")")"; done
drv_cuda=$(timeout 20 nvidia-smi 2>/dev/null | grep -o 'CUDA Version: [0-9.]*' | head -n 1 | awk '{print $3}' || true)
env_line="GPU ${gpu_line:-none (nvidia-smi: none)}; driver's CUDA ${drv_cuda:-none}; built with $(manifest nvcc | grep -o 'release [0-9.]*'), cuDNN $(manifest cudnn | cut -d' ' -f1), NCCL $(manifest nccl | cut -d' ' -f1); libraries used: ${libv:-none}; wheels: ${pipv:-none}"
say "env: $env_line"
smoke_cmds=("trainer_loads|$ompi_bin/mpiexec -n 1 $build/trainer --version"
            "nccl_probe|$ompi_bin/mpiexec -n 1 $build/tests/cuda_build/nccl_probe"
            "kernel_test|$build/tests/gpu/gpu_pointwise_kernels_test --gtest_filter=PointwiseKernels/0.ReluMatchesHostBitwise")
smoke_nodev=0 smoke_lib="" smoke_launch=""
if (( !setup_only )); then
  for sc in "${smoke_cmds[@]}"; do
    n=${sc%%|*} c=${sc#*|}
    t0=$SECONDS rc=0
    # shellcheck disable=SC2086
    timeout -k 3 20 $c > "$prefix/work/smoke.txt" 2>&1 || rc=$?
    r=$(verdict "$rc" "$prefix/work/smoke.txt")
    { echo "smoke $n: $c -> $r"; sed 's/^/    /' "$prefix/work/smoke.txt" | tail -n 15; } >> "$setup_log"
    say "smoke $n: $r ($((SECONDS - t0)) s)"
    add_sum "smoke:$n" smoke "$r" "$((SECONDS - t0))"
    [[ $r == "FAIL(no CUDA device)" ]] && smoke_nodev=$((smoke_nodev + 1))
    [[ $r == "FAIL(library missing: "* && -z $smoke_lib ]] && smoke_lib=${r#FAIL(library missing: } && smoke_lib=${smoke_lib%)}
    # The trainer's --version needs no device: any other failure is the MPI launch or the runtime.
    [[ $n == trainer_loads && $r != PASS ]] &&
      smoke_launch="$r: $(grep -m 2 -iE 'error|unable|fail|not found' "$prefix/work/smoke.txt" | cut -c1-300 | tr '\n' ' ')"
  done
  if [[ -n $smoke_lib ]]; then
    stop_reason="the carried runtime does not load ($smoke_lib missing; environment.txt lists each binary's libraries): no test or measurement run"
    problem "$stop_reason"
  elif [[ -n $smoke_launch ]]; then
    stop_reason="mpiexec -n 1 trainer --version failed ($smoke_launch; setup.log has its output): no test or measurement run"
    problem "$stop_reason"
  elif (( smoke_nodev == 2 )); then  # nccl_probe and the kernel test (the trainer's --version needs no device)
    no_device=1
    say "no CUDA device: the tests run only to their no-device messages; the GPU measurements are skipped"
  fi
fi

ctest_sel=(-L gpu -LE gpu2)
[[ -n "$only" ]] && ctest_sel+=(-R "$only")
mapfile -t selected < <(cd "$build" && ctest -N "${ctest_sel[@]}" 2>/dev/null | sed -n 's/^ *Test *#[0-9]*: //p')
mapfile -t two_gpu < <(cd "$build" && ctest -N -L gpu2 ${only:+-R "$only"} 2>/dev/null | sed -n 's/^ *Test *#[0-9]*: //p')
say "selected ${#selected[@]} one-GPU tests (ctest ${ctest_sel[*]}): ${selected[*]:-none}"
(( ${#selected[@]} )) || problem "no test selected"
# What the phases after the tests need (s): 124M bf16 speed 210 (ours, unfused, flash, eager, compile, cublas,
# candidate, gelu, their profiles; cublas, candidate and gelu run after PyTorch's rows, so a tight budget reports
# them NOT RUN first), correctness 75, Hugging Face checks 80 (GPT-2; DistilBERT, BERT, BertTokenizer).
# Before them, the kernel bandwidth microbenchmark (gpu_kernel_bandwidth, bf16): 45.
cap_bw=45 cap_speed=210 cap_correct=75 cap_hf=80
# --measure: its one call gets what the tests leave, at least SHARDTRAIN_GPU_MEASURE_S (default 120).
[[ -n $measure_args ]] && { cap_bw=0; cap_speed=${SHARDTRAIN_GPU_MEASURE_S:-120}; cap_correct=0; cap_hf=0; }
(( measure && !no_device )) || { cap_bw=0; cap_speed=0; cap_correct=0; }
(( measure )) || cap_hf=0
mwork=$prefix/work/measure
mrun() {  # NAME PHASE-END measure.sh arguments...: one call of the measurements script
  local name=$1 end=$2; shift 2
  local secs=$((end - SECONDS)) t0=$SECONDS rc=0
  if (( secs < 20 )); then add_sum "$name" measure "NOT RUN(time budget)" 0; return; fi
  say "measure $name: $* ($secs s)"
  local log=$prefix/work/measure-call.log
  echo "===== $name: measure.sh $* (deadline in $secs s)" > "$log"
  (cd "$root" && MPIEXEC=$ompi_bin/mpiexec PYTHON=${PYTHON:-python3} timeout -k 10 "$((secs + 5))" \
    bash "$root/tests/bench/gpu/measure.sh" "$build" "$run" --work "$mwork" --deadline "$(( $(date +%s) + secs ))" "$@") \
    >> "$log" 2>&1 || rc=$?
  cat "$log" >> "$run/measure.log"
  local r; r=$(verdict "$rc" "$log")  # this call's output only
  (( rc == 3 )) && r="PARTIAL(time budget)"
  add_sum "$name" measure "$r" "$((SECONDS - t0))"
}

if (( setup_only )); then
  say "--setup-only: no test run"
elif [[ -n $stop_reason ]]; then
  for t in "${selected[@]}"; do add_sum "$t" plain "NOT RUN(runtime does not load)" 0; done
else
  for t in "${two_gpu[@]}"; do add_sum "$t" - "NOT RUN(needs 2 GPUs: label gpu2)" 0; done
  # 6b. every one-GPU test, 3 at a time, each with its own timeout: the TIMEOUT
  # properties of the restored CTest files are lowered to it (ctest --timeout
  # alone leaves tests that have one, e.g. the MPI tests' 300 s, untouched).
  # The tests get at least SHARDTRAIN_GPU_TESTS_MIN_S (default 150 s; every one-GPU
  # test at -j 4 took about 95 s on an H200 on 2026-11-29) where the budget allows: a
  # short budget shortens the measurements, not the tests (--budget 460 once left the
  # tests 60 s, and the trainer-level tests were cut at 2-7 s).
  reserve=$((cap_bw + cap_speed + cap_correct + cap_hf + 10))
  tests_min=${SHARDTRAIN_GPU_TESTS_MIN_S:-150}
  if (( $(left) - reserve < tests_min )); then
    reserve=$(( $(left) - tests_min > 0 ? $(left) - tests_min : 0 ))
  fi
  tests_end=$(phase_end 260 "$reserve")
  plain_left=$((tests_end - SECONDS))
  if (( plain_left < 20 )); then
    for t in "${selected[@]}"; do add_sum "$t" plain "NOT RUN(time budget)" 0; done
  else
    per=$(( plain_left < 150 ? plain_left : 150 ))
    (( no_device )) && per=30
    while IFS= read -r -d '' f; do
      sed -i -E "s/ TIMEOUT \"[0-9.]+\"/ TIMEOUT \"$per\"/g" "$f"
    done < <(find "$build/tests" -name CTestTestfile.cmake -print0)
    stop=$(date -d "@$(( $(date +%s) + plain_left - 5 ))" +%H:%M:%S)
    jobs=${SHARDTRAIN_GPU_TEST_JOBS:-3}
    say "ctest ${ctest_sel[*]} -j $jobs (per-test timeout $per s, stop at $stop, $plain_left s left)"
    rc=0
    # The newest device tests first (issue 45: our tiled attention, cuDNN's deterministic
    # backward, the trainer's GPT with each attention), then the rest: a call cut short
    # has run these. CTest's test numbers are global, so both runs parse as one log.
    first_re=${SHARDTRAIN_GPU_FIRST_TESTS:-'^gpu_(lt_linear|flash_attention|cudnn_sdpa|device_training_np1)$'}
    : > "$run/ctest.log"
    if [[ -z "$only" && -n "$first_re" ]]; then
      say "ctest first: -R '$first_re'"
      (cd "$build" && timeout -k 10 "$plain_left" ctest "${ctest_sel[@]}" -R "$first_re" -V -j "$jobs" --timeout "$per" \
        --stop-time "$stop") >> "$run/ctest.log" 2>&1 || rc=$?
      rest_left=$((tests_end - SECONDS))
      if (( rest_left >= 10 )); then
        (cd "$build" && timeout -k 10 "$rest_left" ctest "${ctest_sel[@]}" -E "$first_re" -V -j "$jobs" --timeout "$per" \
          --stop-time "$stop") >> "$run/ctest.log" 2>&1 || rc=$?
      fi
    else
      (cd "$build" && timeout -k 10 "$plain_left" ctest "${ctest_sel[@]}" -V -j "$jobs" --timeout "$per" --stop-time "$stop" \
        --no-tests=error) >> "$run/ctest.log" 2>&1 || rc=$?
    fi
    declare -A tnum=()
    while IFS=$'\t' read -r num name secs; do
      tnum[$name]=$num
      grep "^$num: " "$run/ctest.log" | sed "s/^$num: //" > "$prefix/work/out-$num.txt" || true
      st=$(grep -E "Test +#$num: " "$run/ctest.log" | tail -n 1)
      if [[ "$st" == *" Passed "* ]]; then trc=0
      elif [[ "$st" == *Timeout* ]]; then trc=124
      else trc=1; fi
      sum_lines+=("$(printf '%s\t%s\t%s\t%s' "$name" plain "$(verdict "$trc" "$prefix/work/out-$num.txt")" "$secs")")
    done < <(sed -nE 's/^ *[0-9]+\/[0-9]+ Test +#([0-9]+): ([^ ]+) .* ([0-9.]+) sec.*$/\1\t\2\t\3/p' "$run/ctest.log")
    for t in "${selected[@]}"; do
      [[ -n "${tnum[$t]:-}" ]] || sum_lines+=("$(printf '%s\t%s\t%s\t%s' "$t" plain "NOT RUN(ctest rc $rc; see ctest.log)" 0)")
    done
    write_summary
  fi

  # 6c. measurements (tests/bench/gpu/measure.sh), most important first.
  if (( !measure )); then
    say "--no-measure: no measurement"
  elif (( no_device )); then
    add_sum measure:kernel-bandwidth measure "NOT RUN(no CUDA device)" 0
    add_sum measure:speed-124M-bf16 measure "NOT RUN(no CUDA device)" 0
    add_sum measure:correctness measure "NOT RUN(no CUDA device)" 0
    mrun measure:hf "$(phase_end 90 0)" --parts hf
  elif [[ -n $measure_args ]]; then
    read -ra margs_user <<< "$measure_args"
    mrun measure:custom "$(phase_end $(( $(left) - 10 )) 10)" "${margs_user[@]}"
  else
    # Each memory-bound kernel of the step (default and candidate) against the device's
    # copy rate and peak bandwidth: its table goes into measure.md.
    bw_secs=$(( $(phase_end "$cap_bw" $((cap_speed + cap_correct + cap_hf))) - SECONDS ))
    if (( bw_secs < 15 )); then
      add_sum measure:kernel-bandwidth measure "NOT RUN(time budget)" 0
    else
      t0=$SECONDS rc=0
      say "measure kernel-bandwidth: gpu_kernel_bandwidth --type bf16 ($bw_secs s)"
      timeout -k 5 "$bw_secs" "$build/tests/gpu/gpu_kernel_bandwidth" --type bf16 --out "$prefix/work/bandwidth.md" \
        > "$prefix/work/bandwidth.log" 2>&1 || rc=$?
      { echo; cat "$prefix/work/bandwidth.md" 2>/dev/null || echo "(gpu_kernel_bandwidth wrote no table: rc $rc)"; } >> "$run/measure.md"
      { echo "===== kernel bandwidth (rc $rc)"; cat "$prefix/work/bandwidth.log"; } >> "$run/measure.log"
      add_sum measure:kernel-bandwidth measure "$(verdict "$rc" "$prefix/work/bandwidth.log")" "$((SECONDS - t0))"
    fi
    mrun measure:speed-124M-bf16 "$(phase_end "$cap_speed" $((cap_correct + cap_hf)))" --parts speed --precisions bf16 --models big --profile
    mrun measure:correctness "$(phase_end "$cap_correct" "$cap_hf")" --parts correctness
    mrun measure:hf "$(phase_end "$cap_hf" 0)" --parts hf
  fi

  # 6d. compute-sanitizer on the kernel tests (without their GPT-2-sized cases), only if at least 150 s remain.
  if (( sanitize && !no_device )); then
    cs=$(command -v compute-sanitizer || true); [[ -z "$cs" && -x /usr/local/cuda/bin/compute-sanitizer ]] && cs=/usr/local/cuda/bin/compute-sanitizer
    if (( $(left) < 150 )); then
      add_sum sanitizer sanitize "NOT RUN(time budget: $(left) s left, 150 needed)" 0
    elif [[ -z "$cs" ]]; then
      add_sum sanitizer sanitize "NOT RUN(no compute-sanitizer)" 0
    else
      scripts=$prefix/work/tests
      (cd "$build" && ctest --show-only=json-v1 -L gpu -LE 'gpu2|mpi' ${only:+-R "$only"} > "$prefix/work/tests.json")
      python3 "$helper" test-scripts "$prefix/work/tests.json" "$scripts"
      mapfile -t kernel_tests < <(cut -f1 "$scripts/tests.tsv")
      san_end=$(phase_end $(( $(left) - 40 )) 40)
      log=$run/sanitizer.log
      : > "$log"
      for tool in memcheck racecheck; do
        for t in "${kernel_tests[@]}"; do
          # racecheck leaves out the cuDNN tests: on an H100 (2026-11-28) every hazard it
          # reported in gpu_cudnn_sdpa was inside cuDNN's own generated flash-attention
          # kernels (cudnn_generated_fort_native_sdpa_sm90_flash_*_wgmma_*, whose shared
          # memory is ordered by the asynchronous proxy's barriers, which racecheck does
          # not model), and gpu_cudnn_conv ran past its 90 s; our kernels are the other tests.
          if [[ $tool == racecheck && $t == gpu_cudnn_* ]]; then
            add_sum "$t" "$tool" "NOT RUN(cuDNN's own kernels: see share/doc/gpu.md)" 0; continue
          fi
          budget_t=$((san_end - SECONDS)); (( budget_t > 90 )) && budget_t=90
          if (( budget_t < 15 )); then add_sum "$t" "$tool" "NOT RUN(time budget)" 0; continue; fi
          echo "===== $t under compute-sanitizer --tool $tool (timeout $budget_t s)" >> "$log"
          t0=$SECONDS rc=0
          GTEST_FILTER='-*Gpt2Size*:*TwoToThe31*' timeout -k 10 "$budget_t" "$scripts/$t.sh" "$cs" --tool "$tool" \
            --error-exitcode 86 --print-limit 50 > "$prefix/work/out.txt" 2>&1 || rc=$?
          tail -c 200000 "$prefix/work/out.txt" >> "$log"
          r=$(verdict "$rc" "$prefix/work/out.txt")
          echo "===== $t: $r ($((SECONDS - t0)) s)" >> "$log"
          add_sum "$t" "$tool" "$r" "$((SECONDS - t0))"
        done
      done
    fi
  fi

  # 6e. fp32 and fp16 speed of the 124M GPT in what is left.
  if (( measure && !no_device )) && [[ -z $measure_args ]]; then
    if (( $(left) >= 60 )); then
      mrun measure:speed-124M-fp32-fp16 "$(phase_end $(( $(left) - 10 )) 10)" --parts speed --precisions fp32,fp16 --models big
    else
      add_sum measure:speed-124M-fp32-fp16 measure "NOT RUN(time budget)" 0
    fi
  fi
fi

# --- 7. results: at most 8 files, each < 16 MiB ------------------------------------------------------------------
write_summary
for f in "$run"/*; do
  [[ "$f" == *.gz || "$f" == *.xz ]] && continue
  sz=$(stat -c %s "$f")
  if (( sz > 15 * 1024 * 1024 )); then  # keep the head and the tail
    { head -c $((7 * 1024 * 1024)) "$f"; printf '\n[... %s bytes cut by on-device.sh ...]\n' "$sz"; tail -c $((7 * 1024 * 1024)) "$f"; } > "$f.cut" && mv "$f.cut" "$f"
  fi
  (( sz > 4 * 1024 * 1024 )) && [[ $f != "$summary" ]] && gzip -9 "$f"
done
echo "on-device.sh: results in $run ($(ls "$run" | wc -l) files), $((SECONDS - t_start)) s of $budget:"
cat "$summary"
[[ -f $run/measure.md ]] && { echo; cat "$run/measure.md"; }
if (( ${#problems[@]} )); then exit 2; fi
if (( setup_only )); then exit 0; fi
grep -v '^#' "$summary" | awk -F'\t' '$3 ~ /^(FAIL|TIMEOUT|SANITIZER|NOT RUN\((ctest|runtime|no CUDA))/ { bad = 1 } END { exit bad }' || exit 1
exit 0
