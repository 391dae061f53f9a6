// A loopback HTTP endpoint serving Prometheus text: GET /metrics (or /) on 127.0.0.1:<port> answers
// with body(); anything else is 404. One request per connection (HTTP/1.0 style), 2 s to send it.
// Runs on the launcher's io_context and thread; body() is called on that thread.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <cstdint>
#include <functional>
#include <string>

namespace tandem::run {

class MetricsEndpoint {
 public:
  // Throws UserError naming run.metrics_port when the port cannot be bound.
  MetricsEndpoint(boost::asio::io_context& io, std::uint16_t port, std::function<std::string()> body);
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;
  void close();  // stops accepting; connections in flight finish on their own
  std::uint16_t port() const { return port_; }

 private:
  void accept();
  boost::asio::io_context& io_;
  boost::asio::ip::tcp::acceptor acceptor_;
  std::function<std::string()> body_;
  std::uint16_t port_ = 0;
};

}  // namespace tandem::run
