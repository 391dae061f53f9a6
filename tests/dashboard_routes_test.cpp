// The dashboard's routes over a run dir (dashboard_routes.hpp), served as `tandem dashboard` serves a
// finished run: the page with its chart library inlined, the history read from byte offsets in whole
// lines, clean answers to bad offsets; and `tandem dashboard`'s answers to bad input.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <thread>

#include "common/file_descriptor.hpp"
#include "tests/run_launcher_fixture.hpp"
#include "tools/run/dashboard_routes.hpp"

using namespace tandem;
using namespace tandem::test;

namespace {

struct Served {
  explicit Served(const std::filesystem::path& run_dir) : endpoint(io, 0, run::dashboard_routes(run_dir, nullptr)) {}
  ~Served() {
    boost::asio::post(io, [this] { endpoint.close(); });
    work.reset();
    io.stop();
    thread.join();
  }
  boost::asio::io_context io;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work = boost::asio::make_work_guard(io);
  run::MetricsEndpoint endpoint;
  std::thread thread{[this] { io.run(); }};
};

std::string body(const std::string& response) { return response.substr(response.find("\r\n\r\n") + 4); }
std::string status_line(const std::string& response) { return response.substr(0, response.find("\r\n")); }

const std::string kLine1 = R"({"time_s":1,"job":"j","process":"learner.0","role":"learner","step":10,"loss":2.0})";
const std::string kLine2 = R"({"time_s":2,"job":"j","process":"learner.0","role":"learner","step":20,"loss":1.5})";

}  // namespace

TEST_CASE("dashboard routes: / and /dashboard serve the page with uPlot inlined; a finished run has no /metrics" *
          doctest::timeout(30)) {
  TempDir dir;
  Served s(dir.path());
  const std::string page = http_get(s.endpoint.port(), "/");
  CHECK(status_line(page) == "HTTP/1.0 200 OK");
  CHECK(page.find("Content-Type: text/html") != std::string::npos);
  CHECK(page.find("uPlot") != std::string::npos);       // the library, not a link to the network
  CHECK(page.find("data-chart") != std::string::npos);  // the page's own script
  CHECK(page.find("<script src") == std::string::npos);
  CHECK(body(http_get(s.endpoint.port(), "/dashboard")) == body(page));
  CHECK(status_line(http_get(s.endpoint.port(), "/metrics")) == "HTTP/1.0 404 Not Found");
  const auto state = nlohmann::json::parse(body(http_get(s.endpoint.port(), "/api/state")));
  CHECK(state["live"] == false);
}

TEST_CASE("dashboard routes: history comes in whole lines from the offsets asked, and a line being written waits" *
          doctest::timeout(30)) {
  TempDir dir;
  std::ofstream(dir / "metrics.jsonl") << kLine1 << "\n"
                                       << kLine2 << "\n"
                                       << R"({"time_s":3,"job":"j","pro)";
  Served s(dir.path());
  auto h = nlohmann::json::parse(body(http_get(s.endpoint.port(), "/api/history?metrics=0&eval=0")));
  CHECK(h["live"] == false);
  CHECK(h["metrics"]["text"] == kLine1 + "\n" + kLine2 + "\n");
  CHECK(h["metrics"]["next"] == kLine1.size() + kLine2.size() + 2);
  CHECK(h["metrics"]["size"] > h["metrics"]["next"]);
  CHECK(h["eval"]["text"] == "");  // no eval.jsonl (yet): empty, not an error
  CHECK(h["eval"]["size"] == 0);

  const std::size_t from = kLine1.size() + 1;
  h = nlohmann::json::parse(body(http_get(s.endpoint.port(), fmt::format("/api/history?metrics={}", from))));
  CHECK(h["metrics"]["text"] == kLine2 + "\n");
  h = nlohmann::json::parse(body(http_get(s.endpoint.port(), "/api/history?metrics=999999&eval=5")));
  CHECK(h["metrics"]["text"] == "");
  CHECK(h["metrics"]["next"] == h["metrics"]["size"]);  // past the end: clamped, never a loop
}

TEST_CASE("dashboard routes: an offset that is not a byte count is 400 naming the form" * doctest::timeout(30)) {
  TempDir dir;
  Served s(dir.path());
  for (const char* bad : {"/api/history?metrics=abc", "/api/history?eval=-1", "/api/history?metrics=1x",
                          "/api/history?metrics=99999999999999999999999"}) {
    CAPTURE(bad);
    const std::string r = http_get(s.endpoint.port(), bad);
    CHECK(status_line(r) == "HTTP/1.0 400 Bad Request");
    CHECK(body(r).find("?metrics=0&eval=0") != std::string::npos);
  }
}

TEST_CASE("tandem dashboard: a directory that is no run dir, or a port in use, is one line and exit 1" *
          doctest::timeout(30)) {
  TempDir empty;
  auto r = run_command(fmt::format("'{}' dashboard '{}'", tandem_binary(), empty.path().string()));
  CHECK(r.status == 1);
  CHECK(r.output.find("has no metrics.jsonl: give the run directory") != std::string::npos);
  CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);

  std::ofstream(empty / "metrics.jsonl") << kLine1 << "\n";
  const FileDescriptor holder(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  REQUIRE(::bind(holder.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(::listen(holder.get(), 1) == 0);
  REQUIRE(::getsockname(holder.get(), reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  r = run_command(
      fmt::format("'{}' dashboard '{}' --port {}", tandem_binary(), empty.path().string(), ntohs(addr.sin_port)));
  CAPTURE(r.output);
  CHECK(r.status == 1);
  CHECK(r.output.find("--port = ") != std::string::npos);
  CHECK(r.output.find("choose another port, or 0 for a free one") != std::string::npos);
}
