// tandem bench: runs tandem-bench with the arguments after `bench`. The benchmarks are a program of
// their own so that `tandem` never loads LibTorch; this keeps `tandem bench ...` working. Looked up
// next to this binary (installed side by side) or in the build tree's sibling folder
// (build/tools/tandem, build/bench/tandem-bench).
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "common/process.hpp"
#include "common/cli_actions.hpp"
#include "tools/commands.hpp"

namespace tandem::tools {
namespace {

std::filesystem::path find_tandem_bench() {
  const std::filesystem::path here = self_exe().parent_path();
  const std::filesystem::path beside = here / "tandem-bench", sibling = here.parent_path() / "bench" / "tandem-bench";
  for (const auto& candidate : {beside, sibling})
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  fail(
      "tandem bench runs tandem-bench, which is not at {} nor {}: build it with `ninja -C <build dir> "
      "bench/tandem-bench` (or install it next to tandem)",
      (here / "tandem-bench").string(), (here / "bench" / "tandem-bench").string());
}

[[noreturn]] void exec_tandem_bench(const std::vector<std::string>& args) {
  const std::string exe = find_tandem_bench().string();
  std::vector<char*> argv{const_cast<char*>(exe.c_str())};
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execv(exe.c_str(), argv.data());
  fail("cannot run {}: {}", exe, std::strerror(errno));
}

}  // namespace

void add_bench_commands(CLI::App& app) {
  auto* bench = app.add_subcommand("bench",
                                   "measure Tandem's hot paths against their PyTorch peers (runs tandem-bench)");
  // Everything after `bench`, --help included, is tandem-bench's to parse.
  bench->prefix_command();
  bench->set_help_flag();
  bench->allow_extras();
  cli::on_run(bench, [bench]() -> int { exec_tandem_bench(bench->remaining()); });
}

}  // namespace tandem::tools
