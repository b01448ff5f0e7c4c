// shardtrain/io/text_tokenizer.hpp
// Owns turning raw text bytes into token ids for the text tokenizers, and the
// names of a token data set's tokenizer. No HDF5 and no file access here:
// callers pass bytes and a name for error messages.
//  - Char: the text is UTF-8; tokens are Unicode code points. vocab = the sorted
//    unique code points of the text, token id = index in vocab, vocab[i] = the
//    UTF-8 encoding of that code point. Invalid UTF-8 (bad lead or continuation
//    byte, truncated sequence, overlong form, surrogate, > U+10FFFF) and U+0000
//    are InputErrors naming the input and the byte offset.
//  - Byte: token id = byte value, vocab_size 256 whatever the text; vocab[i] is a
//    display form (the byte itself for 0x01..0x7F, "<0xHH>" otherwise) since bytes
//    >= 0x80 alone are not UTF-8. Decoding a byte token is just the byte.
//  - Gpt2: GPT-2's byte-level BPE (io/gpt2_bpe.hpp, which needs GPT-2's files;
//    io/text_import.cpp streams a file through it). vocab[i] is GPT-2's token
//    string; decoding maps its characters back to bytes (gpt2_token_bytes).
//  - Wordpiece: BERT's WordPiece (io/wordpiece.hpp, which needs a vocab.txt;
//    io/text_import.cpp streams a file through it). vocab[i] is line i of the
//    vocab.txt; decoding (wordpiece_text) is lossy: the words are lower-cased
//    (uncased vocabularies), without accents, separated by single spaces.
#pragma once

#include "core/named_enum.hpp"
#include "core/types.hpp"

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace shardtrain {

// A token data set's tokenizer, as its 'tokenizer' attribute, trainer-ckpt's
// exports and the printed text name it (name_of, enum_named:
// core/named_enum.hpp): the four above, or Pretokenized (token ids imported as
// they are, io/token_import.hpp: no vocabulary to encode or decode text with).
enum class TextTokenizer : unsigned char { Char, Byte, Gpt2, Pretokenized, Wordpiece };
inline constexpr std::string_view k_text_tokenizer_names[] = {"char", "byte", "gpt2", "pretokenized", "wordpiece"};
constexpr std::span<const std::string_view> enum_names(TextTokenizer) { return k_text_tokenizer_names; }
static_assert(std::size(k_text_tokenizer_names) == 1 + static_cast<std::size_t>(TextTokenizer::Wordpiece));

// The tokenizer trainer-data's --tokenizer names: char, byte, gpt2 or wordpiece
// (a pretokenized data set is imported from token ids, not text); InputError otherwise.
TextTokenizer text_tokenizer_named(std::string_view name);

struct TokenizedText {
  std::vector<std::string> vocab;  // token id -> UTF-8 text
  std::vector<TokenIndex> tokens;  // the whole stream, in text order
};

// Tokenizes `bytes` (Char or Byte; Gpt2 and Wordpiece go through their own classes); `name` (the
// input file) prefixes every error message.
TokenizedText tokenize_text(std::string_view bytes, TextTokenizer tokenizer, const std::string& name);

// Checks that `bytes` is strictly valid UTF-8 (the rules of Char above; NUL
// allowed only when `allow_nul`). An error names `name` and the byte offset,
// counted from `base_offset` (where `bytes` starts in the file).
void validate_utf8(std::string_view bytes, const std::string& name, std::uint64_t base_offset, bool allow_nul);

// The text of token ids `ids` of a data set made by `tokenizer` (char, byte,
// gpt2 or wordpiece) with vocabulary `vocab`: the concatenated bytes (wordpiece:
// wordpiece_text's lossy text, each word after a space). InputError for a
// pretokenized data set (its tokenizer is not known here) or an id outside the
// vocabulary.
std::string decode_tokens(TextTokenizer tokenizer, const std::vector<std::string>& vocab,
                          const std::vector<TokenIndex>& ids);

// The UTF-8 encoding of a valid code point (no surrogates, <= U+10FFFF).
std::string encode_utf8(char32_t code_point);

// Display text of byte token `b` (see above).
std::string byte_token_text(unsigned char b);

}  // namespace shardtrain
