#include "bench/publish_report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/cuda.hpp"
#include "bench/bench_json.hpp"
#include "bench/peer_process.hpp"

namespace tandem::bench {
namespace {

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(std::lround(q * double(v.size() - 1))))];
}

double max_of(const std::vector<double>& v) { return v.empty() ? 0 : *std::max_element(v.begin(), v.end()); }

// CPU: each publish's call plus the fence that followed it (the copy overlaps the sleep between).
std::vector<double> blocked_us(const PublishMeasurement& m) {
  std::vector<double> out = m.call_us;
  for (std::size_t i = 0; i < out.size() && i < m.fence_us.size(); ++i) out[i] += m.fence_us[i];
  return out;
}

void print_table(const PublishBenchOptions& o, const PublishMeasurement& m, double blocked_ms, double bound_ms) {
  fmt::print("\n{:<44} {:>10} {:>10} {:>10}\n", "", "median", "p99", "max");
  auto row = [](const char* what, const std::vector<double>& v, double scale = 1) {
    fmt::print("{:<44} {:>10.3f} {:>10.3f} {:>10.3f}\n", what, percentile(v, 0.5) * scale, percentile(v, 0.99) * scale,
               max_of(v) * scale);
  };
  row("publish() call, training thread (ms)", m.call_us, 1e-3);
  if (!m.gpu) row("fence before the update, training thread (ms)", m.fence_us, 1e-3);
  if (!m.gpu) row("training blocked: call + fence (ms)", blocked_us(m), 1e-3);
  row(m.gpu ? "snapshot D2D on the training stream (ms)" : "memcpy into the slot (ms)", m.snapshot_ms);
  if (m.gpu) row("D2H into the slot (ms)", m.d2h_ms);
  row("publish() -> committed (ms)", m.commit_ms);
  row("publish() -> seen by a polling reader (ms)", m.readers.visible_ms);
  row("reader load: lease + copy out (ms)", m.readers.load_ms);
  if (m.device_readers > 0) {
    row("device slab: D2D into its slot (ms)", m.device_copy_ms);
    row("device slab: publish() -> committed (ms)", m.device_commit_ms);
    row("device slab: publish() -> seen by a same-GPU reader (ms)", m.device.visible_ms);
    row("device reader load: lease + D2D into its buffer (ms)", m.device.load_ms);
  }
  if (m.peer_readers > 0) {
    row("device slab: publish() -> seen on another GPU (ms)", m.peer.visible_ms);
    row("other-GPU reader load: lease + GPU-to-GPU copy (ms)", m.peer.load_ms);
  }
  if (m.chain_gpus > 0) {
    row("chain: snapshot -> on the last GPU (ms)", m.peers_copy_ms);
    row("chain: publish() -> committed on every GPU (ms)", m.peers_commit_ms);
  }
  fmt::print("training blocked per publish ({}, median): {:.3f} ms\n", m.gpu ? "call + snapshot" : "call + fence",
             blocked_ms);
  if (m.gpu)
    fmt::print("pinned D2H reference: {:.1f} GB/s -> 1.15 x bytes / bandwidth = {:.2f} ms\n", m.pinned_gbps, bound_ms);
  fmt::print("publishes {}, committed {}, coalesced {}, skipped (no free slot) {}\n", m.calls, m.commit_ms.size(),
             m.coalesced, m.skipped);
  fmt::print("reads {}, torn reads {}{}, versions not increasing {}, lease retries {}\n", m.readers.reads,
             m.readers.torn, o.verify ? "" : " (pattern not checked: pass --verify)", m.readers.not_increasing,
             m.readers.retries);
  if (m.device_readers > 0)
    fmt::print("device slab: skipped (no free slot) {}, reads {}, torn reads {}, versions not increasing {}\n",
               m.device_skipped, m.device.reads, m.device.torn, m.device.not_increasing);
  if (m.peer_readers > 0)
    fmt::print(
        "other GPUs: reads {}, torn reads {}, versions not increasing {}; one plain GPU-to-GPU copy {:.1f} GB/s "
        "-> bytes / bandwidth = {:.2f} ms\n",
        m.peer.reads, m.peer.torn, m.peer.not_increasing, m.peer_gbps,
        m.peer_gbps > 0 ? double(m.bytes) / (m.peer_gbps * 1e6) : 0.0);
  if (m.chain_gpus > 0 && !m.peers_commit_ms.empty() && m.peer_gbps > 0 && !m.commit_ms.empty()) {
    const double all_ms = percentile(m.peers_commit_ms, 0.5), copy_ms = double(m.bytes) / (m.peer_gbps * 1e6);
    fmt::print(
        "on {} other GPUs in {:.2f} ms (median): {:.2f} x one GPU-to-GPU copy (goal <= 1.25); through host memory "
        "the host slab alone takes {:.2f} ms: {:.1f}x slower\n",
        m.chain_gpus, all_ms, all_ms / copy_ms, percentile(m.commit_ms, 0.5), percentile(m.commit_ms, 0.5) / all_ms);
  }
}

