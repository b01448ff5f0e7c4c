# cuBLAS GEMM, linear (and cuBLASLt linear) and attention CUDA ops (and our tiled attention, no cuBLAS) (kernels/cuda): target_sources(shardtrain_cuda_kernels PRIVATE ...)
target_sources(shardtrain_cuda_kernels PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/gemm.cu
  ${CMAKE_CURRENT_LIST_DIR}/linear.cu
  ${CMAKE_CURRENT_LIST_DIR}/lt_linear.cu  # cuBLASLt Linear with epilogues (model.gemm = "cublaslt")
  ${CMAKE_CURRENT_LIST_DIR}/attention.cu
  ${CMAKE_CURRENT_LIST_DIR}/flash_attention.cu)  # our tiled attention (model.attention = "flash")
