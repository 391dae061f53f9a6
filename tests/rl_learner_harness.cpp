// The RL learner's test harness (rl_learner_harness.hpp): the learner child and the producer that
// stands in for the rollout actors.
#include "tests/rl_learner_harness.hpp"

#include <doctest/doctest.h>

#include <fstream>
#include <thread>

#include "common/error.hpp"
#include "common/program.hpp"
#include "common/torch/rl_model.hpp"
#include "common/torch/safetensors.hpp"
#include "envs/env_source.hpp"
#include "envs/vec_env.hpp"
#include "learner/rl/rl_learner.hpp"
#include "learner/trainer.hpp"
#include "shm/control_block.hpp"
#include "shm/experience_ring.hpp"

namespace tandem::test {
namespace {


// Runs the learner on child_args()[0] (a job config) in the job of TANDEM_JOB, as the rank RANK &c.
// name (one rank where they are unset), as tandem-learner does.
TANDEM_CHILD("rl-learner") {
  try {
    const ddp::RankInfo rank = ddp::rank_from_env();
    const JobSettings settings = JobSettings::parse(
        load_program_config(child_args()[0], {}),
        program_shape(static_cast<std::uint32_t>(rank.world_size), static_cast<std::uint32_t>(rank.local_world_size)));
    catch_stop_signals();
    shm::JobProcess process("learner");
    return run_rl_learner(settings, process, rank);
  } catch (const UserError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
}

}  // namespace

std::string write_config(const TempDir& dir, const std::string& algo, const std::string& extra,
                         const std::string& update, const std::string& device) {
  std::string path = dir.file("job.toml");
  std::ofstream out(path);
  out << "[env]\nname = \"cartpole\"\nenvs = 4\nseed = 0\n"
      << "[rl]\nrollout_steps = 16\nslots_per_ring = 2\nslots_per_update = 2\ntotal_env_steps = 1024\n"
      << update << "[learner]\nalgo = \"" << algo << "\"\ndevice = \"" << device << "\"\nreport_every_steps = 1\n"
      << "[optimizer]\nname = \"adam\"\nlr = 0.001\nweight_decay = 0.0\n"
      << "[checkpoint]\nevery_steps = 0\n"
      << "[model]\nname = \"actor_critic_mlp\"\n"
      << "[actor]\nrole = \"rollout\"\nevaluators = 0\n"
      << extra;
  return path;
}

namespace {

// A rollout actor without a policy: uniformly random CartPole actions, every field as a real one
// writes it, tagged with version 1 (the learner's first) whatever the learner publishes since.
class RandomProducer {
 public:
  RandomProducer(const std::string& job, std::uint32_t actor)
      : writer_(shm::ExperienceWriter::attach(job, actor)),
        envs_(make_envs(writer_.descriptor().envs), 7, actor),
        rng_(envs::env_seed(11, actor, 0)) {}

