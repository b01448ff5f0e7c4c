// tests/unit/config/config_test_support.hpp
// Shared helpers for the config tests: a scratch directory with real files (data.path
// must exist), and a way to get the exact InputError text of a failing parse.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include "config/parse.hpp"
#include "core/error.hpp"

namespace shardtrain::test {

// A fresh directory under the system temp dir, removed with its contents at the end.
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "shardtrain_config_XXXXXX").string();
    if (!mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
    m_path = pattern;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(m_path, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  // Creates (or overwrites) a file and returns its absolute path.
  std::string file(const std::string& name, const std::string& contents = "") const {
    const auto p = m_path / name;
    std::ofstream(p) << contents;
    return p.string();
  }
  const std::filesystem::path& path() const { return m_path; }

 private:
  std::filesystem::path m_path;
};

// The InputError message of parsing `text`, or "<no error>" when it parses.
inline std::string error_of(const std::string& text, const std::vector<std::string>& overrides = {},
                            const std::string& source = "inputs/x.toml") {
  try {
    parse_run_config(text, source, overrides);
  } catch (const InputError& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace shardtrain::test
