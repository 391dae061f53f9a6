#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>
#include <torch/types.h>
#include <torch/utils.h>
// After LibTorch: Debian's c10 pulls in glog, whose CHECK must not replace doctest's.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/error.hpp"
#include "common/torch/flat_params.hpp"
#include "common/torch/models.hpp"
#include "common/torch/safetensors.hpp"
#include "learner/optim.hpp"
#include "learner/trainer.hpp"
#include "tests/harness.hpp"

using namespace tandem;
namespace fs = std::filesystem;

namespace {
using tandem::test::error_of;
using tandem::test::TempDir;

// Four classes of 28x28 images: class k lights a 10x10 patch in quadrant k, under noise.
struct Synthetic {
  torch::Tensor x, y;
  explicit Synthetic(std::int64_t n, std::uint64_t seed) {
    auto gen = at::detail::createCPUGenerator(seed);
    y = torch::randint(4, {n}, gen, torch::kInt64);
    x = torch::randn({n, 1, 28, 28}, gen) * 0.5;
    auto acc = y.accessor<std::int64_t, 1>();
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t r = (acc[i] / 2) * 14 + 2, c = (acc[i] % 2) * 14 + 2;
      x[i].slice(1, r, r + 10).slice(2, c, c + 10) += 1.5;
    }
  }
  std::pair<torch::Tensor, torch::Tensor> batch(std::int64_t i, std::int64_t size) const {
    const std::int64_t b = (i * size) % x.size(0);
    return {x.slice(0, b, b + size), y.slice(0, b, b + size)};
  }
};

TrainerConfig sgd_config() {
  TrainerConfig c;
  c.optimizer = {.kind = "sgd", .lr = 0.05, .momentum = 0.9, .nesterov = true, .weight_decay = 5e-4};
  c.schedule = {.kind = "cosine", .warmup_steps = 5, .total_steps = 100};
  return c;
}

bool same_tensors(const NamedTensors& a, const NamedTensors& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].first != b[i].first || !torch::equal(a[i].second, b[i].second)) return false;
  return true;
}

// Applies our Optimizer and torch::optim's to copies of the same parameters and gradients.
template <class TorchOptim, class Options>
void compare_with_torch(const OptimizerConfig& ours, Options theirs) {
  torch::manual_seed(3);
  torch::Tensor w0 = torch::randn({5, 4});
  torch::Tensor a = w0.clone().requires_grad_(true), b = w0.clone().requires_grad_(true);
  Optimizer mine({{"w", a}}, ours);
  TorchOptim ref(std::vector<torch::Tensor>{b}, theirs);
  for (int step = 0; step < 6; ++step) {
    torch::Tensor g = torch::randn({5, 4});
    a.mutable_grad() = g.clone();
    b.mutable_grad() = g.clone();
    mine.step(ours.lr);
    ref.step();
  }
  CHECK(torch::allclose(a, b, 1e-5, 1e-6));
  CHECK(mine.steps_taken() == 6);
}

}  // namespace

TEST_CASE("optim: SGD, Adam and AdamW take PyTorch's steps") {
  compare_with_torch<torch::optim::SGD>(
      {.kind = "sgd", .lr = 0.1, .momentum = 0.9, .nesterov = true, .weight_decay = 1e-2},
      torch::optim::SGDOptions(0.1).momentum(0.9).nesterov(true).weight_decay(1e-2));
  compare_with_torch<torch::optim::SGD>(
      {.kind = "sgd", .lr = 0.1, .momentum = 0.5, .nesterov = false, .weight_decay = 0},
      torch::optim::SGDOptions(0.1).momentum(0.5));
  compare_with_torch<torch::optim::SGD>(
      {.kind = "sgd", .lr = 0.1, .momentum = 0.0, .nesterov = false, .weight_decay = 0}, torch::optim::SGDOptions(0.1));
  compare_with_torch<torch::optim::Adam>({.kind = "adam", .lr = 1e-2, .weight_decay = 1e-2},
                                         torch::optim::AdamOptions(1e-2).weight_decay(1e-2));
  compare_with_torch<torch::optim::AdamW>({.kind = "adamw", .lr = 1e-2, .weight_decay = 1e-1},
                                          torch::optim::AdamWOptions(1e-2).weight_decay(1e-1));
}

