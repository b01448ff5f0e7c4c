// trainer-config-doc: writes the input file reference share/doc/config.md from its
// template (src/config/config.md.in) and the config schema (src/config/schema.cpp),
// or, with --check DOC, says whether DOC is what they give (the CTest test
// config_doc_current runs that on the checked-in doc).
// Exit codes: 0 done (or DOC is current), 1 DOC is stale, 2 bad usage or template.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <string_view>

#include "config/config_doc.hpp"
#include "core/error.hpp"

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw shardtrain::InputError(path + ": cannot open");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Line `n` (1-based) of `text`, or "(end of file)".
std::string line_of(std::string_view text, std::size_t n) {
  std::size_t at = 0;
  for (std::size_t i = 1; i < n && at != std::string_view::npos; ++i) {
    at = text.find('\n', at);
    if (at != std::string_view::npos) ++at;
  }
  if (at == std::string_view::npos || at >= text.size()) return "(end of file)";
  return std::string(text.substr(at, text.find('\n', at) - at));
}

// The 1-based number of the first line where `a` and `b` differ.
std::size_t first_difference(std::string_view a, std::string_view b) {
  std::size_t line = 1;
  for (std::size_t i = 0; i < a.size() && i < b.size() && a[i] == b[i]; ++i)
    if (a[i] == '\n') ++line;
  return line;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"trainer-config-doc: prints share/doc/config.md, generated from TEMPLATE (src/config/config.md.in) "
               "and the config schema built into this program (src/config/schema.cpp).\n"
               "Regenerate the doc from the repository root with\n"
               "  build/trainer-config-doc src/config/config.md.in > share/doc/config.md",
               "trainer-config-doc"};
  std::string template_path, check_path;
  app.add_option("template", template_path, "The doc's template, src/config/config.md.in")->required();
  app.add_option("--check", check_path,
                 "Print nothing; exit 1 with a message when DOC differs from what would be printed")
      ->type_name("DOC");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    const std::string doc = shardtrain::render_config_doc(read_file(template_path));
    if (check_path.empty()) {
      std::cout << doc;
      return std::cout.flush() ? 0 : 1;
    }
    const std::string current = read_file(check_path);
    if (current == doc) return 0;
    const std::size_t line = first_difference(current, doc);
    std::fprintf(stderr,
                 "error: %s is stale: it is not what %s and the config schema (src/config/schema.cpp) give.\n"
                 "  first difference at line %zu:\n    it has:    %s\n    generated: %s\n"
                 "Regenerate it (and commit it) with:\n  %s %s > %s\n",
                 check_path.c_str(), template_path.c_str(), line, line_of(current, line).c_str(),
                 line_of(doc, line).c_str(), argv[0], template_path.c_str(), check_path.c_str());
    return 1;
  } catch (const shardtrain::InputError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
