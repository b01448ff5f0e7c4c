// Kernel bandwidth microbenchmark (issue 45, scope 3): the memory-bound CUDA ops
// of the GPT step, timed one at a time at the 124M GPT's sizes (B 16, T 1024, C 768,
// V 50304, 124.4M parameters in GPT-2's tensor layout), each against this device's
// memory bandwidth: the rate of a device-to-device cudaMemcpy (measured here) and
// the peak from the memory clock and bus width (cudaDevAttrMemoryClockRate x
// cudaDevAttrGlobalMemoryBusWidth x 2, double data rate).
//
//   gpu_kernel_bandwidth [--type bf16|fp16|fp32] [--reps N] [--out FILE]
//
// Bytes per op are the least the op must move: every input read once, every
// output written once (an accumulated output counts as read and written), nothing
// for re-reads a kernel makes. So "GB/s" is that minimum over the time taken, and
// "of copy" says how close to the device's copy rate the op comes; a kernel that
// reads its input twice shows it as a lower fraction. Each op runs twice to warm
// up, then --reps times (default 10), each timed by its own pair of CUDA events on
// a non-blocking stream; the median is reported. Where a candidate kernel
// (train.device_kernels = "candidate", share/doc/gpu.md) exists beside the
// default, both rows are printed, default first, with the ratio.
//
// Inputs are uniform random values made on the device (gpu_test::fill_uniform);
// the timings do not depend on them. Writes a markdown table to stdout (and FILE).
// Exit 1 with a message when there is no CUDA device or a call fails; 2 on bad
// arguments.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "core/cuda_check.hpp"
#include "core/error.hpp"
#include "kernels/cuda/adamw.cuh"
#include "kernels/cuda/crc32.cuh"
#include "kernels/cuda/cross_entropy.cuh"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/gelu.cuh"
#include "kernels/cuda/layernorm.cuh"
#include "kernels/cuda/vector_reduce.cuh"
#include "device_fill.hpp"

namespace {

using shardtrain::Error;

constexpr std::int64_t kB = 16, kT = 1024, kC = 768, kV = 50304, kLayers = 12;
constexpr std::int64_t kRows = kB * kT;

// A device allocation freed at scope exit.
template <class T>
struct Dev {
  T* p = nullptr;
  std::size_t n = 0;
  explicit Dev(std::size_t count) : n(count) { SHARDTRAIN_CUDA_CHECK(cudaMalloc(&p, std::max<std::size_t>(n, 1) * sizeof(T))); }
  ~Dev() { cudaFree(p); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
};

template <class T>
void random_fill(Dev<T>& d, std::uint64_t seed, float lo, float hi, cudaStream_t s) {
  SHARDTRAIN_CUDA_CHECK(shardtrain::gpu_test::fill_uniform(d.p, d.n, seed, lo, hi, s));
}

struct Row {
  std::string op, path;
  double bytes = 0, ms = 0;
};

class Bench {
 public:
  Bench(cudaStream_t s, int reps) : m_stream(s), m_reps(reps) {
    SHARDTRAIN_CUDA_CHECK(cudaEventCreate(&m_a));
    SHARDTRAIN_CUDA_CHECK(cudaEventCreate(&m_b));
  }
  ~Bench() {
    cudaEventDestroy(m_a);
    cudaEventDestroy(m_b);
  }
  // The median of reps timed runs of f (after two untimed ones).
  double time_ms(const std::function<void()>& f) {
    for (int i = 0; i < 2; ++i) f();
    std::vector<float> ms;
    for (int i = 0; i < m_reps; ++i) {
      SHARDTRAIN_CUDA_CHECK(cudaEventRecord(m_a, m_stream));
      f();
      SHARDTRAIN_CUDA_CHECK(cudaEventRecord(m_b, m_stream));
      SHARDTRAIN_CUDA_CHECK(cudaEventSynchronize(m_b));
      float t = 0;
      SHARDTRAIN_CUDA_CHECK(cudaEventElapsedTime(&t, m_a, m_b));
      ms.push_back(t);
    }
    SHARDTRAIN_CUDA_CHECK(cudaGetLastError());
    std::sort(ms.begin(), ms.end());
    return ms.size() % 2 ? ms[ms.size() / 2] : 0.5 * (ms[ms.size() / 2 - 1] + ms[ms.size() / 2]);
  }
  void add(const std::string& op, const std::string& path, double bytes, const std::function<void()>& f) {
    m_rows.push_back({op, path, bytes, time_ms(f)});
    std::fprintf(stderr, "kernel_bandwidth: %s (%s) %.3f ms\n", op.c_str(), path.c_str(), m_rows.back().ms);
  }
  const std::vector<Row>& rows() const { return m_rows; }
  cudaStream_t stream() const { return m_stream; }

