// <run_dir>/metrics.jsonl: one JSON object per line, appended. The launcher's events
// ({"time_s":1.234,"job":"fmnist-3f9a","event":"spawn","process":"actor.1","pid":42,"restarts":0};
// events spawn, exit, stop, end) and samples of each process's metrics from the control block, written
// when they changed ({"time_s":..,"job":..,"process":"learner.0","role":"learner","step":..,"version":..,
// "samples":..,"epoch":..,"samples_per_s":..,"loss":..,...,"restarts":0,"group":"learner"}: the
// fields of shm/metric_fields.hpp in its order, a metric that was not measured left out). time_s counts seconds since the launcher started, to the millisecond;
// "job" is the job id, so that the rows of a resumed run (same file, new job) stay apart.
// Each line is flushed as it is written, so a reader can follow the file.
// Threads: the launcher's one thread.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "shm/control_block.hpp"

namespace tandem::run {

class MetricsLog {
 public:
  // Throws UserError naming run.runs_dir when the file cannot be written.
  MetricsLog(const std::filesystem::path& file, std::string job, std::uint64_t started_ns, std::uint32_t rows);
  // One event line: time_s, then `fields` in their order.
  void event(const nlohmann::ordered_json& fields);
  // One line per process whose metrics changed since the last sample.
  void sample(const shm::ControlBlock& control);

 private:
  void write(const nlohmann::ordered_json& record);
  double time_s() const;
  std::ofstream file_;
  std::string job_;
  std::uint64_t started_ns_;
  std::vector<std::uint64_t> last_metrics_ns_;
};

// One metrics record of a process (metrics.jsonl's sample line).
nlohmann::ordered_json metrics_record(const shm::ProcessSnapshot& process, double time_s);

}  // namespace tandem::run
