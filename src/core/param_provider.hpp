// shardtrain/core/param_provider.hpp
// Owns the contract between a model and whoever holds its parameters and
// gradients (the ZeRO engine, or one flat vector). A model never keeps a
// pointer to a group across a release: it acquires a group right before using
// it and releases it right after, so a sharded provider can gather the group
// just in time and free it afterwards (ZeRO stage 3), and a gradient provider
// can reduce a group as soon as the backward pass has finished with it (stage 2).
// Pointers point at the group's first element: the element at layout offset
// group_range(g).first; the group's tensors follow at their layout offsets
// relative to it.
#pragma once

#include "core/param_layout.hpp"

namespace shardtrain {

template <class T>
class ParamProvider {
 public:
  virtual ~ParamProvider() = default;
  // Parameters of group g, valid until release_params(g).
  virtual T* acquire_params(int group) = 0;
  virtual void release_params(int group) = 0;
  // Gradient storage of group g for one backward pass; the model ACCUMULATES
  // (+=) into it. Valid until grads_ready(g).
  virtual T* acquire_grads(int group) = 0;
  // The backward pass has finished writing group g's gradients.
  virtual void grads_ready(int group) = 0;
  // True when group g's gradient storage (as acquire_grads returns it) holds only
  // zeros: no grads_ready(g) since it was cleared. The provider sees no writes
  // before grads_ready, so a model asks before its pass first writes the group;
  // it may then OVERWRITE the gradients it writes first (a Linear's dw and db)
  // instead of adding: the same bits, without reading the zeros. false is always
  // safe (and the default).
  virtual bool grads_zero(int /*group*/) const { return false; }
  // Hint: group g's parameters will be acquired next (a sharded provider starts
  // gathering them now). Providers that hold everything ignore it.
  virtual void prefetch(int /*group*/) {}
};

// The plain provider: one full parameter vector and one full gradient vector
// in the padded flat layout (ZeRO stages 0 and 1, tests).
template <class T>
class FlatParams final : public ParamProvider<T> {
 public:
  FlatParams(const ParamLayout& layout, T* params, T* grads)
      : m_layout(layout), m_params(params), m_grads(grads) {}
  T* acquire_params(int g) override { return m_params + m_layout.group_range(g).first; }
  void release_params(int) override {}
  T* acquire_grads(int g) override { return m_grads + m_layout.group_range(g).first; }
  void grads_ready(int) override {}

 private:
  const ParamLayout& m_layout;
  T* m_params;
  T* m_grads;
};

}  // namespace shardtrain
