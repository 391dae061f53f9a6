// The JSON line every bench prints last (and writes to --json FILE): keys in the order they were
// set, numbers rounded to what the measurement can tell apart.
#pragma once

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

namespace tandem::bench {

using Json = nlohmann::ordered_json;

inline double rounded(double value, int digits) {
  const double scale = std::pow(10.0, digits);
  return std::round(value * scale) / scale;
}

// Prints the line to stdout and, when path is not empty, writes it there too.
void emit_json_line(const Json& line, const std::string& path);

}  // namespace tandem::bench
