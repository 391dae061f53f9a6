// tandem bench publish: how long the learner's publish blocks training, how soon readers see the
// new weights, and how that compares with `{k: v.cpu()}` + load_state_dict (bench/peers/publish_peer.py).
//
// The writer runs in this process: a source buffer of the chosen size (device memory on a GPU, else
// host memory) published through learner::Publisher into a fresh slab. Readers are separate
// processes (this binary re-run as the hidden `tandem bench publish-reader`): each polls `latest`,
// leases every new version, copies it out (the reader's load), checks the verify pattern
// (--verify), and reports what it saw in a result file.
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <regex>
#include <sstream>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/cuda.hpp"
#include "common/clock.hpp"
#include "common/error.hpp"
#include "learner/publisher.hpp"
#include "shm/verify_pattern.hpp"
#include "shm/weight_slab.hpp"
#include "tools/commands.hpp"

#ifdef TANDEM_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace tandem::tools {
namespace {

constexpr std::uint64_t kFinalStep = ~0ull;  // the last publish: readers stop after they read it

struct PublishBenchOptions {
  std::string bytes;
  std::string model;
  int readers = 2;
  double seconds = 5;
  bool verify = false;
  std::string json;
  bool peer = false;
  bool cpu = false;
  int device = 0;
  double interval_ms = -1;  // -1: auto (1.5 x one copy, at least 5 ms)
  std::uint32_t slots = shm::kDefaultSlots;
  std::string python = "python3";
  std::string peer_script;
};

struct ReaderOptions {
  std::string slab, result;
  double seconds = 0;
  bool verify = false;
};

std::uint64_t parse_size(const std::string& text) {
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (...) {
    used = 0;
  }
  std::string unit = text.substr(used);
  double mult = unit.empty() ? 1 : unit == "K" || unit == "k" ? 1e3 : unit == "M" ? 1e6 : unit == "G" ? 1e9
              : unit == "Ki" ? 1024.0 : unit == "Mi" ? 1048576.0 : unit == "Gi" ? 1073741824.0 : -1;
  if (used == 0 || mult < 0 || v * mult < 16)
    fail("--bytes '{}' is not a size of at least 16 bytes: use a number with an optional K, M, G (or Ki, Mi, Gi) suffix", text);
  return static_cast<std::uint64_t>(v * mult);
}

// Built-in sizes: flat bytes of the model, and a tensor count for the peer's state_dict.
struct ModelSize {
  std::uint64_t bytes;
  int tensors;
  const char* what;
};
ModelSize model_size(const PublishBenchOptions& o) {
  if (!o.bytes.empty() && !o.model.empty()) fail("pass either --bytes or --model, not both");
  if (!o.bytes.empty()) return {parse_size(o.bytes), 256, "bytes"};
  const std::string m = o.model.empty() ? "600mb" : o.model;
  // torchvision ResNet-50: 25,557,032 float32 parameters, 53,120 float32 BatchNorm statistics,
  // 53 int64 counters; 161 parameters + 159 buffers.
  if (m == "resnet50") return {25557032ull * 4 + 53120 * 4 + 53 * 8, 320, "resnet50"};
  if (m == "600mb") return {605000000ull, 256, "600mb"};
  if (m == "5gb") return {5000000000ull, 512, "5gb"};
  fail("--model '{}' is not a built-in size: use resnet50, 600mb or 5gb, or --bytes N", m);
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(q * double(v.size() - 1) + 0.5))];
}

std::string self_exe() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) fail("cannot find this program's path (/proc/self/exe) to start readers");
  return std::string(buf, static_cast<std::size_t>(n));
}

// ---- the reader process -------------------------------------------------------------------------

