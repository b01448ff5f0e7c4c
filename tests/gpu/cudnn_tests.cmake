# Device tests of the cuDNN ops (label gpu).
# gpu_cudnn_sdpa_test: CudnnSdpa (kernels/cuda/cudnn_sdpa.cuh, cuDNN's fused SDPA
# graphs) against our CUDA attention kernels (kernels/cuda/attention.cuh), for
# __half and __nv_bfloat16; one process, one device. Without a device it prints
# why and exits 1 (never skips). The graph description itself is unit-tested on
# the host (tests/unit/kernels/cuda/cudnn_graph_test.cpp).
add_executable(gpu_cudnn_sdpa_test cudnn_sdpa_test.cpp)
target_link_libraries(gpu_cudnn_sdpa_test PRIVATE
  shardtrain_cuda_kernels shardtrain_cudnn_graph GTest::gtest CUDA::cudart CUDA::cublas CUDNN::cudnn)
target_compile_options(gpu_cudnn_sdpa_test PRIVATE -Wall -Wextra)
add_test(NAME gpu_cudnn_sdpa COMMAND gpu_cudnn_sdpa_test)
set_tests_properties(gpu_cudnn_sdpa PROPERTIES LABELS "gpu;gpu1")
add_dependencies(cuda-build gpu_cudnn_sdpa_test)

# gpu_cudnn_conv_test: CudnnConv2d (kernels/cuda/cudnn_conv.cuh) against a float64
# direct convolution, float / __half / __nv_bfloat16, deterministic backward.
add_executable(gpu_cudnn_conv_test cudnn_conv_test.cpp)
target_link_libraries(gpu_cudnn_conv_test PRIVATE shardtrain_cuda_kernels GTest::gtest CUDA::cudart CUDNN::cudnn)
target_compile_options(gpu_cudnn_conv_test PRIVATE -Wall -Wextra)
add_test(NAME gpu_cudnn_conv COMMAND gpu_cudnn_conv_test)
set_tests_properties(gpu_cudnn_conv PROPERTIES LABELS "gpu;gpu1")
add_dependencies(cuda-build gpu_cudnn_conv_test)
