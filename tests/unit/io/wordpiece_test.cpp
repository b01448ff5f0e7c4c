// Unit tests of BERT's WordPiece (io/wordpiece.*), one rule at a time, on small
// vocabularies written here: cleaning, CJK, NFC, word separators, lower-casing
// and accent stripping (and neither when cased), punctuation (ASCII ranges and
// Unicode P*, not symbols), greedy longest-match-first sub-words, the whole-word
// [UNK], the 100-character limit, the [CLS] ... [SEP] [PAD] sample and its
// truncation, the decoded text, and every refusal of a vocab.txt.
// (The comparison with a tokenizer we did not write is the e2e test
// trainer_data_wordpiece_vs_js.)
#include "io/wordpiece.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.hpp"

namespace shardtrain {
namespace {

using Words = std::vector<std::string>;
using Ids = std::vector<TokenIndex>;

std::string vocab_text(const Words& tokens) {
  std::string s;
  for (const auto& t : tokens) s += t + "\n";
  return s;
}

// ids: [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3, then the pieces below from 4.
const Words kPieces = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "un",  "##aff", "##able", "u",   "##n", "##a",
                       "##f",   "##ab",  "##le",  "a",     "##b", "cafe",  "naive",  "the", ",",   "."};

WordPiece make(bool lowercase = true, const Words& tokens = kPieces) {
  return WordPiece(parse_wordpiece_vocab(vocab_text(tokens), "vocab.txt"), lowercase);
}

TokenIndex id(const Words& tokens, const std::string& t) {
  for (std::size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] == t) return static_cast<TokenIndex>(i);
  ADD_FAILURE() << "no token " << t;
  return -1;
}

Ids pieces(const WordPiece& wp, const std::string& word) {
  Ids out;
  wp.word_pieces(word, out);
  return out;
}

TEST(WordPiece, CleaningDropsControlFormatNulAndReplacementCharacters) {
  const WordPiece wp = make();
  // BEL, ZERO WIDTH SPACE (Cf), NUL, U+FFFD, a private-use character (Co) and an
  // unassigned one (Cn, U+0378) vanish and join their neighbours.
  EXPECT_EQ(wp.basic_tokens(std::string("ab\x07" "c\xE2\x80\x8B" "d") + '\0' + "e\xEF\xBF\xBD" "f\xEE\x80\x80g\xCD\xB8h"),
            Words{"abcdefgh"});
  // Tab, LF, CR, NBSP, ideographic space (Zs) separate words; runs count once.
  EXPECT_EQ(wp.basic_tokens("a\tb\nc\r\nd\xC2\xA0" "e\xE3\x80\x80  f "), (Words{"a", "b", "c", "d", "e", "f"}));
  // Invalid UTF-8 is read as U+FFFD, which is dropped.
  EXPECT_EQ(wp.basic_tokens("ab\xFF" "cd \xC3"), (Words{"abcd"}));
  // U+2028 / U+2029 are left by cleaning but separate words (Python's str.split).
  EXPECT_EQ(wp.basic_tokens("a\xE2\x80\xA8" "b\xE2\x80\xA9" "c"), (Words{"a", "b", "c"}));
}

TEST(WordPiece, CjkIdeographsAreWordsOfTheirOwn) {
  const WordPiece wp = make();
  // U+4E2D U+6587 (BMP), U+20000 (extension B), U+F900 (compatibility; NFC maps it to
  // U+8C48): each its own word; hiragana U+3042 and hangul U+D55C are not CJK
  // ideographs and stay in their word (the hangul syllable as jamo: NFD, uncased).
  EXPECT_EQ(wp.basic_tokens("ab\xE4\xB8\xAD\xE6\x96\x87" "cd\xF0\xA0\x80\x80\xEF\xA4\x80 x\xE3\x81\x82y\xED\x95\x9C"),
            (Words{"ab", "\xE4\xB8\xAD", "\xE6\x96\x87", "cd", "\xF0\xA0\x80\x80", "\xE8\xB1\x88",
                   "x\xE3\x81\x82y\xE1\x84\x92\xE1\x85\xA1\xE1\x86\xAB"}));
}

