#include "tools/bench/interim_common.hpp"

#include <unistd.h>

#include "common/error.hpp"

namespace tandem::bench {

std::optional<std::uint64_t> parse_size(const std::string& text) {
  std::size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (...) {
    return std::nullopt;
  }
  const std::string unit = text.substr(used);
  const double multiplier = unit.empty() ? 1
                            : unit == "K" || unit == "k" ? 1e3
                            : unit == "M"                ? 1e6
                            : unit == "G"                ? 1e9
                            : unit == "Ki"               ? 1024.0
                            : unit == "Mi"               ? 1048576.0
                            : unit == "Gi"               ? 1073741824.0
                                                         : -1;
  if (multiplier < 0 || value < 0) return std::nullopt;
  return static_cast<std::uint64_t>(value * multiplier);
}

std::string self_exe() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) fail("cannot find this program's path (/proc/self/exe)");
  return std::string(buf, static_cast<std::size_t>(n));
}

}  // namespace tandem::bench
