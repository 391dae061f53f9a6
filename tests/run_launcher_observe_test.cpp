// A running job seen from outside: `tandem status` and the Prometheus endpoint.
#include <doctest/doctest.h>
#include <signal.h>

#include <fmt/format.h>

#include "tests/run_launcher_fixture.hpp"

using namespace tandem;
using namespace tandem::test;
using namespace std::chrono_literals;

TEST_CASE("tandem run: a running job shows in `tandem status` and on the Prometheus endpoint" * doctest::timeout(90)) {
  JobFixture f;
  const int port = free_loopback_port();  // the launcher binds it a moment later
  f.keys["metrics_port"] = std::to_string(port);
  f.keys["learner_args"] = "\"--tandem-child=fake-learner steps=100000 step_ms=20\"";
  Launcher run({f.write()});
  REQUIRE(run.wait_for_output("[learner.0] step 20"));
  REQUIRE(run.wait_for_output("[actor.1] actor 1 running"));

  CommandResult table;
  // An actor's first evaluation reaches the control block a moment after it says it runs.
  CHECK(eventually(
      [&] {
    table = run_command(tandem_binary() + " status " + f.job);
    return table.output.find("eval acc") != std::string::npos;
      },
      20s));
  CAPTURE(table.output);
  CHECK(table.status == 0);
  CHECK(table.output.find("job " + f.job) != std::string::npos);
  CHECK(table.output.find("learner.0") != std::string::npos);
  CHECK(table.output.find("running") != std::string::npos);
  CHECK(table.output.find("eval acc") != std::string::npos);
  auto all = run_command(tandem_binary() + " status");
  CHECK(all.output.find("job " + f.job) != std::string::npos);

  const std::string scrape = http_get(port, "/metrics");
  CAPTURE(scrape);
  CHECK(scrape.find("200 OK") != std::string::npos);
  CHECK(scrape.find(fmt::format("tandem_step{{job=\"{}\",process=\"learner.0\",role=\"learner\"}}", f.job)) !=
        std::string::npos);
  CHECK(scrape.find("tandem_accuracy{") != std::string::npos);
  CHECK(scrape.find("tandem_process_up{") != std::string::npos);
  CHECK(scrape.find("Content-Type: text/plain; version=0.0.4") != std::string::npos);

  ::kill(run.pid(), SIGTERM);
  CHECK(run.wait(30s) == 143);
  CHECK(segments_of(f.job).empty());
  auto after = run_command(tandem_binary() + " status " + f.job);
  CHECK(after.status == 1);
  CHECK(after.output.find("does not exist") != std::string::npos);
}
