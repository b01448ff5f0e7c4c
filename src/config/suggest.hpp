// shardtrain/config/suggest.hpp
// Did-you-mean for unknown keys and sections, from the schema's rows (internal to
// shardtrain_config): the text appended to an "unknown key"/"unknown section" message.
#pragma once

#include <string>
#include <string_view>

namespace shardtrain {

// " (did you mean optim.lr?)" for a mistyped key; a key that exists in another
// section ("[train] lr") is suggested there; with nothing close in a known section,
// " (keys of [parallel] are zero_stage, ...)"; otherwise "".
std::string suggest_key(std::string_view section, std::string_view key);

// " (did you mean [optim]?)", or the list of sections when nothing is close.
std::string suggest_section(std::string_view name);

}  // namespace shardtrain
