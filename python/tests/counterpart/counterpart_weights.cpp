// tandem-py-counterpart publish | follow: the C++ publisher (learner/model_publisher.hpp) and follower
// (actor/follower.hpp) over CounterpartModel, for the Python side to follow or feed.
//  publish --dump F      random weights (--seed), published and committed, the flat bytes written to F;
//                        then "publish" on stdin publishes the weights + 1 again (and dumps), "quit" ends
//  publish --seconds S   the verify pattern of each version (docs/FORMAT.md) published at full speed for
//                        S s, after "go" on stdin; then waits for "quit" (the slab stays meanwhile)
//  follow --dump F       the first version >= --min-version loaded into the model; its flat bytes to F
//  follow --seconds S    reads (update() and leases) at full speed for S s from the first version on,
//                        checking each against the verify pattern: counts reads, torn reads, order
#include <nlohmann/json.hpp>

#include <chrono>
#include <fstream>
#include <iostream>
#include <thread>

#include "actor/follower.hpp"
#include "common/torch/flat_params.hpp"
#include "learner/model_publisher.hpp"
#include "python/tests/counterpart/counterpart.hpp"
#include "shm/verify_pattern.hpp"
#include "common/cli_actions.hpp"

namespace tandem::counterpart {
namespace {

using Clock = std::chrono::steady_clock;

struct WeightArgs {
  std::string slab, dump;
  std::int64_t in = 64, out = 32;
  std::uint64_t seed = 0, min_version = 1;
  double seconds = 0;
  bool bf16 = false;
  std::uint32_t slots = 4;
};

void dump(const FlatParams& flat, const std::string& path) {
  const at::Tensor& b = flat.buffer();
  std::ofstream(path, std::ios::binary).write(static_cast<const char*>(b.data_ptr()), b.numel());
}

std::byte* bytes(const FlatParams& flat) { return static_cast<std::byte*>(flat.buffer().data_ptr()); }

int run_publish(const WeightArgs& a) {
  torch::manual_seed(static_cast<std::uint64_t>(a.seed));
  CounterpartModel model(a.in, a.out);
  FlatParams flat = FlatParams::flatten(*model);
  learner::ModelPublisherOptions o;
  o.model = "counterpart";
  o.bf16 = a.bf16;
  o.slots = a.slots;
  learner::ModelPublisher publisher(a.slab, flat, o);
  if (a.seconds <= 0) {  // dump mode
    std::uint64_t step = 1;
    for (std::string command = "publish"; command == "publish"; command = wait_line()) {
      if (step > 1) {
        torch::NoGradGuard no_grad;
        model->layer->weight.add_(1.0);
      }
      const std::uint64_t v = publisher.publish_final(step++, 10);
      dump(flat, a.dump);
      std::cout << nlohmann::json{{"version", v}, {"signature", flat.signature()}}.dump() << std::endl;
    }
    return 0;
  }
  std::cout << nlohmann::json{{"ready", true}, {"signature", flat.signature()}}.dump() << std::endl;
  wait_line();  // "go"
  std::uint64_t committed = 0, skipped = 0;
  const auto end = Clock::now() + std::chrono::duration<double>(a.seconds);
  for (std::uint64_t step = 1; Clock::now() < end; ++step) {
    shm::fill_verify_pattern(bytes(flat), flat.bytes(), publisher.publisher().next_version());
    const auto r = publisher.publish(step);
    (r.outcome == learner::Publisher::Outcome::skipped ? skipped : committed) += 1;
  }
  std::cout << nlohmann::json{{"committed", committed},
                              {"skipped", skipped},
                              {"last_version", publisher.slab().latest_version()}}
                   .dump()
            << std::endl;
  wait_line();  // "quit"
  return 0;
}

int run_follow(const WeightArgs& a) {
  CounterpartModel model(a.in, a.out);
  FlatParams flat = FlatParams::flatten(*model);
  actor::Follower follower(a.slab, flat, {.mode = actor::LoadMode::copy, .model = "counterpart"});
  if (a.seconds <= 0) {  // dump mode
    while (follower.reader().latest_version() < a.min_version)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    (void)follower.update();
    dump(flat, a.dump);
    std::cout << nlohmann::json{{"version", follower.version()}}.dump() << std::endl;
    return 0;
  }
  shm::WeightSlabReader reader = shm::WeightSlabReader::attach(a.slab, 1);
  std::cout << nlohmann::json{{"ready", true}}.dump() << std::endl;
  while (reader.latest_version() == 0) std::this_thread::sleep_for(std::chrono::microseconds(100));
  std::uint64_t loads = 0, leases = 0, torn = 0, last = 0;
  bool increasing = true;
  const auto end = Clock::now() + std::chrono::duration<double>(a.seconds);
  while (Clock::now() < end) {
    if (auto v = follower.update()) {
      ++loads;
      increasing = increasing && *v > last;
      last = *v;
      if (!shm::check_verify_pattern(bytes(flat), flat.bytes(), *v)) ++torn;
    }
    if (auto lease = reader.lease_latest()) {
      ++leases;
      if (!shm::check_verify_pattern(lease->data(), lease->bytes(), lease->version())) ++torn;
    }
  }
  std::cout << nlohmann::json{{"loads", loads},
                              {"leases", leases},
                              {"torn", torn},
                              {"increasing", increasing},
                              {"last_version", last}}
                   .dump()
            << std::endl;
  return 0;
}

void common_options(CLI::App* c, WeightArgs& a) {
  c->add_option("--slab", a.slab)->required();
  c->add_option("--in", a.in);
  c->add_option("--out", a.out);
  c->add_option("--seconds", a.seconds);
  c->add_option("--dump", a.dump);
}

}  // namespace

void add_weights_commands(CLI::App& app) {
  static WeightArgs p, f;
  auto* pub = app.add_subcommand("publish", "publish CounterpartModel's weights (C++ ModelPublisher)");
  common_options(pub, p);
  pub->add_option("--seed", p.seed);
  pub->add_option("--slots", p.slots);
  pub->add_flag("--bf16", p.bf16);
  cli::on_run(pub, [] { return run_publish(p); });
  auto* fol = app.add_subcommand("follow", "follow a slab into CounterpartModel (C++ Follower)");
  common_options(fol, f);
  fol->add_option("--min-version", f.min_version);
  cli::on_run(fol, [] { return run_follow(f); });
}

}  // namespace tandem::counterpart
