// Unit tests of the text tokenizers (io/text_tokenizer.*): vocab order, ids,
// multi-byte UTF-8, and every class of invalid UTF-8 reported with its offset.
#include "io/text_tokenizer.hpp"

#include <gtest/gtest.h>

#include <string>

#include "core/error.hpp"

namespace shardtrain {
namespace {

TEST(TextTokenizer, CharVocabIsSortedCodePoints) {
  // 'b' U+0062, 'a' U+0061, 'é' U+00E9 (2 bytes), '☃' U+2603 (3), '𝄞' U+1D11E (4), '\n'.
  const std::string text = "b\xF0\x9D\x84\x9E" "a\xC3\xA9\xE2\x98\x83" "a\n";
  const auto t = tokenize_text(text, TextTokenizer::Char, "in.txt");
  const std::vector<std::string> vocab = {"\n", "a", "b", "\xC3\xA9", "\xE2\x98\x83", "\xF0\x9D\x84\x9E"};
  EXPECT_EQ(t.vocab, vocab);
  const std::vector<TokenIndex> ids = {2, 5, 1, 3, 4, 1, 0};
  EXPECT_EQ(t.tokens, ids);
}

TEST(TextTokenizer, ByteTokensAreBytes) {
  const std::string text = "A\xC3\xA9\xFF\n";
  const auto t = tokenize_text(text, TextTokenizer::Byte, "in.txt");
  ASSERT_EQ(t.vocab.size(), 256u);
  EXPECT_EQ(t.vocab[65], "A");
  EXPECT_EQ(t.vocab[10], "\n");
  EXPECT_EQ(t.vocab[0], "<0x00>");
  EXPECT_EQ(t.vocab[0xFF], "<0xFF>");
  const std::vector<TokenIndex> ids = {65, 0xC3, 0xA9, 0xFF, 10};
  EXPECT_EQ(t.tokens, ids);
}

TEST(TextTokenizer, EncodeUtf8RoundTripsBoundaries) {
  EXPECT_EQ(encode_utf8(0x7F), "\x7F");
  EXPECT_EQ(encode_utf8(0x80), "\xC2\x80");
  EXPECT_EQ(encode_utf8(0x7FF), "\xDF\xBF");
  EXPECT_EQ(encode_utf8(0x800), "\xE0\xA0\x80");
  EXPECT_EQ(encode_utf8(0xFFFF), "\xEF\xBF\xBF");
  EXPECT_EQ(encode_utf8(0x10000), "\xF0\x90\x80\x80");
  EXPECT_EQ(encode_utf8(0x10FFFF), "\xF4\x8F\xBF\xBF");
  // Every encoded scalar value decodes back to a single token with that text.
  for (char32_t cp : {0x41u, 0xE9u, 0x3B1u, 0x2603u, 0xFEFFu, 0x1F600u}) {
    const auto t = tokenize_text(encode_utf8(cp), TextTokenizer::Char, "x");
    ASSERT_EQ(t.vocab.size(), 1u);
    EXPECT_EQ(t.vocab[0], encode_utf8(cp));
  }
}

std::string error_of(const std::string& bytes) {
  try {
    tokenize_text(bytes, TextTokenizer::Char, "bad.txt");
  } catch (const InputError& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(TextTokenizer, InvalidUtf8NamesFileAndOffset) {
  struct Case { std::string bytes; std::string expect; };
  const std::vector<Case> cases = {
      {"ab\x80", "bad.txt: invalid UTF-8 at byte offset 2: unexpected continuation byte"},
      {"abc\xFF", "bad.txt: invalid UTF-8 at byte offset 3: invalid lead byte"},
      {"\xC0\xAF", "bad.txt: invalid UTF-8 at byte offset 0: invalid lead byte"},       // overlong '/'
      {"x\xE0\x80\xAF", "bad.txt: invalid UTF-8 at byte offset 1: overlong encoding"},
      {"xy\xED\xA0\x80", "bad.txt: invalid UTF-8 at byte offset 2: encoded UTF-16 surrogate"},
      {"\xF4\x90\x80\x80", "bad.txt: invalid UTF-8 at byte offset 0: code point above U+10FFFF"},
      {"ok\xE2\x98", "bad.txt: invalid UTF-8 at byte offset 2: truncated sequence at end of input"},
      {"ok\xE2" "A!", "bad.txt: invalid UTF-8 at byte offset 2: truncated sequence (missing continuation"},
      {"a\0b", "bad.txt: NUL byte at byte offset 1"},
  };
  for (const auto& c : cases) {
    const std::string bytes = c.bytes == "a\0b" ? std::string("a\0b", 3) : c.bytes;
    const std::string msg = error_of(bytes);
    EXPECT_EQ(msg.rfind(c.expect, 0), 0u) << "got: " << msg;
  }
  // The byte tokenizer accepts anything.
  EXPECT_NO_THROW(tokenize_text(std::string("\xFF\x00\xC0", 3), TextTokenizer::Byte, "bad.txt"));
}

}  // namespace
}  // namespace shardtrain
