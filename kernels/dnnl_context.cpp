// shardtrain/kernels/dnnl_context.cpp
// Owns the process's oneDNN engine and stream (dnnl_context.hpp) and the CPU
// compute settings of cpu_compute.hpp: the thread count of oneDNN's OpenMP pool
// and OpenBLAS's, the ISA report, and the host libraries' line (OpenBLAS's core,
// oneDNN's ISA).
// Invariants: the engine and stream are function-local statics (created on first
// use, thread-safe initialisation, alive until exit); the thread count is what
// the last set_compute_threads call set (1 until then).
#include "kernels/dnnl_context.hpp"

#include <cblas.h>  // openblas_get_corename, openblas_get_config (OpenBLAS's cblas.h)
#include <dlfcn.h>
#include <fmt/format.h>

#include "core/error.hpp"
#include "kernels/core_peak.hpp"  // the kOnednnIsa* values, checked here
#include "kernels/cpu_compute.hpp"
#include "kernels/small_gemm.hpp"  // small_gemm_bf16_native, named in the start-up line

// oneDNN (Debian's libdnnl 2.6) threads with GNU OpenMP; its pool size is
// OpenMP's. Declared here rather than through <omp.h> so that no shardtrain file
// is compiled with -fopenmp (kernels/CMakeLists.txt links libgomp only).
extern "C" void omp_set_num_threads(int);
extern "C" int omp_get_max_threads(void);

namespace shardtrain {
namespace {

int g_threads = 1;

static_assert(kOnednnIsaAvx2 == static_cast<unsigned>(dnnl::cpu_isa::avx2));
static_assert(kOnednnIsaAvx512Core == static_cast<unsigned>(dnnl::cpu_isa::avx512_core));
static_assert(kOnednnIsaAvx512CoreBf16 == static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16));
static_assert(kOnednnIsaAvx512CoreAmx == static_cast<unsigned>(dnnl::cpu_isa::avx512_core_amx));

// Each ISA oneDNN reports, by two names: dnnl_cpu_isa_t's own (dnnl_types.h;
// ONEDNN_MAX_CPU_ISA's values in lower case), so that the host libraries' line
// and PyTorch's (blas_core_probe.py) compare word for word, and a reader's label
// for the compute line.
struct IsaNames {
  dnnl::cpu_isa isa;
  const char* id;
  const char* label;
};
constexpr IsaNames k_isa_names[] = {
    {dnnl::cpu_isa::all, "all", "baseline"},
    {dnnl::cpu_isa::sse41, "sse41", "SSE4.1"},
    {dnnl::cpu_isa::avx, "avx", "AVX"},
    {dnnl::cpu_isa::avx2, "avx2", "AVX2"},
    {dnnl::cpu_isa::avx512_mic, "avx512_mic", "AVX-512 (MIC)"},
    {dnnl::cpu_isa::avx512_mic_4ops, "avx512_mic_4ops", "AVX-512 (MIC 4ops)"},
    {dnnl::cpu_isa::avx512_core, "avx512_core", "AVX-512"},
    {dnnl::cpu_isa::avx512_core_vnni, "avx512_core_vnni", "AVX-512 VNNI"},
    {dnnl::cpu_isa::avx512_core_bf16, "avx512_core_bf16", "AVX-512 BF16"},
    {dnnl::cpu_isa::avx512_core_amx, "avx512_core_amx", "AVX-512 AMX"},
    {dnnl::cpu_isa::avx2_vnni, "avx2_vnni", "AVX2 VNNI"},
};

const IsaNames* find_isa(dnnl::cpu_isa isa) {
  for (const IsaNames& n : k_isa_names)
    if (n.isa == isa) return &n;
  return nullptr;
}

const char* isa_name(dnnl::cpu_isa isa) {
  const IsaNames* n = find_isa(isa);
  return n != nullptr ? n->label : "baseline";
}

std::string isa_enum_name(dnnl::cpu_isa isa) {
  const IsaNames* n = find_isa(isa);
  return n != nullptr ? std::string(n->id) : fmt::format("{:#x}", static_cast<unsigned>(isa));
}

}  // namespace

dnnl::engine& dnnl_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& dnnl_stream() {
  static dnnl::stream stream(dnnl_engine());
  return stream;
}

void dnnl_fail(const std::string& what, const dnnl::error& e) {
  SHARDTRAIN_FAIL(fmt::format("{}: oneDNN status {}: {}", what, static_cast<int>(e.status), e.what()));
}

void set_compute_threads(int n) {
  SHARDTRAIN_CHECK(n >= 1, "compute threads must be at least 1, got " + std::to_string(n));
  omp_set_num_threads(n);
  // OpenBLAS (the double GEMMs) when the process has it; looked up at run time
  // because the process may reach it through the libblas.so.3 alternative.
  using SetThreads = void (*)(int);
  if (auto* f = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) f(n);
  g_threads = n;
}

int compute_threads() { return g_threads; }

bool cpu_bf16_native() {
  static const bool native = [] {
    const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    const auto bf16 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16);
    return (isa & bf16) == bf16;  // the ISA values are feature bit sets (dnnl_types.h)
  }();
  return native;
}

unsigned cpu_onednn_isa_bits() { return static_cast<unsigned>(dnnl::get_effective_cpu_isa()); }

std::string cpu_onednn_isa_name() { return isa_name(dnnl::get_effective_cpu_isa()); }

std::string cpu_compute_describe() {
  const dnnl::version_t* v = dnnl::version();
  return fmt::format(
      "oneDNN {}.{}.{} on {} ({} thread{} per rank, OpenMP max {}); bf16: {}; fp16: fp32 GEMMs on converted tiles "
      "(no AVX512-FP16 path)",
      v->major, v->minor, v->patch, isa_name(dnnl::get_effective_cpu_isa()), g_threads, g_threads == 1 ? "" : "s",
      omp_get_max_threads(),
      cpu_bf16_native()
          ? std::string("native (AVX512-BF16 or AMX): bf16 operands straight into oneDNN, fp32 accumulation") +
                (small_gemm_bf16_native() ? ", attention's Q K^T and dY V^T on vdpbf16ps" : "")
          : std::string("NO AVX512-BF16 on this CPU: bf16 GEMMs convert tiles to fp32 (slower than fp32)"));
}

std::string cpu_libraries_describe() {
  // openblas_get_config: "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH NO_AFFINITY Haswell MAX_THREADS=64".
  const std::string config = openblas_get_config();
  const auto space = config.find(' ', config.find(' ') + 1);
  const dnnl::version_t* v = dnnl::version();
  return fmt::format("OpenBLAS core {} ({}), oneDNN ISA {} (oneDNN {}.{}.{})", openblas_get_corename(),
                     config.substr(0, space), isa_enum_name(dnnl::get_effective_cpu_isa()), v->major, v->minor,
                     v->patch);
}

}  // namespace shardtrain
