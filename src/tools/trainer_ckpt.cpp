// trainer-ckpt: looks inside shardtrain checkpoint files (format:
// share/doc/checkpoint-format.md). Subcommands:
//   info CKPT [--config]   what the file holds: run state, layout table, sizes (ckpt_info.cpp)
//   verify CKPT            every dataset's CRC-32; ranks of an mpirun split the reading (ckpt_info.cpp)
//   export CKPT OUT        parameters of one state vector to plain HDF5, .npy or
//                          safetensors (our names, or Hugging Face GPT-2's) (ckpt_export.cpp)
//   sample CKPT            text from a GPT checkpoint or its export (ckpt_sample.cpp, gpt_sample.*)
// This file is the command line: the options, which ranks run a subcommand,
// and the exit codes. Exit codes: 0 success, 2 bad input or usage (missing,
// foreign or damaged file, unknown name, bad arguments), 1 any other failure.
// Every error is one line "error: ..." on stderr, printed once.
// MPI: works as a singleton. `info`, `export` and `sample` run on rank 0 alone
// (other ranks wait and return its exit code); `verify` is collective over
// MPI_COMM_WORLD, and an InputError or a CheckpointIoError from the reader is
// one every rank reaches with the same message (the reader's contract), so
// rank 0 prints it. verify and export read under --io-timeout (the reader's
// I/O deadline: a read that never returns ends the tool with exit 1).
#include <mpi.h>

#include <CLI/CLI.hpp>

#include <cstdio>
#include <functional>
#include <new>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"
#include "core/exit_codes.hpp"
#include "core/mpi_world.hpp"
#include "core/state_vectors.hpp"
#include "io/checkpoint_phase.hpp"
#include "tools/ckpt_commands.hpp"
#include "tools/gpt_sample.hpp"
#include "version.hpp"

namespace {

using namespace shardtrain;

// Prints "error: MESSAGE" as one line (embedded newlines become "; ").
void print_error(std::string_view prefix, std::string message) {
  while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) message.pop_back();
  std::string line;
  for (char c : message) {
    if (c == '\n')
      line += "; ";
    else
      line += c;
  }
  std::fprintf(stderr, "error: %.*s%s\n", static_cast<int>(prefix.size()), prefix.data(), line.c_str());
  std::fflush(stderr);
}

// Runs fn on this rank alone and maps what it throws to an exit code, printing it.
int guarded(const std::function<int()>& fn) {
  try {
    return fn();
  } catch (const InputError& e) {
    print_error("", e.what());
    return kExitBadInput;
  } catch (const std::bad_alloc&) {
    print_error("", "out of memory");
    return kExitFailure;
  } catch (const std::exception& e) {
    print_error("", e.what());
    return kExitFailure;
  }
}