int run_reader(const ReaderOptions& o) {
  auto reader = shm::WeightSlabReader::attach(o.slab, 1);
  std::vector<std::byte> buf(reader.descriptor().slot_bytes);
  std::vector<double> visible_ms, load_ms;
  std::uint64_t reads = 0, torn = 0, not_increasing = 0, retries = 0, last = 0;
  const std::uint64_t deadline = monotonic_ns() + static_cast<std::uint64_t>((o.seconds + 120) * 1e9);

  // Visibility is what an actor polling `latest` observes, so a watcher thread does only that and
  // stamps each version when it first appears; the loading loop below is busy copying 100s of MB
  // and would otherwise add its own copy time to "visible".
  std::mutex seen_mutex;
  std::unordered_map<std::uint64_t, std::uint64_t> first_seen_ns;
  std::atomic<bool> stop_watching{false};
  std::jthread watcher([&] {
    for (std::uint64_t watched = 0; !stop_watching.load(std::memory_order_relaxed);) {
      const std::uint64_t v = reader.latest_version();  // one acquire load
      if (v == watched) {
        std::this_thread::yield();
        continue;
      }
      const std::uint64_t now = monotonic_ns();
      std::lock_guard lock(seen_mutex);
      first_seen_ns.emplace(v, now);
      watched = v;
    }
  });
  auto seen_at = [&](std::uint64_t version, std::uint64_t fallback) {
    std::lock_guard lock(seen_mutex);
    auto it = first_seen_ns.find(version);
    return it == first_seen_ns.end() ? fallback : it->second;
  };

  for (bool done = false; !done && monotonic_ns() < deadline;) {
    if (reader.latest_version() == last) {  // the cheap check: one atomic load
      std::this_thread::yield();
      continue;
    }
    const std::uint64_t noticed = monotonic_ns();
    auto lease = reader.lease_latest();
    if (!lease) {
      retries++;
      continue;
    }
    std::memcpy(buf.data(), lease->data(), lease->bytes());
    const std::uint64_t loaded = monotonic_ns();
    if (!lease->still_valid()) torn++;  // cannot happen under a lease; counted if it ever does
    if (lease->version() <= last) not_increasing++;
    if (o.verify && !shm::check_verify_pattern(buf.data(), lease->bytes(), lease->version())) torn++;
    done = lease->step() == kFinalStep;
    if (!done) {
      visible_ms.push_back(double(seen_at(lease->version(), noticed) - lease->snapshot_ns()) / 1e6);
      load_ms.push_back(double(loaded - noticed) / 1e6);
    }
    last = lease->version();
    reads++;
  }
  stop_watching = true;
  watcher.join();
  std::ofstream out(o.result);
  out << reads << ' ' << torn << ' ' << not_increasing << ' ' << retries << '\n';
  for (double v : visible_ms) out << v << ' ';
  out << '\n';
  for (double v : load_ms) out << v << ' ';
  out << '\n';
  return 0;
}

struct ReaderReport {
  std::uint64_t reads = 0, torn = 0, not_increasing = 0, retries = 0;
  std::vector<double> visible_ms, load_ms;
};

ReaderReport read_report(const std::string& path) {
  std::ifstream in(path);
  ReaderReport r;
  in >> r.reads >> r.torn >> r.not_increasing >> r.retries;
  std::string line;
  std::getline(in, line);
  for (auto* v : {&r.visible_ms, &r.load_ms}) {
    std::getline(in, line);
    std::istringstream values(line);
    for (double x; values >> x;) v->push_back(x);
  }
  return r;
}

// ---- the peer -----------------------------------------------------------------------------------

std::string find_peer_script(const PublishBenchOptions& o) {
  if (!o.peer_script.empty()) return o.peer_script;
  std::vector<std::string> roots;
  if (const char* env = std::getenv("TANDEM_SOURCE_ROOT")) roots.emplace_back(env);
#ifdef TANDEM_SOURCE_DIR
  roots.emplace_back(TANDEM_SOURCE_DIR);
#endif
  roots.emplace_back(".");
  for (const auto& r : roots)
    if (std::ifstream(r + "/bench/peers/publish_peer.py").good()) return r + "/bench/peers/publish_peer.py";
  fail("cannot find bench/peers/publish_peer.py: run from the source tree or pass --peer-script PATH");
}

std::string run_peer(const PublishBenchOptions& o, const ModelSize& size) {
  const std::string command = fmt::format("{} {} --bytes {} --tensors {} --seconds {} --device {} 2>&1", o.python,
                                          find_peer_script(o), size.bytes, size.tensors, std::max(2.0, o.seconds),
                                          o.cpu || cuda::device_count() == 0 ? "cpu" : fmt::format("cuda:{}", o.device));
  fmt::print("\npeer: {}\n", command);
  std::fflush(stdout);
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) fail("cannot start the peer `{}`", command);
  std::string json, line;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, pipe) != nullptr) {
    line += buf;
    if (line.back() != '\n') continue;
    fmt::print("  | {}", line);
    if (line.starts_with("{\"bench\": \"publish_peer\"")) json = line.substr(0, line.size() - 1);
    line.clear();
  }
  int status = ::pclose(pipe);
  if (status != 0 || json.empty()) fail("the peer `{}` failed (status {}): see its output above", command, status);
  return json;
}