TEST_CASE("optim: schedules warm up linearly, then hold, step down or follow a cosine") {
  ScheduleConfig s{.kind = "cosine", .warmup_steps = 10, .total_steps = 110, .min_lr = 0.001};
  CHECK(scheduled_lr(s, 0.1, 0) == doctest::Approx(0.01));
  CHECK(scheduled_lr(s, 0.1, 9) == doctest::Approx(0.1));
  CHECK(scheduled_lr(s, 0.1, 10) == doctest::Approx(0.1));
  CHECK(scheduled_lr(s, 0.1, 60) == doctest::Approx(0.001 + 0.099 * 0.5));
  CHECK(scheduled_lr(s, 0.1, 110) == doctest::Approx(0.001));
  CHECK(scheduled_lr(s, 0.1, 500) == doctest::Approx(0.001));
  ScheduleConfig st{.kind = "step", .warmup_steps = 0, .step_size = 30, .gamma = 0.5};
  CHECK(scheduled_lr(st, 0.2, 29) == doctest::Approx(0.2));
  CHECK(scheduled_lr(st, 0.2, 30) == doctest::Approx(0.1));
  CHECK(scheduled_lr(st, 0.2, 95) == doctest::Approx(0.025));
  CHECK(scheduled_lr(ScheduleConfig{.kind = "constant"}, 0.3, 1000) == doctest::Approx(0.3));

  CHECK(error_of([] { validate(ScheduleConfig{.kind = "cosine", .total_steps = 0}); }).find("needs total_steps") !=
        std::string::npos);
  CHECK(error_of([] { validate(ScheduleConfig{.kind = "linear"}); }).find("'linear' is not one of") !=
        std::string::npos);
  CHECK(error_of([] {
          validate(OptimizerConfig{.kind = "rmsprop"});
        }).find("'rmsprop' is not one of sgd, adam, adamw") != std::string::npos);
  CHECK(error_of([] { validate(OptimizerConfig{.lr = -1}); }).find("must be positive") != std::string::npos);
}

TEST_CASE("trainer: the cnn learns a separable dataset (loss falls, accuracy rises)") {
  torch::set_num_threads(1);
  Synthetic data(512, 1);
  Model model = Model::create({.name = "cnn", .num_classes = 4, .seed = 1});
  Trainer trainer(model, sgd_config());
  StepMetrics first = trainer.train_step(data.batch(0, 64).first, data.batch(0, 64).second);
  const double first_loss = first.loss.item<double>();
  CHECK(first.step == 1);
  CHECK(first.samples == 64);
  CHECK(first.lr == doctest::Approx(0.01));  // warmup: 1/5 of 0.05
  trainer.take_window();
  for (int i = 1; i < 40; ++i) {
    auto [x, y] = data.batch(i, 64);
    trainer.train_step(x, y);
  }
  WindowMetrics w = trainer.take_window();
  CHECK(w.step == 40);
  CHECK(w.steps == 39);
  CHECK(w.samples == 39 * 64);
  CHECK(w.samples_per_s > 0);
  // The last steps are on batches already seen; measure on fresh samples instead.
  Synthetic fresh(256, 2);
  model.eval();
  torch::NoGradGuard no_grad;
  torch::Tensor logits = model.forward(fresh.x);
  const double accuracy = logits.argmax(1).eq(fresh.y).to(torch::kFloat64).mean().item<double>();
  const double loss = torch::nn::functional::cross_entropy(logits, fresh.y).item<double>();
  CHECK(first_loss > 1.2);  // about ln 4 at the start
  CHECK(loss < 0.2);
  CHECK(accuracy > 0.95);
}