TEST(WordPiece, UncasedLowerCasesAndStripsAccents) {
  const WordPiece wp = make(true);
  // "Café NAÏVE" with precomposed and combining accents; "İ" (U+0130) -> "i"; final sigma.
  EXPECT_EQ(wp.basic_tokens("Caf\xC3\xA9 NA\xC3\x8FVE Cafe\xCC\x81 \xC4\xB0stanbul \xCE\x9F\xCE\x94\xCE\x9F\xCE\xA3"),
            (Words{"cafe", "naive", "cafe", "istanbul", "\xCE\xBF\xCE\xB4\xCE\xBF\xCF\x82"}));
  // "ß" stays (its lower case is itself); Hangul U+D55C decomposes to jamo under NFD.
  EXPECT_EQ(wp.basic_tokens("STRA\xC3\x9F" "E \xED\x95\x9C"), (Words{"stra\xC3\x9F" "e", "\xE1\x84\x92\xE1\x85\xA1\xE1\x86\xAB"}));
}

TEST(WordPiece, CasedKeepsCaseAndAccentsAndComposesNfc) {
  const WordPiece wp = make(false);
  EXPECT_EQ(wp.basic_tokens("Caf\xC3\xA9 NA\xC3\x8FVE"), (Words{"Caf\xC3\xA9", "NA\xC3\x8FVE"}));
  // e + COMBINING ACUTE is composed to U+00E9 (transformers' NFC step).
  EXPECT_EQ(wp.basic_tokens("Cafe\xCC\x81"), (Words{"Caf\xC3\xA9"}));
}

TEST(WordPiece, PunctuationIsSplitOffSymbolsAreNot) {
  const WordPiece wp = make();
  // Every ASCII character of 33-47, 58-64, 91-96, 123-126 is punctuation, $ + < = > ^ ` | ~ included.
  EXPECT_EQ(wp.basic_tokens("a$b+c<d=e>f^g`h|i~j"),
            (Words{"a", "$", "b", "+", "c", "<", "d", "=", "e", ">", "f", "^", "g", "`", "h", "|", "i", "~", "j"}));
  EXPECT_EQ(wp.basic_tokens("don't (U.S.A.)..."),
            (Words{"don", "'", "t", "(", "u", ".", "s", ".", "a", ".", ")", ".", ".", "."}));
  // Unicode P*: EM DASH (Pd), LEFT DOUBLE QUOTATION MARK (Pi), IDEOGRAPHIC FULL STOP (Po);
  // not S*: EURO SIGN (Sc), DEGREE SIGN (So), PLUS-MINUS (Sm).
  EXPECT_EQ(wp.basic_tokens("a\xE2\x80\x94" "b\xE2\x80\x9C" "c\xE3\x80\x82" "d a\xE2\x82\xAC" "b\xC2\xB0" "c\xC2\xB1" "d"),
            (Words{"a", "\xE2\x80\x94", "b", "\xE2\x80\x9C", "c", "\xE3\x80\x82", "d",
                   "a\xE2\x82\xAC" "b\xC2\xB0" "c\xC2\xB1" "d"}));
}

TEST(WordPiece, GreedyLongestMatchFirst) {
  const WordPiece wp = make();
  // Longest first: "un" before "u", "##aff" before "##a", "##able" before "##ab".
  EXPECT_EQ(pieces(wp, "unaffable"), (Ids{id(kPieces, "un"), id(kPieces, "##aff"), id(kPieces, "##able")}));
  // A continuation is looked up with "##": "ab" alone is not "##ab".
  EXPECT_EQ(pieces(wp, "aab"), (Ids{id(kPieces, "a"), id(kPieces, "##ab")}));
  EXPECT_EQ(pieces(wp, "ab"), (Ids{id(kPieces, "a"), id(kPieces, "##b")}));
}

TEST(WordPiece, AWordThatDoesNotSplitIsOneUnk) {
  const WordPiece wp = make();
  const TokenIndex unk = wp.unk_id();
  EXPECT_EQ(unk, 1);
  EXPECT_EQ(pieces(wp, "unaffablex"), (Ids{unk}));  // pieces found before are dropped
  EXPECT_EQ(pieces(wp, "xun"), (Ids{unk}));
  Ids ids;
  wp.encode("the cafe zzz, naive.", ids);
  EXPECT_EQ(ids, (Ids{id(kPieces, "the"), id(kPieces, "cafe"), unk, id(kPieces, ","), id(kPieces, "naive"),
                      id(kPieces, ".")}));
}

TEST(WordPiece, WordsOverOneHundredCharactersAreUnk) {
  const WordPiece wp = make();
  EXPECT_EQ(pieces(wp, std::string(100, 'a')).size(), 100u);  // "a", then 99 "##a"
  EXPECT_EQ(pieces(wp, std::string(101, 'a')), (Ids{wp.unk_id()}));
  // Characters, not bytes: 100 two-byte characters are still a word.
  const WordPiece wide = make(true, {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "\xC3\xA9", "##\xC3\xA9"});
  std::string e100;
  for (int i = 0; i < 100; ++i) e100 += "\xC3\xA9";
  EXPECT_EQ(pieces(wide, e100).size(), 100u);
  EXPECT_EQ(pieces(wide, e100 + "\xC3\xA9"), (Ids{wide.unk_id()}));
}

