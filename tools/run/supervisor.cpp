#include "tools/run/supervisor.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <optional>
#include <random>

#include "common/clock.hpp"
#include "common/error.hpp"
#include "tools/run/child_process.hpp"
#include "tools/run/job_segments.hpp"
#include "tools/run/metrics_endpoint.hpp"

extern char** environ;

namespace asio = boost::asio;

namespace tandem::run {

using shm::ProcessState;
using shm::Role;
using shm::StopReason;
using Clock = std::chrono::steady_clock;

namespace {

constexpr auto kTick = std::chrono::milliseconds(100);
constexpr double kLiveRedrawS = 0.5;

double seconds_since(std::uint64_t mono_ns) {
  const std::uint64_t now = monotonic_ns();
  return now > mono_ns ? (now - mono_ns) / 1e9 : 0.0;
}

std::uint64_t ns_from_s(double s) { return static_cast<std::uint64_t>(s * 1e9); }

std::string format_seconds(double s) { return s == std::floor(s) ? fmt::format("{:.0f}", s) : fmt::format("{}", s); }

// Placeholders in program arguments.
std::string substitute(std::string arg, const std::vector<std::pair<std::string, std::string>>& values) {
  for (const auto& [key, value] : values)
    for (std::size_t at; (at = arg.find(key)) != std::string::npos;) arg.replace(at, key.size(), value);
  return arg;
}

// The launcher's environment without the variables it sets for its children.
std::vector<std::string> inherited_environment() {
  static const std::vector<std::string_view> kOwned = {
      "TANDEM_JOB", "TANDEM_ROLE", "TANDEM_INDEX", "TANDEM_RUN_DIR", "TANDEM_CONFIG", "TANDEM_LEARNERS",
      "TANDEM_ACTORS", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
      "MASTER_PORT"};
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string_view entry(*e);
    const auto name = entry.substr(0, entry.find('='));
    if (std::find(kOwned.begin(), kOwned.end(), name) == kOwned.end()) env.emplace_back(entry);
  }
  return env;
}

}  // namespace

struct Supervisor::Impl {
  // One row of the job: a learner rank or an actor, across its restarts.
  struct Slot {
    explicit Slot(asio::io_context& io) : restart_timer(io) {}
    Role role{};
    std::uint32_t index = 0;
    std::uint32_t row = 0;
    std::string name;
    ChildProcess child;
    pid_t last_pid = 0;
    std::unique_ptr<asio::posix::stream_descriptor> out, err;  // null once at end of file
    std::optional<ExitStatus> pending_exit;  // reaped, waiting for its pipes to drain
    std::uint64_t exit_deadline_ns = 0;
    std::array<char, 8192> out_buf{}, err_buf{};
    LineSplitter out_lines, err_lines;
    Tail tail{20};
    std::uint32_t generation = 0;      // incremented per spawn: stale read completions are ignored
    std::uint32_t restarts = 0;
    std::uint32_t crashes_in_row = 0;
    std::uint64_t spawned_ns = 0;
    std::string hung;                  // why the launcher killed it, when it did
    bool signalled_for_stop = false;   // the launcher sent it SIGTERM/SIGKILL because it did not stop
    bool done = false;                 // exited and will not run again
    asio::steady_timer restart_timer;
  };

  enum class Phase { running, stopping };

  Impl(const JobConfig& config, Job job, Console& console)
      : cfg(config),
        job(std::move(job)),
        console(console),
        signals(io, SIGINT, SIGTERM, SIGHUP),  // before any segment exists: a Ctrl-C now still cleans up
        child_exits(io, SIGCHLD),
        tick_timer(io),
        segments(JobSegments::create(this->job.id, cfg.learners, cfg.actors, this->job.run_dir.string())),
        control(segments.control()) {
    metrics_file.open(this->job.run_dir / "metrics.jsonl", std::ios::app);
    if (!metrics_file)
      fail("cannot write {}: check the permissions of run.runs_dir", (this->job.run_dir / "metrics.jsonl").string());
    last_metrics_ns.assign(control.row_count(), 0);
    for (std::uint32_t row = 0; row < control.row_count(); ++row) {
      auto slot = std::make_unique<Slot>(io);
      slot->row = row;
      slot->role = row < cfg.learners ? Role::learner : Role::actor;
      slot->index = slot->role == Role::learner ? row : row - cfg.learners;
      slot->name = fmt::format("{}.{}", shm::role_name(slot->role), slot->index);
      slots.push_back(std::move(slot));
    }
    if (cfg.metrics_port != 0)
      endpoint.emplace(io, cfg.metrics_port, [this] { return prometheus_text(control); });
  }

