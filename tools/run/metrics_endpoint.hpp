// A loopback HTTP endpoint serving Prometheus text, on Boost.Beast: GET /metrics (or /) on
// 127.0.0.1:<port> answers 200 with body() as text/plain; version=0.0.4. Another path is 404, another
// method 405, a request that is not HTTP (or whose head exceeds 8 KiB) 400. One request per
// connection (the response says Connection: close). A connection has 2 s for its request and the
// response; a slow or silent client is closed then and never holds up anything else, since every
// read and write is asynchronous on the launcher's io_context.
// Threads: the launcher's one thread (the io_context's); body() is called on it.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <cstdint>
#include <functional>
#include <string>

namespace tandem::run {

class MetricsEndpoint {
 public:
  // Throws UserError naming run.metrics_port when the port cannot be bound. Port 0 binds a free one.
  MetricsEndpoint(boost::asio::io_context& io, std::uint16_t port, std::function<std::string()> body);
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;
  void close();  // stops accepting; connections in flight finish on their own
  std::uint16_t port() const { return port_; }

 private:
  void accept();
  boost::asio::ip::tcp::acceptor acceptor_;
  std::function<std::string()> body_;
  std::uint16_t port_ = 0;
};

}  // namespace tandem::run
