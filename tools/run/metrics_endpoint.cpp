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

constexpr auto kRequestTimeout = std::chrono::seconds(2);
constexpr auto kResponseTimeout = std::chrono::seconds(10);  // a history chunk is a few MiB at most
constexpr std::uint32_t kMaxRequestHead = 8192;
constexpr const char* kTextType = "text/plain; charset=utf-8";

// One connection: read one request, answer it, close, each under the stream's deadline.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket socket, std::shared_ptr<const HttpRoutes> routes)
      : stream_(std::move(socket)), routes_(std::move(routes)) {
    parser_.header_limit(kMaxRequestHead);
    parser_.body_limit(0);  // GET needs no body
  }

  void start() {
    stream_.expires_after(kRequestTimeout);
    http::async_read(stream_, buffer_, parser_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
      if (ec == beast::error::timeout || ec == http::error::end_of_stream || ec == asio::error::operation_aborted)
        return self->close();
      if (ec) return self->respond({kTextType, "bad request: try GET / or GET /metrics\n", 400});
      self->route();
    });
  }

 private:
  void route() {
    const auto& request = parser_.get();
    const std::string_view target(request.target().data(), request.target().size());
    const auto question = target.find('?');
    const auto route = routes_->find(target.substr(0, question));
    if (route == routes_->end()) return respond({kTextType, "not found: try / or /metrics\n", 404});
    if (request.method() != http::verb::get) return respond({kTextType, "method not allowed: try GET\n", 405});
    respond(route->second(question == std::string_view::npos ? std::string_view() : target.substr(question + 1)));
  }

  void respond(HttpAnswer answer) {
    stream_.expires_after(kResponseTimeout);
    response_.result(answer.status);
    response_.version(parser_.is_header_done() ? parser_.get().version() : 11);
    response_.set(http::field::content_type, answer.content_type);
    response_.set(http::field::cache_control, "no-store");  // live state: a reload must ask again
    if (answer.status == 405) response_.set(http::field::allow, "GET");
    response_.keep_alive(false);
    response_.body() = std::move(answer.body);
    response_.prepare_payload();
    http::async_write(stream_, response_,
                      [self = shared_from_this()](beast::error_code, std::size_t) { self->close(); });
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
  std::shared_ptr<const HttpRoutes> routes_;  // shared: a connection may outlive its endpoint
};

}  // namespace

MetricsEndpoint::MetricsEndpoint(asio::io_context& io, std::uint16_t port, HttpRoutes routes, std::string setting)
    : acceptor_(io), routes_(std::make_shared<const HttpRoutes>(std::move(routes))) {
  boost::system::error_code ec;
  const tcp::endpoint at(asio::ip::make_address_v4("127.0.0.1"), port);
  acceptor_.open(at.protocol(), ec);
  if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor_.bind(at, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    fail("{} = {}: cannot listen on 127.0.0.1:{}: {}: choose another port, or 0 for a free one", setting, port, port,
         ec.message());
  port_ = acceptor_.local_endpoint().port();
  accept();
}

void MetricsEndpoint::accept() {
  acceptor_.async_accept([this](boost::system::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
    if (!ec) std::make_shared<Connection>(std::move(socket), routes_)->start();
    accept();
  });
}

void MetricsEndpoint::close() {
  boost::system::error_code ignored;
  acceptor_.close(ignored);
}

}  // namespace tandem::run