double json_number(const std::string& json, const std::string& key) {
  std::smatch m;
  if (!std::regex_search(json, m, std::regex("\"" + key + "\": ([0-9.eE+-]+)")))
    fail("the peer's JSON line has no '{}': {}", key, json);
  return std::stod(m[1]);
}

// ---- the writer ---------------------------------------------------------------------------------

int bench_publish(const PublishBenchOptions& o) {
  const ModelSize size = model_size(o);
  const bool gpu = !o.cpu && cuda::device_count() > 0;
  if (o.readers < 0 || o.readers > 64) fail("--readers {} is out of range: use 0..64", o.readers);
  if (o.seconds <= 0) fail("--seconds must be positive");
  const std::string slab_name = shm::job_segment_name(fmt::format("bench-publish-{}", ::getpid()), "weights");

  shm::SlabSpec spec;
  spec.model = size.what;
  spec.tensors = {{"payload", shm::DType::u8, {size.bytes}, 0, size.bytes}};
  spec.slot_bytes = size.bytes;
  spec.num_slots = o.slots;
  spec.num_leases = 16 + 2 * static_cast<std::uint32_t>(o.readers);
  auto slab = shm::WeightSlabWriter::create(slab_name, spec);
  shm::UnlinkOnSignal unlink_guard(slab_name);

  // The "parameters": device memory updated on a training stream, or host memory.
  cuda::Buffer device_src;
  cuda::Stream train_stream;
  std::vector<std::byte> host_src;
  learner::PublishSource source;
  double pinned_gbps = 0;
  if (gpu) {
    cuda::set_device(o.device);
    device_src = cuda::Buffer::allocate(cuda::Buffer::Kind::device, size.bytes);
    train_stream = cuda::Stream::create(o.device);
    source = learner::PublishSource::on_device(device_src.data(), size.bytes, o.device, train_stream.get());
    // The reference: a plain D2H into cudaHostAlloc'd memory, best of 3.
    auto pinned = cuda::Buffer::allocate(cuda::Buffer::Kind::pinned_host, size.bytes);
    auto a = cuda::Event::create(true), b = cuda::Event::create(true);
    float best = 1e30f;
    for (int i = 0; i < 3; ++i) {
      a.record(train_stream.get());
      cuda::copy_async(pinned.data(), device_src.data(), size.bytes, train_stream.get());
      b.record(train_stream.get());
      b.synchronize();
      best = std::min(best, cuda::Event::elapsed_ms(a, b));
    }
    pinned_gbps = double(size.bytes) / (best * 1e6);
  } else {
    host_src.resize(size.bytes);
    source = learner::PublishSource::host(host_src.data(), size.bytes);
  }
  learner::Publisher pub(slab, source);
  auto fill = [&](std::uint64_t version) {
    if (!o.verify) return;
    if (gpu) learner::fill_verify_pattern_async(device_src.data(), size.bytes, version, train_stream.get());
    else shm::fill_verify_pattern(host_src.data(), size.bytes, version);
  };

  // Warm-up publish: registers pages, sizes the interval between publishes.
  fill(pub.next_version());
  pub.publish(0);
  pub.flush();
  auto warm = pub.take_timings();
  const double copy_ms = warm.empty() ? 1 : std::max(warm[0].d2h_ms, warm[0].snapshot_ms);
  const double interval_ms = o.interval_ms >= 0 ? o.interval_ms : std::max(5.0, 1.5 * copy_ms);
  const auto base_stats = pub.stats();

  std::vector<std::string> results;
  std::vector<pid_t> readers;
  const std::string exe = self_exe();
  for (int i = 0; i < o.readers; ++i) {
    results.push_back(fmt::format("/tmp/{}.reader{}", slab_name, i));
    pid_t pid = ::fork();
    if (pid == 0) {
      std::string seconds = fmt::format("{}", o.seconds);
      std::vector<const char*> argv = {exe.c_str(), "bench", "publish-reader", "--slab", slab_name.c_str(),
                                       "--seconds", seconds.c_str(), "--result", results.back().c_str()};
      if (o.verify) argv.push_back("--verify");
      argv.push_back(nullptr);
      ::execv(exe.c_str(), const_cast<char* const*>(argv.data()));
      std::_Exit(127);
    }
    if (pid < 0) fail("cannot fork reader {}", i);
    readers.push_back(pid);
  }
  // Wait until every reader holds its lease entry, so that no version goes unseen at the start.
  {
    auto observer = shm::WeightSlabReader::attach(slab_name, 0);
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (observer.lease_table().size() < static_cast<std::size_t>(o.readers) && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }

  fmt::print("publishing {} ({:.1f} MB) from {} every {:.1f} ms for {} s to {} reader process(es){}\n", size.what,
             size.bytes / 1e6, gpu ? fmt::format("cuda:{}", o.device) : "host memory", interval_ms, o.seconds, o.readers,
             o.verify ? ", verifying every read" : "");
  std::vector<double> call_us;
  const auto start = std::chrono::steady_clock::now();
  auto next = start;
  std::uint64_t step = 1;
  while (std::chrono::steady_clock::now() - start < std::chrono::duration<double>(o.seconds)) {
    fill(pub.next_version());
    auto t0 = std::chrono::steady_clock::now();
    pub.publish(step++);
    call_us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    next += std::chrono::microseconds(static_cast<std::int64_t>(interval_ms * 1000));
    std::this_thread::sleep_until(next);
  }
  pub.flush();
  for (int tries = 0; tries < 1000; ++tries) {  // the final version tells readers to stop
    fill(pub.next_version());
    const std::uint64_t v = pub.next_version();
    pub.publish(kFinalStep);
    pub.flush();
    if (slab.latest_version() == v) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }

  ReaderReport all;
  for (std::size_t i = 0; i < readers.size(); ++i) {
    int status = 0;
    ::waitpid(readers[i], &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) fail("reader {} failed (status {:#x})", i, status);
    ReaderReport r = read_report(results[i]);
    std::remove(results[i].c_str());
    all.reads += r.reads;
    all.torn += r.torn;
    all.not_increasing += r.not_increasing;
    all.retries += r.retries;
    all.visible_ms.insert(all.visible_ms.end(), r.visible_ms.begin(), r.visible_ms.end());
    all.load_ms.insert(all.load_ms.end(), r.load_ms.begin(), r.load_ms.end());
  }

  auto timings = pub.take_timings();
  timings.pop_back();  // the final version is not a measurement
  std::vector<double> snapshot_ms, d2h_ms, commit_ms;
  for (const auto& t : timings) {
    snapshot_ms.push_back(t.snapshot_ms);
    d2h_ms.push_back(t.d2h_ms);
    commit_ms.push_back(t.visible_ms);
  }
  const auto st = pub.stats();
  const std::uint64_t calls = st.calls - base_stats.calls - 1, skipped = st.skipped - base_stats.skipped,
                      coalesced = st.coalesced - base_stats.coalesced;
  const double bound_ms = gpu ? 1.15 * double(size.bytes) / (pinned_gbps * 1e6) : 0;
  const double blocked_ms = percentile(call_us, 0.5) / 1e3 + (gpu ? percentile(snapshot_ms, 0.5) : 0);

  fmt::print("\n{:<44} {:>10} {:>10} {:>10}\n", "", "median", "p99", "max");
  auto row = [](const char* what, const std::vector<double>& v, double scale = 1) {
    fmt::print("{:<44} {:>10.3f} {:>10.3f} {:>10.3f}\n", what, percentile(v, 0.5) * scale, percentile(v, 0.99) * scale,
               v.empty() ? 0 : *std::max_element(v.begin(), v.end()) * scale);
  };
  row("publish() call, training thread (ms)", call_us, 1e-3);
  row(gpu ? "snapshot D2D on the training stream (ms)" : "memcpy into the slot (ms)", snapshot_ms);
  if (gpu) row("D2H into the slot (ms)", d2h_ms);
  row("publish() -> committed (ms)", commit_ms);
  row("publish() -> seen by a polling reader (ms)", all.visible_ms);
  row("reader load: lease + copy out (ms)", all.load_ms);
  fmt::print("training blocked per publish (call + snapshot, median): {:.3f} ms\n", blocked_ms);
  if (gpu)
    fmt::print("pinned D2H reference: {:.1f} GB/s -> 1.15 x bytes / bandwidth = {:.2f} ms\n", pinned_gbps, bound_ms);
  fmt::print("publishes {}, committed {}, coalesced {}, skipped (no free slot) {}\n", calls, timings.size(), coalesced,
             skipped);
  fmt::print("reads {}, torn reads {}{}, versions not increasing {}, lease retries {}\n", all.reads, all.torn,
             o.verify ? "" : " (pattern not checked: pass --verify)", all.not_increasing, all.retries);

  std::string json = fmt::format(
      R"({{"bench": "publish", "model": "{}", "bytes": {}, "device": "{}", "readers": {}, "seconds": {}, "verify": {}, )"
      R"("interval_ms": {:.3f}, "publishes": {}, "committed": {}, "coalesced": {}, "skipped": {}, )"
      R"("call_ms_median": {:.4f}, "call_ms_max": {:.4f}, "snapshot_ms_median": {:.4f}, "d2h_ms_median": {:.4f}, )"
      R"("committed_ms_median": {:.4f}, "visible_ms_median": {:.4f}, "visible_ms_p99": {:.4f}, "blocked_ms_median": {:.4f}, )"
      R"("reader_load_ms_median": {:.4f}, "reads": {}, "torn_reads": {}, "not_increasing": {}, "pinned_gb_per_s": {:.2f}, "visible_bound_ms": {:.4f})",
      size.what, size.bytes, gpu ? fmt::format("cuda:{}", o.device) : "cpu", o.readers, o.seconds, o.verify, interval_ms,
      calls, timings.size(), coalesced, skipped, percentile(call_us, 0.5) / 1e3,
      call_us.empty() ? 0 : *std::max_element(call_us.begin(), call_us.end()) / 1e3, percentile(snapshot_ms, 0.5),
      percentile(d2h_ms, 0.5), percentile(commit_ms, 0.5), percentile(all.visible_ms, 0.5),
      percentile(all.visible_ms, 0.99), blocked_ms, percentile(all.load_ms, 0.5), all.reads, all.torn,
      all.not_increasing, pinned_gbps, bound_ms);
  if (o.peer) {
    const std::string peer = run_peer(o, size);
    const double sd_ms = json_number(peer, "state_dict_ms");
    const double ours_ms = o.readers > 0 ? percentile(all.visible_ms, 0.5) : percentile(commit_ms, 0.5);
    fmt::print("\nstate_dict publish (peer) {:.2f} ms vs ours {:.2f} ms visible: {:.1f}x faster; training blocked "
               "{:.2f} ms vs {:.3f} ms: {:.0f}x less\n",
               sd_ms, ours_ms, sd_ms / ours_ms, sd_ms, blocked_ms, sd_ms / std::max(blocked_ms, 1e-6));
    json += fmt::format(R"(, "peer": {}, "ratio_visible": {:.2f}, "ratio_blocked": {:.1f})", peer, sd_ms / ours_ms,
                        sd_ms / std::max(blocked_ms, 1e-6));
  }
  json += "}";
  fmt::print("{}\n", json);
  if (!o.json.empty()) std::ofstream(o.json) << json << "\n";
  return all.torn == 0 && all.not_increasing == 0 ? 0 : 1;
}

}  // namespace

