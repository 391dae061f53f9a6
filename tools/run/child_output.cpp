#include "tools/run/child_output.hpp"

#include <boost/asio/buffer.hpp>
#include <fmt/format.h>

namespace asio = boost::asio;

namespace tandem::run {

ChildOutput::ChildOutput(asio::io_context& io, LineFn on_line, std::function<void()> on_closed)
    : io_(io), on_line_(std::move(on_line)), on_closed_(std::move(on_closed)) {}

void ChildOutput::attach(int stdout_fd, int stderr_fd) {
  ++generation_;
  out_.stream = std::make_unique<asio::posix::stream_descriptor>(io_, stdout_fd);
  err_.stream = std::make_unique<asio::posix::stream_descriptor>(io_, stderr_fd);
  read(false, generation_);
  read(true, generation_);
}

void ChildOutput::read(bool is_err, std::uint32_t generation) {
  Pipe& p = pipe(is_err);
  p.stream->async_read_some(asio::buffer(p.buf),
                            [this, is_err, generation](boost::system::error_code ec, std::size_t n) {
    if (ec == asio::error::operation_aborted || generation != generation_) return;
    Pipe& p = pipe(is_err);
    if (!p.stream) return;
    p.lines.feed({p.buf.data(), n}, [&](std::string_view line) {
      tail_.push(line);
      on_line_(line, is_err);
    });
    if (ec) {  // end of file (the child closed it or died) or a read error: this pipe is done
      close_pipe(is_err);
      if (!open()) on_closed_();
      return;
    }
    read(is_err, generation);
  });
}

void ChildOutput::close_pipe(bool is_err) {
  Pipe& p = pipe(is_err);
  if (!p.stream) return;
  p.lines.finish([&](std::string_view line) {
    tail_.push(line);
    on_line_(line, is_err);
  });
  p.stream.reset();
}

void ChildOutput::close() {
  close_pipe(false);
  close_pipe(true);
}

std::string failure_text(std::string_view name, int pid, std::string_view what, const Tail& tail) {
  std::string text = fmt::format("{} (pid {}) {}", name, pid, what);
  if (tail.lines().empty()) return text + "; it printed nothing";
  const auto n = tail.lines().size();
  text += n == 1 ? std::string("; its last line:") : fmt::format("; its last {} lines:", n);
  for (const auto& line : tail.lines()) text += "\n  | " + line;
  return text;
}

}  // namespace tandem::run
