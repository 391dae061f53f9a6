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
  const Config config = load_program_config(args.file, args.overrides);
  catch_stop_signals();
  keep_freed_memory_for_reuse();
  const ddp::RankInfo rank = ddp::rank_from_env();
  shm::JobProcess process("learner");
  if (config.string("learner.algo") != "supervised") {
    if (rank.distributed())  // its updates are not synchronised: N ranks would train N policies
      fail("learner.algo = \"{}\" trains on one learner rank, not {}: set run.learners = 1", config.string("learner.algo"),
           rank.world_size);
    if (config.boolean("learner.cuda_graph"))
      log::info("learner.cuda_graph = true, training eagerly: the RL learner's updates are not captured");
    return run_rl_learner(config, process);
  }
  return run_supervised_learner(config, process, rank);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tandem-learner: the learner program `tandem run` starts", "tandem-learner"};
  tandem::ProgramArgs args;
  tandem::add_program_args(app, args);
  CLI11_PARSE(app, argc, argv);
  return tandem::run_main("tandem-learner", [&] { return run(args); });
}
