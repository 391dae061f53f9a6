// Logging on fmt. One process-wide level, read from the environment at load, and a role prefix set
// once at startup by main() (not thread-safe to change later); emitting is thread-safe (each line is one write(2) to stderr, so
// lines from threads and from processes sharing the launcher's pipe never interleave mid-line).
// The level comes from TANDEM_LOG=debug|info|warn|error (default info).
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>

namespace tandem::log {

enum class Level { debug = 0, info = 1, warn = 2, error = 3 };

void set_role(std::string role);  // e.g. "learner.0", printed before each line
Level level();
void write(Level level, std::string_view message);

template <class... Args>
void debug(fmt::format_string<Args...> f, Args&&... args) {
  if (level() <= Level::debug) write(Level::debug, fmt::format(f, std::forward<Args>(args)...));
}
template <class... Args>
void info(fmt::format_string<Args...> f, Args&&... args) {
  if (level() <= Level::info) write(Level::info, fmt::format(f, std::forward<Args>(args)...));
}
template <class... Args>
void warn(fmt::format_string<Args...> f, Args&&... args) {
  if (level() <= Level::warn) write(Level::warn, fmt::format(f, std::forward<Args>(args)...));
}
template <class... Args>
void error(fmt::format_string<Args...> f, Args&&... args) {
  write(Level::error, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace tandem::log
