// The launcher's output: children's lines with their prefix, its own messages, and the status line.
//
// Live mode (a terminal): one status line at the bottom, redrawn in place with \r; any other line
// first erases it, is printed, and the status line is drawn again below it, so lines and status
// never mix. Plain mode: status lines are printed as ordinary lines when the launcher asks.
// Children's stdout goes to stdout, their stderr to stderr, each line whole (one write each).
// Threads: the launcher's one thread.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <string>
#include <string_view>

namespace tandem::run {

// Cuts a byte stream into lines. Lines longer than max_line are cut at max_line; a carriage return
// (a child's progress bar) ends a line too, so redraws show up as lines rather than piling up.
class LineSplitter {
 public:
  explicit LineSplitter(std::size_t max_line = 16384) : max_line_(max_line) {}
  void feed(std::string_view bytes, const std::function<void(std::string_view)>& on_line);
  void finish(const std::function<void(std::string_view)>& on_line);  // the last, unterminated line

 private:
  std::size_t max_line_;
  std::string partial_;
};

// The last `capacity` lines of a process, for the message when it fails.
class Tail {
 public:
  explicit Tail(std::size_t capacity = 20) : capacity_(capacity) {}
  void push(std::string_view line);
  const std::deque<std::string>& lines() const { return lines_; }

 private:
  std::size_t capacity_;
  std::deque<std::string> lines_;
};

class Console {
 public:
  explicit Console(bool live) : live_(live) {}
  ~Console() { clear_status(); }
  bool live() const { return live_; }

  // A child's line: "[learner.0] text" (the prefix is not doubled when the child already wrote it).
  void child_line(std::string_view name, std::string_view text, bool to_stderr);
  void message(std::string_view text);  // "tandem: text", stdout
  void warning(std::string_view text);  // "tandem: text", stderr
  void status(std::string_view text);   // live: redraw the status line; plain: print a line
  void clear_status();                  // live: erase it (before the final summary)

 private:
  void emit(int fd, const std::string& line);
  bool live_;
  std::string status_;  // what the status line shows now (live mode)
  bool status_shown_ = false;
};

// "[name] text" unless text already starts with "[name] ".
std::string prefixed(std::string_view name, std::string_view text);

}  // namespace tandem::run
