// A child's stdout and stderr as the launcher reads them: asynchronously on the launcher's
// io_context, cut into lines, each line handed to on_line and kept in a tail for the message when
// the process fails. The tail outlives restarts (a crash loop's last lines span incarnations).
//
// attach() takes the read ends of a new incarnation; completions of an earlier one are ignored.
// When both pipes reached end of file (the child closed them or died), on_closed is called, so the
// launcher reports an exit only after the process's last lines are shown.
// Threads: the launcher's one thread (the io_context's). The object must outlive the io_context's
// run, or the io_context must be destroyed without running again (pending reads are cancelled).
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "tools/run/console.hpp"

namespace tandem::run {

class ChildOutput {
 public:
  using LineFn = std::function<void(std::string_view line, bool is_err)>;
  ChildOutput(boost::asio::io_context& io, LineFn on_line, std::function<void()> on_closed);
  ChildOutput(const ChildOutput&) = delete;
  ChildOutput& operator=(const ChildOutput&) = delete;

  void attach(int stdout_fd, int stderr_fd);  // takes ownership of both
  // Stops waiting for the pipes: their unterminated last lines are handed over, and both are closed
  // (for a grandchild that keeps a pipe open after the process itself is gone).
  void close();
  bool open() const { return out_.stream || err_.stream; }
  const Tail& tail() const { return tail_; }

 private:
  struct Pipe {
    std::unique_ptr<boost::asio::posix::stream_descriptor> stream;  // null once at end of file
    std::array<char, 8192> buf{};
    LineSplitter lines;
  };
  void read(bool is_err, std::uint32_t generation);
  void close_pipe(bool is_err);
  Pipe& pipe(bool is_err) { return is_err ? err_ : out_; }

  boost::asio::io_context& io_;
  LineFn on_line_;
  std::function<void()> on_closed_;
  Pipe out_, err_;
  Tail tail_{20};
  std::uint32_t generation_ = 0;  // incremented per attach: stale read completions are ignored
};

// "<name> (pid N) <what>; its last 3 lines:\n  | ..." (or "; it printed nothing").
std::string failure_text(std::string_view name, int pid, std::string_view what, const Tail& tail);

}  // namespace tandem::run
