// Environments written in Python (env.name = "python", env.python = "module:Class", env.kwargs = a
// JSON object). C++ never steps them: the rollout actor for such a job is the Python program
// tandem.rollout_actor (tandem-actor execs it, actor/python_actor.hpp), which steps them with the same
// policy and writes the same experience rings. What C++ needs is their spaces, to size the rings and
// the model before any actor runs; python_env_spec() asks the env itself, once, by running
// python/tandem/pyenv.py ("spec") in a child interpreter: it imports the class, builds one env with
// the kwargs, reads observation_space / action_space, takes one reset and one step to check their
// answers, and prints the spec as JSON. Asking the env (rather than restating its spaces in the
// config) keeps one source of truth; the child costs about 0.1 s and imports neither torch nor the
// extension. Any failure is the child's one line (naming the env and the fix), as a UserError.
//
// Threads: any; each call runs its own child and waits for it.
#pragma once

#include <string>
#include <vector>

#include "common/env_spec.hpp"
#include "common/settings/actor.hpp"

namespace tandem::envs {

// The interpreter with torch that the build's `tandem` package runs on (meson's, -Dpython_interpreter).
std::string python_interpreter();

// The folder holding the `tandem` package as built next to this program (<build>/python), or "" when
// the program is installed and the package is in the interpreter's site-packages.
std::string python_package_dir();

EnvSpec python_env_spec(const EnvSettings& settings);

}  // namespace tandem::envs
