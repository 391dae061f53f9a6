#include "common/units.hpp"

#include <fmt/format.h>

#include <array>
#include <cctype>
#include <charconv>
#include <cmath>

#include "common/error.hpp"

namespace tandem {

std::string format_bytes(std::uint64_t bytes) {
  static constexpr std::array<const char*, 6> kUnits = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return fmt::format("{} B", bytes);
  double value = static_cast<double>(bytes);
  std::size_t unit = 0;
  while (value >= 1024 && unit + 1 < kUnits.size()) {
    value /= 1024;
    ++unit;
  }
  return fmt::format("{:.1f} {}", value, kUnits[unit]);
}

namespace {
std::string lower(std::string_view s) {
  std::string out;
  for (char c : s)
    if (!std::isspace(static_cast<unsigned char>(c)))
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}
}  // namespace

std::uint64_t parse_size(std::string_view text, std::string_view what) {
  const std::string s = lower(text);
  double number = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), number);
  const std::string_view suffix(end, static_cast<std::size_t>(s.data() + s.size() - end));
  int power = -1;
  for (const auto& [p, names] :
       std::array<std::pair<int, std::array<std::string_view, 3>>, 5>{{{0, {"", "b", "b"}},
                                                                       {1, {"k", "kb", "kib"}},
                                                                       {2, {"m", "mb", "mib"}},
                                                                       {3, {"g", "gb", "gib"}},
                                                                       {4, {"t", "tb", "tib"}}}})
    for (std::string_view name : names)
      if (suffix == name) power = p;
  if (ec != std::errc() || s.empty() || power < 0 || !std::isfinite(number) || number < 0)
    fail("{} = \"{}\" is not a size: write bytes with an optional K, M, G or T suffix (powers of 1024), e.g. 512M",
         what, text);
  const double bytes = std::round(number * std::pow(1024.0, power));
  if (bytes >= 18446744073709551616.0)  // 2^64
    fail("{} = \"{}\" does not fit in 64 bits: give a smaller size", what, text);
  return static_cast<std::uint64_t>(bytes);
}

}  // namespace tandem
