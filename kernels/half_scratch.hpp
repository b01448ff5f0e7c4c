// shardtrain/kernels/half_scratch.hpp
// Owns the fp32 scratch arena of the tiled 16-bit (f16 / bf16) kernel paths. This
// and the oneDNN context (dnnl_context.hpp) are the process-wide state in kernels/
// (share/doc/architecture.md, "Process-wide state in kernels/").
//
// Why global: a tiled 16-bit kernel call (GEMMs without native bf16, attention,
// embedding's dwte, conv2d; the row kernels run directly on 16-bit memory and need
// none, but for the cross entropy backward's one fp32 row, see half_tiles.hpp)
// converts tiles of its inputs to fp32, runs the fp32 math on each tile and rounds
// the results back, so it needs fp32 tile buffers. Passing them as an argument would give the f16/bf16
// kernels other signatures than the fp32 ones, and Gpt<T> calls every kernel with
// the same code for every T. Instead the owner (the model) binds one buffer once,
// before the first step: a TrackedBuffer<float> tagged Workspace (so the bytes are
// counted and planned), sized as the max over its calls of the *_half_scratch_elems
// functions declared next to each kernel (linear.hpp, layernorm.hpp, ...). Those
// sizes are bounded by the tiles, not by the number of rows N.
//
// Invariants:
//  - kernels never allocate: half_scratch(n) returns the bound buffer when it holds
//    at least n floats, and otherwise (also when nothing is bound) throws
//    shardtrain::Error saying how many floats the call needs and how many are bound;
//  - a 16-bit kernel asks for its scratch before it writes any output, so a call
//    that throws for lack of scratch leaves its outputs untouched;
//  - fp32 and double kernels never use the arena, nor do the direct 16-bit row
//    kernels other than the cross entropy backward (their *_half_scratch_elems
//    are 0);
//  - NOT thread-safe and not re-entrant: every 16-bit kernel call uses the buffer
//    from its start, so two calls must never overlap in time. That holds because
//    kernels run one after another from the rank's host thread (Serial or OpenMP
//    Kokkos) and there is one model per process, which is how shardtrain runs on
//    CPUs. Inside one call a kernel may split its scratch between its own threads
//    in disjoint pieces (attention: one (sequence, head) pair's tiles per thread,
//    attention_half_scratch_elems counts them);
//  - the arena does not own the memory. Binding again replaces the binding,
//    half_scratch_bind(nullptr, 0) unbinds; the owner unbinds before freeing it. The
//    buffer must not overlap any view passed to a kernel.
#pragma once

#include <cstddef>

namespace shardtrain {

// Binds `elems` floats at `data` as the scratch arena (nullptr / 0: unbind).
void half_scratch_bind(float* data, std::size_t elems);

// Number of floats bound (0 when unbound).
std::size_t half_scratch_size();

// For 16-bit kernel paths: the bound buffer, which holds at least `elems` floats.
// Throws shardtrain::Error naming `op`, the floats needed and the floats bound when
// it is smaller (or unbound). Never allocates.
float* half_scratch(std::size_t elems, const char* op = "a 16-bit kernel");

}  // namespace shardtrain
