// BlockChain: the chain of transformer blocks run by a RecomputeSchedule
// (block_chain.hpp), the one executor of the GPT's and the encoder's blocks.
#include "model/block_chain.hpp"

#include <algorithm>
#include <string>

#include "core/error.hpp"
#include "core/half.hpp"

namespace shardtrain {

ChainCosts transformer_chain_costs(const TransformerBlockShape& s, std::int64_t n_layer, std::int64_t element_bytes,
                                   bool causal) {
  const std::int64_t per_block = transformer_block_saved_elems(s);
  const std::int64_t bt = s.max_batch * s.seq_len;
  const double block = transformer_block_forward_flops(static_cast<double>(bt), s.seq_len, s.channels, causal);
  ChainCosts costs;
  for (std::int64_t l = 0; l < n_layer; ++l) {
    costs.saved_bytes.push_back(per_block * element_bytes);
    costs.output_bytes.push_back(bt * s.channels * element_bytes);
    costs.forward_flops.push_back(block);
  }
  costs.scratch_bytes = per_block * element_bytes;
  return costs;
}

std::int64_t block_chain_elems(std::int64_t block_elems, const RecomputeSchedule& s) {
  // transformer_chain_costs' sizes are whole elements, so the stack is too
  // (the element size recovered from the slot size).
  const std::int64_t elem = block_elems > 0 ? s.slot_bytes / block_elems : 1;
  return s.stack_bytes / elem + (s.uses_scratch ? block_elems : 0);
}

template <class T>
BlockChain<T>::BlockChain(const TransformerBlockShape& shape, std::int64_t n_layer, bool causal,
                          const RecomputeSchedule* schedule)
    : m_shape(shape), m_n(static_cast<int>(n_layer)) {
  SHARDTRAIN_CHECK(n_layer >= 1, "a block chain needs at least one block");
  const ChainCosts costs = transformer_chain_costs(shape, n_layer, sizeof(T), causal);
  // The arena is the schedule's plan as given; the ops are replayed on this
  // chain (a schedule for another chain fails here) and run from the replay.
  const RecomputeSchedule planned = schedule ? *schedule : *make_recompute_schedule(RecomputePolicy::None, costs);
  m_schedule = planned;
  simulate(costs, m_schedule);
  m_per_block = transformer_block_saved_elems(shape);
  m_stack_capacity = planned.stack_bytes / static_cast<std::int64_t>(sizeof(T));
  m_has_scratch = planned.uses_scratch;
}

template <class T>
std::int64_t BlockChain<T>::arena_elems() const {
  return m_stack_capacity + (m_has_scratch ? m_per_block : 0);
}

template <class T>
void BlockChain<T>::carve(T* base) {
  m_stack = base;
  if (m_has_scratch) m_scratch = transformer_block_carve(base + m_stack_capacity, m_shape);
}

template <class T>
void BlockChain<T>::bind(ModelOps<T>& ops, ParamProvider<T>& provider, const std::int64_t* block_rel, T eps,
                         const TransformerBlockWork<T>& ws, int group_after_forward, int group_after_backward) {
  m_ops = &ops;
  m_provider = &provider;
  m_rel = block_rel;
  m_eps = eps;
  m_ws = ws;
  m_after_forward = group_after_forward;
  m_after_backward = group_after_backward;
}

template <class T>
TransformerBlockRun BlockChain<T>::block_run(int layer) const {
  TransformerBlockRun run = m_run;
  run.stream = m_run.stream + 2 * static_cast<std::uint64_t>(layer);
  return run;
}

template <class T>
const T* BlockChain<T>::input_of(int l) const {
  if (l == 0) return m_x0;
  if (m_ck_of[l]) return m_ck_of[l];
  SHARDTRAIN_CHECK(m_int_held[l - 1], "recompute: the input of block " + std::to_string(l) + " is not held");
  return m_int_acts[l - 1].out;
}

template <class T>
T* BlockChain<T>::stack_push(std::int64_t elems) {
  SHARDTRAIN_CHECK(m_stack_top + elems <= m_stack_capacity,
                   "recompute: activation stack overflow (schedule and arena disagree)");
  m_stack_marks.push_back(m_stack_top);
  T* r = m_stack + m_stack_top;
  m_stack_top += elems;
  m_pass_stack_high = std::max(m_pass_stack_high, m_stack_top);
  m_stack_high = std::max(m_stack_high, m_stack_top);
  return r;
}

template <class T>
void BlockChain<T>::stack_pop(const T* region) {
  SHARDTRAIN_CHECK(!m_stack_marks.empty() && m_stack + m_stack_marks.back() == region,
                   "recompute: activation freed out of LIFO order");
  m_stack_top = m_stack_marks.back();
  m_stack_marks.pop_back();
}

template <class T>
int BlockChain<T>::next_group(std::size_t k) const {
  const std::size_t fp = static_cast<std::size_t>(m_schedule.forward_ops_in_pass);
  const std::size_t end = k < fp ? fp : m_schedule.ops.size();
  for (std::size_t j = k + 1; j < end; ++j)
    if (m_schedule.ops[j].kind != RecomputeOp::Kind::FreeInput) return m_schedule.ops[j].layer + 1;
  return k < fp ? m_after_forward : m_after_backward;
}

template <class T>
int BlockChain<T>::first_backward_group() const {
  return next_group(static_cast<std::size_t>(m_schedule.forward_ops_in_pass) - 1);
}

template <class T>
void BlockChain<T>::forward(const T* x0, const TransformerBlockRun& run, bool work) {
  SHARDTRAIN_CHECK(m_provider != nullptr, "BlockChain::forward before bind");
  m_x0 = x0;
  m_run = run;
  m_work = work;
  m_int_acts.assign(m_n, Acts{});
  m_int_held.assign(m_n, 0);
  m_ck_of.assign(m_n + 1, nullptr);
  m_stack_top = 0;
  m_pass_stack_high = 0;
  m_stack_marks.clear();
  run_ops(0, static_cast<std::size_t>(m_schedule.forward_ops_in_pass));
}

template <class T>
void BlockChain<T>::backward() {
  run_ops(static_cast<std::size_t>(m_schedule.forward_ops_in_pass), m_schedule.ops.size());
}

template <class T>
void BlockChain<T>::run_ops(std::size_t first, std::size_t last) {
  const std::int64_t bt_c = m_shape.max_batch * m_shape.seq_len * m_shape.channels;
  const std::int64_t rows_c = m_run.batch * m_shape.seq_len * m_shape.channels;
  for (std::size_t k = first; k < last; ++k) {
    const RecomputeOp& op = m_schedule.ops[k];
    const int l = op.layer;
    switch (op.kind) {
      case RecomputeOp::Kind::Forward: {
        const T* x = input_of(l);
        Acts a;
        if (op.keep) {
          a = transformer_block_carve(stack_push(m_per_block), m_shape);
          m_int_acts[l] = a;
          m_int_held[l] = 1;
        } else {
          SHARDTRAIN_CHECK(m_has_scratch, "recompute: a forward drops its internals but the arena has no scratch "
                                          "block (the schedule's plan says uses_scratch = false)");
          a = m_scratch;  // internals and output to the scratch block
          m_scratch_used = true;
        }
        T* pb = m_provider->acquire_params(l + 1);
        if (const int g = next_group(k); g >= 0) m_provider->prefetch(g);
        if (m_work)
          transformer_block_forward(*m_ops, m_shape, block_run(l), m_eps, transformer_block_params(pb, m_rel + kTransformerBlockTensors * l),
                                    x, a, m_ws);
        m_provider->release_params(l + 1);
        if (!op.keep) {
          // The input goes first when the schedule frees it right away (it is
          // on top), then x_{l+1} moves from the scratch block to the stack.
          if (forward_frees_input(m_schedule.ops, k)) {
            stack_pop(m_ck_of[l]);
            m_ck_of[l] = nullptr;
            ++k;
          }
          m_ck_of[l + 1] = stack_push(bt_c);
          if (m_work) m_ops->copy(m_scratch.out, m_ck_of[l + 1], rows_c);
        }
        break;
      }
      case RecomputeOp::Kind::Backward: {
        const T* x = input_of(l);
        T* pb = m_provider->acquire_params(l + 1);
        if (const int g = next_group(k); g >= 0) m_provider->prefetch(g);
        T* gb = m_provider->acquire_grads(l + 1);
        if (m_work) {
          const std::int64_t* rel = m_rel + kTransformerBlockTensors * l;
          transformer_block_backward(*m_ops, m_shape, block_run(l), transformer_block_params(pb, rel),
                                     transformer_block_params(gb, rel), x, m_int_acts[l], m_ws,
                                     m_provider->grads_zero(l + 1));
        }
        m_provider->grads_ready(l + 1);
        m_provider->release_params(l + 1);
        stack_pop(m_int_acts[l].ln1_mean);
        m_int_held[l] = 0;
        break;
      }
      case RecomputeOp::Kind::FreeInput:
        stack_pop(m_ck_of[l]);
        m_ck_of[l] = nullptr;
        break;
    }
  }
}

template class BlockChain<float>;
template class BlockChain<double>;
template class BlockChain<f16>;
template class BlockChain<bf16>;

}  // namespace shardtrain
