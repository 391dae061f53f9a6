#include "tools/run/console.hpp"

#include <unistd.h>

#include <fmt/format.h>

namespace tandem::run {

void LineSplitter::feed(std::string_view bytes, const std::function<void(std::string_view)>& on_line) {
  for (char c : bytes) {
    if (c == '\n' || c == '\r') {
      // "\r\n" ends one line, not two; a lone "\r" (progress redraw) ends the visible line.
      if (!partial_.empty() || c == '\n') on_line(partial_);
      partial_.clear();
      continue;
    }
    partial_.push_back(c);
    if (partial_.size() >= max_line_) {
      on_line(partial_);
      partial_.clear();
    }
  }
}

void LineSplitter::finish(const std::function<void(std::string_view)>& on_line) {
  if (!partial_.empty()) on_line(partial_);
  partial_.clear();
}

void Tail::push(std::string_view line) {
  lines_.emplace_back(line);
  while (lines_.size() > capacity_) lines_.pop_front();
}

std::string prefixed(std::string_view name, std::string_view text) {
  std::string prefix = fmt::format("[{}] ", name);
  if (text.starts_with(prefix)) return std::string(text);
  return prefix + std::string(text);
}

void Console::emit(int fd, const std::string& line) {
  std::string out;
  if (live_ && status_shown_) out = "\r\033[K";  // erase the status line first
  out += line;
  out += '\n';
  if (live_ && !status_.empty()) {
    // The status line goes to stdout; when the line went to stderr, flush ordering across the two
    // descriptors is the terminal's, and both are written here whole and in order.
    if (fd == STDOUT_FILENO) {
      out += status_;
    } else {
      ssize_t ignored = ::write(fd, out.data(), out.size());
      (void)ignored;
      ignored = ::write(STDOUT_FILENO, status_.data(), status_.size());
      status_shown_ = true;
      return;
    }
  }
  ssize_t ignored = ::write(fd, out.data(), out.size());
  (void)ignored;
  status_shown_ = live_ && !status_.empty();
}

void Console::child_line(std::string_view name, std::string_view text, bool to_stderr) {
  emit(to_stderr ? STDERR_FILENO : STDOUT_FILENO, prefixed(name, text));
}

void Console::message(std::string_view text) { emit(STDOUT_FILENO, fmt::format("tandem: {}", text)); }

void Console::warning(std::string_view text) { emit(STDERR_FILENO, fmt::format("tandem: {}", text)); }

void Console::status(std::string_view text) {
  if (!live_) {
    emit(STDOUT_FILENO, fmt::format("tandem: {}", text));
    return;
  }
  status_ = std::string(text);
  std::string out = "\r\033[K" + status_;
  ssize_t ignored = ::write(STDOUT_FILENO, out.data(), out.size());
  (void)ignored;
  status_shown_ = true;
}

void Console::clear_status() {
  if (live_ && status_shown_) {
    ssize_t ignored = ::write(STDOUT_FILENO, "\r\033[K", 4);
    (void)ignored;
  }
  status_.clear();
  status_shown_ = false;
}

}  // namespace tandem::run
