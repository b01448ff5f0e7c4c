// shardtrain/io/wordpiece.hpp
// Owns BERT's WordPiece tokenizer: reading a `vocab.txt`, BERT's basic
// tokenization, the greedy sub-word split, and the [CLS] ... [SEP] [PAD] sample
// of a classifier. No HDF5 here; io/text_import.cpp and io/labelled_text.cpp
// import text through it. The rules are those of Hugging Face's slow
// `transformers.BertTokenizer` (BasicTokenizer + WordpieceTokenizer, themselves
// Google's BERT tokenization.py plus an NFC step), in this order:
//  1. Decode: UTF-8; an invalid sequence is read as U+FFFD (ICU's
//     fromUTF8, one per maximal ill-formed subpart, as Python's
//     errors="replace"), which step 2 drops. (`trainer-data text` refuses
//     invalid UTF-8 before it gets here, as its other tokenizers do.)
//  2. Clean: drop U+0000, U+FFFD and every "control" character (general
//     category C*: Cc, Cf, Cn, Co, Cs) except tab, LF and CR; tab, LF, CR and
//     every Zs character become a space.
//  3. CJK: a space on each side of every CJK ideograph (the eight blocks of
//     BERT's _is_chinese_char: 4E00-9FFF, 3400-4DBF, 20000-2A6DF, 2A700-2B73F,
//     2B740-2B81F, 2B820-2CEAF, F900-FAFF, 2F800-2FA1F), so each is a word.
//  4. NFC of the whole text (transformers >= 4.34 does this; uncased output
//     does not depend on it).
//  5. Words: split at spaces and at U+2028 / U+2029 (what is left of Python's
//     str.split() whitespace after step 2).
//  6. Uncased (`lowercase`): each word lower-cased (full Unicode case mapping,
//     ICU's root locale, as Python's str.lower(): 'İ' -> "i̇", final sigma),
//     then NFD and every Mn (non-spacing mark) dropped: the accents. Cased:
//     neither.
//  7. Punctuation: every punctuation character is a word of its own:
//     ASCII 33-47, 58-64, 91-96, 123-126 (so $ + < = > ^ ` | ~ too) and
//     every character of Unicode general category P*.
//  8. WordPiece per word: a word of more than 100 code points is [UNK];
//     otherwise the longest vocabulary entry that prefixes it, then the longest
//     "##"-entry that prefixes the rest, and so on; a word with a rest that no
//     entry prefixes is one [UNK] (the pieces found before are dropped).
// Unicode data (categories, case mapping, NFC/NFD) are ICU's (Debian libicu72:
// Unicode 15.0); transformers uses Python's unicodedata, whose version follows
// Python's (3.11: 14.0), so characters assigned between the two may differ.
// Special-token strings in the text ("[CLS]") are text here, as in Google's
// BERT and transformers' split_special_tokens=True; transformers' default maps
// them to their ids.
// A WordPiece is immutable after construction; encoding is thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/types.hpp"

namespace shardtrain {

// The tokens of a vocab.txt: one per line, id = line number from 0; the last
// line may lack its line break. `sha256` is the file's SHA-256 (hex), which the
// data sets record.
struct WordPieceVocab {
  std::vector<std::string> tokens;
  std::string sha256;
};

// Parses the bytes of a vocab.txt named `name` (error messages: "NAME:LINE:
// what, expected ..."): every line must be valid UTF-8 and hold one token with
// no whitespace (a CR is called out: CRLF files are refused), no empty line,
// no token twice; at least [PAD], [UNK], [CLS] and [SEP]; at most 2^24 tokens.
WordPieceVocab parse_wordpiece_vocab(std::string_view bytes, const std::string& name);
// Reads and parses the file at `path` (InputError naming it when missing or
// unreadable).
WordPieceVocab read_wordpiece_vocab(const std::string& path);

class WordPiece {
 public:
  // `lowercase`: an uncased model's rules (step 6). `name` (the vocab file)
  // prefixes errors.
  WordPiece(WordPieceVocab vocab, bool lowercase);
  ~WordPiece();
  WordPiece(const WordPiece&) = delete;
  WordPiece& operator=(const WordPiece&) = delete;

  // Steps 1-7: the words of `text`, UTF-8.
  std::vector<std::string> basic_tokens(std::string_view text) const;
  // Step 8 for one word (UTF-8, as basic_tokens gives it): appends its ids.
  void word_pieces(std::string_view word, std::vector<TokenIndex>& out) const;
  // Steps 1-8: appends the ids of `text` to `out`.
  void encode(std::string_view text, std::vector<TokenIndex>& out) const;
  // A classifier's sample: [CLS] + the first out.size()-2 ids of `text` +
  // [SEP], then [PAD] to out.size() (>= 2). Returns the length ([CLS] and
  // [SEP] included); *total (if given) gets the text's whole id count.
  std::int64_t encode_sample(std::string_view text, std::span<TokenIndex> out, std::int64_t* total = nullptr) const;

  const std::vector<std::string>& vocab() const;
  const std::string& vocab_sha256() const;
  bool lowercase() const;
  TokenIndex pad_id() const;
  TokenIndex unk_id() const;
  TokenIndex cls_id() const;
  TokenIndex sep_id() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

// The text of WordPiece tokens (transformers' convert_tokens_to_string, made
// independent of where a stream is cut): each token that does not start with
// "##" is written after a space, a "##" token without its "##" and without a
// space. Lossy: case, accents and the spacing around punctuation are gone.
std::string wordpiece_text(std::span<const std::string> vocab, std::span<const TokenIndex> ids);

}  // namespace shardtrain