  // ---- members (destroyed in reverse: endpoint, slots (children killed and reaped), segments) ----
  const JobConfig& cfg;
  Job job;
  Console& console;
  asio::io_context io;
  asio::signal_set signals;
  asio::signal_set child_exits;
  asio::steady_timer tick_timer;
  JobSegments segments;
  const shm::ControlBlock& control;
  std::ofstream metrics_file;
  std::vector<std::uint64_t> last_metrics_ns;
  std::vector<std::unique_ptr<Slot>> slots;
  std::optional<MetricsEndpoint> endpoint;

  Phase phase = Phase::running;
  std::uint64_t started_ns = monotonic_ns();
  std::uint64_t term_at_ns = 0, kill_at_ns = 0;
  bool term_sent = false, kill_sent = false;
  int signals_received = 0;
  int interrupt_signal = 0;
  std::optional<std::string> failure;
  std::uint64_t next_metrics_ns = 0, next_status_ns = 0;
  bool finished = false;

  // ---- starting processes ----

  ChildProcess::Spec spec_for(const Slot& s) const {
    const ProgramSpec& program = s.role == Role::learner ? cfg.learner : cfg.actor;
    const std::vector<std::pair<std::string, std::string>> values = {
        {"{config}", job.child_config.string()}, {"{run_dir}", job.run_dir.string()},
        {"{job}", job.id}, {"{index}", std::to_string(s.index)}};
    ChildProcess::Spec spec{program.path, {}, inherited_environment()};
    for (const auto& a : program.args) spec.args.push_back(substitute(a, values));
    auto set = [&](std::string_view name, const std::string& value) { spec.env.push_back(fmt::format("{}={}", name, value)); };
    set("TANDEM_JOB", job.id);
    set("TANDEM_ROLE", std::string(shm::role_name(s.role)));
    set("TANDEM_INDEX", std::to_string(s.index));
    set("TANDEM_RUN_DIR", job.run_dir.string());
    set("TANDEM_CONFIG", job.child_config.string());
    set("TANDEM_LEARNERS", std::to_string(cfg.learners));
    set("TANDEM_ACTORS", std::to_string(cfg.actors));
    if (s.role == Role::learner) {  // torchrun's variables (one node)
      set("RANK", std::to_string(s.index));
      set("LOCAL_RANK", std::to_string(s.index));
      set("WORLD_SIZE", std::to_string(cfg.learners));
      set("LOCAL_WORLD_SIZE", std::to_string(cfg.learners));
      set("GROUP_RANK", "0");
      set("MASTER_ADDR", cfg.master_addr);
      set("MASTER_PORT", std::to_string(job.master_port));
    }
    return spec;
  }

  void spawn(Slot& s) {
    control.begin_spawn(s.row, s.restarts);
    s.child = ChildProcess::spawn(spec_for(s));
    s.last_pid = s.child.pid();
    control.set_pid(s.row, s.child.pid());
    s.spawned_ns = monotonic_ns();
    s.hung.clear();
    s.signalled_for_stop = false;
    ++s.generation;
    s.out = std::make_unique<asio::posix::stream_descriptor>(io, s.child.release_stdout());
    s.err = std::make_unique<asio::posix::stream_descriptor>(io, s.child.release_stderr());
    read_output(s, false, s.generation);
    read_output(s, true, s.generation);
    event(fmt::format("\"event\":\"spawn\",\"process\":{},\"pid\":{},\"restarts\":{}", json_string(s.name),
                      s.last_pid, s.restarts));
  }

  // ---- output ----

  void on_line(Slot& s, std::string_view line, bool is_err) {
    s.tail.push(line);
    console.child_line(s.name, line, is_err);
  }

