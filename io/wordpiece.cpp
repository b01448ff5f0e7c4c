// BERT's WordPiece tokenizer on ICU (see wordpiece.hpp for the rules, numbered
// as the steps below). Steps 1-5 run on the whole text in UTF-16 (ICU's
// UnicodeString); steps 6-7 per word, with an ASCII path that skips ICU (ASCII
// lower-cases by itself and has no accents to strip); step 8 works on the
// word's UTF-8 bytes against a hash map of the vocabulary.
#include "io/wordpiece.hpp"

#include <openssl/evp.h>
#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unicode/utf8.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <unordered_map>

#include "core/error.hpp"

namespace shardtrain {

namespace {

constexpr std::size_t kMaxWordChars = 100;                // longer words are [UNK]
constexpr std::size_t kMaxVocab = std::size_t{1} << 24;  // the data sets' vocab_size limit

std::string hex_sha256(std::string_view bytes) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  SHARDTRAIN_CHECK(EVP_Digest(bytes.data(), bytes.size(), md, &len, EVP_sha256(), nullptr) == 1 && len == 32,
                   "SHA-256 (OpenSSL EVP_Digest) failed");
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out += kHex[md[i] >> 4];
    out += kHex[md[i] & 15];
  }
  return out;
}

// Step 2: C* (Cc, Cf, Cn, Co, Cs).
bool is_control_category(std::int8_t cat) {
  return cat == U_CONTROL_CHAR || cat == U_FORMAT_CHAR || cat == U_UNASSIGNED || cat == U_PRIVATE_USE_CHAR ||
         cat == U_SURROGATE;
}

// Step 3: BERT's _is_chinese_char.
bool is_cjk(UChar32 c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

// Step 5: the word separators left after step 2.
bool is_separator(UChar c) { return c == 0x20 || c == 0x2028 || c == 0x2029; }

// Step 7: BERT's _is_punctuation.
bool is_punctuation(UChar32 c) {
  if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126)) return true;
  return u_ispunct(c);
}

std::string to_utf8(const icu::UnicodeString& s) {
  std::string out;
  s.toUTF8String(out);
  return out;
}

}  // namespace

// ---- vocab.txt ---------------------------------------------------------------

WordPieceVocab parse_wordpiece_vocab(std::string_view bytes, const std::string& name) {
  const std::string expected = "expected one token per line (BERT's vocab.txt, id = line number from 0)";
  if (bytes.empty()) throw InputError(name + ": empty file; " + expected);
  if (bytes.starts_with("\xEF\xBB\xBF"))
    throw InputError(name + ":1: starts with a UTF-8 byte order mark; " + expected + ", without one");
  WordPieceVocab v;
  std::unordered_map<std::string_view, std::size_t> line_of;
  std::size_t pos = 0, line = 0;
  while (pos < bytes.size()) {
    ++line;
    const std::size_t nl = bytes.find('\n', pos);
    const std::size_t end = nl == std::string_view::npos ? bytes.size() : nl;
    const std::string_view tok = bytes.substr(pos, end - pos);
    pos = end + 1;
    const std::string where = name + ":" + std::to_string(line) + ": ";
    if (tok.empty()) throw InputError(where + "empty line; " + expected);
    if (tok.find('\r') != std::string_view::npos)
      throw InputError(where + "carriage return (CRLF line ends); " + expected + ", lines ending in LF");
    for (std::size_t i = 0; i < tok.size(); ++i) {
      const char c = tok[i];
      if (c == ' ' || c == '\t' || c == '\v' || c == '\f')
        throw InputError(where + "whitespace inside the token at byte " + std::to_string(i + 1) + "; " + expected);
      if (c == '\0') throw InputError(where + "NUL byte at byte " + std::to_string(i + 1) + "; " + expected);
    }
    for (std::int32_t i = 0, n = static_cast<std::int32_t>(tok.size()); i < n;) {
      const std::int32_t at = i;
      UChar32 c = 0;
      U8_NEXT(reinterpret_cast<const std::uint8_t*>(tok.data()), i, n, c);
      if (c < 0)
        throw InputError(where + "invalid UTF-8 at byte " + std::to_string(at + 1) + "; " + expected + " in UTF-8");
    }
    const auto [it, fresh] = line_of.emplace(tok, line);
    if (!fresh)
      throw InputError(where + "token '" + std::string(tok) + "' is also on line " + std::to_string(it->second) +
                       "; expected each token once");
    if (v.tokens.size() == kMaxVocab)
      throw InputError(name + ": more than " + std::to_string(kMaxVocab) + " tokens (the data sets' limit)");
    v.tokens.emplace_back(tok);
  }
  for (const char* special : {"[PAD]", "[UNK]", "[CLS]", "[SEP]"})
    if (!line_of.count(special))
      throw InputError(name + ": no line '" + special + "' among its " + std::to_string(v.tokens.size()) +
                       " tokens; expected BERT's special tokens [PAD], [UNK], [CLS] and [SEP], one per line");
  v.sha256 = hex_sha256(bytes);
  return v;
}

