#include "tools/run/metrics_log.hpp"

#include <cmath>

#include "common/clock.hpp"
#include "common/error.hpp"

namespace tandem::run {
namespace {

double to_millisecond(double s) { return std::round(s * 1000) / 1000; }

// JSON has no NaN or infinities: such a field is left out.
void put_finite(nlohmann::ordered_json& record, const char* key, double v) {
  if (std::isfinite(v)) record[key] = v;
}

}  // namespace

nlohmann::ordered_json metrics_record(const shm::ProcessSnapshot& p, double time_s) {
  nlohmann::ordered_json record;
  record["time_s"] = to_millisecond(time_s);
  record["process"] = p.name();
  record["role"] = std::string(shm::role_name(p.role));
  if (p.metrics) {
    const auto& m = *p.metrics;
    record["step"] = m.step;
    record["version"] = m.version;
    record["samples"] = m.samples;
    record["epoch"] = m.epoch;
    put_finite(record, "samples_per_s", m.samples_per_s);
    put_finite(record, "loss", m.loss);
    put_finite(record, "accuracy", m.accuracy);
    put_finite(record, "seconds", m.seconds);
    put_finite(record, "lr", m.lr);
    if (m.env_steps > 0) record["env_steps"] = m.env_steps;
    put_finite(record, "env_steps_per_s", m.env_steps_per_s);
    put_finite(record, "episode_return", m.episode_return);
    put_finite(record, "episode_length", m.episode_length);
    put_finite(record, "policy_lag_min", m.policy_lag_min);
    put_finite(record, "policy_lag_avg", m.policy_lag_avg);
    put_finite(record, "policy_lag_max", m.policy_lag_max);
    if (m.ring_full_waits > 0) record["ring_full_waits"] = m.ring_full_waits;
    put_finite(record, "allreduce_s", m.allreduce_s);
    put_finite(record, "exposed_comm_s", m.exposed_comm_s);
    put_finite(record, "env_share", m.env_share);
    put_finite(record, "compute_share", m.compute_share);
    put_finite(record, "wait_share", m.wait_share);
  }
  record["restarts"] = p.restarts;
  record["group"] = p.group.empty() ? std::string(shm::role_name(p.role)) : p.group;
  return record;
}

MetricsLog::MetricsLog(const std::filesystem::path& file, std::string job, std::uint64_t started_ns, std::uint32_t rows)
    : file_(file, std::ios::app), job_(std::move(job)), started_ns_(started_ns), last_metrics_ns_(rows, 0) {
  if (!file_) fail("cannot write {}: check the permissions of run.runs_dir", file.string());
}

double MetricsLog::time_s() const {
  const std::uint64_t now = monotonic_ns();
  return now > started_ns_ ? (now - started_ns_) / 1e9 : 0.0;
}

void MetricsLog::event(const nlohmann::ordered_json& fields) {
  nlohmann::ordered_json record = {{"time_s", to_millisecond(time_s())}};
  record.update(fields);
  write(record);
}

void MetricsLog::sample(const shm::ControlBlock& control) {
  const double t = time_s();
  for (std::uint32_t row = 0; row < control.row_count(); ++row) {
    const auto p = control.snapshot(row);
    if (!p.metrics || p.metrics->updated_ns == last_metrics_ns_[row]) continue;
    last_metrics_ns_[row] = p.metrics->updated_ns;
    write(metrics_record(p, t));
  }
}

void MetricsLog::write(const nlohmann::ordered_json& record) {
  nlohmann::ordered_json line = {{"time_s", record.at("time_s")}, {"job", job_}};
  for (const auto& [key, value] : record.items())
    if (key != "time_s") line[key] = value;
  file_ << line.dump() << '\n';
  file_.flush();
}

}  // namespace tandem::run
