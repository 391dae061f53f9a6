#include "envs/python_env.hpp"

#include <sys/wait.h>

#include <nlohmann/json.hpp>

#include <array>
#include <cstdio>
#include <filesystem>

#include "common/error.hpp"
#include "common/process.hpp"

namespace tandem::envs {
namespace {

// A shell word that stays one word whatever it holds (module names and JSON are the user's).
std::string quoted(const std::string& s) {
  std::string out = "'";
  for (const char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string last_line(std::string text) {
  while (!text.empty() && text.back() == '\n') text.pop_back();
  const std::size_t nl = text.rfind('\n');
  return nl == std::string::npos ? text : text.substr(nl + 1);
}

}  // namespace

std::string python_interpreter() { return TANDEM_PYTHON; }

std::string python_package_dir() {
  std::error_code ec;
  const std::filesystem::path dir = self_exe().parent_path().parent_path() / "python";
  return std::filesystem::is_regular_file(dir / "tandem" / "pyenv.py", ec) ? dir.string() : "";
}

EnvSpec python_env_spec(const EnvSettings& settings) {
  const std::string dir = python_package_dir();
  // By path in the build tree, so that the probe does not import the package (torch); installed, as a module.
  const std::string script = dir.empty() ? "-m tandem.pyenv" : quoted(dir + "/tandem/pyenv.py");
  const std::string command = fmt::format("{} {} spec {} {} 2>&1", quoted(python_interpreter()), script,
                                          quoted(settings.python), quoted(settings.kwargs));
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) throw_errno_error(errno, "popen", TANDEM_CALL_SITE);
  std::string out;
  std::array<char, 4096> buf{};
  for (std::size_t n; (n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0;) out.append(buf.data(), n);
  const int status = pclose(pipe);
  const std::string line = last_line(out);
  if (status != 0 || line.empty() || line.front() != '{')
    fail("{}", line.empty() ? fmt::format("env.python = \"{}\": {} could not run it (status {}): set "
                                          "-Dpython_interpreter to a Python with numpy and torch",
                                          settings.python, python_interpreter(), status)
                            : line);  // the probe's own line names the env and the fix
  const nlohmann::json j = nlohmann::json::parse(line);
  return EnvSpec{.name = settings.python,
                 .obs_dim = j.at("obs_dim").get<int>(),
                 .num_actions = j.at("num_actions").get<int>(),
                 .action_dim = j.at("action_dim").get<int>(),
                 .action_low = j.at("action_low").get<float>(),
                 .action_high = j.at("action_high").get<float>(),
                 .max_episode_steps = j.at("max_episode_steps").get<int>()};
}

}  // namespace tandem::envs
