#include "tools/plot/run_curves.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <string_view>

#include "common/error.hpp"
#include "shm/metric_fields.hpp"

namespace tandem::plot {
namespace {

using Json = nlohmann::json;

std::vector<Json> read_rows(const std::filesystem::path& file) {
  std::vector<Json> rows;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object()) rows.push_back(std::move(j));
  }
  return rows;
}

// The (step, field) points of `rows`; rows without a finite number in `field` are skipped.
Series series_of(std::string label, const std::vector<const Json*>& rows, std::string_view field) {
  Series s{std::move(label), {}};
  for (const Json* r : rows) {
    const auto step = r->find(std::string(shm::metric("step")));
    const auto value = r->find(std::string(field));
    if (step == r->end() || value == r->end() || !step->is_number() || !value->is_number()) continue;
    const double v = value->get<double>();
    if (std::isfinite(v)) s.points.emplace_back(step->get<double>(), v);
  }
  std::stable_sort(s.points.begin(), s.points.end(), [](auto& a, auto& b) { return a.first < b.first; });
  // Evaluators of one version report the same figures: one point each.
  s.points.erase(std::unique(s.points.begin(), s.points.end()), s.points.end());
  return s;
}

}  // namespace

std::vector<Panel> run_curves(const std::filesystem::path& run_dir) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(run_dir / "metrics.jsonl", ec))
    fail("{} has no metrics.jsonl: give the run directory of a `tandem run` job (runs/<job>)", run_dir.string());
  const std::vector<Json> metrics = read_rows(run_dir / "metrics.jsonl");
  const std::vector<Json> evals = read_rows(run_dir / "eval.jsonl");

  std::map<std::string, std::vector<const Json*>> learners;  // process -> its sample rows
  for (const Json& r : metrics)
    if (!r.contains("event") && r.value("role", "") == "learner" && r.contains("process"))
      learners[r["process"].get<std::string>()].push_back(&r);
  std::vector<const Json*> eval_rows;
  eval_rows.reserve(evals.size());
  for (const Json& r : evals) eval_rows.push_back(&r);
  const std::vector<const Json*> rank0 = learners.count("learner.0") ? learners["learner.0"]
                                                                     : std::vector<const Json*>{};
  auto per_rank = [&](std::string_view field, const std::string& label) {
    std::vector<Series> out;
    out.reserve(learners.size());
    for (const auto& [name, rows] : learners)
      out.push_back(
          series_of(learners.size() == 1 ? label : label + " rank " + name.substr(name.find('.') + 1), rows, field));
    return out;
  };

  std::vector<Panel> panels = {
      {"loss",
       "Loss",
       {series_of("train loss", rank0, shm::metric("loss")), series_of("eval loss", eval_rows, shm::metric("loss"))}},
      {"accuracy",
       "Accuracy",
       {series_of("train accuracy", rank0, shm::metric("accuracy")),
        series_of("eval accuracy", eval_rows, shm::metric("accuracy"))}},
      {"return",
       "Episode return",
       {series_of("rollouts", rank0, shm::metric("episode_return")),
        series_of("evaluation", eval_rows, shm::metric("episode_return"))}},
      {"length",
       "Episode length",
       {series_of("rollouts", rank0, shm::metric("episode_length")),
        series_of("evaluation", eval_rows, shm::metric("episode_length"))}},
      {"throughput", "Throughput (per second)", per_rank("samples_per_s", "samples/s")},
      {"lag",
       "Policy lag (versions)",
       {series_of("min", rank0, shm::metric("policy_lag_min")), series_of("avg", rank0, shm::metric("policy_lag_avg")),
        series_of("max", rank0, shm::metric("policy_lag_max"))}},
      {"ranks", "Per rank: step / all-reduce / exposed comm (s)", {}},
  };
  panels[4].series.push_back(series_of("env steps/s", rank0, shm::metric("env_steps_per_s")));
  if (learners.size() > 1)
    for (const auto& [field, label] :
         {std::pair{shm::metric("seconds"), "step"}, std::pair{shm::metric("allreduce_s"), "all-reduce"},
          std::pair{shm::metric("exposed_comm_s"), "exposed"}})
      for (auto& s : per_rank(field, label)) panels[6].series.push_back(std::move(s));
  for (auto& p : panels) std::erase_if(p.series, [](const Series& s) { return s.points.empty(); });
  std::erase_if(panels, [](const Panel& p) { return p.series.empty(); });
  return panels;
}

}  // namespace tandem::plot
