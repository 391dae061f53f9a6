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
#include "common/job_keys.hpp"
#include "common/log.hpp"
#include "common/torch/flat_params.hpp"
#include "common/torch/model_config.hpp"
#include "learner/ddp/session.hpp"
#include "learner/feed/device_feed.hpp"
#include "learner/feed/host_feed.hpp"
#include "learner/graph_step.hpp"
#include "learner/model_publisher.hpp"
#include "learner/trainer.hpp"
#include "shm/dataset_cache.hpp"
#include "shm/job_process.hpp"
#include "shm/segment.hpp"

namespace tandem {

namespace {

TrainerConfig trainer_config(const Config& c, std::int64_t total_steps) {
  TrainerConfig t;
  t.optimizer.kind = c.string("learner.optimizer");
  t.optimizer.lr = c.real("learner.lr");
  t.optimizer.momentum = c.real("learner.momentum");
  t.optimizer.nesterov = c.boolean("learner.nesterov");
  t.optimizer.weight_decay = c.real("learner.weight_decay");
  t.schedule.kind = c.string("learner.schedule");
  t.schedule.warmup_steps = c.integer("learner.warmup_steps");
  t.schedule.total_steps = total_steps;
  t.schedule.step_size = c.integer("learner.step_size");
  t.schedule.gamma = c.real("learner.gamma");
  t.schedule.min_lr = c.real("learner.min_lr");
  if (t.schedule.kind == "cosine" && t.schedule.warmup_steps >= total_steps)
    fail("config: learner.warmup_steps = {} is not below the run's {} steps: lower it or train longer",
         t.schedule.warmup_steps, total_steps);
  return t;
}

feed::FeedOptions feed_options(const Config& c, bool cuda, const ddp::RankInfo& rank) {
  feed::FeedOptions o;
  o.split = c.string("data.train_split");
  // learner.batch_size is one optimizer step's samples across all ranks, so run.learners changes the
  // speed and not the training: each rank takes its share.
  const auto batch = static_cast<std::uint64_t>(c.integer("learner.batch_size"));
  const auto world = static_cast<std::uint64_t>(rank.world_size);
  if (batch % world != 0)
    fail("config: learner.batch_size = {} does not divide among the {} learner ranks (it counts one step's samples "
         "across all ranks): use a multiple of {}", batch, world, world);
  o.batch_size = batch / world;
  o.seed = static_cast<std::uint64_t>(c.integer("learner.seed"));
  o.drop_last = true;
  for (double v : parse_number_list("data.mean", c.string("data.mean"))) o.mean.push_back(static_cast<float>(v));
  for (double v : parse_number_list("data.std", c.string("data.std"))) o.stddev.push_back(static_cast<float>(v));
  o.mean.erase(o.mean.begin());      // FeedOptions starts with {0} and {1}
  o.stddev.erase(o.stddev.begin());
  o.placement = cuda ? feed::Placement::cuda : feed::Placement::cpu;
  o.workers = static_cast<unsigned>(c.integer("learner.feed_workers"));
  o.rank = static_cast<std::uint32_t>(rank.rank);
  o.world_size = static_cast<std::uint32_t>(rank.world_size);
  o.device_index = static_cast<std::uint32_t>(rank.local_rank);
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
        fail("rank {} found checkpoint {} but rank 0 found none: ranks resume from rank 0's run dir; remove it or "
             "give rank 0 the same run dir", rank.rank, *latest);
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
    log::info("resumed at step {} (weights version {}) from rank 0's checkpoint, received from rank 0: this run dir "
              "has no copy of it", trainer.step(), version);
  else if (trainer.step() > 0)
    log::info("resumed from {} at step {} (weights version {})", checkpoint_path(run_dir, trainer.step()),
              trainer.step(), version);
  return version;
}

}  // namespace

int run_supervised_learner(const Config& config, shm::JobProcess& process, const ddp::RankInfo& rank) {
  shm::ControlClient* client = process.client();
  shm::HeartbeatThread* heartbeat = process.heartbeat();
  const std::string& job = process.job();
  const std::string& run_dir = process.run_dir();

  const bool cuda = config.string("learner.device") == "cuda";
  const bool device_feed = config.string("learner.feed") == "device";
  if (cuda && !torch::cuda::is_available())
    fail("config: learner.device = \"cuda\" but LibTorch sees no GPU: use \"cpu\" or run on a GPU machine");
  if (device_feed && !cuda) fail("config: learner.feed = \"device\" needs learner.device = \"cuda\": use feed \"host\"");
  torch::set_num_threads(static_cast<int>(config.integer("learner.threads")));

  // Rendezvous first: a rank that fails later (a bad dataset) then fails every rank through its peers.
  std::unique_ptr<ddp::Session> session;
  if (rank.distributed()) session = ddp::Session::start(rank, config, job, cuda ? rank.local_rank : -1);

  const std::string dataset = config.string("data.name");
  shm::DatasetCache cache = shm::DatasetCache::attach(dataset);
  Model model = Model::create(model_spec_for(config, cache.field("x").sample_shape));
  if (cuda) {
    // Every step has the same shapes (drop_last): cuDNN times its algorithms once and keeps the fastest.
    at::globalContext().setBenchmarkCuDNN(true);
    model.to(torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(rank.local_rank)));
  }
  FlatParams flat = model.nn_module() ? FlatParams::flatten(*model.nn_module()) : FlatParams::flatten(*model.jit_module());

