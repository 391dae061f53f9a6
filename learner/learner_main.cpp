// tandem-learner [config.toml] [--set key=value ...]: trains a model and publishes its weights into
// /tandem.<job>.weights. Started by `tandem run` (config from $TANDEM_CONFIG, job/role/index from
// TANDEM_*), by torchrun or Slurm (rank from their variables: learner/ddp/rank_env.hpp), or by hand
// (job "local", run dir ".", one rank).
#include <CLI/CLI.hpp>

#include "common/error.hpp"
#include "common/log.hpp"
#include "common/program.hpp"
#include "learner/ddp/rank_env.hpp"
#include "learner/rl/rl_learner.hpp"
#include "learner/supervised_loop.hpp"
#include "shm/job_process.hpp"

namespace {

using namespace tandem;

int run(const ProgramArgs& args) {
  const ddp::RankInfo rank = ddp::rank_from_env();
  const JobSettings settings = JobSettings::parse(
      load_program_config(args.file, args.overrides),
      program_shape(static_cast<std::uint32_t>(rank.world_size), static_cast<std::uint32_t>(rank.local_world_size)));
  catch_stop_signals();
  keep_freed_memory_for_reuse();
  shm::JobProcess process("learner");
  if (settings.learner.rl()) return run_rl_learner(settings, process, rank);
  return run_supervised_learner(settings, process, rank);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tandem-learner: the learner program `tandem run` starts", "tandem-learner"};
  tandem::ProgramArgs args;
  tandem::add_program_args(app, args);
  CLI11_PARSE(app, argc, argv);
  return tandem::run_main("tandem-learner", [&] { return run(args); });
}
