#include "common/process.hpp"

#include <signal.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <fstream>
#include <iterator>
#include <sstream>

namespace tandem {

std::optional<ProcessIdentity> process_identity(std::uint32_t pid) {
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // The command name (field 2) is in parentheses and may itself contain spaces or ')'.
  const auto close = text.rfind(')');
  if (close == std::string::npos || close + 2 >= text.size()) return std::nullopt;
  std::istringstream fields(text.substr(close + 2));
  std::string field;
  ProcessIdentity id;
  id.pid = pid;
  for (int i = 3; i <= 22; ++i) {  // fields after "(comm)" start at number 3
    if (!(fields >> field)) return std::nullopt;
    if (i == 3) id.state = field[0];
  }
  id.start_ticks = std::stoull(field);
  return id;
}

bool process_alive(std::uint32_t pid, std::uint64_t start_ticks, std::uint64_t start_mask) {
  if (pid == 0) return false;
  const std::optional<ProcessIdentity> id = process_identity(pid);
  if (!id) return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;  // gone, or hidden from /proc
  if (id->state == 'Z' || id->state == 'X') return false;
  return ((id->start_ticks ^ start_ticks) & start_mask) == 0;
}

bool process_alive(std::uint32_t pid) { return process_alive(pid, 0, 0); }  // no start time to compare

std::filesystem::path self_exe() { return std::filesystem::read_symlink("/proc/self/exe"); }

const std::string& host_name() {
  static const std::string name = [] {
    char buf[256] = {};
    if (::gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return std::string("unknown-host");
    return std::string(buf);
  }();
  return name;
}

}  // namespace tandem