  const feed::FeedOptions fopts = feed_options(config, cuda, rank);
  // The feed's epoch length decides the budget (equal on every rank: equal shards); built once at the
  // start epoch (after a resume, below).
  const std::uint64_t epoch_steps = feed::make_feed_sampler(feed::describe_feed(cache, fopts), fopts).length();
  std::int64_t total = config.integer("learner.steps");
  if (total == 0) total = static_cast<std::int64_t>(std::llround(config.real("learner.epochs") * static_cast<double>(epoch_steps)));
  if (total <= 0) fail("config: learner.epochs = {} gives no step: set learner.epochs or learner.steps", config.real("learner.epochs"));

  Trainer trainer(model, trainer_config(config, total));
  std::optional<ddp::GradSync> sync;
  if (session) {
    std::vector<at::Tensor> params;
    for (auto& [name, p] : model.named_parameters())
      if (p.requires_grad()) params.push_back(p);
    sync.emplace(flat, std::move(params), session->comm(), rank, session->sync_options());
    trainer.set_before_update([&] { sync->finish(trainer.step()); });
  }
  const std::uint64_t resumed_version = resume(trainer, run_dir, sync ? &*sync : nullptr, rank);

  // Each node's local rank 0 publishes into that node's slab; the others' weights are the same.
  std::optional<learner::ModelPublisher> publisher;
  if (rank.local_leader()) {
    learner::ModelPublisherOptions popts;
    popts.model = config.string("model.name");
    popts.bf16 = config.boolean("learner.publish_bf16");
    popts.device_slab = config.string("learner.device_slab") == "auto";
    popts.when.every_steps = static_cast<std::uint64_t>(config.integer("learner.publish_every_steps"));
    popts.when.every_ms = config.real("learner.publish_every_ms");
    popts.when.after_version = resumed_version;
    popts.replace_dead_writer = true;  // a slab of this job whose writer died is stale
    publisher.emplace(shm::job_segment_name(job, "weights"), flat, popts);
    // Under `tandem run` the slab outlives us: an actor restarted after we finished still evaluates the
    // final weights. The launcher removes the job's segments when the job ends.
    if (client) publisher->slab().persist();
  }
  auto latest_version = [&] { return publisher ? publisher->slab().latest_version() : 0; };

  const std::uint64_t start = static_cast<std::uint64_t>(trainer.step());
  AnyFeed feed;
  if (device_feed) feed.device.emplace(cache, fopts, start / epoch_steps);
  else feed.host.emplace(cache, fopts, start / epoch_steps);
  for (std::uint64_t i = 0; i < start % epoch_steps; ++i) feed.next();  // the resumed epoch's done steps

  // learner.cuda_graph: one graph per run; where it cannot be, one line says why and training is eager.
  std::unique_ptr<GraphStep> graph;
  if (config.boolean("learner.cuda_graph")) {
    if (auto why = GraphStep::unsupported(trainer)) {
      log::info("learner.cuda_graph = true, training eagerly: {}", *why);
    } else {
      GraphStep::Gather gather;
      if (feed.device) gather = [&](const torch::Tensor& rows, feed::Batch& out) { feed.device->gather(rows, out); };
      graph = std::make_unique<GraphStep>(trainer, feed::describe_feed(cache, fopts).batch_shape(fopts.batch_size),
                                          std::move(gather));
      log::info("learner.cuda_graph: the training step is captured after its warm-up and replayed");
    }
  }

