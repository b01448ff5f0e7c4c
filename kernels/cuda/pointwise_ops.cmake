# Pointwise/row CUDA ops (kernels/cuda): target_sources(shardtrain_cuda_kernels PRIVATE ...)
