// The RL evaluator (actor/rl_evaluator.hpp): greedy episodes on seeds of its own, and as a process
// (this binary re-run as the child) its rows in eval.jsonl, the final version's included.
#include "tests/actor_rollout_fixture.hpp"

#include <signal.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>

#include "actor/rl_evaluator.hpp"
#include "common/program.hpp"
#include "common/torch/rl_model.hpp"
#include "learner/model_publisher.hpp"
#include "tests/harness.hpp"

using namespace tandem;
using namespace std::chrono_literals;

namespace {

const char* kConfig =
    "[env]\nname = \"cartpole\"\nseed = 3\n[model]\nname = \"actor_critic_mlp\"\n"
    "[actor]\nwait_weights_s = 30\neval_episodes = 7\nmin_interval_s = 1000\n";

std::vector<nlohmann::json> rows_of(const std::string& path) {
  std::vector<nlohmann::json> rows;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) rows.push_back(nlohmann::json::parse(line));
  return rows;
}

}  // namespace

TANDEM_CHILD("rl-evaluator") {  // args: job, config file, run dir
  const auto& args = test::child_args();
  catch_stop_signals();
  try {
    const JobSettings config = test::settings_of(args.at(1));
    const actor::ActorContext ctx{
        .job = args.at(0), .run_dir = args.at(2), .index = 1, .stop = [] { return stop_signal() != 0; }, .tick = {}};
    return actor::run_rl_evaluator(config, ctx);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rl evaluator child: %s\n", e.what());
    return 1;
  }
}

TEST_CASE("RL evaluator: greedy episodes from its seeds repeat exactly, and their statistics are consistent") {
  const JobSettings config = test::rl_config(kConfig);
  const envs::EnvSource source(config.env);
  Model model = make_rl_model(config.model, config.rl, source.spec());
  const PolicyHead head = policy_head_for(source.spec());
  const auto a = actor::play_greedy(model, head, source, 7, envs::eval_seed(3), 1);
  const auto b = actor::play_greedy(model, head, source, 7, envs::eval_seed(3), 1);
  CHECK(a.complete);
  CHECK(a.episodes == 7);
  CHECK(a.return_mean == b.return_mean);
  CHECK(a.return_min <= a.return_mean);
  CHECK(a.return_mean <= a.return_max);
  CHECK(a.return_mean == doctest::Approx(a.length_mean));  // CartPole: return = length
  CHECK(envs::eval_seed(3) != 3);                          // not the rollout actors' job seed
  int asked = 0;
  CHECK_FALSE(actor::play_greedy(model, head, source, 7, 1, 1, [&] { return ++asked > 3; }).complete);
}

TEST_CASE("RL evaluator: each new version and, at a stop, the final one become rows of eval.jsonl" *
          doctest::timeout(120)) {
  test::TempDir dir;
  const std::string job = test::unique_name("rleval");
  const std::string config_path = dir.file("actor.toml");
  std::ofstream(config_path) << kConfig;
  const JobSettings config = test::rl_config(kConfig);
  const envs::EnvSource source(config.env);
  Model model = make_rl_model(config.model, config.rl, source.spec());
  FlatParams flat = FlatParams::flatten(model);
  learner::ModelPublisher publisher(shm::job_segment_name(job, shm::Kind::weights), flat,
                                    {.model = "actor_critic_mlp"});
  const std::uint64_t v1 = publisher.publish_final(0, 10);
  test::Child child = test::spawn_child("rl-evaluator", {job, config_path, dir.path().string()});
  const std::string jsonl = dir.file("eval.jsonl");
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (rows_of(jsonl).empty() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(20ms);
  REQUIRE(rows_of(jsonl).size() == 1);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : model.parameters()) p.add_(0.05);
  }
  const std::uint64_t v2 = publisher.publish_final(1, 10);  // min_interval_s keeps it for the stop
  child.kill(SIGTERM);
  CHECK(child.wait() == 0);
  const auto rows = rows_of(jsonl);
  REQUIRE(rows.size() == 2);
  CHECK(rows[0]["version"] == v1);
  CHECK(rows[1]["version"] == v2);
  for (const auto& r : rows) {
    CHECK(r["job"] == job);
    CHECK(r["episodes"] == 7);
    CHECK(r["episode_return_min"].get<double>() <= r["episode_return"].get<double>());
    CHECK(r["episode_return"].get<double>() <= r["episode_return_max"].get<double>());
    CHECK(r["episode_length"].get<double>() > 0);
  }
}
