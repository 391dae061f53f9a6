// fmnist_recipe: measures the Fashion-MNIST training recipe end to end on this machine's cores.
//
//   build/bench/fmnist_recipe [--epochs 3] [--batch 128] [--optimizer sgd] [--lr 0.05] [--threads 2] ...
//
// Preloads the IDX files (/usr/share/datasets/fashion-mnist) into a private dataset cache, trains
// with learner/Trainer on shuffled batches gathered from the cache, and evaluates the test split
// with actor/Evaluator in place after every `--eval-every` steps. Prints a table and one JSON line:
// the time and epoch at which test accuracy first reached the target, and the final accuracy.
// Test-only: the batches are gathered here with index_select, standing in for the learner's feeds.
#include <fmt/format.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/types.h>
#include <torch/utils.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstring>

#include "actor/evaluator.hpp"
#include "common/clock.hpp"
#include "common/error.hpp"
#include "common/torch/models.hpp"
#include "learner/trainer.hpp"
#include "shm/dataset_cache.hpp"
#include "datasets/preload.hpp"

using namespace tandem;

namespace {

struct CacheGuard {
  std::string name;
  ~CacheGuard() { shm::Segment::unlink(shm::dataset_segment_name(name)); }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Fashion-MNIST recipe: time to target test accuracy on this machine");
  std::string data_dir = "/usr/share/datasets/fashion-mnist", model_name = "cnn";
  TrainerConfig config;
  config.optimizer = {.kind = "sgd", .lr = 0.05, .momentum = 0.9, .nesterov = true, .weight_decay = 5e-4};
  config.schedule = {.kind = "cosine", .warmup_steps = 100};
  int epochs = 3, threads = 2;
  std::int64_t batch = 128, eval_every = 0;
  double target = 0.90;
  std::uint64_t seed = 0;
  std::string json_path;
  app.add_option("--data", data_dir, "directory of the four IDX .gz files");
  app.add_option("--model", model_name, "built-in model name or TorchScript file");
  app.add_option("--epochs", epochs, "epochs to train (the cosine schedule spans them)");
  app.add_option("--batch", batch, "batch size");
  app.add_option("--optimizer", config.optimizer.kind, "sgd | adam | adamw");
  app.add_option("--lr", config.optimizer.lr, "base learning rate");
  app.add_option("--weight-decay", config.optimizer.weight_decay, "weight decay");
  app.add_option("--schedule", config.schedule.kind, "constant | step | cosine");
  app.add_option("--warmup", config.schedule.warmup_steps, "linear warmup steps");
  app.add_option("--threads", threads, "LibTorch intra-op threads");
  app.add_option("--eval-every", eval_every, "steps between evaluations (default: half an epoch)");
  app.add_option("--target", target, "test accuracy to time");
  app.add_option("--seed", seed, "model and shuffling seed");
  app.add_option("--json", json_path, "also write the JSON line to this file");
  CLI11_PARSE(app, argc, argv);

