#include "common/log.hpp"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace tandem::log {
namespace {

Level level_from_env() {
  const char* v = std::getenv("TANDEM_LOG");
  if (v == nullptr) return Level::info;
  if (std::strcmp(v, "debug") == 0) return Level::debug;
  if (std::strcmp(v, "warn") == 0) return Level::warn;
  if (std::strcmp(v, "error") == 0) return Level::error;
  return Level::info;
}

std::atomic<Level> g_level{level_from_env()};
std::string g_role;

constexpr std::string_view tag(Level l) {
  switch (l) {
    case Level::debug: return "debug: ";
    case Level::warn: return "warning: ";
    case Level::error: return "error: ";
    default: return "";
  }
}

}  // namespace

void set_role(std::string role) { g_role = std::move(role); }
Level level() { return g_level.load(std::memory_order_relaxed); }

void write(Level l, std::string_view message) {
  std::string line;
  if (!g_role.empty()) line = fmt::format("[{}] ", g_role);
  line += tag(l);
  line += message;
  line += '\n';
  // One write per line: atomic with respect to other writers of the same pipe (< PIPE_BUF).
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

}  // namespace tandem::log
