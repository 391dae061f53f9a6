// Two nodes on one machine: `tandem run --nnodes 2 --node-rank K` twice, each node in a mount
// namespace of its own with a private /dev/shm (its own dataset cache, control block and weight
// slab, as on two hosts), the ranks meeting over loopback at MASTER_ADDR:MASTER_PORT through the
// c10d store node 0's rank 0 hosts. Needs root (unshare -m, mount); skipped with a reason otherwise.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "common/file_descriptor.hpp"
#include "common/process.hpp"
#include "shm/dataset_cache.hpp"
#include "tests/case_check.hpp"
#include "tests/harness.hpp"
#include "tests/tiny_cache.hpp"

using namespace tandem;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

nlohmann::json last_row(const fs::path& jsonl) {
  std::ifstream in(jsonl);
  std::string line, last;
  while (std::getline(in, line))
    if (!line.empty()) last = line;
  return last.empty() ? nlohmann::json() : nlohmann::json::parse(last);
}

}  // namespace

// Writes a small learnable cache into this namespace's /dev/shm (the run_programs test's tiny data:
// 1x8x8 images whose label is the row of a bright band).
TANDEM_CHILD("make-cache") {
  std::string name;
  for (const auto& a : test::child_args())
    if (a.starts_with("name=")) name = a.substr(5);
  test::write_tiny_cache(name);  // kept after this process exits
  return 0;
}

TEST_CASE(
    "tandem run --nnodes 2: two nodes in their own mount namespaces train together over loopback, and each "
    "node's actor evaluates its node's published weights" *
    doctest::timeout(240)) {
  if (::geteuid() != 0 || !fs::exists("/usr/bin/unshare"))
    TANDEM_SKIP("needs root and /usr/bin/unshare for a mount namespace with a private /dev/shm");
  const fs::path dir = fs::temp_directory_path() / test::unique_name("twonodes");
  fs::create_directories(dir);
  const std::string job = test::unique_name("twonodes");
  const std::string data = test::unique_name("twonodesdata");
  const int port = test::free_loopback_port();  // node 0's launcher checks it again before rank 0 listens
  std::ofstream(dir / "job.toml") << test::tiny_job_config(
      {.job = job,
       .dataset = data,
       .run_keys = "learners = 1\nactors = 1",
       .keys = fmt::format("{}supervised.steps = 80\nddp.rendezvous_timeout_s = 60", test::kTinyKeys)});

  std::vector<test::Child> nodes;
  for (int k = 0; k < 2; ++k) {
    const std::string script = fmt::format(
        "set -e; mount -t tmpfs -o size=256m tmpfs /dev/shm; {} --tandem-child=make-cache name={}; "
        "exec {} run {} --nnodes 2 --node-rank {} --master-addr 127.0.0.1 --master-port {} --set run.run_dir={}",
        self_exe().string(), data, test::required_env("TANDEM_BINARY"), (dir / "job.toml").string(), k, port,
        (dir / fmt::format("node{}", k)).string());
    const FileDescriptor out(
        ::open((dir / fmt::format("node{}.log", k)).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    REQUIRE(out.get() >= 0);
    nodes.push_back(test::spawn_program({"/usr/bin/unshare", "-m", "/bin/sh", "-c", script}, out.get()));
  }
  int status[2] = {-1, -1};
  for (int k = 0; k < 2; ++k) CHECK(nodes[k].wait_for(200s, status[k]));
  const std::string log0 = slurp(dir / "node0.log"), log1 = slurp(dir / "node1.log");
  CAPTURE(log0);
  CAPTURE(log1);
  CHECK(status[0] == 0);
  CHECK(status[1] == 0);
  CHECK(log0.find(fmt::format("node 0 of 2: ranks 0..0 of 2, rendezvous at 127.0.0.1:{}", port)) != std::string::npos);
  CHECK(log1.find(fmt::format("node 1 of 2: ranks 1..1 of 2, rendezvous at 127.0.0.1:{}", port)) != std::string::npos);
  CHECK(log1.find("rank 1 of 2") != std::string::npos);
  // Only global rank 0 writes checkpoints: node 1's rank knew it was not rank 0.
  auto has_checkpoint = [](const fs::path& run_dir) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(run_dir, ec))
      if (e.path().filename().string().starts_with("ckpt-")) return true;
    return false;
  };
  CHECK(has_checkpoint(dir / "node0"));
  CHECK(!has_checkpoint(dir / "node1"));
  // Each node's actor evaluated the final weights of its own node's slab (its /dev/shm holds no
  // other), and the two are the same weights: the same step, the same test loss to the last bit.
  const auto eval0 = last_row(dir / "node0" / "eval.jsonl"), eval1 = last_row(dir / "node1" / "eval.jsonl");
  REQUIRE(eval0.is_object());
  REQUIRE(eval1.is_object());
  CHECK(eval0.at("step") == 80);
  CHECK(eval1.at("step") == 80);
  CHECK(eval0.at("loss") == eval1.at("loss"));
  CHECK(eval0.at("accuracy") == eval1.at("accuracy"));
  CHECK(eval0.at("accuracy").get<double>() > 0.5);
  // Nothing leaked into this namespace's /dev/shm: the nodes had their own.
  for (const auto& e : fs::directory_iterator("/dev/shm")) {
    CHECK(e.path().filename().string().find(job) == std::string::npos);
    CHECK(e.path().filename().string().find(data) == std::string::npos);
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
}
