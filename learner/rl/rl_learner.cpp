#include "learner/rl/rl_learner.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/cuda.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <algorithm>
#include <chrono>
#include <cmath>
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

struct PolicyLag {
  double min = 1e300, avg = 0, max = 0;
};

// The learner's state across its stages. Members are built in declaration order: the rendezvous
// before the model, so a rank that fails later fails every rank through the others.
class RlLearner {
 public:
  RlLearner(const JobSettings& settings, shm::JobProcess& process, const ddp::RankInfo& rank);
  RlLearner(const RlLearner&) = delete;
  RlLearner& operator=(const RlLearner&) = delete;

  void resume();        // the run dir's newest checkpoint; the ranks then agree on rank 0's state
  void attach_rings();  // rank 0 makes every rank's rings, the others attach
  void start();         // publishing, checkpoints, the updater and the first weights
  bool update_once();   // gather, update, publish, report; false once it is time to stop
  void finish();

 private:
  std::string at_update() const { return fmt::format("update {}, env step {}", step_, env_steps_); }
  bool keep_waiting();
  void report(const rl::UpdateStats& st, const PolicyLag& lag, double lr, const Clock::time_point& update_start,
              double gather_s);
  void judge_solved();
  double mean_log_std() const;

  const Clock::time_point started_ = Clock::now();
  const JobSettings& settings_;
  const RlSettings& s_;
  shm::JobProcess& process_;
  const ddp::RankInfo rank_;
  learner::LearnerRuntime runtime_;
  const std::string_view algo_;
  const std::uint32_t rollout_actors_, ranks_;
  const rl::RingRange own_;               // this rank's rollout actors (check_rl_ranks makes it whole)
  const std::uint32_t slots_per_update_;  // this rank's share of an update
  const torch::Device device_;
  const bool cuda_;
  std::unique_ptr<ddp::Session> session_;
  const envs::EnvSpec env_;
  const PolicyHead head_;
  Model model_;
  FlatParams flat_;
  Optimizer optimizer_;
  std::optional<ddp::GradSync> sync_;
  const std::optional<ObsStats> obs_stats_;  // rl.norm_obs
  std::optional<rl::RewardScaler> reward_scaler_;
  std::optional<rl::ReturnNormalizer> return_normalizer_;  // rl.norm_value
  NamedTensors learner_state_;  // what a checkpoint keeps beside the model: the reward and return scales
  double lr_scale_ = 1.0;       // rl.kl_target: the learning rate is optimizer.lr x this

  std::int64_t step_ = 0;  // updates done
  std::uint64_t env_steps_ = 0, resumed_version_ = 0;
  std::optional<shm::ExperienceRings> rings_;
  cuda::HostRegistration registered_;  // async H2D straight out of the slots
  std::optional<rl::RlUpdater> updater_;
  std::int64_t synced_steps_ = 0;  // optimizer steps of every rank, for GradSync's messages
  std::optional<rl::SlotGatherer> gatherer_;
  EpisodeWindow episodes_;
  shm::ProcessMetrics last_;
  bool solved_ = false;
  Clock::time_point window_start_, last_report_;
  std::uint64_t window_steps_ = 0;
};

OptimizerConfig optimizer_config(const OptimizerSettings& o) {
  OptimizerConfig oc;
  oc.kind = o.name;
  oc.lr = o.lr;
  oc.momentum = o.momentum;
  oc.nesterov = o.nesterov;
  oc.weight_decay = o.weight_decay;
  oc.eps = 1e-5;  // the PPO implementations' Adam epsilon (CleanRL, OpenAI baselines)
  return oc;
}

Model model_on(const JobSettings& settings, const envs::EnvSpec& env, const torch::Device& device) {
  Model model = make_rl_model(settings.model, settings.rl, env);
  if (device.is_cuda()) model.to(device);
  model.train(true);
  return model;
}

std::unique_ptr<ddp::Session> rendezvous(const ddp::RankInfo& rank, const JobSettings& settings,
                                         shm::JobProcess& process, const torch::Device& device) {
  if (!rank.distributed()) return nullptr;
  return ddp::Session::start(rank, settings, process.job(), device.is_cuda() ? device.index() : -1);
}

