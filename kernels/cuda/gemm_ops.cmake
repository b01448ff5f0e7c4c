# cuBLAS GEMM, linear and attention CUDA ops (kernels/cuda): target_sources(shardtrain_cuda_kernels PRIVATE ...)
