// tandem dashboard RUN_DIR [--port P]: serves a finished run's dashboard (the page `tandem run`
// serves, its history read from RUN_DIR's metrics.jsonl and eval.jsonl) until Ctrl-C.
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <fmt/format.h>

#include <csignal>
#include <cstdio>
#include <filesystem>

#include "common/error.hpp"
#include "common/cli_actions.hpp"
#include "tools/commands.hpp"
#include "tools/run/dashboard_routes.hpp"

namespace tandem::tools {
namespace {

int serve(const std::filesystem::path& run_dir, std::uint16_t port) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(run_dir / "metrics.jsonl", ec))
    fail("{} has no metrics.jsonl: give the run directory of a `tandem run` job (runs/<job>)", run_dir.string());
  boost::asio::io_context io;
  boost::asio::signal_set stop(io, SIGINT, SIGTERM, SIGHUP);
  run::MetricsEndpoint endpoint(io, port, run::dashboard_routes(std::filesystem::absolute(run_dir), nullptr), "--port");
  fmt::print("dashboard of {} on http://127.0.0.1:{}/ (Ctrl-C stops it)\n", run_dir.string(), endpoint.port());
  std::fflush(stdout);
  stop.async_wait([&](boost::system::error_code, int) {
    endpoint.close();
    io.stop();
  });
  io.run();
  return 0;  // serving until stopped is all it does
}

}  // namespace

void add_dashboard_commands(CLI::App& app) {
  auto* cmd = app.add_subcommand("dashboard", "serve the dashboard of a finished run on loopback (until Ctrl-C)");
  static std::string run_dir;
  static int port = 0;
  cmd->add_option("run_dir", run_dir, "the run directory, e.g. runs/fmnist-3f9a")->required();
  cmd->add_option("--port", port, "loopback port; 0 = a free one")->check(CLI::Range(0, 65535));
  cli::on_run(cmd, [] { return serve(run_dir, static_cast<std::uint16_t>(port)); });
}

}  // namespace tandem::tools