// Runs fn on rank 0 only; every rank returns its exit code.
int on_root(const std::function<int()>& fn) {
  int code = world_rank() == 0 ? guarded(fn) : kExitOk;
  std::fflush(stdout);
  MPI_Bcast(&code, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return code;
}

// ------------------------------------------------------------------ command line

int run(int argc, char** argv) {
  const bool root = world_rank() == 0;
  CLI::App app{
      "Inspect, verify and export shardtrain checkpoint files (HDF5; format: "
      "share/doc/checkpoint-format.md), and generate text from a GPT checkpoint (sample).",
      "trainer-ckpt"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("trainer-ckpt (shardtrain ") + kVersion + ")");
  app.footer(
      "Runs as a single process or under mpirun: info, export and sample then run on rank 0 alone, verify "
      "splits the reading over the ranks.\nExit codes: 0 success, 2 bad input or usage (missing, "
      "foreign or damaged file, unknown name), 1 other failure.");

  std::string ckpt_path, out_path, vector(saved_name(StateVector::Master)), format, name_style = "ours";
  std::vector<std::string> fp32_vectors;  // what export reads values from: master and the moments
  for (const SavedVector& v : kSavedVectors)
    if (v.type == DType::F32) fp32_vectors.emplace_back(v.name);
  bool config_only = false;
  std::vector<std::string> params;

  double io_timeout_s = 600.0;  // checkpoint.io_timeout_s's default
  const char* io_timeout_help =
      "Seconds a rank's read of CKPT may take before the tool gives up (exit 1, naming the rank, the phase "
      "and the file): storage that stops answering; 0: no limit";

  CLI::App* info = app.add_subcommand("info", "Print what a checkpoint holds: run state, layout table, sizes");
  info->add_option("CKPT", ckpt_path, "Checkpoint file (.h5)")->required();
  info->add_flag("--config", config_only, "Print only the resolved config text (TOML) stored in the file");
  info->footer(
      "Prints the step, data cursor (samples and tokens seen), optimizer updates, sampler seed, the "
      "world size, ZeRO stage and precision that wrote the file, the loss scaler state, the data set, "
      "when and by which version it was written; the layout table (name, shape, element offset, "
      "numel); and sizes: parameters, padded size, each state vector's type, bytes and file offset, "
      "and the file size. Opening the file validates its structure and the /config and /layout "
      "checksums; the state vectors are not read (use verify).");

  CLI::App* verify = app.add_subcommand("verify", "Check the CRC-32 of every dataset in a checkpoint");
  verify->add_option("CKPT", ckpt_path, "Checkpoint file (.h5)")->required();
  verify->add_option("--io-timeout", io_timeout_s, io_timeout_help)->check(CLI::NonNegativeNumber)->capture_default_str();
  verify->footer(
      "Reads every state vector whole and compares its CRC-32 with the one stored in the file, and "
      "checks /config and /layout. Prints one line per dataset (ok or CHECKSUM MISMATCH).\nUnder "
      "`mpirun -n N` each rank reads 1/N of every vector.\nExit codes: 0 all datasets intact, 2 the "
      "file is missing, damaged, truncated or not a shardtrain checkpoint, 1 other failure (e.g. an "
      "I/O error).");

  CLI::App* exp =
      app.add_subcommand("export", "Write parameters of one state vector to plain HDF5, .npy or safetensors");
  exp->add_option("CKPT", ckpt_path, "Checkpoint file (.h5)")->required();
  exp->add_option("--io-timeout", io_timeout_s, io_timeout_help)->check(CLI::NonNegativeNumber)->capture_default_str();
  exp->add_option("OUT", out_path,
                  "Output: .h5/.hdf5 (one float32 dataset per parameter, named by it, in its shape), "
                  ".npy (exactly one parameter) or .safetensors (F32 tensors; see --names)")
      ->required();
  exp->add_option("--param", params,
                  "Parameter to export, by its layout name, e.g. h.0.attn.c_attn.weight (repeatable; "
                  "default: all parameters)")
      ->expected(1)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)  // one name per --param, repeatable
      ->type_name("NAME");
  exp->add_option("--vector", vector, "State vector to read the values from")
      ->check(CLI::IsMember(fp32_vectors))
      ->capture_default_str();
  exp->add_option("--format", format,
                  "Output format (default: from OUT's extension: .h5/.hdf5, .npy, .safetensors)")
      ->check(CLI::IsMember({"hdf5", "npy", "safetensors"}));
  exp->add_option("--names", name_style,
                  "Tensor names in a safetensors file: ours (the layout's, e.g. h.0.attn.c_attn.weight) or "
                  "gpt2 (Hugging Face GPT2LMHeadModel's; GPT checkpoints only), bert or distilbert (Hugging "
                  "Face BertForSequenceClassification's / DistilBertForSequenceClassification's; encoder_classifier "
                  "checkpoints with that model.layout; OUT named model.safetensors gets config.json beside it)")
      ->check(CLI::IsMember({"ours", "gpt2", "bert", "distilbert"}))
      ->capture_default_str();
  exp->footer(
      "master holds the fp32 weights, exp_avg and exp_avg_sq AdamW's first and second moments; "
      "padding between tensors is not exported. An unknown --param is an error that lists close "
      "names. OUT is written to OUT.partial and renamed into place when complete; an existing OUT "
      "is replaced. export does not check the CRCs (run verify for that). The .h5 file also has "
      "root attributes source_checkpoint, vector and step, and the model keys below.\nsafetensors: a JSON "
      "header, then the tensors' little-endian float32 bytes in layout order, written one tensor block at a "
      "time; __metadata__ holds format (pt), producer, source_checkpoint, step, vector and names, and the "
      "model keys: model_type, for a transformer n_layer, n_head, d_model, seq_len and layernorm_eps, then "
      "vocab_size, data_path and the data set's tokenizer (when that file is still there), which "
      "model.init_from and `trainer-ckpt sample` read. With "
      "--names gpt2 (the whole model, no --param): transformer.wte.weight, transformer.wpe.weight, "
      "transformer.h.N.{ln_1,attn.c_attn,attn.c_proj,ln_2,mlp.c_fc,mlp.c_proj}.{weight,bias}, "
      "transformer.ln_f.{weight,bias}; the four Linear weights transposed to Conv1D's (in, out); "
      "lm_head.weight is left out, being tied to transformer.wte.weight (tied_weights in the "
      "metadata, as Hugging Face's own GPT-2 files do); the metadata adds vocab_size, n_positions, "
      "n_ctx, n_embd, n_layer, n_head, layer_norm_epsilon and activation_function. With --names gpt2 "
      "and OUT named model.safetensors, config.json is written beside it (replacing one there): "
      "GPT2Config's keys for that model (no dropout, gelu_new, tied LM head), so that transformers' "
      "GPT2LMHeadModel.from_pretrained(folder) loads the folder. A checkpoint of another model type is "
      "refused.");

  SampleCommand sample_cmd;
  CLI::App* sample = app.add_subcommand("sample", "Generate text from a GPT checkpoint or its export");
  sample->add_option("CKPT", sample_cmd.checkpoint,
                     "Checkpoint file (.h5) of a GPT, or its export (trainer-ckpt export: .safetensors under our "
                     "or GPT-2's names, or .h5)")
      ->required();
  sample->add_option("--prompt", sample_cmd.prompt,
                     "Text to continue (default: none; a gpt2 model then starts from <|endoftext|>)");
  sample->add_option("--tokens", sample_cmd.options.tokens, "Tokens to generate")->capture_default_str();
  sample->add_option("--temperature", sample_cmd.options.temperature,
                     "Softmax temperature; 0 is greedy decoding (the most likely token)")
      ->capture_default_str();
  sample->add_option("--top-k", sample_cmd.options.top_k, "Draw from the K most likely tokens only (0: all)")
      ->capture_default_str();
  sample->add_option("--seed", sample_cmd.options.seed, "Seed of the draws: the same seed gives the same text")
      ->capture_default_str();
  sample->add_option("--data", sample_cmd.data,
                     "Data set whose tokenizer and vocabulary to use (default: the data.path stored in CKPT, or an "
                     "export's data_path)");
  sample->add_option("--bpe", sample_cmd.bpe_dir,
                     "gpt2 data sets: folder of GPT-2's encoder.json and vocab.bpe, to encode the prompt");
  sample->add_flag("--ids", sample_cmd.print_ids,
                   "Print the token ids (lines 'prompt_ids: ...' and 'ids: ...') and the continuation's "
                   "log-probability under the model ('logprob: ...', at temperature 1) instead of the text");
  sample->add_flag("!--no-cache", sample_cmd.options.use_cache,
                   "Re-run the whole context for every token instead of keeping a key/value cache "
                   "(same tokens, slower; for comparison)");
  sample->footer(
      "Runs the GPT of CKPT (its fp32 master weights, in double precision; from an export, its tensors, with "
      "n_head, layernorm_eps and the data set from its metadata) on this one process, one token at "
      "a time with a key/value cache, and prints the prompt and its continuation decoded with the data "
      "set's tokenizer (char, byte or gpt2; pretokenized and wordpiece data sets are refused), then on stderr the speed. "
      "The model sees at most seq_len tokens: past that, the context restarts at the last seq_len/2 tokens. "
      "Draws come from (--seed, token index) alone, so the same checkpoint, prompt and options give the "
      "same text, with or without the cache.");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) {  // --help, --version
      std::ostringstream sink;
      if (root)
        app.exit(e);
      else
        app.exit(e, sink, sink);
      return kExitOk;
    }
    if (root) print_error("", std::string(e.what()) + " (run with --help for usage)");
    return kExitBadInput;
  }

  if (info->parsed()) return on_root([&] { return cmd_info(ckpt_path, config_only); });
  if (exp->parsed()) return on_root([&] { return cmd_export(ckpt_path, out_path, params, vector, format, name_style, io_timeout_s); });
  if (sample->parsed()) return on_root([&] {
      run_sample_command(sample_cmd);
      return kExitOk;
    });

  // verify: collective over every rank.
  try {
    cmd_verify(ckpt_path, io_timeout_s);
    return kExitOk;
  } catch (const InputError& e) {  // the reader's input errors are agreed by every rank
    if (root) print_error("", e.what());
    return kExitBadInput;
  } catch (const CheckpointIoError& e) {  // so are its failed reads (naming the failing rank)
    if (root) print_error("", e.what());
    return kExitFailure;
  } catch (const std::exception& e) {
    if (world_size() == 1) {
      print_error("", dynamic_cast<const std::bad_alloc*>(&e) ? "out of memory" : e.what());
      return kExitFailure;
    }
    // Possibly this rank alone: say so and end the job rather than leave others in a collective.
    print_error("rank " + std::to_string(world_rank()) + ": ", e.what());
    MPI_Abort(MPI_COMM_WORLD, kExitFailure);
    return kExitFailure;
  }
}

}  // namespace

int main(int argc, char** argv) {
  MpiSession mpi(&argc, &argv);
  return guarded([&] { return run(argc, argv); });
}

