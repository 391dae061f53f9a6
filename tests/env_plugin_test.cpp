// Users' env plugins through dlopen: the example plugin in a VecEnv, and one clear line for each way a
// plugin can be wrong (the flawed plugins are tests/env_bad_plugin.cpp).
#include <doctest/doctest.h>

#include <csignal>
#include <cstdlib>

#include "envs/plugin_env.hpp"
#include "envs/vec_env.hpp"
#include "tests/case_check.hpp"
#include "tests/harness.hpp"

using namespace tandem::envs;
using namespace tandem::test;

namespace {

// tests/meson.build passes each plugin's path in the environment.
std::string plugin(const char* variable) {
  const char* path = std::getenv(variable);
  REQUIRE_MESSAGE(path != nullptr, variable << " is not set: run this test through meson test");
  return path;
}

}  // namespace

TEST_CASE("env plugins: the example corridor plugin runs in a VecEnv, reaching its goal and its time limit") {
  auto library = PluginLibrary::open(plugin("TANDEM_CORRIDOR_PLUGIN"));
  std::vector<std::unique_ptr<Env>> envs;
  envs.reserve(2);
  for (int i = 0; i < 2; ++i) envs.push_back(PluginEnv::create(library, "length=6", EnvSpec{"", 2, 2}));
  VecEnv vec(std::move(envs), 9, 0);
  CHECK(vec.spec().max_episode_steps == 100);
  const std::vector<std::int32_t> actions{1, 0};  // env 0 walks to the goal, env 1 away from it
  int steps = 0;
  while (!vec.done(0)) {
    REQUIRE(vec.step(std::span<const std::int32_t>(actions)));
    REQUIRE(++steps <= 5);
  }
  CHECK(vec.terminated()[0] == 1);
  CHECK(vec.final_observations()[0] == 1.0f);  // at the right end
  CHECK(vec.rewards()[0] == 1.0f);
  while (!vec.done(1)) REQUIRE(vec.step(std::span<const std::int32_t>(actions)));
  CHECK(vec.bootstraps(1));
  CHECK(vec.episode_lengths()[1] == 100);
}

TEST_CASE("env plugins: a plugin that refuses its config says why") {
  auto library = PluginLibrary::open(plugin("TANDEM_CORRIDOR_PLUGIN"));
  CHECK(error_of([&] { PluginEnv::create(library, "length=two"); }) ==
        "env plugin '" + library->path() +
            "' refused config 'length=two': config must read \"length=N\" with N >= 4, got \"length=two\"");
}

TEST_CASE("env plugins: a missing file, a missing symbol and another ABI each get one line naming the fix") {
  const std::string missing = "/nonexistent/libmyenv.so";
  const std::string e = error_of([&] { PluginLibrary::open(missing); });
  CHECK(e.find("env plugin '/nonexistent/libmyenv.so' could not be loaded (") == 0);
  CHECK(e.find("give the path of a shared library implementing envs/tandem_env.h") != std::string::npos);
  CHECK(e.find("env.plugin") == std::string::npos);  // the launcher's config and tandem.envs.make both get here
  CHECK(e.find('\n') == std::string::npos);
  CHECK(error_of([&] { PluginLibrary::open(missing + '\0' + ".bak"); }) ==
        "env plugin path '/nonexistent/libmyenv.so\\x00.bak' holds a NUL byte: give the path of the shared library "
        "without it");

  const std::string no_step = plugin("TANDEM_PLUGIN_NO_STEP");
  CHECK(error_of([&] { PluginLibrary::open(no_step); }) ==
        "env plugin '" + no_step +
            "' does not export 'tandem_env_step': implement every function of envs/tandem_env.h with extern "
            "\"C\" linkage");

  const std::string other_abi = plugin("TANDEM_PLUGIN_OTHER_ABI");
  CHECK(error_of([&] { PluginLibrary::open(other_abi); }) ==
        "env plugin '" + other_abi +
            "' was built for env ABI 2, this Tandem loads ABI 1: rebuild it against this Tandem's "
            "envs/tandem_env.h");
}

TEST_CASE("env plugins: spaces that make no sense or do not fit the policy get one line naming both") {
  const std::string no_actions = plugin("TANDEM_PLUGIN_NO_ACTIONS");
  auto bad = PluginLibrary::open(no_actions);
  CHECK(error_of([&] { PluginEnv::create(bad, ""); }).find("env plugin '" + no_actions + "' reports unusable spaces") ==
        0);

  const std::string huge_obs = plugin("TANDEM_PLUGIN_HUGE_OBS");
  auto huge = PluginLibrary::open(huge_obs);
  CHECK(error_of([&] { PluginEnv::create(huge, ""); }) ==
        "env plugin '" + huge_obs +
            "' reports unusable spaces (obs_dim 2147483647, num_actions 2, action_dim 0, bounds [0, 0], "
            "max_episode_steps 0): it needs 0 < obs_dim <= 2^20 and exactly one of num_actions or action_dim in "
            "1..2^16");

  auto corridor = PluginLibrary::open(plugin("TANDEM_CORRIDOR_PLUGIN"));
  CHECK(error_of([&] {
          PluginEnv::create(corridor, "", EnvSpec{"", 4, 2});
        }) ==
        "env '" + corridor->path() + "' observes 2 floats but the policy expects 4: set the model's input size to 2");
  CHECK(error_of([&] {
          PluginEnv::create(corridor, "", EnvSpec{"", 2, 3});
        }).find("has 2 discrete actions but the policy expects 3") != std::string::npos);
}

// Steps the crashing plugin with the default SIGSEGV action (a sanitizer's handler would turn the
// signal into an exit code), as an actor process would.
TANDEM_CHILD("step crashing plugin") {
  std::signal(SIGSEGV, SIG_DFL);
  auto library = PluginLibrary::open(child_args().at(0));
  std::vector<std::unique_ptr<Env>> envs;
  envs.push_back(PluginEnv::create(library, ""));
  VecEnv vec(std::move(envs), 1, 0);
  const std::int32_t action = 0;
  (void)vec.step(std::span<const std::int32_t>(&action, 1));
  return 0;
}

TEST_CASE("env plugins: a plugin that crashes kills its actor by signal, reported in one line" * doctest::timeout(30)) {
  const std::string crash = plugin("TANDEM_PLUGIN_CRASH");
  Child child = spawn_child("step crashing plugin", {crash});
  const int status = child.wait();
  REQUIRE(status == 128 + SIGSEGV);
  const std::string line = plugin_crash_message(crash, status - 128);
  CHECK(line == "the actor died by signal 11 (SIGSEGV) inside env plugin '" + crash +
                    "': fix the plugin, or run it under a debugger with one env");
}

TEST_CASE("env plugins: tandem_env.h is plain C99") {
  if (run_command("command -v cc").status != 0) TANDEM_SKIP("no C compiler (cc) on PATH to compile the header");
  const CommandResult r = run_command("cc -std=c99 -pedantic -Wall -Werror -fsyntax-only -x c " + source_root() +
                                      "/envs/tandem_env.h 2>&1");
  CHECK_MESSAGE(r.status == 0, r.output);
}
