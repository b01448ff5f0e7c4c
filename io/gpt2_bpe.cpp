// GPT-2 byte-level BPE (see gpt2_bpe.hpp): the two file parsers, the
// pre-tokenizer on PCRE2 and the merge loop of gpt-3-encoder's bpe().
#include "io/gpt2_bpe.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>
#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <iterator>
#include <unordered_map>

#include "core/error.hpp"
#include "io/text_tokenizer.hpp"  // encode_utf8

namespace shardtrain {

namespace {

// GPT-2's bytes_to_unicode(): byte -> code point, and back (-1: not a byte's).
struct ByteAlphabet {
  std::array<char32_t, 256> code_point{};
  std::array<int, 324> byte{};
  ByteAlphabet() {
    byte.fill(-1);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      code_point[b] = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
      byte[code_point[b]] = b;
    }
  }
};
const ByteAlphabet& alphabet() {
  static const ByteAlphabet a;
  return a;
}

// Hash that lets an unordered_map<std::string, V> be searched with a string_view.
struct ViewHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <class V>
using StringMap = std::unordered_map<std::string, V, ViewHash, std::equal_to<>>;

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f)
    throw InputError(path + ": cannot open for reading: " + std::strerror(errno) +
                     " (share/data/fetch-gpt2-bpe.sh DIR fetches GPT-2's encoder.json and vocab.bpe)");
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) throw InputError(path + ": read error: " + std::strerror(errno));
  return bytes;
}

// A reader of encoder.json: one JSON object of string keys and integer values.
class EncoderJson {
 public:
  EncoderJson(const std::string& path, std::string text) : m_path(path), m_text(std::move(text)) {}

  // Calls f(key, value, key_offset) for each member, in file order.
  template <class F>
  void for_each(F&& f) {
    skip_space();
    expect('{');
    skip_space();
    if (peek() == '}') return;
    for (;;) {
      skip_space();
      const std::size_t at = m_pos;
      std::string key = string();
      skip_space();
      expect(':');
      skip_space();
      const std::int64_t value = integer();
      f(key, value, at);
      skip_space();
      if (peek() == ',') {
        ++m_pos;
        continue;
      }
      expect('}');
      skip_space();
      if (m_pos != m_text.size()) fail("unexpected text after the closing '}'");
      return;
    }
  }

  [[noreturn]] void fail(const std::string& what) const {
    throw InputError(m_path + ": byte offset " + std::to_string(m_pos) + ": " + what +
                     " (expected GPT-2's encoder.json: one JSON object of token string -> id)");
  }

 private:
  int peek() const { return m_pos < m_text.size() ? static_cast<unsigned char>(m_text[m_pos]) : -1; }
  void skip_space() {
    while (m_pos < m_text.size() &&
           (m_text[m_pos] == ' ' || m_text[m_pos] == '\n' || m_text[m_pos] == '\r' || m_text[m_pos] == '\t'))
      ++m_pos;
  }
  void expect(char c) {
    if (peek() != static_cast<unsigned char>(c)) fail(std::string("expected '") + c + "'");
    ++m_pos;
  }
  unsigned hex4() {
    if (m_pos + 4 > m_text.size()) fail("truncated \\u escape");
    unsigned v = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = m_text[m_pos++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= static_cast<unsigned>(c - '0');
      else if (c >= 'a' && c <= 'f') v |= static_cast<unsigned>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= static_cast<unsigned>(c - 'A' + 10);
      else fail("bad hex digit in a \\u escape");
    }
    return v;
  }
  std::string string() {
    expect('"');
    std::string s;
    for (;;) {
      const int c = peek();
      if (c < 0) fail("unterminated string");
      ++m_pos;
      if (c == '"') return s;
      if (c != '\\') {
        s += static_cast<char>(c);
        continue;
      }
      const int e = peek();
      ++m_pos;
      switch (e) {
        case '"': s += '"'; break;
        case '\\': s += '\\'; break;
        case '/': s += '/'; break;
        case 'b': s += '\b'; break;
        case 'f': s += '\f'; break;
        case 'n': s += '\n'; break;
        case 'r': s += '\r'; break;
        case 't': s += '\t'; break;
        case 'u': {
          char32_t cp = hex4();
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (m_pos + 2 > m_text.size() || m_text[m_pos] != '\\' || m_text[m_pos + 1] != 'u')
              fail("high surrogate escape without its low half");
            m_pos += 2;
            const char32_t lo = hex4();
            if (lo < 0xDC00 || lo > 0xDFFF) fail("high surrogate escape without its low half");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            fail("lone low surrogate escape");
          }
          s += encode_utf8(cp);
          break;
        }
        default: fail("bad escape in a string");
      }
    }
  }
  std::int64_t integer() {
    const std::size_t start = m_pos;
    std::int64_t v = 0;
    while (m_pos < m_text.size() && m_text[m_pos] >= '0' && m_text[m_pos] <= '9') {
      v = v * 10 + (m_text[m_pos++] - '0');
      if (v > INT_MAX) fail("token id too large");
    }
    if (m_pos == start) fail("expected a non-negative integer token id");
    return v;
  }

  std::string m_path;
  std::string m_text;
  std::size_t m_pos = 0;
};

