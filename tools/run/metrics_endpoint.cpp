#include "tools/run/metrics_endpoint.hpp"

// GCC reports boost::optional inside Beast's parser as maybe-uninitialized when it inlines it (a
// known false positive of Boost 1.74's optional); the warning says nothing about this file.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#pragma GCC diagnostic pop

#include <chrono>
#include <memory>

#include "common/error.hpp"

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::ip::tcp;

namespace tandem::run {
namespace {

constexpr auto kConnectionTimeout = std::chrono::seconds(2);
constexpr std::uint32_t kMaxRequestHead = 8192;
constexpr const char* kContentType = "text/plain; version=0.0.4; charset=utf-8";

// One connection: read one request, answer it, close. The stream's deadline covers both.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket socket, const std::function<std::string()>& body) : stream_(std::move(socket)), body_(body) {
    parser_.header_limit(kMaxRequestHead);
    parser_.body_limit(0);  // GET needs no body
  }

  void start() {
    stream_.expires_after(kConnectionTimeout);
    http::async_read(stream_, buffer_, parser_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
      if (ec == beast::error::timeout || ec == http::error::end_of_stream || ec == asio::error::operation_aborted)
        return self->close();
      if (ec) return self->respond(http::status::bad_request, "bad request: try GET /metrics\n");
      self->route();
    });
  }

 private:
  void route() {
    const auto& request = parser_.get();
    const auto target = request.target();
    if (target != "/metrics" && target != "/") return respond(http::status::not_found, "not found: try /metrics\n");
    if (request.method() != http::verb::get)
      return respond(http::status::method_not_allowed, "method not allowed: try GET /metrics\n");
    respond(http::status::ok, body_());
  }

  void respond(http::status status, std::string content) {
    response_.result(status);
    response_.version(parser_.is_header_done() ? parser_.get().version() : 11);
    response_.set(http::field::content_type, kContentType);
    if (status == http::status::method_not_allowed) response_.set(http::field::allow, "GET");
    response_.keep_alive(false);
    response_.body() = std::move(content);
    response_.prepare_payload();
    http::async_write(stream_, response_, [self = shared_from_this()](beast::error_code, std::size_t) { self->close(); });
  }

  void close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.close();
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  http::request_parser<http::empty_body> parser_;
  http::response<http::string_body> response_;
  std::function<std::string()> body_;
};

}  // namespace

MetricsEndpoint::MetricsEndpoint(asio::io_context& io, std::uint16_t port, std::function<std::string()> body)
    : acceptor_(io), body_(std::move(body)) {
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