  void read_output(Slot& s, bool is_err, std::uint32_t generation) {
    auto& stream = is_err ? s.err : s.out;
    auto& buf = is_err ? s.err_buf : s.out_buf;
    stream->async_read_some(asio::buffer(buf), [this, &s, is_err, generation](boost::system::error_code ec, std::size_t n) {
      if (ec == asio::error::operation_aborted || generation != s.generation) return;
      if (!(is_err ? s.err : s.out)) return;
      auto& splitter = is_err ? s.err_lines : s.out_lines;
      const auto& buf = is_err ? s.err_buf : s.out_buf;
      splitter.feed({buf.data(), n}, [&](std::string_view line) { on_line(s, line, is_err); });
      if (ec) {  // end of file (the child closed it or died) or a read error: this stream is done
        close_output(s, is_err);
        complete_exit_if_drained(s);
        return;
      }
      read_output(s, is_err, generation);
    });
  }

  void close_output(Slot& s, bool is_err) {
    auto& stream = is_err ? s.err : s.out;
    if (!stream) return;
    (is_err ? s.err_lines : s.out_lines).finish([&](std::string_view line) { on_line(s, line, is_err); });
    stream.reset();
  }

  // ---- exits ----

  // A reaped child's exit is handled once its pipes reached end of file, so that its last lines
  // are shown (and quoted in a failure) before its exit is reported. A grandchild that keeps a pipe
  // open gets kExitDrain before the launcher stops waiting for it.
  static constexpr std::uint64_t kExitDrainNs = 1'000'000'000;

  void reap_all() {
    for (auto& s : slots) {
      if (auto status = s->child.try_wait()) {
        s->pending_exit = status;
        s->exit_deadline_ns = monotonic_ns() + kExitDrainNs;
        complete_exit_if_drained(*s);
      }
    }
  }

  void complete_exit_if_drained(Slot& s) {
    if (!s.pending_exit || s.out || s.err) return;
    const ExitStatus status = *s.pending_exit;
    s.pending_exit.reset();
    on_exit(s, status);
  }

  void drain_deadlines() {
    const std::uint64_t now = monotonic_ns();
    for (auto& s : slots) {
      if (!s->pending_exit || now < s->exit_deadline_ns) continue;
      close_output(*s, false);
      close_output(*s, true);
      complete_exit_if_drained(*s);
    }
  }

  std::string failure_text(const Slot& s, const std::string& what) const {
    std::string text = fmt::format("{} (pid {}) {}", s.name, s.last_pid, what);
    if (s.tail.lines().empty()) return text + "; it printed nothing";
    const auto n = s.tail.lines().size();
    text += n == 1 ? std::string("; its last line:") : fmt::format("; its last {} lines:", n);
    for (const auto& line : s.tail.lines()) text += "\n  | " + line;
    return text;
  }

  void on_exit(Slot& s, const ExitStatus& status) {
    const bool ok = status.success() && s.hung.empty();
    std::string what = s.hung.empty() ? status.describe() : s.hung;
    if (!ok && s.signalled_for_stop) what = "did not exit after the stop request and " + what;
    control.end_process(s.row, ok ? ProcessState::exited : ProcessState::failed, status.value());
    event(fmt::format("\"event\":\"exit\",\"process\":{},\"pid\":{},\"status\":{},\"hung\":{}", json_string(s.name),
                      s.last_pid, status.value(), s.hung.empty() ? "false" : "true"));

    if (s.role == Role::learner) {
      s.done = true;
      if (!ok) {
        fail_job(s, what);
      } else if (phase == Phase::running) {
        console.message(fmt::format("{} finished", s.name));
        const bool all = std::all_of(slots.begin(), slots.end(),
                                     [](const auto& o) { return o->role != Role::learner || o->done; });
        if (all) begin_stop(StopReason::finished, cfg.stop_timeout_s);
      }
    } else if (phase == Phase::stopping) {
      s.done = true;
      if (!ok && !failure) fail_job(s, s.signalled_for_stop ? what : what + " while stopping");
    } else if (ok) {
      s.done = true;
      console.message(fmt::format("{} exited with status 0; it is done and not restarted", s.name));
    } else {
      restart_or_fail(s, what);
    }
    finish_if_done();
  }

