#include "tools/run/metrics_log.hpp"

#include <cmath>

#include "common/clock.hpp"
#include "common/error.hpp"
#include "shm/metric_fields.hpp"

namespace tandem::run {
namespace {

double to_millisecond(double s) { return std::round(s * 1000) / 1000; }

}  // namespace

nlohmann::ordered_json metrics_record(const shm::ProcessSnapshot& p, double time_s) {
  nlohmann::ordered_json record;
  record["time_s"] = to_millisecond(time_s);
  record["process"] = p.name();
  record["role"] = std::string(shm::role_name(p.role));
  if (p.metrics)
    for (const shm::MetricField& f : shm::kMetricFields) {
      if (!shm::has_metric(*p.metrics, f)) continue;  // JSON has no NaN: an unmeasured figure is left out
      const std::string key(f.name);
      if (f.kind == shm::MetricKind::measure) record[key] = shm::measure_of(*p.metrics, f);
      else record[key] = shm::count_of(*p.metrics, f);
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