  // Writes one slot if the ring has room; `corrupt` commits it with a wrong checksum.
  bool write(bool corrupt = false) {
    const auto slot = writer_.begin_write();
    if (!slot) return false;
    const shm::ExperienceDescriptor& d = writer_.descriptor();
    const std::uint32_t T = d.steps, E = d.envs, D = d.obs_dim;
    std::uint32_t episodes = 0;
    std::vector<std::int32_t> actions(E);
    std::fill_n(slot->final_observations(), std::size_t{T} * E * D, 0.0f);
    for (std::uint32_t t = 0; t < T; ++t) {
      std::copy(envs_.observations().begin(), envs_.observations().end(), slot->observations() + t * E * D);
      for (std::uint32_t e = 0; e < E; ++e) {
        actions[e] = static_cast<std::int32_t>(rng_.next() % 2);
        slot->discrete_actions()[t * E + e] = actions[e];
        slot->log_probs()[t * E + e] = std::log(0.5f);
        slot->logits()[(t * E + e) * 2] = slot->logits()[(t * E + e) * 2 + 1] = 0.0f;
        slot->values()[t * E + e] = 0.0f;
      }
      REQUIRE(envs_.step(std::span<const std::int32_t>(actions)));
      for (std::uint32_t e = 0; e < E; ++e) {
        const std::uint32_t i = t * E + e;
        slot->rewards()[i] = envs_.rewards()[e];
        slot->terminated()[i] = envs_.terminated()[e];
        slot->truncated()[i] = envs_.truncated()[e];
        if (envs_.terminated()[e] || envs_.truncated()[e]) {
          std::copy_n(envs_.final_observations().begin() + e * D, D, slot->final_observations() + i * D);
          slot->episode_returns()[episodes] = static_cast<float>(envs_.episode_returns()[e]);
          slot->episode_lengths()[episodes++] = static_cast<std::uint32_t>(envs_.episode_lengths()[e]);
        }
      }
    }
    std::copy(envs_.observations().begin(), envs_.observations().end(), slot->observations() + T * E * D);
    std::fill_n(slot->values() + T * E, E, 0.0f);
    slot->header().policy_version = 1;
    slot->header().episodes = episodes;
    if (!corrupt) {
      writer_.commit(*slot);
    } else {  // the writer's protocol by hand, with a checksum that cannot match
      slot->header().seq = slot->index();
      slot->header().checksum = shm::slot_checksum(slot->bytes(), d) ^ 1;
      writer_.ring().head.store(slot->index() + 1, std::memory_order_release);
    }
    return true;
  }
  const shm::RingControl& ring() const { return writer_.ring(); }

