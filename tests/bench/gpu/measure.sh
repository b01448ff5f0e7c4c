#!/usr/bin/env bash
# tests/bench/gpu/measure.sh: the GPU measurements of issue 32, run on the GPU
# machine by share/gpu/on-device.sh (one part at a time, each under the time the
# plan gives it); also runs here on the CPU (--cpu-smoke) to check the script.
#
#   measure.sh BUILD_DIR OUT_DIR [--parts LIST] [--precisions LIST] [--models LIST]
#              [--steps N] [--deadline EPOCH_S] [--work DIR] [--cpu-smoke]
#
#   --parts       comma-separated, in this order (default speed,correctness,hf):
#     speed       one GPU, one rank, per precision and model: ours, PyTorch eager,
#                 PyTorch torch.compile (share/reference/gpt_torch.py: fused SDPA
#                 attention, autocast over fp32 weights, fused AdamW, as PyTorch users
#                 train), interleaved. Per run: median ms/step over the steps after
#                 the first 5, tokens/s, MFU against the device's dense peak for that
#                 precision, the GPU's memory.used high-water (nvidia-smi every 100
#                 ms: the whole process, CUDA context included) beside our tracked
#                 peak and our plan (PyTorch: its allocator's peak); under the table,
#                 each of our runs' step alone (metrics.csv step_ms, median) and the
#                 rest of its ms/step, each row's own work (weights CRC, the row).
#                 For the 124M bf16 model a verdict line: ours against eager (goal:
#                 at least its tokens/s) and our ratio to torch.compile.
#     correctness the fp32 quickstart on the GPU against the host trainer over 100
#                 steps (relative 1e-4 per step); a checkpoint written on the GPU at
#                 step 50 resumed on the host, and the reverse (losses after the
#                 resume within 1e-4 of the uninterrupted host run).
#     hf          Hugging Face's GPT2LMHeadModel on our export: the quickstart
#                 checkpoint at step 100 (the GPU run of the correctness part when
#                 it is there, else a host run made here) exported with
#                 `trainer-ckpt export --format safetensors --names gpt2` (which
#                 writes config.json beside it), loaded by share/gpu/hf_check.py;
#                 its loss over the whole validation split against our trainer's
#                 final validation loss (relative 1e-4). transformers when it
#                 imports, else hf_check.py's plain-PyTorch stand-in (the report
#                 says which). Then the BERT family (issue 48): a DistilBERT- and a
#                 BERT-shaped encoder_classifier (2 layers, d 32, 40 steps of
#                 inputs/tiny_encoder.toml, on the GPU when there is one) trained on
#                 make_text_fixture.sh's labelled texts imported with WordPiece
#                 (BERT_VOCAB, else BUILD_DIR/data/bert-vocab/vocab.txt, else the
#                 bundle's data/bert-vocab.txt, else a toy vocab.txt made here),
#                 exported with --names distilbert|bert; share/gpu/hf_bert_check.py:
#                 transformers' DistilBertForSequenceClassification /
#                 BertForSequenceClassification on each export (validation loss
#                 against the trainer's, logits against bert_torch.py's, 1e-4), and
#                 BertTokenizer's ids of a test text against `trainer-data text
#                 --tokenizer wordpiece` (exact). Without transformers: the loss by
#                 the stand-in (bert_torch.py), the logits and the tokenizer NOT RUN.
#   --precisions  for speed: fp32,bf16,fp16 (default bf16,fp32,fp16)
#   --models      for speed: big (GPT-2-124M-sized: L 12, d 768, H 12, T 1024, batch
#                 16, vocabulary 50,304, synthetic uniform tokens) and/or qs (the
#                 quickstart GPT on Moby Dick); default big,qs
#   --who LIST    for speed: which of ours,unfused,flash,eager,compile,cublas,candidate,gelu
#                 run (default all eight; unfused: ours with model.attention = "unfused", the default
#                 before 2026-11-29, 16-bit precisions on a GPU only (in fp32 "auto"
#                 is "unfused" already); flash: ours with
#                 model.attention = "flash", our tiled attention, every precision on a
#                 GPU only); cublas: ours with model.gemm = "cublas" (the Linear layers
#                 through cublasGemmEx with separate bias passes, the default before
#                 2026-11-30), every precision, on a GPU only, run after eager and
#                 compile so that a short budget cuts it first); gelu: ours with
#                 model.gelu = "epilogue" (the MLP's GELU in cuBLASLt's GELU_AUX_BIAS /
#                 DGELU epilogues, kernels/cuda/lt_linear.cuh; not yet the default),
#                 every precision, on a GPU only, run last). ours is today's
#                 default, model.attention = "auto" (cuDNN's fused attention in fp16
#                 and bf16 on a GPU) and model.gemm = "auto" (cuBLASLt with the bias
#                 epilogues on a GPU, kernels/cuda/lt_linear.cuh): the A/B's baseline;
#                 candidate: ours with train.device_kernels = "candidate" (the CUDA
#                 kernels not yet run on a device, gpu.md "Candidate kernels"), on a
#                 GPU only, after cublas
#   --profile     for speed: after each model and precision, one more run of ours
#                 with the trainer's --profile (every op timed with the device
#                 synchronised: per-op ms/step, shares, by class), its table appended
#                 to measure.md; the synchronisation makes that run's step slower than
#                 the timed one, so it is not a speed row
#   --steps N     training steps per speed run (default 20)
#   --deadline S  the epoch second by which every run must have ended: each run's
#                 timeout is what is left (less 5 s, at most its own cap); a run that
#                 does not fit is reported NOT RUN (time budget)
#   --work DIR    scratch shared by calls (runs, checkpoints, data); default a new
#                 temporary folder, removed at the end
#   --cpu-smoke   the script's own check on a CPU: small shapes, the host trainer,
#                 PyTorch on the CPU, parts speed (fp32) and hf
# Results: OUT_DIR/measure.md (appended to by each call: the device line, tables,
# verdicts, commands) and OUT_DIR/measure-logs.tar.xz (every run's log so far).
# Rows and verdicts are written as each run ends, so a killed call leaves them.
# Exit 0 every run completed and every check passed; 1 a run or check failed; 3
# nothing failed but a run did not fit in the time.
# Environment: MPIEXEC (default mpirun), PYTHON (default python3), MOBYDICK (the
# quickstart's data set; default BUILD_DIR/data/mobydick.h5, then the bundle's
# gpu-bundle/data/mobydick.h5, else a synthetic 83-token set and the report says so).
set -uo pipefail
usage() { sed -n '2,/^set -uo/p' "$0" | sed 's/^# \{0,1\}//; /^set -uo/d' >&2; exit 2; }
[[ $# -ge 2 ]] || usage
build=$(cd "$1" && pwd) || { echo "measure.sh: no build directory $1" >&2; exit 2; }
out=$2; shift 2
smoke=0 steps=20 parts="" precisions="" models="big,qs" deadline=0 work="" who="ours,unfused,flash,eager,compile,cublas,candidate,gelu" profile=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --cpu-smoke) smoke=1 ;;
    --steps) steps=$2; shift ;;
    --parts) parts=$2; shift ;;
    --precisions) precisions=$2; shift ;;
    --models) models=$2; shift ;;
    --who) who=$2; shift ;;
    --profile) profile=1 ;;
    --deadline) deadline=$2; shift ;;
    --work) work=$2; shift ;;
    *) echo "measure.sh: unknown argument $1" >&2; usage ;;
  esac
  shift
