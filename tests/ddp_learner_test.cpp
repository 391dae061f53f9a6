// The real tandem-learner as two data-parallel ranks started by hand with torchrun's variables: a stop
// signal to one rank stops both after the same step, rank 0 checkpoints it, and both resume from it.
#include "tests/torch_doctest.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "common/file_descriptor.hpp"
#include "shm/dataset_cache.hpp"
#include "shm/segment.hpp"
#include "tests/ddp_rank_child.hpp"
#include "tests/case_check.hpp"
#include "tests/harness.hpp"
#include "tests/tiny_cache.hpp"

using namespace tandem;
using namespace tandem::test;

namespace {


std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// tandem-learner as rank `rank` of 2, run dir `dir` (its working directory), output in `log`.
Child spawn_learner(const TempDir& dir, int rank, int port, std::int64_t steps, const std::string& log) {
  const std::string learner = test::required_env("TANDEM_LEARNER");
  const std::string cmd = fmt::format(
      "cd {} && exec env -u TANDEM_JOB RANK={} WORLD_SIZE=2 LOCAL_RANK={} LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 "
      "MASTER_PORT={} {} job.toml --set supervised.steps={}",
      dir.path().string(), rank, rank, port, learner, steps);
  const FileDescriptor fd(::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600));
  REQUIRE(fd.get() >= 0);
  Child c = spawn_program({"/bin/sh", "-c", cmd}, fd.get());
  return c;
}

std::int64_t last_step(const std::string& log, const char* word) {
  std::smatch m;
  const std::regex re(std::string(word) + " at step ([0-9]+)");
  REQUIRE_MESSAGE(std::regex_search(log, m, re), log);
  return std::stoll(m[1]);
}

void write_job(const TempDir& dir, const TinyCache& cache) {
  std::ofstream(dir.file("job.toml")) << fmt::format(R"([data]
name = "{}"
mean = "0.5"
std = "0.3"
[model]
name = "mlp"
num_classes = 8
[learner]
threads = 1
report_every_steps = 1
[supervised]
batch_size = 16
[schedule]
warmup_steps = 0
[publish]
every_steps = 50
[checkpoint]
every_steps = 0
)",
                                                     cache.name);
}

}  // namespace

TEST_CASE(
    "data-parallel tandem-learner: SIGTERM to rank 1 alone stops both ranks after one step, and both resume from rank 0's checkpoint" *
    doctest::timeout(180)) {
  TinyCache cache("ddp-tiny");
  TempDir dir;
  write_job(dir, cache);
  const int port = free_loopback_port();
  Child r0 = spawn_learner(dir, 0, port, 1000000, dir.file("r0.log"));
  Child r1 = spawn_learner(dir, 1, port, 1000000, dir.file("r1.log"));
  int status = 0;
  while (slurp(dir.file("r1.log")).find("step 20/") == std::string::npos)
    if (r1.wait_for(std::chrono::milliseconds(50), status))
      FAIL("rank 1 exited (" << status << "): " << slurp(dir.file("r1.log")));
  r1.kill(SIGTERM);
  CHECK(r0.wait() == 0);
  CHECK(r1.wait() == 0);
  const std::string log0 = slurp(dir.file("r0.log")), log1 = slurp(dir.file("r1.log"));
  INFO(log0 << log1);
  const std::int64_t stopped = last_step(log0, "stopped");
  CHECK(last_step(log1, "stopped") == stopped);
  CHECK(std::filesystem::exists(dir.file(fmt::format("ckpt-{:012d}.safetensors", stopped))));
  CHECK(log1.find("checkpoint") == std::string::npos);  // only rank 0 writes

  Child again0 = spawn_learner(dir, 0, port, stopped + 10, dir.file("again0.log"));
  Child again1 = spawn_learner(dir, 1, port, stopped + 10, dir.file("again1.log"));
  CHECK(again0.wait() == 0);
  CHECK(again1.wait() == 0);
  const std::string resumed0 = slurp(dir.file("again0.log")), resumed1 = slurp(dir.file("again1.log"));
  INFO(resumed0 << resumed1);
  CHECK(resumed0.find(fmt::format("at step {} ", stopped)) != std::string::npos);
  CHECK(resumed1.find(fmt::format("at step {} ", stopped)) != std::string::npos);
  CHECK(last_step(resumed0, "finished") == stopped + 10);
  CHECK(last_step(resumed1, "finished") == stopped + 10);
  CHECK_FALSE(shm::Segment::exists(shm::job_segment_name("local", shm::Kind::weights)));
}

TEST_CASE(
    "data-parallel tandem-learner: a rank whose run dir lacks rank 0's checkpoint (another node's disk) resumes "
    "from rank 0's state received over the wire" *
    doctest::timeout(180)) {
  TinyCache cache("ddp-wire");
  TempDir dir, other_node;
  write_job(dir, cache);
  write_job(other_node, cache);
  const int port = free_loopback_port();
  Child r0 = spawn_learner(dir, 0, port, 30, dir.file("r0.log"));
  Child r1 = spawn_learner(other_node, 1, port, 30, other_node.file("r1.log"));
  CHECK(r0.wait() == 0);
  CHECK(r1.wait() == 0);
  REQUIRE(std::filesystem::exists(dir.file(fmt::format("ckpt-{:012d}.safetensors", 30))));
  REQUIRE_FALSE(std::filesystem::exists(other_node.file(fmt::format("ckpt-{:012d}.safetensors", 30))));

  Child again0 = spawn_learner(dir, 0, port, 40, dir.file("again0.log"));
  Child again1 = spawn_learner(other_node, 1, port, 40, other_node.file("again1.log"));
  CHECK(again0.wait() == 0);
  CHECK(again1.wait() == 0);
  const std::string resumed0 = slurp(dir.file("again0.log")), resumed1 = slurp(other_node.file("again1.log"));
  INFO(resumed0 << resumed1);
  CHECK(resumed0.find("resumed from") != std::string::npos);
  CHECK(resumed1.find("resumed at step 30 ") != std::string::npos);
  CHECK(resumed1.find("received from rank 0") != std::string::npos);
  CHECK(last_step(resumed0, "finished") == 40);
  CHECK(last_step(resumed1, "finished") == 40);
}

TEST_CASE("data-parallel tandem-learner under torchrun: 2 ranks train to the end and leave nothing in /dev/shm" *
          doctest::timeout(150)) {
  if (run_command("command -v torchrun").status != 0) TANDEM_SKIP("no torchrun on PATH (python3-torch provides it)");
  TinyCache cache("ddp-tiny");
  TempDir dir;
  write_job(dir, cache);
  const std::string learner = test::required_env("TANDEM_LEARNER");
  // Python 3.11's enum breaks torchrun's default redirects: --redirects 1 --tee 1 avoid that path.
  const CommandResult r = run_command(fmt::format(
      "cd {} && env -u TANDEM_JOB timeout 120 torchrun --nproc_per_node=2 --master_port={} --redirects 1 --tee 1 "
      "--no_python {} job.toml --set supervised.steps=30 2>&1",
      dir.path().string(), free_loopback_port(), learner));
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(r.output.find("rank 1 of 2 (local 1 of 2) (torchrun)") != std::string::npos);
  CHECK(r.output.find("finished at step 30; final weights version") != std::string::npos);  // rank 0 publishes
  CHECK(r.output.find("finished at step 30\n") != std::string::npos);                       // rank 1 does not
  CHECK(std::filesystem::exists(dir.file("ckpt-000000000030.safetensors")));
  CHECK_FALSE(shm::Segment::exists(shm::job_segment_name("local", shm::Kind::weights)));
}
