// Character- and byte-level tokenizers for text imports (see text_tokenizer.hpp).
// The char tokenizer makes two passes over the bytes (mark code points used, then
// emit ids) so it never holds a decoded copy of the text.
#include "io/text_tokenizer.hpp"

#include <cstdio>
#include <optional>

#include "core/error.hpp"
#include "io/gpt2_bpe.hpp"
#include "io/wordpiece.hpp"

namespace shardtrain {

TextTokenizer text_tokenizer_named(std::string_view name) {
  const std::optional<TextTokenizer> t = enum_named<TextTokenizer>(name);
  if (!t || *t == TextTokenizer::Pretokenized)
    throw InputError("unknown tokenizer '" + std::string(name) + "' (expected char, byte, gpt2 or wordpiece)");
  return *t;
}

std::string encode_utf8(char32_t cp) {
  SHARDTRAIN_CHECK(cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF), "not a Unicode scalar value");
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

std::string byte_token_text(unsigned char b) {
  if (b >= 0x01 && b <= 0x7F) return std::string(1, static_cast<char>(b));
  char buf[8];
  std::snprintf(buf, sizeof buf, "<0x%02X>", b);
  return buf;
}

namespace {

[[noreturn]] void bad_utf8(const std::string& name, std::uint64_t offset, const char* what) {
  throw InputError(name + ": invalid UTF-8 at byte offset " + std::to_string(offset) + ": " + what +
                   " (use --tokenizer byte for non-UTF-8 input)");
}

// Calls f(code_point) for each code point of `bytes`, validating strictly (RFC 3629).
// Offsets in errors are counted from `base`.
template <class F>
void for_each_code_point(std::string_view bytes, const std::string& name, F&& f, std::uint64_t base = 0,
                         bool allow_nul = false) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const std::size_t n = bytes.size();
  std::size_t i = 0;
  while (i < n) {
    const unsigned char b0 = p[i];
    if (b0 < 0x80) {
      if (b0 == 0 && !allow_nul)
        throw InputError(name + ": NUL byte at byte offset " + std::to_string(base + i) +
                         "; not a text file (use --tokenizer byte)");
      f(static_cast<char32_t>(b0));
      ++i;
      continue;
    }
    int len = 0;
    char32_t cp = 0, min = 0;
    if (b0 >= 0xC2 && b0 <= 0xDF) len = 2, cp = b0 & 0x1F, min = 0x80;
    else if (b0 >= 0xE0 && b0 <= 0xEF) len = 3, cp = b0 & 0x0F, min = 0x800;
    else if (b0 >= 0xF0 && b0 <= 0xF4) len = 4, cp = b0 & 0x07, min = 0x10000;
    else if (b0 >= 0x80 && b0 <= 0xBF) bad_utf8(name, base + i, "unexpected continuation byte");
    else bad_utf8(name, base + i, "invalid lead byte");  // 0xC0, 0xC1 (overlong) and 0xF5..0xFF
    for (int k = 1; k < len; ++k) {
      if (i + static_cast<std::size_t>(k) >= n) bad_utf8(name, base + i, "truncated sequence at end of input");
      const unsigned char b = p[i + static_cast<std::size_t>(k)];
      if ((b & 0xC0) != 0x80) bad_utf8(name, base + i, "truncated sequence (missing continuation byte)");
      cp = (cp << 6) | (b & 0x3F);
    }
    if (cp < min) bad_utf8(name, base + i, "overlong encoding");
    if (cp >= 0xD800 && cp <= 0xDFFF) bad_utf8(name, base + i, "encoded UTF-16 surrogate");
    if (cp > 0x10FFFF) bad_utf8(name, base + i, "code point above U+10FFFF");
    f(cp);
    i += static_cast<std::size_t>(len);
  }
}

}  // namespace

void validate_utf8(std::string_view bytes, const std::string& name, std::uint64_t base_offset, bool allow_nul) {
  for_each_code_point(bytes, name, [](char32_t) {}, base_offset, allow_nul);
}

std::string decode_tokens(TextTokenizer tokenizer, const std::vector<std::string>& vocab,
                          const std::vector<TokenIndex>& ids) {
  if (tokenizer == TextTokenizer::Pretokenized)
    throw InputError("cannot decode tokens of tokenizer '" + std::string(name_of(tokenizer)) +
                     "' (only char, byte, gpt2 and wordpiece data sets carry their tokenizer)");
  if (tokenizer == TextTokenizer::Wordpiece) return wordpiece_text(vocab, ids);
  std::string text;
  for (const TokenIndex id : ids) {
    if (id < 0 || static_cast<std::size_t>(id) >= vocab.size())
      throw InputError("token id " + std::to_string(id) + " outside the vocabulary of " +
                       std::to_string(vocab.size()));
    switch (tokenizer) {
      case TextTokenizer::Byte:
        text += static_cast<char>(id);
        break;
      case TextTokenizer::Gpt2:
        text += gpt2_token_bytes(vocab[static_cast<std::size_t>(id)]);
        break;
      case TextTokenizer::Char:
      case TextTokenizer::Pretokenized:  // refused above
      case TextTokenizer::Wordpiece:     // wordpiece_text above
        text += vocab[static_cast<std::size_t>(id)];
        break;
    }
  }
  return text;
}

TokenizedText tokenize_text(std::string_view bytes, TextTokenizer tokenizer, const std::string& name) {
  SHARDTRAIN_CHECK(tokenizer == TextTokenizer::Char || tokenizer == TextTokenizer::Byte,
                   "tokenize_text is for char and byte (gpt2 and wordpiece text go through Gpt2Bpe and WordPiece)");
  TokenizedText out;
  if (tokenizer == TextTokenizer::Byte) {
    out.vocab.reserve(256);
    for (int b = 0; b < 256; ++b) out.vocab.push_back(byte_token_text(static_cast<unsigned char>(b)));
    out.tokens.reserve(bytes.size());
    for (const char c : bytes) out.tokens.push_back(static_cast<unsigned char>(c));
    return out;
  }
  constexpr std::size_t kCodePoints = 0x110000;
  std::vector<TokenIndex> id_of(kCodePoints, -1);
  std::size_t count = 0;
  for_each_code_point(bytes, name, [&](char32_t cp) {
    id_of[cp] = 0;
    ++count;
  });
  TokenIndex next = 0;
  for (std::size_t cp = 0; cp < kCodePoints; ++cp) {
    if (id_of[cp] < 0) continue;
    id_of[cp] = next++;
    out.vocab.push_back(encode_utf8(static_cast<char32_t>(cp)));
  }
  out.tokens.reserve(count);
  for_each_code_point(bytes, name, [&](char32_t cp) { out.tokens.push_back(id_of[cp]); });
  return out;
}

}  // namespace shardtrain