// Raw bytes of a token string; nullopt-like empty + ok=false when a character is
// outside the alphabet.
bool token_bytes(std::string_view token, std::string& out) {
  out.clear();
  const auto* p = reinterpret_cast<const unsigned char*>(token.data());
  const std::size_t n = token.size();
  for (std::size_t i = 0; i < n;) {
    char32_t cp;
    if (p[i] < 0x80) {
      cp = p[i];
      i += 1;
    } else if ((p[i] & 0xE0) == 0xC0 && i + 1 < n) {
      cp = (static_cast<char32_t>(p[i] & 0x1F) << 6) | (p[i + 1] & 0x3F);
      i += 2;
    } else {
      return false;  // every code point of the alphabet is below U+0800
    }
    if (cp >= alphabet().byte.size() || alphabet().byte[cp] < 0) return false;
    out += static_cast<char>(alphabet().byte[cp]);
  }
  return true;
}

// JavaScript's \s (ECMA-262 WhiteSpace and LineTerminator), spelled out for PCRE2.
#define JS_SPACE "\\t\\n\\x{0B}\\f\\r \\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}\\x{FEFF}"
// gpt-3-encoder's pattern:
//   /'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu
constexpr const char* kPattern = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" JS_SPACE "\\p{L}\\p{N}]+|[" JS_SPACE
                                 "]+(?![^" JS_SPACE "])|[" JS_SPACE "]+";
#undef JS_SPACE

}  // namespace

std::string gpt2_token_bytes(std::string_view token) {
  std::string out;
  if (!token_bytes(token, out))
    throw InputError("GPT-2 token '" + std::string(token) + "' has a character outside GPT-2's byte alphabet");
  return out;
}

struct Gpt2Bpe::Impl {
  std::vector<std::string> vocab;         // id -> token string
  StringMap<std::uint16_t> id_of;         // raw bytes -> id
  StringMap<int> rank_of;                 // "first,second" (raw bytes) -> merge rank
  StringMap<std::vector<std::uint16_t>> cache;  // pre-token (raw bytes) -> ids
  pcre2_code* code = nullptr;
  pcre2_match_data* match = nullptr;
  std::string key;                        // scratch for rank lookups
  std::vector<std::string_view> symbols, merged;

  ~Impl() {
    if (match) pcre2_match_data_free(match);
    if (code) pcre2_code_free(code);
  }

  void load_encoder(const std::string& path) {
    EncoderJson json(path, read_file(path));
    std::vector<bool> seen;
    std::string bytes;
    json.for_each([&](const std::string& token, std::int64_t id, std::size_t at) {
      if (id > 65535)
        throw InputError(path + ": byte offset " + std::to_string(at) + ": token id " + std::to_string(id) +
                         " too large (GPT-2's ids are below 65536)");
      if (!token_bytes(token, bytes))
        throw InputError(path + ": byte offset " + std::to_string(at) + ": token '" + token +
                         "' has a character outside GPT-2's byte alphabet");
      const auto u = static_cast<std::size_t>(id);
      if (u >= vocab.size()) vocab.resize(u + 1), seen.resize(u + 1, false);
      if (seen[u])
        throw InputError(path + ": byte offset " + std::to_string(at) + ": token id " + std::to_string(id) +
                         " given twice");
      if (!id_of.emplace(bytes, static_cast<std::uint16_t>(id)).second)
        throw InputError(path + ": byte offset " + std::to_string(at) + ": token '" + token + "' given twice");
      seen[u] = true;
      vocab[u] = token;
    });
    for (std::size_t i = 0; i < seen.size(); ++i)
      if (!seen[i]) throw InputError(path + ": no token has id " + std::to_string(i) + " (ids must be 0..N-1)");
    if (vocab.size() < 256) throw InputError(path + ": only " + std::to_string(vocab.size()) + " tokens, fewer than the 256 bytes");
    for (int b = 0; b < 256; ++b)
      if (!id_of.count(std::string(1, static_cast<char>(b))))
        throw InputError(path + ": byte " + std::to_string(b) + " has no token of its own");
  }

