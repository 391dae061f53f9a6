// LearnerRuntime: what every learner loop (supervised_loop.hpp, rl/rl_learner.hpp) does the same way
// around its steps, so that a loop keeps only what differs: what a step is, what a checkpoint holds,
// what its reports say.
//
//  * The device: learner.device for this rank ("cuda": its local rank's GPU), checked against what
//    LibTorch sees and made CUDA's current device; LibTorch's threads (one in RL deterministic mode).
//  * Publishing into /tandem.<job>.weights: each node's local rank 0 owns the ModelPublisher, whose
//    versions continue after the resumed checkpoint's. On the CPU the copy overlaps the next step
//    (publisher.hpp): the loop calls wait_before_update() before every optimizer step. Under `tandem run` the slab outlives the
//    learner: an actor restarted after the end still evaluates the final weights (the launcher
//    removes the job's segments when the job ends).
//  * Checkpoints: global rank 0 writes <run_dir>/ckpt-<step>.safetensors every
//    checkpoint.every_steps, at a stop and at the end, with the weights version handed out so far (a
//    resume continues above it), keeping the newest checkpoint.keep.
//  * The control block: the process's state, heartbeat and reports.
//  * The stop: a stop request, or with data-parallel ranks the step they all agreed on.
//  * The end: the final publish, retried until committed (actors owe an evaluation of it), the last
//    report carrying the final version, the final checkpoint and one log line.
//
// Threads: main's thread.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/settings/job.hpp"
#include "common/torch/flat_params.hpp"
#include "learner/ddp/rank_env.hpp"
#include "learner/model_publisher.hpp"
#include "shm/job_process.hpp"

namespace tandem::ddp {
class GradSync;
}

namespace tandem::learner {

class LearnerRuntime {
 public:
  // Writes the loop's checkpoint to `path`; `metadata` holds the runtime's entries (the version).
  using SaveCheckpoint = std::function<void(const std::string& path, std::map<std::string, std::string> metadata)>;
  enum class Publish { on_schedule, every_step };  // [publish]'s schedule, or after every step (RL)

  LearnerRuntime(const JobSettings& settings, shm::JobProcess& process, const ddp::RankInfo& rank = {});

  const torch::Device& device() const { return device_; }
  shm::JobProcess& process() { return process_; }
  const std::string& run_dir() const { return process_.run_dir(); }

  // Once the model is on device() and resumed: publishes `flat` from here on (on each node's local
  // rank 0), versions after `resumed_version`.
  void publish_from(FlatParams& flat, std::uint64_t resumed_version, Publish when);
  bool publishing() const { return publisher_.has_value(); }
  const std::string& slab_name() const { return slab_name_; }
  // The version the actors can read (0: none yet, or not publishing) and the last one handed out,
  // committed or still in flight.
  std::uint64_t latest_version();
  std::uint64_t published_version();

  void checkpoint_with(SaveCheckpoint save) { save_ = std::move(save); }
  // Data-parallel ranks stop at the step they agree on through `sync` (GradSync's vote).
  void vote_with(ddp::GradSync& sync) { sync_ = &sync; }

  // Running: the control block says so and the actors get the first weights, which nobody reads
  // yet, so they cannot be skipped.
  void start(std::uint64_t step);
  // Before a step: true when it must not be taken (one rank: a stop request). Data-parallel ranks
  // cast their vote here and stop after the step instead (stop_agreed).
  bool stop_before_step();
  bool stop_agreed() const;
  // After a step: publishes (on schedule, or every step) and beats the heartbeat.
  void step_taken(std::uint64_t step);
  // Before the optimizer changes the weights: waits for a publish copy still reading them (CPU).
  void wait_before_update() {
    if (publisher_) publisher_->publisher().wait_before_update();
  }
  void tick() { process_.tick(); }
  // To the control block; `seen`: m.version is also this process's newest seen version.
  void report(const shm::ProcessMetrics& m, bool seen = false);
  // `where` names the progress in the log line: "step 40", "update 8, env step 4096".
  void checkpoint_if_due(std::int64_t step, const std::string& where);
  void checkpoint(std::int64_t step, const std::string& where);

  // The end: stopping, the final publish, the last report (final_metrics(), with the final version),
  // the final checkpoint, and "finished|stopped at <where>; final weights version V".
  void finish(std::int64_t step, bool finished, const std::function<shm::ProcessMetrics()>& final_metrics,
              const std::string& where);

 private:
  std::vector<int> actor_gpus_beside(int learner_gpu) const;
  void publish(std::uint64_t step);

  const JobSettings& settings_;
  shm::JobProcess& process_;
  ddp::RankInfo rank_;
  torch::Device device_;
  std::string slab_name_;
  std::optional<ModelPublisher> publisher_;
  Publish when_ = Publish::on_schedule;
  std::uint64_t resumed_version_ = 0;
  SaveCheckpoint save_;
  ddp::GradSync* sync_ = nullptr;
};

}  // namespace tandem::learner
