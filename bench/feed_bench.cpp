// `tandem-bench feed` (see feed_options.hpp). GB/s counts the bytes a feed reads per sample: the uint8
// sample and its int64 label.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/cuda.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.hpp"
#include "common/cuda.hpp"
#include "common/error.hpp"
#include "learner/feed/device_feed.hpp"
#include "learner/feed/host_feed.hpp"
#include "shm/dataset_cache.hpp"
#include "bench/bench_dataset.hpp"
#include "bench/bench_json.hpp"
#include "bench/feed_options.hpp"
#include "bench/peer_process.hpp"

namespace tandem::bench {
namespace {

const std::vector<std::uint64_t> kBatches = {256, 512, 1024};

struct Result {
  std::string feed;  // host_feed, device_feed (ours); the peer's names for theirs
  std::uint64_t batch = 0;
  std::string device;  // cpu, cuda:N
  double samples_per_s = 0;
  double gb_per_s = 0;
  std::string skipped;  // why, when not run
};

Json to_json(const Result& r) {
  Json j = {{"feed", r.feed}, {"batch", r.batch}, {"device", r.device}};
  if (!r.skipped.empty()) {
    j["skipped"] = r.skipped;
  } else {
    j["samples_per_s"] = rounded(r.samples_per_s, 1);
    j["gb_per_s"] = rounded(r.gb_per_s, 4);
  }
  return j;
}

Result result_from_json(const Json& j) {
  return Result{j.at("feed"),
                j.at("batch"),
                j.value("device", ""),
                j.value("samples_per_s", 0.0),
                j.value("gb_per_s", 0.0),
                j.value("skipped", "")};
}

template <class Feed>
Result measure(Feed& feed, const std::string& name, std::uint64_t batch, bool gpu, const FeedBenchOptions& o,
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
  const double s = seconds_since(start);
  return Result{
      name, batch, gpu ? fmt::format("cuda:{}", o.device) : "cpu", samples / s, samples * sample_bytes / s / 1e9, {}};
}

void print_row(const Result& r) {
  if (!r.skipped.empty()) fmt::print("{:<24} {:>6} {:<8} skipped: {}\n", r.feed, r.batch, r.device, r.skipped);
  else fmt::print("{:<24} {:>6} {:<8} {:>14.0f} {:>8.2f}\n", r.feed, r.batch, r.device, r.samples_per_s, r.gb_per_s);
  std::fflush(stdout);
}

// Runs the peer over the same dataset; returns its JSON line, whose "results" hold its measurements.
Json run_feed_peer(const FeedBenchOptions& o, const std::string& dataset) {
  const std::string command = fmt::format(
      "{} {} --dataset {} --split {} --seconds {} --batches 256,512,1024 --device {}", shell_quote(o.python),
      shell_quote(find_peer_script(o.peer_script, "feed_peer.py")), shell_quote(dataset), shell_quote(o.split),
      o.seconds, o.device);
  return run_peer(command, "feed_peer");
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
    if (host && best_loader)
      out.push_back({"HostFeed / best DataLoader (0/4/8 workers, pin_memory)", batch, *host / *best_loader, 20});
    if (device && loop) out.push_back({"DeviceFeed / Python index_select loop", batch, *device / *loop, 2});
    if (device && gpu_loader)
      out.push_back({"DeviceFeed / DataLoader over GPU tensors", batch, *device / *gpu_loader, 100});
  }
  return out;
}

// Prints the ours/peer table and returns its rows for the JSON line.
Json compare_with_peer(const std::vector<Result>& ours, const Json& peer_line) {
  std::vector<Result> peer;
  for (const auto& r : peer_line.at("results")) peer.push_back(result_from_json(r));
  const auto rs = ratios(ours, peer);
  fmt::print("\n{:<56} {:>6} {:>10} {:>8}\n", "ours / peer (samples/s)", "batch", "ratio", "target");
  Json rows = Json::array();
  for (const auto& r : rs) {
    fmt::print("{:<56} {:>6} {:>9.1f}x {:>7.0f}x {}\n", r.what, r.batch, r.ratio, r.target,
               r.ratio >= r.target ? "met" : "MISSED");
    rows.push_back({{"what", r.what}, {"batch", r.batch}, {"ratio", rounded(r.ratio, 2)}, {"target", r.target}});
  }
  if (rs.empty()) fmt::print("no ratio: ours and the peer have no configuration in common that both ran\n");
  return rows;
}

}  // namespace

int bench_feed(const FeedBenchOptions& o) {
  if (!(o.seconds > 0)) fail("--seconds must be positive, got {}", o.seconds);
  const BenchDataset data(o.dataset, "feed");
  const std::string& name = data.name;
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
  const std::string shape = fmt::format("{}", fmt::join(layout.sample_shape, "x"));
  const bool gpu = cuda::device_count() > static_cast<int>(o.device);
  const double sample_bytes = static_cast<double>(layout.sample_bytes());

  fmt::print(
      "tandem-bench feed: dataset '{}'{}, split {}: {} samples of {} uint8 ({} bytes read per sample), {} s per run\n",
      name, data.synthetic ? " (synthetic)" : "", o.split, layout.end - layout.begin, shape, layout.sample_bytes(),
      o.seconds);
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

  Json line = {{"bench", "feed"},
               {"dataset", name},
               {"synthetic", data.synthetic.has_value()},
               {"split", o.split},
               {"samples", layout.end - layout.begin},
               {"sample_shape", layout.sample_shape},
               {"sample_bytes", layout.sample_bytes()},
               {"seconds", o.seconds},
               {"gpus", cuda::device_count()},
               {"results", Json::array()}};
  for (const auto& r : ours) line["results"].push_back(to_json(r));
  if (o.peer) {
    const Json peer = run_feed_peer(o, name);
    Json rows = compare_with_peer(ours, peer);
    line["peer"] = peer;
    line["ratios"] = std::move(rows);
  }
  emit_json_line(line, o.json);
  return 0;
}

}  // namespace tandem::bench
