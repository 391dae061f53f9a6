// What a person or a scraper sees of a running job, computed from its control block: the status
// line, `tandem status`'s table, its JSON (`tandem status --json`, the dashboard's /api/state) and
// Prometheus text (metrics.jsonl records: metrics_log.hpp). Functions of a block (any process may
// call them; they only read it, and the run dir's dashboard.url).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "shm/control_block.hpp"

namespace tandem::run {

struct JobSummary {
  std::uint32_t learners = 0, learners_alive = 0;
  std::uint32_t actors = 0, actors_alive = 0;  // the built-in actors (group "actor")
  struct Group {
    std::string name;
    std::uint32_t count = 0, alive = 0;
  };
  std::vector<Group> groups;            // the user's program groups (run.group), in row order
  std::uint32_t restarts = 0;           // over all processes
  bool have_learner = false;            // rank 0 has reported
  std::uint64_t step = 0;               // rank 0
  std::uint64_t published_version = 0;  // rank 0
  double samples_per_s = shm::kNaN;     // summed over ranks
  double loss = shm::kNaN;              // rank 0
  bool have_eval = false;               // some actor has reported an accuracy
  std::uint64_t eval_version = 0;       // the newest evaluated version
  double eval_accuracy = shm::kNaN;     // and its accuracy and loss
  double eval_loss = shm::kNaN;
  // RL (rank 0 of an RL learner; env steps/s falls back to the actors' sum before it reports)
  double env_steps_per_s = shm::kNaN;
  double episode_return = shm::kNaN;
  double policy_lag_avg = shm::kNaN;
  // Data-parallel (more than one rank reported): the slowest rank's step, all-reduce and exposed time
  double rank_step_s = shm::kNaN;
  double rank_allreduce_s = shm::kNaN;
  double rank_exposed_s = shm::kNaN;
};
JobSummary summarize(const shm::ControlBlock& block);

// "step 1200 | 35.1k samples/s | loss 0.4123 | v12 | eval acc 0.8731 (v11) | actors 2/2 | logger 1/1 | restarts 0 | 1:02"
std::string status_text(const JobSummary& summary, double elapsed_s);
// The table `tandem status` prints.
std::string status_table(const shm::ControlBlock& block);
// The Prometheus text exposition (version 0.0.4) of every process.
std::string prometheus_text(const shm::ControlBlock& block);
// The job as JSON (job_view_json.cpp): job, run_dir, dashboard, launcher_pid, launcher_alive,
// elapsed_s, stop, summary, and per process its metrics.jsonl record plus pid, state, exit_status,
// heartbeat_age_s.
nlohmann::ordered_json status_json(const shm::ControlBlock& block);
// The dashboard's URL as the launcher wrote it to <run_dir>/dashboard.url; "" when there is none.
std::string dashboard_url(const std::string& run_dir);

std::string human_rate(double per_s);    // 850, 35.1k, 1.23M
std::string clock_text(double seconds);  // 0:42, 1:02:03

}  // namespace tandem::run
