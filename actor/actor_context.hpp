// ActorContext: who an actor is in its job, as the RL loops (rollout_loop.hpp, rl_evaluator.hpp) need
// it. tandem-actor fills it from its JobProcess; tests fill it by hand, so a test process can run a
// real rollout actor on rings and a slab it made itself, under a job name of its own.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "shm/control_client.hpp"

namespace tandem::actor {

struct ActorContext {
  std::string job;                       // segments are /tandem.<job>.*
  std::string run_dir = ".";             // eval.jsonl goes here
  std::uint32_t index = 0;               // the actor's index in the job: its ring, its seeds
  shm::ControlClient* client = nullptr;  // null: started by hand (or by a test): nothing is reported
  std::function<bool()> stop;            // a stop was requested (signal or the launcher's flag)
  std::function<void()> tick;            // the heartbeat: the main loop is alive

  bool stopping() const { return stop && stop(); }
  void beat() const {
    if (tick) tick();
  }
};

}  // namespace tandem::actor
