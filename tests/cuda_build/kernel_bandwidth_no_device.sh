#!/usr/bin/env bash
# CTest kernel_bandwidth_no_device (label cuda-build): the kernel bandwidth
# microbenchmark (gpu_kernel_bandwidth) without a device exits 1 with its
# no-device message, and refuses a bad --type with exit 2, instead of crashing.
# Argument: the executable. CUDA_VISIBLE_DEVICES=-1 hides every device.
set -uo pipefail
bin=$1
out=$("$bin" 2>&1); rc=$?
[[ $rc -eq 1 && $out == *"gpu_kernel_bandwidth: no CUDA device"* ]] ||
  { echo "FAIL: without a device: exit $rc, output: $out" >&2; exit 1; }
out=$("$bin" --type int8 2>&1); rc=$?
[[ $rc -eq 2 && $out == *"--type must be bf16, fp16 or fp32"* ]] ||
  { echo "FAIL: --type int8: exit $rc, output: $out" >&2; exit 1; }
"$bin" --help | grep -q 'usage: gpu_kernel_bandwidth' || { echo "FAIL: --help" >&2; exit 1; }
echo "kernel_bandwidth_no_device: exit 1 with the no-device message; bad --type exit 2; --help"
