// A loopback HTTP endpoint on Boost.Beast serving a fixed table of routes: GET <path>[?query] on
// 127.0.0.1:<port> answers what the route's handler returns (the launcher's routes: the dashboard
// page, /metrics for Prometheus, /api/... JSON: dashboard_routes.hpp). A path not in the table is 404,
// another method 405, a request that is not HTTP (or whose head exceeds 8 KiB) 400. One request per
// connection (the response says Connection: close). A connection has 2 s for its request and 10 s
// for the response; a slow or silent client is closed then and never holds up anything else, since
// every read and write is asynchronous on the launcher's io_context.
// Threads: the launcher's one thread (the io_context's); handlers are called on it.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

namespace tandem::run {

struct HttpAnswer {
  std::string content_type;
  std::string body;
  unsigned status = 200;
};
// A handler gets the query string (after '?', "" when none).
using HttpRoutes = std::map<std::string, std::function<HttpAnswer(std::string_view query)>, std::less<>>;

class MetricsEndpoint {
 public:
  // Throws UserError naming `setting` (e.g. "run.metrics_port") when the port cannot be bound. Port 0
  // binds a free one.
  MetricsEndpoint(boost::asio::io_context& io, std::uint16_t port, HttpRoutes routes,
                  std::string setting = "run.metrics_port");
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;
  void close();  // stops accepting; connections in flight finish on their own
  std::uint16_t port() const { return port_; }

 private:
  void accept();
  boost::asio::ip::tcp::acceptor acceptor_;
  std::shared_ptr<const HttpRoutes> routes_;
  std::uint16_t port_ = 0;
};

}  // namespace tandem::run
