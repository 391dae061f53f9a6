// tandem-learner [config.toml] [--set key=value ...]: trains a model from a dataset cache and
// publishes its weights into /tandem.<job>.weights. Started by `tandem run` (config from
// $TANDEM_CONFIG, job/role/index from TANDEM_*), or by hand (job "local", run dir ".").
// Checkpoints go to the run directory every learner.checkpoint_every_steps, at a stop request
// (launcher stop flag, SIGINT, SIGTERM) and at the end; a start resumes from the newest one.
// Exit 0: the step budget was reached, or a stop was requested and the checkpoint written.
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstdio>
#include <cmath>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "common/job_keys.hpp"
#include "common/log.hpp"
#include "common/program.hpp"
#include "common/torch/flat_params.hpp"
#include "common/torch/model_config.hpp"
#include "learner/feed/device_feed.hpp"
#include "learner/feed/host_feed.hpp"
#include "learner/model_publisher.hpp"
#include "learner/rl/rl_learner.hpp"
#include "learner/trainer.hpp"
#include "shm/dataset_cache.hpp"
#include "shm/job_process.hpp"
#include "shm/segment.hpp"

namespace {

using namespace tandem;

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

feed::FeedOptions feed_options(const Config& c, bool cuda) {
  feed::FeedOptions o;
  o.split = c.string("data.train_split");
  o.batch_size = static_cast<std::uint64_t>(c.integer("learner.batch_size"));
  o.seed = static_cast<std::uint64_t>(c.integer("learner.seed"));
  o.drop_last = true;
  for (double v : parse_number_list("data.mean", c.string("data.mean"))) o.mean.push_back(static_cast<float>(v));
  for (double v : parse_number_list("data.std", c.string("data.std"))) o.stddev.push_back(static_cast<float>(v));
  o.mean.erase(o.mean.begin());      // FeedOptions starts with {0} and {1}
  o.stddev.erase(o.stddev.begin());
  o.placement = cuda ? feed::Placement::cuda : feed::Placement::cpu;
  o.workers = static_cast<unsigned>(c.integer("learner.feed_workers"));
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

// Keeps the newest `keep` checkpoints in `dir`.
void prune_checkpoints(const std::string& dir, std::int64_t keep) {
  std::vector<std::filesystem::path> all;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const auto name = e.path().filename().string();
    if (name.starts_with("ckpt-") && name.ends_with(".safetensors")) all.push_back(e.path());
  }
  std::sort(all.begin(), all.end());
  for (std::size_t i = 0; i + static_cast<std::size_t>(keep) < all.size(); ++i) std::filesystem::remove(all[i]);
}

int run(const ProgramArgs& args) {
  const Config config = load_program_config(args.file, args.overrides);
  catch_stop_signals();

  shm::JobProcess process("learner");
  if (config.string("learner.algo") != "supervised") return run_rl_learner(config, process);
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

  const std::string dataset = config.string("data.name");
  shm::DatasetCache cache = shm::DatasetCache::attach(dataset);
  Model model = Model::create(model_spec_for(config, cache.field("x").sample_shape));
  if (cuda) model.to(torch::Device(torch::kCUDA, 0));
  FlatParams flat = model.nn_module() ? FlatParams::flatten(*model.nn_module()) : FlatParams::flatten(*model.jit_module());

  const feed::FeedOptions fopts = feed_options(config, cuda);
  // The feed's epoch length decides the budget; built once at the start epoch (after a resume, below).
  const std::uint64_t epoch_steps = feed::make_feed_sampler(feed::describe_feed(cache, fopts), fopts).length();
  std::int64_t total = config.integer("learner.steps");
  if (total == 0) total = static_cast<std::int64_t>(std::llround(config.real("learner.epochs") * static_cast<double>(epoch_steps)));
  if (total <= 0) fail("config: learner.epochs = {} gives no step: set learner.epochs or learner.steps", config.real("learner.epochs"));

  Trainer trainer(model, trainer_config(config, total));
  std::uint64_t resumed_version = 0;  // the checkpoint's published version: ours continue after it
  if (auto latest = latest_checkpoint(run_dir)) {
    const auto meta = trainer.load_checkpoint(*latest);
    if (auto v = meta.find("version"); v != meta.end()) resumed_version = parse_version(*latest, v->second);
    log::info("resumed from {} at step {} (weights version {})", *latest, trainer.step(), resumed_version);
  }

  learner::ModelPublisherOptions popts;
  popts.model = config.string("model.name");
  popts.bf16 = config.boolean("learner.publish_bf16");
  popts.when.every_steps = static_cast<std::uint64_t>(config.integer("learner.publish_every_steps"));
  popts.when.every_ms = config.real("learner.publish_every_ms");
  popts.when.after_version = resumed_version;
  popts.force = true;  // a slab of this job whose writer is dead is stale
  learner::ModelPublisher publisher(shm::job_segment_name(job, "weights"), flat, popts);
  // Under `tandem run` the slab outlives us: an actor restarted after we finished still evaluates the
  // final weights. The launcher removes the job's segments when the job ends.
  if (client) publisher.slab().persist();

  const std::uint64_t start = static_cast<std::uint64_t>(trainer.step());
  AnyFeed feed;
  if (device_feed) feed.device.emplace(cache, fopts, start / epoch_steps);
  else feed.host.emplace(cache, fopts, start / epoch_steps);
  for (std::uint64_t i = 0; i < start % epoch_steps; ++i) feed.next();  // the resumed epoch's done steps

  const std::int64_t report_every = config.integer("learner.report_every_steps");
  const std::int64_t ckpt_every = config.integer("learner.checkpoint_every_steps");
  const std::int64_t keep = config.integer("learner.keep_checkpoints");
  auto checkpoint = [&] {
    const std::string path = checkpoint_path(run_dir, trainer.step());
    // Every version handed out so far (committed or still in flight): a resume continues above it.
    const std::uint64_t version = publisher.publisher().next_version() - 1;
    trainer.save_checkpoint(path, {{"version", std::to_string(version)}, {"job", job}});
    prune_checkpoints(run_dir, keep);
    log::info("checkpoint {} (step {})", path, trainer.step());
  };
  log::info("{}; {} steps ({} per epoch) from step {}; feed {} on {}; publishing to /{}", model.describe(), total,
            epoch_steps, start, device_feed ? "device" : "host", cuda ? "cuda" : "cpu",
            shm::job_segment_name(job, "weights"));
  if (client) client->set_state(shm::ProcessState::running);
  // Actors start from these weights; nobody reads the new slab yet, so this cannot be skipped.
  (void)publisher.publish(static_cast<std::uint64_t>(trainer.step()));

  auto stop_requested = [&] { return process.stop_requested(); };
  std::int64_t samples = 0;
  while (trainer.step() < total && !stop_requested()) {
    feed::Step s = feed.next();
    for (const auto& b : s.batches) {
      trainer.train_step(b.x, b.y);
      samples += b.y.size(0);
    }
    const auto step = static_cast<std::uint64_t>(trainer.step());
    (void)publisher.maybe_publish(step);  // a skip is counted in stats(); the next publish supersedes it
    if (heartbeat) heartbeat->tick();
    if (trainer.step() % report_every == 0 || trainer.step() == total) {
      const WindowMetrics w = trainer.take_window();
      if (client)
        client->report({.step = step, .version = publisher.slab().latest_version(),
                        .samples = static_cast<std::uint64_t>(samples), .epoch = s.epoch,
                        .samples_per_s = w.samples_per_s, .loss = w.loss, .accuracy = w.accuracy,
                        .seconds = w.seconds / std::max<double>(1, static_cast<double>(w.steps)), .lr = w.lr});
      if (trainer.step() % (report_every * 10) == 0)
        log::info("step {}/{} epoch {} loss {:.4f} acc {:.4f} lr {:.4g} {:.0f} samples/s", step, total, s.epoch, w.loss,
                  w.accuracy, w.lr, w.samples_per_s);
    }
    if (ckpt_every > 0 && trainer.step() % ckpt_every == 0) checkpoint();
  }
  const bool finished = trainer.step() >= total;
  if (client) client->set_state(shm::ProcessState::stopping);
  publisher.publish_final(static_cast<std::uint64_t>(trainer.step()), 30);
  if (client) {  // the last record carries the final version (the status line shows it)
    const WindowMetrics w = trainer.take_window();
    client->saw_version(publisher.slab().latest_version());
    client->report({.step = static_cast<std::uint64_t>(trainer.step()), .version = publisher.slab().latest_version(),
                    .samples = static_cast<std::uint64_t>(samples), .samples_per_s = w.samples_per_s,
                    .loss = w.steps > 0 ? w.loss : shm::kNaN, .accuracy = w.steps > 0 ? w.accuracy : shm::kNaN,
                    .lr = trainer.current_lr()});
  }
  checkpoint();
  log::info("{} at step {}; final weights version {}", finished ? "finished" : "stopped", trainer.step(),
            publisher.slab().latest_version());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tandem-learner: the learner program `tandem run` starts", "tandem-learner"};
  tandem::ProgramArgs args;
  tandem::add_program_args(app, args);
  CLI11_PARSE(app, argc, argv);
  return tandem::run_main("tandem-learner", [&] { return run(args); });
}
