// What a model is built from: its name and the shape of the data. Shared by the model registry
// (models.hpp) and the built-in networks (builtin_nets/networks.hpp), which include nothing of each
// other's but this. Plain data; any thread.
#pragma once

#include <cstdint>
#include <string>

namespace tandem {

struct ModelSpec {
  std::string name;           // a built-in name, or a TorchScript file path
  std::int64_t channels = 1;  // input shape of one sample: C, H, W
  std::int64_t height = 28;
  std::int64_t width = 28;
  std::int64_t num_classes = 10;
  std::uint64_t seed = 0;  // seeds LibTorch's default generator before initialising the weights
  // actor_critic_mlp only (rl_model.hpp sets them; other networks ignore them):
  std::int64_t gaussian_dims = 0;  // > 0: a Gaussian policy over this many action dimensions
  bool norm_obs = false;           // normalise observations by running statistics held as buffers
  std::int64_t hidden = 64;        // actor_critic_mlp: units in each of its two tanh layers
  bool shared_trunk = false;       // actor_critic_mlp: one trunk under both heads, not one each
};

// actor_critic_mlp's buffers with norm_obs: the running observation statistics (rl_model.hpp says
// who updates them), float32 [obs_dim] x 2 and float64 [1].
inline constexpr const char* kObsMeanBuffer = "obs_mean";
inline constexpr const char* kObsVarBuffer = "obs_var";
inline constexpr const char* kObsCountBuffer = "obs_count";

}  // namespace tandem
