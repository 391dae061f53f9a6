#include "common/settings/learner.hpp"

#include <fmt/format.h>

#include <charconv>
#include <vector>

#include "common/error.hpp"

namespace tandem {
namespace {

using T = ConfigType;

// clang-format off
const std::vector<ConfigKey> kLearner = {
    {"learner.algo", T::string, "\"supervised\"", "what the learner optimises: supervised (data.* batches, cross-entropy; [supervised], [schedule]), or reinforcement learning from the actors' experience rings: ppo (PPO with GAE) or vtrace (IMPALA V-trace actor-critic); RL settings are in [rl]", {}, {}, {"supervised", "ppo", "vtrace"}},
    {"learner.device", T::string, "\"cpu\"", "where the learner trains: cpu, cuda (each rank on the GPU of its local rank) or cuda:N (GPU N; one rank per node)"},
    {"learner.threads", T::integer, "1", "LibTorch intra-op threads of the learner (CPU training)", 1, 256},
    {"learner.seed", T::integer, "0", "seed of the batch order (supervised) or of the minibatch order (RL)", 0, 9.0e15},
    {"learner.cuda_graph", T::boolean, "false", "capture the whole training step (feed gather, forward, backward, optimizer) in a CUDA graph and replay it each step: far fewer kernel launches; data-parallel GPU ranks capture their NCCL all-reduces too; with an RL algo (ppo, vtrace), each minibatch step of a single learner; falls back to eager, saying why once, with a CPU learner, a TorchScript model, RL learner ranks, or a step that cannot be captured"},
    {"learner.precision", T::string, "\"fp32\"", "GPU training: fp32, or bf16 (activations and matmuls in bfloat16 with float32 master weights, BatchNorm statistics and optimizer state, as torch.autocast does; captured by learner.cuda_graph too, docs/CUDA_GRAPHS.md); needs learner.device = cuda", {}, {}, {"fp32", "bf16"}},
    {"learner.report_every_steps", T::integer, "20", "steps between metrics reports (loss, accuracy, samples/s) to the control block, a log line every 10th; RL: updates between log lines (every update is reported)", 1, 1000000},
};
// clang-format on

// clang-format off
const std::vector<ConfigKey> kPublish = {
    {"publish.every_steps", T::integer, "50", "supervised: publish the weights to the slab every N steps (and at the end); 0 = only by time. An RL learner publishes after every update", 0, 1.0e12},
    {"publish.every_ms", T::real, "0", "supervised: also publish when this many ms passed; 0 = off", 0.0, 1.0e9},
    {"publish.bf16", T::boolean, "false", "publish bfloat16 weights (half the bytes)"},
    {"publish.device_slab", T::string, "\"auto\"", "auto: a cuda learner also publishes into a GPU-resident slab (/tandem.<job>.weights.cuda) that cuda actors on the same GPU map through CUDA IPC (a D2D copy, no PCIe); off: host slab only", {}, {}, {"auto", "off"}},
};
// clang-format on

// clang-format off
const std::vector<ConfigKey> kCheckpoint = {
    {"checkpoint.every_steps", T::integer, "500", "write <run_dir>/ckpt-<step>.safetensors every N steps (RL: updates), and at stop and end; 0 = only at stop and end", 0, 1.0e12},
    {"checkpoint.keep", T::integer, "3", "checkpoints kept in the run dir (older ones are deleted)", 1, 1000000},
};
// clang-format on

// clang-format off
const std::vector<ConfigKey> kDdp = {
    {"ddp.rendezvous_timeout_s", T::real, "60", "how long rank 0's store waits for every rank to arrive before all exit naming the missing ones", 1.0, 86400.0},
    {"ddp.collective_timeout_s", T::real, "30", "a collective (all-reduce, broadcast, stop agreement) that takes longer fails the rank; a dead or hung peer then ends the job instead of hanging it", 1.0, 86400.0},
    {"ddp.cpu_collectives", T::string, "\"shm\"", "CPU ranks that all share one node: shm reduces through a shared-memory segment (/tandem.<job>.reduce-<pid>, unlinked once every rank mapped it); gloo goes through Gloo over TCP loopback. Ranks on several nodes always use Gloo", {}, {}, {"shm", "gloo"}},
    {"ddp.shm_progress", T::string, "\"auto\"", "CPU ranks reducing through shared memory: thread = a thread per rank runs the collectives while backward goes on (pays where the node has cores to spare); caller = the training thread does (its autograd hooks hand each bucket over, the step's end sums with whichever rank is idle; no hand-off between threads: better where the ranks' threads fill the cores); auto = caller when local ranks x learner.threads >= the CPUs the learner may run on, else thread", {}, {}, {"auto", "thread", "caller"}},
    {"ddp.cpu_affinity", T::string, "\"auto\"", "CPU ranks: auto = where the node's ranks x learner.threads equal the CPUs the learner may run on, each rank keeps to its own learner.threads of them (steadier steps, docs/DATA_PARALLEL.md); none = the scheduler places them", {}, {}, {"auto", "none"}},
    {"ddp.bucket_first_mb", T::real, "0.5", "size of the first gradient bucket in MiB (the last layers' gradients, ready first, so communication starts early; 0.5 keeps the last layers of a small model apart from the rest, docs/DATA_PARALLEL.md)", 0.0625, 4096.0},
    {"ddp.bucket_mb", T::real, "25", "size of the other gradient buckets in MiB", 0.0625, 4096.0},
};
// clang-format on

Algo parse_algo(const std::string& name) {
  if (name == "ppo") return Algo::ppo;
  if (name == "vtrace") return Algo::vtrace;
  return Algo::supervised;  // the schema admits no other name
}

}  // namespace

Precision parse_precision(const std::string& text) { return text == "bf16" ? Precision::bf16 : Precision::fp32; }

DeviceSetting DeviceSetting::parse(std::string_view key, const std::string& text) {
  if (text == "cpu") return {};
  if (text == "cuda") return {.cuda = true};
  int index = -1;
  if (text.starts_with("cuda:")) {
    const char* first = text.data() + 5;
    const char* last = text.data() + text.size();
    const auto [end, ec] = std::from_chars(first, last, index);
    if (ec != std::errc() || end != last || first == last || index < 0 || index > 1023) index = -1;
  }
  if (index < 0)
    fail(
        "config: {} = \"{}\" is not a device: write \"cpu\", \"cuda\" or \"cuda:N\" with N a GPU index, e.g. "
        "\"cuda:0\"",
        key, text);
  return {.cuda = true, .index = index};
}

std::string DeviceSetting::str() const {
  if (!cuda) return "cpu";
  return index < 0 ? std::string("cuda") : fmt::format("cuda:{}", index);
}

std::string_view algo_name(Algo algo) {
  switch (algo) {
    case Algo::supervised: return "supervised";
    case Algo::ppo: return "ppo";
    case Algo::vtrace: return "vtrace";
  }
  return "?";
}

LearnerSettings LearnerSettings::parse(const Config& c) {
  LearnerSettings s{.algo = parse_algo(c.string("learner.algo")),
                    .device = DeviceSetting::parse("learner.device", c.string("learner.device")),
                    .threads = static_cast<int>(c.integer("learner.threads")),
                    .seed = static_cast<std::uint64_t>(c.integer("learner.seed")),
                    .cuda_graph = c.boolean("learner.cuda_graph"),
                    .precision = parse_precision(c.string("learner.precision")),
                    .report_every_steps = c.integer("learner.report_every_steps")};
  if (s.precision == Precision::bf16 && !s.device.cuda)
    fail(
        "config: learner.precision = \"bf16\" needs learner.device = \"cuda\" (a CPU step runs float32): set the "
        "device or learner.precision = \"fp32\"");
  return s;
}

std::span<const ConfigKey> LearnerSettings::keys() { return kLearner; }

PublishSettings PublishSettings::parse(const Config& c) {
  return {.every_steps = static_cast<std::uint64_t>(c.integer("publish.every_steps")),
          .every_ms = c.real("publish.every_ms"),
          .bf16 = c.boolean("publish.bf16"),
          .device_slab = c.string("publish.device_slab") == "auto"};
}

std::span<const ConfigKey> PublishSettings::keys() { return kPublish; }

CheckpointSettings CheckpointSettings::parse(const Config& c) {
  return {.every_steps = c.integer("checkpoint.every_steps"), .keep = c.integer("checkpoint.keep")};
}

std::span<const ConfigKey> CheckpointSettings::keys() { return kCheckpoint; }

DdpSettings DdpSettings::parse(const Config& c) {
  const std::string progress = c.string("ddp.shm_progress");
  return {.rendezvous_timeout_s = c.real("ddp.rendezvous_timeout_s"),
          .collective_timeout_s = c.real("ddp.collective_timeout_s"),
          .cpu_collectives = c.string("ddp.cpu_collectives") == "gloo" ? CpuCollectives::gloo : CpuCollectives::shm,
          .shm_progress = progress == "thread"   ? Progress::thread
                          : progress == "caller" ? Progress::caller
                                                 : Progress::automatic,
          .pin_cpus = c.string("ddp.cpu_affinity") == "auto",
          .bucket_first_mb = c.real("ddp.bucket_first_mb"),
          .bucket_mb = c.real("ddp.bucket_mb")};
}

std::span<const ConfigKey> DdpSettings::keys() { return kDdp; }

}  // namespace tandem
