// tandem-py-counterpart rings-consume | rings-write: a C++ learner consuming experience rings it created, and a
// C++ actor writing into rings someone else created (shm/experience_ring.hpp). Both write the bytes of
// every slot they handled to --dump, one slot_bytes record after another, for the Python side to compare.
#include <nlohmann/json.hpp>

#include <chrono>
#include <fstream>
#include <iostream>
#include <thread>

#include "common/error.hpp"
#include "python/tests/counterpart/counterpart.hpp"
#include "shm/experience_ring.hpp"
#include "common/cli_actions.hpp"

namespace tandem::counterpart {
namespace {

struct RingArgs {
  std::string job, dump, action = "discrete";
  shm::ExperienceShape shape;
  std::uint32_t actor = 0, count = 1;
  std::uint64_t seed = 0;
  double timeout_s = 30;
};

void write_slot(std::ofstream& out, const shm::SlotView& slot, const shm::ExperienceDescriptor& d) {
  out.write(reinterpret_cast<const char*>(slot.bytes()), static_cast<std::streamsize>(d.slot_bytes));
}

// Consumes `count` verified slots of actor `actor` from rings this process creates.
int run_consume(RingArgs a) {
  a.shape.action_kind = a.action == "continuous" ? shm::ActionKind::continuous : shm::ActionKind::discrete;
  shm::ExperienceRings rings = shm::ExperienceRings::create(a.job, a.shape);
  std::cout << nlohmann::json{{"ready", rings.segment_name()}}.dump() << std::endl;
  std::ofstream out(a.dump, std::ios::binary);
  std::uint32_t verified = 0, refused = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(a.timeout_s);
  while (verified < a.count) {
    const auto slot = rings.peek(a.actor);
    if (!slot) {
      if (std::chrono::steady_clock::now() > deadline)
        fail("rings-consume: only {} of {} slots came", verified, a.count);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      continue;
    }
    if (rings.verify(a.actor, *slot)) {
      write_slot(out, *slot, rings.descriptor());
      ++verified;
    } else {
      ++refused;
    }
    rings.release(a.actor);
  }
  out.flush();
  std::cout << nlohmann::json{{"verified", verified}, {"refused", refused}}.dump() << std::endl;
  wait_line();  // "quit": the rings stay until the Python side is done with them
  return 0;
}

// Slot k of this writer: every f32 of the fields k + position / 1024 + seed, actions k + position, flags
// (k + position) % 2, policy_version k + 1, episodes min(k, max_episodes).
void fill(const shm::SlotView& s, const shm::ExperienceDescriptor& d, std::uint64_t k, std::uint64_t seed) {
  auto floats = [&](float* p, std::uint64_t n) {
    for (std::uint64_t i = 0; i < n; ++i)
      p[i] = static_cast<float>(k) + static_cast<float>(i) / 1024.0f + static_cast<float>(seed);
  };
  const std::uint64_t T = d.steps, E = d.envs;
  floats(s.observations(), (T + 1) * E * d.obs_dim);
  if (d.action_kind == static_cast<std::uint32_t>(shm::ActionKind::discrete)) {
    for (std::uint64_t i = 0; i < T * E; ++i) s.discrete_actions()[i] = static_cast<std::int64_t>(k + i);
  } else {
    floats(s.continuous_actions(), T * E * d.action_dim);
  }
  floats(s.rewards(), T * E);
  for (std::uint64_t i = 0; i < T * E; ++i) {
    s.terminated()[i] = static_cast<std::uint8_t>((k + i) % 2);
    s.truncated()[i] = static_cast<std::uint8_t>((k + i + 1) % 2);
  }
  floats(s.log_probs(), T * E);
  floats(s.logits(), T * E * d.logits_dim);
  floats(s.values(), (T + 1) * E);
  floats(s.episode_returns(), d.max_episodes);
  for (std::uint64_t i = 0; i < d.max_episodes; ++i) s.episode_lengths()[i] = static_cast<std::uint32_t>(k + i);
  floats(s.final_observations(), T * E * d.obs_dim);
  s.header().policy_version = k + 1;
  s.header().episodes = static_cast<std::uint32_t>(std::min<std::uint64_t>(k, d.max_episodes));
}

int run_write(const RingArgs& a) {
  shm::ExperienceWriter writer = shm::ExperienceWriter::attach(a.job, a.actor);
  std::ofstream out(a.dump, std::ios::binary);
  for (std::uint64_t k = 0; k < a.count;) {
    const auto slot = writer.begin_write();
    if (!slot) {  // full: the consumer has not caught up
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      continue;
    }
    fill(*slot, writer.descriptor(), k++, a.seed);
    writer.commit(*slot);
    write_slot(out, *slot, writer.descriptor());
  }
  std::cout << nlohmann::json{{"written", a.count}}.dump() << std::endl;
  return 0;
}

}  // namespace

void add_rings_commands(CLI::App& app) {
  static RingArgs c, w;
  auto* consume = app.add_subcommand("rings-consume", "create experience rings and consume verified slots");
  consume->add_option("--job", c.job)->required();
  consume->add_option("--actors", c.shape.num_actors);
  consume->add_option("--slots", c.shape.slots_per_ring);
  consume->add_option("--steps", c.shape.steps);
  consume->add_option("--envs", c.shape.envs);
  consume->add_option("--obs-dim", c.shape.obs_dim);
  consume->add_option("--action", c.action);
  consume->add_option("--action-dim", c.shape.action_dim);
  consume->add_option("--logits-dim", c.shape.logits_dim);
  consume->add_option("--actor", c.actor);
  consume->add_option("--count", c.count);
  consume->add_option("--timeout", c.timeout_s);
  consume->add_option("--dump", c.dump)->required();
  cli::on_run(consume, [] { return run_consume(c); });

  auto* write = app.add_subcommand("rings-write", "write slots into existing experience rings as actor --actor");
  write->add_option("--job", w.job)->required();
  write->add_option("--actor", w.actor);
  write->add_option("--count", w.count);
  write->add_option("--seed", w.seed);
  write->add_option("--dump", w.dump)->required();
  cli::on_run(write, [] { return run_write(w); });
}

}  // namespace tandem::counterpart
