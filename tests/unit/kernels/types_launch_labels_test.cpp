// Tests conventions shared by all kernels: every Kokkos kernel launch carries a
// "Op::method" label (checked through the Kokkos Tools callbacks while each kernel
// runs once, in float, double, f16 and bf16), and no launch is left unnamed.
// Named after kernels/types.hpp, whose ExecSpace every kernel launches on (one
// test file per source: share/doc/architecture.md#tests-mirror-the-source).
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <set>
#include <string>
#include <vector>

#include "kernel_test_util.hpp"
#include "kernels/attention.hpp"
#include "kernels/conv2d.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/dropout.hpp"
#include "kernels/elementwise.hpp"
#include "kernels/embedding.hpp"
#include "kernels/gelu.hpp"
#include "kernels/gemm.hpp"
#include "core/half.hpp"
#include "kernels/half_scratch.hpp"
#include "kernels/layernorm.hpp"
#include "kernels/linear.hpp"
#include "kernels/pool.hpp"
#include "kernels/relu.hpp"

namespace shardtrain {
namespace {

using test::cview1;
using test::cview2;
using test::cview3;
using test::cview4;
using test::view1;
using test::view2;
using test::view3;
using test::view4;

std::vector<std::string>* g_labels = nullptr;
void on_begin(const char* name, const std::uint32_t, std::uint64_t* id) {
  *id = 0;
  if (g_labels) g_labels->push_back(name);
}
void on_end(const std::uint64_t) {}

template <class T>
void run_every_kernel() {
  const int n = 8, c = 12, m = 6, v = 7;
  std::vector<T> x(n * c, T(0.5)), w(m * c, T(0.25)), b(m, T(0.1)), y(n * m), dy(n * m, T(1));
  std::vector<T> dx(n * c), dw(m * c), db(m);
  linear_forward<T>(cview2(x, n, c), cview2(w, m, c), cview1(b), view2(y, n, m));
  linear_backward<T>(cview2(x, n, c), cview2(w, m, c), cview2(dy, n, m), view2(dx, n, c),
                     view2(dw, m, c), view1(db));
  std::vector<T> lw(c, T(1)), lb(c, T(0)), ly(n * c), mean(n), rstd(n), ldw(c), ldb(c);
  for (int i = 0; i < n * c; ++i) x[i] = T(i % 5);
  layernorm_forward<T>(cview2(x, n, c), cview1(lw), cview1(lb), view2(ly, n, c), view1(mean),
                       view1(rstd), T(1e-5));
  layernorm_backward<T>(cview2(x, n, c), cview1(lw), cview1(mean), cview1(rstd), cview2(ly, n, c),
                        view2(dx, n, c), view1(ldw), view1(ldb));
  gelu_forward<T>(cview1(x), view1(ly));
  gelu_backward<T>(cview1(x), cview1(ly), view1(dx));
  const std::vector<TokenIndex> tokens = {0, 1, 2, 3, 4, 5, 6, 0};
  std::vector<T> wte(v * c, T(1)), wpe(4 * c, T(2)), emb(2 * 4 * c), dwte(v * c), dwpe(4 * c);
  embedding_forward<T>(cview2(tokens, 2, 4), cview2(wte, v, c), cview2(wpe, 4, c),
                       view3(emb, 2, 4, c));
  embedding_backward<T>(cview2(tokens, 2, 4), cview3(emb, 2, 4, c), view2(dwte, v, c),
                        view2(dwpe, 4, c));
  const AttentionShape s{2, 4, c, 3};
  std::vector<T> qkv(2 * 4 * 3 * c, T(0.1)), saved(attention_saved_elems(s)),
      ws(attention_workspace_elems(s)), out(2 * 4 * c), dqkv(2 * 4 * 3 * c);
  attention_forward<T>(s, cview3(qkv, 2, 4, 3 * c), view1(saved), view1(ws), view3(out, 2, 4, c));
  attention_backward<T>(s, cview3(out, 2, 4, c), cview1(saved), view1(ws),
                        view3(dqkv, 2, 4, 3 * c));
  const std::vector<TokenIndex> targets = {0, -1, 2, 3, 4, 5, 6, 1};
  std::vector<T> logits(n * v, T(0.3)), losses(n);
  cross_entropy_forward<T>(cview2(logits, n, v), cview1(targets), view1(losses));
  cross_entropy_backward<T>(cview2(logits, n, v), cview1(targets), T(1), view2(logits, n, v));
  copy<T>(cview1(x), view1(dx));
  accumulate<T>(cview1(x), view1(dx));
  fill<T>(view1(dx), T(0));
  // CNN layers: conv (bias, dx), max pool, relu, dropout (mask and identity).
  const Conv2dShape cs{2, 2, 6, 5, 3, 3, 2, 1, 1};
  std::vector<T> cx(2 * 2 * 6 * 5, T(0.5)), cw(3 * 2 * 3 * 2, T(0.25)), cb(3, T(0.1)),
      cws(conv2d_workspace_elems<T>(cs)), cy(2 * 3 * cs.out_h() * cs.out_w(), T(0)),
      cdx(cx.size()), cdw(cw.size(), T(0)), cdb(3, T(0));
  conv2d_forward<T>(cs, cview4(cx, 2, 2, 6, 5), cview4(cw, 3, 2, 3, 2), cview1(cb), view1(cws),
                    view4(cy, 2, 3, cs.out_h(), cs.out_w()));
  conv2d_backward<T>(cs, cview4(cx, 2, 2, 6, 5), cview4(cw, 3, 2, 3, 2),
                     cview4(cy, 2, 3, cs.out_h(), cs.out_w()), view1(cws), view4(cdx, 2, 2, 6, 5),
                     view4(cdw, 3, 2, 3, 2), view1(cdb));
  const Pool2dShape ps{2, 2, 6, 5, 2, 2};
  std::vector<T> py(2 * 2 * 3 * 2);
  std::vector<std::int32_t> pa(py.size());
  max_pool2d_forward<T>(ps, cview4(cx, 2, 2, 6, 5), view4(py, 2, 2, 3, 2), view4(pa, 2, 2, 3, 2));
  max_pool2d_backward<T>(ps, cview4(py, 2, 2, 3, 2), cview4(pa, 2, 2, 3, 2),
                         view4(cdx, 2, 2, 6, 5));
  relu_forward<T>(cview1(cx), view1(cdx));
  relu_backward<T>(cview1(cx), cview1(cx), view1(cdx));
  dropout_forward<T>(DropoutParams{0.5, 1, 2, 0, true}, cview1(cx), view1(cdx));
  dropout_backward<T>(DropoutParams{0.5, 1, 2, 0, false}, cview1(cx), view1(cdx));
  // K == 0 gemm launches the wrapper's own scaling kernel.
  std::vector<T> c0(6, T(1));
  gemm<T>(Trans::N, Trans::N, T(1), CView2<T>(x.data(), 2, 0), CView2<T>(x.data(), 0, 3), T(0),
          view2(c0, 2, 3));
}

// Scratch of the 16-bit runs of run_every_kernel (max over its calls' sizes).
std::int64_t half_scratch_elems_of_every_kernel() {
  const std::int64_t n = 8, c = 12, m = 6, v = 7;
  return std::max({linear_half_scratch_elems(n, c, m), layernorm_half_scratch_elems(c),
                   gelu_half_scratch_elems(), embedding_half_scratch_elems(v, c),
                   attention_half_scratch_elems(AttentionShape{2, 4, c, 3}),
                   cross_entropy_half_scratch_elems(v), elementwise_half_scratch_elems(),
                   gemm_half_scratch_elems(2, 3, 0),
                   conv2d_half_scratch_elems(Conv2dShape{2, 2, 6, 5, 3, 3, 2, 1, 1})});
}

TEST(KernelConventions, EveryLaunchIsLabelledOpMethod) {
  std::vector<std::string> labels;
  const auto saved = Kokkos::Tools::Experimental::get_callbacks();
  g_labels = &labels;
  Kokkos::Tools::Experimental::set_begin_parallel_for_callback(on_begin);
  Kokkos::Tools::Experimental::set_end_parallel_for_callback(on_end);
  Kokkos::Tools::Experimental::set_begin_parallel_reduce_callback(on_begin);
  Kokkos::Tools::Experimental::set_end_parallel_reduce_callback(on_end);
  Kokkos::Tools::Experimental::set_begin_parallel_scan_callback(on_begin);
  Kokkos::Tools::Experimental::set_end_parallel_scan_callback(on_end);
  run_every_kernel<float>();
  run_every_kernel<double>();
  std::vector<float> scratch(static_cast<std::size_t>(half_scratch_elems_of_every_kernel()));
  half_scratch_bind(scratch.data(), scratch.size());
  run_every_kernel<f16>();
  run_every_kernel<bf16>();
  half_scratch_bind(nullptr, 0);
  Kokkos::Tools::Experimental::set_callbacks(saved);
  g_labels = nullptr;

  // "Op::method": [A-Z][A-Za-z]* "::" [a-z][a-z_]*
  auto well_formed = [](const std::string& l) {
    const std::size_t c = l.find("::");
    if (c == std::string::npos || c == 0 || c + 2 >= l.size() || !std::isupper(static_cast<unsigned char>(l[0])))
      return false;
    for (std::size_t i = 1; i < c; ++i)
      if (!std::isalpha(static_cast<unsigned char>(l[i]))) return false;
    if (!std::islower(static_cast<unsigned char>(l[c + 2]))) return false;
    for (std::size_t i = c + 3; i < l.size(); ++i)
      if (!std::islower(static_cast<unsigned char>(l[i])) && l[i] != '_') return false;
    return true;
  };
  EXPECT_TRUE(well_formed("LayerNorm::backward_rows"));
  for (const char* bad : {"layerNorm::forward", "Layer_Norm::forward", "LayerNorm:forward", "LayerNorm::",
                          "LayerNorm::Forward", "LayerNorm::forward2", "::forward", "Gelu::fwd::x"})
    EXPECT_FALSE(well_formed(bad)) << bad;
  std::set<std::string> distinct;
  for (const auto& l : labels) {
    EXPECT_TRUE(well_formed(l)) << "badly labelled kernel: '" << l << "'";
    distinct.insert(l);
  }
  // Every op shows up (guards against the callbacks silently not firing).
  for (const char* op : {"Linear::", "LayerNorm::", "Gelu::", "Embedding::", "Attention::",
                         "CrossEntropy::", "Elementwise::", "Gemm::", "Conv::", "MaxPool::",
                         "Relu::", "Dropout::"}) {
    bool found = false;
    for (const auto& l : distinct) found = found || l.rfind(op, 0) == 0;
    EXPECT_TRUE(found) << "no launch labelled " << op << "*";
  }
  std::string all;
  for (const auto& l : distinct) all += l + " ";
  std::cout << "[labels] " << all << std::endl;
}

}  // namespace
}  // namespace shardtrain
