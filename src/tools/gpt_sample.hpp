// shardtrain/tools/gpt_sample.hpp
// Owns `trainer-ckpt sample`: a GPT's weights from a checkpoint (its fp32 master
// vector and stored config) or an export (io/weights_file.hpp, the dims from its
// metadata), the prompt encoded with the data set's tokenizer, and the text; the
// forward and the sampling loop are infer/gpt_kv.hpp's.
#pragma once

#include <string>

#include "infer/gpt_kv.hpp"

namespace shardtrain {

class CheckpointReader;
class WeightsFile;

// The fp32 master weights of a GPT checkpoint and its stored model config
// (model.type must be "gpt"); InputError naming the file and the tensor otherwise.
GptSampleWeights load_gpt_sample_weights(CheckpointReader& ckpt);
// The same from an export (io/weights_file.hpp: safetensors under our names or
// GPT-2's, or HDF5), its n_head and layernorm_eps from the file's metadata
// (`trainer-ckpt export` writes them); InputError naming what is missing.
GptSampleWeights load_gpt_sample_weights(const WeightsFile& file);

}  // namespace shardtrain

namespace shardtrain {

// `trainer-ckpt sample` (src/tools/ckpt_sample.cpp): loads the weights of CKPT (a
// checkpoint, or an export: .safetensors, or an .h5 that is not a checkpoint)
// and its data set's vocabulary (data.path stored in CKPT or data_path in the
// export's metadata, or `data`), encodes `prompt`
// with the data set's tokenizer (gpt2: with the BPE files in `bpe_dir`), generates,
// and prints the prompt and continuation as text (or, with `print_ids`, the ids
// and the continuation's log-probability under the model), and the speed on stderr.
struct SampleCommand {
  std::string checkpoint, data, bpe_dir, prompt;
  SampleOptions options;
  bool print_ids = false;
};
void run_sample_command(const SampleCommand& cmd);

}  // namespace shardtrain
