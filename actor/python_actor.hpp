// The rollout actor of a job whose env is written in Python (env.name = "python"): tandem-actor
// replaces itself (execv, same pid, environment and control-block row, so the launcher supervises it
// exactly as before) with the Python rollout actor, python/tandem/rollout_actor.py, giving it the
// keys it needs from the typed settings on its command line (the settings stay parsed and checked in
// one place). That program steps the envs with the same policy and fills the same experience rings;
// docs/RL.md "Environments written in Python" says why a Python process rather than an interpreter
// embedded here.
//
// Threads: call from main, before anything else runs (execv replaces the process).
#pragma once

#include "common/settings/job.hpp"

namespace tandem::actor {

// Returns only by throwing (the interpreter cannot be executed).
[[noreturn]] void exec_python_actor(const JobSettings& settings);

}  // namespace tandem::actor
