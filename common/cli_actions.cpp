#include "common/cli_actions.hpp"

#include <cstdio>
#include <map>

namespace tandem::cli {
namespace {
std::map<const CLI::App*, std::function<int()>>& actions() {
  static std::map<const CLI::App*, std::function<int()>> a;
  return a;
}
}  // namespace

void on_run(CLI::App* sub, std::function<int()> action) { actions()[sub] = std::move(action); }

int run_selected(CLI::App& app) {
  for (CLI::App* sub = &app;;) {
    auto chosen = sub->get_subcommands();
    if (chosen.empty()) break;
    sub = chosen.front();
    if (auto it = actions().find(sub); it != actions().end() && sub->get_subcommands().empty()) return it->second();
  }
  std::fputs(app.help().c_str(), stderr);
  return 2;
}

}  // namespace tandem::cli
