#include "tests/run_launcher_fixture.hpp"

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include <fstream>
#include <sstream>

#include "common/file_descriptor.hpp"
#include "common/process.hpp"
#include "shm/dataset_cache.hpp"

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace tandem::test {

Launcher::Launcher(const std::vector<std::string>& args) {
  int fds[2];
  REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
  std::vector<std::string> argv = {tandem_binary(), "run"};
  argv.insert(argv.end(), args.begin(), args.end());
  FileDescriptor read_end(fds[0]), write_end(fds[1]);
  child_ = spawn_program(argv, write_end.get());
  write_end.reset();  // the child's copy is the last: the reader sees end of file when the child is gone
  reader_ = std::thread([this, fd = std::move(read_end)] {
    char buf[4096];
    for (ssize_t n; (n = ::read(fd.get(), buf, sizeof buf)) > 0;) {
      MutexLock lock(mutex_);
      output_.append(buf, static_cast<std::size_t>(n));
      grew_.notify_all();
    }
  });
}

Launcher::~Launcher() {
  { Child gone = std::move(child_); }  // killed and reaped: the pipe closes, the reader ends
  if (reader_.joinable()) reader_.join();
}

std::string Launcher::output() {
  MutexLock lock(mutex_);
  return output_;
}

bool Launcher::wait_for_output(const std::string& text, std::chrono::milliseconds timeout) {
  MutexLock lock(mutex_);
  return lock.wait_for(grew_, timeout, [&]() REQUIRES(mutex_) { return output_.find(text) != std::string::npos; });
}

int Launcher::wait(std::chrono::milliseconds timeout) {
  int status = -1;
  if (!child_.wait_for(timeout, status)) return -1;
  reader_.join();  // the pipe closes when the launcher and its children are gone
  return status;
}

namespace {

std::string toml_string(const std::string& text) { return fmt::format("\"{}\"", text); }  // a TOML string

}  // namespace

JobFixture::JobFixture() : job(unique_name("runtest")), dir(fs::temp_directory_path() / job) {
  const std::string self = self_exe().string();
  keys = {
      {"job", toml_string(job)},
      {"unique_id", "false"},
      {"learners", "1"},
      {"actors", "2"},
      {"learner_program", toml_string(self)},
      {"learner_args", "\"--tandem-child=fake-learner steps=150 step_ms=20\""},
      {"actor_program", toml_string(self)},
      {"actor_args", "\"--tandem-child=fake-actor mode=normal\""},
      {"runs_dir", toml_string((dir / "runs").string())},
      {"restart_backoff_s", "0.1"},
      {"heartbeat_timeout_s", "3"},
      {"start_timeout_s", "20"},
      {"stop_timeout_s", "5"},
      {"kill_timeout_s", "2"},
      {"status", "\"plain\""},
      {"status_interval_s", "1"},
      {"metrics_interval_s", "0.2"},
  };
  fs::create_directories(dir);
  const std::uint64_t n = 2048;
  auto w = shm::DatasetWriter::create({.name = data,
                                       .source = "generated",
                                       .format = "test",
                                       .num_samples = n,
                                       .fields = {{"x", shm::DType::u8, {1, 8, 8}}, {"y", shm::DType::i64, {}}},
                                       .splits = {{"train", 0, 1024}, {"test", 1024, n}}},
                                      false);
  auto* y = reinterpret_cast<std::int64_t*>(w.field_data(1));
  for (std::uint64_t i = 0; i < n; ++i) y[i] = static_cast<std::int64_t>(i % 10);
  w.commit(0, 1);
}

JobFixture::~JobFixture() {
  shm::Segment::unlink(shm::dataset_segment_name(data));
  for (const auto& name : segments_of(job)) shm::Segment::unlink(name);
  std::error_code ec;
  fs::remove_all(dir, ec);
}

std::string JobFixture::write() const {
  std::string text = "[run]\n";
  for (const auto& [k, v] : keys) text += fmt::format("{} = {}\n", k, v);
  text += tables + "\n";
  text += fmt::format("[data]\nname = \"{}\"\n[supervised]\nsteps = 1000\n", data);
  const fs::path file = dir / "job.toml";
  std::ofstream(file) << text;
  return file.string();
}

shm::ProcessSnapshot JobFixture::process(const std::string& role, std::uint32_t index) const {
  auto block = shm::ControlBlock::attach(job, shm::Segment::Access::read_only);
  return block.snapshot(block.row_of(*shm::parse_role(role), index));
}

std::map<std::string, std::string> child_options() {
  std::map<std::string, std::string> out;
  for (const auto& a : child_args()) {
    auto eq = a.find('=');
    if (eq != std::string::npos) out[a.substr(0, eq)] = a.substr(eq + 1);
  }
  return out;
}

std::vector<std::string> segments_of(const std::string& job) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator("/dev/shm"))
    if (e.path().filename().string().starts_with(fmt::format("tandem.{}.", job))) names.push_back(e.path().filename());
  return names;
}

std::string http_exchange(int port, const std::string& request) {
  const FileDescriptor fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string response;
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::write(fd.get(), request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
    char buf[4096];
    for (ssize_t n; (n = ::read(fd.get(), buf, sizeof buf)) > 0;) response.append(buf, static_cast<std::size_t>(n));
  }
  return response;
}

std::string http_get(int port, const std::string& path) {
  return http_exchange(port, fmt::format("GET {} HTTP/1.0\r\n\r\n", path));
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool eventually(const std::function<bool()>& condition, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(20ms);
  }
  return true;
}

}  // namespace tandem::test
