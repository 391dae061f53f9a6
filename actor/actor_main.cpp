// tandem-actor [config.toml] [--set key=value ...]: an actor of a job. With learner.algo = "ppo" or
// "vtrace" it is a rollout actor (actor.role = "rollout": actor/rollout_loop.hpp) or, for
// actor.role = "evaluator" and the last actor.evaluators actors of a rollout job, an RL evaluator
// (actor/rl_evaluator.hpp). With learner.algo = "supervised", role `evaluator`:
// follows the learner's weight slab /tandem.<job>.weights and evaluates each new version on the
// cache's test split in place, at most every actor.min_interval_s (the newest version wins). Results
// go into the control block (step = evaluations, version, accuracy, loss, seconds) and as JSON lines
// into <run_dir>/eval.jsonl, each row tagged with the job id (the launcher owns metrics.jsonl). A stop
// request ends an evaluation in progress within one batch (it is not reported). Then, unless the job
// failed, it evaluates the newest version if it has not yet and exits 0: evaluating the learner's
// final version is its duty, which the launcher checks before it calls the job a success.
#include <torch/cuda.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "actor/actor_context.hpp"
#include "actor/attach.hpp"
#include "actor/evaluator.hpp"
#include "actor/follower.hpp"
#include "actor/rl_evaluator.hpp"
#include "actor/rollout_loop.hpp"
#include "common/error.hpp"
#include "common/job_keys.hpp"
#include "common/log.hpp"
#include "common/program.hpp"
#include "common/torch/flat_params.hpp"
#include "common/torch/model_config.hpp"
#include "shm/dataset_cache.hpp"
#include "shm/job_process.hpp"
#include "shm/segment.hpp"

