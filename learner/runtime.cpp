#include "learner/runtime.hpp"

#include <torch/torch.h>

#include <fmt/format.h>

#include <algorithm>

#include "common/cuda.hpp"
#include "common/cuda_ipc.hpp"
#include "common/log.hpp"
#include "common/torch/model_config.hpp"
#include "learner/ddp/grad_sync.hpp"
#include "learner/trainer.hpp"
#include "shm/segment.hpp"

namespace tandem::learner {

LearnerRuntime::LearnerRuntime(const JobSettings& settings, shm::JobProcess& process, const ddp::RankInfo& rank)
    : settings_(settings),
      process_(process),
      rank_(rank),
      device_(device_for(settings.learner.device, "learner.device", rank.local_rank)),
      slab_name_(shm::job_segment_name(process.job(), shm::Kind::weights)) {
  if (device_.is_cuda()) cuda::set_device(device_.index());
  const bool lockstep = settings.learner.rl() && settings.shape.deterministic;
  torch::set_num_threads(lockstep ? 1 : settings.learner.threads);
}

// The other GPUs that this job's CUDA actors run on (rollout actors on the GPU of the rank that consumes
// their ring, evaluators on cuda:0 or the one named) and that can read `learner_gpu` directly: the device
// slabs that the device chain (peer copies GPU to GPU, learner/device_chain.hpp) fills there let them
// load without crossing GPUs at all. A GPU with no peer path is left to the host slab.
std::vector<int> LearnerRuntime::actor_gpus_beside(int learner_gpu) const {
  std::vector<int> gpus;
  if (!settings_.actor.device.cuda) return gpus;
  // Evaluators all run on the GPU of rank 0 (or the one named); rollout actors on their rank's.
  const int ranks = settings_.rollout_actors > 0 ? static_cast<int>(settings_.shape.learners) : 1;
  for (int r = 0; r < ranks; ++r) {
    const int gpu = device_for(settings_.actor.device, "actor.device", r).index();
    if (gpu != learner_gpu && std::find(gpus.begin(), gpus.end(), gpu) == gpus.end() &&
        cuda::can_access_peer(gpu, learner_gpu))
      gpus.push_back(gpu);
  }
  return gpus;
}

void LearnerRuntime::publish_from(FlatParams& flat, std::uint64_t resumed_version, Publish when) {
  resumed_version_ = resumed_version;
  when_ = when;
  if (!rank_.local_leader()) return;  // the node's other ranks hold the same weights
  const PublishSettings& p = settings_.publish;
  ModelPublisherOptions options;
  options.model = settings_.model.name;
  options.bf16 = p.bf16;
  options.device_slab = p.device_slab;
  if (p.device_slab && device_.is_cuda()) options.peer_gpus = actor_gpus_beside(device_.index());
  if (when == Publish::on_schedule) {
    options.when.every_steps = p.every_steps;
    options.when.every_ms = p.every_ms;
  }
  options.when.after_version = resumed_version;
  options.when.overlap_host_copy = true;  // both loops fence their optimizer steps (wait_before_update)
  options.replace_dead_writer = true;     // a slab of this job whose writer died is stale
  publisher_.emplace(slab_name_, flat, options);
  if (process_.client()) publisher_->slab().persist();
}

std::uint64_t LearnerRuntime::latest_version() { return publisher_ ? publisher_->slab().latest_version() : 0; }

std::uint64_t LearnerRuntime::published_version() {
  return publisher_ ? publisher_->publisher().next_version() - 1 : resumed_version_;
}

void LearnerRuntime::publish(std::uint64_t step) {
  if (!publisher_) return;
  // Deterministic actors wait for exact versions, so no publish may be skipped there.
  if (when_ == Publish::every_step && settings_.shape.deterministic) (void)publisher_->publish_final(step, 30);
  else (void)publisher_->publish(step);
}

void LearnerRuntime::start(std::uint64_t step) {
  if (auto* client = process_.client()) client->set_state(shm::ProcessState::running);
  publish(step);
}

bool LearnerRuntime::stop_before_step() {
  if (!sync_) return process_.stop_requested();
  sync_->vote_stop(process_.stop_requested());
  return false;
}

bool LearnerRuntime::stop_agreed() const { return sync_ && sync_->stop_agreed(); }

void LearnerRuntime::step_taken(std::uint64_t step) {
  // On schedule a skip (no free slot) is counted in stats(); the next publish supersedes it.
  if (publisher_ && when_ == Publish::on_schedule) (void)publisher_->maybe_publish(step);
  else publish(step);
  process_.tick();
}

void LearnerRuntime::report(const shm::ProcessMetrics& m, bool seen) {
  auto* client = process_.client();
  if (!client) return;
  if (seen) client->saw_version(m.version);
  client->report(m);
}

void LearnerRuntime::checkpoint_if_due(std::int64_t step, const std::string& where) {
  const std::int64_t every = settings_.checkpoint.every_steps;
  if (every > 0 && step % every == 0) checkpoint(step, where);
}

void LearnerRuntime::checkpoint(std::int64_t step, const std::string& where) {
  if (rank_.rank != 0) return;  // the replicas are equal: one writer
  const std::string path = checkpoint_path(run_dir(), step);
  const auto busy = process_.busy();  // a large model on a slow disk may take minutes: not a hang
  save_(path, {{"version", std::to_string(published_version())}});
  prune_checkpoints(run_dir(), settings_.checkpoint.keep);
  log::info("checkpoint {} ({})", path, where);
}

void LearnerRuntime::finish(std::int64_t step, bool finished, const std::function<shm::ProcessMetrics()>& final_metrics,
                            const std::string& where) {
  auto* client = process_.client();
  if (client) client->set_state(shm::ProcessState::stopping);
  if (publisher_) publisher_->publish_final(static_cast<std::uint64_t>(step), 30);
  if (client) {
    shm::ProcessMetrics m = final_metrics();
    m.version = latest_version();
    report(m, true);
  }
  checkpoint(step, where);
  log::info("{} at {}{}", finished ? "finished" : "stopped", where,
            publisher_ ? fmt::format("; final weights version {}", latest_version()) : "");
}

}  // namespace tandem::learner
