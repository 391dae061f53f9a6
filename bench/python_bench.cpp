// `tandem-bench python` (python_options.hpp): the C++ side measured here, the Python side by
// bench/python/python_side.py in a child process, the peers by bench/peers/*.py.
#include <fmt/format.h>
#include <torch/cuda.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <thread>
#include <vector>

#include "common/clock.hpp"
#include "common/cuda.hpp"
#include "common/error.hpp"
#include "common/torch/flat_params.hpp"
#include "common/units.hpp"
#include "learner/feed/device_feed.hpp"
#include "learner/feed/host_feed.hpp"
#include "learner/model_publisher.hpp"
#include "shm/dataset_cache.hpp"
#include "bench/bench_dataset.hpp"
#include "bench/bench_json.hpp"
#include "bench/peer_process.hpp"
#include "bench/python_options.hpp"

namespace tandem::bench {
namespace {

const std::vector<std::uint64_t> kBatches = {256, 512, 1024};
using Clock = std::chrono::steady_clock;

struct FeedRate {
  std::string feed;  // host_feed, device_feed
  std::uint64_t batch;
  double cpp = 0, python = 0;  // samples/s, the best round
};

struct PublishTime {
  double visible_ms = 0, visible_best_ms = 0, call_ms = 0;
};

template <class Feed>
double measure(Feed& feed, double seconds, bool gpu, std::uint32_t device) {
  auto sync = [&] {
    if (gpu) torch::cuda::synchronize(device);
  };
  for (int i = 0; i < 3; ++i) feed.next();
  sync();
  const auto start = Clock::now();
  std::uint64_t samples = 0;
  // Each step is held until the next one exists, as Python's `for x, y in feed` holds its batch while
  // __next__ runs (and a C++ loop that keeps its Step): both sides make the same allocations, so the
  // ratio is the binding's cost alone. Dropping the batch first lets the caching allocator hand the
  // same block straight back, which alone sped the Python loop up (docs/results/HISTORY.md, "Python
  // package: DeviceFeed"; raw: docs/results/feed-python-hold-vs-drop-h200.txt).
  feed::Step held;
  do {
    held = feed.next();
    samples += static_cast<std::uint64_t>(held.samples());
  } while (Clock::now() - start < std::chrono::duration<double>(seconds));
  sync();
  return static_cast<double>(samples) / std::chrono::duration<double>(Clock::now() - start).count();
}

std::string find_script(const PythonBenchOptions& o) {
  if (!o.script.empty()) return o.script;
  std::vector<std::string> roots;
  if (const char* env = std::getenv("TANDEM_SOURCE_ROOT")) roots.emplace_back(env);
  roots.emplace_back(TANDEM_SOURCE_DIR);
  roots.emplace_back(".");
  for (const auto& root : roots)
    if (std::filesystem::exists(root + "/bench/python/python_side.py")) return root + "/bench/python/python_side.py";
  fail("cannot find bench/python/python_side.py: run from the source tree or pass --script PATH");
}

// python_side.py with the package as built next to this binary first on PYTHONPATH (an installed one
// is found otherwise).
Json run_python_side(const PythonBenchOptions& o, const std::string& args) {
  const std::string command = fmt::format("PYTHONPATH={}${{PYTHONPATH:+:$PYTHONPATH}} {} {} {}",
                                          shell_quote(std::string(TANDEM_BUILD_DIR) + "/python"), shell_quote(o.python),
                                          shell_quote(find_script(o)), args);
  return run_peer(command, "python_side");
}

std::vector<FeedRate> measure_feeds(const PythonBenchOptions& o, const std::string& name,
                                    const shm::DatasetCache& cache, bool gpu) {
  std::vector<FeedRate> rates;
  for (auto batch : kBatches) {
    rates.push_back({"host_feed", batch});
    if (gpu) rates.push_back({"device_feed", batch});
  }
  auto at = [&](const std::string& feed, std::uint64_t batch) -> FeedRate& {
    return *std::find_if(rates.begin(), rates.end(),
                         [&](const FeedRate& r) { return r.feed == feed && r.batch == batch; });
  };
  feed::FeedOptions base;
  base.split = o.split;
  base.device_index = o.device;
  base.drop_last = true;
  base.mean = {0.5f};
  base.stddev = {0.25f};
  base.workers = o.workers;
  base.ring_slots = o.ring_slots;
  for (int round = 0; round < o.rounds; ++round) {
    for (auto batch : kBatches) {
      auto options = base;
      options.batch_size = batch;
      {
        feed::HostFeed host(cache, options);
        at("host_feed", batch).cpp = std::max(at("host_feed", batch).cpp,
                                              measure(host, o.seconds, host.on_gpu(), o.device));
      }
      if (gpu) {
        feed::DeviceFeed device(cache, options);
        at("device_feed", batch).cpp = std::max(at("device_feed", batch).cpp,
                                                measure(device, o.seconds, true, o.device));
      }
      const Json side = run_python_side(o, fmt::format("--dataset {} --split {} --seconds {} --batches {} --workers {} "
                                                       "--ring-slots {} --device {}",
                                                       shell_quote(name), shell_quote(o.split), o.seconds, batch,
                                                       o.workers, o.ring_slots, o.device));
      for (const auto& r : side.at("feed")) {
        FeedRate& f = at(r.at("feed"), r.at("batch"));
        f.python = std::max(f.python, r.at("samples_per_s").get<double>());
      }
    }
  }
  return rates;
}

// The model python_side.py builds: `tensors` float32 tensors adding up to `bytes`.
std::vector<std::pair<std::string, at::Tensor>> flat_model(std::uint64_t bytes, int tensors,
                                                           const torch::Device& device) {
  const std::int64_t numel = std::max<std::int64_t>(1, static_cast<std::int64_t>(bytes / 4));
  const std::int64_t per = std::max<std::int64_t>(1, numel / tensors);
  std::vector<std::pair<std::string, at::Tensor>> named;
  for (std::int64_t at = 0, i = 0; at < numel; at += per, ++i)
    named.emplace_back(fmt::format("params.{}", i),
                       torch::zeros({std::min(per, numel - at)}, torch::dtype(torch::kFloat).device(device)));
  return named;
}

PublishTime measure_cpp_publish(std::uint64_t bytes, int tensors, int reps, bool gpu, std::uint32_t device) {
  const torch::Device where = gpu ? torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(device)) : torch::kCPU;
  FlatParams flat = FlatParams::flatten(flat_model(bytes, tensors, where));
  const std::string slab = shm::job_segment_name(fmt::format("bench-python-cpp-{}", ::getpid()), shm::Kind::weights);
  learner::ModelPublisher publisher(slab, flat);
  shm::WeightSlabReader reader = shm::WeightSlabReader::attach(slab, 1);
  std::vector<double> visible, calls;
  const int warmup = static_cast<int>(shm::kDefaultSlots) + 1;  // every slot paged in once
  for (int step = 0; step < warmup + reps; ++step) {
    const std::uint64_t t0 = monotonic_ns();
    const auto c0 = Clock::now();
    const auto r = publisher.publish(static_cast<std::uint64_t>(step));
    const double call = std::chrono::duration<double, std::milli>(Clock::now() - c0).count();
    publisher.publisher().flush();
    auto lease = reader.lease_latest();
    if (!lease || lease->version() != r.version) fail("bench python: publish {} did not become visible", r.version);
    const double seen = static_cast<double>(lease->publish_ns() - t0) / 1e6;
    lease.reset();
    if (step >= warmup) {
      visible.push_back(seen);
      calls.push_back(call);
    }
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(std::max(5.0, 0.5 * seen)));
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  };
  return {median(visible), *std::min_element(visible.begin(), visible.end()), median(calls)};
}

