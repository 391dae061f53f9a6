// A data-parallel rank as a test child: the library path tandem-learner uses (rank_from_env,
// Session, GradSync, Trainer) on deterministic synthetic batches, so tests can compare ranks with a
// single rank over exactly the same samples. Step i's global batch (batch x world samples) comes from
// a generator seeded by i; rank r trains on rows [r*batch, (r+1)*batch).
//
//   Child c = spawn_child("ddp-rank", rank_args({.model = "mlp", .world = 2, .rank = 1, ...}));
//
// The child writes `out`: the final step (int64), then its flat parameters and buffers (raw bytes).
// With `marker`, it creates that file once its first step is done (tests wait for it, then kill).
// Its job (what its segments are named after) is job_of(port).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tandem::test {

struct RankRun {
  std::string model = "mlp";  // built-in name or TorchScript path
  int world = 1;
  int rank = 0;
  int port = 0;
  int batch = 16;  // per rank
  int steps = 50;
  int stop_vote_at = -1;            // rank 1 votes to stop from this step on (-1: never)
  std::string device = "cpu";       // cpu | cuda (cuda:rank)
  bool cuda_graph = false;          // cuda: the step captured with its all-reduces (CapturedTrainStep); the
                                    // child fails if it ran eagerly
  std::string collectives = "shm";  // ddp.cpu_collectives: shm | gloo; shm-thread | shm-caller also
                                    // pin ddp.shm_progress (shm alone leaves it at auto)
  double collective_timeout_s = 30;
  double rendezvous_timeout_s = 30;
  std::string out{};     // result file ("" : none)
  std::string marker{};  // created after the first step ("" : none)
};

std::vector<std::string> rank_args(const RankRun& run);
std::string job_of(int port);

struct RankResult {
  std::int64_t step = -1;
  std::string flat;  // raw bytes
};
RankResult read_rank_result(const std::string& path);
// ||a - b|| / ||b|| over the leading `float_bytes` of two flat buffers read as float32 (all of them
// by default); infinity where the buffers differ in size.
double relative_difference(const std::string& a, const std::string& b, std::size_t float_bytes = SIZE_MAX);


}  // namespace tandem::test
