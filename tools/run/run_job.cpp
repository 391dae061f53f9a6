#include "tools/run/run_job.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cstdlib>
#include <fstream>
#include <random>

#include "common/error.hpp"
#include "common/file_descriptor.hpp"
#include "tools/run/job_segments.hpp"
#include "tools/run/supervisor.hpp"

namespace tandem::run {
namespace {

std::string random_suffix() {
  std::random_device rd;
  return fmt::format("{:04x}", rd() & 0xffff);
}

// A free TCP port on the loopback for MASTER_PORT (torchrun does the same: bind 0, read, close).
std::uint16_t free_port() {
  const FileDescriptor fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) TANDEM_FAIL_SYS(errno, "socket(AF_INET, SOCK_STREAM)");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    TANDEM_FAIL_SYS(errno, "bind(127.0.0.1:0)");
  return ntohs(addr.sin_port);
}

// What would otherwise surface only as every rank timing out at the rendezvous: a master address
// that does not resolve, or (on the node whose rank 0 hosts the store) a port already taken.
void check_rendezvous(const JobConfig& cfg) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(cfg.master_addr.c_str(), nullptr, &hints, &found); rc != 0)
    fail(
        "master address \"{}\" (--master-addr or run.master_addr) does not resolve: {}: give node 0's host name or "
        "IP address",
        cfg.master_addr, ::gai_strerror(rc));
  ::freeaddrinfo(found);
  if (cfg.node_rank != 0 || cfg.master_port == 0) return;
  const FileDescriptor fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) TANDEM_FAIL_SYS(errno, "socket(AF_INET, SOCK_STREAM)");
  const int one = 1;  // as the store's listener does, so a port in TIME_WAIT is not taken for busy
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(cfg.master_port);
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  const bool taken = ::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 && errno == EADDRINUSE;
  if (taken)
    fail(
        "master port {} (--master-port or run.master_port) is in use on this host, where rank 0 must listen on it: "
        "choose a free port (the same on every node)",
        cfg.master_port);
}

void write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  if (!out) fail("cannot write {}: check the permissions of run.runs_dir", path.string());
}

bool use_live_status(StatusMode mode) {
  if (mode == StatusMode::live) return true;
  if (mode != StatusMode::automatic) return false;
  const char* term = std::getenv("TERM");
  return ::isatty(STDOUT_FILENO) && term != nullptr && std::string_view(term) != "dumb";
}

}  // namespace

int run_job(const std::filesystem::path& config_file, std::span<const std::string> overrides, const NodeFlags& nodes) {
  const JobConfig cfg = JobConfig::load(config_file, overrides, nodes);
  check_rendezvous(cfg);
  // A closed stdout (`tandem run | head`) must not kill the launcher before it has cleaned up; the
  // children get the default disposition back (child_process.cpp).
  ::signal(SIGPIPE, SIG_IGN);

  Job job;
  job.id = cfg.unique_id ? fmt::format("{}-{}", cfg.job_name, random_suffix()) : cfg.job_name;
  job.run_dir = std::filesystem::absolute(cfg.run_dir.empty() ? cfg.runs_dir / job.id : cfg.run_dir);
  std::error_code ec;
  std::filesystem::create_directories(job.run_dir, ec);
  if (ec)
    fail("cannot create the run directory {}: {}: set run.runs_dir or run.run_dir", job.run_dir.string(), ec.message());
  write_file(job.run_dir / "config.toml", cfg.resolved_toml());
  job.child_config = job.run_dir / "job.toml";
  write_file(job.child_config, child_toml(cfg.config));
  job.master_port = cfg.master_port != 0 ? cfg.master_port : free_port();

  Console console(use_live_status(cfg.status));
  if (cfg.nnodes > 1)
    console.message(fmt::format("node {} of {}: ranks {}..{} of {}, rendezvous at {}:{}", cfg.node_rank, cfg.nnodes,
                                cfg.global_rank(0), cfg.global_rank(cfg.learners - 1), cfg.world_size(),
                                cfg.master_addr, job.master_port));
  JobResult result;
  {
    Supervisor supervisor(cfg, job, console);
    result = supervisor.run();
  }  // every child reaped, every segment of the job removed

  console.clear_status();
  if (auto left = job_segments_in_shm(job.id); !left.empty()) {
    console.warning(
        fmt::format("job {} failed: /{} could not be removed from /dev/shm (remove it with "
                    "`tandem shm rm`)",
                    job.id, left.front()));
    return 1;
  }
  const std::string last = status_text(result.summary, result.elapsed_s);
  switch (result.outcome) {
    case JobResult::Outcome::succeeded:
      console.message(fmt::format("{}", last));
      console.message(fmt::format("job {} succeeded in {}; run dir {}", job.id, clock_text(result.elapsed_s),
                                  job.run_dir.string()));
      return 0;
    case JobResult::Outcome::interrupted:
      console.message(fmt::format("{}", last));
      console.message(fmt::format("job {} stopped by {} after {}; no process failed; run dir {}", job.id,
                                  signal_name(result.signal), clock_text(result.elapsed_s), job.run_dir.string()));
      return 128 + result.signal;
    case JobResult::Outcome::failed:
      console.warning(fmt::format("job {} failed after {}: {}", job.id, clock_text(result.elapsed_s), result.failure));
      return 1;
  }
  return 1;
}

}  // namespace tandem::run
