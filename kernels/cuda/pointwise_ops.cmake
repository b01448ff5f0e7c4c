# Pointwise/row CUDA ops (kernels/cuda; vector_reduce: the backend's norm, inf/NaN scan, conversions): target_sources(shardtrain_cuda_kernels PRIVATE ...)
target_sources(shardtrain_cuda_kernels PRIVATE
  embedding.cu layernorm.cu gelu.cu cross_entropy.cu elementwise.cu adamw.cu vector_reduce.cu relu.cu
  tanh.cu  # the BERT pooler
  crc32.cu)  # crc32: the weights CRC of metrics.csv, hashed where the weights are
# CNN: max pooling with int32 argmax and inverted dropout, bitwise as the host kernels.
target_sources(shardtrain_cuda_kernels PRIVATE pool.cu dropout.cu)
# CNN: the convolution's bias add and deterministic bias gradient (cudnn_conv uses them).
target_sources(shardtrain_cuda_kernels PRIVATE conv_bias.cu)