// Each slot's lag behind the learner's version `v`; their finished episodes go to `episodes`.
PolicyLag read_slots(const std::vector<rl::HeldSlot>& slots, std::uint64_t v, EpisodeWindow& episodes) {
  PolicyLag lag;
  double sum = 0;
  for (const rl::HeldSlot& h : slots) {
    const shm::TrajectoryHeader& th = h.view.header();
    // A slot from a newer version than ours cannot happen; counted as lag 0 rather than wrapping.
    const double l = th.policy_version >= v ? 0.0 : static_cast<double>(v - th.policy_version);
    lag.min = std::min(lag.min, l), lag.max = std::max(lag.max, l), sum += l;
    for (std::uint32_t e = 0; e < th.episodes; ++e)
      episodes.add(h.view.episode_returns()[e], h.view.episode_lengths()[e]);
  }
  lag.avg = sum / static_cast<double>(slots.size());
  return lag;
}

RlLearner::RlLearner(const JobSettings& settings, shm::JobProcess& process, const ddp::RankInfo& rank)
    : settings_(settings),
      s_(settings.rl),
      process_(process),
      rank_(rank),
      runtime_(settings, process, rank),
      algo_(algo_name(settings.learner.algo)),
      rollout_actors_(settings.rollout_actors),
      ranks_(static_cast<std::uint32_t>(rank.world_size)),
      own_{.first = static_cast<std::uint32_t>(rank.rank) * (rollout_actors_ / ranks_),
           .count = rollout_actors_ / ranks_},
      slots_per_update_(settings.rl.slots_per_update / ranks_),
      device_(runtime_.device()),
      cuda_(device_.is_cuda()),
      session_(rendezvous(rank, settings, process, device_)),
      env_(envs::EnvSource(settings.env).spec()),
      head_(policy_head_for(env_)),
      model_(model_on(settings, env_, device_)),
      flat_(FlatParams::flatten(model_)),
      optimizer_(model_.named_parameters(), optimizer_config(settings.optimizer)),
      obs_stats_(obs_stats_of(model_)) {
  if (session_) sync_.emplace(flat_, model_.trainable_parameters(), session_->comm(), rank_, session_->sync_options());
  if (s_.norm_reward) reward_scaler_.emplace(rollout_actors_, settings.env.envs, s_.gamma);
  if (reward_scaler_) learner_state_ = reward_scaler_->state();
  if (s_.norm_value) return_normalizer_.emplace(device_);
  if (return_normalizer_)
    for (auto& named : return_normalizer_->state()) learner_state_.push_back(named);
}

void RlLearner::resume() {
  if (auto latest = latest_checkpoint(runtime_.run_dir())) {
    const rl::Restored r = rl::load_checkpoint(*latest, model_, optimizer_, learner_state_);
    step_ = r.step;
    resumed_version_ = rl::metadata_count(*latest, r.metadata, "version", 0);
    env_steps_ = rl::metadata_count(*latest, r.metadata, "env_steps", 0);
    if (auto it = r.metadata.find("lr_scale"); it != r.metadata.end()) lr_scale_ = std::stod(it->second);
    log::info("resumed from {} at update {}, env step {} (weights version {})", *latest, step_, env_steps_,
              resumed_version_);
  }
  if (!sync_) return;
  // Rank 0's weights, Adam's state and counters: the replicas start bitwise equal.
  std::vector<at::Tensor> state;
  for (auto& [name, t] : optimizer_.state_tensors()) state.push_back(t);
  sync_->broadcast_from_rank0(state);
  step_ = sync_->agree(step_);
  env_steps_ = static_cast<std::uint64_t>(sync_->agree(static_cast<std::int64_t>(env_steps_)));
  resumed_version_ = static_cast<std::uint64_t>(sync_->agree(static_cast<std::int64_t>(resumed_version_)));
}

// The rings come before the slab: an actor that finds the weights finds its ring too.
void RlLearner::attach_rings() {
  if (rank_.rank == 0) {
    rings_.emplace(shm::ExperienceRings::create(process_.job(), rl::experience_shape(settings_, env_, head_)));
    if (process_.client()) rings_->segment().persist();  // the launcher removes the job's segments when the job ends
  }
  if (sync_) sync_->agree(0);  // returns on the other ranks once rank 0 has entered it: the rings exist
  if (rank_.rank != 0) rings_.emplace(shm::ExperienceRings::attach(process_.job()));
  if (cuda_)
    registered_ = cuda::HostRegistration(rings_->segment().base(), rings_->segment().size(), false, "experience rings");
}