struct Ratio {
  std::string what;
  std::uint64_t batch;  // 0: not a feed ratio
  double ratio, target;
  bool at_most;  // the target is a ceiling
};

std::optional<double> best_loader(const Json& peer, std::uint64_t batch) {
  std::optional<double> best;
  for (const auto& r : peer.at("results"))
    if (r.at("batch") == batch && r.value("feed", "").starts_with("dataloader_pin") && r.contains("samples_per_s"))
      best = std::max(best.value_or(0.0), r.at("samples_per_s").get<double>());
  return best;
}

}  // namespace

int bench_python(const PythonBenchOptions& o) {
  if (!(o.seconds > 0) || o.rounds < 1 || o.reps < 1 || o.tensors < 1)
    fail("--seconds, --rounds, --reps and --tensors must be positive");
  const std::uint64_t bytes = o.bytes == "0" ? 0 : parse_size(o.bytes, "--bytes");
  const BenchDataset data(o.dataset, "python");
  const std::string& name = data.name;
  const auto cache = shm::DatasetCache::attach(name);
  const bool gpu = cuda::device_count() > static_cast<int>(o.device);
  fmt::print(
      "tandem-bench python: dataset '{}'{}, split {}, {} s per feed run, best of {} rounds; publish {} in {} "
      "float32 tensors, median of {}; {}\n",
      name, data.synthetic ? " (synthetic)" : "", o.split, o.seconds, o.rounds, format_bytes(bytes), o.tensors, o.reps,
      gpu ? fmt::format("GPU {}", o.device) : std::string("CPU"));

  const std::vector<FeedRate> feeds = measure_feeds(o, name, cache, gpu);
  PublishTime cpp_pub, py_pub;
  // Rounds alternate the two sides; the round with the lower median is kept for each.
  for (int round = 0; bytes > 0 && round < o.rounds; ++round) {
    const PublishTime c = measure_cpp_publish(bytes, o.tensors, o.reps, gpu, o.device);
    const Json side = run_python_side(
        o, fmt::format("--bytes {} --tensors {} --reps {} --device {}", bytes, o.tensors, o.reps, o.device));
    const Json& p = side.at("publish");
    const PublishTime py{p.at("visible_ms"), p.at("visible_best_ms"), p.at("call_ms")};
    if (round == 0 || c.visible_ms < cpp_pub.visible_ms) cpp_pub = c;
    if (round == 0 || py.visible_ms < py_pub.visible_ms) py_pub = py;
  }
  Json feed_peer, publish_peer;
  if (o.peer) {
    feed_peer = run_peer(fmt::format("{} {} --dataset {} --split {} --seconds {} --batches 256,512,1024 --device {}",
                                     shell_quote(o.python), shell_quote(find_peer_script("", "feed_peer.py")),
                                     shell_quote(name), shell_quote(o.split), o.seconds, o.device),
                         "feed_peer");
    if (bytes > 0)
      publish_peer = run_peer(fmt::format("{} {} --bytes {} --tensors {} --seconds {} --device {}",
                                          shell_quote(o.python), shell_quote(find_peer_script("", "publish_peer.py")),
                                          bytes, o.tensors, std::max(2.0, o.seconds),
                                          gpu ? fmt::format("cuda:{}", o.device) : "cpu"),
                              "publish_peer");
  }

  fmt::print("\n{:<12} {:>6} {:>16} {:>16}\n", "feed", "batch", "C++ samples/s", "Python samples/s");
  for (const auto& f : feeds) fmt::print("{:<12} {:>6} {:>16.0f} {:>16.0f}\n", f.feed, f.batch, f.cpp, f.python);
  std::vector<Ratio> ratios;
  for (const auto& f : feeds) {
    const std::string name_of = f.feed == "host_feed" ? "HostFeed" : "DeviceFeed";
    ratios.push_back({fmt::format("Python {0} / C++ {0}", name_of), f.batch, f.python / f.cpp, 0.9, false});
    if (f.feed == "host_feed" && o.peer)
      if (auto loader = best_loader(feed_peer, f.batch))
        ratios.push_back({"Python HostFeed / best DataLoader (0/4/8 workers)", f.batch, f.python / *loader, 20, false});
  }
  if (bytes > 0) {
    fmt::print("\n{:<36} {:>12} {:>10} {:>10}\n", "publish " + format_bytes(bytes), "visible ms", "best ms", "call ms");
    fmt::print("{:<36} {:>12.2f} {:>10.2f} {:>10.3f}\n", "C++ learner::ModelPublisher", cpp_pub.visible_ms,
               cpp_pub.visible_best_ms, cpp_pub.call_ms);
    fmt::print("{:<36} {:>12.2f} {:>10.2f} {:>10.3f}\n", "Python tandem.WeightPublisher", py_pub.visible_ms,
               py_pub.visible_best_ms, py_pub.call_ms);
    ratios.push_back({"Python publish-to-visible / C++", 0, py_pub.visible_ms / cpp_pub.visible_ms, 1.1, true});
    if (o.peer) {
      const double sd = publish_peer.at("state_dict_ms");
      fmt::print("{:<36} {:>12.2f}\n", "peer state_dict() -> load_state_dict", sd);
      ratios.push_back({"state_dict peer / Python publish-to-visible", 0, sd / py_pub.visible_ms, 5, false});
    }
  }
  fmt::print("\n{:<52} {:>6} {:>9} {:>8}\n", "ratio", "batch", "ratio", "target");
  Json ratio_rows = Json::array();
  for (const auto& r : ratios) {
    const bool met = r.at_most ? r.ratio <= r.target : r.ratio >= r.target;
    fmt::print("{:<52} {:>6} {:>8.2f}x {}{:>6.1f}x {}\n", r.what, r.batch ? std::to_string(r.batch) : "-", r.ratio,
               r.at_most ? "<=" : ">=", r.target, met ? "met" : "MISSED");
    ratio_rows.push_back({{"what", r.what},
                          {"batch", r.batch},
                          {"ratio", rounded(r.ratio, 3)},
                          {"target", r.target},
                          {"at_most", r.at_most},
                          {"met", met}});
  }

  Json line = {{"bench", "python"},     {"dataset", name},    {"synthetic", data.synthetic.has_value()},
               {"seconds", o.seconds},  {"rounds", o.rounds}, {"gpus", cuda::device_count()},
               {"feeds", Json::array()}};
  for (const auto& f : feeds)
    line["feeds"].push_back({{"feed", f.feed},
                             {"batch", f.batch},
                             {"cpp_samples_per_s", rounded(f.cpp, 1)},
                             {"python_samples_per_s", rounded(f.python, 1)}});
  if (bytes > 0)
    line["publish"] = {{"bytes", bytes},
                       {"tensors", o.tensors},
                       {"reps", o.reps},
                       {"cpp_visible_ms", rounded(cpp_pub.visible_ms, 3)},
                       {"python_visible_ms", rounded(py_pub.visible_ms, 3)},
                       {"cpp_call_ms", rounded(cpp_pub.call_ms, 4)},
                       {"python_call_ms", rounded(py_pub.call_ms, 4)}};
  if (o.peer) {
    line["feed_peer"] = feed_peer;
    if (bytes > 0) line["publish_peer"] = publish_peer;
  }
  line["ratios"] = std::move(ratio_rows);
  emit_json_line(line, o.json);
  return 0;
}

}  // namespace tandem::bench