TEST_CASE(
    "trainer: a window without steps measured nothing, so the record taken after the last report shows no "
    "throughput of 0") {
  Synthetic data(64, 3);
  Model model = Model::create({.name = "cnn", .num_classes = 4, .seed = 1});
  Trainer trainer(model, sgd_config());
  trainer.train_step(data.x, data.y);
  CHECK(trainer.take_window().samples_per_s > 0);             // the last step's report
  std::this_thread::sleep_for(std::chrono::milliseconds(5));  // the learner stops: the window has time, no steps
  const WindowMetrics after = trainer.take_window();
  CHECK(after.steps == 0);
  CHECK(after.seconds > 0);
  CHECK(std::isnan(after.samples_per_s));
  CHECK(std::isnan(after.loss));
  CHECK(std::isnan(after.accuracy));
}

TEST_CASE("trainer: a checkpoint restores weights, optimizer state and step; training then continues bit-identically") {
  torch::set_num_threads(1);
  TempDir dir;
  Synthetic data(256, 3);
  for (const char* optimizer : {"sgd", "adamw"}) {
    CAPTURE(optimizer);
    TrainerConfig config = sgd_config();
    config.optimizer.kind = optimizer;
    if (std::string(optimizer) == "adamw") config.optimizer.lr = 1e-3;

    Model a = Model::create({.name = "cnn", .num_classes = 4, .seed = 5});
    Trainer ta(a, config);
    for (int i = 0; i < 7; ++i) ta.train_step(data.batch(i, 32).first, data.batch(i, 32).second);
    const std::string path = checkpoint_path(dir.path().string(), ta.step());
    ta.save_checkpoint(path, {{"version", "3"}});

    Model b = Model::create({.name = "cnn", .num_classes = 4, .seed = 99});  // other weights until restored
    Trainer tb(b, config);
    auto meta = tb.load_checkpoint(path);
    CHECK(meta["version"] == "3");
    CHECK(meta["step"] == "7");
    CHECK(tb.step() == 7);
    CHECK(tb.current_lr() == ta.current_lr());
    CHECK(same_tensors(a.named_parameters(), b.named_parameters()));
    CHECK(same_tensors(a.named_buffers(), b.named_buffers()));

    for (int i = 7; i < 12; ++i) {
      ta.train_step(data.batch(i, 32).first, data.batch(i, 32).second);
      tb.train_step(data.batch(i, 32).first, data.batch(i, 32).second);
    }
    CHECK(same_tensors(a.named_parameters(), b.named_parameters()));  // bit-identical, not just close
    CHECK(same_tensors(a.named_buffers(), b.named_buffers()));
    CHECK(tb.step() == 12);
  }
}

TEST_CASE("trainer: a checkpoint of another model, optimizer or a corrupt file is a one-line error naming it") {
  TempDir dir;
  Synthetic data(64, 4);
  Model cnn = Model::create({.name = "cnn", .num_classes = 4});
  Trainer t(cnn, sgd_config());
  t.train_step(data.x, data.y);
  const std::string path = checkpoint_path(dir.path().string(), 1);
  t.save_checkpoint(path);

  Model mlp = Model::create({.name = "mlp", .num_classes = 4});
  Trainer tm(mlp, sgd_config());
  std::string e = error_of([&] { tm.load_checkpoint(path); });
  CHECK(e.find(path + " holds 'model.fc1.weight' as Float [128x1568], this model has Float [256x784]") !=
        std::string::npos);

  const std::string empty = dir.path().string() + "/empty.safetensors";
  safetensors::save_file(
      empty, {}, {{"format", "tandem-checkpoint-1"}, {"optimizer", "sgd"}, {"step", "1"}, {"optimizer_steps", "1"}});
  CHECK(error_of([&] { tm.load_checkpoint(empty); }).find(empty + " has no tensor 'model.fc1.weight'") !=
        std::string::npos);

  Model wide = Model::create({.name = "cnn", .num_classes = 5});
  Trainer tw(wide, sgd_config());
  auto before = wide.named_parameters()[0].second.clone();
  e = error_of([&] { tw.load_checkpoint(path); });
  CHECK(e.find("holds 'model.fc2.weight' as Float [4x128], this model has Float [5x128]") != std::string::npos);
  CHECK(torch::equal(before, wide.named_parameters()[0].second));  // nothing was copied
  CHECK(tw.step() == 0);

  TrainerConfig adam = sgd_config();
  adam.optimizer.kind = "adam";
  Model c2 = Model::create({.name = "cnn", .num_classes = 4});
  Trainer ta(c2, adam);
  CHECK(error_of([&] { ta.load_checkpoint(path); }).find("holds sgd optimizer state, this run uses adam") !=
        std::string::npos);

  // Truncated: cut the file in half.
  const std::string cut = dir.path().string() + "/cut.safetensors";
  fs::copy_file(path, cut);
  fs::resize_file(cut, fs::file_size(cut) / 2);
  Model c3 = Model::create({.name = "cnn", .num_classes = 4});
  Trainer t3(c3, sgd_config());
  e = error_of([&] { t3.load_checkpoint(cut); });
  CHECK(e.find(cut + " is not a valid safetensors file") != std::string::npos);
  CHECK(e.find('\n') == std::string::npos);
}