void RlLearner::start() {
  runtime_.publish_from(flat_, resumed_version_, learner::LearnerRuntime::Publish::every_step);
  runtime_.checkpoint_with([this](const std::string& path, std::map<std::string, std::string> metadata) {
    metadata["env_steps"] = std::to_string(env_steps_);
    metadata["algo"] = std::string(algo_);
    metadata["lr_scale"] = fmt::format("{:.17g}", lr_scale_);
    rl::save_checkpoint(path, model_, optimizer_, step_, metadata, learner_state_);
  });

  const bool deterministic = settings_.shape.deterministic;
  updater_.emplace(model_, head_, optimizer_, settings_.learner.algo, s_,
                   at::detail::createCPUGenerator(settings_.learner.seed),
                   return_normalizer_ ? &*return_normalizer_ : nullptr);
  if (sync_) updater_->set_after_backward([this] { sync_->finish(synced_steps_++); });
  updater_->set_before_step([this] { runtime_.wait_before_update(); });
  if (settings_.learner.cuda_graph) {
    if (auto why = updater_->capture_updates()) log::info("learner.cuda_graph = true, updating eagerly: {}", *why);
    else
      log::info(
          "learner.cuda_graph: each {} update ({} minibatch steps) is one graph, captured after three warm-up "
          "updates and replayed",
          settings_.learner.algo == Algo::vtrace ? "V-trace" : "PPO", s_.update_epochs * s_.minibatches);
  }
  gatherer_.emplace(*rings_, own_, slots_per_update_, deterministic ? settings_.slots_per_actor() : 0);
  log::info("{} {} on {}: {} rollout ring{} of {} slots ({} steps x {} envs), {} slot{} per update, {} env steps{}{}",
            algo_, model_.describe(), env_.name, rollout_actors_, rollout_actors_ == 1 ? "" : "s", s_.slots_per_ring,
            s_.rollout_steps, settings_.env.envs, s_.slots_per_update, s_.slots_per_update == 1 ? "" : "s",
            s_.total_env_steps, deterministic ? ", deterministic" : "",
            sync_ ? fmt::format("; {}: rings {}..{}, {} slots of each update, gradients over {}", rank_.name(),
                                own_.first, own_.first + own_.count - 1, slots_per_update_, session_->comm().backend())
                  : "");
  last_ = {.step = static_cast<std::uint64_t>(step_), .samples = env_steps_, .env_steps = env_steps_};
  runtime_.start(static_cast<std::uint64_t>(step_));  // the actors start from these weights
  window_start_ = last_report_ = Clock::now();
}

bool RlLearner::keep_waiting() {
  runtime_.tick();
  if (process_.stop_requested()) return false;
  std::this_thread::sleep_for(std::chrono::microseconds(100));
  return true;
}

bool RlLearner::update_once() {
  const bool stop = env_steps_ >= s_.total_env_steps || solved_ || runtime_.stop_before_step();
  const Clock::time_point gather_start = Clock::now();
  const bool gathered = !stop && gatherer_->gather([this] { return keep_waiting(); });
  const double gather_s = seconds_since(gather_start);
  // Ranks stop together: each update is a collective, so one that stops alone strands the rest.
  if (sync_ ? sync_->any(!gathered) : !gathered) return false;

  const Clock::time_point update_start = Clock::now();
  const PolicyLag lag = read_slots(gatherer_->slots(), runtime_.published_version(), episodes_);
  const double frac = 1.0 - static_cast<double>(env_steps_) / static_cast<double>(s_.total_env_steps);
  const double lr = settings_.optimizer.lr * (s_.anneal_lr ? frac : lr_scale_);
  rl::Batch batch = rl::make_batch(gatherer_->slots(), rings_->descriptor(), device_);
  if (reward_scaler_) batch.rewards.copy_(reward_scaler_->scale(gatherer_->slots(), batch.steps()));
  const rl::UpdateStats st = updater_->update(batch, lr);
  if (s_.kl_target > 0) lr_scale_ = rl::follow_kl(lr_scale_, st.approx_kl, s_.kl_target);
  // The batch's observations join the statistics after the update, not before: the actors acted
  // with the statistics the update trained under, so an on-policy batch starts at ratio 1. Folded
  // in before, every update would first chase the shift of its own normalisation.
  if (obs_stats_) {
    runtime_.wait_before_update();  // the statistics are in the bytes a publish may still be copying
    rl::update_obs_stats(*obs_stats_, batch.observations.narrow(0, 0, batch.steps()));
    // Rank 0's statistics (from its own actors' observations) are every rank's: they are model
    // buffers, which the replicas keep bitwise equal.
    if (sync_) sync_->broadcast_from_rank0();
  }
  const std::uint64_t consumed = std::uint64_t{s_.rollout_steps} * static_cast<std::uint64_t>(settings_.env.envs) *
                                 gatherer_->slots().size() * ranks_;
  env_steps_ += consumed;
  window_steps_ += consumed;
  ++step_;
  runtime_.step_taken(static_cast<std::uint64_t>(step_));
  // Publish, wait for the copy to commit (wait_before_update returns after it), then free the slots:
  // an actor waiting on a full ring starts its next slot with the weights this update made. Freed
  // any sooner, it would start with the old ones, and a ring of one update's slots would still run
  // every batch one version behind.
  runtime_.wait_before_update();
  gatherer_->release();
  report(st, lag, lr, update_start, gather_s);
  runtime_.checkpoint_if_due(step_, at_update());
  judge_solved();
  return true;
}

