#include "learner/supervised_loop.hpp"

#include <ATen/Context.h>
#include <torch/cuda.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "common/log.hpp"
#include "common/torch/flat_params.hpp"
#include "common/torch/model_config.hpp"
#include "learner/ddp/session.hpp"
#include "learner/feed/device_feed.hpp"
#include "learner/feed/host_feed.hpp"
#include "learner/captured_train_step.hpp"
#include "learner/runtime.hpp"
#include "learner/trainer.hpp"
#include "shm/dataset_check.hpp"
#include "shm/job_process.hpp"
#include "shm/segment.hpp"

namespace tandem {

namespace {

TrainerConfig trainer_config(const JobSettings& s, std::int64_t total_steps) {
  TrainerConfig t;
  t.optimizer.kind = s.optimizer.name;
  t.optimizer.lr = s.optimizer.lr;
  t.optimizer.momentum = s.optimizer.momentum;
  t.optimizer.nesterov = s.optimizer.nesterov;
  t.optimizer.weight_decay = s.optimizer.weight_decay;
  t.schedule.kind = s.schedule.name;
  t.schedule.warmup_steps = s.schedule.warmup_steps;
  t.schedule.total_steps = total_steps;
  t.schedule.step_size = s.schedule.decay_every_steps;
  t.schedule.gamma = s.schedule.decay_factor;
  t.schedule.min_lr = s.schedule.min_lr;
  return t;
}

// device: the GPU for cuda, and the per-device seed of the batch order (the local rank on CPUs).
feed::FeedOptions feed_options(const JobSettings& s, const SupervisedBudget& budget, const torch::Device& device,
                               const ddp::RankInfo& rank) {
  feed::FeedOptions o;
  o.split = s.data.train_split;
  o.batch_size = budget.rank_batch;
  o.seed = s.learner.seed;
  o.drop_last = true;
  o.mean.assign(s.data.mean.begin(), s.data.mean.end());
  o.stddev.assign(s.data.std.begin(), s.data.std.end());
  o.placement = device.is_cuda() ? feed::Placement::cuda : feed::Placement::cpu;
  o.workers = s.supervised.feed_workers;
  o.rank = static_cast<std::uint32_t>(rank.rank);
  o.world_size = static_cast<std::uint32_t>(rank.world_size);
  o.device_index = static_cast<std::uint32_t>(device.is_cuda() ? device.index() : rank.local_rank);
  return o;
}

// Either feed, behind one next().
struct AnyFeed {
  std::optional<feed::HostFeed> host;
  std::optional<feed::DeviceFeed> device;
  std::uint64_t length() const { return host ? host->length() : device->length(); }
  feed::Step next() { return host ? host->next() : device->next(); }
};

// A checkpoint's "version" metadata (written by this program) as a number.
std::uint64_t parse_version(const std::string& file, const std::string& text) {
  std::uint64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size())
    fail("checkpoint {} has version \"{}\", not a number: remove the file or resume from another run dir", file, text);
  return v;
}


// Per-step communication times, averaged over a report window.
struct CommWindow {
  double allreduce_s = 0, exposed_s = 0;
  std::int64_t steps = 0;
  void add(const ddp::SyncTimes& t) {
    allreduce_s += t.allreduce_s;
    exposed_s += t.exposed_s;
    ++steps;
  }
  double mean(double sum) const { return steps > 0 ? sum / static_cast<double>(steps) : shm::kNaN; }
};

// Resumes every rank from global rank 0's newest checkpoint; returns its published version. A rank
// whose run dir lacks that file (another node's disk) takes it over the wire: rank 0's counters by
// agreement, its tensors by the broadcast every rank does anyway.
std::uint64_t resume(Trainer& trainer, const std::string& run_dir, ddp::GradSync* sync, const ddp::RankInfo& rank) {
  const std::optional<std::string> latest = latest_checkpoint(run_dir);
  std::uint64_t version = 0;
  if (latest) {
    const auto meta = trainer.load_checkpoint(*latest);
    if (auto v = meta.find("version"); v != meta.end()) version = parse_version(*latest, v->second);
  }
  bool over_the_wire = false;
  if (sync) {
    const std::int64_t step = sync->agree(trainer.step());
    const std::int64_t optimizer_steps = sync->agree(trainer.optimizer().steps_taken());
    if (step != trainer.step()) {
      if (step == 0)
        fail(
            "rank {} found checkpoint {} but rank 0 found none: ranks resume from rank 0's run dir; remove it or "
            "give rank 0 the same run dir",
            rank.rank, *latest);
      const std::string path = checkpoint_path(run_dir, step);
      if (std::filesystem::exists(path)) {
        const auto meta = trainer.load_checkpoint(path);
        if (auto v = meta.find("version"); v != meta.end()) version = parse_version(path, v->second);
      } else {
        trainer.restore_counters(step, optimizer_steps);
        over_the_wire = true;
      }
    }
    // Rank 0's bytes, whatever each rank's file held: the replicas start bitwise equal.
    std::vector<at::Tensor> state;
    for (auto& [name, t] : trainer.optimizer().state_tensors()) state.push_back(t);
    sync->broadcast_from_rank0(state);
    version = static_cast<std::uint64_t>(sync->agree(static_cast<std::int64_t>(version)));
  }
  if (over_the_wire)
    log::info(
        "resumed at step {} (weights version {}) from rank 0's checkpoint, received from rank 0: this run dir "
        "has no copy of it",
        trainer.step(), version);
  else if (trainer.step() > 0)
    log::info("resumed from {} at step {} (weights version {})", checkpoint_path(run_dir, trainer.step()),
              trainer.step(), version);
  return version;
}

}  // namespace

