#include "datasets/preload.hpp"

#include <pthread.h>
#include <signal.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>

#include "common/error.hpp"
#include "datasets/cifar_reader.hpp"
#include "datasets/idx_reader.hpp"
#include "datasets/npy_reader.hpp"

namespace fs = std::filesystem;

namespace tandem::data {

std::string detect_format(const fs::path& dir) {
  if (!fs::is_directory(dir))
    fail("--from {}: no such directory: point it at the folder holding the dataset files", dir.string());
  if (looks_like_idx(dir)) return "idx";
  if (looks_like_cifar10(dir)) return "cifar10";
  if (looks_like_npy(dir)) return "npy";
  fail(
      "cannot tell the format of {}: expected IDX files (train-images-idx3-ubyte[.gz], ...), CIFAR-10 "
      "batches (data_batch_1.bin, ...) or x_train.npy/y_train.npy; pass --format idx|cifar10|npy",
      dir.string());
}

LoadPlan plan_load(const fs::path& dir, std::string format) {
  if (format.empty()) format = detect_format(dir);
  if (!fs::is_directory(dir)) fail("--from {}: no such directory", dir.string());
  if (format == "idx") return plan_idx(dir);
  if (format == "cifar10") return plan_cifar10(dir);
  if (format == "npy") return plan_npy(dir);
  fail("unknown --format '{}': use idx, cifar10 or npy", format);
}

namespace {

// Blocks SIGINT, SIGTERM and SIGHUP for the calling thread while it lives; pending ones are
// delivered when it is destroyed.
class BlockTerminationSignals {
 public:
  BlockTerminationSignals() {
    sigset_t set;
    sigemptyset(&set);
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&set, sig);
    pthread_sigmask(SIG_BLOCK, &set, &previous_);
  }
  ~BlockTerminationSignals() { pthread_sigmask(SIG_SETMASK, &previous_, nullptr); }
  BlockTerminationSignals(const BlockTerminationSignals&) = delete;
  BlockTerminationSignals& operator=(const BlockTerminationSignals&) = delete;

 private:
  sigset_t previous_;
};

// Runs the jobs on up to `threads` threads, biggest first. The first failure stops the others
// (they check sink.stopped() between pieces) and is rethrown here.
void run_jobs(std::vector<LoadJob>& jobs, std::vector<std::byte*> fields, unsigned threads,
              const std::function<void(std::uint64_t, std::uint64_t)>& progress) {
  std::sort(jobs.begin(), jobs.end(), [](const LoadJob& a, const LoadJob& b) { return a.bytes > b.bytes; });
  std::uint64_t total = 0;
  for (const auto& j : jobs) total += j.bytes;
  std::atomic<std::uint64_t> done{0};
  std::atomic<std::size_t> next{0};
  std::atomic<bool> stop{false};
  std::exception_ptr error;
  std::mutex error_mutex;

  JobSink sink{std::move(fields),
               [&](std::uint64_t n) {
    std::uint64_t now = done.fetch_add(n, std::memory_order_relaxed) + n;
    if (progress) progress(now, total);
               },
               &stop};
  auto worker = [&] {
    for (std::size_t i; !stop.load() && (i = next.fetch_add(1)) < jobs.size();) {
      try {
        jobs[i].run(sink);
      } catch (...) {
        std::lock_guard lock(error_mutex);
        if (!error) error = std::current_exception();
        stop.store(true);
      }
    }
  };
  {
    std::vector<std::jthread> pool;
    for (unsigned t = 0; t < std::min<std::size_t>(threads, jobs.size()); ++t) pool.emplace_back(worker);
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace

PreloadResult preload(const PreloadOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  const std::string segment = shm::dataset_segment_name(o.name);  // checks the name first
  LoadPlan plan = plan_load(o.from, o.format);
  plan.spec.name = o.name;
  fs::path source = fs::absolute(o.from).lexically_normal();
  plan.spec.source = (source.has_filename() ? source : source.parent_path()).string();  // no trailing '/'

  // A signal that arrives while the segment is being created waits (blocked) until the guard that
  // removes the segment is in place; before creation succeeds the name may be someone else's.
  std::optional<shm::UnlinkOnSignal> unlink_if_interrupted;
  std::optional<shm::DatasetWriter> created;
  {
    BlockTerminationSignals hold;
    created.emplace(shm::DatasetWriter::create(plan.spec, o.force));
    unlink_if_interrupted.emplace(segment);
  }
  shm::DatasetWriter& writer = *created;

  const auto& d = writer.descriptor();
  std::vector<std::byte*> fields;
  PreloadResult result{segment, plan.spec.format, d.num_samples};
  for (std::uint32_t i = 0; i < d.num_fields; ++i) {
    fields.push_back(writer.field_data(i));
    result.payload_bytes += d.fields[i].bytes;
  }
  const unsigned threads = o.threads ? o.threads : std::max(1u, std::thread::hardware_concurrency());
  run_jobs(plan.jobs, std::move(fields), threads, o.progress);

  result.load_ns = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count());
  writer.commit(result.load_ns, threads);
  result.checksum = writer.descriptor().payload_checksum;
  return result;
}

}  // namespace tandem::data
