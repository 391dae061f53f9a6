#include "bench/peer_process.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "common/error.hpp"
#include "common/process.hpp"

namespace tandem::bench {

std::string find_tandem_launcher(const std::string& explicit_path) {
  if (!explicit_path.empty()) return explicit_path;
  const std::filesystem::path here = self_exe().parent_path();
  const std::filesystem::path beside = here / "tandem", sibling = here.parent_path() / "tools" / "tandem";
  for (const auto& candidate : {beside, sibling})
    if (std::filesystem::exists(candidate)) return candidate.string();
  fail(
      "cannot find the tandem launcher at {} nor {}: build it (`ninja -C <build dir> tools/tandem`) or pass --tandem PATH",
      beside.string(), sibling.string());
}

std::string find_peer_script(const std::string& explicit_path, const std::string& script) {
  if (!explicit_path.empty()) return explicit_path;
  std::vector<std::string> roots;
  if (const char* env = std::getenv("TANDEM_SOURCE_ROOT")) roots.emplace_back(env);
  roots.emplace_back(TANDEM_SOURCE_DIR);
  roots.emplace_back(".");
  for (const auto& root : roots) {
    std::string candidate = fmt::format("{}/bench/peers/{}", root, script);
    if (std::filesystem::exists(candidate)) return candidate;
  }
  fail("cannot find bench/peers/{}: run from the source tree or pass --peer-script PATH", script);
}

std::string shell_quote(const std::string& text) {
  std::string quoted = "'";
  for (char c : text) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

namespace {
// The peer's result line, or a null Json when this line is something else it printed.
Json result_line(const std::string& line, const std::string& bench_name) {
  if (!line.starts_with('{')) return {};
  Json parsed = Json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded() || !parsed.is_object() || parsed.value("bench", "") != bench_name) return {};
  return parsed;
}
}  // namespace

Json run_peer(const std::string& command, const std::string& bench_name) {
  fmt::print("\npeer: {}\n", command);
  std::fflush(stdout);
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) fail("cannot start the peer `{}`", command);
  Json result;
  std::string line;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, pipe) != nullptr) {
    line += buf;
    if (line.back() != '\n') continue;
    fmt::print("  | {}", line);
    if (Json parsed = result_line(line, bench_name); !parsed.is_null()) result = std::move(parsed);
    line.clear();
  }
  const int status = ::pclose(pipe);
  std::fflush(stdout);  // the peer's echoed lines before any error about it
  if (status != 0 || result.is_null())
    fail("the peer `{}` failed (status {}{}): see its output above", command, status,
         result.is_null() ? ", no JSON line" : "");
  return result;
}

}  // namespace tandem::bench
