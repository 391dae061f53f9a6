// GPU: the device weight slab across processes through CUDA IPC: the publisher's D2D into a device
// slot, readers in other processes leasing and reading it in place, a fast writer against verifying
// readers, a reader SIGKILLed while it holds a mapping and a lease, a handle that is not one.
// Skips (77) without a GPU. CUDA IPC needs separate processes: every reader is a child of this binary.
#include <doctest/doctest.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <thread>
#include <vector>

#include "common/clock.hpp"
#include "common/cuda_ipc.hpp"
#include "learner/publisher.hpp"
#include "shm/verify_pattern.hpp"
#include "shm/weight_slab.hpp"
#include "tests/harness.hpp"

TANDEM_GPU_TEST_BINARY();

using namespace tandem;
using learner::Publisher;
using shm::WeightSlabReader;
using shm::WeightSlabWriter;

namespace {

constexpr std::uint64_t kFinalStep = ~0ull;

shm::SlabSpec spec_of(std::size_t bytes, std::uint32_t slots) {
  shm::SlabSpec spec;
  spec.model = "gpu-device-slab";
  spec.tensors = {{"payload", shm::DType::u8, {bytes}, 0, bytes}};
  spec.slot_bytes = bytes;
  spec.num_slots = slots;
  spec.num_leases = 16;
  return spec;
}

// A learner's two slabs on GPU 0: the host slab and the device slab beside it, as ModelPublisher makes them.
struct Slabs {
  std::string host_name, device_name;
  WeightSlabWriter host;
  learner::OwnedDeviceSlab device_slab;
  WeightSlabWriter& device;

