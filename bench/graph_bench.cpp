#include <ATen/Context.h>
#include <torch/torch.h>

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "actor/graph_eval.hpp"
#include "common/error.hpp"
#include "common/torch/builtin_nets/bn_act.hpp"
#include "common/torch/flat_params.hpp"
#include "common/torch/models.hpp"
#include "learner/captured_train_step.hpp"
#include "learner/trainer.hpp"
#include "bench/bench_json.hpp"
#include "bench/graph_options.hpp"
#include "bench/kernel_profile.hpp"
#include "bench/peer_process.hpp"

#ifdef TANDEM_TORCH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace tandem::bench {

#ifndef TANDEM_TORCH_CUDA

int bench_graph(const GraphBenchOptions&) {
  fail("bench graph needs a CUDA GPU and this build's LibTorch has no CUDA: run it on the GPU machine");
}

#else

namespace {

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

// Median milliseconds of `steps` calls of fn after `warmup`, each between two CUDA events on the
// current stream: the GPU timeline, so a step the CPU cannot launch fast enough shows its gaps.
template <class Fn>
double median_ms(Fn&& fn, int warmup, int steps) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<at::cuda::CUDAEvent> starts, ends;
  starts.reserve(static_cast<std::size_t>(steps));
  ends.reserve(static_cast<std::size_t>(steps));
  for (int i = 0; i < steps; ++i) {
    starts.emplace_back(cudaEventDefault);
    ends.emplace_back(cudaEventDefault);
  }
  const auto stream = c10::cuda::getCurrentCUDAStream();
  for (int i = 0; i < steps; ++i) {
    starts[static_cast<std::size_t>(i)].record(stream);
    fn();
    ends[static_cast<std::size_t>(i)].record(stream);
  }
  std::vector<double> ms;
  for (int i = 0; i < steps; ++i) {
    ends[static_cast<std::size_t>(i)].synchronize();
    ms.push_back(starts[static_cast<std::size_t>(i)].elapsed_time(ends[static_cast<std::size_t>(i)]));
  }
  std::nth_element(ms.begin(), ms.begin() + static_cast<std::ptrdiff_t>(ms.size() / 2), ms.end());
  return ms[ms.size() / 2];
}

struct Result {
  std::string model;
  std::int64_t batch;
  std::string precision;  // fp32 | bf16
  std::string mode;       // eager | graph
  double train_ms, eval_ms;
};

torch::ScalarType dtype_of(const std::string& precision) {
  if (precision == "fp32") return torch::kFloat32;
  if (precision == "bf16") return torch::kBFloat16;
  fail("bench graph --precisions: '{}' is not fp32 or bf16", precision);
}

