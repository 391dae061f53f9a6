#include "bench/publish_writer.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <thread>

#include "common/cuda.hpp"
#include "common/cuda_ipc.hpp"
#include "common/error.hpp"
#include "common/process.hpp"
#include "learner/publisher.hpp"
#include "shm/verify_pattern.hpp"
#include "shm/weight_slab.hpp"

namespace tandem::bench {
namespace {

// The "parameters": device memory updated on a training stream, or host memory.
struct ParameterSource {
  cuda::Buffer device_src;
  cuda::Stream train_stream;
  std::vector<std::byte> host_src;
  learner::PublishSource source;
  double pinned_gbps = 0;

  ParameterSource(bool gpu, int device, std::uint64_t bytes) {
    if (!gpu) {
      host_src.resize(bytes);
      source = learner::PublishSource::host(host_src.data(), bytes);
      return;
    }
    cuda::set_device(device);
    device_src = cuda::Buffer::allocate(cuda::Buffer::Kind::device, bytes);
    train_stream = cuda::Stream::create(device);
    source = learner::PublishSource::on_device(device_src.data(), bytes, device, train_stream.get());
    // The reference: a plain D2H into cudaHostAlloc'd memory, best of 3.
    auto pinned = cuda::Buffer::allocate(cuda::Buffer::Kind::pinned_host, bytes);
    auto a = cuda::Event::create(true), b = cuda::Event::create(true);
    float best = 1e30f;
    for (int i = 0; i < 3; ++i) {
      a.record(train_stream.get());
      cuda::copy_async(pinned.data(), device_src.data(), bytes, train_stream.get());
      b.record(train_stream.get());
      b.synchronize();
      best = std::min(best, cuda::Event::elapsed_ms(a, b));
    }
    pinned_gbps = double(bytes) / (best * 1e6);
  }

  // GB/s of one plain copy of the parameters to GPU `peer`, best of 3: what a peer reader's load is
  // measured against.
  double peer_gbps(int device, int peer) const {
    cuda::enable_peer_access(device, peer);
    cuda::set_device(peer);
    auto there = cuda::Buffer::allocate(cuda::Buffer::Kind::device, device_src.size());
    cuda::set_device(device);
    auto a = cuda::Event::create(true), b = cuda::Event::create(true);
    float best = 1e30f;
    for (int i = 0; i < 3; ++i) {
      a.record(train_stream.get());
      cuda::copy_async(there.data(), device_src.data(), device_src.size(), train_stream.get());
      b.record(train_stream.get());
      b.synchronize();
      best = std::min(best, cuda::Event::elapsed_ms(a, b));
    }
    return double(device_src.size()) / (best * 1e6);
  }