  void restart_or_fail(Slot& s, const std::string& what) {
    if (seconds_since(s.spawned_ns) > std::max(60.0, 2 * cfg.restart_backoff_max_s)) s.crashes_in_row = 0;
    if (s.restarts >= cfg.max_restarts) {
      s.done = true;
      fail_job(s, fmt::format("{}, and it has been restarted {} times already (run.max_restarts = {})", what,
                              s.restarts, cfg.max_restarts));
      return;
    }
    const double delay = std::min(cfg.restart_backoff_s * std::pow(2.0, s.crashes_in_row), cfg.restart_backoff_max_s);
    ++s.crashes_in_row;
    ++s.restarts;
    control.set_state(s.row, ProcessState::waiting);
    console.warning(fmt::format("{} (pid {}) {}: restarting it in {:.1f} s (restart {} of at most {})", s.name,
                                s.last_pid, what, delay, s.restarts, cfg.max_restarts));
    s.restart_timer.expires_after(std::chrono::nanoseconds(ns_from_s(delay)));
    s.restart_timer.async_wait([this, &s](boost::system::error_code ec) {
      if (ec || phase != Phase::running || s.done) return;
      spawn(s);
    });
  }

  void fail_job(Slot& s, const std::string& what) {
    if (!failure) {
      failure = failure_text(s, what);
      console.warning(fmt::format("{} (pid {}) {}: stopping the job", s.name, s.last_pid, what));
    }
    begin_stop(StopReason::failure, cfg.kill_timeout_s);
  }

  // ---- stopping ----

  void begin_stop(StopReason reason, double grace_s) {
    const std::uint64_t now = monotonic_ns();
    if (phase == Phase::running) {
      phase = Phase::stopping;
      control.request_stop(reason);
      term_at_ns = now + ns_from_s(grace_s);
      kill_at_ns = term_at_ns + ns_from_s(cfg.kill_timeout_s);
      for (auto& s : slots) {
        s->restart_timer.cancel();
        if (!s->child.running()) s->done = true;  // a restart that was pending will not happen
      }
      event(fmt::format("\"event\":\"stop\",\"reason\":{}", json_string(shm::stop_reason_name(reason))));
    } else {  // already stopping: a failure or another signal only makes it sooner
      term_at_ns = std::min(term_at_ns, now + ns_from_s(grace_s));
      kill_at_ns = std::min(kill_at_ns, term_at_ns + ns_from_s(cfg.kill_timeout_s));
    }
  }

  void escalate() {
    const std::uint64_t now = monotonic_ns();
    auto send = [&](int sig) {
      for (auto& s : slots) {
        if (!s->child.running()) continue;
        if (!s->signalled_for_stop)
          console.warning(fmt::format("{} (pid {}) has not exited: sending {}", s->name, s->last_pid, signal_name(sig)));
        s->signalled_for_stop = true;
        s->child.signal(sig);
      }
    };
    if (!term_sent && now >= term_at_ns) {
      term_sent = true;
      send(SIGTERM);
    }
    if (!kill_sent && now >= kill_at_ns) {
      kill_sent = true;
      for (auto& s : slots) s->signalled_for_stop = false;  // say it again, with SIGKILL
      send(SIGKILL);
    }
  }

  void on_signal(int sig) {
    ++signals_received;
    const std::uint64_t now = monotonic_ns();
    if (signals_received == 1) {
      // A signal while the job already ends (finished, failed) only hurries it; it decides nothing.
      if (!failure && phase == Phase::running) interrupt_signal = sig;
      console.message(fmt::format("{}: asking the job to stop (learners checkpoint); {} s until SIGTERM, "
                                  "or interrupt again to terminate now",
                                  signal_name(sig), format_seconds(cfg.stop_timeout_s)));
      begin_stop(StopReason::interrupted, cfg.stop_timeout_s);
    } else if (signals_received == 2) {
      console.message(fmt::format("{} again: terminating every process now", signal_name(sig)));
      term_at_ns = now;
      kill_at_ns = std::min(kill_at_ns, now + ns_from_s(cfg.kill_timeout_s));
    } else {
      kill_at_ns = now;
    }
    escalate();
  }

