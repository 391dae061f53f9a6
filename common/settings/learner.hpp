// The learner process's tables: [learner] (which loop, where, how it reports), [publish] (weights
// into the slab), [checkpoint] (the run directory's safetensors) and [ddp] (data-parallel ranks).
// Each struct is its table, typed; parse() reads it from a loaded Config and refuses what no other
// table is needed to refuse, as one UserError line naming the key and the fix.
// Torch-free: the launcher parses the same structs before it starts anything.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "common/config.hpp"

namespace tandem {

// learner.device, actor.device: "cpu", "cuda" (the process's own GPU: a learner rank's local rank, an
// actor's GPU 0) or "cuda:N" (GPU N, as PyTorch spells it).
struct DeviceSetting {
  bool cuda = false;
  int index = -1;  // N of "cuda:N"; -1: the process's own GPU

  static DeviceSetting parse(std::string_view key, const std::string& text);
  int gpu(int own) const { return index >= 0 ? index : own; }
  std::string str() const;  // as written in a config
};

// learner.precision, actor.precision: the dtype of a GPU step's activations and matmuls (parameters,
// BatchNorm statistics and optimizer state stay float32, as under torch.autocast).
enum class Precision { fp32, bf16 };
Precision parse_precision(const std::string& text);  // the schema admits only the two names

enum class Algo { supervised, ppo, vtrace };
std::string_view algo_name(Algo algo);

struct LearnerSettings {
  Algo algo = Algo::supervised;
  DeviceSetting device;
  int threads = 1;         // LibTorch intra-op threads
  std::uint64_t seed = 0;  // the batch (supervised) or minibatch (RL) order
  bool cuda_graph = false;
  Precision precision = Precision::fp32;
  std::int64_t report_every_steps = 20;

  bool rl() const { return algo != Algo::supervised; }
  static LearnerSettings parse(const Config& config);
  static std::span<const ConfigKey> keys();
};

// Publishing the learner's weights into /tandem.<job>.weights.
struct PublishSettings {
  std::uint64_t every_steps = 50;  // 0: by time only (an RL learner publishes after every update)
  double every_ms = 0;             // 0: off
  bool bf16 = false;
  bool device_slab = true;  // a cuda learner also publishes into a GPU-resident slab

  static PublishSettings parse(const Config& config);
  static std::span<const ConfigKey> keys();
};

struct CheckpointSettings {
  std::int64_t every_steps = 500;  // 0: only at a stop and at the end
  std::int64_t keep = 3;

  static CheckpointSettings parse(const Config& config);
  static std::span<const ConfigKey> keys();
};

// Data-parallel ranks (learner/ddp): how they meet, reduce and give up on each other.
struct DdpSettings {
  enum class CpuCollectives { shm, gloo };
  enum class Progress { automatic, thread, caller };
  double rendezvous_timeout_s = 60;
  double collective_timeout_s = 30;
  CpuCollectives cpu_collectives = CpuCollectives::shm;
  Progress shm_progress = Progress::automatic;
  bool pin_cpus = true;  // ddp.cpu_affinity = "auto"
  double bucket_first_mb = 0.5;
  double bucket_mb = 25;

  static DdpSettings parse(const Config& config);
  static std::span<const ConfigKey> keys();
};

}  // namespace tandem
