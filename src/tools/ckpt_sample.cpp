// trainer-ckpt sample: checkpoint (or its export) + data set vocabulary + prompt -> text
// (gpt_sample.hpp). Encoding the prompt is the one part that knows the tokenizers.
#include <mpi.h>

#include <cstdio>
#include <filesystem>
#include <unordered_map>

#include "core/error.hpp"
#include "io/checkpoint.hpp"
#include "io/gpt2_bpe.hpp"
#include "io/text_tokenizer.hpp"
#include "io/token_dataset.hpp"
#include "io/weights_file.hpp"
#include "tools/gpt_sample.hpp"

namespace shardtrain {

namespace {

std::vector<TokenIndex> encode_prompt(const SampleCommand& cmd, const TokenDataset& data) {
  const TextTokenizer tok = data.tokenizer();
  const auto& vocab = data.vocab();
  std::vector<TokenIndex> ids;
  if (tok == TextTokenizer::Pretokenized)
    throw InputError(data.path() + ": a pretokenized data set does not carry its tokenizer; sample cannot encode "
                     "a prompt or decode text for it");
  if (tok == TextTokenizer::Wordpiece)
    throw InputError(data.path() + ": a wordpiece data set; sample encodes prompts for char, byte and gpt2 data "
                     "sets only");
  if (cmd.prompt.empty()) {
    if (tok != TextTokenizer::Gpt2)
      throw InputError("--prompt is needed: a " + std::string(name_of(tok)) +
                       " data set has no start token (gpt2 starts from <|endoftext|>)");
    ids.push_back(static_cast<TokenIndex>(vocab.size()) - 1);  // <|endoftext|>, GPT-2's last id
    if (vocab.back() != "<|endoftext|>")
      throw InputError(data.path() + ": the last gpt2 token is not <|endoftext|>; give a --prompt");
    return ids;
  }
  if (tok == TextTokenizer::Byte) {
    for (const char c : cmd.prompt) ids.push_back(static_cast<unsigned char>(c));
    return ids;
  }
  validate_utf8(cmd.prompt, "--prompt", 0, tok == TextTokenizer::Gpt2);
  if (tok == TextTokenizer::Char) {
    std::unordered_map<std::string, TokenIndex> id_of;
    for (std::size_t i = 0; i < vocab.size(); ++i) id_of.emplace(vocab[i], static_cast<TokenIndex>(i));
    for (std::size_t i = 0; i < cmd.prompt.size();) {
      const auto b = static_cast<unsigned char>(cmd.prompt[i]);
      const std::size_t len = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
      const std::string ch = cmd.prompt.substr(i, len);
      const auto it = id_of.find(ch);
      if (it == id_of.end())
        throw InputError("--prompt: character '" + ch + "' at byte offset " + std::to_string(i) +
                         " is not in the vocabulary of " + data.path() + " (" + std::to_string(vocab.size()) +
                         " characters)");
      ids.push_back(it->second);
      i += len;
    }
    return ids;
  }
  // gpt2: the merges are not in the data set; the BPE files must be the ones it was made with.
  if (cmd.bpe_dir.empty())
    throw InputError("--bpe DIR is needed to encode a prompt for a gpt2 data set (the folder of encoder.json and "
                     "vocab.bpe; share/data/fetch-gpt2-bpe.sh DIR)");
  Gpt2Bpe bpe(cmd.bpe_dir);
  if (bpe.vocab() != vocab) {
    std::size_t i = 0;
    while (i < vocab.size() && i < bpe.vocab().size() && vocab[i] == bpe.vocab()[i]) ++i;
    throw InputError(cmd.bpe_dir + "/encoder.json does not match the vocabulary of " + data.path() + " (" +
                     std::to_string(bpe.vocab().size()) + " vs " + std::to_string(vocab.size()) +
                     " tokens; first difference at id " + std::to_string(i) + ")");
  }
  std::vector<std::uint16_t> u;
  bpe.encode(cmd.prompt, cmd.prompt.size(), u);
  return std::vector<TokenIndex>(u.begin(), u.end());
}

}  // namespace

void run_sample_command(const SampleCommand& cmd) {
  const SampleOptions& opt = cmd.options;
  if (opt.tokens < 1) throw InputError("--tokens must be at least 1");
  if (!(opt.temperature >= 0.0)) throw InputError("--temperature must be >= 0 (0: greedy)");
  if (opt.top_k < 0) throw InputError("--top-k must be >= 0 (0: all tokens)");
  // A checkpoint, or an export of one (safetensors, or HDF5 that is not a checkpoint).
  GptSampleWeights w;
  std::string stored_data, source;
  if (WeightsFile::is_checkpoint(cmd.checkpoint)) {
    CheckpointReader ckpt(cmd.checkpoint, MPI_COMM_SELF);
    w = load_gpt_sample_weights(ckpt);
    stored_data = ckpt.meta().data_path;
    source = cmd.checkpoint + " at step " + std::to_string(ckpt.meta().step);
  } else {
    const WeightsFile file(cmd.checkpoint);
    w = load_gpt_sample_weights(file);
    stored_data = file.metadata_or("data_path", "");
    source = cmd.checkpoint + " (" + file.format() + " export" +
             (file.metadata().count("step") ? " of step " + file.metadata_or("step", "") : std::string()) + ")";
  }
  const std::string data_path = cmd.data.empty() ? stored_data : cmd.data;
  if (data_path.empty())
    throw InputError(cmd.checkpoint + ": the file records no data set (data_path); give --data PATH (sample decodes "
                     "with its vocabulary)");
  if (!std::filesystem::exists(data_path))
    throw InputError(data_path + ": no such file (the data set " +
                     (cmd.data.empty() ? "the checkpoint names; give --data PATH" : std::string("of --data")) +
                     ": sample decodes with its vocabulary)");
  TokenDataset data(data_path, MPI_COMM_SELF);
  if (data.vocab_size() != w.vocab)
    throw InputError(data_path + ": vocab_size " + std::to_string(data.vocab_size()) + " (" +
                     std::string(name_of(data.tokenizer())) + ") differs from the model's " +
                     std::to_string(w.vocab) + " (" + cmd.checkpoint + ")");
  std::vector<TokenIndex> ids = encode_prompt(cmd, data);
  const std::size_t n_prompt = ids.size();
  const GenerateResult gen = gpt_generate(w, ids, opt);
  const double secs = gen.seconds;
  if (cmd.print_ids) {
    std::string line = "prompt_ids:";
    for (std::size_t i = 0; i < n_prompt; ++i) (line += ' ') += std::to_string(ids[i]);  // not " " + ...: GCC 12 -Wrestrict false positive
    line += "\nids:";
    for (std::size_t i = n_prompt; i < ids.size(); ++i) (line += ' ') += std::to_string(ids[i]);
    std::printf("%s\nlogprob: %.12e\n", line.c_str(), gen.logprob);
  } else {
    std::vector<TokenIndex> shown(ids.begin() + (cmd.prompt.empty() ? 1 : 0), ids.end());  // not <|endoftext|>
    const std::string text = decode_tokens(data.tokenizer(), data.vocab(), shown);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::printf("\n");
  }
  std::fflush(stdout);
  std::fprintf(stderr, "sample: %lld tokens in %.3f s (%.1f tokens/s, %s), %s, %s data set %s\n",
               static_cast<long long>(opt.tokens), secs, static_cast<double>(opt.tokens) / secs,
               opt.use_cache ? "key/value cache" : "no cache", source.c_str(),
               std::string(name_of(data.tokenizer())).c_str(), data_path.c_str());
}

}  // namespace shardtrain
