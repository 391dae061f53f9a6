// The runs behind `tandem-bench ddp`: Tandem's learner ranks started by `tandem run` (the way a user
// starts them) with a built-in model (the fmnist cnn on CPU ranks, or ResNet-18 on one GPU per rank)
// and no actors, measured from the metrics every rank reports into <run_dir>/metrics.jsonl; and the
// PyTorch DDP peer (bench/peers/ddp_peer.py) under torchrun, over Gloo or NCCL to match.
// Both run in the foreground, one after the other, with their output echoed under ours.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace tandem::bench {

struct DdpBenchOptions {
  std::string dataset = "fmnist";
  std::string model = "cnn";       // model.name of the ranks: cnn | resnet18
  std::string device = "cpu";      // learner.device of the ranks: cpu | cuda (rank r on GPU r, NCCL)
  std::string precision = "fp32";  // learner.precision of the ranks (bf16: cuda only)
  bool cuda_graph = false;         // learner.cuda_graph of the ranks (cuda only): steps captured, all-reduces too
  int ranks = 2;
  int batch = 128;  // per rank
  int steps = 300;  // measured steps, after the warmup
  int warmup = 60;
  double bucket_first_mb = 0.5;  // ddp.bucket_first_mb / ddp.bucket_mb of the ranks (their defaults)
  double bucket_mb = 25;
  std::string collectives = "shm";    // ddp.cpu_collectives of the ranks: shm | gloo
  std::string shm_progress = "auto";  // ddp.shm_progress of the ranks: auto | thread | caller
  int rounds = 1;                     // every configuration this many times, interleaved; medians reported
  bool ceiling = false;               // also run N independent one-rank jobs at once (run_independent_ranks)
  bool peer = false;
  std::string python = "python3";
  std::string peer_script;
  std::string tandem;  // the launcher; default: next to tandem-bench
  std::string json;
};

// One configuration's numbers. Times are means per step over the measured steps, over the ranks.
struct DdpResult {
  int ranks = 0;
  double step_ms = 0;
  double samples_per_s = 0;  // all ranks together
  double allreduce_ms = -1;  // -1: the ranks did not report it (one rank needs no all-reduce)
  double exposed_comm_ms = -1;
  double slowest_step_ms = -1;  // independent jobs: the slowest job's step, the pace a lock-step run keeps
};

// `tandem run` with `ranks` learner ranks; fails naming the run when it does not succeed.
DdpResult run_tandem_ranks(const DdpBenchOptions& o, int ranks, const std::filesystem::path& work_dir);
// `jobs` independent one-rank `tandem run`s at once, each training its own model (no communication;
// on GPUs job j on GPU j):
// what the machine's shared cores, caches and memory bus leave of N x one rank. Its samples/s is the
// jobs' sum; its step time their mean; slowest_step_ms the slowest job's.
DdpResult run_independent_ranks(const DdpBenchOptions& o, int jobs, const std::filesystem::path& work_dir);
// ddp_peer.py under torchrun with `ranks` processes.
DdpResult run_peer_ranks(const DdpBenchOptions& o, int ranks, const std::filesystem::path& work_dir);

}  // namespace tandem::bench
