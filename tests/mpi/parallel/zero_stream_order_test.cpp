// Stream ordering of the ZeRO engine on a device backend, checked on the host.
// On a CUDA backend kernels run on a compute stream and collectives on NCCL's
// stream; the two are ordered ONLY by the backend's fences
// (collectives_after_compute, compute_after_collectives). This test runs the
// real ZeroEngine (every stage, bucketed, with and without overlap, at 1-4
// ranks) over a recording backend and a recording communicator, and replays the
// trace under the rules a stream-ordered device needs:
//  A. a kernel must not touch memory a collective writes until that collective
//     was waited for AND a compute_after_collectives fence followed its issue;
//  B. a collective must not read or write memory a kernel touched unless a
//     collectives_after_compute fence came after that kernel;
//  C. gradient reductions are waited for in the order they were issued (FIFO:
//     the shard accumulates micro-batches in a fixed order, so results are
//     deterministic);
//  D. with overlap on and more than one bucket, backward kernels run while a
//     reduction is in flight (the overlap the engine exists for).
// A hand-made trace for each rule shows the checker rejects what it must.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "config/run_config.hpp"
#include "core/memory.hpp"
#include "parallel/mpi/mpi_communicator.hpp"
#include "parallel/zero_engine.hpp"
#include "optim/adamw.hpp"

namespace shardtrain {
namespace {

struct Range {
  const void* p = nullptr;
  std::size_t bytes = 0;
  bool overlaps(const Range& o) const {
    const auto a = reinterpret_cast<std::uintptr_t>(p), b = reinterpret_cast<std::uintptr_t>(o.p);
    return bytes > 0 && o.bytes > 0 && a < b + o.bytes && b < a + bytes;
  }
};

struct Event {
  enum Kind { Kernel, Collective, Wait, CommAfterCompute, ComputeAfterComm } kind;
  std::string what;
  std::vector<Range> touched;  // kernel: read or written; collective: read (send) and written (recv)
  int id = -1;                 // collective / wait: the collective's number
};

using Trace = std::vector<Event>;

// Replays a trace; returns the first violated rule with its context, or "".
std::string check_trace(const Trace& t, bool* overlapped = nullptr) {
  struct Issued { std::vector<Range> ranges; bool waited = false; bool fenced = false; std::string what; };
  std::map<int, Issued> issued;
  std::vector<std::pair<Range, std::string>> dirty;  // kernel touches since the last comm-after-compute fence
  std::vector<int> wait_order, issue_order;
  if (overlapped) *overlapped = false;
  for (std::size_t i = 0; i < t.size(); ++i) {
    const Event& e = t[i];
    switch (e.kind) {
      case Event::Kernel:
        for (auto& [id, c] : issued) {
          if (c.waited && c.fenced) continue;
          for (const Range& r : e.touched)
            for (const Range& w : c.ranges)
              if (r.overlaps(w))
                return "rule A: kernel '" + e.what + "' (event " + std::to_string(i) + ") touches memory of collective " +
                       std::to_string(id) + " '" + c.what + "' " + (c.waited ? "without a compute_after_collectives fence" : "before it was waited for");
          if (!c.waited && overlapped && e.what.rfind("backward", 0) == 0 && c.what.rfind("ireduce_scatter", 0) == 0)
            *overlapped = true;  // a backward kernel while a gradient reduction is in flight
        }
        for (const Range& r : e.touched) dirty.emplace_back(r, e.what);
        break;
      case Event::Collective:
        for (const Range& r : e.touched)
          for (const auto& [d, what] : dirty)
            if (r.overlaps(d))
              return "rule B: collective '" + e.what + "' (event " + std::to_string(i) + ") touches memory kernel '" + what +
                     "' used without a collectives_after_compute fence";
        issued[e.id] = Issued{e.touched, false, false, e.what};
        if (e.what.rfind("ireduce_scatter", 0) == 0) issue_order.push_back(e.id);
        break;
      case Event::Wait:
        issued[e.id].waited = true;
        if (issued[e.id].what.rfind("ireduce_scatter", 0) == 0) wait_order.push_back(e.id);
        break;
      case Event::CommAfterCompute:
        dirty.clear();
        break;
      case Event::ComputeAfterComm:
        for (auto& [id, c] : issued) c.fenced = true;  // every collective issued so far
        break;
    }
  }
  // Rule C: gradient reductions waited for in issue order (parameter gathers
  // may complete out of order: a prefetch can be evicted).
  std::vector<int> expected;
  for (int id : issue_order)
    if (std::find(wait_order.begin(), wait_order.end(), id) != wait_order.end()) expected.push_back(id);
  std::vector<int> first_waits;
  for (int id : wait_order)
    if (std::find(first_waits.begin(), first_waits.end(), id) == first_waits.end()) first_waits.push_back(id);
  if (first_waits != expected) return "rule C: collectives waited for out of issue order";
  return "";
}

// --- recording backend: host kernels, every call traced.
template <class P>
class RecordingOps final : public VectorOps<P> {
 public:
  RecordingOps(VectorOps<P>& inner, Trace& t) : m_in(inner), m_t(t) {}
  void fill_zero(P* x, std::int64_t n) override { k("fill_zero", {r(x, n)}); m_in.fill_zero(x, n); }
  void accumulate(const P* s, P* d, std::int64_t n) override { k("accumulate", {r(s, n), r(d, n)}); m_in.accumulate(s, d, n); }
  void copy(const P* s, P* d, std::int64_t n) override { k("copy", {r(s, n), r(d, n)}); m_in.copy(s, d, n); }
  void set_inf(P* x) override { k("set_inf", {r(x, 1)}); m_in.set_inf(x); }
  double sum_of_squares(const ParamLayout& l, const P* g, std::int64_t lo, std::int64_t hi) override {
    k("sum_of_squares", {r(g, hi - lo)});
    return m_in.sum_of_squares(l, g, lo, hi);
  }
  std::int64_t first_non_finite(const P* x, std::int64_t n) override { k("first_non_finite", {r(x, n)}); return m_in.first_non_finite(x, n); }
  void widen(const P* x, float* y, std::int64_t n) override { k("widen", {r(x, n), r(y, n)}); m_in.widen(x, y, n); }
  void narrow(const float* x, P* y, std::int64_t n) override { k("narrow", {r(x, n), r(y, n)}); m_in.narrow(x, y, n); }
  void adamw(const ParamLayout& l, const AdamWUpdate& u, P* p, const P* g, float* w, float* m, float* v) override {
    const std::int64_t n = u.hi - u.lo;
    k("adamw", {r(p, n), r(g, n), r(w, w ? n : 0), r(m, n), r(v, n)});
    m_in.adamw(l, u, p, g, w, m, v);
  }

