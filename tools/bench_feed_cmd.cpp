// tandem bench feed: samples/s and GB/s of HostFeed and DeviceFeed at batch sizes 256/512/1024, on
// CIFAR-shaped synthetic uint8 samples (a temporary dataset cache, removed at exit) or on a preloaded
// cache; with --peer, the PyTorch baselines (bench/peers/feed_peer.py) in the same run over the same
// cache, and the ratio table. GB/s counts the bytes a feed reads per sample: the uint8 sample and
// its int64 label.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "tools/commands.hpp"

#ifdef TANDEM_HAVE_TORCH
#include <torch/cuda.h>

#include <chrono>

#include "common/cuda.hpp"
#include "learner/feed/device_feed.hpp"
#include "learner/feed/host_feed.hpp"
#include "learner/feed/synthetic_dataset.hpp"
#include "shm/dataset_cache.hpp"
#endif

namespace tandem::tools {
namespace {

struct BenchOptions {
  std::string dataset;          // empty: synthetic CIFAR-shaped samples
  std::string split = "train";
  double seconds = 2.0;
  std::string json;
  bool peer = false;
  std::string python = "python3";
  std::string peer_script;
  unsigned workers = 0;
  unsigned ring_slots = 4;
  std::uint32_t device = 0;
};

#ifdef TANDEM_HAVE_TORCH

constexpr std::uint64_t kSyntheticSamples = 50000;
const std::vector<std::uint64_t> kBatches = {256, 512, 1024};

struct Result {
  std::string feed;     // host_feed, device_feed (ours); the peer's names for theirs
  std::uint64_t batch = 0;
  std::string device;   // cpu, cuda:N
  double samples_per_s = 0;
  double gb_per_s = 0;
  std::string skipped;  // why, when not run
};

template <class Feed>
Result measure(Feed& feed, const std::string& name, std::uint64_t batch, bool gpu, const BenchOptions& o,
               double sample_bytes) {
  using clock = std::chrono::steady_clock;
  auto sync = [&] {
    if (gpu) torch::cuda::synchronize(o.device);
  };
  for (int i = 0; i < 3; ++i) feed.next();  // warm up: workers running, device copy made, kernels loaded
  sync();
  const auto start = clock::now();
  const auto budget = std::chrono::duration<double>(o.seconds);
  std::uint64_t samples = 0;
  do samples += static_cast<std::uint64_t>(feed.next().samples());
  while (clock::now() - start < budget);
  sync();
  const double s = std::chrono::duration<double>(clock::now() - start).count();
  return Result{name, batch, gpu ? fmt::format("cuda:{}", o.device) : "cpu", samples / s, samples * sample_bytes / s / 1e9, {}};
}

void print_row(const Result& r) {
  if (!r.skipped.empty())
    fmt::print("{:<24} {:>6} {:<8} skipped: {}\n", r.feed, r.batch, r.device, r.skipped);
  else
    fmt::print("{:<24} {:>6} {:<8} {:>14.0f} {:>8.2f}\n", r.feed, r.batch, r.device, r.samples_per_s, r.gb_per_s);
  std::fflush(stdout);
}

std::string find_peer_script(const BenchOptions& o) {
  if (!o.peer_script.empty()) return o.peer_script;
  std::vector<std::string> candidates;
  if (const char* root = std::getenv("TANDEM_SOURCE_ROOT")) candidates.push_back(std::string(root) + "/bench/peers/feed_peer.py");
  candidates.push_back("bench/peers/feed_peer.py");
  candidates.push_back(std::string(TANDEM_SOURCE_DIR) + "/bench/peers/feed_peer.py");
  for (const auto& c : candidates)
    if (std::filesystem::exists(c)) return c;
  fail("cannot find bench/peers/feed_peer.py: run from the source tree or pass --peer-script PATH");
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Runs the peer, echoing its output, and returns its results (parsed from its JSON line).
std::vector<Result> run_peer(const BenchOptions& o, const std::string& dataset, std::string& json_line) {
  const std::string command =
      fmt::format("{} {} --dataset {} --split {} --seconds {} --batches 256,512,1024 --device {} 2>&1",
                  shell_quote(o.python), shell_quote(find_peer_script(o)), shell_quote(dataset), shell_quote(o.split),
                  o.seconds, o.device);
  fmt::print("\npeer: {}\n", command);
  std::fflush(stdout);
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) fail("cannot start the peer `{}`", command);
  std::string line;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, pipe) != nullptr) {
    line += buf;
    if (line.empty() || line.back() != '\n') continue;
    fmt::print("  | {}", line);
    if (line.starts_with("{\"bench\": \"feed_peer\"")) json_line = line.substr(0, line.size() - 1);
    line.clear();
  }
  const int status = ::pclose(pipe);
  if (status != 0 || json_line.empty())
    fail("the peer `{}` failed (status {}{}): see its output above", command, status,
         json_line.empty() ? ", no JSON line" : "");

