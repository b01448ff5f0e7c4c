// shardtrain/config/toml_text.hpp
// Spelling values as text, shared by the config library's parser, to_toml and
// the doc generator (internal to shardtrain_config): TOML literals that read
// back exactly, and user text made safe for a one-line message.
#pragma once

#include <string>
#include <string_view>

namespace shardtrain {

// User text for a one-line message: control characters written as escapes.
std::string printable(std::string_view s);

// A TOML basic string, quoted and escaped.
std::string toml_string(std::string_view s);

// The shortest decimal form that reads back to the same double, always spelled
// as a TOML float ("1.0", "1e-05", "inf").
std::string toml_float(double v);

// A number in a message: the shortest round-trip form, e.g. -0.001, 1e-05.
std::string show(double v);

}  // namespace shardtrain
