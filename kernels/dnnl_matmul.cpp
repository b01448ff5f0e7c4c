// shardtrain/kernels/dnnl_matmul.cpp
// Owns the cache of oneDNN matmul primitives (dnnl_matmul.hpp). Invariants:
// the cache maps a MatmulShape to its primitive and is only ever added to; a
// hit costs one hash lookup and three memory-object wraps.
#include "kernels/dnnl_matmul.hpp"

#include <fmt/format.h>

#include <functional>
#include <unordered_map>
#include <vector>

#include "core/error.hpp"
#include "kernels/cpu_compute.hpp"
#include "kernels/dnnl_context.hpp"

namespace shardtrain {
namespace {

using dt = dnnl::memory::data_type;
using dims = dnnl::memory::dims;

struct ShapeHash {
  std::size_t operator()(const MatmulShape& s) const {
    std::size_t h = 1469598103934665603ull;
    auto mix = [&h](std::uint64_t v) { h = (h ^ v) * 1099511628211ull; };
    mix(static_cast<std::uint64_t>(s.m));
    mix(static_cast<std::uint64_t>(s.n));
    mix(static_cast<std::uint64_t>(s.k));
    mix(static_cast<std::uint64_t>(s.lda));
    mix(static_cast<std::uint64_t>(s.ldb));
    mix(static_cast<std::uint64_t>(s.ldc));
    mix((s.trans_a ? 1u : 0u) | (s.trans_b ? 2u : 0u) | (s.bias ? 4u : 0u));
    mix(static_cast<std::uint64_t>(s.ab) * 31u + static_cast<std::uint64_t>(s.c));
    mix(std::hash<float>{}(s.alpha) * 3u + std::hash<float>{}(s.beta));
    return h;
  }
};

struct Entry {
  dnnl::memory::desc a, b, c, bias;
  dnnl::matmul primitive;
};

std::unordered_map<MatmulShape, Entry, ShapeHash>& cache() {
  static std::unordered_map<MatmulShape, Entry, ShapeHash> c;
  return c;
}

const char* type_name(dt t) {
  switch (t) {
    case dt::f32: return "f32";
    case dt::bf16: return "bf16";
    case dt::f16: return "f16";
    default: return "?";
  }
}

Entry make(const MatmulShape& s) {
  Entry e;
  // op(A) is (m x k): stored (m x k) with row stride lda, or (k x m) read transposed.
  e.a = dnnl::memory::desc(dims{s.m, s.k}, s.ab, s.trans_a ? dims{1, s.lda} : dims{s.lda, 1});
  // op(B) is (k x n): stored (k x n), or (n x k) read transposed.
  e.b = dnnl::memory::desc(dims{s.k, s.n}, s.ab, s.trans_b ? dims{1, s.ldb} : dims{s.ldb, 1});
  e.c = dnnl::memory::desc(dims{s.m, s.n}, s.c, dims{s.ldc, 1});
  dnnl::primitive_attr attr;
  if (s.alpha != 1.0f) attr.set_output_scales(0, {s.alpha});
  if (s.beta != 0.0f) {
    dnnl::post_ops po;
    po.append_sum(s.beta);
    attr.set_post_ops(po);
  }
  if (s.bias) {
    e.bias = dnnl::memory::desc(dims{1, s.n}, s.c, dims{s.n, 1});
    dnnl::matmul::desc d(e.a, e.b, e.bias, e.c);
    e.primitive = dnnl::matmul(dnnl::matmul::primitive_desc(d, attr, dnnl_engine()));
  } else {
    dnnl::matmul::desc d(e.a, e.b, e.c);
    e.primitive = dnnl::matmul(dnnl::matmul::primitive_desc(d, attr, dnnl_engine()));
  }
  return e;
}

}  // namespace

std::string MatmulShape::describe() const {
  return fmt::format("matmul m {} n {} k {} {}{} lda {} ldb {} ldc {} {}->{}{} alpha {} beta {}", m, n, k,
                     trans_a ? "T" : "N", trans_b ? "T" : "N", lda, ldb, ldc, type_name(ab), type_name(c),
                     bias ? " +bias" : "", alpha, beta);
}

void dnnl_matmul(const MatmulShape& s, const void* a, const void* b, const void* bias, void* c,
                 const char* what) {
  SHARDTRAIN_CHECK(s.m > 0 && s.n > 0 && s.k > 0, std::string(what) + ": " + s.describe());
  SHARDTRAIN_CHECK(!s.bias || bias != nullptr, std::string(what) + ": bias requested without data");
  try {
    auto& map = cache();
    auto it = map.find(s);
    if (it == map.end()) it = map.emplace(s, make(s)).first;
    Entry& e = it->second;
    dnnl::engine& eng = dnnl_engine();
    // oneDNN takes non-const handles; it only reads A, B and the bias.
    dnnl::memory am(e.a, eng, const_cast<void*>(a));
    dnnl::memory bm(e.b, eng, const_cast<void*>(b));
    dnnl::memory cm(e.c, eng, c);
    if (s.bias) {
      dnnl::memory biasm(e.bias, eng, const_cast<void*>(bias));
      e.primitive.execute(dnnl_stream(), {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_BIAS, biasm},
                                          {DNNL_ARG_DST, cm}});
    } else {
      e.primitive.execute(dnnl_stream(), {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
    }
    dnnl_stream().wait();
  } catch (const dnnl::error& err) {
    dnnl_fail(std::string(what) + ": " + s.describe(), err);
  }
}

std::size_t dnnl_matmul_cache_size() { return cache().size(); }

void warm_up_compute() {
  static bool done = false;
  if (done) return;
  // Not cached: a plain primitive run once, so the cache holds only the model's shapes.
  auto run = [](dt type) {
    const dims d{8, 8};
    dnnl::memory::desc md(d, type, dims{8, 1});
    std::vector<float> buf(3 * 64, 0.0f);  // room for three 8x8 f32 (or bf16) matrices
    dnnl::memory a(md, dnnl_engine(), buf.data()), b(md, dnnl_engine(), buf.data() + 64),
        c(md, dnnl_engine(), buf.data() + 128);
    dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(md, md, md), dnnl_engine()))
        .execute(dnnl_stream(), {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
    dnnl_stream().wait();
  };
  try {
    run(dt::f32);
    if (cpu_bf16_native()) run(dt::bf16);
  } catch (const dnnl::error& e) {
    dnnl_fail("warm_up_compute", e);
  }
  done = true;
}

}  // namespace shardtrain