  // ---- hangs ----

  void check_heartbeats() {
    const std::uint64_t now = monotonic_ns();
    for (auto& s : slots) {
      if (!s->child.running() || !s->hung.empty() || s->signalled_for_stop) continue;
      const auto& row = control.row(s->row);
      const auto state = static_cast<ProcessState>(row.state.load(std::memory_order_relaxed));
      if (state == ProcessState::starting) {
        if (cfg.start_timeout_s > 0 && now - s->spawned_ns > ns_from_s(cfg.start_timeout_s))
          kill_hung(*s, fmt::format("did not report itself running within {} s of its start (run.start_timeout_s)",
                                    format_seconds(cfg.start_timeout_s)));
        continue;
      }
      const std::uint64_t beat = row.heartbeat_ns.load(std::memory_order_relaxed);
      if (cfg.heartbeat_timeout_s > 0 && now > beat && now - beat > ns_from_s(cfg.heartbeat_timeout_s))
        kill_hung(*s, fmt::format("hung: no heartbeat for {:.1f} s (run.heartbeat_timeout_s = {})", (now - beat) / 1e9,
                                  format_seconds(cfg.heartbeat_timeout_s)));
    }
  }

  void kill_hung(Slot& s, std::string why) {
    console.warning(fmt::format("{} (pid {}) {}: killing it", s.name, s.last_pid, why));
    s.hung = std::move(why);
    s.child.signal(SIGKILL);
  }

  // ---- metrics and status ----

  void event(const std::string& fields) {
    metrics_file << fmt::format("{{\"time_s\":{:.3f},{}}}\n", seconds_since(started_ns), fields);
    metrics_file.flush();
  }

  void sample_metrics() {
    const double t = seconds_since(started_ns);
    for (std::uint32_t row = 0; row < control.row_count(); ++row) {
      const auto p = control.snapshot(row);
      if (!p.metrics || p.metrics->updated_ns == last_metrics_ns[row]) continue;
      last_metrics_ns[row] = p.metrics->updated_ns;
      metrics_file << metrics_json(p, t) << '\n';
    }
    metrics_file.flush();
  }

  void show_status() {
    if (cfg.status == StatusMode::off) return;
    console.status(status_text(summarize(control), seconds_since(started_ns)));
  }

  void tick() {
    reap_all();
    drain_deadlines();
    const std::uint64_t now = monotonic_ns();
    control.job_control().launcher_heartbeat_ns.store(now, std::memory_order_relaxed);
    check_heartbeats();
    if (phase == Phase::stopping) escalate();
    if (now >= next_metrics_ns) {
      sample_metrics();
      next_metrics_ns = now + ns_from_s(cfg.metrics_interval_s);
    }
    if (now >= next_status_ns) {
      show_status();
      next_status_ns = now + ns_from_s(console.live() ? kLiveRedrawS : cfg.status_interval_s);
    }
    finish_if_done();
    if (finished) return;
    tick_timer.expires_after(kTick);
    tick_timer.async_wait([this](boost::system::error_code ec) {
      if (!ec) tick();
    });
  }

  void finish_if_done() {
    if (finished || phase != Phase::stopping) return;
    if (std::any_of(slots.begin(), slots.end(), [](const auto& s) { return s->child.running() || s->pending_exit; }))
      return;
    finished = true;
    io.stop();
  }

  void wait_for_signal() {
    signals.async_wait([this](boost::system::error_code ec, int sig) {
      if (ec) return;
      on_signal(sig);
      wait_for_signal();
    });
  }

  void wait_for_child_exit() {
    child_exits.async_wait([this](boost::system::error_code ec, int) {
      if (ec) return;
      reap_all();
      wait_for_child_exit();
    });
  }

