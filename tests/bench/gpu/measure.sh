#!/usr/bin/env bash
# tests/bench/gpu/measure.sh: issue 20's GPU measurements, written to run on the
# GPU machine after share/gpu/on-device.sh has set up the carried build (it calls
# this script); also runs here on the CPU (--cpu-smoke) to check the script itself.
#
#   measure.sh BUILD_DIR OUT_DIR [--cpu-smoke] [--steps N] [--only fp32|bf16|fp16]
#   measure.sh        (as share/gpu/on-device.sh's hook: SHARDTRAIN_BUILD_DIR, and the
#                      report at SHARDTRAIN_MEASURE_OUT, its logs beside it)
#
# 1. Speed and memory, one GPU, one rank: the quickstart GPT and a GPT-2-124M-sized
#    GPT (inputs/gpt2_124m.toml: L 12, d 768, H 12, T 1024, batch 16, synthetic
#    uniform tokens, vocabulary 50,304) in fp32, bf16 and fp16, ours against
#    PyTorch (share/reference/gpt_torch.py: eager and torch.compile, fused SDPA
#    attention, autocast over fp32 weights as PyTorch users train), interleaved
#    per precision: ours, eager, compile. Per run: median ms/step over the steps
#    after the first 5, tokens/s, MFU against the device's dense peak for that
#    precision, and peak device memory from nvidia-smi (polled every 100 ms: an
#    independent high-water of the whole process, CUDA context included) beside
#    our tracked allocator's peak and our plan.
# 2. Correctness: the fp32 quickstart curve on the GPU against the host trainer's
#    over 100 steps (relative 1e-4 per step), and a checkpoint written on the GPU
#    resumed on the host and the reverse (losses after the resume within 1e-4 of
#    an uninterrupted host run).
# Results: OUT_DIR/measure.md (the table, the commands, the device line) and
# OUT_DIR/measure-logs.tar.xz. Exit 0 when every run completed and the
# correctness checks passed; 1 otherwise (the table is written either way).
# Environment: MPIEXEC (default mpirun), PYTHON (default python3), MOBYDICK (the
# quickstart's data set; default BUILD_DIR/data/mobydick.h5, then the bundle's
# gpu-bundle/data/mobydick.h5, else a synthetic 83-token set is made and the
# table says so).
set -uo pipefail
usage() { sed -n '2,/^set -uo/p' "$0" | sed 's/^# \{0,1\}//; /^set -uo/d' >&2; exit 2; }
report=""
if [[ $# -eq 0 && -n ${SHARDTRAIN_BUILD_DIR:-} && -n ${SHARDTRAIN_MEASURE_OUT:-} ]]; then
  set -- "$SHARDTRAIN_BUILD_DIR" "$(dirname "$SHARDTRAIN_MEASURE_OUT")"
  report=$SHARDTRAIN_MEASURE_OUT
fi
[[ $# -ge 2 ]] || usage
build=$(cd "$1" && pwd) || { echo "measure.sh: no build directory $1" >&2; exit 2; }
out=$2; shift 2
smoke=0 steps=30 only=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --cpu-smoke) smoke=1 ;;
    --steps) steps=$2; shift ;;
    --only) only=$2; shift ;;
    *) echo "measure.sh: unknown argument $1" >&2; usage ;;
  esac
  shift
