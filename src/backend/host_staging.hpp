// shardtrain/backend/host_staging.hpp
// Owns the host's access to backend memory for the run's host-side work on the
// model state (checkpoint I/O, the weights CRC, test hooks): on the host
// backend the memory itself, never a copy (a checkpoint of the whole state
// would otherwise double it); on a device a staged host copy, written back by
// from_host.
#pragma once

#include <cstddef>
#include <vector>

#include "backend/backend.hpp"

namespace shardtrain {

// n elements at backend pointer p, readable and writable on the host: p itself
// on the host backend, else a copy in `stage` (which must outlive the use).
template <class T>
T* to_host(Backend& backend, T* p, std::size_t n, std::vector<unsigned char>& stage) {
  if (backend.memory() == nullptr) return p;
  stage.resize(n * sizeof(T));
  backend.copy_to_host(stage.data(), p, n * sizeof(T));
  return reinterpret_cast<T*>(stage.data());
}

// n elements at backend pointer p that the host is about to overwrite whole (a
// checkpoint's load), then write back by from_host: p itself on the host
// backend, else room in `stage`, not filled from the device (nothing there is read).
template <class T>
T* for_host_overwrite(Backend& backend, T* p, std::size_t n, std::vector<unsigned char>& stage) {
  if (backend.memory() == nullptr) return p;
  stage.resize(n * sizeof(T));
  return reinterpret_cast<T*>(stage.data());
}

// Writes back what to_host or for_host_overwrite gave (`host`) to p; nothing on the host backend,
// where `host` is p.
template <class T>
void from_host(Backend& backend, T* p, const T* host, std::size_t n) {
  if (backend.memory() != nullptr) backend.copy_from_host(p, host, n * sizeof(T));
}

}  // namespace shardtrain
