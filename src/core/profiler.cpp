// shardtrain/core/profiler.cpp: names and classes of the profiled ops.
#include "core/profiler.hpp"

namespace shardtrain {

std::string_view profile_op_name(ProfileOp op) {
  switch (op) {
    case ProfileOp::Linear: return "linear";
    case ProfileOp::Attention: return "attention";
    case ProfileOp::Conv2d: return "conv2d";
    case ProfileOp::Embedding: return "embedding";
    case ProfileOp::LayerNorm: return "layernorm";
    case ProfileOp::Gelu: return "gelu";
    case ProfileOp::CrossEntropy: return "cross_entropy";
    case ProfileOp::Relu: return "relu";
    case ProfileOp::Pool: return "max_pool";
    case ProfileOp::Dropout: return "dropout";
    case ProfileOp::SeqPool: return "seq_pool";
    case ProfileOp::Staging: return "staging/copies";
    case ProfileOp::GradZero: return "grad_zero";
    case ProfileOp::GradReduce: return "grad_reduce";
    case ProfileOp::GradNorm: return "grad_norm";
    case ProfileOp::Optimizer: return "adamw";
    case ProfileOp::ParamGather: return "param_gather";
    case ProfileOp::Count: break;
  }
  return "?";
}

ProfileClass profile_op_class(ProfileOp op) {
  switch (op) {
    case ProfileOp::Linear:
    case ProfileOp::Attention:
    case ProfileOp::Conv2d: return ProfileClass::Gemm;
    case ProfileOp::GradReduce:
    case ProfileOp::ParamGather: return ProfileClass::Communication;
    case ProfileOp::Optimizer: return ProfileClass::Optimizer;
    default: return ProfileClass::Elementwise;
  }
}

std::string_view profile_class_name(ProfileClass c) {
  switch (c) {
    case ProfileClass::Gemm: return "GEMM";
    case ProfileClass::Elementwise: return "elementwise";
    case ProfileClass::Communication: return "communication";
    case ProfileClass::Optimizer: return "optimizer";
    case ProfileClass::Count: break;
  }
  return "?";
}

}  // namespace shardtrain