TEST_CASE("trainer: latest_checkpoint picks the highest step and ignores temporaries") {
  TempDir dir;
  const std::string d = dir.path().string();
  CHECK_FALSE(latest_checkpoint(d).has_value());
  CHECK_FALSE(latest_checkpoint(d + "/missing").has_value());
  for (std::int64_t step : {100, 2000, 30}) std::ofstream(checkpoint_path(d, step)) << "x";
  std::ofstream(checkpoint_path(d, 9000) + ".tmp.123") << "x";
  std::ofstream(d + "/ckpt-abc.safetensors") << "x";
  CHECK(latest_checkpoint(d).value() == checkpoint_path(d, 2000));
  CHECK(checkpoint_path(d, 2000) == d + "/ckpt-000000002000.safetensors");
}

TEST_CASE("trainer: parameters re-homed into one flat buffer stay there through training and restore") {
  torch::set_num_threads(1);
  TempDir dir;
  Synthetic data(128, 6);
  Model model = Model::create({.name = "cnn", .num_classes = 4, .seed = 2});
  // What flat parameters do: every parameter becomes a view of one buffer (and so does its gradient).
  std::int64_t total = 0;
  for (auto& [name, p] : model.named_parameters()) total += p.numel();
  torch::Tensor flat = torch::empty({total}), flat_grad = torch::zeros({total});
  {
    torch::NoGradGuard no_grad;
    std::int64_t at = 0;
    for (auto& [name, p] : model.named_parameters()) {
      const std::int64_t n = p.numel();
      flat.slice(0, at, at + n).copy_(p.flatten());
      p.set_(flat.storage(), at, p.sizes(), p.strides());
      p.mutable_grad() = flat_grad.slice(0, at, at + n).view(p.sizes());
      at += n;
    }
  }
  const torch::Tensor flat_before = flat.clone();
  Trainer trainer(model, sgd_config());  // built after re-homing
  CHECK(trainer.optimizer().flat());
  Model plain = Model::create({.name = "cnn", .num_classes = 4, .seed = 2});
  Trainer reference(plain, sgd_config());
  CHECK_FALSE(reference.optimizer().flat());
  for (int i = 0; i < 3; ++i) {
    trainer.train_step(data.batch(i, 32).first, data.batch(i, 32).second);
    reference.train_step(data.batch(i, 32).first, data.batch(i, 32).second);
  }
  CHECK_FALSE(torch::equal(flat, flat_before));                             // the updates landed in the flat buffer
  CHECK(same_tensors(model.named_parameters(), plain.named_parameters()));  // fused == tensor by tensor, bitwise
  for (auto& [name, p] : model.named_parameters()) {
    CHECK(p.data_ptr<float>() >= flat.data_ptr<float>());
    CHECK(p.data_ptr<float>() < flat.data_ptr<float>() + total);
    CHECK(p.grad().data_ptr<float>() >= flat_grad.data_ptr<float>());  // zero_grad kept the views
    CHECK(p.grad().data_ptr<float>() < flat_grad.data_ptr<float>() + total);
  }
  const std::string path = checkpoint_path(dir.path().string(), trainer.step());
  trainer.save_checkpoint(path);
  const torch::Tensor saved = flat.clone();
  trainer.train_step(data.batch(5, 32).first, data.batch(5, 32).second);
  trainer.load_checkpoint(path);
  CHECK(torch::equal(flat, saved));  // restored in place, into the same buffer
}

