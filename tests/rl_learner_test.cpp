// The RL learner (learner/rl) against an in-test producer: a child of this binary runs the learner
// under a control block as `tandem run` would, while the test writes random CartPole steps into its
// rings through ExperienceWriter, as a rollout actor would.
#include "tests/torch_doctest.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/types.h>

#include <cmath>
#include <fstream>
#include <thread>

#include "common/error.hpp"
#include "common/program.hpp"
#include "common/torch/rl_model.hpp"
#include "common/torch/safetensors.hpp"
#include "envs/env_source.hpp"
#include "envs/vec_env.hpp"
#include "learner/rl/rl_learner.hpp"
#include "learner/rl/rl_setup.hpp"
#include "learner/rl/update.hpp"
#include "learner/trainer.hpp"
#include "shm/control_block.hpp"
#include "shm/experience_ring.hpp"
#include "tests/harness.hpp"

using namespace tandem;
using namespace tandem::test;

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

// `update`: how an update learns from its batch ([rl] keys).
std::string write_config(const TempDir& dir, const std::string& algo, const std::string& extra = "",
                         const std::string& update = "update_epochs = 2\nminibatches = 2\n") {
  std::string path = dir.file("job.toml");
  std::ofstream out(path);
  out << "[env]\nname = \"cartpole\"\nenvs = 4\nseed = 0\n"
      << "[rl]\nrollout_steps = 16\nslots_per_ring = 2\nslots_per_update = 2\ntotal_env_steps = 1024\n"
      << update
      << "[learner]\nalgo = \"" << algo << "\"\nreport_every_steps = 1\n"
      << "[optimizer]\nname = \"adam\"\nlr = 0.001\nweight_decay = 0.0\n"
      << "[checkpoint]\nevery_steps = 0\n"
      << "[model]\nname = \"actor_critic_mlp\"\n"
      << "[actor]\nrole = \"rollout\"\nevaluators = 0\n"
      << extra;
  return path;
}

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

struct LearnerRun {
  int status = -1;
  std::optional<shm::ProcessMetrics> metrics;
  std::uint64_t refused = 0;
  std::string checkpoint;
};

// Runs `ranks` learner children in a fresh job with `actors` rollout rings, feeding every ring until
// every learner has exited (the status: the first non-zero one); the first slot of ring 0 is corrupt
// when `corrupt_first`.
LearnerRun run_learner(const TempDir& dir, const std::string& config, std::uint32_t actors, bool corrupt_first,
                       bool deterministic = false, int ranks = 1) {
  const std::string job = unique_name("rl");
  shm::ControlBlock block = shm::ControlBlock::create({.job = job,
                                                       .learners = static_cast<std::uint32_t>(ranks),
                                                       .actors = actors,
                                                       .run_dir = dir.path().string()});
  const std::string port = std::to_string(free_loopback_port()), world = std::to_string(ranks);
  std::vector<std::pair<const char*, std::string>> env = {
      {"TANDEM_JOB", job}, {"TANDEM_ROLE", "learner"}, {"TANDEM_ACTORS", std::to_string(actors)}};
  if (deterministic) env.emplace_back("TANDEM_DETERMINISTIC", "1");
  if (ranks > 1)
    env.insert(env.end(), {{"WORLD_SIZE", world}, {"LOCAL_WORLD_SIZE", world}, {"MASTER_ADDR", "127.0.0.1"},
                           {"MASTER_PORT", port}});
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

// The largest difference between the checkpoint's model and the untrained one of the same seed.
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

}  // namespace

TEST_CASE("rl learner: PPO and V-trace train on the rings' slots, report lag and episodes, and skip a corrupt slot" *
          doctest::timeout(120)) {
  for (const std::string algo : {"ppo", "vtrace"}) {
    CAPTURE(algo);
    TempDir dir;
    const std::string config = write_config(dir, algo);
    const LearnerRun run = run_learner(dir, config, 2, true);
    REQUIRE(run.status == 0);
    CHECK(run.refused == 1);
    REQUIRE(run.metrics);
    CHECK(run.metrics->env_steps == 1024);  // the budget, from good slots only
    CHECK(run.metrics->step == 8);          // 1024 / (2 slots x 16 steps x 4 envs)
    CHECK(std::isfinite(run.metrics->episode_return));
    CHECK(run.metrics->episode_length > 5);
    // Every slot says version 1; the learner holds version 8 (1 + 7 updates) when it takes its last batch.
    CHECK(run.metrics->policy_lag_min == 7);
    CHECK(run.metrics->policy_lag_max == 7);
    CHECK(run.metrics->policy_lag_avg == 7);
    REQUIRE_FALSE(run.checkpoint.empty());
    CHECK(distance_from_initial(run.checkpoint, config) > 1e-4);
  }
}