 private:
  static std::vector<std::unique_ptr<envs::Env>> make_envs(std::uint32_t n) {
    std::vector<std::unique_ptr<envs::Env>> v;
    for (std::uint32_t i = 0; i < n; ++i) v.push_back(envs::make_env("CartPole-v1"));
    return v;
  }
  shm::ExperienceWriter writer_;
  envs::VecEnv envs_;
  envs::Rng rng_;
};

}  // namespace

LearnerRun run_learner(const TempDir& dir, const std::string& config, std::uint32_t actors, bool corrupt_first,
                       bool deterministic, int ranks) {
  const std::string job = unique_name("rl");
  shm::ControlBlock block = shm::ControlBlock::create(
      {.job = job, .learners = static_cast<std::uint32_t>(ranks), .actors = actors, .run_dir = dir.path().string()});
  const std::string port = std::to_string(free_loopback_port()), world = std::to_string(ranks);
  std::vector<std::pair<const char*, std::string>> env = {
      {"TANDEM_JOB", job}, {"TANDEM_ROLE", "learner"}, {"TANDEM_ACTORS", std::to_string(actors)}};
  if (deterministic) env.emplace_back("TANDEM_DETERMINISTIC", "1");
  if (ranks > 1)
    env.insert(
        env.end(),
        {{"WORLD_SIZE", world}, {"LOCAL_WORLD_SIZE", world}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", port}});
  for (const auto& [name, value] : env) ::setenv(name, value.c_str(), 1);
  std::vector<Child> learners;
  for (int r = 0; r < ranks; ++r) {
    for (const char* v : {"TANDEM_INDEX", "RANK", "LOCAL_RANK"})
      if (ranks > 1 || std::string(v) == "TANDEM_INDEX") ::setenv(v, std::to_string(r).c_str(), 1);
    learners.push_back(spawn_child("rl-learner", {config}));
  }
  for (const auto& [name, value] : env) ::unsetenv(name);
  for (const char* v : {"TANDEM_INDEX", "RANK", "LOCAL_RANK"}) ::unsetenv(v);

  LearnerRun run;
  std::vector<int> statuses(learners.size(), -1);
  auto all_exited = [&] {
    bool all = true;
    for (std::size_t r = 0; r < learners.size(); ++r)
      if (statuses[r] < 0 && !learners[r].wait_for(std::chrono::milliseconds(1), statuses[r])) all = false;
    return all;
  };
  Child& learner = learners[0];
  const std::string exp = shm::job_segment_name(job, shm::Kind::experience);
  // The rings are ready once the learner has built its model (attach refuses them until then).
  std::vector<std::unique_ptr<RandomProducer>> producers;
  while (producers.size() < actors && !learner.wait_for(std::chrono::milliseconds(1), run.status)) {
    try {
      producers.push_back(std::make_unique<RandomProducer>(job, static_cast<std::uint32_t>(producers.size())));
    } catch (const UserError&) {
    }
  }
  if (run.status >= 0) statuses[0] = run.status;
  if (run.status < 0) {
    bool corrupt = corrupt_first;
    while (!all_exited()) {
      bool wrote = false;
      for (auto& p : producers) {
        wrote = p->write(corrupt) || wrote;
        corrupt = false;
      }
      if (!wrote) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    for (const auto& p : producers) run.refused += p->ring().refused.load();
  }
  while (!all_exited()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  run.status = 0;
  for (int status : statuses)
    if (status != 0) {
      run.status = status;
      break;
    }
  run.metrics = block.read_metrics(block.row_of(shm::Role::learner, 0));
  if (auto latest = latest_checkpoint(dir.path().string())) run.checkpoint = *latest;
  // What the launcher does when a job ends: the learner keeps them for the job's actors.
  shm::Segment::unlink("/" + exp);
  shm::Segment::unlink("/" + shm::job_segment_name(job, shm::Kind::weights));
  return run;
}

double distance_from_initial(const std::string& checkpoint, const std::string& config_path) {
  const JobSettings settings = JobSettings::parse(load_program_config(config_path, {}), {});
  const envs::EnvSpec env = envs::EnvSource(settings.env).spec();
  Model initial = make_rl_model(settings.model, settings.rl, env);
  const safetensors::Contents c = safetensors::load_file(checkpoint);
  double most = 0;
  for (const auto& [name, t] : initial.named_parameters())
    most = std::max(most, (c.at("model." + name) - t).abs().max().item<double>());
  return most;
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

double model_difference(const std::string& a, const std::string& b) {
  const safetensors::Contents ca = safetensors::load_file(a), cb = safetensors::load_file(b);
  double most = 0, scale = 0;
  for (const auto& [name, t] : ca.tensors) {
    if (name.rfind("model.", 0) != 0) continue;
    most = std::max(most, (t - cb.at(name)).abs().max().item<double>());
    scale = std::max(scale, t.abs().max().item<double>());
  }
  return most / scale;
}

void check_ranks_learn_as_one_rank(const std::string& device, double tolerance) {
  // One minibatch of whole columns: the loss over the union is the mean of the ranks' losses, so the
  // averaged gradients are the union's. The single rank takes a slot of each ring per update in a
  // fixed order (deterministic mode), each rank the next slot of its own ring: the same samples.
  for (const std::string algo : {"vtrace", "ppo"}) {
    CAPTURE(algo);
    TempDir one, two;
    auto config = [&](const TempDir& dir) {
      return write_config(dir, algo, "[ddp]\ncollective_timeout_s = 20\n",
                          "update_epochs = 1\nminibatches = 1\nnorm_adv = false\n", device);
    };
    const LearnerRun single = run_learner(one, config(one), 2, false, /*deterministic=*/true);
    const LearnerRun ranks = run_learner(two, config(two), 2, false, false, /*ranks=*/2);
    REQUIRE(single.status == 0);
    REQUIRE(ranks.status == 0);
    REQUIRE(ranks.metrics);
    CHECK(ranks.metrics->env_steps == 1024);  // both ranks' slots count
    CHECK(ranks.metrics->step == 8);
    REQUIRE_FALSE(single.checkpoint.empty());
    REQUIRE_FALSE(ranks.checkpoint.empty());
    CHECK(distance_from_initial(ranks.checkpoint, config(two)) > 1e-4);
    CHECK(model_difference(ranks.checkpoint, single.checkpoint) < tolerance);
  }
}

}  // namespace tandem::test
