// The rollout actor's slot filling (actor/rollout.hpp), in process: every field of a slot is what the
// envs and the acting model give, for a discrete env, a continuous one and a plugin loaded with dlopen.
#include "tests/actor_rollout_fixture.hpp"

#include <ATen/CPUGeneratorImpl.h>

#include <cstdlib>

#include "actor/rollout.hpp"
#include "common/error.hpp"
#include "common/torch/rl_model.hpp"
#include "tests/harness.hpp"

using namespace tandem;

namespace {

// Fills `slots` slots of a fresh one-actor ring with an actor stepping `envs` envs of `toml`'s env,
// checking each by replaying it; returns the episodes that finished.
std::uint32_t fill_and_replay(const std::string& toml, std::uint32_t steps, std::uint32_t envs, int slots) {
  const JobSettings config = test::rl_config(toml);
  const envs::EnvSource source(config.env);
  Model model = make_rl_model(config.model, config.rl, source.spec());
  envs::VecEnv env(source.make(static_cast<int>(envs)), 7, 0);
  envs::VecEnv replay(source.make(static_cast<int>(envs)), 7, 0);
  const std::string job = test::unique_name("rollout");
  shm::ExperienceRings rings = shm::ExperienceRings::create(job, test::ring_shape(source.spec(), 1, 2, steps, envs));
  shm::ExperienceWriter writer = shm::ExperienceWriter::attach(job, 0);
  actor::Rollout rollout(model, policy_head_for(source.spec()), env, writer.descriptor(), rings.segment_name(),
                         at::make_generator<at::CPUGeneratorImpl>(3));
  std::uint32_t episodes = 0;
  for (int n = 0; n < slots; ++n) {
    auto slot = writer.begin_write();
    REQUIRE(slot);
    const actor::SlotStats stats = rollout.fill(*slot, 40 + n);
    CHECK(stats.complete);
    writer.commit(*slot);
    auto read = rings.peek(0);
    REQUIRE(read);
    CHECK(rings.verify(0, *read));
    CHECK(read->header().seq == static_cast<std::uint64_t>(n));
    CHECK(read->header().policy_version == static_cast<std::uint64_t>(40 + n));
    CHECK(read->header().episodes == stats.episodes);
    test::check_slot_replays(*read, rings.descriptor(), replay, &model);
    episodes += stats.episodes;
    rings.release(0);
  }
  return episodes;
}

}  // namespace

TEST_CASE("rollout: CartPole slots hold the envs' steps, the acting policy's outputs and the version, and verify") {
  const std::uint32_t episodes = fill_and_replay("[env]\nname = \"cartpole\"\n[model]\nname = \"actor_critic_mlp\"\n",
                                                 64, 4, 3);
  CHECK(episodes > 0);  // a random CartPole policy ends episodes within a few dozen steps
}

TEST_CASE("rollout: CartPole rewards are 1 and a slot's episodes are its done steps") {
  const JobSettings config = test::rl_config("[env]\nname = \"cartpole\"\n[model]\nname = \"actor_critic_mlp\"\n");
  const envs::EnvSource source(config.env);
  Model model = make_rl_model(config.model, config.rl, source.spec());
  envs::VecEnv env(source.make(8), 1, 2);
  const std::string job = test::unique_name("rollout");
  shm::ExperienceRings rings = shm::ExperienceRings::create(job, test::ring_shape(source.spec(), 3, 1, 50, 8));
  shm::ExperienceWriter writer = shm::ExperienceWriter::attach(job, 2);
  actor::Rollout rollout(model, policy_head_for(source.spec()), env, writer.descriptor(), rings.segment_name(), {});
  auto slot = writer.begin_write();
  REQUIRE(slot);
  const actor::SlotStats stats = rollout.fill(*slot, 1);
  writer.commit(*slot);
  auto read = rings.peek(2);
  REQUIRE(read);
  CHECK(rings.verify(2, *read));
  std::uint32_t done = 0;
  for (std::size_t i = 0; i < 50 * 8; ++i) {
    CHECK(read->rewards()[i] == 1.0f);
    done += read->terminated()[i] | read->truncated()[i];
  }
  CHECK(done == stats.episodes);
  CHECK(done > 0);
  for (std::uint32_t i = 0; i < stats.episodes; ++i)  // CartPole's return is its length
    CHECK(read->episode_returns()[i] == static_cast<float>(read->episode_lengths()[i]));
  CHECK(stats.return_sum == doctest::Approx(stats.length_sum));
}