done
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
# shellcheck source=../../support/process_memory.sh
source "$root/tests/support/process_memory.sh"  # check_process_memory
mkdir -p "$out" || exit 2
out=$(cd "$out" && pwd)
own_work=0
if [[ -z $work ]]; then work=$(mktemp -d "${TMPDIR:-/tmp}/shardtrain-measure.XXXXXX"); own_work=1; fi
mkdir -p "$work" && work=$(cd "$work" && pwd)
trainer=$build/trainer ckpt_tool=$build/trainer-ckpt
[[ -x $trainer ]] || { echo "measure.sh: $trainer is not an executable" >&2; exit 2; }
mpiexec=${MPIEXEC:-mpirun}
python=${PYTHON:-python3}
report=$out/measure.md
failures=0 notrun=0
note() { echo "$*" | tee -a "$report"; }
fail() { note "FAIL: $*"; failures=$((failures + 1)); }
(( deadline > 0 )) || deadline=$(( $(date +%s) + 100000 ))
# Seconds a run may take: at most CAP, and what is left before the deadline less 5 s.
budget() { local left=$(( deadline - $(date +%s) - 5 )); (( left < $1 )) && echo "$left" || echo "$1"; }

device=cuda torch_device=cuda
[[ -n $parts ]] || parts=speed,correctness,hf
[[ -n $precisions ]] || precisions=bf16,fp32,fp16
big=(n_layer=12 n_head=12 d_model=768 seq_len=1024 batch=16)
if [[ $smoke == 1 ]]; then
  device=cpu torch_device=cpu
  big=(n_layer=2 n_head=4 d_model=64 seq_len=64 batch=4)
  precisions=fp32 parts=$(echo "$parts" | tr , '\n' | grep -vx correctness | paste -sd, -)
  [[ $steps == 20 ]] && steps=8
fi
val() { local k=$1; shift; for kv in "$@"; do [[ ${kv%%=*} == "$k" ]] && echo "${kv#*=}"; done; }
has() { [[ ,$1, == *,$2,* ]]; }

# --- the device and its dense peak (TFLOP/s) per precision ---------------------
gpu="none (--cpu-smoke)"
peak_fp32=0 peak_16=0
if [[ $smoke == 0 ]]; then
  gpu=$(timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
  if [[ -z $gpu ]]; then  # the hf part alone runs on the host (on-device.sh without a device)
    has "$parts" speed || has "$parts" correctness || { gpu="none (nvidia-smi finds no GPU; the hf part runs on the host)"; }
    [[ -n $gpu ]] || { echo "measure.sh: nvidia-smi finds no GPU" | tee -a "$report" >&2; exit 1; }
  fi
  case $gpu in  # NVIDIA's datasheets: dense (no sparsity) FP32 (no TF32), and BF16/FP16 tensor cores
    *H100*PCIe*) peak_fp32=51 peak_16=756 ;;
    *H100*|*H200*) peak_fp32=67 peak_16=989 ;;
    *A100*) peak_fp32=19.5 peak_16=312 ;;
    *) echo "measure.sh: no peak table entry for '$gpu'; MFU left empty" >&2 ;;
  esac
fi
if [[ ! -s $report ]]; then
  {
    echo "# GPU measurements ($(date -u '+%Y-%m-%d %H:%M UTC'))"
    echo
    echo "- device: $gpu"
    echo "- commit: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || sed -n 's/^git_commit: //p' "$root/gpu-bundle/manifest.txt" 2>/dev/null || echo unknown); trainer: $trainer"
    echo "- torch: $(timeout 60 "$python" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())' 2>&1 | tail -1)"
    echo "- peaks used for MFU (dense, TFLOP/s): fp32 $peak_fp32, bf16/fp16 $peak_16"
  } > "$report"
fi
note ""
note "- $(date -u +%H:%M:%S) measure.sh --parts $parts$(has "$parts" speed && echo " --precisions $precisions --models $models --steps $steps")$([[ $smoke == 1 ]] && echo ' --cpu-smoke') (deadline in $(( deadline - $(date +%s) )) s)"

