// tandem-actor [config.toml] [--set key=value ...]: an actor of a job. With learner.algo = "ppo" or
// "vtrace" it is a rollout actor (actor.role = "rollout": actor/rollout_loop.hpp) or, for
// actor.role = "evaluator" and the last actor.evaluators actors of a rollout job, an RL evaluator
// (actor/rl_evaluator.hpp); for env.name = "python" it becomes the Python rollout actor
// (actor/python_actor.hpp). With learner.algo = "supervised", role `evaluator`:
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
#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <string>

#include "actor/actor_context.hpp"
#include "actor/attach.hpp"
#include "actor/evaluation_loop.hpp"
#include "actor/evaluator.hpp"
#include "actor/follower.hpp"
#include "actor/python_actor.hpp"
#include "actor/rl_evaluator.hpp"
#include "actor/rollout_loop.hpp"
#include "common/clock.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "common/program.hpp"
#include "common/torch/flat_params.hpp"
#include "common/torch/model_config.hpp"
#include "shm/dataset_check.hpp"
#include "shm/job_process.hpp"
#include "shm/segment.hpp"

namespace {

using namespace tandem;

// The supervised evaluator: a dataset cache's test split, one evaluation per version.
int run_evaluator(const JobSettings& settings, const actor::ActorContext& ctx) {
  const ActorSettings& a = settings.actor;
  const torch::Device device = device_for(a.device, "actor.device", 0);
  torch::set_num_threads(a.threads);

  const shm::JobData data = shm::attach_job_data(settings, true);
  Model model = Model::create(model_spec_for(settings.model, data.cache.field("x").sample_shape));
  model.to(device);
  model.eval();
  if (device.is_cuda()) {
    model.set_precision(a.precision == Precision::bf16 ? torch::kBFloat16 : torch::kFloat32);
    if (!settings.model.package.empty()) model.set_package(settings.model.package);
  }
  FlatParams flat = FlatParams::flatten(model);
  const Evaluator evaluator(data.cache, {.split = settings.data.test_split,
                                         .batch_size = a.batch_size,
                                         .mean = settings.data.mean,
                                         .std = settings.data.std,
                                         .device = device,
                                         .max_samples = a.max_samples,
                                         .cuda_graph = a.cuda_graph});

  const std::string slab = shm::job_segment_name(ctx.job, shm::Kind::weights);
  std::optional<actor::Follower> follower = actor::wait_for_follower(slab, flat, settings.model.name, a.wait_weights_s,
                                                                     ctx);
  if (!follower) return 0;
  log::info("evaluator: {} on {} test samples of '{}', following /{}", model.describe(), evaluator.num_samples(),
            settings.data.name, slab);
  return actor::run_evaluation_loop(*follower, ctx, a.min_interval_s, [&](const std::function<bool()>& abandon) {
    const EvalResult r = evaluator.evaluate(model, abandon);
    const auto samples = static_cast<std::uint64_t>(r.samples);
    return actor::Evaluation{
        .complete = r.complete,
        .done = fmt::format("{} samples", r.samples),
        .metrics = {.samples = samples,
                    .samples_per_s = static_cast<double>(r.samples) / std::max(1e-9, r.seconds),
                    .loss = r.loss,
                    .accuracy = r.accuracy,
                    .seconds = r.seconds},
        .row = {{"accuracy", r.accuracy}, {"loss", r.loss}, {"samples", r.samples}, {"seconds", r.seconds}},
        .summary = fmt::format("test accuracy {:.4f} loss {:.4f} on {} samples in {:.1f} s", r.accuracy, r.loss,
                               r.samples, r.seconds)};
  });
}

int run(const ProgramArgs& args) {
  const JobSettings settings = JobSettings::parse(load_program_config(args.file, args.overrides), program_shape(1, 1));
  // Before the control-block row is attached: the Python program joins it itself (tandem.job()).
  if (settings.learner.rl() && settings.env.is_python()) actor::exec_python_actor(settings);
  catch_stop_signals();
  keep_freed_memory_for_reuse();
  shm::JobProcess process("actor");
  shm::ControlClient* client = process.client();
  const actor::ActorContext ctx{.job = process.job(),
                                .run_dir = process.run_dir(),
                                .index = client ? client->index() : 0,
                                .client = client,
                                .stop = [&] { return process.stop_requested(); },
                                .tick = [&] { process.tick(); }};
  if (!settings.learner.rl()) return run_evaluator(settings, ctx);
  // A rollout job's last actor.evaluators actors evaluate; by hand (no launcher) the role decides.
  const bool rollout = settings.actor.role == ActorSettings::Role::rollout;
  const std::uint64_t evaluators = settings.actor.evaluators;
  if (rollout && (!client || ctx.index + evaluators < client->block().descriptor().actor_count))
    return actor::run_rollout_actor(settings, ctx);
  return actor::run_rl_evaluator(settings, ctx);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tandem-actor: the actor program `tandem run` starts (evaluator, rollout actor)", "tandem-actor"};
  tandem::ProgramArgs args;
  tandem::add_program_args(app, args);
  CLI11_PARSE(app, argc, argv);
  return tandem::run_main("tandem-actor", [&] { return run(args); });
}
