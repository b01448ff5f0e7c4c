# cuDNN ops of the CUDA kernels (kernels/cuda), CUDA build only.
# cudnn_sdpa: causal attention through cuDNN's fused SDPA (flash attention)
# graphs, built from the host-validated description in shardtrain_cudnn_graph
# (kernels/cuda/cudnn_graph.hpp). Device test: tests/gpu/cudnn_tests.cmake.
target_sources(shardtrain_cuda_kernels PRIVATE ${CMAKE_CURRENT_LIST_DIR}/cudnn_sdpa.cpp)
target_link_libraries(shardtrain_cuda_kernels PUBLIC shardtrain_cudnn_graph)
# cudnn_conv: the CNN's 2-D convolution (forward, backward data/filter; the bias by conv_bias.cu) through
# cuDNN's convolution API with deterministic algorithms. Device test:
# tests/gpu/cudnn_tests.cmake.
target_sources(shardtrain_cuda_kernels PRIVATE ${CMAKE_CURRENT_LIST_DIR}/cudnn_conv.cpp)