  void load_merges(const std::string& path) {
    const std::string text = read_file(path);
    std::size_t pos = 0, line = 0;
    std::string a, b;
    while (pos < text.size()) {
      std::size_t eol = text.find('\n', pos);
      if (eol == std::string::npos) eol = text.size();
      const std::string_view l(text.data() + pos, eol - pos);
      ++line;
      pos = eol + 1;
      if (line == 1) {
        if (l.rfind("#version", 0) != 0)
          throw InputError(path + ": line 1: expected '#version: ...' (GPT-2's vocab.bpe)");
        continue;
      }
      if (l.empty() && pos >= text.size()) break;
      const std::size_t sp = l.find(' ');
      if (sp == std::string_view::npos || sp == 0 || sp + 1 >= l.size() || l.find(' ', sp + 1) != std::string_view::npos)
        throw InputError(path + ": line " + std::to_string(line) + ": expected two tokens separated by one space, got '" +
                         std::string(l) + "'");
      if (!token_bytes(l.substr(0, sp), a) || !token_bytes(l.substr(sp + 1), b))
        throw InputError(path + ": line " + std::to_string(line) +
                         ": a token has a character outside GPT-2's byte alphabet");
      rank_of[a + ',' + b] = static_cast<int>(line - 2);  // a later merge with the same key wins, as in JS
    }
  }

  void compile() {
    int err = 0;
    PCRE2_SIZE off = 0;
    code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kPattern), PCRE2_ZERO_TERMINATED, PCRE2_UTF, &err, &off, nullptr);
    if (!code) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      SHARDTRAIN_FAIL("GPT-2 pre-tokenizer pattern does not compile at " + std::to_string(off) + ": " +
                      reinterpret_cast<const char*>(msg));
    }
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter when JIT is unavailable
    match = pcre2_match_data_create_from_pattern(code, nullptr);
    SHARDTRAIN_CHECK(match != nullptr, "pcre2_match_data_create_from_pattern");
  }

  int rank(std::string_view first, std::string_view second) {
    key.assign(first);
    key += ',';
    key += second;
    const auto it = rank_of.find(std::string_view(key));
    return it == rank_of.end() ? -1 : it->second;
  }

  // gpt-3-encoder's bpe() on one pre-token's raw bytes.
  const std::vector<std::uint16_t>& bpe(std::string_view word) {
    if (const auto it = cache.find(word); it != cache.end()) return it->second;
    symbols.clear();
    for (std::size_t i = 0; i < word.size(); ++i) symbols.push_back(word.substr(i, 1));
    while (symbols.size() > 1) {
      int best = INT_MAX;
      std::size_t at = 0;
      for (std::size_t i = 0; i + 1 < symbols.size(); ++i) {
        const int r = rank(symbols[i], symbols[i + 1]);
        if (r >= 0 && r <= best) best = r, at = i;  // ties: the rightmost pair, as JS's minPairs keeps it
      }
      if (best == INT_MAX) break;
      const std::string_view first = symbols[at], second = symbols[at + 1];
      merged.clear();
      for (std::size_t i = 0; i < symbols.size();) {
        if (i + 1 < symbols.size() && symbols[i] == first && symbols[i + 1] == second) {
          merged.push_back(std::string_view(symbols[i].data(), symbols[i].size() + symbols[i + 1].size()));
          i += 2;
        } else {
          merged.push_back(symbols[i++]);
        }
      }
      symbols.swap(merged);
    }
    std::vector<std::uint16_t> ids;
    ids.reserve(symbols.size());
    for (const std::string_view s : symbols) {
      const auto it = id_of.find(s);
      SHARDTRAIN_CHECK(it != id_of.end(), "a merge made a token that encoder.json lacks");
      ids.push_back(it->second);
    }
    return cache.emplace(std::string(word), std::move(ids)).first->second;
  }
};

Gpt2Bpe::Gpt2Bpe(const std::string& dir) : m_impl(std::make_unique<Impl>()) {
  m_impl->load_encoder(dir + "/encoder.json");
  m_impl->load_merges(dir + "/vocab.bpe");
  m_impl->compile();
}

Gpt2Bpe::~Gpt2Bpe() = default;

const std::vector<std::string>& Gpt2Bpe::vocab() const { return m_impl->vocab; }

void Gpt2Bpe::encode(std::string_view subject, std::size_t end, std::vector<std::uint16_t>& out) {
  Impl& im = *m_impl;
  const auto* s = reinterpret_cast<PCRE2_SPTR>(subject.data());
  std::size_t pos = 0;
  while (pos < end) {
    const int rc = pcre2_match(im.code, s, subject.size(), pos, PCRE2_NO_UTF_CHECK, im.match, nullptr);
    SHARDTRAIN_CHECK(rc > 0, "the pre-tokenizer found no token at byte " + std::to_string(pos));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(im.match);
    SHARDTRAIN_CHECK(ov[0] == pos && ov[1] > pos, "the pre-tokenizer skipped text at byte " + std::to_string(pos));
    SHARDTRAIN_CHECK(ov[1] <= end, "a pre-token crosses the end of the block at byte " + std::to_string(end));
    const auto& ids = im.bpe(subject.substr(pos, ov[1] - pos));
    out.insert(out.end(), ids.begin(), ids.end());
    pos = ov[1];
  }
}

}  // namespace shardtrain