TEST_CASE("rollout: Pendulum slots carry continuous actions whose log-probabilities the learner recomputes") {
  fill_and_replay("[env]\nname = \"pendulum\"\n[model]\nname = \"actor_critic_mlp\"\n", 32, 3, 2);
}

TEST_CASE("rollout: the example plugin env is acted through dlopen") {
  const char* plugin = std::getenv("TANDEM_CORRIDOR_PLUGIN");
  REQUIRE_MESSAGE(plugin != nullptr, "TANDEM_CORRIDOR_PLUGIN is not set (meson sets it)");
  fill_and_replay(std::string("[env]\nname = \"plugin\"\nplugin = \"") + plugin +
                      "\"\n[model]\nname = \"actor_critic_mlp\"\n",
                  40, 4, 2);
}

TEST_CASE("rollout: a stop mid-slot leaves the slot incomplete, uncommitted") {
  const JobSettings config = test::rl_config("[env]\nname = \"cartpole\"\n[model]\nname = \"actor_critic_mlp\"\n");
  const envs::EnvSource source(config.env);
  Model model = make_rl_model(config.model, config.rl, source.spec());
  envs::VecEnv env(source.make(2), 1, 0);
  const std::string job = test::unique_name("rollout");
  shm::ExperienceRings rings = shm::ExperienceRings::create(job, test::ring_shape(source.spec(), 1, 2, 16, 2));
  shm::ExperienceWriter writer = shm::ExperienceWriter::attach(job, 0);
  actor::Rollout rollout(model, policy_head_for(source.spec()), env, writer.descriptor(), rings.segment_name(), {});
  int asked = 0;
  auto slot = writer.begin_write();
  REQUIRE(slot);
  CHECK_FALSE(rollout.fill(*slot, 1, [&] { return ++asked > 5; }).complete);
  CHECK(asked == 6);
  CHECK_FALSE(rings.peek(0));
}

TEST_CASE("rollout: rings shaped for another env are a one-line error naming the segment") {
  const JobSettings config = test::rl_config(
      "[env]\nname = \"cartpole\"\nenvs = 4\n[model]\nname = \"actor_critic_mlp\"\n");
  const envs::EnvSource source(config.env);
  Model model = make_rl_model(config.model, config.rl, source.spec());
  envs::VecEnv env(source.make(4), 1, 0);
  const envs::EnvSource other(test::rl_config("[env]\nname = \"acrobot\"\n").env);
  const std::string job = test::unique_name("rollout");
  shm::ExperienceRings rings = shm::ExperienceRings::create(job, test::ring_shape(other.spec(), 1, 2, 8, 4));
  const std::string err = test::error_of([&] {
    actor::Rollout(model, policy_head_for(source.spec()), env, rings.descriptor(), rings.segment_name(), {});
  });
  CHECK(err.find(rings.segment_name()) != std::string::npos);
  CHECK(err.find("CartPole-v1") != std::string::npos);
  CHECK(err.find('\n') == std::string::npos);
}

TEST_CASE("rollout: a model without a value head is refused, naming the model") {
  const JobSettings config = test::rl_config("[env]\nname = \"cartpole\"\n[model]\nname = \"mlp\"\n");
  const envs::EnvSource source(config.env);
  const std::string err = test::error_of([&] { (void)make_rl_model(config.model, config.rl, source.spec()); });
  CHECK(err.find("model 'mlp'") != std::string::npos);
  CHECK(err.find("no value head") != std::string::npos);
}