// One model at one batch, precision and mode: a fresh model (same seed), a CIFAR-shaped pool on the
// GPU, a random batch gathered from it each step, as DeviceFeed does.
Result measure(const std::string& name, std::int64_t batch, const std::string& precision, bool graph,
               const GraphBenchOptions& o, const torch::Device& device) {
  Model model = Model::create({.name = name, .channels = 3, .height = 32, .width = 32, .num_classes = 10, .seed = 1});
  model.to(device);
  model.set_precision(dtype_of(precision));
  FlatParams flat = FlatParams::flatten(model);
  TrainerConfig config;
  config.optimizer = {.kind = "sgd", .lr = 0.05, .momentum = 0.9, .nesterov = true, .weight_decay = 5e-4};
  config.schedule = {.kind = "cosine", .warmup_steps = 10, .total_steps = 1000000};
  Trainer trainer(model, config);
  torch::manual_seed(0);
  const torch::Tensor pool_x = torch::randn({batch * 8, 3, 32, 32}, device);
  const torch::Tensor pool_y = torch::randint(10, {batch * 8},
                                              torch::TensorOptions().dtype(torch::kLong).device(device));
  auto rows = [&] {
    return torch::randint(batch * 8, {batch}, torch::TensorOptions().dtype(torch::kLong).device(device));
  };
  auto gather = [&](const torch::Tensor& r, feed::Batch& out) {
    torch::index_select_out(out.x, pool_x, 0, r);
    torch::index_select_out(out.y, pool_y, 0, r);
  };

  Result res{name, batch, precision, graph ? "graph" : "eager", 0, 0};
  if (graph) {
    CapturedTrainStep step(trainer, {batch, 3, 32, 32}, gather);
    res.train_ms = median_ms(
        [&] {
      step.rows().copy_(rows());
      step.step();
        },
        o.warmup, o.steps);
    if (!step.captured())
      fail("bench graph: the {} training step at batch {} could not be captured (see above)", name, batch);
    if (o.profile) {
      fmt::print("{} {} {} graphed training step:\n", name, batch, precision);
      const KernelProfile p = profile_kernels(
          [&] {
        step.rows().copy_(rows());
        step.step();
          },
          10);
      p.print(stdout, o.profile_rows);
      if (o.profile_sequence) p.print_sequence(stdout);
    }
  } else {
    feed::Batch b{torch::empty({batch, 3, 32, 32}, pool_x.options()), torch::empty({batch}, pool_y.options())};
    res.train_ms = median_ms(
        [&] {
      gather(rows(), b);
      trainer.train_step(b.x, b.y);
        },
        o.warmup, o.steps);
  }

  model.eval();
  torch::NoGradGuard no_grad;
  auto eval_batch = [](Model& m, const torch::Tensor& x, const torch::Tensor& y) {
    return torch::nn::functional::cross_entropy(
        m.forward(x), y, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
  };
  if (graph) {
    torch::Tensor x = torch::empty({batch, 3, 32, 32}, pool_x.options()), y = torch::empty({batch}, pool_y.options());
    GraphEval g(model, x, y, [](const torch::Tensor& raw) { return raw.mul(1.0); });
    auto eval_step = [&] {
      const torch::Tensor r = rows();
      torch::index_select_out(x, pool_x, 0, r);
      torch::index_select_out(y, pool_y, 0, r);
      (void)g.replay();
    };
    res.eval_ms = median_ms(eval_step, o.warmup, o.steps);
    if (o.profile) {
      fmt::print("{} {} {} graphed evaluation:\n", name, batch, precision);
      const KernelProfile p = profile_kernels(eval_step, 10);
      p.print(stdout, o.profile_rows);
      if (o.profile_sequence) p.print_sequence(stdout);
    }
  } else {
    res.eval_ms = median_ms(
        [&] {
      const torch::Tensor r = rows();
      (void)eval_batch(model, pool_x.index_select(0, r).mul(1.0), pool_y.index_select(0, r));
        },
        o.warmup, o.steps);
  }
  return res;
}

Json to_json(const Result& r) {
  return {{"model", r.model},
          {"batch", r.batch},
          {"precision", r.precision},
          {"mode", r.mode},
          {"train_ms", rounded(r.train_ms, 4)},
          {"eval_ms", rounded(r.eval_ms, 4)}};
}

std::optional<double> peer_ms(const Json& peer, const Result& like, const char* mode, const char* key) {
  for (const auto& r : peer.at("results"))
    if (r.at("model") == like.model && r.at("batch") == like.batch && r.value("precision", "fp32") == like.precision &&
        r.at("mode") == mode)
      return r.at(key).get<double>();
  return std::nullopt;
}

// The targets (docs/BENCHMARKS.md, "GPU steps"), ours-with-graphs / torch.compile: training and evaluation.
double train_target(const Result& r) {
  if (r.model == "resnet18") return r.batch >= 512 ? 0.8 : 0.9;
  return r.batch >= 512 ? 0.9 : 0.0;  // cnn at 128: no target
}
double eval_target(const Result&) { return 0.8; }

}  // namespace

