// shardtrain/model/block_chain.hpp
// Owns the running of a chain of transformer blocks (model/transformer_block.hpp)
// by a RecomputeSchedule (model/recompute.hpp), shared by the GPT and the
// encoder classifier: the chain's part of the model's activation arena (the
// schedule's LIFO stack of internals and checkpoint slots, and its scratch
// block), the forward pass (ops [0, forward_ops_in_pass)) and the rest of the
// ops in backward (re-running block forwards where the schedule says so), the
// parameter-group protocol of the blocks (block l is group l + 1: acquired
// right before its forward or backward, released right after, the next group
// the ops touch prefetched), and the measured use of the arena.
// Invariants:
//  - The arena is the schedule's plan as given (stack_bytes, uses_scratch: what
//    the memory plan reports); the ops are replayed on this chain (a schedule
//    for another chain throws) and run from the replay. A push past the planned
//    stack throws: more than planned cannot be used.
//  - Every policy computes bitwise the same tensors as "none": a recomputed
//    forward runs the same kernels on the same input with the same
//    TransformerBlockRun (dropout masks are counter-based, a function of
//    (seed, stream, global element index) only, kernels/dropout.hpp: nothing
//    to save or restore), and writes its internals where backward reads them.
//  - Block l runs with the pass's TransformerBlockRun, its dropout stream
//    moved to run.stream + 2 l (two sites per block).
//  - The workspace's dres carries d(x_{l+1}) between backward ops; a recomputed
//    forward only writes qkv, att and dsmall, never dres.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/model_ops.hpp"
#include "core/param_provider.hpp"
#include "model/recompute.hpp"
#include "model/transformer_block.hpp"

namespace shardtrain {

// The chain of n_layer blocks of `shape` for the scheduler: per block its saved
// bytes (internals and output), its output (B T C), its forward FLOPs over the
// shape's max_batch sequences; the scratch block is one block's internals.
// Elements of `element_bytes`. other_forward_flops (the model's rest) is the
// caller's to set.
ChainCosts transformer_chain_costs(const TransformerBlockShape& shape, std::int64_t n_layer,
                                   std::int64_t element_bytes, bool causal);

// Elements of the chain's arena under `schedule`: its stack and, when it drops
// internals, the scratch block (block_elems: transformer_block_saved_elems).
std::int64_t block_chain_elems(std::int64_t block_elems, const RecomputeSchedule& schedule);

template <class T>
class BlockChain {
 public:
  // schedule: planned for transformer_chain_costs(shape, n_layer, sizeof(T), ...)
  // (nullptr: "none"). causal: the forward FLOPs the replay counts.
  BlockChain(const TransformerBlockShape& shape, std::int64_t n_layer, bool causal, const RecomputeSchedule* schedule);

  // Elements of the model's activation arena the chain takes (block_chain_elems).
  std::int64_t arena_elems() const;
  // The chain's part of the arena: arena_elems() elements from `base`.
  void carve(T* base);
  // Binds what every pass uses: the kernels, the provider, the offsets of block
  // 0's 12 tensors relative to its group (block l's at + 12 l), LayerNorm eps,
  // the blocks' workspace, and the groups prefetched after the last op of the
  // forward pass and of the backward (-1: none).
  void bind(ModelOps<T>& ops, ParamProvider<T>& provider, const std::int64_t* block_rel, T eps,
            const TransformerBlockWork<T>& ws, int group_after_forward, int group_after_backward);

  // The forward pass from x_0 (held by the model until backward() returns) with
  // `run` (batch, mask, dropout; run.stream is block 0's); kernels only when
  // `work` (a rank with an empty micro-batch makes the same provider calls).
  // Starts afresh: a forward without its backward (evaluation) leaves nothing held.
  void forward(const T* x0, const TransformerBlockRun& run, bool work);
  // x_n, the last block's output: valid from forward() until backward() runs
  // the last block's backward.
  const T* output() const { return input_of(m_n); }
  // The group the backward's first op acquires (for the model's prefetch).
  int first_backward_group() const;
  // The rest of the schedule, with the last forward's run: ws.dres holds
  // d(x_n) on entry and d(x_0) on return; gradients accumulate (grads_zero per
  // group as the provider says).
  void backward();

  const RecomputeSchedule& schedule() const { return m_schedule; }
  std::int64_t block_elems() const { return m_per_block; }
  // Measured, in elements: the stack's high-water over the chain's life and
  // since the last forward() began; whether a forward dropped its internals.
  std::int64_t stack_high_elems() const { return m_stack_high; }
  std::int64_t pass_stack_high_elems() const { return m_pass_stack_high; }
  bool scratch_used() const { return m_scratch_used; }

 private:
  using Acts = TransformerBlockActs<T>;
  void run_ops(std::size_t first, std::size_t last);
  int next_group(std::size_t k) const;  // the group the op after k acquires (-1: none)
  const T* input_of(int layer) const;   // x_layer wherever the schedule keeps it
  T* stack_push(std::int64_t elems);
  void stack_pop(const T* region);
  TransformerBlockRun block_run(int layer) const;

  TransformerBlockShape m_shape;
  int m_n = 0;
  RecomputeSchedule m_schedule;
  std::int64_t m_per_block = 0;                // elements one block saves
  bool m_has_scratch = false;                  // the plan's uses_scratch
  T* m_stack = nullptr;
  std::int64_t m_stack_capacity = 0;           // elements: the plan's stack_bytes
  std::int64_t m_stack_top = 0;
  std::int64_t m_stack_high = 0;
  std::int64_t m_pass_stack_high = 0;
  std::vector<std::int64_t> m_stack_marks;     // start of every region held, bottom to top
  Acts m_scratch{};                            // internals of a forward that keeps none
  bool m_scratch_used = false;
  std::vector<Acts> m_int_acts;                // per block: its internals while held
  std::vector<char> m_int_held;
  std::vector<T*> m_ck_of;                     // per block input x_j: its checkpoint, or nullptr

  ModelOps<T>* m_ops = nullptr;
  ParamProvider<T>* m_provider = nullptr;
  const std::int64_t* m_rel = nullptr;
  T m_eps{};
  TransformerBlockWork<T> m_ws{};
  int m_after_forward = -1, m_after_backward = -1;

  const T* m_x0 = nullptr;
  TransformerBlockRun m_run{};
  bool m_work = false;
};

extern template class BlockChain<float>;
extern template class BlockChain<double>;
extern template class BlockChain<f16>;
extern template class BlockChain<bf16>;

}  // namespace shardtrain
