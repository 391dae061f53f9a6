// What both evaluators (the supervised one of actor_main.cpp and rl_evaluator.hpp) do around one
// evaluation, so that each keeps only what an evaluation is: follow the weight slab and evaluate
// each new version, at most every actor.min_interval_s (the newest version wins); report each result
// to the control block (step = evaluations, version) and append it as a JSON line, tagged with the
// job, actor, version, step and time, to <run_dir>/eval.jsonl; on a stop, evaluate the final version
// unless the job failed, which is the evaluator's duty (the launcher checks it before it calls the
// job a success); a stop signal abandons that last evaluation.
//
// Threads: the actor's main thread.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <string>

#include "actor/actor_context.hpp"
#include "actor/follower.hpp"
#include "shm/control_block_format.hpp"

namespace tandem::actor {

struct Evaluation {
  bool complete = true;         // false: abandoned by a stop; nothing is reported
  std::string done;             // what was done when abandoned: "300 samples", "4 episodes"
  shm::ProcessMetrics metrics;  // step and version are the loop's
  nlohmann::json row;           // the loop adds job, actor, version, step and unix_s
  std::string summary;          // the log line after "version V (step S): "
};

// Evaluates the loaded weights; `abandon` is asked between units of work (it also beats the heartbeat).
using Evaluate = std::function<Evaluation(const std::function<bool()>& abandon)>;

// Marks the process running, then evaluates until a stop; returns 0.
int run_evaluation_loop(Follower& follower, const ActorContext& ctx, double min_interval_s, const Evaluate& evaluate);

}  // namespace tandem::actor
