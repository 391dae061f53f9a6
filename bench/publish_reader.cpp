#include "bench/publish_reader.hpp"

#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "common/clock.hpp"
#include "common/cuda.hpp"
#include "common/cuda_ipc.hpp"
#include "common/error.hpp"
#include "shm/verify_pattern.hpp"
#include "shm/weight_slab.hpp"
#include "bench/bench_json.hpp"
#include "bench/publish_options.hpp"

namespace tandem::bench {

void ReaderReport::add(const ReaderReport& other) {
  reads += other.reads;
  torn += other.torn;
  not_increasing += other.not_increasing;
  retries += other.retries;
  visible_ms.insert(visible_ms.end(), other.visible_ms.begin(), other.visible_ms.end());
  load_ms.insert(load_ms.end(), other.load_ms.begin(), other.load_ms.end());
}

namespace {

void write_report(const ReaderReport& r, const std::string& path) {
  const Json j = {
      {"reads", r.reads},           {"torn", r.torn},      {"not_increasing", r.not_increasing}, {"retries", r.retries},
      {"visible_ms", r.visible_ms}, {"load_ms", r.load_ms}};
  std::ofstream(path) << j.dump() << "\n";
}

ReaderReport read_report(const std::string& path) {
  std::ifstream in(path);
  const Json j = Json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) fail("the reader's result file {} is not JSON: the reader died while writing it", path);
  ReaderReport r;
  r.reads = j.at("reads");
  r.torn = j.at("torn");
  r.not_increasing = j.at("not_increasing");
  r.retries = j.at("retries");
  r.visible_ms = j.at("visible_ms").get<std::vector<double>>();
  r.load_ms = j.at("load_ms").get<std::vector<double>>();
  return r;
}

}  // namespace

// Where a reader loads each version: host memory, or (device slab) its own GPU buffer, standing in
// for an actor's model parameters; verify then copies that buffer back to check the pattern.
struct Loader {
  std::vector<std::byte> host;
  cuda::IpcMapping mapping;
  cuda::Buffer device;
  cuda::Stream stream;

  Loader(shm::WeightSlabReader& reader, int cuda_device) : host(reader.descriptor().slot_bytes) {
    if (cuda_device < 0) return;
    cuda::IpcHandle handle;
    std::memcpy(handle.data(), reader.device_info().ipc_handle, handle.size());
    mapping = cuda::IpcMapping::open(handle, cuda_device);
    reader.bind_device_slots(static_cast<const std::byte*>(mapping.data()));
    device = cuda::Buffer::allocate(cuda::Buffer::Kind::device, host.size());
    stream = cuda::Stream::create(cuda_device);
  }
  // The lease stays held until the copy has finished: synchronous on our stream.
  void copy(void* dst, const void* src, std::size_t bytes) {
    cuda::copy_async(dst, src, bytes, stream.get());
    stream.synchronize();
  }
  void load(const shm::ReadLease& lease) {
    if (device.data() == nullptr) {
      std::memcpy(host.data(), lease.data(), lease.bytes());
      return;
    }
    copy(device.data(), lease.data(), lease.bytes());
  }
  bool verify(const shm::ReadLease& lease) {
    if (device.data() != nullptr) copy(host.data(), device.data(), lease.bytes());
    return shm::check_verify_pattern(host.data(), lease.bytes(), lease.version());
  }
};

int run_reader(const ReaderOptions& o) {
  auto reader = o.cuda_device >= 0 ? shm::WeightSlabReader::attach_device(o.slab, 1)
                                   : shm::WeightSlabReader::attach(o.slab, 1);
  Loader loader(reader, o.cuda_device);
  ReaderReport report;
  std::uint64_t last = 0;
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
  // A version published before the watcher ran (while a device reader was still creating its CUDA
  // context, say) was not seen as it appeared: it is read, but not timed.
  const std::uint64_t watching_since = monotonic_ns();
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
      report.retries++;
      continue;
    }
    loader.load(*lease);
    const std::uint64_t loaded = monotonic_ns();
    if (!lease->still_valid()) report.torn++;  // cannot happen under a lease; counted if it ever does
    if (lease->version() <= last) report.not_increasing++;
    if (o.verify && !loader.verify(*lease)) report.torn++;
    done = lease->step() == kFinalStep;
    if (!done && lease->snapshot_ns() >= watching_since) {
      report.visible_ms.push_back(double(seen_at(lease->version(), noticed) - lease->snapshot_ns()) / 1e6);
      report.load_ms.push_back(double(loaded - noticed) / 1e6);
    }
    last = lease->version();
    report.reads++;
  }
  stop_watching = true;
  watcher.join();
  write_report(report, o.result);
  return 0;
}

pid_t spawn_reader(const std::string& exe, const ReaderOptions& o) {
  const std::string seconds = fmt::format("{}", o.seconds);
  std::vector<const char*> argv = {exe.c_str(), "publish-reader", "--slab",   o.slab.c_str(),
                                   "--seconds", seconds.c_str(),  "--result", o.result.c_str()};
  if (o.verify) argv.push_back("--verify");
  const std::string cuda_device = std::to_string(o.cuda_device);
  if (o.cuda_device >= 0) {
    argv.push_back("--cuda-device");
    argv.push_back(cuda_device.c_str());
  }
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execv(exe.c_str(), const_cast<char* const*>(argv.data()));
    std::_Exit(127);
  }
  if (pid < 0) fail("cannot fork a reader process: {}", std::strerror(errno));
  return pid;
}

ReaderReport collect_reader(pid_t pid, const std::string& result) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) fail("reader {} failed (status {:#x})", pid, status);
  ReaderReport r = read_report(result);
  std::remove(result.c_str());
  return r;
}

}  // namespace tandem::bench
