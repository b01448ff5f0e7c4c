// tests/unit/config/schema_test.cpp
// The schema's rows (config/schema.hpp) drive parsing, to_toml and the generated
// doc: every key reads into its own field and only that one, to_toml writes the
// keys of the model's type, and the doc template must place every section once.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "config/config_doc.hpp"
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
        } else if constexpr (std::is_enum_v<T>) {  // the next of its names
          v = static_cast<T>((static_cast<std::size_t>(v) + 1) % enum_names(T{}).size());
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
    if (!k.model_types.empty()) set.push_back("model.type=\"" + std::string(name_of(k.model_types.front())) + "\"");
    if (dotted_name(k) == "recompute.budget_mb") set = {"recompute.policy=\"budget\"", "recompute.budget_mb=1"};
    if (dotted_name(k) == "model.attention") set.push_back("precision.mode=\"bf16\"");  // "fused" needs 16 bits
    if (k.section == "guard") set.push_back("checkpoint.every_steps=1");  // "rollback" needs checkpoints
    if (dotted_name(k) == "parallel.share_device") set.push_back("parallel.device_collectives=\"mpi\"");  // needs it
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

// Every enum key (model.type, precision.mode, the choices of core/run_choices.hpp)
// reads each of its names into the value at that name's index, and to_toml writes
// that name back.
TEST_F(ConfigSchema, EveryEnumKeyReadsEachOfItsNames) {
  std::size_t enum_keys = 0;
  for (const KeySpec& k : config_schema()) {
    if (k.field.index() < k_first_enum_field) continue;
    ++enum_keys;
    SCOPED_TRACE(dotted_name(k));
    ASSERT_FALSE(k.choices.empty());
    for (std::size_t i = 0; i < k.choices.size(); ++i) {
      const std::string name(k.choices[i]);
      std::vector<std::string> set;
      if (!k.model_types.empty()) set.push_back("model.type=\"" + std::string(name_of(k.model_types.front())) + "\"");
      if (name == "fused") set.push_back("precision.mode=\"bf16\"");   // needs 16 bits
      if (name == "budget") set.push_back("recompute.budget_mb=1");  // needs a budget
      if (name == "rollback") set.push_back("checkpoint.every_steps=1");  // needs checkpoints
      set.push_back(dotted_name(k) + "=\"" + name + "\"");
      const RunConfig got = parse_run_config("[data]\npath = \"" + m_data + "\"\n", "inputs/x.toml", set);
      EXPECT_EQ(toml_value(k, got), "\"" + name + "\"");
      std::visit(
          [&](const auto& field) {
            const auto& v = field.get(got);
            if constexpr (std::is_enum_v<std::remove_cvref_t<decltype(v)>>)
              EXPECT_EQ(static_cast<std::size_t>(v), i) << name;
            else
              ADD_FAILURE() << "not an enum field";
          },
          k.field);
    }
  }
  EXPECT_EQ(enum_keys, 17u);  // model.type, precision.mode and the fifteen of core/run_choices.hpp
}

TEST_F(ConfigSchema, ToTomlWritesTheKeysOfTheModelTypeOnly) {
  for (const ModelType model_type : k_model_type_values) {
    const std::string type(name_of(model_type));
    SCOPED_TRACE(type);
    const RunConfig config = parse_run_config(
        "[model]\ntype = \"" + type + "\"\n[data]\npath = \"" + m_data + "\"\n", "inputs/x.toml");
    const std::string text = to_toml(config);
    for (const KeySpec& k : config_schema()) {
      const bool written = text.find("\n" + std::string(k.key) + " = ") != std::string::npos;
      if (k.key == "type") continue;  // model.type and optim.type share the name
      // A key written only when set (model.init_from, train.sample_prompt) is left out while it is empty.
      const bool unset = k.written_when_set && toml_value(k, config) == "\"\"";
      const bool expected =
          used_by_model_type(k, model_type) && !unset && !(dotted_name(k) == "model.seq_len" && type != "gpt");
      EXPECT_EQ(written, expected) << dotted_name(k) << " in\n" << text;
    }
  }
}

std::string all_sections_but(std::string_view skip) {
  std::string text;
  for (std::string_view s : config_sections())
    if (s != skip) text += "{{keys " + std::string(s) + "}}\n";
  return text;
}

TEST(ConfigDoc, FillsEachSectionsTableAndDropsTemplateComments) {
  const std::string doc = render_config_doc("{{! a comment }}\n# Title\n" + all_sections_but(""));
  EXPECT_EQ(doc.find("a comment"), std::string::npos);
  EXPECT_NE(doc.find("# Title\n| key | type | default | range | used by | meaning |\n"), std::string::npos);
  EXPECT_NE(doc.find("| `n_layer` | integer | `4` | 1 … 2147483647 | gpt, encoder_classifier | "), std::string::npos);
  EXPECT_NE(doc.find("| `path` | string | **required** | an existing regular file | "), std::string::npos);
  EXPECT_NE(doc.find("| `zero_stage` | integer | `0` | `0`, `1`, `2` or `3` | "), std::string::npos);
  EXPECT_NE(doc.find("| `backoff_factor` | float | `0.5` | (0, 1) | "), std::string::npos);
}

TEST(ConfigDoc, TemplateMustPlaceEverySectionOnce) {
  EXPECT_THROW(render_config_doc(all_sections_but("optim")), InputError);
  EXPECT_THROW(render_config_doc(all_sections_but("") + "{{keys optim}}\n"), InputError);
  try {
    render_config_doc("intro\n{{keys optimizer}}\n" + all_sections_but(""));
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "template line 2: expected {{keys SECTION}} with a section of the schema, got "
                           "'{{keys optimizer}}'");
  }
}

}  // namespace
}  // namespace shardtrain
