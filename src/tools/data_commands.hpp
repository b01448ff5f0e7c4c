// shardtrain/tools/data_commands.hpp
// One trainer-data importer's subcommand: each importer family registers its
// subcommands on the app (its own file in src/tools/) and returns what to run
// when one of them was parsed. trainer_data.cpp owns main, the exit codes and
// the error printing: run() throws InputError (exit 2, message naming the file)
// or another exception (exit 1).
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <vector>

namespace shardtrain {

struct DataCommand {
  CLI::App* sub = nullptr;      // the registered subcommand
  std::function<void()> run;    // called once if sub->parsed()
};

// `mnist` (src/tools/data_mnist.cpp).
std::vector<DataCommand> add_mnist_commands(CLI::App& app);
// `textdir` and `csv` (src/tools/data_text.cpp).
std::vector<DataCommand> add_labelled_text_commands(CLI::App& app);
// `tokens` (src/tools/data_tokens.cpp).
std::vector<DataCommand> add_token_commands(CLI::App& app);

}  // namespace shardtrain