  const std::int64_t report_every = config.integer("learner.report_every_steps");
  const std::int64_t ckpt_every = config.integer("learner.checkpoint_every_steps");
  const std::int64_t keep = config.integer("learner.keep_checkpoints");
  auto checkpoint = [&] {
    if (rank.rank != 0) return;  // the replicas are equal: one writer
    const std::string path = checkpoint_path(run_dir, trainer.step());
    // Every version handed out so far (committed or still in flight): a resume continues above it.
    const std::uint64_t version = publisher ? publisher->publisher().next_version() - 1 : resumed_version;
    trainer.save_checkpoint(path, {{"version", std::to_string(version)}, {"job", job}});
    prune_checkpoints(run_dir, keep);
    log::info("checkpoint {} (step {})", path, trainer.step());
  };
  log::info("{}; {} steps ({} per epoch) from step {}; feed {} on {}{}", model.describe(), total, epoch_steps, start,
            device_feed ? "device" : "host", cuda ? "cuda" : "cpu",
            publisher ? fmt::format("; publishing to /{}", shm::job_segment_name(job, "weights")) : "");
  if (client) client->set_state(shm::ProcessState::running);
  // Actors start from these weights; nobody reads the new slab yet, so this cannot be skipped.
  if (publisher) (void)publisher->publish(static_cast<std::uint64_t>(trainer.step()));

  std::int64_t samples = 0;
  CommWindow comm;
  while (trainer.step() < total) {
    // One rank alone stops at once; data-parallel ranks vote, and all stop after the same step.
    if (!sync && process.stop_requested()) break;
    if (sync) sync->vote_stop(process.stop_requested());
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
    if (sync) comm.add(sync->last_times());
    const auto step = static_cast<std::uint64_t>(trainer.step());
    if (publisher) (void)publisher->maybe_publish(step);  // a skip is counted in stats(); the next supersedes it
    if (heartbeat) heartbeat->tick();
    if (trainer.step() % report_every == 0 || trainer.step() == total) {
      const WindowMetrics w = trainer.take_window();
      if (client)
        client->report({.step = step, .version = latest_version(), .samples = static_cast<std::uint64_t>(samples),
                        .epoch = s.epoch, .samples_per_s = w.samples_per_s, .loss = w.loss, .accuracy = w.accuracy,
                        .seconds = w.seconds / std::max<double>(1, static_cast<double>(w.steps)), .lr = w.lr,
                        .allreduce_s = comm.mean(comm.allreduce_s), .exposed_comm_s = comm.mean(comm.exposed_s)});
      comm = {};
      if (trainer.step() % (report_every * 10) == 0)
        log::info("step {}/{} epoch {} loss {:.4f} acc {:.4f} lr {:.4g} {:.0f} samples/s", step, total, s.epoch, w.loss,
                  w.accuracy, w.lr, w.samples_per_s);
    }
    if (ckpt_every > 0 && trainer.step() % ckpt_every == 0) checkpoint();
    if (sync && sync->stop_agreed()) break;
  }
  const bool finished = trainer.step() >= total;
  if (client) client->set_state(shm::ProcessState::stopping);
  if (publisher) publisher->publish_final(static_cast<std::uint64_t>(trainer.step()), 30);
  if (client) {  // the last record carries the final version (the status line shows it)
    const WindowMetrics w = trainer.take_window();
    client->saw_version(latest_version());
    client->report({.step = static_cast<std::uint64_t>(trainer.step()), .version = latest_version(),
                    .samples = static_cast<std::uint64_t>(samples), .samples_per_s = w.samples_per_s,
                    .loss = w.steps > 0 ? w.loss : shm::kNaN, .accuracy = w.steps > 0 ? w.accuracy : shm::kNaN,
                    .lr = trainer.current_lr()});
  }
  checkpoint();
  log::info("{} at step {}{}", finished ? "finished" : "stopped", trainer.step(),
            publisher ? fmt::format("; final weights version {}", latest_version()) : "");
  return 0;
}

}  // namespace tandem
