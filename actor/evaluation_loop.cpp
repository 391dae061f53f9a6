#include "actor/evaluation_loop.hpp"

#include <chrono>
#include <cstdio>
#include <thread>

#include "common/log.hpp"
#include "common/program.hpp"

namespace tandem::actor {
namespace {

using Clock = std::chrono::steady_clock;

void append_line(const std::string& path, const nlohmann::json& row) {
  if (std::FILE* f = std::fopen(path.c_str(), "a")) {  // one write per line: O_APPEND keeps actors' lines whole
    std::fputs((row.dump() + "\n").c_str(), f);
    std::fclose(f);
  }
}

}  // namespace

int run_evaluation_loop(Follower& follower, const ActorContext& ctx, double min_interval_s, const Evaluate& evaluate) {
  if (ctx.client) ctx.client->set_state(shm::ProcessState::running);
  const std::string jsonl = ctx.run_dir + "/eval.jsonl";
  std::uint64_t evaluations = 0, evaluated = 0;  // evaluated: the version evaluated last (0: none)
  Clock::time_point last_eval{};
  // Loads the newest version and evaluates it, unless it was evaluated already (an abandoned
  // evaluation leaves its version loaded and owed).
  auto evaluate_newest = [&](const std::function<bool()>& abandon) {
    (void)follower.update();
    const std::uint64_t version = follower.version();
    if (version == 0 || version == evaluated) return;
    if (ctx.client) ctx.client->saw_version(version);
    Evaluation e = evaluate([&] {
      ctx.beat();
      return abandon && abandon();
    });
    if (!e.complete) {
      log::info("version {}: evaluation abandoned after {} (stop requested)", version, e.done);
      return;
    }
    evaluated = version;
    ++evaluations;
    last_eval = Clock::now();
    e.metrics.step = evaluations;
    e.metrics.version = version;
    if (ctx.client) ctx.client->report(e.metrics);
    e.row["job"] = ctx.job;
    e.row["actor"] = ctx.index;
    e.row["version"] = version;
    e.row["step"] = follower.step();
    e.row["unix_s"] = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    append_line(jsonl, e.row);
    log::info("version {} (step {}): {}", version, follower.step(), e.summary);
  };

  const std::function<bool()> stop = [&] { return ctx.stopping(); };
  while (!ctx.stopping()) {
    ctx.beat();
    const double since = std::chrono::duration<double>(Clock::now() - last_eval).count();
    if (follower.has_new() && (evaluations == 0 || since >= min_interval_s)) evaluate_newest(stop);
    else std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (ctx.client) ctx.client->set_state(shm::ProcessState::stopping);
  const bool job_failed = ctx.client && ctx.client->block().stop_reason() == shm::StopReason::failure;
  if (!job_failed) evaluate_newest([&] { return ctx.client && stop_signal() != 0; });
  return 0;
}

}  // namespace tandem::actor
