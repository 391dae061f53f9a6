#include "actor/python_actor.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "envs/python_env.hpp"

namespace tandem::actor {

void exec_python_actor(const JobSettings& settings) {
  // The package as built next to this program comes first, as the tests and tools/dev/setup arrange.
  const std::string dir = envs::python_package_dir();
  if (!dir.empty()) {
    const char* old = std::getenv("PYTHONPATH");
    const std::string path = old && *old ? dir + ":" + old : dir;
    TANDEM_CHECK_SYS(setenv("PYTHONPATH", path.c_str(), 1));
  }
  const std::string python = envs::python_interpreter();
  std::vector<std::string> args = {python,
                                   "-m",
                                   "tandem.rollout_actor",
                                   "--env",
                                   settings.env.python,
                                   "--kwargs",
                                   settings.env.kwargs,
                                   "--envs",
                                   std::to_string(settings.env.envs),
                                   "--seed",
                                   std::to_string(settings.env.seed),
                                   "--threads",
                                   std::to_string(settings.actor.threads),
                                   "--wait-weights-s",
                                   std::to_string(settings.actor.wait_weights_s)};
  if (const char* job = std::getenv("TANDEM_JOB"); job == nullptr || *job == '\0') {
    args.insert(args.end(), {"--job", "local"});  // by hand, as the C++ actor: job `local`
  }
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  const int err = errno;
  fail("env.name = \"python\": cannot run {} ({}): set -Dpython_interpreter to a Python with numpy and torch", python,
       std::strerror(err));
}

}  // namespace tandem::actor