# --- data ---------------------------------------------------------------------
synthetic() {  # FILE VOCAB TOKENS: uniform random tokens in the shardtrain-tokens format
  [[ -s $1 ]] && return 0
  "$python" - "$@" <<'EOF'
import sys, h5py, numpy as np
path, vocab, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = np.random.default_rng(1234)
tokens = rng.integers(0, vocab, size=n, dtype=np.int64).astype(np.uint16 if vocab <= 65536 else np.int32)
nval = max(1, n // 64)
s = h5py.string_dtype("utf-8")
with h5py.File(path + ".tmp", "w") as f:
    f.attrs.create("format", "shardtrain-tokens", dtype=s)
    f.attrs["format_version"] = np.int64(1)
    f.attrs.create("tokenizer", "byte" if vocab == 256 else "char", dtype=s)
    f.attrs["vocab_size"] = np.int64(vocab)
    f.attrs.create("source", "synthetic uniform tokens (tests/bench/gpu/measure.sh)", dtype=s)
    f.attrs["val_fraction"] = nval / n
    f.create_dataset("train/tokens", data=tokens[:-nval])
    f.create_dataset("val/tokens", data=tokens[-nval:])
    f.create_dataset("vocab", data=[f"<{i}>" for i in range(vocab)], dtype=s)
import os
os.replace(path + ".tmp", path)
EOF
}
big_data=$work/synthetic50304.h5
qs_data=${MOBYDICK:-$build/data/mobydick.h5}
[[ -f $qs_data || -n ${MOBYDICK:-} ]] || qs_data=$root/gpu-bundle/data/mobydick.h5  # share/gpu/prepare.sh carries it
qs_what="Moby Dick (characters)"
if [[ ! -f $qs_data ]]; then
  qs_data=$work/synthetic83.h5 qs_what="synthetic uniform tokens, vocabulary 83 (Moby Dick's size; $build/data/mobydick.h5 not found)"
  synthetic "$qs_data" 83 $((1024 * 1024)) || { fail "cannot write $qs_data (python3 with h5py?)"; exit 1; }
fi

# Peak memory.used of the GPU while PID runs, polled every 100 ms, into FILE (MiB).
poll_memory() {
  local pid=$1 file=$2 peak=0 m
  while kill -0 "$pid" 2>/dev/null; do
    m=$(timeout 5 nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | head -1)
    [[ $m =~ ^[0-9]+$ ]] && (( m > peak )) && peak=$m
    sleep 0.1
  done
  echo "$peak" > "$file"
}
# Median of the numbers on stdin after skipping the first SKIP.
median() {
  awk -v skip="$1" 'NR > skip' | sort -g |
    awk '{ v[n++] = $1 } END { if (!n) { print "nan"; exit } print (n % 2 ? v[(n - 1) / 2] : (v[n / 2 - 1] + v[n / 2]) / 2) }'
}

# --- speed ------------------------------------------------------------------------
declare -A flops ms_of alone_of
baseline_mib=0
# Runs "$@" (the rest of the command line) in the background under `timeout SECS`,
# its output in LOG, polling the GPU's memory into MEMFILE; returns its status.
timed() {
  local secs=$1 log=$2 memfile=$3; shift 3
  echo "\$ $*" > "$log"
  timeout -k 10 "$secs" "$@" >> "$log" 2>&1 &
  local pid=$! rc=0
  [[ $smoke == 0 ]] && poll_memory "$pid" "$memfile" &
  wait "$pid" || rc=$?
  wait
  return $rc
}
what() { (( $1 == 124 || $1 == 137 )) && echo "TIMEOUT ($2 s)" || echo "FAILED (rc $1)"; }
# The lines of LOG that say why: error lines (the trainer's, Python's), else its last 3.
why() {
  local last; last=$(awk '/^\$ / { n = NR } END { print n + 1 }' "$1")  # the last command's own lines
  local e; e=$(tail -n "+$last" "$1" | grep -m 3 -iE 'error|exception|refus|out of memory' | cut -c1-400)
  [[ -n $e ]] || e=$(tail -n "+$last" "$1" | tail -n 3 | cut -c1-400)
  echo "$e" | tr '\n' ' '
}
model_args() {  # MODEL -> the trainer's input file and --set list (prints one per line)
  if [[ $1 == qs ]]; then
    printf '%s\n' "$root/inputs/quickstart.toml" --set data.path="$qs_data" --set train.micro_batch=16
  else
    printf '%s\n' "$root/inputs/gpt2_124m.toml" --set data.path="$big_data" \
      --set model.n_layer="$(val n_layer "${big[@]}")" --set model.n_head="$(val n_head "${big[@]}")" \
      --set model.d_model="$(val d_model "${big[@]}")" --set model.seq_len="$(val seq_len "${big[@]}")" \
      --set train.batch_size="$(val batch "${big[@]}")" --set train.micro_batch="$(val batch "${big[@]}")"
  fi
}
tokens_per_step() { [[ $1 == qs ]] && echo $((16 * 64)) || echo $(($(val batch "${big[@]}") * $(val seq_len "${big[@]}"))); }
row() {  # NAME WHO PREC MODEL MS MEM TRACKED PLAN
  local name=$1 who=$2 prec=$3 model=$4 ms=$5 mem=$6 tracked=$7 plan=$8
  local peak=$peak_16; [[ $prec == fp32 ]] && peak=$peak_fp32
  awk -v n="$name" -v w="$who" -v p="$prec" -v ms="$ms" -v tok="$(tokens_per_step "$model")" -v gf="${flops[$model]:-}" \
      -v peak="$peak" -v mem="$mem" -v base="$baseline_mib" -v tr="$tracked" -v pl="$plan" 'BEGIN {
    ok = ms + 0 > 0
    tps = ok ? tok / (ms / 1000) : 0
    tf = (gf != "" && ok) ? gf / ms : 0            # GFLOP per ms = TFLOP/s
    mfu = (tf > 0 && peak > 0) ? sprintf("%.1f%%", 100 * tf / peak) : "-"
    m = (mem ~ /^[0-9]+$/ && mem > 0) ? mem - base : "-"
    tft = (tf > 0) ? sprintf("%.1f", tf) : "-"
    if (pl == "") pl = "-"
    if (tr == "") tr = "-"
    printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", n, w, p, ok ? sprintf("%.2f", ms) : ms,
           ok ? sprintf("%.0f", tps) : "-", tft, mfu, m, tr, pl
  }' | tee -a "$report"
}
ours() {  # MODEL PREC CAP [--unfused|--flash|--cublas|--candidate|--gelu] [--profile]
  local model=$1 prec=$2 cap=$3 name=ours_$1_$2 secs extra=() fused=() attn=""
  shift 3
  for a in "$@"; do
    case $a in
      --unfused) fused=(--set model.attention=unfused) name=${name}_unfused attn=" (unfused attention)" ;;
      --flash) fused=(--set model.attention=flash) name=${name}_flash attn=" (flash attention)" ;;
      --cublas) fused=(--set model.gemm=cublas) name=${name}_cublas attn=" (cuBLAS Linear)" ;;
      --candidate) fused=(--set train.device_kernels=candidate) name=${name}_candidate attn=" (candidate kernels)" ;;
      --gelu) fused=(--set model.gelu=epilogue) name=${name}_gelu attn=" (GELU in cuBLASLt's epilogues)" ;;
      --profile) extra=(--profile) name=${name}_profile ;;
    esac
  done
  local log=$work/$name.log
  secs=$(budget "$cap")
  if (( secs < 15 )); then row "$name" ours "$prec" "$model" "NOT RUN (time budget)" - - -; notrun=$((notrun + 1)); return; fi
  mapfile -t margs < <(model_args "$model")
  local sets=(--set train.steps="$steps" --set train.log_every=1 --set train.eval_every=0 --set train.eval_windows=1
              --set train.device="$device" --set precision.mode="$prec" --set checkpoint.every_steps=0)
  rm -rf "$work/run_$name"
  local cmd=("$mpiexec" -n 1 "$trainer" "${extra[@]}" "${margs[@]}" --set train.run_dir="$work/run_$name" "${sets[@]}"
             "${fused[@]}")
  local rc=0
  timed "$secs" "$log" "$work/$name.mem" "${cmd[@]}" || rc=$?
  if (( rc != 0 )); then
    row "$name" ours "$prec" "$model" "$(what "$rc" "$secs")" - - -
    fail "$name: $(what "$rc" "$secs"): $(why "$log")"; return
  fi
  # model.gemm: "auto" is cuBLASLt on a GPU, "cublas" is not; the banner says which ran.
  if [[ $name == *_cublas* ]] && grep -q 'Linear layers through cuBLASLt' "$log"; then
    fail "$name: model.gemm = cublas, but the banner says the Linear layers ran through cuBLASLt ($log)"; return
  fi
  if [[ $name != *_cublas* ]] && (( smoke == 0 )) && ! grep -q 'Linear layers through cuBLASLt' "$log"; then
    fail "$name: the banner does not say the Linear layers ran through cuBLASLt (model.gemm = auto on a GPU) ($log)"; return
  fi
  if [[ $name == *_candidate* ]] && ! grep -q 'candidate kernels' "$log"; then
    fail "$name: the banner does not say the candidate kernels ran ($log)"; return
  fi
  # model.gelu: the model line of the banner says where the GELU ran.
  if [[ $name == *_gelu* ]] && ! grep -q "GELU in cuBLASLt's epilogues" "$log"; then
    fail "$name: model.gelu = epilogue, but the banner's model line does not say the GELU ran in cuBLASLt's epilogues ($log)"; return
  fi
  if [[ $name != *_gelu* ]] && grep -q "GELU in cuBLASLt's epilogues" "$log"; then
    fail "$name: the banner says the GELU ran in cuBLASLt's epilogues, but model.gelu is the default (separate) ($log)"; return
  fi
  if (( ${#extra[@]} )); then  # the profile run: its table, not a speed row
    note ""
    note "Profile of ours, $model $prec$attn (\`${cmd[*]}\`):"
    note '```'
    sed -n '/^profile of /,/^  by class/p' "$log" | tee -a "$report"
    note '```'
    grep -q '^profile of ' "$log" || fail "$name: no profile table in its log"
    cmds+=("$name: \`${cmd[*]}\`")
    return
  fi
  if [[ $device == cpu ]]; then  # on the host the process's VmHWM is what the plan predicts
    (check_process_memory "$log") > "$work/$name.process_memory" 2>&1 || fail "$name: $(tail -1 "$work/$name.process_memory")"
  fi
  local csv=$work/run_$name/metrics.csv
  # Step time: elapsed_s differences between steps without a validation pass.
  local ms; ms=$(awk -F, 'NR > 1 { if (prev != "" && $3 == "") print ($7 - prev) * 1000; prev = $7 }' "$csv" | median 5)
  local tracked plan
  tracked=$(awk -F, 'NR == 2 { printf "%.0f", $NF / 1048576 }' "$work/run_$name/memory.csv" 2>/dev/null)
  plan=$(awk -F, '$1 == "plan" { printf "%.0f", $NF / 1048576 }' "$work/run_$name/memory.csv" 2>/dev/null)
  ms_of[$name]=$ms
  # The step alone (metrics.csv step_ms: no evaluation, weights CRC or metrics row),
  # over the same steps as ms/step (each at most its elapsed_s difference).
  alone_of[$name]=$(awk -F, 'NR > 2 && $3 == "" && $14 != "" { print $14 }' "$csv" | median 5)
  row "$name" ours "$prec" "$model" "$ms" "$(cat "$work/$name.mem" 2>/dev/null || echo -)" "$tracked" "$plan"
  cmds+=("$name: \`${cmd[*]}\`")
}
torch_run() {  # MODEL PREC MODE(eager|compile) CAP
  local model=$1 prec=$2 mode=$3 name=torch_$3_$1_$2 log=$work/torch_$3_$1_$2.log secs data
  secs=$(budget "$4")
  if (( secs < 15 )); then row "$name" "torch-$mode" "$prec" "$model" "NOT RUN (time budget)" - - -; notrun=$((notrun + 1)); return; fi
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
  [[ $smoke == 0 ]] && cmd+=(--sdpa --threads 8)  # Debian's PyTorch 1.13 (the smoke run) has no SDPA
  [[ $mode == compile ]] && cmd+=(--compile)
  local rc=0
  PYTHONUNBUFFERED=1 timed "$secs" "$log" "$work/$name.mem" "${cmd[@]}" || rc=$?
  if (( rc != 0 )); then
    row "$name" "torch-$mode" "$prec" "$model" "$(what "$rc" "$secs")" - - -
    fail "$name: $(what "$rc" "$secs"): $(why "$log")"; return
  fi
  local ms; ms=$(awk '$1 == "step" { print $6 }' "$log" | median 5)
  local torch_peak; torch_peak=$(awk '$1 == "peak_cuda_mib" { printf "%.0f", $2 }' "$log")
  ms_of[$name]=$ms
  row "$name" "torch-$mode" "$prec" "$model" "$ms" "$(cat "$work/$name.mem" 2>/dev/null || echo -)" "${torch_peak:--}" -
  cmds+=("$name: \`${cmd[*]}\`")
}
verdict_big_bf16() {
  local o=${ms_of[ours_big_bf16]:-} e=${ms_of[torch_eager_big_bf16]:-} c=${ms_of[torch_compile_big_bf16]:-}
  [[ -n $o ]] || { note "- 124M bf16 verdict: no measurement of ours"; return; }
  if [[ -n $e ]]; then
    local r; r=$(awk -v o="$o" -v e="$e" 'BEGIN { printf "%.3f", e / o }')
    if awk -v r="$r" 'BEGIN { exit !(r >= 1) }'; then
      note "- 124M bf16: ours/eager tokens/s = $r (goal >= 1): PASS"
    else
      fail "124M bf16: ours/eager tokens/s = $r (goal >= 1)"
    fi
  else
    note "- 124M bf16: no PyTorch eager measurement to compare with"
  fi
  [[ -n $c ]] && note "- 124M bf16: ours/torch.compile tokens/s = $(awk -v o="$o" -v c="$c" 'BEGIN { printf "%.3f", c / o }')"
  [[ -n $e ]] && note "- 124M bf16: ours/eager goal of issue 45: >= 1.4; ours >= torch.compile"
  local f=${ms_of[ours_big_bf16_unfused]:-}
  if [[ -n $f ]]; then  # model.attention = "unfused" (the default before 2026-11-29): the A/B against today's
    note "- 124M bf16, unfused attention: tokens/s against today's default (auto: fused) = $(awk -v f="$f" -v o="$o" 'BEGIN { printf "%.3f", o / f }')"
    [[ -n $e ]] && note "- 124M bf16, unfused attention: ours/eager tokens/s = $(awk -v f="$f" -v e="$e" 'BEGIN { printf "%.3f", e / f }')"
  fi
  local l=${ms_of[ours_big_bf16_flash]:-}
  if [[ -n $l ]]; then  # model.attention = "flash": the A/B against today's default, same call
    note "- 124M bf16, flash attention: tokens/s against today's default (auto: fused) = $(awk -v l="$l" -v o="$o" 'BEGIN { printf "%.3f", o / l }')"
    [[ -n $e ]] && note "- 124M bf16, flash attention: ours/eager tokens/s = $(awk -v l="$l" -v e="$e" 'BEGIN { printf "%.3f", e / l }')"
    [[ -n $c ]] && note "- 124M bf16, flash attention: ours/torch.compile tokens/s = $(awk -v l="$l" -v c="$c" 'BEGIN { printf "%.3f", c / l }')"
  fi
  local g=${ms_of[ours_big_bf16_cublas]:-}
  if [[ -n $g ]]; then  # model.gemm = "cublas" (the default before 2026-11-30): the A/B against today's (auto: cuBLASLt), same call
    note "- 124M bf16, cuBLAS Linear: tokens/s against today's default (model.gemm = auto: cuBLASLt) = $(awk -v g="$g" -v o="$o" 'BEGIN { printf "%.3f", o / g }')"
    [[ -n $e ]] && note "- 124M bf16, cuBLAS Linear: ours/eager tokens/s = $(awk -v g="$g" -v e="$e" 'BEGIN { printf "%.3f", e / g }')"
  fi
  local k=${ms_of[ours_big_bf16_candidate]:-}
  if [[ -n $k ]]; then  # train.device_kernels = "candidate": the A/B against today's default, same call
    note "- 124M bf16, candidate kernels: tokens/s against today's default (validated kernels) = $(awk -v k="$k" -v o="$o" 'BEGIN { printf "%.3f", o / k }')"
    [[ -n $e ]] && note "- 124M bf16, candidate kernels: ours/eager tokens/s = $(awk -v k="$k" -v e="$e" 'BEGIN { printf "%.3f", e / k }')"
    [[ -n $c ]] && note "- 124M bf16, candidate kernels: ours/torch.compile tokens/s = $(awk -v k="$k" -v c="$c" 'BEGIN { printf "%.3f", c / k }')"
  fi
  local u=${ms_of[ours_big_bf16_gelu]:-}
  if [[ -n $u ]]; then  # model.gelu = "epilogue" (not yet the default): the A/B against today's (separate GELU pass), same call
    note "- 124M bf16, GELU in cuBLASLt's epilogues: tokens/s against today's default (model.gelu = separate) = $(awk -v u="$u" -v o="$o" 'BEGIN { printf "%.3f", o / u }')"
    [[ -n $e ]] && note "- 124M bf16, GELU in cuBLASLt's epilogues: ours/eager tokens/s = $(awk -v u="$u" -v e="$e" 'BEGIN { printf "%.3f", e / u }')"
    [[ -n $c ]] && note "- 124M bf16, GELU in cuBLASLt's epilogues: ours/torch.compile tokens/s = $(awk -v u="$u" -v c="$c" 'BEGIN { printf "%.3f", c / u }')"
  fi
}

# Our runs of MODEL PREC: the step alone against ms/step (elapsed between rows, a
# row every step), the rest being each row's own work (the weights CRC, the row).
step_alone() {  # MODEL PREC
  local name
  for name in $(printf '%s\n' "${!alone_of[@]}" | sort); do
    [[ $name == ours_$1_$2 || $name == ours_$1_$2_* ]] || continue
    local a=${alone_of[$name]} m=${ms_of[$name]:-}
    [[ -n $m && $a != nan && $m != nan ]] || continue
    note "- $name: the step alone (metrics.csv step_ms) $a ms of the $m ms between rows; each row's own work (the weights CRC, the metrics row) $(awk -v m="$m" -v a="$a" 'BEGIN { printf "%.2f", m - a }') ms"
  done
}

# Two device runs of the same config (the timed run and its --profile run: the
# synchronisation changes timing, not arithmetic) must give bitwise the same loss and
# gradient norm at every step (issue 45: determinism on the device).
repeat_check() {  # MODEL PREC [SUFFIX]
  local sfx=${3:-}
  local a=$work/run_ours_$1_$2$sfx/metrics.csv b=$work/run_ours_$1_$2${sfx}_profile/metrics.csv
  [[ -f $a && -f $b ]] || return 0
  local n; n=$(($(wc -l < "$a") - 1))
  if cmp -s <(cut -d, -f1,2,5 "$a") <(cut -d, -f1,2,5 "$b"); then
    note "- $1 $2${sfx:+ ($sfx)}: two runs (timed, --profile) bitwise equal in loss and gradient norm over $n steps: PASS"
  else
    fail "$1 $2${sfx:+ ($sfx)}: two runs differ in loss or gradient norm ($a, $b)"
  fi
}

cmds=()
if has "$parts" speed; then
  [[ $smoke == 0 ]] && baseline_mib=$(timeout 20 nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
  if has "$models" big; then synthetic "$big_data" 50304 $((4 * 1024 * 1024)) || fail "cannot write $big_data (python3 with h5py?)"; fi
  note ""
  note "### Speed and memory (1 GPU, 1 rank; median ms/step after the first 5 of $steps steps)"
  note ""
  note "Quickstart data: $qs_what. 124M data: synthetic uniform tokens, vocabulary 50,304. GPU memory: nvidia-smi memory.used high-water minus the ${baseline_mib} MiB in use before. Model FLOPs per step: the trainer's own count (\`trainer --plan\`), the same for PyTorch's rows."
  note ""
  note "| run | who | precision | ms/step | tokens/s | model TFLOP/s | MFU | GPU memory peak (MiB) | tracked / torch allocator peak (MiB) | plan (MiB) |"
  note "|---|---|---|---|---|---|---|---|---|---|"
  IFS=, read -ra plist <<< "$precisions"
  IFS=, read -ra mlist <<< "$models"
  for model in "${mlist[@]}"; do
    mapfile -t margs < <(model_args "$model")
    flops[$model]=$(timeout 60 "$trainer" --plan "${margs[@]}" 2>/dev/null |
      sed -n 's/^compute per step: \([0-9.e+]*\) GFLOP.*/\1/p' | head -1)
  done
  for prec in "${plist[@]}"; do
    for model in "${mlist[@]}"; do
      # Caps: ours and eager start in seconds; torch.compile compiles first (tens of seconds).
      has "$who" ours && ours "$model" "$prec" 90
      # unfused: model.attention = "unfused" (the default before 2026-11-29), GPT in 16 bits on a GPU
      has "$who" unfused && [[ $prec != fp32 && $smoke == 0 ]] && ours "$model" "$prec" 90 --unfused
      # flash: model.attention = "flash" (our tiled attention), every precision, on a GPU
      has "$who" flash && [[ $smoke == 0 ]] && ours "$model" "$prec" 90 --flash
      has "$who" eager && torch_run "$model" "$prec" eager 60
      [[ $smoke == 0 ]] && has "$who" compile && torch_run "$model" "$prec" compile 150
      # cublas: model.gemm = "cublas" (the default before 2026-11-30), every precision, on a GPU
      has "$who" cublas && [[ $smoke == 0 ]] && ours "$model" "$prec" 90 --cublas
      # candidate: train.device_kernels = "candidate" (kernels not yet run on a device), on a GPU
      has "$who" candidate && [[ $smoke == 0 ]] && ours "$model" "$prec" 90 --candidate
      # gelu: model.gelu = "epilogue" (the GELU in cuBLASLt's epilogues), every precision, on a GPU, last
      has "$who" gelu && [[ $smoke == 0 ]] && ours "$model" "$prec" 90 --gelu
      [[ $model == big && $prec == bf16 && $smoke == 0 ]] && verdict_big_bf16
      step_alone "$model" "$prec"
      if (( profile )); then
        ours "$model" "$prec" 60 --profile
        has "$who" unfused && [[ $prec != fp32 && $smoke == 0 ]] && ours "$model" "$prec" 60 --unfused --profile
        has "$who" flash && [[ $smoke == 0 ]] && ours "$model" "$prec" 60 --flash --profile
        has "$who" cublas && [[ $smoke == 0 ]] && ours "$model" "$prec" 60 --cublas --profile
        has "$who" candidate && [[ $smoke == 0 ]] && ours "$model" "$prec" 60 --candidate --profile
        has "$who" gelu && [[ $smoke == 0 ]] && ours "$model" "$prec" 60 --gelu --profile
        repeat_check "$model" "$prec"
        repeat_check "$model" "$prec" _unfused
        repeat_check "$model" "$prec" _flash
        repeat_check "$model" "$prec" _cublas
        repeat_check "$model" "$prec" _candidate
        repeat_check "$model" "$prec" _gelu
      fi
    done
  done
fi

# --- correctness -----------------------------------------------------------------------
qs() {  # NAME DEVICE CAP extra...: the fp32 quickstart, 1 rank, every step logged
  local name=$1 dev=$2 secs; secs=$(budget "$3"); shift 3
  if (( secs < 10 )); then note "NOT RUN (time budget): $name"; notrun=$((notrun + 1)); return 1; fi
  local cmd=("$mpiexec" -n 1 "$trainer" "$root/inputs/quickstart.toml" --set data.path="$qs_data"
    --set train.run_dir="$work/$name" --set train.device="$dev" --set train.log_every=1 --set train.eval_every=0
    --set train.eval_windows=16 --set train.micro_batch=16 "$@")
  echo "\$ ${cmd[*]}" >> "$work/$name.log"
  timeout -k 10 "$secs" "${cmd[@]}" >> "$work/$name.log" 2>&1 ||
    { fail "$name ($dev) failed or ran out of its $secs s: $(why "$work/$name.log")"; return 1; }
}
losses() { awk -F, 'NR > 1 && $2 != "" { print $1, $2 }' "$1/metrics.csv"; }
compare() {  # A B FROM_STEP TOL WHAT
  local r
  r=$(join <(losses "$work/$1" | sort -k1,1) <(losses "$work/$2" | sort -k1,1) | sort -n | awk -v from="$3" '$1 > from {
      d = $2 - $3; if (d < 0) d = -d; r = d / ($3 < 0 ? -$3 : $3); if (r > w) w = r; n++ } END { printf "%d %.3g", n, w }')
  local n=${r% *} worst=${r#* }
  if [[ $n -gt 0 ]] && awk -v w="$worst" -v t="$4" 'BEGIN { exit !(w <= t) }'; then
    note "- $5: $n steps compared, worst relative loss difference $worst (bound $4): pass"
  else
    fail "$5: $n steps compared, worst relative loss difference $worst (bound $4)"
  fi
}
if has "$parts" correctness; then
  note ""
  note "### Correctness (fp32 quickstart, 1 rank; data: $qs_what)"
  ckpt_sets=(--set checkpoint.every_steps=50)
  for n in qs_cpu qs_cuda gpu_to_cpu cpu_to_gpu; do rm -rf "${work:?}/$n" "$work/$n.log"; done  # no resume from an earlier call
  if qs qs_cpu cpu 60 --set train.steps=100 "${ckpt_sets[@]}" && qs qs_cuda cuda 60 --set train.steps=100 "${ckpt_sets[@]}"; then
    compare qs_cuda qs_cpu 0 1e-4 "fp32 quickstart, GPU against host, 100 steps"
  fi
  if qs gpu_to_cpu cuda 40 --set train.steps=100 "${ckpt_sets[@]}" --stop-after-step 50 &&
     qs gpu_to_cpu cpu 40 --set train.steps=100 "${ckpt_sets[@]}"; then
    grep -q 'resumed from' "$work/gpu_to_cpu.log" || fail "the host run did not resume the GPU checkpoint"
    compare gpu_to_cpu qs_cpu 50 1e-4 "checkpoint written on the GPU at step 50, resumed on the host"
  fi
  if qs cpu_to_gpu cpu 40 --set train.steps=100 "${ckpt_sets[@]}" --stop-after-step 50 &&
     qs cpu_to_gpu cuda 40 --set train.steps=100 "${ckpt_sets[@]}"; then
    grep -q 'resumed from' "$work/cpu_to_gpu.log" || fail "the GPU run did not resume the host checkpoint"
    compare cpu_to_gpu qs_cpu 50 1e-4 "checkpoint written on the host at step 50, resumed on the GPU"
  fi
fi

# --- Hugging Face transformers on our export ------------------------------------------------
if has "$parts" hf; then
  note ""
  note "### Hugging Face GPT2LMHeadModel on \`trainer-ckpt export --format safetensors --names gpt2\`"
  src=qs_cuda
  if [[ ! -f $work/qs_cuda/checkpoints/latest ]]; then
    src=hf_host
    rm -rf "$work/hf_host" "$work/hf_host.log"
    note "- no GPU-trained quickstart checkpoint in $work (the correctness part did not run): a host run instead"
    qs hf_host cpu 60 --set train.steps=100 --set checkpoint.every_steps=50 || src=""
  fi
  if [[ -n $src ]]; then
    ck=$work/$src/checkpoints/$(cat "$work/$src/checkpoints/latest")
    ours_val=$(awk -F, 'NR > 1 && $1 == 100 && $3 != "" { print $3 }' "$work/$src/metrics.csv")
    rm -rf "$work/hf"; mkdir -p "$work/hf"
    if ! timeout 60 "$ckpt_tool" export "$ck" "$work/hf/model.safetensors" --format safetensors --names gpt2 > "$work/hf_export.log" 2>&1; then
      fail "trainer-ckpt export --names gpt2 of $ck: $(tail -2 "$work/hf_export.log" | tr '\n' ' ')"
    elif [[ -z $ours_val ]]; then
      fail "no validation loss at step 100 in $work/$src/metrics.csv"
    else
      secs=$(budget 120)
      rc=0
      timeout -k 5 "$secs" "$python" "$root/share/gpu/hf_check.py" "$work/hf" "$qs_data" --expect "$ours_val" \
        > "$work/hf_check.log" 2>&1 || rc=$?
      grep '^hf_check: ' "$work/hf_check.log" | sed "s|^|- ($src, step 100) |" | tee -a "$report"
      (( rc == 0 )) || fail "hf_check.py exited $rc (log: hf_check.log in measure-logs.tar.xz)$( ((rc == 124)) && echo ": ran out of its $secs s")"
      cmds+=("hf: \`$ckpt_tool export $ck $work/hf/model.safetensors --format safetensors --names gpt2\`; \`$python share/gpu/hf_check.py $work/hf $qs_data --expect $ours_val\`")
    fi
  fi

  # The BERT family (issue 48): our trainer fine-tunes a DistilBERT- and a BERT-shaped
  # classifier (on the GPU when there is one), exports them with --names; transformers'
  # own classes load the exports (loss against ours, logits against bert_torch.py), and
  # its BertTokenizer encodes a test text as trainer-data does.
  note ""
  note "### Hugging Face DistilBERT / BERT on \`trainer-ckpt export --names distilbert|bert\`, BertTokenizer against \`trainer-data\`"
  hb=$work/hf_bert
  rm -rf "$hb"; mkdir -p "$hb"
  bdev=cpu; [[ $smoke == 0 && $gpu != none* ]] && bdev=cuda
  vocab=${BERT_VOCAB:-$build/data/bert-vocab/vocab.txt}
  [[ -f $vocab || -n ${BERT_VOCAB:-} ]] || vocab=$root/gpu-bundle/data/bert-vocab.txt  # share/gpu/prepare.sh carries it
  vocab_what="bert-base-uncased's vocab.txt ($vocab)"
  if [[ ! -f $vocab ]]; then
    vocab=$hb/vocab.txt vocab_what="a toy vocab.txt made here (no bert-base-uncased vocab.txt found)"
    "$python" "$root/share/gpu/hf_bert_check.py" toy-vocab "$vocab" > /dev/null || fail "cannot write a toy vocab.txt"
  fi
  note "- vocabulary: $vocab_what; data: tests/e2e/trainer/make_text_fixture.sh's 400 labelled texts, WordPiece, 32 ids; trainer on $bdev"
  bert_ok=1 bert_models=()
  bash "$root/tests/e2e/trainer/make_text_fixture.sh" "$hb/text.csv" &&
    "$build/trainer-data" csv "$hb/text.csv" "$hb/data.h5" --tokenizer wordpiece --vocab "$vocab" --seq-len 32 \
      --val-fraction 0.25 > "$hb/data.log" 2>&1 || { fail "trainer-data csv --tokenizer wordpiece: $(why "$hb/data.log")"; bert_ok=0; }
  for layout in distilbert bert; do
    (( bert_ok )) || break
    secs=$(budget 45)
    if (( secs < 10 )); then note "NOT RUN (time budget): $layout"; notrun=$((notrun + 1)); continue; fi
    cmd=("$mpiexec" -n 1 "$trainer" "$root/inputs/tiny_encoder.toml" --set model.layout=$layout
      --set model.n_layer=2 --set model.n_head=2 --set model.d_model=32 --set model.seq_len=32 --set model.max_positions=40
      --set model.layernorm_eps=1e-12 --set model.pooling=cls --set data.path="$hb/data.h5" --set train.steps=40
      --set train.batch_size=16 --set train.micro_batch=16 --set train.eval_every=40 --set train.log_every=10
      --set train.device=$bdev --set train.run_dir="$hb/run_$layout" --set checkpoint.every_steps=40)
    echo "\$ ${cmd[*]}" > "$hb/run_$layout.log"
    if ! timeout -k 5 "$secs" "${cmd[@]}" >> "$hb/run_$layout.log" 2>&1; then
      fail "$layout: the trainer failed or ran out of its $secs s: $(why "$hb/run_$layout.log")"; continue
    fi
    bval=$(awk -F, 'NR > 1 && $1 == 40 && $3 != "" { print $3 }' "$hb/run_$layout/metrics.csv")
    bck=$hb/run_$layout/checkpoints/$(cat "$hb/run_$layout/checkpoints/latest" 2>/dev/null)
    mkdir -p "$hb/$layout"
    if [[ -z $bval ]]; then
      fail "$layout: no validation loss at step 40 in $hb/run_$layout/metrics.csv"
    elif ! timeout 60 "$ckpt_tool" export "$bck" "$hb/$layout/model.safetensors" --names "$layout" > "$hb/export_$layout.log" 2>&1; then
      fail "trainer-ckpt export --names $layout of $bck: $(tail -2 "$hb/export_$layout.log" | tr '\n' ' ')"
    else
      bert_models+=(--model "$layout" "$hb/$layout" "$hb/data.h5" "$bval")
      cmds+=("hf_bert $layout: \`${cmd[*]}\`; \`$ckpt_tool export $bck $hb/$layout/model.safetensors --names $layout\`")
    fi
  done
  bert_tokens=()
  if "$python" "$root/share/gpu/hf_bert_check.py" write-text "$hb/words.txt" && cut -d, -f2- "$hb/text.csv" >> "$hb/words.txt" &&
     "$build/trainer-data" text "$hb/words.txt" "$hb/words.h5" --tokenizer wordpiece --vocab "$vocab" > "$hb/words.log" 2>&1; then
    bert_tokens=(--tokens "$vocab" "$hb/words.txt" "$hb/words.h5")
  else
    fail "trainer-data text --tokenizer wordpiece of the test text: $(why "$hb/words.log")"
  fi
  if (( ${#bert_models[@]} + ${#bert_tokens[@]} )); then
    secs=$(budget 90)
    rc=0
    echo "\$ $python share/gpu/hf_bert_check.py ${bert_models[*]} ${bert_tokens[*]}" > "$work/hf_bert_check.log"
    timeout -k 5 "$secs" "$python" "$root/share/gpu/hf_bert_check.py" "${bert_models[@]}" "${bert_tokens[@]}" \
      >> "$work/hf_bert_check.log" 2>&1 || rc=$?
    grep '^hf_bert_check: ' "$work/hf_bert_check.log" | sed "s|^|- |" | tee -a "$report"
    (( rc == 0 )) || fail "hf_bert_check.py exited $rc (log: hf_bert_check.log in measure-logs.tar.xz)$( ((rc == 124)) && echo ": ran out of its $secs s")"
    cmds+=("hf_bert: \`$python share/gpu/hf_bert_check.py ${bert_models[*]} ${bert_tokens[*]}\`")
  fi
fi

if (( ${#cmds[@]} )); then
  note ""
  note "Commands of this call:"
  for c in "${cmds[@]}"; do note "- $c"; done
fi
tar -C "$work" -cJf "$out/measure-logs.tar.xz.tmp" --exclude='*.h5' --exclude='checkpoints' --exclude='*.safetensors' . 2>/dev/null &&
  mv "$out/measure-logs.tar.xz.tmp" "$out/measure-logs.tar.xz"
(( own_work )) && rm -rf "$work"
echo "measure.sh: $failures failure(s), $notrun run(s) not run for time; report $report" >&2
(( failures == 0 )) || exit 1
(( notrun == 0 )) || exit 3
exit 0