 private:
  template <class T> static Range r(const T* p, std::int64_t n) { return {p, static_cast<std::size_t>(n) * sizeof(T)}; }
  void k(const char* what, std::vector<Range> rs) { m_t.push_back({Event::Kernel, what, std::move(rs)}); }
  VectorOps<P>& m_in;
  Trace& m_t;
};

class RecordingBackend final : public Backend {
 public:
  explicit RecordingBackend(Trace& t)
      : m_t(t), m_f32(host_backend().vector_ops<float>(), t), m_f64(host_backend().vector_ops<double>(), t),
        m_f16(host_backend().vector_ops<f16>(), t), m_bf16(host_backend().vector_ops<bf16>(), t) {}
  BackendKind kind() const override { return BackendKind::Cuda; }  // behaves as a device would be driven
  std::string describe() const override { return "recording"; }
  MemorySpace* memory() override { return nullptr; }
  void copy_to_host(void* d, const void* s, std::size_t b) override { host_backend().copy_to_host(d, s, b); }
  void copy_from_host(void* d, const void* s, std::size_t b) override { host_backend().copy_from_host(d, s, b); }
  void synchronize() override {}
  void collectives_after_compute() override { m_t.push_back({Event::CommAfterCompute, "fence", {}}); }
  void compute_after_collectives() override { m_t.push_back({Event::ComputeAfterComm, "fence", {}}); }