 private:
  cudaStream_t m_stream;
  int m_reps;
  cudaEvent_t m_a{}, m_b{};
  std::vector<Row> m_rows;
};

// GPT-2's parameter tensors in the trainer's order (wte, wpe, then per layer, then
// ln_f), with weight decay on the matrices: AdamW's segments and the norm's pieces.
std::vector<shardtrain::cuda::AdamWSegment> gpt2_segments() {
  std::vector<std::pair<std::int64_t, bool>> t = {{kV * kC, true}, {kT * kC, true}};
  for (int l = 0; l < kLayers; ++l) {
    for (auto e : std::vector<std::pair<std::int64_t, bool>>{{kC, false}, {kC, false}, {3 * kC * kC, true},
                                                             {3 * kC, false}, {kC * kC, true}, {kC, false},
                                                             {kC, false}, {kC, false}, {4 * kC * kC, true},
                                                             {4 * kC, false}, {4 * kC * kC, true}, {kC, false}})
      t.push_back(e);
  }
  t.push_back({kC, false});
  t.push_back({kC, false});
  std::vector<shardtrain::cuda::AdamWSegment> s;
  std::int64_t at = 0;
  for (auto [n, decay] : t) {
    s.push_back({at, at + n, decay});
    at += n;
  }
  return s;
}

template <class T>
void run(Bench& b) {
  namespace cuda = shardtrain::cuda;
  cudaStream_t s = b.stream();
  const double e = sizeof(T);
  const std::int64_t nc = kRows * kC, n4 = kRows * 4 * kC, nv = kRows * kV;

  {  // the residual stream's copy and add
    Dev<T> x(nc), y(nc);
    random_fill(x, 1, -1, 1, s);
    random_fill(y, 2, -1, 1, s);
    b.add("copy (B T, C)", "default", 2 * nc * e, [&] { cuda::copy(x.p, y.p, nc, s); });
    b.add("accumulate (B T, C)", "default", 3 * nc * e, [&] { cuda::accumulate(x.p, y.p, nc, s); });
  }
  {  // LayerNorm
    Dev<T> x(nc), w(kC), bias(kC), y(nc), mean(kRows), rstd(kRows), dy(nc), dx(nc), dw(kC), db(kC);
    random_fill(x, 3, -2, 3, s);
    random_fill(w, 4, 0.5f, 1.5f, s);
    random_fill(bias, 5, -1, 1, s);
    random_fill(dy, 6, -1, 1, s);
    random_fill(dx, 7, -1, 1, s);
    random_fill(dw, 8, -1, 1, s);
    random_fill(db, 9, -1, 1, s);
    const double fwd = (2 * nc + 2 * kRows + 2 * kC) * e;
    const double bwd = (4 * nc + 2 * kRows + 5 * kC) * e;  // x, dy, dx read; dx written; w; dw, db read and written
    const std::size_t ws_bytes = cuda::layernorm_backward_workspace_bytes(kRows, kC, true);
    Dev<unsigned char> ws(ws_bytes);
    for (const bool cand : {false, true}) {
      const char* path = cand ? "candidate" : "default";
      b.add("layernorm forward (B T, C)", path, fwd, [&] {
        cuda::layernorm_forward(x.p, w.p, bias.p, y.p, mean.p, rstd.p, 1e-5f, kRows, kC, s, cand);
      });
    }
    for (const bool cand : {false, true}) {
      const char* path = cand ? "candidate" : "default";
      b.add("layernorm backward (B T, C)", path, bwd, [&] {
        cuda::layernorm_backward(x.p, w.p, mean.p, rstd.p, dy.p, dx.p, dw.p, db.p, kRows, kC, ws.p, ws_bytes, s, cand);
      });
    }
  }
  {  // GELU over the MLP's (B T, 4C)
    Dev<T> x(n4), dy(n4), y(n4);
    random_fill(x, 10, -3, 3, s);
    random_fill(dy, 11, -1, 1, s);
    b.add("gelu forward (B T, 4C)", "default", 2 * n4 * e, [&] { cuda::gelu_forward(x.p, y.p, n4, s); });
    b.add("gelu backward (B T, 4C)", "default", 3 * n4 * e, [&] { cuda::gelu_backward(x.p, dy.p, y.p, n4, s); });
  }
  {  // cross-entropy over the logits (B T, V); the backward to a separate buffer so the logits stay
    Dev<T> logits(nv), dlogits(nv), losses(kRows);
    Dev<std::int32_t> targets(kRows);
    Dev<float> stats(2 * kRows);
    random_fill(logits, 12, -4, 4, s);
    std::vector<std::int32_t> host_targets(kRows);
    for (std::int64_t i = 0; i < kRows; ++i) host_targets[i] = static_cast<std::int32_t>((i * 7919) % kV);
    SHARDTRAIN_CUDA_CHECK(cudaMemcpy(targets.p, host_targets.data(), kRows * sizeof(std::int32_t), cudaMemcpyHostToDevice));
    b.add("cross-entropy forward (B T, V)", "default", nv * e + kRows * (e + 4), [&] {
      cuda::cross_entropy_forward(logits.p, targets.p, losses.p, kRows, kV, s);
    });
    b.add("cross-entropy forward (B T, V)", "candidate", nv * e + kRows * (e + 12), [&] {
      cuda::cross_entropy_forward(logits.p, targets.p, losses.p, kRows, kV, s, stats.p);
    });
    b.add("cross-entropy backward (B T, V)", "default", 2 * nv * e + kRows * 4, [&] {
      cuda::cross_entropy_backward(logits.p, targets.p, 1.0f / kRows, dlogits.p, kRows, kV, s);
    });
    b.add("cross-entropy backward (B T, V)", "candidate", 2 * nv * e + kRows * 12, [&] {
      cuda::cross_entropy_backward(logits.p, targets.p, 1.0f / kRows, dlogits.p, kRows, kV, s, stats.p);
    });
  }
  {  // the optimizer's passes over all 124.4M parameters (one rank holds the whole shard)
    const auto segments = gpt2_segments();
    const std::int64_t np = segments.back().end;
    constexpr bool kMaster = !std::is_same_v<T, float>;
    Dev<T> params(np), grads(np);
    Dev<float> master(kMaster ? np : 0), m(np), v(np);
    random_fill(params, 13, -0.1f, 0.1f, s);
    random_fill(grads, 14, -0.01f, 0.01f, s);
    if (kMaster) random_fill(master, 15, -0.1f, 0.1f, s);
    SHARDTRAIN_CUDA_CHECK(cudaMemsetAsync(m.p, 0, np * sizeof(float), s));
    SHARDTRAIN_CUDA_CHECK(cudaMemsetAsync(v.p, 0, np * sizeof(float), s));
    Dev<cuda::AdamWSegment> dseg(segments.size());
    SHARDTRAIN_CUDA_CHECK(cudaMemcpy(dseg.p, segments.data(), segments.size() * sizeof(cuda::AdamWSegment),
                                     cudaMemcpyHostToDevice));
    cuda::AdamWHyper h;
    h.lr = 6e-4;
    h.weight_decay = 0.1;
    h.step = 10;
    // grads read; m, v read and written; 16-bit: master read and written, params written; fp32: params read
    // and written
    const double adam = np * (kMaster ? 2 * e + 24 : 3 * e + 16);
    b.add("adamw step (124.4M parameters)", "default", adam, [&] {
      cuda::adamw_step(params.p, grads.p, kMaster ? master.p : nullptr, m.p, v.p, segments.data(), segments.size(), h, s);
    });
    b.add("adamw step (124.4M parameters)", "candidate", adam, [&] {
      cuda::adamw_step_one_launch(params.p, grads.p, kMaster ? master.p : nullptr, m.p, v.p, dseg.p, segments.data(),
                                  segments.size(), h, s);
    });
    std::vector<cuda::ReducePiece> pieces;
    for (const auto& g : segments) pieces.push_back({g.begin, g.end - g.begin});
    Dev<cuda::ReducePiece> dpieces(pieces.size());
    SHARDTRAIN_CUDA_CHECK(cudaMemcpy(dpieces.p, pieces.data(), pieces.size() * sizeof(cuda::ReducePiece),
                                     cudaMemcpyHostToDevice));
    Dev<double> partials(pieces.size() * cuda::kReduceGrid);
    b.add("gradient sum of squares (124.4M)", "default", np * e, [&] {
      for (std::size_t k = 0; k < pieces.size(); ++k)
        cuda::sum_of_squares_partials(grads.p + pieces[k].offset, pieces[k].n, partials.p + k * cuda::kReduceGrid, s);
    });
    b.add("gradient sum of squares (124.4M)", "candidate", np * e, [&] {
      cuda::sum_of_squares_pieces_partials(grads.p, dpieces.p, static_cast<std::int64_t>(pieces.size()), partials.p, s);
    });
    // The weights CRC of a metrics row (rundir/weights_crc.cpp): the fp32 weights
    // (124.4M x 4 bytes, here the first moment's buffer) in its 64 KiB pieces, each
    // piece's CRC written (4 bytes); the host's join of the pieces is not timed.
    constexpr std::size_t kCrcPiece = std::size_t{64} << 10;
    const std::size_t crc_bytes = static_cast<std::size_t>(np) * sizeof(float);
    Dev<std::uint32_t> crcs((crc_bytes + kCrcPiece - 1) / kCrcPiece);
    for (const bool cand : {false, true})
      b.add("weights CRC pieces (124.4M fp32)", cand ? "candidate" : "default", crc_bytes + 4.0 * crcs.n, [&, cand] {
        cuda::crc32_pieces(m.p, crc_bytes, kCrcPiece, crcs.p, s, cand);
      });
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string type = "bf16", out;
  int reps = 10;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--type" && i + 1 < argc) {
      type = argv[++i];
    } else if (a == "--reps" && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else if (a == "--out" && i + 1 < argc) {
      out = argv[++i];
    } else if (a == "-h" || a == "--help") {
      std::printf("usage: gpu_kernel_bandwidth [--type bf16|fp16|fp32] [--reps N] [--out FILE]\n"
                  "Times the GPT step's memory-bound CUDA ops at the 124M GPT's sizes against the device's\n"
                  "copy rate and peak memory bandwidth (tests/bench/gpu/kernel_bandwidth.cpp).\n");
      return 0;
    } else {
      std::fprintf(stderr, "gpu_kernel_bandwidth: unknown argument '%s' (--help)\n", a.c_str());
      return 2;
    }
  }
  if ((type != "bf16" && type != "fp16" && type != "fp32") || reps < 1) {
    std::fprintf(stderr, "gpu_kernel_bandwidth: --type must be bf16, fp16 or fp32 and --reps at least 1\n");
    return 2;
  }
  int devices = 0;
  if (const cudaError_t err = cudaGetDeviceCount(&devices); err != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "gpu_kernel_bandwidth: no CUDA device (%s)\n",
                 err != cudaSuccess ? cudaGetErrorString(err) : "cudaGetDeviceCount found 0");
    return 1;
  }
  try {
    cudaDeviceProp prop{};
    SHARDTRAIN_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    int clock_khz = 0, bus_bits = 0;
    SHARDTRAIN_CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, 0));
    SHARDTRAIN_CUDA_CHECK(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, 0));
    const double peak_gbs = 2.0 * clock_khz * 1e3 * (bus_bits / 8.0) / 1e9;
    cudaStream_t s{};
    SHARDTRAIN_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    Bench b(s, reps);
    double copy_gbs = 0;
    {  // the device's copy rate: 2 GiB read and written by cudaMemcpyAsync
      const std::size_t bytes = std::size_t{1} << 31;
      Dev<unsigned char> a(bytes), c(bytes);
      SHARDTRAIN_CUDA_CHECK(cudaMemsetAsync(a.p, 1, bytes, s));
      const double ms = b.time_ms([&] { SHARDTRAIN_CUDA_CHECK(cudaMemcpyAsync(c.p, a.p, bytes, cudaMemcpyDeviceToDevice, s)); });
      copy_gbs = 2.0 * bytes / (ms * 1e-3) / 1e9;
    }
    if (type == "bf16")
      run<__nv_bfloat16>(b);
    else if (type == "fp16")
      run<__half>(b);
    else
      run<float>(b);
    std::ostringstream o;
    o << "### Kernel bandwidth: " << prop.name << ", " << type << ", median of " << reps << " runs\n\n"
      << "Device copy rate (cudaMemcpy device to device, 2 GiB read + written): "
      << static_cast<long long>(copy_gbs + 0.5) << " GB/s; peak from the memory clock and bus ("
      << clock_khz / 1000 << " MHz x " << bus_bits << " bits x 2): " << static_cast<long long>(peak_gbs + 0.5)
      << " GB/s.\nBytes: the least each op must move (each input read once, each output written once).\n\n"
      << "| op | kernels | MB moved | ms | GB/s | of copy | of peak | candidate / default |\n"
      << "|---|---|---|---|---|---|---|---|\n";
    const auto& rows = b.rows();
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      const double gbs = r.bytes / (r.ms * 1e-3) / 1e9;
      char line[512];
      std::string ratio = "";
      if (r.path == "candidate" && i > 0 && rows[i - 1].op == r.op) {
        char t[32];
        std::snprintf(t, sizeof t, "%.3fx the time", r.ms / rows[i - 1].ms);
        ratio = t;
      }
      std::snprintf(line, sizeof line, "| %s | %s | %.1f | %.3f | %.0f | %.1f%% | %.1f%% | %s |\n", r.op.c_str(),
                    r.path.c_str(), r.bytes / 1e6, r.ms, gbs, 100.0 * gbs / copy_gbs, 100.0 * gbs / peak_gbs,
                    ratio.c_str());
      o << line;
    }
    std::fputs(o.str().c_str(), stdout);
    if (!out.empty()) {
      std::ofstream f(out);
      f << o.str();
      if (!f) throw Error("cannot write " + out);
    }
    SHARDTRAIN_CUDA_CHECK(cudaStreamDestroy(s));
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "gpu_kernel_bandwidth: %s\n", ex.what());
    return 1;
  }
  return 0;
}