TEST_CASE("optim: a fused update over parameters that tile one buffer equals tensor-by-tensor updates") {
  for (const char* kind : {"sgd", "adam", "adamw"}) {
    CAPTURE(kind);
    torch::manual_seed(8);
    torch::Tensor flat = torch::randn({12}), flat_grad = torch::zeros({12});
    std::vector<std::pair<std::string, torch::Tensor>> tiled, loose;
    std::int64_t at = 0;
    for (std::int64_t n : {5, 4, 3}) {
      torch::Tensor p = flat.narrow(0, at, n).requires_grad_(true);
      p.mutable_grad() = flat_grad.narrow(0, at, n);
      tiled.emplace_back(fmt::format("p{}", at), p);
      loose.emplace_back(fmt::format("p{}", at), p.detach().clone().requires_grad_(true));
      at += n;
    }
    const OptimizerConfig config{.kind = kind, .lr = 0.01, .weight_decay = 0.1};
    Optimizer fused(tiled, config), each(loose, config);
    CHECK(fused.flat());
    CHECK_FALSE(each.flat());
    for (int step = 0; step < 4; ++step) {
      torch::Tensor g = torch::randn({12});
      flat_grad.copy_(g);
      for (std::size_t i = 0, off = 0; i < loose.size(); off += loose[i].second.numel(), ++i)
        loose[i].second.mutable_grad() = g.narrow(0, off, loose[i].second.numel()).clone();
      fused.step(0.01);
      each.step(0.01);
    }
    for (std::size_t i = 0; i < loose.size(); ++i) CHECK(torch::equal(tiled[i].second, loose[i].second));
    auto a = fused.state_tensors(), b = each.state_tensors();
    REQUIRE(a.size() == b.size());
    for (std::size_t i = 0; i < a.size(); ++i) CHECK(torch::equal(a[i].second, b[i].second));
  }
}

TEST_CASE("trainer: a model flattened by FlatParams trains in its flat buffer and restores into it") {
  torch::set_num_threads(1);
  TempDir dir;
  Synthetic data(128, 7);
  Model model = Model::create({.name = "cnn", .num_classes = 4, .seed = 3});
  FlatParams flat = FlatParams::flatten(model);
  const torch::Tensor& buffer = flat.buffer();
  const auto* lo = static_cast<const std::uint8_t*>(buffer.data_ptr());
  const auto* hi = lo + buffer.numel();
  Trainer trainer(model, sgd_config());
  const torch::Tensor before = buffer.clone();
  for (int i = 0; i < 3; ++i) trainer.train_step(data.batch(i, 32).first, data.batch(i, 32).second);
  CHECK_FALSE(torch::equal(buffer, before));  // the optimizer's updates and BatchNorm's statistics landed there
  for (auto& [name, t] : model.named_parameters()) {
    const auto* p = static_cast<const std::uint8_t*>(t.data_ptr());
    CHECK((p >= lo && p < hi));
  }
  const std::string path = checkpoint_path(dir.path().string(), trainer.step());
  trainer.save_checkpoint(path);
  const torch::Tensor saved = buffer.clone();
  trainer.train_step(data.batch(4, 32).first, data.batch(4, 32).second);
  CHECK_FALSE(torch::equal(buffer, saved));
  trainer.load_checkpoint(path);
  CHECK(torch::equal(buffer, saved));  // weights and buffers restored in place
}
