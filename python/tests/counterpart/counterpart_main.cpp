// tandem-py-counterpart (counterpart.hpp): dispatch, and what the subcommands share.
#include <iostream>

#include "common/error.hpp"
#include "python/tests/counterpart/counterpart.hpp"
#include "common/cli_actions.hpp"

namespace tandem::counterpart {

CounterpartModelImpl::CounterpartModelImpl(std::int64_t in, std::int64_t out) {
  layer = register_module("layer", torch::nn::Linear(in, out));
  register_buffer("steps", torch::zeros({3}, torch::kLong));
}

std::string wait_line() {
  std::string line;
  std::getline(std::cin, line);
  return line;
}

}  // namespace tandem::counterpart

int main(int argc, char** argv) {
  CLI::App app("tandem-py-counterpart: the C++ side of the Python package's tests");
  app.require_subcommand(1);
  tandem::counterpart::add_feed_command(app);
  tandem::counterpart::add_weights_commands(app);
  tandem::counterpart::add_rings_commands(app);
  tandem::counterpart::add_misc_commands(app);
  CLI11_PARSE(app, argc, argv);
  return tandem::run_main("tandem-py-counterpart", [&] { return tandem::cli::run_selected(app); });
}
