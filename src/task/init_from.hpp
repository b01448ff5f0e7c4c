// shardtrain/task/init_from.hpp
// Owns model.init_from: a run that starts from the weights of an exported file
// (io/weights_file.hpp: safetensors under our names or GPT-2's, or HDF5, as
// `trainer-ckpt export` writes them) instead of random ones, at step 0 with a
// fresh optimizer, at any rank count and ZeRO stage.
//  - Matching: every tensor of the model's layout must be in the file, in its
//    shape, and the file must hold nothing else. An encoder_classifier in the
//    BERT family's layouts also reads Hugging Face's names (io/hf_bert_names.hpp:
//    BertForSequenceClassification, DistilBertForSequenceClassification or their
//    base models; a folder or its model.safetensors, with config.json beside it,
//    whose dimensions must be the model's): c_attn from query / key / value, and
//    a head tensor the file lacks keeps its fresh initial value (the log line
//    names each); a pretraining head the file holds (the published
//    checkpoints' masked-LM heads) is skipped and named. GPT-2 names
//    ("transformer.h.0.attn.c_attn.weight", ...; a gpt only; io/gpt2_names.hpp)
//    are recognised by their "transformer." prefix; their four Linear weights
//    per block are Conv1D's (in, out), read transposed. A gpt's vocabulary (wte.weight's rows,
//    and the file's recorded vocab_size and tokenizer when it has them) must be
//    the data set's. Each refusal names the file, the tensor and both shapes
//    (or both vocabularies).
//  - Reading: each rank fills only its shard of the fp32 weights
//    (ModelState::shard_view), reading only the bytes of that range (pread at
//    the tensor's offset), in blocks of at most kInitFromChunk elements (a
//    transposed block costs one more such buffer), then the stage's replicated
//    copies are spread (replicate_shard) as after a checkpoint load.
//  - Errors: the checks and reads run on every rank; any rank's error becomes
//    every rank's (agree_on_failure: the lowest failing rank's message), before
//    anything collective, so no rank is left in a collective. Each rank's part
//    runs under the I/O deadline (checkpoint.io_timeout_s, io/checkpoint_phase.hpp):
//    a read that never returns ends the job (exit 1) with "model.init_from I/O:
//    phase 'read' of FILE has not finished on this rank" from that rank.
// Collective over `comm`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/run_config.hpp"
#include "parallel/model_state.hpp"
#include "parallel/mpi/mpi_communicator.hpp"
#include "task/task.hpp"

namespace shardtrain {

inline constexpr std::int64_t kInitFromChunk = std::int64_t{1} << 20;  // elements per read

// What was loaded, for the log line.
struct InitFromReport {
  std::string format;        // "safetensors" | "hdf5"
  std::string names;         // "ours" | "gpt2" | "bert" | "distilbert" (Hugging Face's)
  std::int64_t tensors = 0, transposed = 0, parameters = 0;
  std::uint64_t bytes_read = 0;  // by this rank
  std::uint64_t file_bytes = 0;  // of all the model's tensors in the file
  std::string source;        // the metadata's source_checkpoint and step, when recorded
  std::vector<std::string> fresh;  // our head tensors the Hugging Face file lacks (initialised fresh)
  std::vector<std::string> unused;  // its pretraining head's tensors, skipped (hf_bert_names.hpp)
  double seconds = 0.0;
};

// Loads cfg.model.init_from into `state` (its fp32 weights and, for a 16-bit
// model, their rounded copy), spreads them to the stage's replicas over
// `state_comm`. Collective over `comm`; every rank throws the same
// InputError (a file that does not fit the model) or AgreedError.
template <class P>
InitFromReport load_init_from(const RunConfig& cfg, MpiCommunicator& comm, Communicator& state_comm,
                              ModelState<P>& state, const DataIdentity& data);

// The start of a run from cfg.model.init_from when there is no checkpoint to
// resume from (session/checkpoint_session.hpp decides): load_init_from, then
// the weights CRC as every rank holds them (rundir/weights_crc.hpp). Returns
// rank 0's log line ("init_from: FILE: ... weights crc32 ..."; empty on other
// ranks). Collective over `comm`; throws as load_init_from.
template <class P>
std::string start_from_exported_weights(const RunConfig& cfg, MpiCommunicator& comm, Communicator& state_comm,
                                        ModelState<P>& state, const DataIdentity& data);

}  // namespace shardtrain
