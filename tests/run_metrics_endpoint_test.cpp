// The launcher's HTTP endpoint on its own io_context (run by a thread here, as the supervisor's loop
// would): the answer to a route, to a wrong path, method or a request that is not HTTP, and a silent
// client that must not hold up anyone else. (Its routes: dashboard_routes_test.cpp.)
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>

#include <fmt/format.h>

#include <thread>

#include "common/file_descriptor.hpp"
#include "tests/run_launcher_fixture.hpp"
#include "tools/run/metrics_endpoint.hpp"

using namespace tandem;
using namespace tandem::test;

namespace {

// An endpoint on a free loopback port, served by one thread until destroyed.
struct Served {
  boost::asio::io_context io;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work = boost::asio::make_work_guard(io);
  run::MetricsEndpoint endpoint{io, 0, {{"/metrics", [](std::string_view q) {
                                           return run::HttpAnswer{"text/plain; version=0.0.4; charset=utf-8",
                                                                  fmt::format("tandem_step{{job=\"j\"}} 7 {}\n", q)};
                                         }}}};
  std::thread thread{[this] { io.run(); }};
  ~Served() {
    boost::asio::post(io, [this] { endpoint.close(); });
    work.reset();
    io.stop();
    thread.join();
  }
};

std::string status_line(const std::string& response) { return response.substr(0, response.find("\r\n")); }

}  // namespace

TEST_CASE("metrics endpoint: GET of a route answers 200 with its handler's text, content type and query" *
          doctest::timeout(30)) {
  Served s;
  const std::string r = http_get(s.endpoint.port(), "/metrics");
  CHECK(status_line(r) == "HTTP/1.0 200 OK");
  CHECK(r.find("Content-Type: text/plain; version=0.0.4; charset=utf-8") != std::string::npos);
  CHECK(r.ends_with("\r\n\r\ntandem_step{job=\"j\"} 7 \n"));
  const std::string q = http_exchange(s.endpoint.port(), "GET /metrics?a=1 HTTP/1.1\r\nHost: x\r\n\r\n");
  CHECK(status_line(q) == "HTTP/1.1 200 OK");
  CHECK(q.ends_with(" 7 a=1\n"));
}

TEST_CASE("metrics endpoint: a wrong path, a wrong method and garbage get 404, 405 and 400" * doctest::timeout(30)) {
  Served s;
  CHECK(status_line(http_get(s.endpoint.port(), "/nothing")) == "HTTP/1.0 404 Not Found");
  CHECK(status_line(http_get(s.endpoint.port(), "/metricsx")) == "HTTP/1.0 404 Not Found");
  const std::string post = http_exchange(s.endpoint.port(), "POST /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  CHECK(status_line(post) == "HTTP/1.1 405 Method Not Allowed");
  CHECK(post.find("Allow: GET") != std::string::npos);
  CHECK(status_line(http_exchange(s.endpoint.port(), "this is not http\r\n\r\n")).ends_with(" 400 Bad Request"));
}

TEST_CASE("metrics endpoint: a client that connects and sends nothing does not hold up a scrape" *
          doctest::timeout(30)) {
  Served s;
  const FileDescriptor silent(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(s.endpoint.port());
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(silent.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  CHECK(status_line(http_get(s.endpoint.port(), "/metrics")) == "HTTP/1.0 200 OK");
  // The silent.get() one is closed by the endpoint's deadline: its read sees end of file.
  char byte;
  CHECK(::read(silent.get(), &byte, 1) == 0);
}
