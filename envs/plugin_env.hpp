// Users' own envs: a shared library implementing envs/tandem_env.h, loaded with dlopen.
//
// PluginLibrary opens the library once, resolves and checks every symbol and the ABI version (each
// failure is a UserError naming the file and the fix); PluginEnv is one env handle made by it, an Env
// a VecEnv can hold. The library stays loaded while any PluginEnv made from it lives.
//
// Threads: open() and create() from any thread; a PluginEnv belongs to one thread, like every Env.
#pragma once

#include <memory>
#include <string>

#include "envs/env.hpp"
#include "envs/tandem_env.h"

namespace tandem::envs {

struct PluginSymbols {
  decltype(&tandem_env_abi_version) abi_version = nullptr;
  decltype(&tandem_env_create) create = nullptr;
  decltype(&tandem_env_destroy) destroy = nullptr;
  decltype(&tandem_env_spaces_of) spaces_of = nullptr;
  decltype(&tandem_env_reset) reset = nullptr;
  decltype(&tandem_env_step) step = nullptr;
};

class PluginLibrary {
 public:
  static std::shared_ptr<PluginLibrary> open(const std::string& path);
  ~PluginLibrary();
  PluginLibrary(const PluginLibrary&) = delete;
  PluginLibrary& operator=(const PluginLibrary&) = delete;

  const std::string& path() const { return path_; }
  const PluginSymbols& symbols() const { return symbols_; }

 private:
  PluginLibrary(std::string path, void* handle) : path_(std::move(path)), handle_(handle) {}
  std::string path_;
  void* handle_;
  PluginSymbols symbols_;
};

class PluginEnv final : public Env {
 public:
  // Calls the plugin's create(config); its spaces are checked for sense (positive sizes, exactly one
  // kind of action space, bounds in order) and then against `want` with require_spaces().
  static std::unique_ptr<PluginEnv> create(std::shared_ptr<PluginLibrary> library, const std::string& config,
                                           const EnvSpec& want = {});
  ~PluginEnv() override;

  const EnvSpec& spec() const override { return spec_; }
  void reset(Rng& rng, float* obs) override;  // passes rng.next() as the plugin's seed
  StepOut step(ActionRef action, float* obs) override;

 private:
  PluginEnv(std::shared_ptr<PluginLibrary> library, tandem_env* env, EnvSpec spec)
      : library_(std::move(library)), env_(env), spec_(std::move(spec)) {}
  std::shared_ptr<PluginLibrary> library_;
  tandem_env* env_;
  EnvSpec spec_;
};

// The line a supervisor prints when the actor running plugin `path` died by `signal`.
std::string plugin_crash_message(const std::string& path, int signal);

}  // namespace tandem::envs