TEST_CASE("rl learner: deterministic mode gives byte-identical final checkpoints over the same slots" *
          doctest::timeout(120)) {
  std::string first;
  for (int round = 0; round < 2; ++round) {
    TempDir dir;
    const LearnerRun run = run_learner(dir, write_config(dir, "ppo"), 2, false, true);
    REQUIRE(run.status == 0);
    REQUIRE_FALSE(run.checkpoint.empty());
    const std::string bytes = file_bytes(run.checkpoint);
    if (round == 0) first = bytes;
    else CHECK(bytes == first);
  }
}

// The largest difference between two checkpoints' models, relative to the largest weight.
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

TEST_CASE("rl learner: 2 CPU ranks, each on its own actor's ring, end with one rank's weights over both rings" *
          doctest::timeout(120)) {
  // One minibatch of whole columns: the loss over the union is the mean of the ranks' losses, so the
  // averaged gradients are the union's. The single rank takes a slot of each ring per update in a
  // fixed order (deterministic mode), each rank the next slot of its own ring: the same samples.
  for (const std::string algo : {"vtrace", "ppo"}) {
    CAPTURE(algo);
    TempDir one, two;
    auto config = [&](const TempDir& dir) {
      return write_config(dir, algo, "[ddp]\ncollective_timeout_s = 20\n",
                          "update_epochs = 1\nminibatches = 1\nnorm_adv = false\n");
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
    CHECK(model_difference(ranks.checkpoint, single.checkpoint) < 1e-5);  // 1e-7 when written
  }
}

TEST_CASE("rl learner: deterministic mode refuses a batch that does not divide among the rollout actors") {
  TempDir dir;
  const LearnerRun run = run_learner(dir, write_config(dir, "ppo"), 3, false, true);
  CHECK(run.status == 2);  // slots_per_update = 2 over 3 actors
  CHECK(run.checkpoint.empty());
}

TEST_CASE("rl learner: a model without a value head is refused naming the model and the env") {
  const ModelSettings mlp{.name = "mlp"};
  const envs::EnvSpec env = envs::make_env("CartPole-v1")->spec();
  const std::string error = error_of([&] { make_rl_model(mlp, RlSettings{}, env); });
  CHECK(error.find("model 'mlp'") != std::string::npos);
  CHECK(error.find("CartPole-v1") != std::string::npos);
}

TEST_CASE("rl learner: PPO and V-trace updates take continuous (Gaussian) actions") {
  TempDir dir;
  for (const std::string algo : {"ppo", "vtrace"}) {
    CAPTURE(algo);
    const JobSettings settings = JobSettings::parse(
        load_program_config(write_config(dir, algo), std::vector<std::string>{"env.name=pendulum", "rl.minibatches=2"}),
        {});
    const envs::EnvSpec env = envs::EnvSource(settings.env).spec();
    const PolicyHead head = policy_head_for(env);
    REQUIRE(head.is_continuous());
    Model model = make_rl_model(settings.model, settings.rl, env);
    const torch::Tensor before = model.parameters().front().flatten().clone();
    Optimizer optimizer(model.named_parameters(), {.kind = "adam", .lr = 1e-3, .weight_decay = 0});
    rl::RlUpdater updater(model, head, optimizer, settings.learner.algo, settings.rl,
                          at::detail::createCPUGenerator(0));
    const std::int64_t T = 8, N = 4;
    rl::Batch b{torch::randn({T + 1, N, 3}),
                torch::randn({T, N, 3}),
                torch::randn({T, N, 1}),
                torch::randn({T, N}),
                (torch::rand({T, N}) < 0.1).to(torch::kUInt8),
                (torch::rand({T, N}) < 0.2).to(torch::kUInt8),
                torch::full({T, N}, -1.0f)};
    const rl::UpdateStats st = updater.update(b, 1e-3);
    CHECK(std::isfinite(st.loss));
    CHECK(std::isfinite(st.entropy));
    CHECK((model.parameters().front().flatten() - before).abs().max().item<double>() > 0);
  }
}