done
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
# shellcheck source=../../support/process_memory.sh
source "$root/tests/support/process_memory.sh"  # check_process_memory
mkdir -p "$out" || exit 2
out=$(cd "$out" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/shardtrain-measure.XXXXXX")
trainer=$build/trainer
[[ -x $trainer ]] || { echo "measure.sh: $trainer is not an executable" >&2; exit 2; }
mpiexec=${MPIEXEC:-mpirun}
python=${PYTHON:-python3}
[[ -n $report ]] || report=$out/measure.md
failures=0
note() { echo "$*" | tee -a "$report"; }
fail() { note "FAIL: $*"; failures=$((failures + 1)); }

device=cuda torch_device=cuda
precisions=(fp32 bf16 fp16)
[[ -n $only ]] && precisions=("$only")
big=(n_layer=12 n_head=12 d_model=768 seq_len=1024 batch=16)
if [[ $smoke == 1 ]]; then  # the script's own check on a CPU: small shapes, host trainer, torch on CPU
  device=cpu torch_device=cpu
  big=(n_layer=2 n_head=4 d_model=64 seq_len=64 batch=4)
  precisions=(fp32)
  [[ $steps == 30 ]] && steps=8
fi
val() { local k=$1; shift; for kv in "$@"; do [[ ${kv%%=*} == "$k" ]] && echo "${kv#*=}"; done; }

# --- the device and its dense peak (TFLOP/s) per precision ---------------------
gpu="none (--cpu-smoke)"
peak_fp32=0 peak_16=0
if [[ $smoke == 0 ]]; then
  gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
  [[ -n $gpu ]] || { echo "measure.sh: nvidia-smi finds no GPU" >&2; exit 1; }
  case $gpu in  # NVIDIA's datasheets: dense (no sparsity) FP32 (no TF32), and BF16/FP16 tensor cores
    *H100*PCIe*) peak_fp32=51 peak_16=756 ;;
    *H100*|*H200*) peak_fp32=67 peak_16=989 ;;
    *A100*) peak_fp32=19.5 peak_16=312 ;;
    *) echo "measure.sh: no peak table entry for '$gpu'; MFU left empty" >&2 ;;
  esac
fi
{
  echo "# GPU measurements ($(date -u '+%Y-%m-%d %H:%M UTC'))"
  echo
  echo "- device: $gpu"
  echo "- commit: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown); trainer: $trainer"
  echo "- command: tests/bench/gpu/measure.sh $build $out$([[ $smoke == 1 ]] && echo ' --cpu-smoke') --steps $steps"
  echo "- torch: $("$python" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())' 2>&1 | tail -1)"
  echo "- peaks used for MFU (dense, TFLOP/s): fp32 $peak_fp32, bf16/fp16 $peak_16"
  echo
} > "$report"

# --- data ---------------------------------------------------------------------
synthetic() {  # FILE VOCAB TOKENS: uniform random tokens in the shardtrain-tokens format
  "$python" - "$@" <<'EOF'
import sys, h5py, numpy as np
path, vocab, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = np.random.default_rng(1234)
tokens = rng.integers(0, vocab, size=n, dtype=np.int64).astype(np.uint16 if vocab <= 65536 else np.int32)
nval = max(1, n // 64)
s = h5py.string_dtype("utf-8")
with h5py.File(path, "w") as f:
    f.attrs.create("format", "shardtrain-tokens", dtype=s)
    f.attrs["format_version"] = np.int64(1)
    f.attrs.create("tokenizer", "byte" if vocab == 256 else "char", dtype=s)
    f.attrs["vocab_size"] = np.int64(vocab)
    f.attrs.create("source", "synthetic uniform tokens (tests/bench/gpu/measure.sh)", dtype=s)
    f.attrs["val_fraction"] = nval / n
    f.create_dataset("train/tokens", data=tokens[:-nval])
    f.create_dataset("val/tokens", data=tokens[-nval:])
    f.create_dataset("vocab", data=[f"<{i}>" for i in range(vocab)], dtype=s)
EOF
}
big_data=$work/synthetic50304.h5
synthetic "$big_data" 50304 $((4 * 1024 * 1024)) || { echo "measure.sh: cannot write $big_data (python3 with h5py?)" >&2; exit 1; }
qs_data=${MOBYDICK:-$build/data/mobydick.h5}
[[ -f $qs_data || -n ${MOBYDICK:-} ]] || qs_data=$root/gpu-bundle/data/mobydick.h5  # share/gpu/prepare.sh carries it
qs_what="Moby Dick (characters)"
if [[ ! -f $qs_data ]]; then
  qs_data=$work/synthetic83.h5 qs_what="synthetic uniform tokens, vocabulary 83 (Moby Dick's size; $build/data/mobydick.h5 not found)"
  synthetic "$qs_data" 83 $((1024 * 1024)) || exit 1
fi

# --- runs ------------------------------------------------------------------------
# Peak memory.used of the GPU while PID runs, polled every 100 ms, into FILE (MiB).
poll_memory() {
  local pid=$1 file=$2 peak=0 m
  while kill -0 "$pid" 2>/dev/null; do
    m=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | head -1)
    [[ $m =~ ^[0-9]+$ ]] && (( m > peak )) && peak=$m
    sleep 0.1
  done
  echo "$peak" > "$file"
}
baseline_mib=0
[[ $smoke == 0 ]] && baseline_mib=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)