 protected:
  VectorOps<float>& ops_for(float*) override { return m_f32; }
  VectorOps<double>& ops_for(double*) override { return m_f64; }
  VectorOps<f16>& ops_for(f16*) override { return m_f16; }
  VectorOps<bf16>& ops_for(bf16*) override { return m_bf16; }

 private:
  Trace& m_t;
  RecordingOps<float> m_f32;
  RecordingOps<double> m_f64;
  RecordingOps<f16> m_f16;
  RecordingOps<bf16> m_bf16;
};

// --- recording communicator: forwards to MPI, traces issue and wait.
class RecordingRequest final : public Request {
 public:
  RecordingRequest(RequestPtr inner, Trace& t, int id) : m_in(std::move(inner)), m_t(t), m_id(id) {}
  ~RecordingRequest() override {
    if (!m_done) m_in->wait();
  }
  void wait() override {
    m_in->wait();
    if (!m_done) m_t.push_back({Event::Wait, "wait", {}, m_id});
    m_done = true;
  }
  bool test() override { return m_in->test(); }

 private:
  RequestPtr m_in;
  Trace& m_t;
  int m_id;
  bool m_done = false;
};

class RecordingComm final : public Communicator {
 public:
  RecordingComm(Communicator& inner, Trace& t) : m_in(inner), m_t(t) {}
  int rank() const override { return m_in.rank(); }
  int size() const override { return m_in.size(); }
  void all_reduce(void* b, std::size_t n, DType ty, ReduceOp op) override {
    blocking("all_reduce", {{b, n * dtype_size(ty)}});
    m_in.all_reduce(b, n, ty, op);
  }
  void broadcast(void* b, std::size_t n, DType ty, int root) override {
    blocking("broadcast", {{b, n * dtype_size(ty)}});
    m_in.broadcast(b, n, ty, root);
  }
  void barrier() override { m_in.barrier(); }
  void reduce_scatter(const void* s, void* r, std::size_t n, DType ty, ReduceOp op) override {
    blocking("reduce_scatter", {{s, n * size() * dtype_size(ty)}, {r, n * dtype_size(ty)}});
    m_in.reduce_scatter(s, r, n, ty, op);
  }
  void all_gather(const void* s, void* r, std::size_t n, DType ty) override {
    blocking("all_gather", {{s, n * dtype_size(ty)}, {r, n * size() * dtype_size(ty)}});
    m_in.all_gather(s, r, n, ty);
  }
  RequestPtr iall_reduce(void* b, std::size_t n, DType ty, ReduceOp op) override {
    return wrap("iall_reduce", {{b, n * dtype_size(ty)}}, m_in.iall_reduce(b, n, ty, op));
  }
  RequestPtr ireduce_scatter(const void* s, void* r, std::size_t n, DType ty, ReduceOp op) override {
    return wrap("ireduce_scatter", {{s, n * size() * dtype_size(ty)}, {r, n * dtype_size(ty)}},
                m_in.ireduce_scatter(s, r, n, ty, op));
  }
  RequestPtr iall_gather(const void* s, void* r, std::size_t n, DType ty) override {
    return wrap("iall_gather", {{s, n * dtype_size(ty)}, {r, n * size() * dtype_size(ty)}}, m_in.iall_gather(s, r, n, ty));
  }
  RequestPtr ireduce_scatter_v(const void* s, void* r, std::span<const std::size_t> counts, DType ty,
                               ReduceOp op) override {
    std::size_t total = 0;
    for (auto c : counts) total += c;
    return wrap("ireduce_scatter_v", {{s, total * dtype_size(ty)}, {r, counts[rank()] * dtype_size(ty)}},
                m_in.ireduce_scatter_v(s, r, counts, ty, op));
  }
  RequestPtr iall_gather_v(const void* s, void* r, std::span<const std::size_t> counts, DType ty) override {
    std::size_t total = 0;
    for (auto c : counts) total += c;
    return wrap("iall_gather_v", {{s, counts[rank()] * dtype_size(ty)}, {r, total * dtype_size(ty)}},
                m_in.iall_gather_v(s, r, counts, ty));
  }