WordPieceVocab read_wordpiece_vocab(const std::string& path) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  const std::string hint = " (BERT's vocab.txt, one token per line; share/data/fetch-bert-vocab.sh DIR fetches "
                           "bert-base-uncased's)";
  if (!std::filesystem::exists(st)) throw InputError(path + ": no such file" + hint);
  if (std::filesystem::is_directory(st)) throw InputError(path + ": is a directory, expected a file" + hint);
  std::ifstream f(path, std::ios::binary);
  if (!f) throw InputError(path + ": cannot open for reading: " + std::strerror(errno));
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) throw InputError(path + ": read error: " + std::strerror(errno));
  return parse_wordpiece_vocab(bytes, path);
}

// ---- the tokenizer -----------------------------------------------------------

struct WordPiece::Impl {
  WordPieceVocab vocab;
  bool lowercase = true;
  std::unordered_map<std::string, TokenIndex> id_of;
  TokenIndex pad = -1, unk = -1, cls = -1, sep = -1;
  const icu::Normalizer2* nfc = nullptr;
  const icu::Normalizer2* nfd = nullptr;

  // Steps 1-7: calls f(word) for each word, UTF-8.
  template <class F>
  void for_each_word(std::string_view text, F&& f) const;
  // Steps 6-7 on one word of step 5.
  template <class F>
  void split_word(const icu::UnicodeString& word, F&& f) const;
};

template <class F>
void WordPiece::Impl::split_word(const icu::UnicodeString& word, F&& f) const {
  icu::UnicodeString w = word;
  if (lowercase) {
    bool ascii = true;
    for (std::int32_t i = 0; i < w.length() && ascii; ++i) ascii = w.charAt(i) < 0x80;
    if (ascii) {
      for (std::int32_t i = 0; i < w.length(); ++i) {
        const UChar c = w.charAt(i);
        if (c >= 'A' && c <= 'Z') w.setCharAt(i, static_cast<UChar>(c - 'A' + 'a'));
      }
    } else {
      w.toLower(icu::Locale::getRoot());
      UErrorCode status = U_ZERO_ERROR;
      const icu::UnicodeString d = nfd->normalize(w, status);
      SHARDTRAIN_CHECK(U_SUCCESS(status), std::string("ICU NFD failed: ") + u_errorName(status));
      w.remove();
      for (std::int32_t i = 0; i < d.length();) {
        const UChar32 c = d.char32At(i);
        i += U16_LENGTH(c);
        if (u_charType(c) != U_NON_SPACING_MARK) w.append(c);
      }
    }
  }
  std::int32_t start = 0;
  for (std::int32_t i = 0; i < w.length();) {
    const UChar32 c = w.char32At(i);
    const std::int32_t next = i + U16_LENGTH(c);
    if (is_punctuation(c)) {
      if (i > start) f(to_utf8(w.tempSubStringBetween(start, i)));
      f(to_utf8(w.tempSubStringBetween(i, next)));
      start = next;
    }
    i = next;
  }
  if (w.length() > start) f(to_utf8(w.tempSubStringBetween(start, w.length())));
}

template <class F>
void WordPiece::Impl::for_each_word(std::string_view text, F&& f) const {
  if (text.empty()) return;
  SHARDTRAIN_CHECK(text.size() < static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max() / 2),
                   "WordPiece: a text of " + std::to_string(text.size()) + " bytes is too long for ICU");
  const icu::UnicodeString in =
      icu::UnicodeString::fromUTF8(icu::StringPiece(text.data(), static_cast<std::int32_t>(text.size())));
  icu::UnicodeString clean;  // steps 2 and 3
  for (std::int32_t i = 0; i < in.length();) {
    const UChar32 c = in.char32At(i);
    i += U16_LENGTH(c);
    if (c == 0 || c == 0xFFFD) continue;
    if (c == '\t' || c == '\n' || c == '\r') {
      clean.append(static_cast<UChar>(' '));
      continue;
    }
    const auto cat = static_cast<std::int8_t>(u_charType(c));
    if (is_control_category(cat)) continue;
    if (cat == U_SPACE_SEPARATOR) {
      clean.append(static_cast<UChar>(' '));
    } else if (is_cjk(c)) {
      clean.append(static_cast<UChar>(' ')).append(c).append(static_cast<UChar>(' '));
    } else {
      clean.append(c);
    }
  }
  UErrorCode status = U_ZERO_ERROR;
  const icu::UnicodeString norm = nfc->normalize(clean, status);  // step 4
  SHARDTRAIN_CHECK(U_SUCCESS(status), std::string("ICU NFC failed: ") + u_errorName(status));
  std::int32_t start = 0;  // step 5
  for (std::int32_t i = 0; i <= norm.length(); ++i) {
    if (i < norm.length() && !is_separator(norm.charAt(i))) continue;
    if (i > start) split_word(norm.tempSubStringBetween(start, i), f);
    start = i + 1;
  }
}