namespace {

using namespace tandem;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The supervised evaluator: a dataset cache's test split, one evaluation per version.
int run_evaluator(const Config& config, shm::JobProcess& process, const actor::ActorContext& ctx) {
  shm::ControlClient* client = process.client();
  const std::string& job = process.job();
  const std::string& run_dir = process.run_dir();
  auto stop = [&] { return process.stop_requested(); };

  const bool cuda = config.string("actor.device") == "cuda";
  if (cuda && !torch::cuda::is_available())
    fail("config: actor.device = \"cuda\" but LibTorch sees no GPU: use \"cpu\" or run on a GPU machine");
  torch::set_num_threads(static_cast<int>(config.integer("actor.threads")));

  shm::DatasetCache cache = shm::DatasetCache::attach(config.string("data.name"));
  Model model = Model::create(model_spec_for(config, cache.field("x").sample_shape));
  const torch::Device device = cuda ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  model.to(device);
  model.eval();
  FlatParams flat = model.nn_module() ? FlatParams::flatten(*model.nn_module()) : FlatParams::flatten(*model.jit_module());
  const Evaluator evaluator(cache, {.split = config.string("data.test_split"),
                                    .batch_size = config.integer("actor.batch_size"),
                                    .mean = parse_number_list("data.mean", config.string("data.mean")),
                                    .std = parse_number_list("data.std", config.string("data.std")),
                                    .device = device,
                                    .max_samples = config.integer("actor.max_samples"),
                                    .cuda_graph = config.boolean("actor.cuda_graph")});

  const std::string slab = shm::job_segment_name(job, "weights");
  actor::Follower follower =
      actor::wait_for_follower(slab, flat, config.string("model.name"), config.real("actor.wait_weights_s"), ctx);
  if (client) client->set_state(shm::ProcessState::running);
  log::info("evaluator: {} on {} test samples of '{}', following /{}", model.describe(), evaluator.num_samples(),
            config.string("data.name"), slab);

  const std::string jsonl = run_dir + "/eval.jsonl";
  const double min_interval = config.real("actor.min_interval_s");
  const std::uint32_t index = client ? client->index() : 0;
  std::uint64_t evaluations = 0;
  Clock::time_point last_eval{};
  std::uint64_t evaluated = 0;  // the version evaluated last (0: none)
  // Loads the newest version and evaluates it, unless that version was evaluated already (an
  // abandoned evaluation leaves its version loaded and owed).
  auto evaluate_newest = [&](const std::function<bool()>& abandon) {
    follower.update();
    const std::uint64_t version = follower.version();
    if (version == 0 || version == evaluated) return;
    if (client) client->saw_version(version);
    const EvalResult r = evaluator.evaluate(model, abandon);
    if (!r.complete) {
      log::info("version {}: evaluation abandoned after {} samples (stop requested)", version, r.samples);
      return;
    }
    evaluated = version;
    ++evaluations;
    last_eval = Clock::now();
    if (client)
      client->report({.step = evaluations, .version = version, .samples = static_cast<std::uint64_t>(r.samples),
                      .samples_per_s = static_cast<double>(r.samples) / std::max(1e-9, r.seconds),
                      .loss = r.loss, .accuracy = r.accuracy, .seconds = r.seconds});
    const nlohmann::json row = {
        {"job", job}, {"actor", index}, {"version", version}, {"step", follower.step()}, {"accuracy", r.accuracy},
        {"loss", r.loss}, {"samples", r.samples}, {"seconds", r.seconds},
        {"unix_s", std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count()}};
    if (std::FILE* f = std::fopen(jsonl.c_str(), "a")) {  // one write per line: O_APPEND keeps actors' lines whole
      std::fputs((row.dump() + "\n").c_str(), f);
      std::fclose(f);
    }
    log::info("version {} (step {}): test accuracy {:.4f} loss {:.4f} on {} samples in {:.1f} s", version,
              follower.step(), r.accuracy, r.loss, r.samples, r.seconds);
  };

  while (!stop()) {
    process.tick();
    if (follower.has_new() && (evaluations == 0 || seconds_since(last_eval) >= min_interval)) evaluate_newest(stop);
    else std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (client) client->set_state(shm::ProcessState::stopping);
  // The final weights, unless the job failed (nobody waits for them); a signal (the launcher's
  // SIGTERM once the stop took too long) abandons them.
  const bool job_failed = client && client->block().stop_reason() == shm::StopReason::failure;
  if (!job_failed) evaluate_newest([&] { return client && stop_signal() != 0; });
  return 0;
}

int run(const ProgramArgs& args) {
  const Config config = load_program_config(args.file, args.overrides);
  catch_stop_signals();
  keep_freed_memory_for_reuse();
  shm::JobProcess process("actor");
  shm::ControlClient* client = process.client();
  const actor::ActorContext ctx{.job = process.job(), .run_dir = process.run_dir(),
                                .index = client ? client->index() : 0, .client = client,
                                .stop = [&] { return process.stop_requested(); }, .tick = [&] { process.tick(); }};
  const bool rollout = config.string("actor.role") == "rollout";
  if (config.string("learner.algo") == "supervised") {
    if (rollout)
      fail("config: actor.role = \"rollout\" needs a learner that learns from experience: set learner.algo = "
           "\"ppo\" or \"vtrace\"");
    return run_evaluator(config, process, ctx);
  }
  // A rollout job's last actor.evaluators actors evaluate; by hand (no launcher) the role decides.
  const auto evaluators = static_cast<std::uint64_t>(config.integer("actor.evaluators"));
  if (rollout && (!client || ctx.index + evaluators < client->block().descriptor().actor_count))
    return actor::run_rollout_actor(config, ctx);
  return actor::run_rl_evaluator(config, ctx);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tandem-actor: the actor program `tandem run` starts (evaluator, rollout actor)", "tandem-actor"};
  tandem::ProgramArgs args;
  tandem::add_program_args(app, args);
  CLI11_PARSE(app, argc, argv);
  return tandem::run_main("tandem-actor", [&] { return run(args); });
}
