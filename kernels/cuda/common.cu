// Launch checks shared by the CUDA ops (see common.cuh).
#include "kernels/cuda/common.cuh"

#include <string>

#include "core/cuda_check.hpp"

namespace shardtrain::cuda {

void check_launch(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    SHARDTRAIN_FAIL(std::string("kernel launch ") + what + " failed: " + cudaGetErrorName(err) + ": " +
                    cudaGetErrorString(err));
}

}  // namespace shardtrain::cuda