int bench_graph(const GraphBenchOptions& o) {
  if (!torch::cuda::is_available())
    fail("bench graph needs a CUDA GPU and LibTorch sees none: run it on the GPU machine");
  if (static_cast<std::int64_t>(o.device) >= static_cast<std::int64_t>(torch::cuda::device_count()))
    fail("bench graph --device {} is out of range: {} GPUs are visible", o.device, torch::cuda::device_count());
  const torch::Device device(torch::kCUDA, static_cast<c10::DeviceIndex>(o.device));
  c10::cuda::CUDAGuard guard(device);
  // A non-default stream: graphs are captured on a side stream and replayed on this one.
  c10::cuda::CUDAStreamGuard on_stream(c10::cuda::getStreamFromPool(false, device.index()));
  // Fixed shapes: let cuDNN time its algorithms once, as the learner does on a GPU (the peer too).
  at::globalContext().setBenchmarkCuDNN(true);
  if (o.cudnn_benchmark_limit) at::globalContext().setBenchmarkLimitCuDNN(*o.cudnn_benchmark_limit);
  bn_act_set_backend(o.bn_backend == "cudnn"    ? BnBackend::cudnn
                     : o.bn_backend == "tandem" ? BnBackend::tandem
                                                : BnBackend::automatic);

  std::vector<Result> ours;
  const std::vector<std::string> precisions = split_list(o.precisions);
  for (const std::string& p : precisions) (void)dtype_of(p);
  fmt::print("{:<10} {:>6} {:<5} {:<6} {:>10} {:>10}\n", "model", "batch", "prec", "mode", "train ms", "eval ms");
  for (const std::string& name : split_list(o.models))
    for (const std::string& b : split_list(o.batches)) {
      std::int64_t batch = 0;
      const auto [end, ec] = std::from_chars(b.data(), b.data() + b.size(), batch);
      if (ec != std::errc() || end != b.data() + b.size() || batch < 1)
        fail("bench graph --batches: '{}' is not a positive batch size: give sizes like 128,512", b);
      for (const std::string& precision : precisions)
        for (bool graph : {false, true}) {
          ours.push_back(measure(name, batch, precision, graph, o, device));
          const Result& r = ours.back();
          fmt::print("{:<10} {:>6} {:<5} {:<6} {:>10.3f} {:>10.3f}\n", r.model, r.batch, r.precision, r.mode,
                     r.train_ms, r.eval_ms);
        }
    }
  Json line{{"bench", "graph"},
            {"bn_backend", o.bn_backend},
            {"cudnn_benchmark_limit", at::globalContext().benchmarkLimitCuDNN()}};
  Json results = Json::array();
  for (const Result& r : ours) results.push_back(to_json(r));
  line["results"] = results;

  if (o.peer) {
    const Json peer = run_peer(
        fmt::format("{} {} --models {} --batches {} --precisions {} --steps {} --warmup {} --device {}{}",
                    shell_quote(o.python), shell_quote(find_peer_script(o.peer_script, "graph_step_peer.py")),
                    shell_quote(o.models), shell_quote(o.batches), shell_quote(o.precisions), o.steps, o.warmup,
                    o.device,
                    o.cudnn_benchmark_limit ? fmt::format(" --cudnn-benchmark-limit {}", *o.cudnn_benchmark_limit)
                                            : std::string()),
        "graph_step_peer");
    fmt::print(
        "\nours with graphs / PyTorch (same run); targets: training vs compile <= 0.9x (resnet18 128, cnn 512), "
        "<= 0.8x (resnet18 512); evaluation vs compile <= 0.8x\n");
    fmt::print("{:<10} {:>6} {:<5} {:>12} {:>12} {:>14} {:>14}  {}\n", "model", "batch", "prec", "train/eager",
               "eval/eager", "train/compile", "eval/compile", "targets");
    Json ratios = Json::array();
    for (const Result& r : ours) {
      if (r.mode != "graph") continue;
      auto ratio = [&](const char* mode, const char* key, double mine) -> std::optional<double> {
        const auto theirs = peer_ms(peer, r, mode, key);
        return theirs && *theirs > 0 ? std::optional<double>(mine / *theirs) : std::nullopt;
      };
      const auto te = ratio("eager", "train_ms", r.train_ms), ee = ratio("eager", "eval_ms", r.eval_ms);
      const auto tc = ratio("compile", "train_ms", r.train_ms), ec = ratio("compile", "eval_ms", r.eval_ms);
      auto show = [](const std::optional<double>& v) { return v ? fmt::format("{:.2f}x", *v) : std::string("-"); };
      auto verdict = [](const std::optional<double>& v, double target) {
        if (target <= 0.0) return std::string("-");
        if (!v) return fmt::format("<= {:.1f}x: no peer figure", target);
        return fmt::format("<= {:.1f}x {}", target, *v <= target ? "met" : "MISSED");
      };
      fmt::print("{:<10} {:>6} {:<5} {:>12} {:>12} {:>14} {:>14}  train {}, eval {}\n", r.model, r.batch, r.precision,
                 show(te), show(ee), show(tc), show(ec), verdict(tc, train_target(r)), verdict(ec, eval_target(r)));
      Json row{{"model", r.model}, {"batch", r.batch}, {"precision", r.precision}};
      if (te) row["train_vs_torch_eager"] = rounded(*te, 3);
      if (ee) row["eval_vs_torch_eager"] = rounded(*ee, 3);
      if (tc) row["train_vs_torch_compile"] = rounded(*tc, 3);
      if (ec) row["eval_vs_torch_compile"] = rounded(*ec, 3);
      if (train_target(r) > 0.0) row["train_target_vs_compile"] = train_target(r);
      row["eval_target_vs_compile"] = eval_target(r);
      ratios.push_back(row);
    }
    line["peer"] = peer;
    line["ratios"] = ratios;
  }
  emit_json_line(line, o.json);
  return 0;
}

#endif

}  // namespace tandem::bench
