// What tandem.envs' two bindings share (envs.cpp: the synchronous VecEnv; async_envs.cpp: the
// asynchronous one): the result type, the actions as the C++ engines read them, the spaces as a dict.
//
// Threads: called with the GIL held.
#pragma once

#include <torch/csrc/autograd/python_variable.h>  // before pybind11: the at::Tensor caster
#include <torch/types.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>

#include "common/env_spec.hpp"
#include "common/settings/actor.hpp"
#include "python/bindings/module.hpp"

namespace tandem::python {

// What one reset or step returns: observations [N, obs_dim] f32, rewards [N] f32, terminated and
// truncated [N] bool, and where an episode just ended its last observation, return and length. From
// an asynchronous env also env_ids [N] int32, which env each row is (empty otherwise).
struct StepResult {
  at::Tensor observations, rewards, terminated, truncated, final_observations, episode_returns, episode_lengths,
      env_ids;
};

// A copy of `values` as a new 1-D tensor of `dtype` (which must have T's size).
template <class T>
at::Tensor copy_of(std::span<const T> values, at::ScalarType dtype) {
  at::Tensor out = torch::empty({static_cast<std::int64_t>(values.size())}, dtype);
  std::memcpy(out.data_ptr(), values.data(), values.size_bytes());
  return out;
}

// The actions for `n` envs as the engines read them: [n] int32 for a discrete space, [n, action_dim]
// float32 for a continuous one (a [n] tensor is taken for action_dim = 1), contiguous on the CPU. A
// tandem.ShapeError in one line for any other shape, dtype or an index out of range.
at::Tensor checked_actions(const at::Tensor& actions, const EnvSpec& spec, std::int64_t n);

// ShapeError naming `what` for a sparse (or any non-strided) tensor: the checks read dense ones.
void require_strided(const at::Tensor& t, const char* what);

// make()'s arguments, checked alike for both kinds (tandem.Error naming the argument, its value quoted
// and cut): a built-in env by any spelling envs::builtin_env_name takes, or "plugin" with the path of a
// file (not "python": a Python env is stepped from Python), 1..EnvSettings::kMaxEnvs envs,
// 1..min(num_envs, EnvSettings::kMaxThreads) threads, a uint64 seed.
struct EnvRequest {
  EnvSettings settings;
  int num_envs = 1;
  int threads = 1;
  std::uint64_t seed = 0;
};
EnvRequest env_request(const std::string& name, const std::string& plugin, py::handle num_envs, py::handle threads,
                       py::handle seed);
// reset()'s seed: None (the envs' streams go on) or a uint64.
std::optional<std::uint64_t> reset_seed(py::handle seed);

// "Long (3,)": a tensor as the messages show it.
std::string described(const at::Tensor& t);

// recv() waits without the GIL, so another Python thread may call the env meanwhile; the C++ envs have
// one owner thread. Every call checks this under the GIL first and is refused while a recv() waits.
// A child after fork() is another caller too: the env's threads did not come with it, so a step there
// would wait for ever. The pid the env was made in tells; a forked env's destructor must leak its
// threads (joining one the child does not have would hang).
class OneCaller {
 public:
  void check(const char* call) const;  // tandem.Error while a recv() waits, or in a child after fork()
  bool forked() const { return ::getpid() != made_in_; }
  // Marks the env as waiting in recv() until the returned guard goes (on return or an exception).
  struct Waiting {
    bool& flag;
    ~Waiting() { flag = false; }
  };
  [[nodiscard]] Waiting waiting() {
    check("recv()");
    receiving_ = true;
    return Waiting{receiving_};
  }

 private:
  bool receiving_ = false;  // read and written under the GIL only
  pid_t made_in_ = ::getpid();
};

// The spec as tandem.envs reads it: name, obs_dim, obs_shape ((C, H, W) for images, else (obs_dim,)),
// the observation bounds (obs_low, obs_high: obs_dim floats, infinite where the env declares none),
// num_actions, action_dim, action bounds, time limit.
py::dict spaces_of(const EnvSpec& spec);

}  // namespace tandem::python