# Median of the numbers on stdin after skipping the first SKIP.
median() {
  awk -v skip="$1" 'NR > skip' | sort -g |
    awk '{ v[n++] = $1 } END { if (!n) { print "nan"; exit } print (n % 2 ? v[(n - 1) / 2] : (v[n / 2 - 1] + v[n / 2]) / 2) }'
}

rows=()
# ours NAME MODEL(qs|big) PRECISION
ours() {
  local name=$1 model=$2 prec=$3 input data log=$work/$1.log
  if [[ $model == qs ]]; then
    input=$root/inputs/quickstart.toml data=$qs_data
    set -- --set train.steps=$steps --set train.log_every=1 --set train.eval_every=0 --set train.eval_windows=16
  else
    input=$root/inputs/gpt2_124m.toml data=$big_data
    set -- --set train.steps=$steps --set model.n_layer="$(val n_layer "${big[@]}")" \
      --set model.n_head="$(val n_head "${big[@]}")" --set model.d_model="$(val d_model "${big[@]}")" \
      --set model.seq_len="$(val seq_len "${big[@]}")" --set train.batch_size="$(val batch "${big[@]}")" \
      --set train.micro_batch="$(val batch "${big[@]}")"
  fi
  local cmd=("$mpiexec" -n 1 "$trainer" "$input" --set data.path="$data" --set train.run_dir="$work/run_$name"
             --set train.device="$device" --set precision.mode="$prec" --set checkpoint.every_steps=0 "$@")
  echo "\$ ${cmd[*]}" > "$log"
  "${cmd[@]}" >> "$log" 2>&1 &
  local pid=$!
  [[ $smoke == 0 ]] && poll_memory "$pid" "$work/$name.mem" &
  wait "$pid" || { fail "$name: the trainer failed (last lines below)"; tail -5 "$log" | tee -a "$report"; return; }
  wait
  # On the host the process's VmHWM is what the plan predicts (within 10%); on a
  # device the tracked plan is device memory, not the process's RSS.
  if [[ $device == cpu ]]; then
    (check_process_memory "$log") > "$work/$name.process_memory" 2>&1 ||
      fail "$name: $(tail -1 "$work/$name.process_memory")"
  fi
  local csv=$work/run_$name/metrics.csv
  # Step time: elapsed_s differences between steps without a validation pass.
  local ms; ms=$(awk -F, 'NR > 1 { if (prev != "" && $3 == "") print ($7 - prev) * 1000; prev = $7 }' "$csv" | median 5)
  local flop; flop=$("$trainer" --plan "$input" --set data.path="$data" "${@}" 2>/dev/null |
    sed -n 's/^compute per step: \([0-9.e+]*\) GFLOP.*/\1/p' | head -1)
  local tracked plan
  tracked=$(awk -F, 'NR == 2 { print $NF / 1048576 }' "$work/run_$name/memory.csv" 2>/dev/null)
  plan=$(awk -F, '$1 == "plan" { print $NF / 1048576 }' "$work/run_$name/memory.csv" 2>/dev/null)
  rows+=("$name|ours|$prec|$ms|$flop|$(cat "$work/$name.mem" 2>/dev/null || echo -)|${tracked:--}|${plan:--}|${cmd[*]}")
}
# torch NAME MODEL PRECISION MODE(eager|compile)
torch_run() {
  local name=$1 model=$2 prec=$3 mode=$4 data log=$work/$1.log
  local -a shape
  if [[ $model == qs ]]; then
    data=$qs_data shape=(--n-layer 4 --n-head 4 --d-model 128 --seq-len 64 --batch 16)
  else
    data=$big_data
    shape=(--n-layer "$(val n_layer "${big[@]}")" --n-head "$(val n_head "${big[@]}")" --d-model "$(val d_model "${big[@]}")"
           --seq-len "$(val seq_len "${big[@]}")" --batch "$(val batch "${big[@]}")")
  fi
  local cmd=("$python" "$root/share/reference/gpt_torch.py" train "$data" "${shape[@]}" --steps "$steps"
             --device "$torch_device" --precision "$prec")
  [[ $smoke == 0 ]] && cmd+=(--sdpa)  # Debian's PyTorch 1.13 (the smoke run) has no SDPA
  [[ $mode == compile ]] && cmd+=(--compile)
  echo "\$ ${cmd[*]}" > "$log"
  PYTHONUNBUFFERED=1 "${cmd[@]}" >> "$log" 2>&1 &
  local pid=$!
  [[ $smoke == 0 ]] && poll_memory "$pid" "$work/$name.mem" &
  wait "$pid" || { fail "$name: PyTorch failed (last lines below)"; tail -5 "$log" | tee -a "$report"; return; }
  wait
  local ms; ms=$(awk '$1 == "step" { print $6 }' "$log" | median 5)
  local torch_peak; torch_peak=$(awk '$1 == "peak_cuda_mib" { print $2 }' "$log")
  rows+=("$name|torch-$mode|$prec|$ms||$(cat "$work/$name.mem" 2>/dev/null || echo -)|${torch_peak:--}||${cmd[*]}")
}

