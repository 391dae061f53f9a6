// tandem-py-counterpart: the C++ side the pytest suite checks the `tandem` package against. Each subcommand is
// what a C++ program of Tandem does with a segment (feed a dataset, publish or follow weights, create
// or write or consume experience rings, hold a control block, poke a byte into a cache); it prints one
// JSON line per result on stdout, and subcommands that must outlive a step of the test wait for a line
// on stdin ("go", "quit", or a command) before going on.
#pragma once

#include <CLI/CLI.hpp>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <string>

namespace tandem::counterpart {

// The model both sides build: Linear(in, out) as "layer" (layer.weight, layer.bias) and an int64
// buffer "steps" of 3; Python's CounterpartModel (python/tests/helpers.py) has the same signature.
struct CounterpartModelImpl : torch::nn::Module {
  CounterpartModelImpl(std::int64_t in, std::int64_t out);
  torch::nn::Linear layer{nullptr};
};
TORCH_MODULE(CounterpartModel);

void add_feed_command(CLI::App& app);
void add_weights_commands(CLI::App& app);
void add_rings_commands(CLI::App& app);
void add_misc_commands(CLI::App& app);

std::string wait_line();  // one line of stdin ("" at EOF)

}  // namespace tandem::counterpart
