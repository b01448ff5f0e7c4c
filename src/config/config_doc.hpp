// shardtrain/config/config_doc.hpp
// The input file reference (share/doc/config.md), generated: a Markdown template
// whose prose is written by hand (src/config/config.md.in), with each section's
// table of keys filled in from the schema's rows (schema.hpp).
#pragma once

#include <string>
#include <string_view>

namespace shardtrain {

// `template_text` with every line "{{keys SECTION}}" replaced by the table of that
// section's keys (key, type, default, range, used by (model sections), meaning),
// lines starting "{{!" (the template's own comments) dropped, and a first line
// saying the result is generated.
// Every section of the schema must be placed exactly once. Throws InputError naming
// the template line for an unknown placeholder or section, and Error for a schema
// text that would break a table (a '|' or a line break in a cell).
std::string render_config_doc(std::string_view template_text);

}  // namespace shardtrain
