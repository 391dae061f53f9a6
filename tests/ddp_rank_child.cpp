#include "tests/ddp_rank_child.hpp"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>

#include "common/error.hpp"
#include "common/program.hpp"
#include "common/torch/flat_params.hpp"
#include "common/torch/models.hpp"
#include "learner/ddp/session.hpp"
#include "learner/captured_train_step.hpp"
#include "learner/trainer.hpp"
#include "tests/harness.hpp"

namespace tandem::test {
namespace {

std::map<std::string, std::string> parse(const std::vector<std::string>& args) {
  std::map<std::string, std::string> kv;
  for (const std::string& a : args) {
    const auto eq = a.find('=');
    kv[a.substr(0, eq)] = a.substr(eq + 1);
  }
  return kv;
}

int train_rank() {
  auto kv = parse(child_args());
  const int world = std::stoi(kv["world"]);
  const int batch = std::stoi(kv["batch"]), steps = std::stoi(kv["steps"]), stop_at = std::stoi(kv["stop_vote_at"]);
  const bool cuda = kv["device"] == "cuda";
  // The environment torchrun would give, read back through rank_from_env like tandem-learner does.
  ::setenv("RANK", kv["rank"].c_str(), 1);
  ::setenv("WORLD_SIZE", kv["world"].c_str(), 1);
  ::setenv("LOCAL_RANK", kv["rank"].c_str(), 1);
  ::setenv("LOCAL_WORLD_SIZE", kv["world"].c_str(), 1);
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  ::setenv("MASTER_PORT", kv["port"].c_str(), 1);
  return run_main("ddp-rank", [&] {
    const ddp::RankInfo rank = ddp::rank_from_env();
    torch::set_num_threads(1);
    const std::string& collectives = kv["collectives"];
    const auto dash = collectives.find('-');
    std::vector<std::string> overrides = {"ddp.collective_timeout_s=" + kv["collective_timeout_s"],
                                          "ddp.rendezvous_timeout_s=" + kv["rendezvous_timeout_s"],
                                          "ddp.bucket_first_mb=0.0625",
                                          "ddp.bucket_mb=0.25",  // several buckets even for small models
                                          "ddp.cpu_collectives=\"" + collectives.substr(0, dash) + "\""};
    if (dash != std::string::npos) overrides.push_back("ddp.shm_progress=\"" + collectives.substr(dash + 1) + "\"");
    const JobSettings settings = JobSettings::parse(load_program_config("", overrides), {});
    std::unique_ptr<ddp::Session> session;
    if (rank.distributed())
      session = ddp::Session::start(rank, settings, job_of(std::stoi(kv["port"])), cuda ? rank.local_rank : -1);

    Model model = Model::create({.name = kv["model"], .seed = 7});
    const torch::Device device = cuda ? torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(rank.local_rank))
                                      : torch::Device(torch::kCPU);
    model.to(device);
    FlatParams flat = FlatParams::flatten(model);
    TrainerConfig tc;
    tc.schedule.kind = "cosine";
    tc.schedule.total_steps = steps;
    Trainer trainer(model, tc);
    std::optional<ddp::GradSync> sync;
    if (session) {
      std::vector<at::Tensor> params;
      for (auto& [name, p] : model.named_parameters()) params.push_back(p);
      if (rank.rank != 0) {  // rank 0's broadcast must undo this
        torch::NoGradGuard no_grad;
        for (auto& p : params) p.add_(1.0);
      }
      sync.emplace(flat, std::move(params), session->comm(), rank, session->sync_options());
      trainer.set_before_update([&] { sync->finish(trainer.step()); });
      std::vector<at::Tensor> state;
      for (auto& [name, t] : trainer.optimizer().state_tensors()) state.push_back(t);
      sync->broadcast_from_rank0(state);
    }
    std::unique_ptr<CapturedTrainStep> graph;
    if (kv["cuda_graph"] == "1")
      graph = std::make_unique<CapturedTrainStep>(trainer, std::vector<std::int64_t>{batch, 1, 28, 28},
                                                  CapturedTrainStep::Gather{}, 3, sync ? &*sync : nullptr);
    for (int i = 0; i < steps; ++i) {
      torch::manual_seed(1000 + static_cast<std::uint64_t>(i));
      const torch::Tensor x = torch::randn({batch * world, 1, 28, 28});
      const torch::Tensor y = torch::randint(0, 10, {batch * world}, torch::kInt64);
      if (sync) sync->vote_stop(stop_at >= 0 && i >= stop_at && rank.rank == 1);
      const torch::Tensor xr = x.narrow(0, rank.rank * batch, batch).to(device);
      const torch::Tensor yr = y.narrow(0, rank.rank * batch, batch).to(device);
      if (graph) graph->step(xr, yr);
      else trainer.train_step(xr, yr);
      if (i == 0 && !kv["marker"].empty()) std::ofstream(kv["marker"]) << "trained\n";
      if (sync && sync->stop_agreed()) break;
    }
    if (graph && !graph->captured()) fail("rank {}: the step was not captured (see the warning above)", rank.rank);
    if (!kv["out"].empty()) {
      const at::Tensor bytes = flat.buffer().cpu();
      const std::int64_t step = trainer.step();
      std::ofstream out(kv["out"], std::ios::binary);
      out.write(reinterpret_cast<const char*>(&step), sizeof step);
      out.write(static_cast<const char*>(bytes.data_ptr()), static_cast<std::streamsize>(bytes.numel()));
    }
    return 0;
  });
}

}  // namespace

TANDEM_CHILD("ddp-rank") { return train_rank(); }

std::vector<std::string> rank_args(const RankRun& r) {
  return {"model=" + r.model,
          fmt::format("world={}", r.world),
          fmt::format("rank={}", r.rank),
          fmt::format("port={}", r.port),
          fmt::format("batch={}", r.batch),
          fmt::format("steps={}", r.steps),
          fmt::format("stop_vote_at={}", r.stop_vote_at),
          "device=" + r.device,
          fmt::format("cuda_graph={}", r.cuda_graph ? 1 : 0),
          fmt::format("collective_timeout_s={}", r.collective_timeout_s),
          fmt::format("rendezvous_timeout_s={}", r.rendezvous_timeout_s),
          "out=" + r.out,
          "marker=" + r.marker,
          "collectives=" + r.collectives};
}

std::string job_of(int port) { return fmt::format("ddp{}", port); }

RankResult read_rank_result(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  RankResult r;
  if (!in.read(reinterpret_cast<char*>(&r.step), sizeof r.step)) return r;
  r.flat.assign(std::istreambuf_iterator<char>(in), {});
  return r;
}

double relative_difference(const std::string& a, const std::string& b, std::size_t float_bytes) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  const std::size_t n = std::min(float_bytes, a.size());
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i + 4 <= n; i += 4) {
    float x, y;
    std::memcpy(&x, a.data() + i, 4);
    std::memcpy(&y, b.data() + i, 4);
    diff += (double(x) - y) * (double(x) - y);
    norm += double(y) * y;
  }
  return std::sqrt(diff / norm);
}

}  // namespace tandem::test
