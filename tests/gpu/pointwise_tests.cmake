# Device tests of the pointwise/row CUDA ops (label gpu).
# kernels/cuda embedding, layernorm, gelu, cross_entropy, elementwise and adamw
# against the Kokkos host kernels and AdamW::step, for float / f16 / bf16. Needs a
# GPU: without one every test fails (never skips). Kokkos is initialised by
# shardtrain_kokkos_gtest_env.
add_executable(gpu_pointwise_kernels_test pointwise_kernels_test.cpp)
target_link_libraries(gpu_pointwise_kernels_test PRIVATE
  shardtrain_cuda_kernels shardtrain_kernels shardtrain_app shardtrain_kokkos_gtest_env
  shardtrain_gpu_test_kernels GTest::gtest GTest::gtest_main)
target_compile_options(gpu_pointwise_kernels_test PRIVATE -Wall -Wextra)
add_test(NAME gpu_pointwise_kernels COMMAND gpu_pointwise_kernels_test)
set_tests_properties(gpu_pointwise_kernels PROPERTIES LABELS "gpu;gpu1")
add_dependencies(cuda-build gpu_pointwise_kernels_test)

# The CNN's max-pool and dropout CUDA ops, bitwise against the host kernels.
add_executable(gpu_cnn_kernels_test cnn_kernels_test.cpp)
target_link_libraries(gpu_cnn_kernels_test PRIVATE
  shardtrain_cuda_kernels shardtrain_kernels shardtrain_kokkos_gtest_env GTest::gtest GTest::gtest_main)
target_compile_options(gpu_cnn_kernels_test PRIVATE -Wall -Wextra)
add_test(NAME gpu_cnn_kernels COMMAND gpu_cnn_kernels_test)
set_tests_properties(gpu_cnn_kernels PROPERTIES LABELS "gpu;gpu1")
add_dependencies(cuda-build gpu_cnn_kernels_test)

# The CNN on the device (CudaModelOps: cuDNN convolutions, pool, dropout) against
# the host model (labels gpu;mpi, one GPU).
add_executable(gpu_cnn_device_model_test cnn_device_model_test.cpp)
target_link_libraries(gpu_cnn_device_model_test PRIVATE shardtrain_app shardtrain_mpi_gtest_main)
target_compile_options(gpu_cnn_device_model_test PRIVATE -Wall -Wextra)
shardtrain_mpi_test(gpu_cnn_device_model gpu_cnn_device_model_test RANKS 1 LABELS gpu)
set_property(TEST gpu_cnn_device_model_np1 APPEND PROPERTY LABELS gpu1)
add_dependencies(cuda-build gpu_cnn_device_model_test)