  JobResult run() {
    console.message(fmt::format("job {}: {} learner{}, {} actor{}; run dir {}", job.id, cfg.learners,
                                cfg.learners == 1 ? "" : "s", cfg.actors, cfg.actors == 1 ? "" : "s",
                                job.run_dir.string()));
    if (endpoint) console.message(fmt::format("metrics on http://127.0.0.1:{}/metrics", endpoint->port()));
    wait_for_signal();
    wait_for_child_exit();
    if (!console.live()) next_status_ns = monotonic_ns() + ns_from_s(cfg.status_interval_s);
    for (auto& s : slots) spawn(*s);
    tick();
    io.run();

    sample_metrics();
    JobResult r;
    r.summary = summarize(control);
    r.elapsed_s = seconds_since(started_ns);
    if (failure) {
      r.outcome = JobResult::Outcome::failed;
      r.failure = *failure;
    } else if (interrupt_signal != 0) {
      r.outcome = JobResult::Outcome::interrupted;
      r.signal = interrupt_signal;
    } else {
      r.outcome = JobResult::Outcome::succeeded;
    }
    event(fmt::format("\"event\":\"end\",\"outcome\":{}",
                      json_string(r.outcome == JobResult::Outcome::succeeded     ? "succeeded"
                                  : r.outcome == JobResult::Outcome::interrupted ? "interrupted"
                                                                                 : "failed")));
    if (endpoint) endpoint->close();
    return r;
  }
};

Supervisor::Supervisor(const JobConfig& config, Job job, Console& console)
    : impl_(std::make_unique<Impl>(config, std::move(job), console)) {}

Supervisor::~Supervisor() = default;

JobResult Supervisor::run() { return impl_->run(); }

// ---- run_job ----

namespace {

std::string random_suffix() {
  std::random_device rd;
  return fmt::format("{:04x}", rd() & 0xffff);
}

// A free TCP port on the loopback for MASTER_PORT (torchrun does the same: bind 0, read, close).
std::uint16_t free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  TANDEM_CHECK_SYS(fd);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    int err = errno;
    ::close(fd);
    throw_system_error(err, "bind(127.0.0.1:0)", __FILE__, __LINE__);
  }
  ::close(fd);
  return ntohs(addr.sin_port);
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

int run_job(const std::filesystem::path& config_file, std::span<const std::string> overrides) {
  const JobConfig cfg = JobConfig::load(config_file, overrides);
  // A closed stdout (`tandem run | head`) must not kill the launcher before it has cleaned up; the
  // children get the default disposition back (child_process.cpp).
  ::signal(SIGPIPE, SIG_IGN);

  Supervisor::Job job;
  job.id = cfg.unique_id ? fmt::format("{}-{}", cfg.job_name, random_suffix()) : cfg.job_name;
  job.run_dir = std::filesystem::absolute(cfg.run_dir.empty() ? cfg.runs_dir / job.id : cfg.run_dir);
  std::error_code ec;
  std::filesystem::create_directories(job.run_dir, ec);
  if (ec) fail("cannot create the run directory {}: {}: set run.runs_dir or run.run_dir", job.run_dir.string(), ec.message());
  write_file(job.run_dir / "config.toml", cfg.config.to_toml());
  job.child_config = job.run_dir / "job.toml";
  write_file(job.child_config, child_toml(cfg.config));
  job.master_port = cfg.master_port != 0 ? cfg.master_port : free_port();

  Console console(use_live_status(cfg.status));
  JobResult result;
  {
    Supervisor supervisor(cfg, job, console);
    result = supervisor.run();
  }  // every child reaped, every segment of the job removed

  console.clear_status();
  if (auto left = job_segments_in_shm(job.id); !left.empty()) {
    console.warning(fmt::format("job {} failed: /{} could not be removed from /dev/shm (remove it with "
                                "`tandem shm rm`)", job.id, left.front()));
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
      console.message(fmt::format("job {} stopped by {} after {}; every process exited cleanly; run dir {}",
                                  job.id, signal_name(result.signal), clock_text(result.elapsed_s),
                                  job.run_dir.string()));
      return 128 + result.signal;
    case JobResult::Outcome::failed:
      console.warning(fmt::format("job {} failed after {}: {}", job.id, clock_text(result.elapsed_s), result.failure));
      return 1;
  }
  return 1;
}

}  // namespace tandem::run