TEST(WordPiece, SampleIsClsTextSepThenPad) {
  const WordPiece wp = make();
  std::vector<TokenIndex> out(8);
  std::int64_t total = -1;
  EXPECT_EQ(wp.encode_sample("the cafe", out, &total), 4);
  EXPECT_EQ(total, 2);
  EXPECT_EQ(out, (Ids{wp.cls_id(), id(kPieces, "the"), id(kPieces, "cafe"), wp.sep_id(), 0, 0, 0, 0}));
  // Truncated to out.size() - 2 ids, [SEP] last.
  std::vector<TokenIndex> short_out(4);
  EXPECT_EQ(wp.encode_sample("the cafe naive the", short_out, &total), 4);
  EXPECT_EQ(total, 4);
  EXPECT_EQ(short_out, (Ids{2, id(kPieces, "the"), id(kPieces, "cafe"), 3}));
  // An empty text: [CLS] [SEP].
  std::vector<TokenIndex> two(2);
  EXPECT_EQ(wp.encode_sample("", two), 2);
  EXPECT_EQ(two, (Ids{2, 3}));
}

TEST(WordPiece, TextJoinsContinuations) {
  const std::vector<std::string> v = {"[PAD]", "un", "##aff", "##able", "cafe", ","};
  EXPECT_EQ(wordpiece_text(v, Ids{1, 2, 3, 5, 4}), " unaffable , cafe");
  EXPECT_THROW(wordpiece_text(v, Ids{6}), InputError);
}

TEST(WordPiece, VocabIsLinesWithItsSha256) {
  const WordPieceVocab v = parse_wordpiece_vocab("[PAD]\n[UNK]\n[CLS]\n[SEP]\n", "v.txt");
  EXPECT_EQ(v.tokens, (Words{"[PAD]", "[UNK]", "[CLS]", "[SEP]"}));
  EXPECT_EQ(v.sha256, "c4b8e11215f047171c3b588b2e0b06b81e3937afeb929b234026ef802be5ebdf");  // sha256sum
  EXPECT_EQ(parse_wordpiece_vocab("[PAD]\n[UNK]\n[CLS]\n[SEP]", "v.txt").tokens.size(), 4u);  // no last line break
  const WordPiece wp(parse_wordpiece_vocab("[SEP]\n[CLS]\n[UNK]\n[PAD]\n", "v.txt"), true);
  EXPECT_EQ(wp.pad_id(), 3);
  EXPECT_EQ(wp.unk_id(), 2);
  EXPECT_EQ(wp.cls_id(), 1);
  EXPECT_EQ(wp.sep_id(), 0);
}

void expect_refused(const std::string& bytes, const std::string& message) {
  try {
    parse_wordpiece_vocab(bytes, "v.txt");
    ADD_FAILURE() << "accepted, expected: " << message;
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
  }
}

TEST(WordPiece, BadVocabFilesAreRefusedWithFileLineAndWhatWasExpected) {
  const std::string ok = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n";
  expect_refused("", "v.txt: empty file; expected one token per line");
  expect_refused(ok + "a\r\nb\n", "v.txt:5: carriage return (CRLF line ends); expected one token per line");
  expect_refused(ok + "a\n\nb\n", "v.txt:6: empty line; expected one token per line");
  expect_refused(ok + "a b\n", "v.txt:5: whitespace inside the token at byte 2; expected one token per line");
  expect_refused(ok + "a\nb\na\n", "v.txt:7: token 'a' is also on line 5; expected each token once");
  expect_refused(ok + "a\xC3(\n", "v.txt:5: invalid UTF-8 at byte 2; expected one token per line");
  expect_refused("\xEF\xBB\xBF" + ok, "v.txt:1: starts with a UTF-8 byte order mark");
  expect_refused("[PAD]\n[CLS]\n[SEP]\na\n", "v.txt: no line '[UNK]' among its 4 tokens; expected BERT's special "
                                             "tokens [PAD], [UNK], [CLS] and [SEP], one per line");
  expect_refused(ok + std::string("a\0b\n", 4), "v.txt:5: NUL byte at byte 2");
  EXPECT_THROW(read_wordpiece_vocab("/nonexistent/vocab.txt"), InputError);
}

}  // namespace
}  // namespace shardtrain
