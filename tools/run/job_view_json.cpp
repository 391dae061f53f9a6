// The job as JSON: `tandem status --json` and the dashboard's /api/state (job_view.hpp).
#include <cmath>
#include <fstream>

#include "common/clock.hpp"
#include "common/process.hpp"
#include "shm/metric_fields.hpp"
#include "tools/run/job_view.hpp"
#include "tools/run/metrics_log.hpp"

namespace tandem::run {
namespace {

// JSON has no NaN: an unmeasured figure is null.
nlohmann::ordered_json finite(double v) { return std::isfinite(v) ? nlohmann::ordered_json(v) : nullptr; }

}  // namespace

std::string dashboard_url(const std::string& run_dir) {
  std::ifstream in(std::filesystem::path(run_dir) / "dashboard.url");
  std::string url;
  std::getline(in, url);
  return url.starts_with("http://") ? url : std::string();
}

nlohmann::ordered_json status_json(const shm::ControlBlock& block) {
  const auto& d = block.descriptor();
  const std::uint64_t now = monotonic_ns();
  const double elapsed_s = (now - std::min(now, d.started_mono_ns)) / 1e9;
  const std::string url = dashboard_url(d.run_dir);
  const JobSummary s = summarize(block);
  nlohmann::ordered_json j;
  j["job"] = std::string(d.job);
  j["run_dir"] = std::string(d.run_dir);
  j["dashboard"] = url.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(url);
  j["launcher_pid"] = d.launcher_pid;
  j["launcher_alive"] = process_alive(static_cast<std::uint32_t>(d.launcher_pid));
  j["elapsed_s"] = std::round(elapsed_s * 1000) / 1000;
  j["stop"] = block.stop_requested() ? nlohmann::ordered_json(std::string(shm::stop_reason_name(block.stop_reason())))
                                     : nlohmann::ordered_json(nullptr);
  j["status"] = status_text(s, elapsed_s);
  j["summary"] = {{"learners", s.learners},
                  {"learners_alive", s.learners_alive},
                  {"actors", s.actors},
                  {"actors_alive", s.actors_alive},
                  {"restarts", s.restarts},
                  {"step", s.step},
                  {"published_version", s.published_version},
                  {"samples_per_s", finite(s.samples_per_s)},
                  {"loss", finite(s.loss)},
                  {"eval_version", s.have_eval ? nlohmann::ordered_json(s.eval_version) : nullptr},
                  {"eval_accuracy", finite(s.eval_accuracy)},
                  {"env_steps_per_s", finite(s.env_steps_per_s)},
                  {"episode_return", finite(s.episode_return)},
                  {"policy_lag_avg", finite(s.policy_lag_avg)}};
  auto& processes = j["processes"] = nlohmann::ordered_json::array();
  for (std::uint32_t i = 0; i < block.row_count(); ++i) {
    const auto p = block.snapshot(i);
    nlohmann::ordered_json row = metrics_record(p, elapsed_s);
    row.erase("time_s");
    row["index"] = p.index;
    row["pid"] = p.pid;
    row["state"] = std::string(shm::state_name(p.state));
    row["exit_status"] = p.exit_status >= 0 ? nlohmann::ordered_json(p.exit_status) : nullptr;
    row["heartbeat"] = p.heartbeat;
    row["heartbeat_age_s"] = shm::is_alive(p.state) && p.heartbeat
                                 ? nlohmann::ordered_json(std::round((now - std::min(now, p.heartbeat_ns)) / 1e6) / 1e3)
                                 : nullptr;
    if (!p.metrics)
      row[std::string(shm::metric("version"))] = p.version_seen;  // the version it runs, before it reports
    processes.push_back(std::move(row));
  }
  return j;
}

}  // namespace tandem::run
