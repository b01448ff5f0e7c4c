// shardtrain/io/text_tokenizer.hpp
// Owns turning raw text bytes into token ids for the two text tokenizers. No HDF5
// and no file access here: callers pass bytes and a name for error messages.
//  - Char: the text is UTF-8; tokens are Unicode code points. vocab = the sorted
//    unique code points of the text, token id = index in vocab, vocab[i] = the
//    UTF-8 encoding of that code point. Invalid UTF-8 (bad lead or continuation
//    byte, truncated sequence, overlong form, surrogate, > U+10FFFF) and U+0000
//    are InputErrors naming the input and the byte offset.
//  - Byte: token id = byte value, vocab_size 256 whatever the text; vocab[i] is a
//    display form (the byte itself for 0x01..0x7F, "<0xHH>" otherwise) since bytes
//    >= 0x80 alone are not UTF-8. Decoding a byte token is just the byte.
#pragma once

#include "core/types.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace shardtrain {


enum class TextTokenizer { Char, Byte };
std::string_view to_string(TextTokenizer t);  // "char" / "byte"

struct TokenizedText {
  std::vector<std::string> vocab;  // token id -> UTF-8 text
  std::vector<TokenIndex> tokens;  // the whole stream, in text order
};

// Tokenizes `bytes`; `name` (the input file) prefixes every error message.
TokenizedText tokenize_text(std::string_view bytes, TextTokenizer tokenizer, const std::string& name);

// The UTF-8 encoding of a valid code point (no surrogates, <= U+10FFFF).
std::string encode_utf8(char32_t code_point);

// Display text of byte token `b` (see above).
std::string byte_token_text(unsigned char b);

}  // namespace shardtrain
