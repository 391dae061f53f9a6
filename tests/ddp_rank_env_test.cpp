// Rank identity from torchrun's, Slurm's or no variables (learner/ddp/rank_env.hpp), as a table.
#include "tests/torch_doctest.hpp"

#include <map>
#include <string>
#include <vector>

#include "learner/ddp/rank_env.hpp"
#include "learner/ddp/session.hpp"
#include "tests/harness.hpp"

using tandem::ddp::rank_from_env;
using tandem::ddp::RankInfo;
using Vars = std::map<std::string, std::string>;

namespace {

RankInfo from(const Vars& vars) {
  return rank_from_env([&](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

const Vars kTorchrun = {{"RANK", "3"},
                        {"WORLD_SIZE", "4"},
                        {"LOCAL_RANK", "1"},
                        {"LOCAL_WORLD_SIZE", "2"},
                        {"MASTER_ADDR", "node0"},
                        {"MASTER_PORT", "29555"}};

Vars with(Vars v, const std::string& key, const std::string& value) {
  v[key] = value;
  return v;
}
Vars without(Vars v, const std::string& key) {
  v.erase(key);
  return v;
}

}  // namespace

TEST_CASE("rank env: torchrun's variables give rank, world, local rank and the master") {
  const RankInfo r = from(kTorchrun);
  CHECK(r.source == "torchrun");
  CHECK(r.rank == 3);
  CHECK(r.world_size == 4);
  CHECK(r.local_rank == 1);
  CHECK(r.local_world_size == 2);
  CHECK(r.master_addr == "node0");
  CHECK(r.master_port == 29555);
  CHECK_FALSE(r.local_leader());
}

TEST_CASE("rank env: Slurm's variables are read when RANK is absent, the launch node standing in for MASTER_ADDR") {
  const RankInfo r = from({{"SLURM_PROCID", "5"},
                           {"SLURM_NTASKS", "8"},
                           {"SLURM_LOCALID", "1"},
                           {"SLURM_NTASKS_PER_NODE", "4(x2)"},
                           {"SLURM_LAUNCH_NODE_IPADDR", "10.0.0.7"}});
  CHECK(r.source == "slurm");
  CHECK(r.rank == 5);
  CHECK(r.world_size == 8);
  CHECK(r.local_rank == 1);
  CHECK(r.local_world_size == 4);
  CHECK(r.master_addr == "10.0.0.7");
  CHECK(r.master_port == 29500);
}

TEST_CASE("rank env: no launcher's variables is one rank that needs no store") {
  const RankInfo r = from({});
  CHECK(r.source == "single");
  CHECK(r.world_size == 1);
  CHECK_FALSE(r.distributed());
}

TEST_CASE("rank env: a bad value is one line naming the variable") {
  struct Row {
    Vars vars;
    const char* names;
  };
  const Row rows[] = {
      {with(kTorchrun, "RANK", "x"), "RANK=\"x\""},
      {with(kTorchrun, "RANK", "4"), "RANK=4 is out of range for world size 4"},
      {with(kTorchrun, "WORLD_SIZE", "0"), "WORLD_SIZE=\"0\""},
      {with(kTorchrun, "LOCAL_RANK", "-1"), "LOCAL_RANK=\"-1\""},
      {with(kTorchrun, "LOCAL_RANK", "2"), "LOCAL_RANK=2 is out of range"},
      {with(kTorchrun, "MASTER_PORT", "70000"), "MASTER_PORT=\"70000\""},
      {with(kTorchrun, "MASTER_PORT", "29500 "), "MASTER_PORT=\"29500 \""},
      {without(kTorchrun, "MASTER_ADDR"), "MASTER_ADDR is not"},
      {without(kTorchrun, "WORLD_SIZE"), "WORLD_SIZE is not"},
      {{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"}}, "SLURM_LAUNCH_NODE_IPADDR"},
      {{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "two"}}, "SLURM_NTASKS=\"two\""},
  };
  for (const Row& row : rows) {
    const std::string message = tandem::test::error_of([&] { (void)from(row.vars); });
    INFO(message);
    CHECK(message.find(row.names) != std::string::npos);
    CHECK(message.find('\n') == std::string::npos);
  }
}

TEST_CASE("cpu affinity: ranks that fill the node's CPUs exactly each keep to their own, in order; otherwise none") {
  const std::vector<int> four = {0, 1, 4, 5};  // the CPUs the learner may run on need not be contiguous
  CHECK(tandem::ddp::cpus_for_rank(0, 2, 2, four) == std::vector<int>{0, 1});
  CHECK(tandem::ddp::cpus_for_rank(1, 2, 2, four) == std::vector<int>{4, 5});
  CHECK(tandem::ddp::cpus_for_rank(3, 4, 1, four) == std::vector<int>{5});
  CHECK(tandem::ddp::cpus_for_rank(0, 2, 1, four).empty());  // cores to spare: the scheduler places the ranks
  CHECK(tandem::ddp::cpus_for_rank(0, 4, 2, four).empty());  // more threads than CPUs: pinning would crowd them
  CHECK(tandem::ddp::cpus_for_rank(0, 1, 4, four).empty());  // one rank has nothing to keep apart from
}