start=$SECONDS
for prec in "${precisions[@]}"; do
  for model in big qs; do
    ours "ours_${model}_$prec" "$model" "$prec"
    torch_run "torch_eager_${model}_$prec" "$model" "$prec" eager
    [[ $smoke == 0 ]] && torch_run "torch_compile_${model}_$prec" "$model" "$prec" compile
  done
  echo "measure.sh: $prec done after $((SECONDS - start)) s" >&2
done

# --- the table ----------------------------------------------------------------------
tokens_per_step() { [[ $1 == *_qs_* ]] && echo $((16 * 64)) || echo $(($(val batch "${big[@]}") * $(val seq_len "${big[@]}"))); }
{
  echo "## Speed and memory (1 GPU, 1 rank; median ms/step after the first 5 of $steps steps)"
  echo
  echo "Quickstart data: $qs_what. 124M data: synthetic uniform tokens, vocabulary 50,304."
  echo "GPU memory: nvidia-smi memory.used high-water minus the $baseline_mib MiB in use before the runs."
  echo
  echo "| run | who | precision | ms/step | tokens/s | model TFLOP/s | MFU | GPU memory peak (MiB) | tracked / torch allocator peak (MiB) | plan (MiB) |"
  echo "|---|---|---|---|---|---|---|---|---|---|"
} >> "$report"
declare -A flops
for r in "${rows[@]}"; do IFS='|' read -r name who prec ms flop _ <<< "$r"; [[ -n $flop ]] && flops[${name#ours_}]=$flop; done
for r in "${rows[@]}"; do
  IFS='|' read -r name who prec ms flop mem tracked plan cmd <<< "$r"
  key=${name#ours_}; key=${key#torch_eager_}; key=${key#torch_compile_}
  flop=${flops[$key]:-}
  peak=$peak_16; [[ $prec == fp32 ]] && peak=$peak_fp32
  awk -v n="$name" -v w="$who" -v p="$prec" -v ms="$ms" -v tok="$(tokens_per_step "$name")" -v gf="$flop" \
      -v peak="$peak" -v mem="$mem" -v base="$baseline_mib" -v tr="$tracked" -v pl="$plan" 'BEGIN {
    tps = ms > 0 ? tok / (ms / 1000) : 0
    tf = (gf != "" && ms > 0) ? gf / ms : 0            # GFLOP per ms = TFLOP/s
    mfu = (tf > 0 && peak > 0) ? sprintf("%.1f%%", 100 * tf / peak) : "-"
    m = (mem ~ /^[0-9]+$/ && mem > 0) ? mem - base : "-"
    tft = (tf > 0) ? sprintf("%.1f", tf) : "-"
    if (pl == "") pl = "-"
    printf "| %s | %s | %s | %.2f | %.0f | %s | %s | %s | %s | %s |\n", n, w, p, ms, tps, tft, mfu, m, tr, pl
  }' >> "$report"
done
echo >> "$report"
echo "Model FLOPs per step are the trainer's own count (\`trainer --plan\`, the same model for PyTorch's rows)." >> "$report"

# --- correctness ---------------------------------------------------------------------
if [[ $smoke == 0 ]]; then
  note ""
  note "## Correctness"
  qs() {  # NAME DEVICE extra
    local name=$1 dev=$2; shift 2
    "$mpiexec" -n 1 "$trainer" "$root/inputs/quickstart.toml" --set data.path="$qs_data" --set train.run_dir="$work/$name" \
      --set train.device="$dev" --set train.log_every=1 --set train.eval_every=0 --set train.eval_windows=16 "$@" \
      > "$work/$name.log" 2>&1 || fail "$name failed"
  }
  losses() { awk -F, 'NR > 1 && $2 != "" { print $1, $2 }' "$1/metrics.csv"; }
  compare() {  # A B FROM_STEP TOL WHAT
    local r
    r=$(join <(losses "$work/$1") <(losses "$work/$2") | awk -v from="$3" '$1 > from {
        d = $2 - $3; if (d < 0) d = -d; r = d / ($3 < 0 ? -$3 : $3); if (r > w) w = r; n++ } END { printf "%d %.3g", n, w }')
    local n=${r% *} worst=${r#* }
    if [[ $n -gt 0 ]] && awk -v w="$worst" -v t="$4" 'BEGIN { exit !(w <= t) }'; then
      note "- $5: $n steps compared, worst relative loss difference $worst (bound $4): pass"
    else
      fail "$5: $n steps compared, worst relative loss difference $worst (bound $4)"
    fi
  }
  qs qs_cpu cpu --set train.steps=100
  qs qs_cuda cuda --set train.steps=100
  compare qs_cuda qs_cpu 0 1e-4 "fp32 quickstart, GPU against host, 100 steps"
  qs gpu_to_cpu cuda --set train.steps=100 --set checkpoint.every_steps=50 --stop-after-step 50
  qs gpu_to_cpu cpu --set train.steps=100 --set checkpoint.every_steps=50
  grep -q 'resumed from' "$work/gpu_to_cpu.log" || fail "the host run did not resume the GPU checkpoint"
  compare gpu_to_cpu qs_cpu 50 1e-4 "checkpoint written on the GPU at step 50, resumed on the host"
  qs cpu_to_gpu cpu --set train.steps=100 --set checkpoint.every_steps=50 --stop-after-step 50
  qs cpu_to_gpu cuda --set train.steps=100 --set checkpoint.every_steps=50
  grep -q 'resumed from' "$work/cpu_to_gpu.log" || fail "the GPU run did not resume the host checkpoint"
  compare cpu_to_gpu qs_cpu 50 1e-4 "checkpoint written on the host at step 50, resumed on the GPU"
fi

{
  echo
  echo "## Commands"
  for r in "${rows[@]}"; do IFS='|' read -r name _ _ _ _ _ _ _ cmd <<< "$r"; echo "- $name: \`$cmd\`"; done
} >> "$report"
tar -C "$work" -cJf "$out/measure-logs.tar.xz" --exclude='*.h5' --exclude='checkpoints' . 2>/dev/null
rm -rf "$work"
echo "measure.sh: $failures failure(s) in $((SECONDS - start)) s; report $report" >&2
cat "$report"
[[ $failures -eq 0 ]]
