# Device tests of the cuBLAS GEMM, linear and attention CUDA ops (label gpu).
