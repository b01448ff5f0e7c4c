// The task of a run's model.type (train/task.hpp) and the plan of a run.
#include "train/task.hpp"

#include <algorithm>

#include "train/task_factory.hpp"

namespace shardtrain {

template <class P>
std::unique_ptr<Task<P>> make_task(const RunConfig& config, MpiCommunicator& comm, int plan_world) {
  if (config.model.type == "gpt") return make_gpt_task<P>(config, comm, plan_world);
  return make_classifier_task<P>(config, comm, plan_world);
}

template std::unique_ptr<Task<float>> make_task<float>(const RunConfig&, MpiCommunicator&, int);
template std::unique_ptr<Task<f16>> make_task<f16>(const RunConfig&, MpiCommunicator&, int);
template std::unique_ptr<Task<bf16>> make_task<bf16>(const RunConfig&, MpiCommunicator&, int);

MemoryPlan plan_run(const RunConfig& config, MPI_Comm comm, int world) {
  MpiCommunicator c(comm);
  const std::string& mode = config.precision.mode;
  if (mode == "fp16") return make_task<f16>(config, c, world)->plan();
  if (mode == "bf16") return make_task<bf16>(config, c, world)->plan();
  return make_task<float>(config, c, world)->plan();
}

std::int64_t run_max_batch(const RunConfig& c, int world) {
  return std::min<std::int64_t>(c.train.micro_batch, (c.train.batch_size + world - 1) / world);
}

}  // namespace shardtrain
