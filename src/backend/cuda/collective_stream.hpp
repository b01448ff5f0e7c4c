// shardtrain/backend/cuda/collective_stream.hpp
// Owns what the CUDA backend needs of the communicator that moves its memory:
// the device the communicator chose, and the two device-side orderings between
// the backend's compute stream and the stream collectives run on. The NCCL
// communicator (parallel/nccl/nccl_communicator.hpp) implements it; declaring it
// here keeps backend/ below parallel/ (the backend never names a communicator).
// Neither ordering blocks the host.
#pragma once

#include <cuda_runtime_api.h>

namespace shardtrain {

class CollectiveStream {
 public:
  virtual ~CollectiveStream() = default;
  // The CUDA device this rank computes on (current for the constructing thread).
  virtual int device() const = 0;
  // The collectives' stream waits for everything queued on `producer` so far.
  virtual void wait_for_stream(cudaStream_t producer) = 0;
  // `consumer` waits for everything queued on the collectives' stream so far.
  virtual void make_stream_wait(cudaStream_t consumer) = 0;
};

}  // namespace shardtrain
