# Device tests of the pointwise/row CUDA ops (label gpu).