  std::vector<Result> results;
  static const std::regex record(R"re(\{"feed": "([a-z0-9_]+)", "batch": ([0-9]+), "device": "([^"]*)", "samples_per_s": ([0-9.eE+-]+), "gb_per_s": ([0-9.eE+-]+))re");
  for (auto it = std::sregex_iterator(json_line.begin(), json_line.end(), record); it != std::sregex_iterator(); ++it)
    results.push_back(Result{(*it)[1], std::stoull((*it)[2]), (*it)[3], std::stod((*it)[4]), std::stod((*it)[5]), {}});
  return results;
}

struct Ratio {
  std::string what;
  std::uint64_t batch;
  double ratio;
  double target;
};

std::optional<double> rate(const std::vector<Result>& rs, const std::string& feed, std::uint64_t batch) {
  for (const auto& r : rs)
    if (r.feed == feed && r.batch == batch && r.skipped.empty()) return r.samples_per_s;
  return std::nullopt;
}

std::vector<Ratio> ratios(const std::vector<Result>& ours, const std::vector<Result>& peer) {
  std::vector<Ratio> out;
  for (auto batch : kBatches) {
    std::optional<double> best_loader;
    for (const char* name : {"dataloader_pin_w0", "dataloader_pin_w4", "dataloader_pin_w8"})
      if (auto r = rate(peer, name, batch); r && (!best_loader || *r > *best_loader)) best_loader = r;
    auto host = rate(ours, "host_feed", batch), device = rate(ours, "device_feed", batch);
    auto loop = rate(peer, "index_select_loop", batch), gpu_loader = rate(peer, "dataloader_gpu_tensors", batch);
    if (host && best_loader) out.push_back({"HostFeed / best DataLoader (0/4/8 workers, pin_memory)", batch, *host / *best_loader, 20});
    if (device && loop) out.push_back({"DeviceFeed / Python index_select loop", batch, *device / *loop, 2});
    if (device && gpu_loader) out.push_back({"DeviceFeed / DataLoader over GPU tensors", batch, *device / *gpu_loader, 100});
  }
  return out;
}

std::string results_json(const std::vector<Result>& rs) {
  std::string s = "[";
  for (const auto& r : rs) {
    if (s.size() > 1) s += ", ";
    if (!r.skipped.empty())
      s += fmt::format(R"({{"feed": "{}", "batch": {}, "device": "{}", "skipped": "{}"}})", r.feed, r.batch, r.device, r.skipped);
    else
      s += fmt::format(R"({{"feed": "{}", "batch": {}, "device": "{}", "samples_per_s": {:.1f}, "gb_per_s": {:.4f}}})", r.feed,
                       r.batch, r.device, r.samples_per_s, r.gb_per_s);
  }
  return s + "]";
}

int bench_feed(const BenchOptions& o) {
  if (!(o.seconds > 0)) fail("--seconds must be positive, got {}", o.seconds);
  std::optional<shm::UnlinkOnSignal> on_signal;
  std::optional<feed::SyntheticDataset> synthetic;
  std::string name = o.dataset;
  if (name.empty()) {
    name = fmt::format("bench-feed-{}", ::getpid());
    on_signal.emplace(shm::dataset_segment_name(name));
    synthetic.emplace(name, kSyntheticSamples, 0, std::vector<std::uint64_t>{3, 32, 32});
  }
  const auto cache = shm::DatasetCache::attach(name);

  feed::FeedOptions base;
  base.split = o.split;
  base.device_index = o.device;
  base.drop_last = true;
  base.mean = {0.5f};
  base.stddev = {0.25f};
  base.workers = o.workers;
  base.ring_slots = o.ring_slots;
  const auto layout = feed::describe_feed(cache, base);
  std::string shape;
  for (auto d : layout.sample_shape) shape += (shape.empty() ? "" : "x") + std::to_string(d);
  const bool gpu = cuda::device_count() > static_cast<int>(o.device);
  const double sample_bytes = static_cast<double>(layout.sample_bytes());

  fmt::print("tandem bench feed: dataset '{}'{}, split {}: {} samples of {} uint8 ({} bytes read per sample), {} s per run\n",
             name, synthetic ? " (synthetic)" : "", o.split, layout.end - layout.begin, shape, layout.sample_bytes(), o.seconds);
  fmt::print("{:<24} {:>6} {:<8} {:>14} {:>8}\n", "feed", "batch", "device", "samples/s", "GB/s");
  std::vector<Result> ours;
  for (auto batch : kBatches) {
    auto options = base;
    options.batch_size = batch;
    {
      feed::HostFeed host(cache, options);
      ours.push_back(measure(host, "host_feed", batch, host.on_gpu(), o, sample_bytes));
    }
    print_row(ours.back());
    if (gpu) {
      feed::DeviceFeed device(cache, options);
      ours.push_back(measure(device, "device_feed", batch, true, o, sample_bytes));
    } else {
      ours.push_back(Result{"device_feed", batch, "-", 0, 0, "no GPU"});
    }
    print_row(ours.back());
  }

  std::string json = fmt::format(
      R"({{"bench": "feed", "dataset": "{}", "synthetic": {}, "split": "{}", "samples": {}, "sample_shape": [{}], "sample_bytes": {}, "seconds": {}, "gpus": {}, "results": {})",
      name, synthetic ? "true" : "false", o.split, layout.end - layout.begin, fmt::join(layout.sample_shape, ", "),
      layout.sample_bytes(), o.seconds, cuda::device_count(), results_json(ours));
  if (o.peer) {
    std::string peer_json;
    const auto peer = run_peer(o, name, peer_json);
    const auto rs = ratios(ours, peer);
    fmt::print("\n{:<56} {:>6} {:>10} {:>8}\n", "ours / peer (samples/s)", "batch", "ratio", "target");
    std::string rs_json;
    for (const auto& r : rs) {
      fmt::print("{:<56} {:>6} {:>9.1f}x {:>7.0f}x {}\n", r.what, r.batch, r.ratio, r.target, r.ratio >= r.target ? "met" : "MISSED");
      rs_json += fmt::format(R"({}{{"what": "{}", "batch": {}, "ratio": {:.2f}, "target": {}}})", rs_json.empty() ? "" : ", ", r.what,
                             r.batch, r.ratio, r.target);
    }
    if (rs.empty()) fmt::print("no ratio: ours and the peer have no configuration in common that both ran\n");
    json += fmt::format(R"(, "peer": {}, "ratios": [{}])", peer_json, rs_json);
  }
  json += "}";
  fmt::print("{}\n", json);
  if (!o.json.empty()) {
    std::ofstream out(o.json);
    out << json << "\n";
    if (!out) fail("cannot write {}: check the directory exists and is writable", o.json);
  }
  return 0;
}

#else

int bench_feed(const BenchOptions&) {
  fail("tandem bench feed needs LibTorch and this build has none: install libtorch-dev (or pass -Dtorch_root) and rebuild");
}

#endif

}  // namespace

void add_bench_feed_command(CLI::App& bench) {
  static BenchOptions o;
  auto* cmd = bench.add_subcommand("feed", "samples/s and GB/s of HostFeed and DeviceFeed at batch 256/512/1024");
  cmd->add_option("--dataset", o.dataset, "a preloaded dataset cache (default: 50000 synthetic 3x32x32 uint8 samples)");
  cmd->add_option("--split", o.split, "split to read")->capture_default_str();
  cmd->add_option("--seconds", o.seconds, "seconds per measurement")->capture_default_str();
  cmd->add_option("--json", o.json, "also write the JSON line to this file");
  cmd->add_flag("--peer", o.peer, "also run the PyTorch peers (bench/peers/feed_peer.py) and print ours/peer ratios");
  cmd->add_option("--python", o.python, "Python with torch, for --peer")->capture_default_str();
  cmd->add_option("--peer-script", o.peer_script, "path of feed_peer.py (default: found in the source tree)");
  cmd->add_option("--workers", o.workers, "HostFeed gather threads (0: min(8, cores))")->capture_default_str();
  cmd->add_option("--ring-slots", o.ring_slots, "HostFeed staging slots")->capture_default_str();
  cmd->add_option("--device", o.device, "GPU index")->capture_default_str();
  on_run(cmd, [] { return bench_feed(o); });
}

}  // namespace tandem::tools