 private:
  void blocking(const char* what, std::vector<Range> rs) {
    const int id = m_next++;
    m_t.push_back({Event::Collective, what, std::move(rs), id});
    m_t.push_back({Event::Wait, "wait", {}, id});  // returns with the result in place
  }
  RequestPtr wrap(const char* what, std::vector<Range> rs, RequestPtr inner) {
    const int id = m_next++;
    m_t.push_back({Event::Collective, what, std::move(rs), id});
    return std::make_unique<RecordingRequest>(std::move(inner), m_t, id);
  }
  Communicator& m_in;
  Trace& m_t;
  int m_next = 0;
};

// Six groups of odd sizes (they straddle shard boundaries at 2-4 ranks).
ParamLayout layout_for(int world) {
  ParamLayout layout(1);
  const std::int64_t sizes[] = {41, 23, 37, 19, 29, 7};
  for (int g = 0; g < 6; ++g) layout.add("t" + std::to_string(g), {sizes[g]}, g % 2 == 0, g);
  layout.finalize(world);
  return layout;
}

// Two steps of two micro-batches of a model that uses its groups as a GPT
// does: forward 0..G-1 (group 0, the tied embedding, held to the end), backward
// G-1..1 then 0 last; every kernel recorded with what it touches.
template <class P>
Trace run_engine(int stage, bool overlap, double bucket_mb, bool* overlapped) {
  MpiCommunicator mpi(MPI_COMM_WORLD);
  Trace t;
  RecordingBackend backend(t);
  RecordingComm comm(mpi, t);
  const ParamLayout layout = layout_for(comm.size());
  MemoryTracker memory;
  ModelState<P> state(layout, stage, comm.rank(), memory, &backend);
  ZeroEngine<P> engine(state, {overlap, bucket_mb}, comm, memory);
  OptimConfig oc;
  const AdamW adam(oc, layout);
  state.init_master();
  const int groups = layout.num_groups();
  auto size_of = [&](int g) { return static_cast<std::size_t>(layout.group_range(g).second - layout.group_range(g).first) * sizeof(P); };
  auto kernel = [&](std::string what, std::vector<Range> rs) { t.push_back({Event::Kernel, std::move(what), std::move(rs)}); };
  for (int step = 0; step < 2; ++step) {
    engine.begin_step();
    for (int micro = 0; micro < 2; ++micro) {
      const P* emb = engine.acquire_params(0);
      kernel("forward 0", {{emb, size_of(0)}});
      for (int g = 1; g < groups; ++g) {
        const P* p = engine.acquire_params(g);
        engine.prefetch(g + 1 < groups ? g + 1 : -1);
        kernel("forward " + std::to_string(g), {{p, size_of(g)}});
        engine.release_params(g);
      }
      engine.release_params(0);
      P* demb = engine.acquire_grads(0);
      auto add_half = [&](P* d, int g) {
        for (std::size_t i = 0; i < size_of(g) / sizeof(P); ++i) d[i] = P(static_cast<float>(d[i]) + 0.5f);
      };
      add_half(demb, 0);  // the tied LM head's half of the embedding gradient
      kernel("backward head", {{demb, size_of(0)}});
      for (int g = groups - 1; g >= 1; --g) {
        const P* p = engine.acquire_params(g);
        engine.prefetch(g - 1 >= 1 ? g - 1 : 0);
        P* d = engine.acquire_grads(g);
        // The gradient a backward kernel accumulates: 1 per element.
        for (std::size_t i = 0; i < size_of(g) / sizeof(P); ++i) d[i] = P(static_cast<float>(d[i]) + 1.0f);
        kernel("backward " + std::to_string(g), {{p, size_of(g)}, {d, size_of(g)}});
        engine.grads_ready(g);
        engine.release_params(g);
      }
      const P* emb2 = engine.acquire_params(0);
      add_half(demb, 0);
      kernel("backward embedding", {{emb2, size_of(0)}, {demb, size_of(0)}});
      engine.grads_ready(0);
      engine.release_params(0);
    }
    const double norm2 = engine.finish_gradients();
    // Every element's gradient is 2 micro-batches x ranks.
    const double g = 2.0 * comm.size();
    EXPECT_DOUBLE_EQ(norm2, g * g * static_cast<double>(layout.num_parameters()));
    adam.step(backend.vector_ops<P>(), state.optimizer_view(), 1e-3, 1.0f, step);
    engine.params_updated();
  }
  return t;
}

class ZeroStreamOrder : public ::testing::TestWithParam<std::tuple<int, bool, double>> {};

TEST_P(ZeroStreamOrder, FencesOrderEveryKernelAndCollective) {
  const auto [stage, overlap, bucket_mb] = GetParam();
  bool overlapped = false;
  const Trace t = run_engine<float>(stage, overlap, bucket_mb, &overlapped);
  const std::string violation = check_trace(t, &overlapped);
  EXPECT_EQ(violation, "") << "stage " << stage;
  if (stage >= 2 && overlap && bucket_mb == 0) EXPECT_TRUE(overlapped) << "no backward kernel ran during a reduction";
  if (stage >= 2 && !overlap) EXPECT_FALSE(overlapped);
  int collectives = 0;
  for (const Event& e : t) collectives += e.kind == Event::Collective;
  EXPECT_GT(collectives, 0);
}

INSTANTIATE_TEST_SUITE_P(
    Stages, ZeroStreamOrder,
    ::testing::Values(std::make_tuple(0, true, 0.0), std::make_tuple(1, true, 0.0), std::make_tuple(2, true, 0.0),
                      std::make_tuple(2, false, 0.0), std::make_tuple(2, true, 1e-4), std::make_tuple(3, true, 0.0),
                      std::make_tuple(3, false, 0.0), std::make_tuple(3, true, 1e-4), std::make_tuple(3, true, 4.0)));

TEST(ZeroStreamOrder, SixteenBitStateIsFencedToo) {
  EXPECT_EQ(check_trace(run_engine<f16>(3, true, 0.0, nullptr)), "");
  EXPECT_EQ(check_trace(run_engine<bf16>(2, true, 0.0, nullptr)), "");
}

// The checker itself: each rule catches the trace that breaks it.
TEST(ZeroStreamOrderChecker, RejectsBrokenTraces) {
  float buf[8] = {};
  const Range all{buf, sizeof buf}, first{buf, 4 * sizeof(float)}, second{buf + 4, 4 * sizeof(float)};
  using E = Event;
  // B: a kernel writes, a collective reads it without a fence.
  EXPECT_NE(check_trace({{E::Kernel, "backward 1", {all}}, {E::Collective, "rs", {all}, 0}}).find("rule B"),
            std::string::npos);
  EXPECT_EQ(check_trace({{E::Kernel, "backward 1", {all}}, {E::CommAfterCompute, "", {}}, {E::Collective, "rs", {all}, 0},
                         {E::Wait, "", {}, 0}, {E::ComputeAfterComm, "", {}}, {E::Kernel, "accumulate", {all}}}),
            "");
  // A: reading a collective's result before the wait, and after the wait without a fence.
  EXPECT_NE(check_trace({{E::CommAfterCompute, "", {}}, {E::Collective, "rs", {first}, 0}, {E::Kernel, "accumulate", {first}}})
                .find("before it was waited for"),
            std::string::npos);
  EXPECT_NE(check_trace({{E::CommAfterCompute, "", {}}, {E::Collective, "rs", {first}, 0}, {E::Wait, "", {}, 0},
                         {E::Kernel, "accumulate", {first}}})
                .find("without a compute_after_collectives fence"),
            std::string::npos);
  // Disjoint memory may overlap in time (D): no violation, and it counts as overlap.
  bool overlapped = false;
  EXPECT_EQ(check_trace({{E::CommAfterCompute, "", {}}, {E::Collective, "ireduce_scatter_v", {first}, 0}, {E::Kernel, "backward 2", {second}},
                         {E::Wait, "", {}, 0}},
                        &overlapped),
            "");
  EXPECT_TRUE(overlapped);
  // C: waits out of issue order.
  EXPECT_NE(check_trace({{E::Collective, "ireduce_scatter_v", {first}, 0}, {E::Collective, "ireduce_scatter_v", {second}, 1}, {E::Wait, "", {}, 1},
                         {E::Wait, "", {}, 0}})
                .find("rule C"),
            std::string::npos);
}

}  // namespace
}  // namespace shardtrain
