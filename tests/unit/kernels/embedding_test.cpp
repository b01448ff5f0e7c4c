// Tests embedding_forward / embedding_backward: forward against a naive loop (double
// and float); float64 central-difference checks of dwte and dwpe with repeated
// tokens, unused vocabulary rows and a wpe longer than T; the ACCUMULATE convention;
// deterministic repeat; bad token ids throw.
#include <gtest/gtest.h>

#include <vector>

#include "core/error.hpp"
#include "kernel_test_util.hpp"
#include "kernels/embedding.hpp"

namespace shardtrain {
namespace {

using test::cast_vector;
using test::cview2;
using test::cview3;
using test::view2;
using test::view3;

constexpr int kB = 2, kT = 4, kV = 6, kBlock = 6;  // wpe has kBlock >= kT rows
const std::vector<TokenIndex> kTokens = {1, 3, 1, 5,   // token 1 twice, 3 three times overall,
                                         3, 3, 0, 1};  // 2 and 4 unused

struct Data {
  int c;
  std::vector<double> wte, wpe, r;
  explicit Data(int c_)
      : c(c_), wte(test::random_vector(kV * c_, 41)), wpe(test::random_vector(kBlock * c_, 42)),
        r(test::random_vector(kB * kT * c_, 43)) {}
};

std::vector<double> naive_embedding(const Data& d) {
  std::vector<double> out(kB * kT * d.c);
  for (int b = 0; b < kB; ++b)
    for (int t = 0; t < kT; ++t)
      for (int j = 0; j < d.c; ++j)
        out[(b * kT + t) * d.c + j] = d.wte[kTokens[b * kT + t] * d.c + j] + d.wpe[t * d.c + j];
  return out;
}

template <class T>
std::vector<T> run_forward(const std::vector<T>& wte, const std::vector<T>& wpe, int c) {
  std::vector<T> out(kB * kT * c, T(-1));
  embedding_forward<T>(cview2(kTokens, kB, kT), cview2(wte, kV, c), cview2(wpe, kBlock, c),
                       view3(out, kB, kT, c));
  return out;
}

TEST(Embedding, ForwardMatchesNaive) {
  for (int c : {5, 70}) {
    const Data d(c);
    const auto ref = naive_embedding(d);
    EXPECT_EQ(run_forward<double>(d.wte, d.wpe, c), ref);
    const auto got = run_forward<float>(cast_vector<float>(d.wte), cast_vector<float>(d.wpe), c);
    EXPECT_LE(test::max_scaled_error(got, ref), 1e-7);
  }
}

void check_gradients(int c) {
  const Data d(c);
  std::vector<double> dwte(kV * c, 0.0), dwpe(kBlock * c, 0.0);
  embedding_backward<double>(cview2(kTokens, kB, kT), cview3(d.r, kB, kT, c), view2(dwte, kV, c),
                             view2(dwpe, kBlock, c));
  const std::string l = "embedding C=" + std::to_string(c);
  EXPECT_TRUE(test::gradient_ok(l + " dwte", test::gradcheck([&](std::span<const double> v) {
    return test::weighted_sum(run_forward<double>({v.begin(), v.end()}, d.wpe, c), d.r);
  }, d.wte, dwte)));
  EXPECT_TRUE(test::gradient_ok(l + " dwpe", test::gradcheck([&](std::span<const double> v) {
    return test::weighted_sum(run_forward<double>(d.wte, {v.begin(), v.end()}, c), d.r);
  }, d.wpe, dwpe)));
  // Unused vocabulary rows and wpe rows >= T get exactly nothing.
  for (int j = 0; j < c; ++j) {
    EXPECT_EQ(dwte[2 * c + j], 0.0);
    EXPECT_EQ(dwte[4 * c + j], 0.0);
    EXPECT_EQ(dwpe[kT * c + j], 0.0);
  }
}

TEST(Embedding, GradientsRepeatedTokens) { check_gradients(5); }
TEST(Embedding, GradientsTwoColumnBlocks) { check_gradients(70); }

TEST(Embedding, BackwardAccumulatesAndIsDeterministic) {
  const int c = 70;
  const Data d(c);
  auto backward = [&](std::vector<double>& dwte, std::vector<double>& dwpe) {
    embedding_backward<double>(cview2(kTokens, kB, kT), cview3(d.r, kB, kT, c),
                               view2(dwte, kV, c), view2(dwpe, kBlock, c));
  };
  std::vector<double> dwte1(kV * c, 0.0), dwpe1(kBlock * c, 0.0);
  backward(dwte1, dwpe1);
  std::vector<double> dwte_again(kV * c, 0.0), dwpe_again(kBlock * c, 0.0);
  backward(dwte_again, dwpe_again);
  EXPECT_EQ(dwte1, dwte_again);  // bitwise identical
  EXPECT_EQ(dwpe1, dwpe_again);
  std::vector<double> dwte2(kV * c, 0.0), dwpe2(kBlock * c, 0.0);
  backward(dwte2, dwpe2);
  backward(dwte2, dwpe2);
  // dwte/dwpe are accumulated in place row by row, so the second call rounds a
  // little differently from 2x the first: compare to 1e-14 of the largest entry.
  std::vector<double> twice_wte(kV * c), twice_wpe(kBlock * c);
  for (int i = 0; i < kV * c; ++i) twice_wte[i] = 2.0 * dwte1[i];
  for (int i = 0; i < kBlock * c; ++i) twice_wpe[i] = 2.0 * dwpe1[i];
  EXPECT_LE(test::max_scaled_error(dwte2, twice_wte), 1e-14);
  EXPECT_LE(test::max_scaled_error(dwpe2, twice_wpe), 1e-14);
  for (int i = 0; i < 2 * c; ++i) ASSERT_NE(dwte1[i], 0.0);  // rows 0 and 1 are used
}

TEST(Embedding, FloatBackwardMatchesDouble) {
  const int c = 70;
  const Data d(c);
  std::vector<double> dwte(kV * c, 0.0), dwpe(kBlock * c, 0.0);
  embedding_backward<double>(cview2(kTokens, kB, kT), cview3(d.r, kB, kT, c), view2(dwte, kV, c),
                             view2(dwpe, kBlock, c));
  const auto rf = cast_vector<float>(d.r);
  std::vector<float> dwtef(kV * c, 0.0f), dwpef(kBlock * c, 0.0f);
  embedding_backward<float>(cview2(kTokens, kB, kT), cview3(rf, kB, kT, c), view2(dwtef, kV, c),
                            view2(dwpef, kBlock, c));
  EXPECT_LE(test::max_scaled_error(dwtef, dwte), 1e-6);
  EXPECT_LE(test::max_scaled_error(dwpef, dwpe), 1e-6);
}

TEST(Embedding, BadTokenThrows) {
  const Data d(5);
  for (TokenIndex bad : {TokenIndex(-1), TokenIndex(kV)}) {
    std::vector<TokenIndex> tokens = kTokens;
    tokens[5] = bad;
    std::vector<double> out(kB * kT * 5), dwte(kV * 5, 0.0), dwpe(kBlock * 5, 0.0);
    EXPECT_THROW(embedding_forward<double>(cview2(tokens, kB, kT), cview2(d.wte, kV, 5),
                                           cview2(d.wpe, kBlock, 5), view3(out, kB, kT, 5)),
                 Error);
    EXPECT_THROW(embedding_backward<double>(cview2(tokens, kB, kT), cview3(d.r, kB, kT, 5),
                                            view2(dwte, kV, 5), view2(dwpe, kBlock, 5)),
                 Error);
  }
  // wpe shorter than T.
  std::vector<double> out(kB * kT * 5);
  EXPECT_THROW(embedding_forward<double>(cview2(kTokens, kB, kT), cview2(d.wte, kV, 5),
                                         cview2(d.wpe, kT - 1, 5), view3(out, kB, kT, 5)),
               Error);
}

}  // namespace
}  // namespace shardtrain
