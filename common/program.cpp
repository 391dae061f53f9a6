#include "common/program.hpp"

#include <CLI/CLI.hpp>
#include <malloc.h>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <limits>

#include "common/error.hpp"
#include "common/log.hpp"

namespace tandem {

void add_program_args(CLI::App& app, ProgramArgs& args) {
  app.add_option("config", args.file, "job config (TOML); default: $TANDEM_CONFIG, else the built-in defaults");
  app.add_option("--set", args.overrides, "override one key, e.g. --set supervised.steps=100")->type_name("KEY=VALUE");
}

Config load_program_config(const std::string& file, std::span<const std::string> overrides) {
  std::string path = file;
  if (path.empty())
    if (const char* env = std::getenv("TANDEM_CONFIG")) path = env;
  const auto schema = program_schema();
  // The launcher's table: a job config started by hand (examples/*.toml) holds it too.
  static constexpr std::string_view kLauncherTables[] = {"run"};
  Config config = path.empty() ? Config::parse("", "<default>", overrides, schema, kLauncherTables, renamed_keys())
                               : Config::load(path, overrides, schema, kLauncherTables, renamed_keys());
  for (const auto& table : config.skipped_tables())
    log::info("note: config {}: ignoring [{}], the launcher's table (`tandem run` reads it)",
              path.empty() ? "--set" : path, table);
  for (const auto& note : config.notes()) log::info("{}", note);
  return config;
}

JobShape program_shape(std::uint32_t learners, std::uint32_t local_learners) {
  JobShape shape{.learners = learners, .local_learners = local_learners, .deterministic = deterministic_mode()};
  const char* actors = std::getenv("TANDEM_ACTORS");
  if (actors == nullptr || *actors == '\0') return shape;
  char* end = nullptr;
  const long long n = std::strtoll(actors, &end, 10);
  if (*end != '\0' || n < 0 || n > 1000000)
    fail("TANDEM_ACTORS='{}' is not a count of actors: it is set by `tandem run` (unset it to run by hand)", actors);
  shape.actors = static_cast<std::uint32_t>(n);
  return shape;
}

namespace {
std::atomic<int> g_stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "read from a signal handler");
extern "C" void record_stop_signal(int sig) { g_stop_signal.store(sig, std::memory_order_relaxed); }
}  // namespace

void catch_stop_signals() {
  struct sigaction sa {};
  sa.sa_handler = record_stop_signal;
  sigemptyset(&sa.sa_mask);
  TANDEM_CHECK_SYS(::sigaction(SIGINT, &sa, nullptr));
  TANDEM_CHECK_SYS(::sigaction(SIGTERM, &sa, nullptr));
}

int stop_signal() { return g_stop_signal.load(std::memory_order_relaxed); }

void keep_freed_memory_for_reuse() {
  constexpr int kMmapCeiling = 32 << 20;  // glibc refuses a larger M_MMAP_THRESHOLD on 64-bit
  constexpr int kNeverTrim = std::numeric_limits<int>::max();
  constexpr int kHeapGrowth = 64 << 20;  // grow the heap in large steps: fewer brk calls
  if (::mallopt(M_MMAP_THRESHOLD, kMmapCeiling) != 1 || ::mallopt(M_TRIM_THRESHOLD, kNeverTrim) != 1 ||
      ::mallopt(M_TOP_PAD, kHeapGrowth) != 1)
    log::warn("mallopt refused the allocator settings: steps will fault freed memory back in (slower, still correct)");
}

bool deterministic_mode() {
  const char* v = std::getenv("TANDEM_DETERMINISTIC");
  return v != nullptr && std::string_view(v) == "1";
}

}  // namespace tandem
