// tandem shm ls | gc | rm: what Tandem has in /dev/shm, and cleaning up after dead jobs.
#include <fmt/format.h>

#include <chrono>
#include <ctime>

#include "common/error.hpp"
#include "shm/segment.hpp"
#include "tools/commands.hpp"

namespace tandem::tools {
namespace {

std::string human(std::uint64_t bytes) {
  if (bytes >= (1ull << 30)) return fmt::format("{:.1f}G", bytes / double(1ull << 30));
  if (bytes >= (1ull << 20)) return fmt::format("{:.1f}M", bytes / double(1ull << 20));
  return fmt::format("{}K", bytes >> 10);
}

bool is_dataset(const shm::SegmentInfo& s) { return s.name.starts_with("tandem.data."); }

int list() {
  auto segments = shm::list_segments();
  if (segments.empty()) {
    fmt::print("no Tandem segments in /dev/shm\n");
    return 0;
  }
  fmt::print("{:<40} {:>8} {:<8} {:>8}  {}\n", "SEGMENT", "SIZE", "KIND", "CREATOR", "STATE");
  for (const auto& s : segments) {
    std::string state = s.valid ? "ready" : s.problem;
    std::string creator = s.creator_pid ? fmt::format("{}{}", s.creator_pid, s.creator_alive ? "" : "(gone)") : "-";
    fmt::print("{:<40} {:>8} {:<8} {:>8}  {}\n", "/" + s.name, human(s.bytes),
               s.valid || s.creator_pid ? std::string(shm::kind_name(s.kind)) : "?", creator, state);
  }
  return 0;
}

// A job segment is garbage once its creator (the launcher) is gone. A dataset cache outlives the
// preload that made it, so only an unfinished one (abandoned mid-preload) is garbage.
int gc(bool dry_run) {
  int removed = 0;
  for (const auto& s : shm::list_segments()) {
    bool abandoned = !s.ready && !s.creator_alive;
    bool orphan_job = !is_dataset(s) && !s.creator_alive;
    if (!abandoned && !orphan_job) continue;
    fmt::print("{} /{} ({}, creator pid {} is gone)\n", dry_run ? "would remove" : "removed", s.name,
               s.valid ? "ready" : s.problem, s.creator_pid);
    if (!dry_run) shm::Segment::unlink(s.name);
    ++removed;
  }
  if (removed == 0) fmt::print("nothing to remove\n");
  return 0;
}

int remove(const std::string& name) {
  std::string bare = name.starts_with("/") ? name.substr(1) : name;
  if (!bare.starts_with("tandem.")) fail("'{}' is not a Tandem segment name (they start with tandem.)", name);
  if (!shm::Segment::unlink(bare)) fail("no segment '/{}' in /dev/shm: `tandem shm ls` lists them", bare);
  fmt::print("removed /{}\n", bare);
  return 0;
}

}  // namespace

void add_shm_commands(CLI::App& app) {
  auto* shm = app.add_subcommand("shm", "inspect and clean Tandem's shared-memory segments");
  shm->require_subcommand(1);
  on_run(shm->add_subcommand("ls", "list Tandem segments in /dev/shm"), [] { return list(); });

  auto* gc_cmd = shm->add_subcommand("gc", "remove job segments whose creator is gone and abandoned preloads");
  static bool dry_run = false;
  gc_cmd->add_flag("-n,--dry-run", dry_run, "only say what would be removed");
  on_run(gc_cmd, [] { return gc(dry_run); });

  auto* rm = shm->add_subcommand("rm", "remove one segment by name");
  static std::string name;
  rm->add_option("name", name, "segment name, e.g. tandem.myjob.weights")->required();
  on_run(rm, [] { return remove(name); });
}

}  // namespace tandem::tools
