// shardtrain/model/recompute.hpp
// Owns the recompute scheduler: which activations of a chain of layers (the
// transformer blocks) are kept through the forward pass and which are
// recomputed in backward, decided before the first step from the chain's
// declared costs and the policy ([recompute] in the config).
//
// The model of a chain of n layers (Rotor / revolve style; Griewank & Walther
// 2000, Beaumont et al. 2019):
//  - x_i is the input of layer i (x_0 is given and always kept; x_{i+1} is
//    layer i's output). Layer i running "with internals" saves what its backward
//    needs, `saved_bytes[i]` INCLUDING its output x_{i+1}, in an internals slot;
//    running "without" writes them to one shared scratch block and copies x_{i+1}
//    to a checkpoint slot of `output_bytes[i]` bytes.
//  - Ops (RecomputeOp): Forward(i, keep) runs layer i from x_i; Backward(i) needs
//    x_i and layer i's internals and frees the internals; FreeInput(j) frees the
//    checkpoint slot of x_j. The op list is one training iteration's chain work:
//    its prefix up to the first Forward(n-1, keep) is the forward pass (the loss
//    head runs after it), every Backward comes after.
//  - Memory: internals and checkpoints live on one stack, in the order the ops
//    make them (every schedule here frees in LIFO order; simulate() rejects one
//    that does not). A Forward(i, drop) followed by FreeInput(i) of its own input
//    on top of the stack frees that input before pushing x_{i+1}: the output
//    waits in the scratch block, so a chain of such forwards holds one
//    checkpoint at a time. peak_bytes = the stack's highest point + the scratch
//    block when any Forward drops its internals; the executor allocates exactly it.
// Policies: none (keep every layer's internals), full (keep only layer inputs:
// every layer recomputed once), sqrt (keep every ceil(sqrt(n))-th input,
// recompute one segment at a time), budget (dynamic programming over
// (first, last, free memory): the schedule with the fewest recomputed forward
// FLOPs whose peak fits the budget among the Rotor-shaped schedules -- a
// checkpoint stays held until the segment it starts is done; segments may be
// recomputed recursively, i.e. more than one level. Memory is counted in units
// of the gcd of all sizes while the budget is at most 1024 of them (then the
// result is optimal in that shape), else in 1/1024 of the budget, sizes rounded
// up (feasible, at most ~2n units from optimal). sqrt and full are candidates
// too, so budget never recomputes more than either when it fits. Op lists that
// consume a still-needed checkpoint and recompute it from further left can be
// cheaper on non-uniform chains; they are outside the DP.)
// Invariants: every schedule computes exactly the same tensors as `none`
// (recomputation repeats deterministic kernels on the same inputs), each
// Backward(i) appears once, in order n-1..0; simulate() checks an op list.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/run_choices.hpp"

namespace shardtrain {

struct ChainCosts {
  std::vector<std::int64_t> saved_bytes;   // per layer: internals kept for backward, output included
  std::vector<std::int64_t> output_bytes;  // per layer: its output x_{i+1}
  std::vector<double> forward_flops;       // per layer
  std::int64_t scratch_bytes = 0;          // the shared block for forwards that drop internals
  double other_forward_flops = 0;          // the rest of the model's forward (embeddings, head)
  int size() const { return static_cast<int>(saved_bytes.size()); }
};

struct RecomputeOp {
  enum class Kind { Forward, Backward, FreeInput };
  Kind kind = Kind::Forward;
  int layer = 0;      // Forward/Backward: the layer; FreeInput: j of x_j
  bool keep = true;   // Forward: save internals for backward (else scratch + checkpoint output)
};

struct RecomputeSchedule {
  std::string policy;  // for reports: the name of the policy that made it (name_of), or a test's label
  std::vector<RecomputeOp> ops;
  int forward_ops_in_pass = 0;     // ops[0, forward_ops_in_pass) are the forward pass
  int internal_slots = 0;          // internals held at once, at most (for the report)
  int input_slots = 0;             // checkpoints held at once, at most (for the report)
  bool uses_scratch = false;
  std::int64_t stack_bytes = 0;    // the stack's highest point
  std::int64_t peak_bytes = 0;     // the chain's activation bytes (stack + scratch)
  std::int64_t slot_bytes = 0;     // bytes of one internals slot (largest layer)
  std::int64_t input_bytes = 0;    // bytes of one checkpoint slot (largest output)
  double forwards = 0;             // forward FLOPs of the chain over one iteration
  double extra_flops = 0;          // forwards beyond one pass, as a fraction of the model's forward
  std::vector<bool> kept_inputs;   // per layer: x_i held as a checkpoint during the forward pass
  std::vector<bool> kept_internals;  // per layer: internals saved during the forward pass
};

// Builds the schedule for `policy`. For Budget, `budget_bytes` bounds
// peak_bytes; returns nullopt when even the cheapest-memory schedule does not
// fit. Other policies ignore the budget.
std::optional<RecomputeSchedule> make_recompute_schedule(RecomputePolicy policy,
                                                         const ChainCosts& costs,
                                                         std::int64_t budget_bytes = 0);

// The smallest budget (bytes) make_recompute_schedule(Budget) accepts for
// this chain: what the plan reports as the least an unmeetable budget needs.
std::int64_t min_recompute_peak(const ChainCosts& costs);

// Replays `ops` on the chain: checks the order and that every input and internals
// slot a Forward or Backward needs is present, and fills the slot counts,
// peak_bytes, forwards and extra_flops of `s` from them. Throws Error when invalid.
void simulate(const ChainCosts& costs, RecomputeSchedule& s);

// True when ops[k] is a Forward(i, drop) directly followed by FreeInput(i): the
// input is freed before the output is pushed (see the stack rule above).
bool forward_frees_input(const std::vector<RecomputeOp>& ops, std::size_t k);

// One line per fact, for --plan: kept inputs and internals, recompute pattern,
// peak, extra FLOPs.
std::string format_schedule(const RecomputeSchedule& s);

}  // namespace shardtrain
