// A finished (or running) run's curves, read from its run dir: the dashboard's charts
// (tools/dashboard/dashboard.js) against the learner's step, for `tandem plot`.
//   loss, accuracy        learner rank 0 (train) and eval.jsonl (evaluated)
//   return, length        RL: rank 0's rollout episodes and evaluations
//   throughput            samples/s per learner rank, env steps/s of rank 0
//   lag                   RL policy lag min/avg/max
//   ranks                 data-parallel (> 1 rank): step, all-reduce and exposed comm seconds per rank
// A panel or series without points is left out. Lines that are not JSON objects are skipped (a torn
// last line of a killed run), so that what was written is still drawn.
#pragma once

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace tandem::plot {

struct Series {
  std::string label;
  std::vector<std::pair<double, double>> points;  // (step, value), sorted by step
};

struct Panel {
  std::string id;
  std::string title;
  std::vector<Series> series;
};

// Throws UserError naming the run dir when it has no metrics.jsonl.
std::vector<Panel> run_curves(const std::filesystem::path& run_dir);

}  // namespace tandem::plot