int run_supervised_learner(const JobSettings& settings, shm::JobProcess& process, const ddp::RankInfo& rank) {
  learner::LearnerRuntime runtime(settings, process, rank);
  const torch::Device& device = runtime.device();
  const bool cuda = device.is_cuda();
  const bool device_feed = settings.supervised.feed == SupervisedSettings::Feed::device;

  // Rendezvous first: a rank that fails later (a bad dataset) then fails every rank through its peers.
  std::unique_ptr<ddp::Session> session;
  if (rank.distributed()) session = ddp::Session::start(rank, settings, process.job(), cuda ? device.index() : -1);

  const shm::JobData data = shm::attach_job_data(settings, false);
  const shm::DatasetCache& cache = data.cache;
  const SupervisedBudget budget = supervised_budget(settings, data.train.name, data.train.end - data.train.begin);
  const std::int64_t total = budget.total_steps;
  Model model = Model::create(model_spec_for(settings.model, cache.field("x").sample_shape));
  if (cuda) {
    // Every step has the same shapes (drop_last): cuDNN times its algorithms once and keeps the fastest.
    at::globalContext().setBenchmarkCuDNN(true);
    model.to(device);
    model.set_precision(settings.learner.precision == Precision::bf16 ? torch::kBFloat16 : torch::kFloat32);
  }
  FlatParams flat = FlatParams::flatten(model);

  const feed::FeedOptions fopts = feed_options(settings, budget, device, rank);
  const std::uint64_t epoch_steps = budget.steps_per_epoch;
  if (feed::make_feed_sampler(feed::describe_feed(cache, fopts), fopts).length() != epoch_steps)
    throw std::logic_error("supervised_budget() and the feed's sampler disagree on the steps of an epoch");

  Trainer trainer(model, trainer_config(settings, total));
  std::optional<ddp::GradSync> sync;
  if (session) {
    sync.emplace(flat, model.trainable_parameters(), session->comm(), rank, session->sync_options());
    runtime.vote_with(*sync);
  }
  runtime.publish_from(flat, resume(trainer, runtime.run_dir(), sync ? &*sync : nullptr, rank),
                       learner::LearnerRuntime::Publish::on_schedule);
  // The gradients first (their all-reduce runs while a CPU publish copy finishes), then the fence.
  // A CUDA model's publish needs no fence (stream order), which keeps its step capturable.
  if (sync)
    trainer.set_before_update([&] {
      sync->finish(trainer.step());
      runtime.wait_before_update();
    });
  else if (!cuda) trainer.set_before_update([&] { runtime.wait_before_update(); });
  runtime.checkpoint_with([&](const std::string& path, std::map<std::string, std::string> metadata) {
    metadata["job"] = process.job();
    trainer.save_checkpoint(path, metadata);
  });

  const std::uint64_t start = static_cast<std::uint64_t>(trainer.step());
  AnyFeed feed;
  if (device_feed) feed.device.emplace(cache, fopts, start / epoch_steps);
  else feed.host.emplace(cache, fopts, start / epoch_steps);
  for (std::uint64_t i = 0; i < start % epoch_steps; ++i) feed.next();  // the resumed epoch's done steps

  // learner.cuda_graph: one graph per run; where it cannot be, one line says why and training is eager.
  std::unique_ptr<CapturedTrainStep> graph;
  if (settings.learner.cuda_graph) {
    if (auto why = CapturedTrainStep::unsupported(trainer, sync ? &*sync : nullptr)) {
      log::info("learner.cuda_graph = true, training eagerly: {}", *why);
    } else {
      CapturedTrainStep::Gather gather;
      if (feed.device) gather = [&](const torch::Tensor& rows, feed::Batch& out) { feed.device->gather(rows, out); };
      graph = std::make_unique<CapturedTrainStep>(trainer,
                                                  feed::describe_feed(cache, fopts).batch_shape(fopts.batch_size),
                                                  std::move(gather), 3, sync ? &*sync : nullptr);
      log::info("learner.cuda_graph: the training step is captured after its warm-up and replayed");
    }
  }

  auto at_step = [&] { return fmt::format("step {}", trainer.step()); };
  log::info("{}; {} steps ({} per epoch) from step {}; feed {} on {}{}", model.describe(), total, epoch_steps, start,
            device_feed ? "device" : "host", cuda ? "cuda" : "cpu",
            runtime.publishing() ? fmt::format("; publishing to /{}", runtime.slab_name()) : "");
  runtime.start(start);

  const std::int64_t report_every = settings.learner.report_every_steps;
  std::int64_t samples = 0;
  CommWindow comm;
  while (trainer.step() < total) {
    if (runtime.stop_before_step()) break;
    feed::Step s;
    if (graph && feed.device) {  // the graph gathers from its index buffer
      s = feed.device->next_rows(graph->rows());
      samples += graph->step().samples;
    } else {
      s = feed.next();
      for (const auto& b : s.batches) {
        if (graph) graph->step(b.x, b.y);
        else trainer.train_step(b.x, b.y);
        samples += b.y.size(0);
      }
    }
    if (sync && !(graph && graph->captured())) comm.add(sync->last_times());  // a replay has no host timings
    const auto step = static_cast<std::uint64_t>(trainer.step());
    runtime.step_taken(step);
    if (trainer.step() % report_every == 0 || trainer.step() == total) {
      const WindowMetrics w = trainer.take_window();
      runtime.report({.step = step,
                      .version = runtime.latest_version(),
                      .samples = static_cast<std::uint64_t>(samples),
                      .epoch = s.epoch,
                      .samples_per_s = w.samples_per_s,
                      .loss = w.loss,
                      .accuracy = w.accuracy,
                      .seconds = w.seconds / std::max<double>(1, static_cast<double>(w.steps)),
                      .lr = w.lr,
                      .allreduce_s = comm.mean(comm.allreduce_s),
                      .exposed_comm_s = comm.mean(comm.exposed_s)});
      comm = {};
      if (trainer.step() % (report_every * 10) == 0)
        log::info("step {}/{} epoch {} loss {:.4f} acc {:.4f} lr {:.4g} {:.0f} samples/s", step, total, s.epoch, w.loss,
                  w.accuracy, w.lr, w.samples_per_s);
    }
    runtime.checkpoint_if_due(trainer.step(), at_step());
    if (runtime.stop_agreed()) break;
  }
  runtime.finish(
      trainer.step(), trainer.step() >= total,
      [&] {
    const WindowMetrics w = trainer.take_window();
    return shm::ProcessMetrics{.step = static_cast<std::uint64_t>(trainer.step()),
                               .samples = static_cast<std::uint64_t>(samples),
                               .samples_per_s = w.samples_per_s,
                               .loss = w.loss,
                               .accuracy = w.accuracy,
                               .lr = trainer.current_lr()};
      },
      at_step());
  return 0;
}

}  // namespace tandem
