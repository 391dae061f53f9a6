// `tandem run` refusing a bad config before it creates anything.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/file_descriptor.hpp"
#include "tests/run_launcher_fixture.hpp"

using namespace tandem;
using namespace tandem::test;
namespace fs = std::filesystem;

TEST_CASE("tandem run: bad config values are one-line errors naming the key, and nothing is created" *
          doctest::timeout(60)) {
  struct Row {
    std::map<std::string, std::string> keys;  // written into the file
    std::vector<std::string> set;
    std::string expect;
  };
  const std::vector<Row> rows = {
      {{}, {"--set", "run.actors=-1"}, "run.actors = -1 is out of range [0, 4096]"},
      {{{"learners", "\"two\""}}, {}, "run.learners must be an integer"},
      {{{"learner_program", "\"/nonexistent/tandem-learner\""}},
       {},
       "run.learner_program = \"/nonexistent/tandem-learner\""},
      {{{"actor_program", "\"no-such-program-xyz\""}},
       {},
       "run.actor_program = \"no-such-program-xyz\" was found neither"},
      {{{"metrics_port", "70000"}}, {}, "run.metrics_port = 70000 is out of range"},
      {{{"actorz", "1"}}, {}, "unknown key 'run.actorz'"},
      {{{"job", "\"bad name!\""}}, {}, "run.job = \"bad name!\" is not a valid job name"},
      {{{"restart_backoff_s", "2"}, {"restart_backoff_max_s", "1"}}, {}, "run.restart_backoff_max_s = 1 is shorter"},
      {{{"status", "\"fancy\""}}, {}, "run.status = \"fancy\" is not one of: auto, live, plain, off"},
      {{}, {"--set", "run.heartbeat_timeout_s=soon"}, "run.heartbeat_timeout_s must be a number"},
  };
  for (const auto& row : rows) {
    JobFixture f;
    for (const auto& [k, v] : row.keys) f.keys[k] = v;
    std::string cmd = tandem_binary() + " run " + f.write();
    for (const auto& a : row.set) cmd += " '" + a + "'";
    auto r = run_command(cmd);
    CAPTURE(r.output);
    CHECK(r.status == 1);
    CHECK(r.output.find(row.expect) != std::string::npos);
    CHECK(r.output.find('\n') == r.output.size() - 1);  // exactly one line
    CHECK(segments_of(f.job).empty());
    CHECK_FALSE(fs::exists(f.run_dir()));
  }
}

TEST_CASE("tandem run: a metrics port in use is an error naming run.metrics_port, with nothing left behind" *
          doctest::timeout(60)) {
  const FileDescriptor holder(::socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  REQUIRE(::bind(holder.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(::listen(holder.get(), 1) == 0);
  REQUIRE(::getsockname(holder.get(), reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  JobFixture f;
  f.keys["metrics_port"] = std::to_string(ntohs(addr.sin_port));
  auto r = run_command(tandem_binary() + " run " + f.write());
  CAPTURE(r.output);
  CHECK(r.status == 1);
  CHECK(r.output.find("run.metrics_port") != std::string::npos);
  CHECK(segments_of(f.job).empty());
}
