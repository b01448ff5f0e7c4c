# Device tests of the cuBLAS GEMM, linear (cuBLAS and cuBLASLt) and attention CUDA ops (label gpu).
# gpu_gemm_kernels_test: kernels/cuda/{gemm,linear,attention} against the Kokkos
# host kernels for float, __half, __nv_bfloat16; one process, one device. Without
# a device it prints why and exits 1 (never skips).
add_executable(gpu_gemm_kernels_test gemm_kernels_test.cpp)
target_link_libraries(gpu_gemm_kernels_test PRIVATE
  shardtrain_cuda_kernels shardtrain_kernels shardtrain_gpu_test_kernels GTest::gtest CUDA::cudart CUDA::cublas)
target_compile_options(gpu_gemm_kernels_test PRIVATE -Wall -Wextra)
add_test(NAME gpu_gemm_kernels COMMAND gpu_gemm_kernels_test)
set_tests_properties(gpu_gemm_kernels PROPERTIES LABELS "gpu;gpu1")
add_dependencies(cuda-build gpu_gemm_kernels_test)

# gpu_lt_linear_test: the cuBLASLt Linear with its bias and bias-gradient epilogues
# (kernels/cuda/lt_linear.cuh, model.gemm = "cublaslt") against the host kernels,
# float / __half / __nv_bfloat16, the cuBLAS-path fallback on ragged shapes, and two
# runs bitwise equal. Without a device it prints why and exits 1 (never skips).
add_executable(gpu_lt_linear_test lt_linear_test.cpp)
target_link_libraries(gpu_lt_linear_test PRIVATE
  shardtrain_cuda_kernels shardtrain_kernels GTest::gtest CUDA::cudart CUDA::cublas CUDA::cublasLt)
target_compile_options(gpu_lt_linear_test PRIVATE -Wall -Wextra)
add_test(NAME gpu_lt_linear COMMAND gpu_lt_linear_test)
set_tests_properties(gpu_lt_linear PROPERTIES LABELS "gpu;gpu1")
add_dependencies(cuda-build gpu_lt_linear_test)

# gpu_encoder_kernels_test: the encoder classifier's masked / bidirectional
# attention and mean pooling (kernels/cuda/{attention,seq_pool}) against the host.
add_executable(gpu_encoder_kernels_test encoder_kernels_test.cpp)
target_link_libraries(gpu_encoder_kernels_test PRIVATE
  shardtrain_cuda_kernels shardtrain_kernels GTest::gtest CUDA::cudart CUDA::cublas)
target_compile_options(gpu_encoder_kernels_test PRIVATE -Wall -Wextra)
add_test(NAME gpu_encoder_kernels COMMAND gpu_encoder_kernels_test)
set_tests_properties(gpu_encoder_kernels PROPERTIES LABELS "gpu;gpu1")
add_dependencies(cuda-build gpu_encoder_kernels_test)

# gpu_flash_attention_test: our tiled attention (kernels/cuda/flash_attention.cuh,
# model.attention = "flash") against the Kokkos host attention, float / __half /
# __nv_bfloat16, a planted-error case and bitwise repeatability at T = 1024.
add_executable(gpu_flash_attention_test flash_attention_test.cpp)
target_link_libraries(gpu_flash_attention_test PRIVATE
  shardtrain_cuda_kernels shardtrain_kernels shardtrain_gpu_test_kernels GTest::gtest CUDA::cudart)
target_compile_options(gpu_flash_attention_test PRIVATE -Wall -Wextra)
add_test(NAME gpu_flash_attention COMMAND gpu_flash_attention_test)
set_tests_properties(gpu_flash_attention PROPERTIES LABELS "gpu;gpu1")
add_dependencies(cuda-build gpu_flash_attention_test)