  Slabs(const std::string& stem, std::size_t bytes, std::uint32_t slots = 4)
      : host_name(test::unique_name(stem)),
        device_name(shm::device_slab_name(host_name)),
        device_slab(learner::OwnedDeviceSlab::create(device_name, spec_of(bytes, slots), 0)),
        device(device_slab.writer) {
    host = WeightSlabWriter::create(host_name, spec_of(bytes, slots));
  }
};

// A reader process's view: the device slab attached, its slots mapped on GPU 0.
struct MappedReader {
  WeightSlabReader reader;
  cuda::IpcMapping mapping;
  explicit MappedReader(const std::string& name) : reader(WeightSlabReader::attach_device(name, 1)) {
    cuda::IpcHandle h;
    std::memcpy(h.data(), reader.device_info().ipc_handle, h.size());
    mapping = cuda::IpcMapping::open(h, 0);
    reader.bind_device_slots(static_cast<const std::byte*>(mapping.data()));
  }
};

template <class Pred>
bool wait_until(Pred pred, std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// What a "device-reader" child wrote (reads torn not_increasing max_visible_us); the file is removed.
// A missing or short file reads as torn.
struct ReaderResult {
  std::uint64_t reads = 0, torn = 1, not_increasing = 1;
  double max_visible_us = 0;
};
ReaderResult reader_result(const std::string& path) {
  ReaderResult r;
  std::ifstream(path) >> r.reads >> r.torn >> r.not_increasing >> r.max_visible_us;
  std::remove(path.c_str());
  return r;
}

}  // namespace

// args: device slab name, result file. Leases every new version, copies it D2H under the lease,
// verifies the pattern, until the final step. Writes: reads torn not_increasing max_visible_us.
TANDEM_CHILD("device-reader") {
  const auto& args = test::child_args();
  MappedReader m(args.at(0));
  std::vector<std::byte> host(m.reader.descriptor().slot_bytes);
  std::uint64_t reads = 0, torn = 0, not_increasing = 0, last = 0;
  double max_visible_us = 0;
  for (bool done = false; !done;) {
    if (m.reader.latest_version() == last) continue;
    auto lease = m.reader.lease_latest();
    if (!lease) continue;
    const double visible_us = double(monotonic_ns() - lease->snapshot_ns()) / 1e3;
    TANDEM_CUDA_CHECK(cudaMemcpy(host.data(), lease->data(), lease->bytes(), cudaMemcpyDeviceToHost));
    if (!lease->still_valid() || !shm::check_verify_pattern(host.data(), lease->bytes(), lease->version())) torn++;
    if (lease->version() <= last) not_increasing++;
    last = lease->version();
    done = lease->step() == kFinalStep;
    reads++;
    if (visible_us > max_visible_us) max_visible_us = visible_us;
  }
  std::ofstream(args.at(1)) << reads << ' ' << torn << ' ' << not_increasing << ' ' << max_visible_us << '\n';
  return 0;
}

// args: device slab name. Maps the slab, leases the latest version and holds lease and mapping until killed.
TANDEM_CHILD("device-lease-holder") {
  MappedReader m(test::child_args().at(0));
  if (!wait_until([&] { return m.reader.latest_version() > 0; })) return 3;
  auto lease = m.reader.lease_latest();
  if (!lease) return 4;
  for (;;) ::pause();
}

TEST_CASE("device slab (CUDA): a publish reaches the device slab before the host slab, intact in another process" *
          doctest::timeout(120)) {
  constexpr std::size_t kBytes = 64ull << 20;
  Slabs slabs("tandem.test-gpu-devslab", kBytes);
  auto train = cuda::Stream::create(0);
  auto src = cuda::Buffer::allocate(cuda::Buffer::Kind::device, kBytes);
  Publisher pub(slabs.host, learner::PublishSource::on_device(src.data(), kBytes, 0, train.get()), {},
                {&slabs.device_slab});

  const std::string result = fmt::format("/tmp/{}-reader", slabs.host_name);
  test::Child reader = test::spawn_child("device-reader", {slabs.device_name, result});
  for (std::uint64_t i = 1; i <= 20; ++i) {
    learner::fill_verify_pattern_async(src.data(), kBytes, pub.next_version(), train.get());
    CHECK(pub.publish(i == 20 ? kFinalStep : i).outcome == Publisher::Outcome::in_flight);
    pub.flush();
  }
  int status = -1;
  REQUIRE(reader.wait_for(std::chrono::seconds(60), status));
  CHECK(status == 0);
  const ReaderResult read = reader_result(result);
  CHECK(read.reads >= 1);
  CHECK(read.torn == 0);
  CHECK(read.not_increasing == 0);
  const auto timings = pub.take_timings();
  REQUIRE(timings.size() == 20);
  for (const auto& t : timings) {
    CHECK(t.device_copy_ms > 0);
    CHECK(t.device_visible_ms <= t.visible_ms);  // committed to the device slab first
  }
  CHECK(pub.stats().device_committed == 20);
  CHECK(slabs.host.latest_version() == slabs.device.latest_version());
  MESSAGE(fmt::format("64 MiB: device copy {:.3f} ms, device visible {:.3f} ms, host visible {:.3f} ms",
                      timings.back().device_copy_ms, timings.back().device_visible_ms, timings.back().visible_ms));
}

TEST_CASE(
    "device slab (CUDA): 3 reader processes verifying every read under a writer publishing flat out see 0 torn reads" *
    doctest::timeout(180)) {
  constexpr std::size_t kBytes = 16ull << 20;
  Slabs slabs("tandem.test-gpu-devslab-fast", kBytes);
  auto train = cuda::Stream::create(0);
  auto src = cuda::Buffer::allocate(cuda::Buffer::Kind::device, kBytes);
  Publisher pub(slabs.host, learner::PublishSource::on_device(src.data(), kBytes, 0, train.get()), {},
                {&slabs.device_slab});
  std::vector<test::Child> readers;
  std::vector<std::string> results;
  for (int i = 0; i < 3; ++i) {
    results.push_back(fmt::format("/tmp/{}-reader{}", slabs.host_name, i));
    readers.push_back(test::spawn_child("device-reader", {slabs.device_name, results.back()}));
  }
  const auto start = std::chrono::steady_clock::now();
  std::uint64_t step = 0;
  while (std::chrono::steady_clock::now() - start < std::chrono::seconds(5)) {
    learner::fill_verify_pattern_async(src.data(), kBytes, pub.next_version(), train.get());
    (void)pub.publish(++step);  // coalesced and skipped publishes are fine; torn reads are not
  }
  for (;;) {  // the final version must land in the device slab so that every reader stops
    pub.flush();
    const std::uint64_t v = pub.next_version();
    learner::fill_verify_pattern_async(src.data(), kBytes, v, train.get());
    (void)pub.publish(kFinalStep);
    pub.flush();
    if (slabs.device.latest_version() == v) break;
  }
  for (std::size_t i = 0; i < readers.size(); ++i) {
    int status = -1;
    REQUIRE(readers[i].wait_for(std::chrono::seconds(60), status));
    CHECK(status == 0);
    const ReaderResult read = reader_result(results[i]);
    MESSAGE(fmt::format("reader {}: {} reads, {} torn", i, read.reads, read.torn));
    CHECK(read.reads > 20);
    CHECK(read.torn == 0);
    CHECK(read.not_increasing == 0);
  }
  CHECK(pub.stats().device_committed > 50);
}

TEST_CASE(
    "device slab (CUDA): a reader SIGKILLed while mapped and leasing leaves the writer and another reader running" *
    doctest::timeout(120)) {
  constexpr std::size_t kBytes = 8ull << 20;
  // Two slots: the latest and the dead reader's, so the writer must reclaim the dead lease to go on.
  Slabs slabs("tandem.test-gpu-devslab-kill", kBytes, 2);
  auto train = cuda::Stream::create(0);
  auto src = cuda::Buffer::allocate(cuda::Buffer::Kind::device, kBytes);
  Publisher pub(slabs.host, learner::PublishSource::on_device(src.data(), kBytes, 0, train.get()), {},
                {&slabs.device_slab});
  learner::fill_verify_pattern_async(src.data(), kBytes, pub.next_version(), train.get());
  (void)pub.publish(1);
  pub.flush();

  test::Child holder = test::spawn_child("device-lease-holder", {slabs.device_name});
  WeightSlabReader observer = WeightSlabReader::attach_device(slabs.device_name, 0);
  REQUIRE(wait_until([&] {
    for (const auto& row : observer.lease_table())
      if (row.owner_pid == static_cast<std::uint32_t>(holder.pid()) && row.has_lease) return true;
    return false;
  }));
  const std::string result = fmt::format("/tmp/{}-survivor", slabs.host_name);
  test::Child survivor = test::spawn_child("device-reader", {slabs.device_name, result});
  holder.kill(SIGKILL);
  CHECK(holder.wait() == 128 + SIGKILL);

  for (std::uint64_t step = 2; step < 40; ++step) {
    learner::fill_verify_pattern_async(src.data(), kBytes, pub.next_version(), train.get());
    (void)pub.publish(step);
    pub.flush();
  }
  for (;;) {
    const std::uint64_t v = pub.next_version();
    learner::fill_verify_pattern_async(src.data(), kBytes, v, train.get());
    (void)pub.publish(kFinalStep);
    pub.flush();
    if (slabs.device.latest_version() == v) break;
  }
  int status = -1;
  REQUIRE(survivor.wait_for(std::chrono::seconds(60), status));
  CHECK(status == 0);
  const ReaderResult read = reader_result(result);
  CHECK(read.reads >= 1);
  CHECK(read.torn == 0);
  // The dead reader's lease is gone: the writer reclaims it when it needs the slot, or the survivor
  // does when it claims its entries after the kill (a race either may win).
  for (const auto& row : observer.lease_table())
    CHECK_FALSE((row.owner_pid == static_cast<std::uint32_t>(holder.pid()) && row.has_lease));
  CHECK(pub.stats().device_committed >= 20);  // the survivor's own leases may skip a few
}

TEST_CASE("device slab (CUDA): a handle that names no allocation fails to map with one CUDA error, no crash") {
  cuda::IpcHandle junk{};
  for (std::size_t i = 0; i < junk.size(); ++i) junk[i] = static_cast<std::uint8_t>(i * 7 + 1);
  CHECK_THROWS_WITH_AS(cuda::IpcMapping::open(junk, 0), doctest::Contains("cudaIpcOpenMemHandle"), CallError);
}
