// tandem-actor [config.toml] [--set key=value ...]: an actor of a job. Role `evaluator` (actor.role):
// follows the learner's weight slab /tandem.<job>.weights and evaluates each new version on the
// cache's test split in place, at most every actor.min_interval_s (the newest version wins). Results
// go into the control block (step = evaluations, version, accuracy, loss, seconds) and as JSON lines
// into <run_dir>/eval.jsonl, each row tagged with the job id (the launcher owns metrics.jsonl). A stop
// request ends an evaluation in progress within one batch (it is not reported). Then, unless the job
// failed, it evaluates the newest version if it has not yet and exits 0: evaluating the learner's
// final version is its duty, which the launcher checks before it calls the job a success.
#include <torch/torch.h>

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

#include "actor/evaluator.hpp"
#include "actor/follower.hpp"
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

// Waits for the learner's slab and attaches. A slab that exists is retried until wait_s too, since the
// learner may still be writing it; the last attach error (e.g. a signature mismatch) is then thrown.
actor::Follower attach_follower(const std::string& slab, FlatParams& flat, const std::string& model, double wait_s,
                                const std::function<bool()>& stop, shm::HeartbeatThread* heartbeat) {
  const auto t0 = Clock::now();
  while (!shm::Segment::exists(slab)) {
    if (stop()) fail("stopped while waiting for the weight slab /{}", slab);
    if (seconds_since(t0) > wait_s)
      fail("the weight slab /{} did not appear within actor.wait_weights_s = {} s: is the learner running?", slab, wait_s);
    if (heartbeat) heartbeat->tick();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (;;) {  // it exists, but may not be ready yet
    try {
      return actor::Follower(slab, flat, {.model = model});
    } catch (const UserError&) {
      if (seconds_since(t0) > wait_s || stop()) throw;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
}

int run(const ProgramArgs& args) {
  const Config config = load_program_config(args.file, args.overrides);
  catch_stop_signals();

  shm::JobProcess process("actor");
  shm::ControlClient* client = process.client();
  shm::HeartbeatThread* heartbeat = process.heartbeat();
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
                                    .max_samples = config.integer("actor.max_samples")});

  const std::string slab = shm::job_segment_name(job, "weights");
  actor::Follower follower = attach_follower(slab, flat, config.string("model.name"), config.real("actor.wait_weights_s"),
                                             stop, heartbeat);
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
    if (heartbeat) heartbeat->tick();
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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tandem-actor: the actor program `tandem run` starts (role evaluator)", "tandem-actor"};
  tandem::ProgramArgs args;
  tandem::add_program_args(app, args);
  CLI11_PARSE(app, argc, argv);
  return tandem::run_main("tandem-actor", [&] { return run(args); });
}