Json run_publish_peer(const PublishBenchOptions& o, const ModelSize& size) {
  const std::string device = o.cpu || cuda::device_count() == 0 ? "cpu" : fmt::format("cuda:{}", o.device);
  const std::string command = fmt::format("{} {} --shape {} --bytes {} --tensors {} --seconds {} --device {}",
                                          shell_quote(o.python),
                                          shell_quote(find_peer_script(o.peer_script, "publish_peer.py")),
                                          size.peer_shape, size.bytes, size.tensors, std::max(2.0, o.seconds), device);
  return run_peer(command, "publish_peer");
}

}  // namespace

int report_publish(const PublishBenchOptions& o, const ModelSize& size, const PublishMeasurement& m) {
  const auto& readers = m.readers;
  const double bound_ms = m.gpu ? 1.15 * double(size.bytes) / (m.pinned_gbps * 1e6) : 0;
  const double blocked_ms = m.gpu ? percentile(m.call_us, 0.5) / 1e3 + percentile(m.snapshot_ms, 0.5)
                                  : percentile(blocked_us(m), 0.5) / 1e3;
  print_table(o, m, blocked_ms, bound_ms);

  Json line = {{"bench", "publish"},
               {"model", size.what},
               {"bytes", size.bytes},
               {"device", m.gpu ? fmt::format("cuda:{}", o.device) : "cpu"},
               {"readers", o.readers},
               {"seconds", o.seconds},
               {"verify", o.verify},
               {"copy", m.gpu ? "d2d snapshot" : (o.copy_in_call ? "in call" : "overlapped")},
               {"interval_ms", rounded(m.interval_ms, 3)},
               {"publishes", m.calls},
               {"committed", m.commit_ms.size()},
               {"coalesced", m.coalesced},
               {"skipped", m.skipped},
               {"call_ms_median", rounded(percentile(m.call_us, 0.5) / 1e3, 4)},
               {"call_ms_max", rounded(max_of(m.call_us) / 1e3, 4)},
               {"snapshot_ms_median", rounded(percentile(m.snapshot_ms, 0.5), 4)},
               {"d2h_ms_median", rounded(percentile(m.d2h_ms, 0.5), 4)},
               {"committed_ms_median", rounded(percentile(m.commit_ms, 0.5), 4)},
               {"visible_ms_median", rounded(percentile(readers.visible_ms, 0.5), 4)},
               {"visible_ms_p99", rounded(percentile(readers.visible_ms, 0.99), 4)},
               {"blocked_ms_median", rounded(blocked_ms, 4)},
               {"fence_ms_median", rounded(percentile(m.fence_us, 0.5) / 1e3, 4)},
               {"blocked_ms_p99", rounded(m.gpu ? 0 : percentile(blocked_us(m), 0.99) / 1e3, 4)},
               {"blocked_ms_max", rounded(m.gpu ? 0 : max_of(blocked_us(m)) / 1e3, 4)},
               {"reader_load_ms_median", rounded(percentile(readers.load_ms, 0.5), 4)},
               {"reads", readers.reads},
               {"torn_reads", readers.torn},
               {"not_increasing", readers.not_increasing},
               {"pinned_gb_per_s", rounded(m.pinned_gbps, 2)},
               {"visible_bound_ms", rounded(bound_ms, 4)}};
  if (m.device_readers > 0) {
    line["device_readers"] = m.device_readers;
    line["device_copy_ms_median"] = rounded(percentile(m.device_copy_ms, 0.5), 4);
    line["device_committed_ms_median"] = rounded(percentile(m.device_commit_ms, 0.5), 4);
    line["device_visible_ms_median"] = rounded(percentile(m.device.visible_ms, 0.5), 4);
    line["device_visible_ms_p99"] = rounded(percentile(m.device.visible_ms, 0.99), 4);
    line["device_reads"] = m.device.reads;
    line["device_torn_reads"] = m.device.torn;
    line["device_skipped"] = m.device_skipped;
  }
  if (m.peer_readers > 0) {
    line["peer_gpu_readers"] = m.peer_readers;
    line["peer_copy_gb_per_s"] = rounded(m.peer_gbps, 2);
    line["peer_visible_ms_median"] = rounded(percentile(m.peer.visible_ms, 0.5), 4);
    line["peer_load_ms_median"] = rounded(percentile(m.peer.load_ms, 0.5), 4);
    line["peer_load_ms_p99"] = rounded(percentile(m.peer.load_ms, 0.99), 4);
    line["peer_reads"] = m.peer.reads;
    line["peer_torn_reads"] = m.peer.torn;
  }
  if (m.chain_gpus > 0) {
    line["chain_gpus"] = m.chain_gpus;
    line["chain_copy_ms_median"] = rounded(percentile(m.peers_copy_ms, 0.5), 4);
    line["chain_committed_ms_median"] = rounded(percentile(m.peers_commit_ms, 0.5), 4);
    line["chain_committed_ms_p99"] = rounded(percentile(m.peers_commit_ms, 0.99), 4);
  }
  if (o.peer) {
    Json peer = run_publish_peer(o, size);
    const double state_dict_ms = peer.at("state_dict_ms");
    const double ours_ms = o.readers > 0 ? percentile(readers.visible_ms, 0.5) : percentile(m.commit_ms, 0.5);
    const double ratio_blocked = state_dict_ms / std::max(blocked_ms, 1e-6);
    fmt::print(
        "\nstate_dict publish (peer) {:.2f} ms vs ours {:.2f} ms visible: {:.1f}x faster; training blocked "
        "{:.2f} ms vs {:.3f} ms: {:.0f}x less\n",
        state_dict_ms, ours_ms, state_dict_ms / ours_ms, state_dict_ms, blocked_ms, ratio_blocked);
    if (m.device_readers > 0 && !m.device.visible_ms.empty()) {
      const double device_ms = percentile(m.device.visible_ms, 0.5);
      fmt::print("same-GPU actors (device slab) see it in {:.3f} ms: {:.0f}x faster than the peer\n", device_ms,
                 state_dict_ms / std::max(device_ms, 1e-6));
      line["ratio_device_visible"] = rounded(state_dict_ms / std::max(device_ms, 1e-6), 1);
    }
    line["peer"] = std::move(peer);
    line["ratio_visible"] = rounded(state_dict_ms / ours_ms, 2);
    line["ratio_blocked"] = rounded(ratio_blocked, 1);
  }
  emit_json_line(line, o.json);
  const bool clean = readers.torn == 0 && readers.not_increasing == 0 && m.device.torn == 0 &&
                     m.device.not_increasing == 0 && m.peer.torn == 0 && m.peer.not_increasing == 0;
  return clean ? 0 : 1;
}

}  // namespace tandem::bench