  // Writes version's verify pattern into the parameters, in training-stream order on a GPU.
  void fill_verify_pattern(std::uint64_t version) {
    if (device_src.data() != nullptr)
      learner::fill_verify_pattern_async(device_src.data(), device_src.size(), version, train_stream.get());
    else shm::fill_verify_pattern(host_src.data(), host_src.size(), version);
  }
};

shm::SlabSpec slab_spec(const PublishBenchOptions& o, const ModelSize& size) {
  shm::SlabSpec spec;
  spec.model = size.what;
  spec.tensors = {{"payload", shm::DType::u8, {size.bytes}, 0, size.bytes}};
  spec.slot_bytes = size.bytes;
  spec.num_slots = o.slots;
  spec.num_leases = 16 + 2 * static_cast<std::uint32_t>(o.readers);
  return spec;
}

// Waits until every reader holds its lease entry, so that no version goes unseen at the start.
void wait_for_readers(const std::string& slab_name, int readers, bool device) {
  if (readers == 0) return;
  auto observer = device ? shm::WeightSlabReader::attach_device(slab_name, 0)
                         : shm::WeightSlabReader::attach(slab_name, 0);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (observer.lease_table().size() < static_cast<std::size_t>(readers) && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

}  // namespace

PublishMeasurement measure_publish(const PublishBenchOptions& o, const ModelSize& size) {
  PublishMeasurement m;
  m.bytes = size.bytes;
  m.gpu = !o.cpu && cuda::device_count() > 0;
  if (o.device_readers > 0 && !m.gpu)
    fail("--device-readers {} needs the publisher on a GPU ({}): drop it, or run where a GPU is visible",
         o.device_readers, o.cpu ? "--cpu was given" : "no GPU is visible");
  const int gpus = cuda::device_count();
  if (o.peer_gpu_readers > 0 && (!m.gpu || gpus < 2))
    fail("--peer-gpu-readers {} needs the publisher on a GPU and another GPU beside it ({} visible): drop it",
         o.peer_gpu_readers, gpus);
  const std::string slab_name = shm::job_segment_name(fmt::format("bench-publish-{}", ::getpid()), shm::Kind::weights);
  auto slab = shm::WeightSlabWriter::create(slab_name, slab_spec(o, size));
  shm::UnlinkOnSignal unlink_guard(slab_name);

  ParameterSource params(m.gpu, o.device, size.bytes);
  m.pinned_gbps = params.pinned_gbps;
  m.device_readers = m.gpu ? (o.device_readers < 0 ? 1 : o.device_readers) : 0;
  m.peer_readers = o.peer_gpu_readers;
  if (m.peer_readers > 0) m.peer_gbps = params.peer_gbps(o.device, (o.device + 1) % gpus);
  // The device slabs, as learner::ModelPublisher makes them: the publishing GPU's, then with --chain
  // one on each peer reader's GPU. UnlinkOnSignal guards one name (the host slab's); an interrupted run
  // leaves the device slabs to `tandem shm gc`, which removes segments whose creator is gone.
  auto peer_gpu = [&](int i) { return (o.device + 1 + i % (gpus - 1)) % gpus; };
  std::vector<int> slab_gpus;
  if (m.device_readers + m.peer_readers > 0) slab_gpus.push_back(o.device);
  for (int i = 0; o.chain && i < std::min(m.peer_readers, gpus - 1); ++i) slab_gpus.push_back(peer_gpu(i));
  m.chain_gpus = std::max(0, static_cast<int>(slab_gpus.size()) - 1);
  std::vector<learner::OwnedDeviceSlab> device_slabs;
  std::vector<learner::OwnedDeviceSlab*> device_slab_ptrs;
  device_slabs.reserve(slab_gpus.size());
  device_slab_ptrs.reserve(slab_gpus.size());
  for (unsigned copy = 0; copy < slab_gpus.size(); ++copy)
    device_slabs.push_back(
        learner::OwnedDeviceSlab::create(shm::device_slab_name(slab_name, copy), slab_spec(o, size), slab_gpus[copy]));
  for (auto& d : device_slabs) device_slab_ptrs.push_back(&d);
  if (m.gpu) cuda::set_device(o.device);
  // The device slab a reader on `gpu` loads from: its own GPU's with --chain, else the publishing GPU's.
  auto device_slab_for = [&](int gpu) {
    const auto it = std::find(slab_gpus.begin(), slab_gpus.end(), gpu);
    return shm::device_slab_name(slab_name, it == slab_gpus.end() ? 0 : unsigned(it - slab_gpus.begin()));
  };
  learner::PublisherOptions when;
  when.overlap_host_copy = !o.copy_in_call;  // as the learner publishes on the CPU: the copy overlaps the step
  learner::Publisher pub(slab, params.source, when, device_slab_ptrs);
  auto fill = [&](std::uint64_t version) {
    if (o.verify) params.fill_verify_pattern(version);
  };

  // Warm-up publish: registers pages, sizes the interval between publishes.
  fill(pub.next_version());
  (void)pub.publish(0);  // the warm-up's outcome shows in its timing, or in the lack of one
  pub.flush();
  auto warm = pub.take_timings();
  const double copy_ms = warm.empty() ? 1 : std::max(warm[0].d2h_ms, warm[0].snapshot_ms);
  m.interval_ms = o.interval_ms >= 0 ? o.interval_ms : std::max(5.0, 1.5 * copy_ms);
  const auto base_stats = pub.stats();

  std::vector<ReaderOptions> readers;
  std::vector<pid_t> pids;
  const std::string exe = self_exe().string();
  for (int i = 0; i < o.readers; ++i) {
    readers.push_back({slab_name, fmt::format("/tmp/{}.reader{}", slab_name, i), o.seconds, o.verify});
    pids.push_back(spawn_reader(exe, readers.back()));
  }
  std::map<std::string, int> readers_of;  // device slab name -> its readers
  for (int i = 0; i < m.device_readers + m.peer_readers; ++i) {
    const int gpu = i < m.device_readers ? o.device : peer_gpu(i - m.device_readers);
    const std::string name = device_slab_for(gpu);
    readers.push_back({name, fmt::format("/tmp/{}.reader{}", name, i), o.seconds, o.verify, gpu});
    pids.push_back(spawn_reader(exe, readers.back()));
    readers_of[name]++;
  }
  wait_for_readers(slab_name, o.readers, false);
  for (const auto& [name, count] : readers_of) wait_for_readers(name, count, true);

  fmt::print(
      "publishing {} ({:.1f} MB) from {} every {:.1f} ms for {} s to {} reader process(es), {} same-GPU and {} "
      "other-GPU device-slab reader(s){}{}\n",
      size.what, size.bytes / 1e6, m.gpu ? fmt::format("cuda:{}", o.device) : "host memory", m.interval_ms, o.seconds,
      o.readers, m.device_readers, m.peer_readers,
      m.chain_gpus > 0 ? fmt::format(", device slabs on {} other GPUs (chain)", m.chain_gpus) : "",
      o.verify ? ", verifying every read" : "");
  const auto start = std::chrono::steady_clock::now();
  auto next = start;
  std::uint64_t step = 1;
  using us = std::chrono::duration<double, std::micro>;
  while (std::chrono::steady_clock::now() - start < std::chrono::duration<double>(o.seconds)) {
    // The sleep below stands for forward and backward; fill, for the optimizer step that the fence guards.
    auto t0 = std::chrono::steady_clock::now();
    pub.wait_before_update();
    if (!m.gpu && step > 1) m.fence_us.push_back(us(std::chrono::steady_clock::now() - t0).count());
    fill(pub.next_version());
    t0 = std::chrono::steady_clock::now();
    (void)pub.publish(step++);  // skips and coalesces are counted in stats() and reported
    m.call_us.push_back(us(std::chrono::steady_clock::now() - t0).count());
    const auto interval = std::chrono::microseconds(static_cast<std::int64_t>(m.interval_ms * 1000));
    next += interval;
    // CPU: the whole interval stands for forward and backward, which the copy overlaps; the fill
    // (the optimizer step) comes on top, as it does in training. GPU: a fixed publish cadence.
    if (m.gpu) std::this_thread::sleep_until(next);
    else std::this_thread::sleep_for(interval);
  }
  pub.flush();
  for (int tries = 0; tries < 1000; ++tries) {  // the final version tells readers to stop
    fill(pub.next_version());
    const std::uint64_t v = pub.next_version();
    (void)pub.publish(kFinalStep);  // committed when `latest` shows it; retried otherwise
    pub.flush();
    if (slab.latest_version() == v && std::all_of(device_slabs.begin(), device_slabs.end(),
                                                  [&](const auto& d) { return d.writer.latest_version() == v; }))
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }

  for (std::size_t i = 0; i < pids.size(); ++i) {
    const int gpu = readers[i].cuda_device;
    (gpu < 0 ? m.readers : gpu == o.device ? m.device : m.peer).add(collect_reader(pids[i], readers[i].result));
  }

  auto timings = pub.take_timings();
  timings.pop_back();              // the final version is not a measurement
  for (const auto& t : timings) {  // a version only one slab took has zeros for the other
    m.snapshot_ms.push_back(t.snapshot_ms);
    if (t.visible_ms > 0) {
      m.d2h_ms.push_back(t.d2h_ms);
      m.commit_ms.push_back(t.visible_ms);
    }
    if (!device_slabs.empty() && t.device_visible_ms > 0) {
      m.device_copy_ms.push_back(t.device_copy_ms);
      m.device_commit_ms.push_back(t.device_visible_ms);
    }
    if (t.peers_visible_ms > 0) {
      m.peers_copy_ms.push_back(t.peers_copy_ms);
      m.peers_commit_ms.push_back(t.peers_visible_ms);
    }
  }
  const auto st = pub.stats();
  m.calls = st.calls - base_stats.calls - 1;
  m.skipped = st.skipped - base_stats.skipped;
  m.coalesced = st.coalesced - base_stats.coalesced;
  m.device_skipped = st.device_skipped - base_stats.device_skipped;
  return m;
}

}  // namespace tandem::bench
