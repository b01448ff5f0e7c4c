// The task of a run's model.type (task/task.hpp) and the plan of a run.
#include "task/task.hpp"

#include <algorithm>

#include "core/dtype.hpp"
#include "task/model_registry.hpp"
#include "rundir/process_memory.hpp"
#include "task/task_factory.hpp"

namespace shardtrain {

template <class P>
std::unique_ptr<Task<P>> make_task(const RunConfig& config, MpiCommunicator& comm, int plan_world) {
  if (model_row(config.model.type).data == ModelData::TokenStream) return make_gpt_task<P>(config, comm, plan_world);
  return make_classifier_task<P>(config, comm, plan_world);
}

template std::unique_ptr<Task<float>> make_task<float>(const RunConfig&, MpiCommunicator&, int);
template std::unique_ptr<Task<f16>> make_task<f16>(const RunConfig&, MpiCommunicator&, int);
template std::unique_ptr<Task<bf16>> make_task<bf16>(const RunConfig&, MpiCommunicator&, int);

namespace {

template <class P>
MemoryPlan plan_and_measure(const RunConfig& config, MpiCommunicator& comm, int world) {
  const auto task = make_task<P>(config, comm, world);  // the data set stays open, as in a run
  MemoryPlan plan = task->plan();
  measure_process_before_model(plan, comm, config, task->make_layout());
  // The probe allocates a gradient-sized buffer: only for this job's rank count,
  // and not when the plan already exceeds the limit without it.
  const double limit = config.train.memory_limit_mb;
  if (world == comm.size() &&
      (limit <= 0 || static_cast<double>(plan.process_peak()) <= limit * 1024.0 * 1024.0)) {
    ParamLayout layout = task->make_layout();
    layout.finalize(world);
    measure_collective_scratch(plan, config, layout, dtype_of<P>(), comm);
  }
  return plan;
}

}  // namespace

MemoryPlan plan_run(const RunConfig& config, MPI_Comm comm, int world) {
  MpiCommunicator c(comm);
  return with_storage_type(config.precision.mode,
                           [&]<class P>() { return plan_and_measure<P>(config, c, world); });
}

std::int64_t run_max_batch(const RunConfig& c, int world) {
  return std::min<std::int64_t>(c.train.micro_batch, (c.train.batch_size + world - 1) / world);
}

}  // namespace shardtrain