void add_bench_publish(CLI::App& bench) {
  static PublishBenchOptions o;
  auto* cmd = bench.add_subcommand("publish", "weight publish latency: training blocked, D2H, visible to readers");
  cmd->add_option("--bytes", o.bytes, "flat model size (K, M, G or Ki, Mi, Gi suffixes)");
  cmd->add_option("--model", o.model, "built-in size: resnet50 (102 MB), 600mb (605 MB, default), 5gb");
  cmd->add_option("--readers", o.readers, "reader processes")->capture_default_str();
  cmd->add_option("--seconds", o.seconds, "how long to publish")->capture_default_str();
  cmd->add_flag("--verify", o.verify, "fill every publish with its version's pattern and check every read");
  cmd->add_option("--json", o.json, "also write the JSON line to this file");
  cmd->add_flag("--peer", o.peer, "also run bench/peers/publish_peer.py (state_dict publish, pinned copy) and print ratios");
  cmd->add_option("--python", o.python, "Python with torch, for --peer")->capture_default_str();
  cmd->add_option("--peer-script", o.peer_script, "path of publish_peer.py (default: found in the source tree)");
  cmd->add_flag("--cpu", o.cpu, "publish from host memory even when a GPU is visible");
  cmd->add_option("--device", o.device, "GPU index")->capture_default_str();
  cmd->add_option("--interval-ms", o.interval_ms, "time between publishes (default: 1.5 x one copy, >= 5 ms; 0: flat out)");
  cmd->add_option("--slots", o.slots, "slab slots")->capture_default_str();
  on_run(cmd, [] { return bench_publish(o); });

  static ReaderOptions r;
  auto* reader = bench.add_subcommand("publish-reader", "");  // internal: one reader process of `bench publish`
  reader->group("");
  reader->add_option("--slab", r.slab)->required();
  reader->add_option("--result", r.result)->required();
  reader->add_option("--seconds", r.seconds);
  reader->add_flag("--verify", r.verify);
  on_run(reader, [] { return run_reader(r); });
}

}  // namespace tandem::tools