  return run_main("fmnist_recipe", [&] {
    torch::set_num_threads(threads);
    const auto t_load = std::chrono::steady_clock::now();
    CacheGuard guard{fmt::format("fmnist-recipe-{}", ::getpid())};
    data::preload({.name = guard.name, .from = data_dir, .threads = static_cast<unsigned>(threads)});
    shm::UnlinkOnSignal unlink_on_signal(shm::dataset_segment_name(guard.name));  // Ctrl-C leaves nothing
    shm::DatasetCache cache = shm::DatasetCache::attach(guard.name);
    const shm::SplitSpec train_split = cache.split("train"), test_split = cache.split("test");
    const std::uint64_t n_train = train_split.end - train_split.begin, n_test = test_split.end - test_split.begin;
    const std::vector<double> mean{0.2860}, stdev{0.3530};  // Fashion-MNIST's pixel statistics
    Evaluator evaluator(cache, {.split = "test", .batch_size = 1000, .mean = mean, .std = stdev});
    Evaluator train_view(cache, {.split = "train", .mean = mean, .std = stdev});
    const torch::Tensor all_x = train_view.inputs_view(0, static_cast<std::int64_t>(n_train));  // in place
    const torch::Tensor all_y = train_view.labels_view(0, static_cast<std::int64_t>(n_train));
    fmt::print("loaded {} train + {} test samples into /dev/shm in {:.1f}s\n", n_train, n_test, seconds_since(t_load));

    const std::int64_t steps_per_epoch = static_cast<std::int64_t>(n_train) / batch;  // drop_last
    config.schedule.total_steps = steps_per_epoch * epochs;
    if (eval_every <= 0) eval_every = steps_per_epoch / 2;
    Model model = Model::create(
        {.name = model_name, .channels = 1, .height = 28, .width = 28, .num_classes = 10, .seed = seed});
    Trainer trainer(model, config);
    fmt::print("{}; {} {} lr {} {} warmup {}; batch {}; {} epochs = {} steps; {} threads\n", model.describe(),
               config.optimizer.kind, config.optimizer.nesterov ? "nesterov" : "", config.optimizer.lr,
               config.schedule.kind, config.schedule.warmup_steps, batch, epochs, config.schedule.total_steps, threads);
    fmt::print("{:>6} {:>6} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8}\n", "step", "epoch", "train_s", "train_cpu",
               "samples/s", "loss", "train_acc", "test_acc", "eval_s");

    auto gen = at::detail::createCPUGenerator(seed);
    double train_seconds = 0.0, train_cpu = 0.0, eval_seconds = 0.0, hit_seconds = -1.0, hit_cpu = -1.0,
           hit_epoch = -1.0;
    double window_train_s = 0.0;
    EvalResult last;
    const auto t_start = std::chrono::steady_clock::now();
    for (int epoch = 0; epoch < epochs; ++epoch) {
      torch::Tensor perm = torch::randperm(static_cast<std::int64_t>(n_train), gen, torch::kInt64);
      for (std::int64_t b = 0; b < steps_per_epoch; ++b) {
        const auto t0 = std::chrono::steady_clock::now();
        const double c0 = process_cpu_s();
        torch::Tensor idx = perm.slice(0, b * batch, (b + 1) * batch);
        trainer.train_step(train_view.normalise(all_x.index_select(0, idx)), all_y.index_select(0, idx));
        train_seconds += seconds_since(t0);
        train_cpu += process_cpu_s() - c0;
        if (trainer.step() % eval_every == 0 || trainer.step() == config.schedule.total_steps) {
          WindowMetrics w = trainer.take_window();  // its clock includes evaluations: use train_seconds
          last = evaluator.evaluate(model);
          eval_seconds += last.seconds;
          const double ep = static_cast<double>(trainer.step()) / static_cast<double>(steps_per_epoch);
          if (hit_seconds < 0 && last.accuracy >= target) {
            hit_seconds = train_seconds;
            hit_cpu = train_cpu;
            hit_epoch = ep;
          }
          fmt::print("{:>6} {:>6.2f} {:>9.1f} {:>9.1f} {:>9.0f} {:>9.4f} {:>9.4f} {:>9.4f} {:>8.1f}\n", trainer.step(),
                     ep, train_seconds, train_cpu,
                     static_cast<double>(batch * w.steps) / std::max(1e-9, train_seconds - window_train_s), w.loss,
                     w.accuracy, last.accuracy, last.seconds);
          std::fflush(stdout);
          window_train_s = train_seconds;
        }
      }
    }
    const double wall = seconds_since(t_start);
    fmt::print(
        "target {:.2f}: {} ; final test accuracy {:.4f} (loss {:.4f}) after {} epochs, {:.0f}s training "
        "({:.0f} CPU-s), {:.0f}s evaluating, {:.0f}s wall\n",
        target,
        hit_seconds < 0 ? std::string("not reached")
                        : fmt::format("reached at epoch {:.2f} after {:.0f}s of training ({:.0f} CPU-s)", hit_epoch,
                                      hit_seconds, hit_cpu),
        last.accuracy, last.loss, epochs, train_seconds, train_cpu, eval_seconds, wall);
    const std::string json = fmt::format(
        R"({{"bench":"fmnist_recipe","model":"{}","optimizer":"{}","lr":{},"schedule":"{}","warmup_steps":{},"batch":{},"epochs":{},"threads":{},"target":{},"target_epoch":{},"target_train_s":{:.1f},"target_train_cpu_s":{:.1f},"final_accuracy":{:.4f},"final_loss":{:.4f},"train_s":{:.1f},"train_cpu_s":{:.1f},"eval_s":{:.1f},"samples_per_s":{:.0f}}})",
        model_name, config.optimizer.kind, config.optimizer.lr, config.schedule.kind, config.schedule.warmup_steps,
        batch, epochs, threads, target, hit_epoch, hit_seconds, hit_cpu, last.accuracy, last.loss, train_seconds,
        train_cpu, eval_seconds, static_cast<double>(config.schedule.total_steps * batch) / train_seconds);
    fmt::print("{}\n", json);
    if (!json_path.empty()) {
      std::FILE* f = std::fopen(json_path.c_str(), "w");
      if (!f) fail("cannot write '{}'", json_path);
      fmt::print(f, "{}\n", json);
      std::fclose(f);
    }
    return 0;
  });
}
