#include "bench/bench_json.hpp"

#include <fmt/format.h>

#include <fstream>

#include "common/error.hpp"

namespace tandem::bench {

void emit_json_line(const Json& line, const std::string& path) {
  const std::string text = line.dump();
  fmt::print("{}\n", text);
  if (path.empty()) return;
  std::ofstream out(path);
  out << text << "\n";
  if (!out) fail("cannot write {}: check the directory exists and is writable", path);
}

}  // namespace tandem::bench