WordPiece::WordPiece(WordPieceVocab vocab, bool lowercase) : m_impl(std::make_unique<Impl>()) {
  Impl& im = *m_impl;
  im.vocab = std::move(vocab);
  im.lowercase = lowercase;
  im.id_of.reserve(im.vocab.tokens.size());
  for (std::size_t i = 0; i < im.vocab.tokens.size(); ++i)
    im.id_of.emplace(im.vocab.tokens[i], static_cast<TokenIndex>(i));
  auto special = [&](const char* t) {
    const auto it = im.id_of.find(t);
    SHARDTRAIN_CHECK(it != im.id_of.end(), std::string("WordPiece vocabulary without ") + t +
                                               " (parse_wordpiece_vocab checks this)");
    return it->second;
  };
  im.pad = special("[PAD]");
  im.unk = special("[UNK]");
  im.cls = special("[CLS]");
  im.sep = special("[SEP]");
  UErrorCode status = U_ZERO_ERROR;
  im.nfc = icu::Normalizer2::getNFCInstance(status);
  im.nfd = icu::Normalizer2::getNFDInstance(status);
  SHARDTRAIN_CHECK(U_SUCCESS(status) && im.nfc && im.nfd,
                   std::string("ICU normalizers unavailable: ") + u_errorName(status));
}

WordPiece::~WordPiece() = default;

std::vector<std::string> WordPiece::basic_tokens(std::string_view text) const {
  std::vector<std::string> words;
  m_impl->for_each_word(text, [&](std::string&& w) { words.push_back(std::move(w)); });
  return words;
}

void WordPiece::word_pieces(std::string_view word, std::vector<TokenIndex>& out) const {
  const Impl& im = *m_impl;
  if (word.empty()) return;
  std::vector<std::size_t> at;  // byte offset of each code point, then the end
  at.reserve(word.size() + 1);
  for (std::size_t i = 0; i < word.size(); ++i)
    if ((static_cast<unsigned char>(word[i]) & 0xC0) != 0x80) at.push_back(i);
  const std::size_t n = at.size();
  at.push_back(word.size());
  if (n > kMaxWordChars) {
    out.push_back(im.unk);
    return;
  }
  const std::size_t mark = out.size();
  std::string key;
  for (std::size_t start = 0; start < n;) {
    std::size_t end = n;
    TokenIndex id = -1;
    for (; end > start; --end) {
      key.assign(start > 0 ? "##" : "");
      key.append(word.substr(at[start], at[end] - at[start]));
      const auto it = im.id_of.find(key);
      if (it != im.id_of.end()) {
        id = it->second;
        break;
      }
    }
    if (id < 0) {
      out.resize(mark);
      out.push_back(im.unk);
      return;
    }
    out.push_back(id);
    start = end;
  }
}

void WordPiece::encode(std::string_view text, std::vector<TokenIndex>& out) const {
  m_impl->for_each_word(text, [&](const std::string& w) { word_pieces(w, out); });
}

std::int64_t WordPiece::encode_sample(std::string_view text, std::span<TokenIndex> out, std::int64_t* total) const {
  SHARDTRAIN_CHECK(out.size() >= 2, "a WordPiece sample needs room for [CLS] and [SEP]");
  std::vector<TokenIndex> ids;
  encode(text, ids);
  const std::size_t n = std::min(ids.size(), out.size() - 2);
  out[0] = m_impl->cls;
  std::copy(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n), out.begin() + 1);
  out[n + 1] = m_impl->sep;
  std::fill(out.begin() + static_cast<std::ptrdiff_t>(n + 2), out.end(), m_impl->pad);
  if (total) *total = static_cast<std::int64_t>(ids.size());
  return static_cast<std::int64_t>(n + 2);
}

const std::vector<std::string>& WordPiece::vocab() const { return m_impl->vocab.tokens; }
const std::string& WordPiece::vocab_sha256() const { return m_impl->vocab.sha256; }
bool WordPiece::lowercase() const { return m_impl->lowercase; }
TokenIndex WordPiece::pad_id() const { return m_impl->pad; }
TokenIndex WordPiece::unk_id() const { return m_impl->unk; }
TokenIndex WordPiece::cls_id() const { return m_impl->cls; }
TokenIndex WordPiece::sep_id() const { return m_impl->sep; }

std::string wordpiece_text(std::span<const std::string> vocab, std::span<const TokenIndex> ids) {
  std::string text;
  for (const TokenIndex id : ids) {
    if (id < 0 || static_cast<std::size_t>(id) >= vocab.size())
      throw InputError("token id " + std::to_string(id) + " outside the vocabulary of " +
                       std::to_string(vocab.size()));
    const std::string& t = vocab[static_cast<std::size_t>(id)];
    if (t.starts_with("##")) {
      text.append(t, 2);
    } else {
      text += ' ';
      text += t;
    }
  }
  return text;
}

}  // namespace shardtrain
