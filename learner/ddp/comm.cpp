#include "learner/ddp/comm.hpp"

#include <torch/types.h>

namespace tandem::ddp {

// Backends that reduce any memory equally well (Gloo, NCCL) take ordinary memory on the device.
at::Tensor Communicator::gradient_buffer(std::int64_t numel, at::Device device) {
  return torch::zeros({numel}, torch::TensorOptions().dtype(torch::kFloat32).device(device));
}

}  // namespace tandem::ddp
