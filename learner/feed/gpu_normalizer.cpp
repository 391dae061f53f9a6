#include "learner/feed/gpu_normalizer.hpp"

#include <algorithm>

#include "common/error.hpp"

#ifndef TANDEM_FEED_KERNEL
#include <c10/cuda/CUDAGuard.h>
#endif

namespace tandem::feed {

#ifdef TANDEM_FEED_KERNEL

GpuNormalizer::GpuNormalizer(std::string_view feed, const FeedLayout& layout, c10::DeviceIndex)
    : x_float_(layout.x_float),
      sample_elements_(static_cast<std::int64_t>(layout.x_elements)),
      y_bytes_(static_cast<std::int64_t>(layout.y_stride)) {
  if (layout.channels > kMaxAffineChannels)
    fail("{} normalises at most {} channels separately, got {}: give one mean/stddev", feed, kMaxAffineChannels,
         layout.channels);
  affine_.channels = static_cast<std::int32_t>(layout.channels);
  affine_.plane = static_cast<std::int64_t>(layout.plane);
  std::copy(layout.scale.begin(), layout.scale.end(), affine_.scale);
  std::copy(layout.bias.begin(), layout.bias.end(), affine_.bias);
}

void GpuNormalizer::apply(const torch::Tensor& x, const torch::Tensor& y, const torch::Tensor& order,
                          std::int64_t first, Batch& out, cuda::StreamHandle stream) const {
  GatherArgs args;
  args.x = x.data_ptr();
  args.x_float = x_float_;
  args.sample_elements = sample_elements_;
  args.y = y.data_ptr();
  args.y_bytes = y_bytes_;
  args.index = order.defined() ? order.data_ptr<std::int64_t>() + first : nullptr;
  args.n = out.y.size(0);
  args.x_out = out.x.data_ptr<float>();
  args.y_out = out.y.data_ptr();
  launch_gather_normalize(args, affine_, stream);
}

#else

GpuNormalizer::GpuNormalizer(std::string_view, const FeedLayout& layout, c10::DeviceIndex device)
    : channels_(static_cast<std::int64_t>(layout.channels)), plane_(static_cast<std::int64_t>(layout.plane)) {
  c10::cuda::CUDAGuard guard(device);
  const auto on_gpu = torch::TensorOptions().dtype(torch::kFloat).device(torch::kCUDA, device);
  scale_ = torch::tensor(layout.scale).view({1, channels_, 1}).to(on_gpu);
  bias_ = torch::tensor(layout.bias).view({1, channels_, 1}).to(on_gpu);
}

// Torch enqueues on the current stream, which the caller made `stream`.
void GpuNormalizer::apply(const torch::Tensor& x, const torch::Tensor& y, const torch::Tensor& order,
                          std::int64_t first, Batch& out, cuda::StreamHandle) const {
  const std::int64_t m = out.y.size(0);
  const torch::Tensor rows = order.defined() ? order.narrow(0, first, m) : torch::Tensor();
  out.x.copy_(rows.defined() ? x.index_select(0, rows) : x);
  out.x.view({m, channels_, plane_}).mul_(scale_).add_(bias_);
  if (rows.defined()) torch::index_select_out(out.y, y, 0, rows);
  else out.y.copy_(y);
}

#endif

}  // namespace tandem::feed
