#include "envs/plugin_env.hpp"

#include <dlfcn.h>

#include <cstring>
#include <string_view>

#include "common/error.hpp"
#include "common/quote.hpp"

namespace tandem::envs {
namespace {

template <class Fn>
void resolve(void* handle, const std::string& path, const char* name, Fn& out) {
  void* symbol = ::dlsym(handle, name);
  if (symbol == nullptr)
    fail(
        "env plugin '{}' does not export '{}': implement every function of envs/tandem_env.h with "
        "extern \"C\" linkage",
        path, name);
  out = reinterpret_cast<Fn>(symbol);
}

}  // namespace

std::shared_ptr<PluginLibrary> PluginLibrary::open(const std::string& path) {
  // dlopen reads a C string: it would load the path cut at the NUL, another file than the one named.
  if (path.find('\0') != std::string::npos)
    fail("env plugin path {} holds a NUL byte: give the path of the shared library without it", quote_cut(path));
  // RTLD_LOCAL keeps two plugins' symbols apart; RTLD_NOW finds missing dependencies here, not mid-run.
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* error = ::dlerror();
    std::string_view why = error != nullptr ? error : "unknown reason";
    if (why.starts_with(path + ": ")) why.remove_prefix(path.size() + 2);  // dlerror repeats the path
    // No setting's name: the launcher's config (env.plugin) and tandem.envs.make (plugin=) both get here.
    fail("env plugin {} could not be loaded ({}): give the path of a shared library implementing envs/tandem_env.h",
         quote_cut(path), why);
  }
  std::shared_ptr<PluginLibrary> library(new PluginLibrary(path, handle));
  PluginSymbols& s = library->symbols_;
  resolve(handle, path, "tandem_env_abi_version", s.abi_version);
  resolve(handle, path, "tandem_env_create", s.create);
  resolve(handle, path, "tandem_env_destroy", s.destroy);
  resolve(handle, path, "tandem_env_spaces_of", s.spaces_of);
  resolve(handle, path, "tandem_env_reset", s.reset);
  resolve(handle, path, "tandem_env_step", s.step);
  const std::uint32_t version = s.abi_version();
  if (version != TANDEM_ENV_ABI_VERSION)
    fail(
        "env plugin '{}' was built for env ABI {}, this Tandem loads ABI {}: rebuild it against this "
        "Tandem's envs/tandem_env.h",
        path, version, TANDEM_ENV_ABI_VERSION);
  return library;
}

PluginLibrary::~PluginLibrary() { ::dlclose(handle_); }

std::unique_ptr<PluginEnv> PluginEnv::create(std::shared_ptr<PluginLibrary> library, const std::string& config,
                                             const EnvSpec& want) {
  const PluginSymbols& s = library->symbols();
  char error[512] = {};
  tandem_env* env = s.create(config.c_str(), error, sizeof error);
  if (env == nullptr) {
    error[sizeof error - 1] = '\0';
    fail("env plugin '{}' refused config '{}': {}", library->path(), config,
         error[0] != '\0' ? error : "it gave no reason");
  }
  tandem_env_spaces spaces{};
  s.spaces_of(env, &spaces);
  EnvSpec spec{library->path(),   spaces.obs_dim,     spaces.num_actions,      spaces.action_dim,
               spaces.action_low, spaces.action_high, spaces.max_episode_steps};
  // Owned from here, so a failed check below destroys the plugin's env.
  std::unique_ptr<PluginEnv> plugin(new PluginEnv(std::move(library), env, spec));
  // The caps keep a plugin's garbage from sizing a VecEnv's arrays; real envs are far below them.
  constexpr int max_obs_dim = 1 << 20, max_actions = 1 << 16;
  const bool one_kind = (spec.num_actions > 0) != (spec.action_dim > 0);
  if (spec.obs_dim <= 0 || spec.obs_dim > max_obs_dim || spec.num_actions < 0 || spec.num_actions > max_actions ||
      spec.action_dim < 0 || spec.action_dim > max_actions || !one_kind || spec.max_episode_steps < 0 ||
      (spec.action_dim > 0 && !(spec.action_low <= spec.action_high)))
    fail(
        "env plugin '{}' reports unusable spaces (obs_dim {}, num_actions {}, action_dim {}, bounds [{}, {}], "
        "max_episode_steps {}): it needs 0 < obs_dim <= 2^20 and exactly one of num_actions or action_dim in 1..2^16",
        spec.name, spec.obs_dim, spec.num_actions, spec.action_dim, spec.action_low, spec.action_high,
        spec.max_episode_steps);
  require_spaces(spec, want);
  return plugin;
}

PluginEnv::~PluginEnv() { library_->symbols().destroy(env_); }

void PluginEnv::reset(Rng& rng, float* obs) { library_->symbols().reset(env_, rng.next(), obs); }

StepOut PluginEnv::step(ActionRef action, float* obs) {
  float reward = 0.0f;
  std::int32_t terminated = 0, truncated = 0;
  const void* raw = spec_.discrete() ? static_cast<const void*>(&action.index) : action.values;
  library_->symbols().step(env_, raw, obs, &reward, &terminated, &truncated);
  return {reward, terminated != 0, truncated != 0};
}

std::string plugin_crash_message(const std::string& path, int signal) {
  const char* name = ::sigabbrev_np(signal);
  return fmt::format(
      "the actor died by signal {} (SIG{}) inside env plugin '{}': fix the plugin, or run it "
      "under a debugger with one env",
      signal, name ? name : "?", path);
}

}  // namespace tandem::envs
