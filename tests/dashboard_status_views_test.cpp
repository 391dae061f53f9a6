// The RL and data-parallel figures in the status views (job_view.hpp): the status line, `tandem
// status`'s table, the Prometheus text and the JSON of `tandem status --json` and /api/state, from a
// control block whose rows report them as the RL learner, rollout actors and DDP ranks do; and every
// metric of shm/metric_fields.hpp through each of them and metrics.jsonl's row.
#include <doctest/doctest.h>

#include <fmt/format.h>

#include "shm/control_client.hpp"
#include "shm/metric_fields.hpp"
#include "tests/harness.hpp"
#include "tools/run/job_view.hpp"
#include "tools/run/metrics_log.hpp"

using namespace tandem;
using shm::ControlBlock;
using shm::ControlClient;
using shm::ProcessMetrics;
using shm::Role;

namespace {

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE(
    "status views: an RL job on two ranks shows env steps/s, return, policy lag, the slowest rank's times and where each process's time went") {
  const std::string job = test::unique_name("views");
  ControlBlock block = ControlBlock::create({.job = job, .learners = 2, .actors = 1, .run_dir = "/nonexistent"});
  for (std::uint32_t row = 0; row < 3; ++row) block.begin_spawn(row, 0);
  auto rank0 = ControlClient::attach(job, Role::learner, 0);
  auto rank1 = ControlClient::attach(job, Role::learner, 1);
  auto actor = ControlClient::attach(job, Role::actor, 0);
  rank0.report({.step = 40,
                .version = 40,
                .loss = 0.25,
                .seconds = 0.1,
                .env_steps = 81920,
                .env_steps_per_s = 41000,
                .episode_return = 187.5,
                .episode_length = 187,
                .policy_lag_min = 0,
                .policy_lag_avg = 1.5,
                .policy_lag_max = 3,
                .allreduce_s = 0.02,
                .exposed_comm_s = 0.004,
                .compute_share = 0.7,
                .wait_share = 0.25});
  rank1.report({.step = 40, .seconds = 0.12, .allreduce_s = 0.03, .exposed_comm_s = 0.005});
  actor.report({.env_steps = 9000,
                .env_steps_per_s = 20500,
                .episode_return = 150,
                .ring_full_waits = 3,
                .env_share = 0.45,
                .compute_share = 0.3,
                .wait_share = 0.2});

  const std::string line = run::status_text(run::summarize(block), 5);
  CAPTURE(line);
  CHECK(has(line, "41.0k env steps/s"));  // the learner's figure, not the actors' sum
  CHECK(has(line, "return 187.5"));
  CHECK(has(line, "lag 1.50"));
  CHECK(has(line, "slowest rank: step 0.120s all-reduce 0.030s exposed 0.005s"));

  const std::string table = run::status_table(block);
  CAPTURE(table);
  // Where each process's time went: the learner's updates and waits for slots, an actor's envs,
  // policy and waits on its full ring.
  CHECK(has(table,
            "env/s 41.0k return 187.5 len 187 lag 1.50 allreduce 0.020s exposed 0.004s | update 70% slot wait 25%"));
  CHECK(has(table, "allreduce 0.030s exposed 0.005s"));
  CHECK(has(table, "env/s 20.5k return 150.0 ring waits 3 | env 45% policy 30% ring wait 20%"));
  CHECK(!has(table, "dashboard "));  // no dashboard.url in the run dir: no line

  const std::string prom = run::prometheus_text(block);
  const std::string labels = "{job=\"" + job + "\",process=\"";
  CHECK(has(prom, "tandem_env_steps_per_second" + labels + "learner.0\",role=\"learner\"} 41000\n"));
  CHECK(has(prom, "tandem_policy_lag" + labels + "learner.0\",role=\"learner\"} 1.5\n"));
  CHECK(has(prom, "tandem_allreduce_seconds" + labels + "learner.1\",role=\"learner\"} 0.03\n"));
  CHECK(has(prom, "tandem_ring_full_waits_total" + labels + "actor.0\",role=\"actor\"} 3\n"));
  CHECK(has(prom, "tandem_env_steps_total" + labels + "learner.0\",role=\"learner\"} 81920\n"));
  CHECK(has(prom, "tandem_wait_share" + labels + "learner.0\",role=\"learner\"} 0.25\n"));
  CHECK(has(prom, "tandem_env_share" + labels + "actor.0\",role=\"actor\"} 0.45\n"));

  const auto json = run::status_json(block);
  CHECK(json["job"] == job);
  CHECK(json["dashboard"].is_null());
  CHECK(json["summary"]["env_steps_per_s"] == 41000.0);
  CHECK(json["summary"]["policy_lag_avg"] == 1.5);
  REQUIRE(json["processes"].size() == 3);
  CHECK(json["processes"][0]["process"] == "learner.0");
  CHECK(json["processes"][0]["episode_return"] == 187.5);
  CHECK(json["processes"][1]["allreduce_s"] == 0.03);
  CHECK(json["processes"][2]["state"] == "starting");
  CHECK(json["processes"][2]["ring_full_waits"] == 3);
  CHECK(json["processes"][2]["compute_share"] == 0.3);
}

TEST_CASE("status views: a supervised job on one rank keeps samples/s and shows no RL or rank figures") {
  const std::string job = test::unique_name("views");
  ControlBlock block = ControlBlock::create({.job = job, .learners = 1, .actors = 0, .run_dir = "/nonexistent"});
  block.begin_spawn(0, 0);
  ControlClient::attach(job, Role::learner, 0).report({.step = 7, .samples_per_s = 1500, .loss = 0.5, .seconds = 0.1});
  const std::string line = run::status_text(run::summarize(block), 5);
  CAPTURE(line);
  CHECK(has(line, "step 7 | 1.5k samples/s | loss 0.5000"));
  CHECK(!has(line, "env steps"));
  CHECK(!has(line, "slowest rank"));
  const auto json = run::status_json(block);
  CHECK(json["summary"]["env_steps_per_s"].is_null());
  CHECK(!json["processes"][0].contains("episode_return"));
}

TEST_CASE(
    "status views: every metric of the field table, written by its name, reads back by that name in metrics.jsonl's "
    "row, the JSON and /metrics") {
  const std::string job = test::unique_name("views");
  ControlBlock block = ControlBlock::create({.job = job, .learners = 1, .actors = 0, .run_dir = "/nonexistent"});
  block.begin_spawn(0, 0);
  ProcessMetrics m;
  auto value = [](std::size_t i) { return 100.0 + static_cast<double>(i); };  // each field its own
  for (std::size_t i = 0; i < shm::kMetricFields.size(); ++i) {
    const shm::MetricField& f = shm::kMetricFields[i];
    if (f.kind == shm::MetricKind::measure) shm::set_measure(m, f, value(i) + 0.5);
    else shm::set_count(m, f, static_cast<std::uint64_t>(value(i)));
  }
  CHECK(m.step == 100);  // the table's first entry is the record's first field after updated_ns
  CHECK(m.reward_std ==
        value(shm::kMetricFields.size() - 1) + 0.5);  // the table's last entry is the record's last field
  ControlClient::attach(job, Role::learner, 0).report(m);

  const auto record = run::metrics_record(block.snapshot(0), 1.0);
  const auto shown = run::status_json(block)["processes"][0];
  const std::string prom = run::prometheus_text(block);
  for (std::size_t i = 0; i < shm::kMetricFields.size(); ++i) {
    const shm::MetricField& f = shm::kMetricFields[i];
    const std::string name(f.name);
    const double want = f.kind == shm::MetricKind::measure ? value(i) + 0.5 : value(i);
    CAPTURE(name);
    REQUIRE(record.contains(name));
    CHECK(record[name].get<double>() == want);
    REQUIRE(shown.contains(name));
    CHECK(shown[name].get<double>() == want);
    if (!f.family.empty())
      CHECK(
          has(prom, fmt::format("{}{{job=\"{}\",process=\"learner.0\",role=\"learner\"}} {}\n", f.family, job, want)));
  }
}
