// A rollout actor's policy on a GPU (actor.device = "cuda", actor/rollout.hpp): the slot it writes is
// the one the same policy writes on the CPU, the actions drawn from the same CPU generator.
#include "tests/torch_doctest.hpp"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>

#include "actor/rollout.hpp"
#include "common/torch/rl_model.hpp"
#include "tests/actor_rollout_fixture.hpp"
#include "tests/harness.hpp"

TANDEM_GPU_TEST_BINARY();

#ifdef TANDEM_TORCH_CUDA
using namespace tandem;

namespace {

struct Acted {
  std::vector<float> values, logits;
  std::vector<std::int64_t> actions;
};

// One slot of `steps` x `envs` CartPoles acted by the config's model on `device`.
Acted act_one_slot(const torch::Device& device, std::uint32_t steps, std::uint32_t envs) {
  const JobSettings config = test::rl_config("[env]\nname = \"cartpole\"\n[model]\nname = \"actor_critic_mlp\"\n");
  const envs::EnvSource source(config.env);
  Model model = make_rl_model(config.model, config.rl, source.spec());  // seeded: the same weights each call
  model.to(device);
  envs::VecEnv env(source.make(static_cast<int>(envs)), 7, 0);
  const std::string job = test::unique_name("rollout-gpu");
  shm::ExperienceRings rings = shm::ExperienceRings::create(job, test::ring_shape(source.spec(), 1, 1, steps, envs));
  shm::ExperienceWriter writer = shm::ExperienceWriter::attach(job, 0);
  actor::Rollout rollout(model, policy_head_for(source.spec()), env, writer.descriptor(), rings.segment_name(),
                         at::make_generator<at::CPUGeneratorImpl>(3));
  auto slot = writer.begin_write();
  REQUIRE(slot);
  CHECK(rollout.fill(*slot, 1).complete);
  const std::size_t rows = std::size_t{steps} * envs;
  return {{slot->values(), slot->values() + rows + envs},
          {slot->logits(), slot->logits() + rows * 2},
          {slot->discrete_actions(), slot->discrete_actions() + rows}};
}

}  // namespace

TEST_CASE("rollout: a policy on a GPU writes the slot the same policy writes on the CPU") {
  const std::uint32_t steps = 64, envs = 8;
  const Acted cpu = act_one_slot(torch::Device(torch::kCPU), steps, envs);
  const Acted gpu = act_one_slot(torch::Device(torch::kCUDA, 0), steps, envs);
  // Step 0 sees the same observations: the heads agree to float rounding.
  for (std::uint32_t e = 0; e < envs; ++e) {
    CHECK(std::abs(gpu.values[e] - cpu.values[e]) < 1e-4);
    CHECK(std::abs(gpu.logits[2 * e] - cpu.logits[2 * e]) < 1e-4);
  }
  // An action flips only where a uniform draw lands within rounding of a probability; one flip then
  // moves its env's later steps, so nearly every action, not every one, must agree.
  std::size_t same = 0;
  for (std::size_t i = 0; i < cpu.actions.size(); ++i) same += cpu.actions[i] == gpu.actions[i];
  CHECK(same >= cpu.actions.size() * 95 / 100);
}
#endif
