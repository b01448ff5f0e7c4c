// shardtrain/kernels/attention.hpp
// Multi-head self-attention core (everything between the qkv projection and
// the output projection), GPT-2/nanoGPT conventions:
//   qkv(B,T,3C) last dim is [q | k | v], each C = H heads x hd = C/H (head-major);
//   att = softmax(q k^T / sqrt(hd)) with position t attending to the keys s with
//   s < len_b (key padding mask) and, when causal, s <= t;
//   out(B,T,C) = att v, heads concatenated back in head-major order.
// len_b = lengths(b) when `lengths` is given (B entries, each in [1, T]), else T.
// Rows t >= len_b are computed the same way (a model ignores them). Masked
// probabilities are exactly 0. causal with no lengths is the GPT's attention
// (bitwise the same as before the mask existed).
// `saved` holds what backward needs (q, k, v permuted to (B,H,T,hd) and the
// probabilities (B,H,T,T)); `workspace` is scratch valid only during the call.
// Per (b, h) the products are GEMMs on contiguous (T, hd) / (T, T) slices.
// backward OVERWRITES dqkv. Deterministic: bitwise the same results at every Kokkos
// thread count. With more than one host thread the (b, h) pairs run in parallel,
// attention_pair_slots at a time, each slot with its own piece of the workspace (and
// of the 16-bit scratch); with Serial Kokkos or one thread they run one after another
// (attention.cpp).
// T = f16 / bf16: `saved` has the same layout and number of elements of T as for
// float (q, k, v, probs stored in T; q, k, v are the inputs' bits); the math runs in
// fp32, per (sequence, head) pair, on tiles widened from 16 bits, and each output is
// rounded once (attention.cpp); `workspace` is not used (its size is still checked)
// — the fp32 tiles live in the 16-bit scratch arena. Exception, bf16 on a CPU with
// AVX512-BF16 and an even head size (attention_bf16_dot_products): the two products
// whose operands are all bf16 inputs, the scores Q K^T and backward's dP = dY V^T,
// run on vdpbf16ps straight from the bf16 operands (fp32 sums in the instruction's
// order, small_gemm.hpp), so their bits differ from the fp32 chain's in the last
// places; everything else is as above.
#pragma once

#include "core/half.hpp"
#include "types.hpp"

namespace shardtrain {

struct AttentionShape {
  std::int64_t batch = 0;    // B
  std::int64_t seq_len = 0;  // T
  std::int64_t channels = 0; // C
  std::int64_t n_head = 0;   // H, divides C
  bool causal = true;        // false: bidirectional (encoder)
};

std::int64_t attention_saved_elems(const AttentionShape& s);      // 3*B*T*C + B*H*T*T
// attention_pair_slots(s) * (T*T + T*hd): one piece per concurrent pair.
std::int64_t attention_workspace_elems(const AttentionShape& s);

// (sequence, head) pairs a call processes at once: min(Kokkos' host concurrency,
// B*H) when the host space runs more than one thread and B*H > 1, else 1. The
// workspace and 16-bit scratch sizes are this many pairs' (call after
// Kokkos::initialize: before it, an OpenMP Kokkos reports one thread). Serial
// Kokkos or one thread: 1, and the sizes are the single pair's as before.
std::int64_t attention_pair_slots(const AttentionShape& s);

// Whether bf16 calls of shape s take the scores and dP on vdpbf16ps (above): the
// CPU has AVX512-BF16 and the head size C/H is even.
bool attention_bf16_dot_products(const AttentionShape& s);

// Tests: allow (default) or forbid the vdpbf16ps products process-wide, so the fp32
// chain of the bf16 path can be checked on a CPU that has AVX512-BF16 too.
void attention_allow_bf16_dot_products(bool allow);

// lengths: per-sequence valid lengths (B entries in [1, T]); empty = all T valid.
// backward must get the forward's lengths.
template <class T>
void attention_forward(const AttentionShape& s, CView3<T> qkv, View1<T> saved, View1<T> workspace,
                       View3<T> out, CView1<std::int32_t> lengths = {});

template <class T>
void attention_backward(const AttentionShape& s, CView3<T> dout, CView1<T> saved,
                        View1<T> workspace, View3<T> dqkv, CView1<std::int32_t> lengths = {});

#define SHARDTRAIN_DECLARE_ATTENTION(T)                                                       \
  extern template void attention_forward<T>(const AttentionShape&, CView3<T>, View1<T>,      \
                                            View1<T>, View3<T>, CView1<std::int32_t>);       \
  extern template void attention_backward<T>(const AttentionShape&, CView3<T>, CView1<T>,    \
                                             View1<T>, View3<T>, CView1<std::int32_t>);
SHARDTRAIN_DECLARE_ATTENTION(float)
SHARDTRAIN_DECLARE_ATTENTION(double)
SHARDTRAIN_DECLARE_ATTENTION(f16)
SHARDTRAIN_DECLARE_ATTENTION(bf16)
#undef SHARDTRAIN_DECLARE_ATTENTION

// Floats of 16-bit scratch (half_scratch.hpp) that attention_forward and
// attention_backward with T = f16 / bf16 need: attention_pair_slots(s) *
// (7*T*hd + 2*T*T) (one (sequence, head) pair's tiles per slot); independent of B
// and H once B*H reaches the thread count. float and double calls need none.
std::int64_t attention_half_scratch_elems(const AttentionShape& s);

}  // namespace shardtrain
