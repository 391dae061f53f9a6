#include "learner/rl/rl_learner.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/cuda.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <filesystem>
#include <numeric>
#include <thread>

#include "common/cuda.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "common/torch/flat_params.hpp"
#include "learner/model_publisher.hpp"
#include "learner/rl/rl_checkpoint.hpp"
#include "learner/rl/rl_setup.hpp"
#include "learner/rl/slot_gather.hpp"
#include "learner/rl/update.hpp"
#include "learner/trainer.hpp"
#include "shm/experience_ring.hpp"

namespace tandem {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The last 100 finished training episodes.
class EpisodeWindow {
 public:
  void add(float ret, std::uint32_t len) {
    returns_.push_back(ret);
    lengths_.push_back(len);
    if (returns_.size() > kSize) returns_.pop_front(), lengths_.pop_front();
  }
  bool full() const { return returns_.size() == kSize; }
  double mean_return() const { return mean(returns_); }
  double mean_length() const { return mean(lengths_); }

 private:
  static constexpr std::size_t kSize = 100;
  template <class T>
  static double mean(const std::deque<T>& d) {
    return d.empty() ? shm::kNaN : std::accumulate(d.begin(), d.end(), 0.0) / static_cast<double>(d.size());
  }
  std::deque<float> returns_;
  std::deque<std::uint32_t> lengths_;
};


}  // namespace

