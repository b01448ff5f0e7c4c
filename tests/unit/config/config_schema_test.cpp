// tests/unit/config/config_schema_test.cpp
// The schema's rows (config/schema.hpp) drive parsing, to_toml and the generated
// doc: every key reads into its own field and only that one, to_toml writes the
// keys of the model's type.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "config/parse.hpp"
#include "config/schema.hpp"
#include "config_test_support.hpp"

namespace shardtrain {
namespace {

class ConfigSchema : public ::testing::Test {
 protected:
  test::ScratchDir m_dir;
  std::string m_data = m_dir.file("train.h5", "x");
  std::string m_other = m_dir.file("other.h5", "y");
};

// A value of the key's type, in range, other than `c`'s, stored into `c`'s field.
void change(const KeySpec& k, RunConfig& c, const std::string& path) {
  std::visit(
      [&](const auto& field) {
        auto& v = field.ref(c);
        using T = std::remove_cvref_t<decltype(v)>;
        if constexpr (std::is_same_v<T, double>) {
          const NumberRange& r = k.numbers;
          const double hi = r.hi.value_or(INFINITY);
          for (double candidate : {v * 2, v + 1.5, (r.lo + hi) / 2, (r.lo + hi) / 4})
            if (candidate != v && (r.lo_open ? candidate > r.lo : candidate >= r.lo) && candidate < hi) {
              v = candidate;
              return;
            }
          FAIL() << "no other value in range";
        } else if constexpr (std::is_same_v<T, bool>) {
          v = !v;
        } else if constexpr (std::is_same_v<T, std::string>) {
          if (k.choices.empty()) v = path;  // an existing regular file suits every free string key
          for (std::string_view choice : k.choices)
            if (choice != v) {
              v = choice;
              return;
            }
        } else if constexpr (std::is_same_v<T, std::vector<std::int64_t>>) {
          v = v == std::vector<std::int64_t>{k.ints.lo} ? std::vector<std::int64_t>{k.ints.hi}
                                                        : std::vector<std::int64_t>{k.ints.lo};
        } else {
          const auto i = static_cast<std::int64_t>(v);
          v = static_cast<T>(i == 0 ? 1 : i * 2 <= k.ints.hi ? i * 2 : k.ints.lo);
        }
      },
      k.field);
}

TEST_F(ConfigSchema, EveryKeyReadsIntoItsOwnFieldAndNoOther) {
  for (const KeySpec& k : config_schema()) {
    SCOPED_TRACE(dotted_name(k));
    std::vector<std::string> set;
    if (!k.model_types.empty()) set.push_back("model.type=\"" + std::string(k.model_types.front()) + "\"");
    if (dotted_name(k) == "recompute.budget_mb") set = {"recompute.policy=\"budget\"", "recompute.budget_mb=1"};
    const std::string text = "[data]\npath = \"" + m_data + "\"\n";
    RunConfig expected = parse_run_config(text, "inputs/x.toml", set);
    change(k, expected, m_other);
    set.push_back(dotted_name(k) + "=" + toml_value(k, expected));
    const RunConfig got = parse_run_config(text, "inputs/x.toml", set);
    for (const KeySpec& other : config_schema())
      if (&other == &k || !other.derive)  // a derived default may follow the key changed
        EXPECT_EQ(toml_value(other, got), toml_value(other, expected)) << dotted_name(other);
  }
}

TEST_F(ConfigSchema, ToTomlWritesTheKeysOfTheModelTypeOnly) {
  for (std::string type : {"gpt", "encoder_classifier", "mlp", "cnn"}) {
    SCOPED_TRACE(type);
    const std::string text = to_toml(parse_run_config(
        "[model]\ntype = \"" + type + "\"\n[data]\npath = \"" + m_data + "\"\n", "inputs/x.toml"));
    for (const KeySpec& k : config_schema()) {
      const bool written = text.find("\n" + std::string(k.key) + " = ") != std::string::npos;
      if (k.key == "type") continue;  // model.type and optim.type share the name
      const bool expected = used_by_model_type(k, type) && !(dotted_name(k) == "model.seq_len" && type != "gpt");
      EXPECT_EQ(written, expected) << dotted_name(k) << " in\n" << text;
    }
  }
}

}  // namespace
}  // namespace shardtrain
