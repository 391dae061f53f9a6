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
#include <optional>
#include <thread>

#include "common/clock.hpp"
#include "common/cuda.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "common/torch/flat_params.hpp"
#include "common/torch/model_config.hpp"
#include "common/torch/rl_model.hpp"
#include "envs/env_source.hpp"
#include "learner/ddp/session.hpp"
#include "learner/runtime.hpp"
#include "learner/rl/normalizers.hpp"
#include "learner/rl/rl_checkpoint.hpp"
#include "learner/rl/rl_setup.hpp"
#include "learner/rl/slot_gather.hpp"
#include "learner/rl/update.hpp"
#include "learner/trainer.hpp"
#include "shm/experience_ring.hpp"

namespace tandem {
namespace {

using Clock = std::chrono::steady_clock;

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

int run_rl_learner(const JobSettings& settings, shm::JobProcess& process, const ddp::RankInfo& rank) {
  const Clock::time_point started = Clock::now();
  learner::LearnerRuntime runtime(settings, process, rank);
  const RlSettings& s = settings.rl;
  const std::string_view algo = algo_name(settings.learner.algo);
  const std::uint32_t rollout_actors = settings.rollout_actors;
  const auto ranks = static_cast<std::uint32_t>(rank.world_size);
  // This rank's rollout actors and its share of an update (check_rl_ranks makes both whole).
  const rl::RingRange own{.first = static_cast<std::uint32_t>(rank.rank) * (rollout_actors / ranks),
                          .count = rollout_actors / ranks};
  const std::uint32_t slots_per_update = s.slots_per_update / ranks;
  const double base_lr = settings.optimizer.lr;
  const torch::Device& device = runtime.device();
  const bool cuda = device.is_cuda();
  // Rendezvous first: a rank that fails later then fails every rank through its peers.
  std::unique_ptr<ddp::Session> session;
  if (rank.distributed()) session = ddp::Session::start(rank, settings, process.job(), cuda ? device.index() : -1);

  const envs::EnvSpec env = envs::EnvSource(settings.env).spec();
  const PolicyHead head = policy_head_for(env);
  Model model = make_rl_model(settings.model, settings.rl, env);
  if (cuda) model.to(device);
  FlatParams flat = FlatParams::flatten(model);
  OptimizerConfig oc;
  oc.kind = settings.optimizer.name;
  oc.lr = base_lr;
  oc.momentum = settings.optimizer.momentum;
  oc.nesterov = settings.optimizer.nesterov;
  oc.weight_decay = settings.optimizer.weight_decay;
  oc.eps = 1e-5;  // the PPO implementations' Adam epsilon (CleanRL, OpenAI baselines)
  Optimizer optimizer(model.named_parameters(), oc);
  model.train(true);
  std::optional<ddp::GradSync> sync;
  if (session) sync.emplace(flat, model.trainable_parameters(), session->comm(), rank, session->sync_options());

  const std::optional<ObsStats> obs_stats = obs_stats_of(model);  // rl.norm_obs
  std::optional<rl::RewardScaler> reward_scaler;
  if (s.norm_reward) reward_scaler.emplace(rollout_actors, settings.env.envs, s.gamma);
  const NamedTensors learner_state = reward_scaler ? reward_scaler->state() : NamedTensors{};

  std::int64_t step = 0;  // updates done
  std::uint64_t env_steps = 0, resumed_version = 0;
  if (auto latest = latest_checkpoint(runtime.run_dir())) {
    const rl::Restored r = rl::load_checkpoint(*latest, model, optimizer, learner_state);
    step = r.step;
    resumed_version = rl::metadata_count(*latest, r.metadata, "version", 0);
    env_steps = rl::metadata_count(*latest, r.metadata, "env_steps", 0);
    log::info("resumed from {} at update {}, env step {} (weights version {})", *latest, step, env_steps,
              resumed_version);
  }
  if (sync) {  // rank 0's weights, Adam's state and counters: the replicas start bitwise equal
    std::vector<at::Tensor> state;
    for (auto& [name, t] : optimizer.state_tensors()) state.push_back(t);
    sync->broadcast_from_rank0(state);
    step = sync->agree(step);
    env_steps = static_cast<std::uint64_t>(sync->agree(static_cast<std::int64_t>(env_steps)));
    resumed_version = static_cast<std::uint64_t>(sync->agree(static_cast<std::int64_t>(resumed_version)));
  }

  // The rings before the slab: an actor that finds the weights finds its ring too. Rank 0 makes every
  // rank's; the others attach once it has (the broadcast returns on them after rank 0 entered it).
  std::optional<shm::ExperienceRings> made;
  if (rank.rank == 0) {
    made.emplace(shm::ExperienceRings::create(process.job(), rl::experience_shape(settings, env, head)));
    if (process.client()) made->segment().persist();  // the launcher removes the job's segments when the job ends
  }
  if (sync) sync->agree(0);
  if (rank.rank != 0) made.emplace(shm::ExperienceRings::attach(process.job()));
  shm::ExperienceRings& rings = *made;
  cuda::HostRegistration registered;  // async H2D straight out of the slots
  if (cuda)
    registered = cuda::HostRegistration(rings.segment().base(), rings.segment().size(), false, "experience rings");

  runtime.publish_from(flat, resumed_version, learner::LearnerRuntime::Publish::every_step);
  runtime.checkpoint_with([&](const std::string& path, std::map<std::string, std::string> metadata) {
    metadata["env_steps"] = std::to_string(env_steps);
    metadata["algo"] = std::string(algo);
    rl::save_checkpoint(path, model, optimizer, step, metadata, learner_state);
  });
  auto at_update = [&] { return fmt::format("update {}, env step {}", step, env_steps); };

  const bool deterministic = settings.shape.deterministic;
  at::Generator order = at::detail::createCPUGenerator(settings.learner.seed);
  rl::RlUpdater updater(model, head, optimizer, settings.learner.algo, s, order);
  std::int64_t synced_steps = 0;  // optimizer steps of every rank, for GradSync's messages
  if (sync) updater.set_after_backward([&] { sync->finish(synced_steps++); });
  updater.set_before_step([&] { runtime.wait_before_update(); });
  if (settings.learner.cuda_graph) {
    if (auto why = updater.capture_minibatches()) log::info("learner.cuda_graph = true, updating eagerly: {}", *why);
    else
      log::info("learner.cuda_graph: each {} minibatch step is captured after three warm-up steps and replayed",
                settings.learner.algo == Algo::vtrace ? "V-trace" : "PPO");
  }
  rl::SlotGatherer gatherer(rings, own, slots_per_update, deterministic ? settings.slots_per_actor() : 0);
  const std::uint64_t slot_steps = std::uint64_t{s.rollout_steps} * static_cast<std::uint64_t>(settings.env.envs);
  log::info("{} {} on {}: {} rollout ring{} of {} slots ({} steps x {} envs), {} slot{} per update, {} env steps{}{}",
            algo, model.describe(), env.name, rollout_actors, rollout_actors == 1 ? "" : "s", s.slots_per_ring,
            s.rollout_steps, settings.env.envs, s.slots_per_update, s.slots_per_update == 1 ? "" : "s",
            s.total_env_steps, deterministic ? ", deterministic" : "",
            sync ? fmt::format("; {}: rings {}..{}, {} slots of each update, gradients over {}", rank.name(), own.first,
                               own.first + own.count - 1, slots_per_update, session->comm().backend())
                 : "");
  runtime.start(static_cast<std::uint64_t>(step));  // the actors start from these weights

  EpisodeWindow episodes;
  shm::ProcessMetrics last{.step = static_cast<std::uint64_t>(step), .samples = env_steps, .env_steps = env_steps};
  bool solved = false;
  auto keep_waiting = [&] {
    runtime.tick();
    if (process.stop_requested()) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
    return true;
  };
  Clock::time_point window_start = Clock::now(), last_report = window_start;
  std::uint64_t window_steps = 0;
  for (;;) {
    const bool stop = env_steps >= s.total_env_steps || solved || runtime.stop_before_step();
    const Clock::time_point gather_start = Clock::now();
    const bool gathered = !stop && gatherer.gather(keep_waiting);
    const double gather_s = seconds_since(gather_start);
    // Ranks stop together: each update is a collective, so one that stops alone strands the rest.
    if (sync ? sync->any(!gathered) : !gathered) break;
    const Clock::time_point update_start = Clock::now();
    const std::uint64_t v = runtime.published_version();
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
    const double lr = s.anneal_lr ? base_lr * frac : base_lr;
    rl::Batch batch = rl::make_batch(gatherer.slots(), rings.descriptor(), device);
    if (reward_scaler) batch.rewards.copy_(reward_scaler->scale(gatherer.slots(), batch.steps()));
    const rl::UpdateStats st = updater.update(batch, lr);
    // The batch's observations join the statistics after the update, not before: the actors acted
    // with the statistics the update trained under, so an on-policy batch starts at ratio 1. Folded
    // in before, every update would first chase the shift of its own normalisation.
    if (obs_stats) {
      runtime.wait_before_update();  // the statistics are in the bytes a publish may still be copying
      rl::update_obs_stats(*obs_stats, batch.observations.narrow(0, 0, batch.steps()));
      // Rank 0's statistics (from its own actors' observations) are every rank's: they are model
      // buffers, which the replicas keep bitwise equal.
      if (sync) sync->broadcast_from_rank0();
    }
    const std::uint64_t consumed = slot_steps * gatherer.slots().size() * ranks;
    const double lag_avg = lag_sum / static_cast<double>(gatherer.slots().size());
    env_steps += consumed;
    window_steps += consumed;
    ++step;
    runtime.step_taken(static_cast<std::uint64_t>(step));
    // Publish, wait for the copy to commit (wait_before_update returns after it), then free the slots:
    // an actor waiting on a full ring starts its next slot with the weights this update made. Freed
    // any sooner, it would start with the old ones, and a ring of one update's slots would still run
    // every batch one version behind.
    runtime.wait_before_update();
    gatherer.release();

    const double window_s = seconds_since(window_start), since_report = std::max(seconds_since(last_report), 1e-9);
    last_report = Clock::now();
    const double steps_per_s = window_s > 0 ? static_cast<double>(window_steps) / window_s : 0.0;
    std::uint64_t full_waits = 0;
    for (std::uint32_t a = 0; a < rollout_actors; ++a)
      full_waits += rings.ring(a).full_waits.load(std::memory_order_relaxed);
    last = {.step = static_cast<std::uint64_t>(step),
            .version = runtime.published_version(),
            .samples = env_steps,
            .samples_per_s = steps_per_s,
            .loss = st.loss,
            .seconds = seconds_since(update_start),
            .lr = lr,
            .env_steps = env_steps,
            .env_steps_per_s = steps_per_s,
            .episode_return = episodes.mean_return(),
            .episode_length = episodes.mean_length(),
            .policy_lag_min = lag_min,
            .policy_lag_avg = lag_avg,
            .policy_lag_max = lag_max,
            .ring_full_waits = full_waits,
            .compute_share = seconds_since(update_start) / since_report,
            .wait_share = gather_s / since_report};
    runtime.report(last, true);
    if (step % settings.learner.report_every_steps == 0) {
      log::info(
          "update {} env step {} return {:.1f} length {:.1f} loss {:.4f} entropy {:.3f} lag {:.0f}/{:.1f}/{:.0f} "
          "lr {:.3g} {:.0f} env steps/s refused {}",
          step, env_steps, episodes.mean_return(), episodes.mean_length(), st.loss, st.entropy, lag_min, lag_avg,
          lag_max, lr, steps_per_s, gatherer.refused());
      window_start = Clock::now();
      window_steps = 0;
    }
    runtime.checkpoint_if_due(step, at_update());
    // Rank 0 judges by its own actors' episodes, a sample of every rank's, and tells the others.
    if (rank.rank == 0 && s.stop_on_return && episodes.full() && episodes.mean_return() >= s.stop_return) {
      solved = true;
      log::info("solved: mean return {:.1f} over the last 100 episodes at env step {}, {:.2f} s",
                episodes.mean_return(), env_steps, seconds_since(started));
    }
    if (sync && s.stop_on_return) solved = sync->agree(solved ? 1 : 0) != 0;
  }
  gatherer.release();  // a stop mid-gather leaves slots held
  runtime.finish(
      step, solved || env_steps >= s.total_env_steps, [&] { return last; }, at_update());
  return 0;
}

}  // namespace tandem
