#include "tools/run/metrics_endpoint.hpp"

#include <boost/asio/read_until.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>
#include <fmt/format.h>

#include <chrono>
#include <istream>
#include <memory>

#include "common/error.hpp"

namespace asio = boost::asio;
using asio::ip::tcp;

namespace tandem::run {
namespace {

// One connection: read the request head (at most 8 KiB, within 2 s), answer, close.
struct Connection : std::enable_shared_from_this<Connection> {
  Connection(tcp::socket s, const std::function<std::string()>& body)
      : socket(std::move(s)), deadline(socket.get_executor()), body(body), request(8192) {}

  void start() {
    auto self = shared_from_this();
    deadline.expires_after(std::chrono::seconds(2));
    deadline.async_wait([self](boost::system::error_code ec) {
      if (!ec) self->socket.close();
    });
    asio::async_read_until(socket, request, "\r\n\r\n", [self](boost::system::error_code ec, std::size_t) {
      if (ec) return;
      self->respond();
    });
  }

  void respond() {
    std::istream in(&request);
    std::string method, target;
    in >> method >> target;
    const bool ok = method == "GET" && (target == "/metrics" || target == "/");
    const std::string content = ok ? body() : "not found: try /metrics\n";
    response = fmt::format(
        "HTTP/1.0 {}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\n"
        "Connection: close\r\n\r\n{}",
        ok ? "200 OK" : "404 Not Found", content.size(), content);
    auto self = shared_from_this();
    asio::async_write(socket, asio::buffer(response), [self](boost::system::error_code, std::size_t) {
      boost::system::error_code ignored;
      self->socket.shutdown(tcp::socket::shutdown_both, ignored);
      self->socket.close(ignored);
      self->deadline.cancel();
    });
  }

  tcp::socket socket;
  asio::steady_timer deadline;
  std::function<std::string()> body;
  asio::streambuf request;
  std::string response;
};

}  // namespace

MetricsEndpoint::MetricsEndpoint(asio::io_context& io, std::uint16_t port, std::function<std::string()> body)
    : io_(io), acceptor_(io), body_(std::move(body)) {
  boost::system::error_code ec;
  const tcp::endpoint at(asio::ip::make_address_v4("127.0.0.1"), port);
  acceptor_.open(at.protocol(), ec);
  if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor_.bind(at, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) fail("config: run.metrics_port = {}: cannot listen on 127.0.0.1:{}: {}: choose another port, or 0 for none",
               port, port, ec.message());
  port_ = acceptor_.local_endpoint().port();
  accept();
}

void MetricsEndpoint::accept() {
  acceptor_.async_accept([this](boost::system::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
    if (!ec) std::make_shared<Connection>(std::move(socket), body_)->start();
    accept();
  });
}

void MetricsEndpoint::close() {
  boost::system::error_code ignored;
  acceptor_.close(ignored);
}

}  // namespace tandem::run