int run_rl_learner(const Config& config, shm::JobProcess& process) {
  const Clock::time_point started = Clock::now();
  shm::ControlClient* client = process.client();
  const std::string& job = process.job();
  const std::string& run_dir = process.run_dir();

  const rl::RlSettings s = rl::rl_settings(config);
  const bool cuda = config.string("learner.device") == "cuda";
  if (cuda && !torch::cuda::is_available())
    fail("config: learner.device = \"cuda\" but LibTorch sees no GPU: use \"cpu\" or run on a GPU machine");
  torch::set_num_threads(s.deterministic ? 1 : static_cast<int>(config.integer("learner.threads")));
  const torch::Device device = cuda ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);

  const envs::EnvSpec env = rl::env_spec_for(config);
  const PolicyHead head = rl::policy_head_for(env);
  Model model = rl::rl_model(config, env, head);
  if (cuda) model.to(device);
  FlatParams flat = model.nn_module() ? FlatParams::flatten(*model.nn_module()) : FlatParams::flatten(*model.jit_module());
  OptimizerConfig oc;
  oc.kind = config.string("learner.optimizer");
  oc.lr = s.lr;
  oc.momentum = config.real("learner.momentum");
  oc.nesterov = config.boolean("learner.nesterov");
  oc.weight_decay = config.real("learner.weight_decay");
  oc.eps = 1e-5;  // the PPO implementations' Adam epsilon (CleanRL, OpenAI baselines)
  Optimizer optimizer(model.named_parameters(), oc);
  model.train(true);

  std::int64_t step = 0;  // updates done
  std::uint64_t env_steps = 0, resumed_version = 0;
  if (auto latest = latest_checkpoint(run_dir)) {
    const rl::Restored r = rl::load_checkpoint(*latest, model, optimizer);
    step = r.step;
    resumed_version = rl::metadata_count(*latest, r.metadata, "version", 0);
    env_steps = rl::metadata_count(*latest, r.metadata, "env_steps", 0);
    log::info("resumed from {} at update {}, env step {} (weights version {})", *latest, step, env_steps,
              resumed_version);
  }

  // The rings before the slab: an actor that finds the weights finds its ring too.
  shm::ExperienceRings rings = shm::ExperienceRings::create(job, rl::experience_shape(s, env, head));
  if (client) rings.segment().persist();  // the launcher removes the job's segments when the job ends
  cuda::HostRegistration registered;      // async H2D straight out of the slots
  if (cuda) registered = cuda::HostRegistration(rings.segment().base(), rings.segment().size(), false, "experience rings");

  learner::ModelPublisherOptions popts;
  popts.model = config.string("model.name");
  popts.bf16 = config.boolean("learner.publish_bf16");
  popts.device_slab = config.string("learner.device_slab") == "auto";
  popts.when.after_version = resumed_version;
  popts.replace_dead_writer = true;  // a slab of this job whose writer is dead is stale
  learner::ModelPublisher publisher(shm::job_segment_name(job, "weights"), flat, popts);
  if (client) publisher.slab().persist();
  // Deterministic actors wait for exact versions, so no publish may be skipped there.
  auto publish = [&] {
    if (s.deterministic) (void)publisher.publish_final(static_cast<std::uint64_t>(step), 30);
    else (void)publisher.publish(static_cast<std::uint64_t>(step));
  };
  auto version = [&] { return publisher.publisher().next_version() - 1; };  // of the weights we hold

  const std::int64_t report_every = config.integer("learner.report_every_steps");
  const std::int64_t ckpt_every = config.integer("learner.checkpoint_every_steps");
  const std::int64_t keep = config.integer("learner.keep_checkpoints");
  auto checkpoint = [&] {
    const std::string path = checkpoint_path(run_dir, step);
    rl::save_checkpoint(path, model, optimizer, step,
                        {{"version", std::to_string(version())}, {"env_steps", std::to_string(env_steps)},
                         {"algo", s.algo}});
    prune_checkpoints(run_dir, keep);
    log::info("checkpoint {} (update {}, env step {})", path, step, env_steps);
  };

  at::Generator order = at::detail::createCPUGenerator(static_cast<std::uint64_t>(config.integer("learner.seed")));
  rl::RlUpdater updater(model, head, optimizer, s, order);
  rl::SlotGatherer gatherer(rings, s.rollout_actors, s.slots_per_update, s.deterministic ? s.slots_per_actor : 0);
  const std::uint64_t slot_steps = std::uint64_t{s.steps} * s.envs;
  log::info("{} {} on {}: {} rollout ring{} of {} slots ({} steps x {} envs), {} slot{} per update, {} env steps{}",
            s.algo, model.describe(), env.name, s.rollout_actors, s.rollout_actors == 1 ? "" : "s", s.slots_per_ring,
            s.steps, s.envs, s.slots_per_update, s.slots_per_update == 1 ? "" : "s", s.total_env_steps,
            s.deterministic ? ", deterministic" : "");
  if (client) client->set_state(shm::ProcessState::running);
  publish();  // the actors start from these weights

  EpisodeWindow episodes;
  shm::ProcessMetrics last{.step = static_cast<std::uint64_t>(step), .samples = env_steps, .env_steps = env_steps};
  bool solved = false;
  auto keep_waiting = [&] {
    process.tick();
    if (process.stop_requested()) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
    return true;
  };
  Clock::time_point window_start = Clock::now();
  std::uint64_t window_steps = 0;
  while (env_steps < s.total_env_steps && !solved && !process.stop_requested()) {
    if (!gatherer.gather(keep_waiting)) break;
    const Clock::time_point update_start = Clock::now();
    const std::uint64_t v = version();
    double lag_min = 1e300, lag_max = 0, lag_sum = 0;
    for (const rl::HeldSlot& h : gatherer.slots()) {
      const shm::TrajectoryHeader& th = h.view.header();
      // A slot from a newer version than ours cannot happen; counted as lag 0 rather than wrapping.
      const double lag = th.policy_version >= v ? 0.0 : static_cast<double>(v - th.policy_version);
      lag_min = std::min(lag_min, lag), lag_max = std::max(lag_max, lag), lag_sum += lag;
      for (std::uint32_t e = 0; e < th.episodes; ++e)
        episodes.add(h.view.episode_returns()[e], h.view.episode_lengths()[e]);
    }
    const double frac = 1.0 - static_cast<double>(env_steps) / static_cast<double>(s.total_env_steps);
    const double lr = s.anneal_lr ? s.lr * frac : s.lr;
    const rl::UpdateStats st = updater.update(rl::make_batch(gatherer.slots(), rings.descriptor(), device), lr);
    const std::uint64_t consumed = slot_steps * gatherer.slots().size();
    const double lag_avg = lag_sum / static_cast<double>(gatherer.slots().size());
    gatherer.release();
    env_steps += consumed;
    window_steps += consumed;
    ++step;
    publish();
    process.tick();

    const double window_s = seconds_since(window_start);
    const double steps_per_s = window_s > 0 ? static_cast<double>(window_steps) / window_s : 0.0;
    std::uint64_t full_waits = 0;
    for (std::uint32_t a = 0; a < s.rollout_actors; ++a)
      full_waits += rings.ring(a).full_waits.load(std::memory_order_relaxed);
    last = {.step = static_cast<std::uint64_t>(step), .version = version(), .samples = env_steps,
            .samples_per_s = steps_per_s, .loss = st.loss, .seconds = seconds_since(update_start), .lr = lr,
            .env_steps = env_steps, .env_steps_per_s = steps_per_s, .episode_return = episodes.mean_return(),
            .episode_length = episodes.mean_length(), .policy_lag_min = lag_min, .policy_lag_avg = lag_avg,
            .policy_lag_max = lag_max, .ring_full_waits = full_waits};
    if (client) {
      client->saw_version(version());
      client->report(last);
    }
    if (step % report_every == 0) {
      log::info("update {} env step {} return {:.1f} length {:.1f} loss {:.4f} entropy {:.3f} lag {:.0f}/{:.1f}/{:.0f} "
                "lr {:.3g} {:.0f} env steps/s refused {}",
                step, env_steps, episodes.mean_return(), episodes.mean_length(), st.loss, st.entropy, lag_min,
                lag_avg, lag_max, lr, steps_per_s, gatherer.refused());
      window_start = Clock::now();
      window_steps = 0;
    }
    if (ckpt_every > 0 && step % ckpt_every == 0) checkpoint();
    if (s.stop_on_return && episodes.full() && episodes.mean_return() >= s.stop_return) {
      solved = true;
      log::info("solved: mean return {:.1f} over the last 100 episodes at env step {}, {:.2f} s",
                episodes.mean_return(), env_steps, seconds_since(started));
    }
  }
  const bool finished = solved || env_steps >= s.total_env_steps;
  gatherer.release();  // a stop mid-gather leaves slots held
  if (client) client->set_state(shm::ProcessState::stopping);
  publisher.publish_final(static_cast<std::uint64_t>(step), 30);
  if (client) {
    client->saw_version(publisher.slab().latest_version());
    last.version = publisher.slab().latest_version();  // the last update's figures, with the final version
    client->report(last);
  }
  checkpoint();
  log::info("{} at update {}, env step {}; final weights version {}", finished ? "finished" : "stopped", step,
            env_steps, publisher.slab().latest_version());
  return 0;
}

}  // namespace tandem