void RlLearner::report(const rl::UpdateStats& st, const PolicyLag& lag, double lr,
                       const Clock::time_point& update_start, double gather_s) {
  const double window_s = seconds_since(window_start_), since_report = std::max(seconds_since(last_report_), 1e-9);
  last_report_ = Clock::now();
  const double steps_per_s = window_s > 0 ? static_cast<double>(window_steps_) / window_s : 0.0;
  std::uint64_t full_waits = 0;
  for (std::uint32_t a = 0; a < rollout_actors_; ++a)
    full_waits += rings_->ring(a).full_waits.load(std::memory_order_relaxed);
  last_ = {.step = static_cast<std::uint64_t>(step_),
           .version = runtime_.published_version(),
           .samples = env_steps_,
           .samples_per_s = steps_per_s,
           .loss = st.loss,
           .seconds = seconds_since(update_start),
           .lr = lr,
           .env_steps = env_steps_,
           .env_steps_per_s = steps_per_s,
           .episode_return = episodes_.mean_return(),
           .episode_length = episodes_.mean_length(),
           .policy_lag_min = lag.min,
           .policy_lag_avg = lag.avg,
           .policy_lag_max = lag.max,
           .ring_full_waits = full_waits,
           .compute_share = seconds_since(update_start) / since_report,
           .wait_share = gather_s / since_report,
           .policy_loss = st.policy_loss,
           .value_loss = st.value_loss,
           .entropy = st.entropy,
           .approx_kl = st.approx_kl,
           .clip_frac = st.clip_frac,
           .explained_var = st.explained_var,
           .adv_std = st.adv_std,
           .log_std = mean_log_std(),
           .return_std = st.return_std,
           .reward_std = reward_scaler_ ? std::sqrt(reward_scaler_->variance() + rl::kNormEpsilon) : shm::kNaN};
  runtime_.report(last_, true);
  if (step_ % settings_.learner.report_every_steps != 0) return;
  log::info(
      "update {} env step {} return {:.1f} length {:.1f} loss {:.4f} entropy {:.3f} kl {:.4f} clip {:.3f} ev {:.3f} "
      "log_std {:.3f} lag {:.0f}/{:.1f}/{:.0f} lr {:.3g} {:.0f} env steps/s refused {}",
      step_, env_steps_, episodes_.mean_return(), episodes_.mean_length(), st.loss, st.entropy, st.approx_kl,
      st.clip_frac, st.explained_var, last_.log_std, lag.min, lag.avg, lag.max, lr, steps_per_s, gatherer_->refused());
  window_start_ = Clock::now();
  window_steps_ = 0;
}

// The Gaussian policy's log-std, averaged over the action dimensions (NaN for a discrete policy).
double RlLearner::mean_log_std() const {
  for (const auto& [name, p] : model_.named_parameters())
    if (name == "log_std") return p.detach().mean().item<double>();
  return shm::kNaN;
}

// Rank 0 judges by its own actors' episodes, a sample of every rank's, and tells the others.
void RlLearner::judge_solved() {
  if (!s_.stop_on_return) return;
  if (rank_.rank == 0 && episodes_.full() && episodes_.mean_return() >= s_.stop_return) {
    solved_ = true;
    log::info("solved: mean return {:.1f} over the last 100 episodes at env step {}, {:.2f} s", episodes_.mean_return(),
              env_steps_, seconds_since(started_));
  }
  if (sync_) solved_ = sync_->agree(solved_ ? 1 : 0) != 0;
}

void RlLearner::finish() {
  if (gatherer_) gatherer_->release();  // a stop mid-gather leaves slots held
  runtime_.finish(
      step_, solved_ || env_steps_ >= s_.total_env_steps, [this] { return last_; }, at_update());
}

}  // namespace

int run_rl_learner(const JobSettings& settings, shm::JobProcess& process, const ddp::RankInfo& rank) {
  RlLearner learner(settings, process, rank);  // rendezvous, model, optimizer, gradient sync
  learner.resume();
  learner.attach_rings();
  learner.start();
  while (learner.update_once()) {
  }
  learner.finish();
  return 0;
}

}  // namespace tandem
