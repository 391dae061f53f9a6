// tandem shm ls | gc | rm: what Tandem has in /dev/shm, and cleaning up after dead jobs.
#include <unistd.h>

#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <ctime>

#include "common/error.hpp"
#include "shm/segment.hpp"
#include "common/cli_actions.hpp"
#include "tools/commands.hpp"

namespace tandem::tools {
namespace {

std::string human(std::uint64_t bytes) {
  if (bytes >= (1ull << 30)) return fmt::format("{:.1f}G", bytes / double(1ull << 30));
  if (bytes >= (1ull << 20)) return fmt::format("{:.1f}M", bytes / double(1ull << 20));
  return fmt::format("{}K", bytes >> 10);
}

bool is_dataset(const shm::SegmentInfo& s) { return s.name.starts_with("tandem.data."); }

int print_segments() {
  auto segments = shm::list_segments();
  if (segments.empty()) {
    fmt::print("no Tandem segments in /dev/shm\n");
    return 0;
  }
  fmt::print("{:<40} {:>8} {:<8} {:>8}  {}\n", "SEGMENT", "SIZE", "KIND", "CREATOR", "STATE");
  for (const auto& s : segments) {
    std::string state = s.valid ? "ready" : s.problem;
    if (!s.ours && s.problem.find("owned by") == std::string::npos)
      state += fmt::format(" (owned by uid {})", s.owner_uid);
    std::string creator = s.creator_pid ? fmt::format("{}{}", s.creator_pid, s.creator_alive ? "" : "(gone)") : "-";
    fmt::print("{:<40} {:>8} {:<8} {:>8}  {}\n", "/" + s.name, human(s.bytes),
               s.valid || s.creator_pid ? std::string(shm::kind_name(s.kind)) : "?", creator, state);
  }
  return 0;
}

// Says what happened to one removal; false when the name could not be removed.
bool report_removal(const std::string& name, const shm::Segment::Removal& r, std::string_view why) {
  const std::string owner = r.owner_uid != ::getuid() ? fmt::format(", owned by uid {}", r.owner_uid) : "";
  switch (r.result) {
    case shm::Segment::Removal::removed: fmt::print("removed /{} ({}{})\n", name, why, owner); return true;
    case shm::Segment::Removal::absent: fmt::print("/{} was already gone\n", name); return true;
    case shm::Segment::Removal::denied: break;
  }
  fmt::print(stderr, "could not remove /{} (owned by uid {}): {}\n", name, r.owner_uid, std::strerror(r.error));
  return false;
}

// Only valid Tandem segments are garbage collected: magic and checksum good (or, for one abandoned
// mid-creation, magic good and not ready), owned by this uid, creator dead. A job segment is
// garbage once its creator (the launcher) is gone; a dataset cache outlives the preload that made
// it, so only an unfinished one is. Anything else named tandem.* is reported and left alone unless
// `all_invalid`; another user's objects are never touched, even by root (`tandem shm rm` is the
// deliberate way to remove one).
int gc(bool dry_run, bool all_invalid) {
  int candidates = 0, failed = 0;
  for (const auto& s : shm::list_segments()) {
    if (!s.ours) {
      fmt::print("skipped /{}: owned by uid {}, not by this user (uid {}): run `tandem shm gc` as that user\n", s.name,
                 s.owner_uid, ::getuid());
      continue;
    }
    const bool tandem = s.valid || s.problem == "abandoned while being written" || s.problem == "being written";
    std::string why;
    if (tandem) {
      const bool abandoned = !s.ready && !s.creator_alive;
      const bool orphan_job = s.valid && !is_dataset(s) && !s.creator_alive;
      if (!abandoned && !orphan_job) continue;
      why = fmt::format("{}, creator pid {} is gone", s.valid ? "ready" : s.problem, s.creator_pid);
    } else if (all_invalid) {
      why = s.problem;
    } else {
      fmt::print("left /{}: {} (pass --all-invalid to remove it, or `tandem shm rm {}`)\n", s.name, s.problem, s.name);
      continue;
    }
    ++candidates;
    if (dry_run) fmt::print("would remove /{} ({})\n", s.name, why);
    else if (!report_removal(s.name, shm::Segment::remove(s.name), why)) ++failed;
  }
  if (candidates == 0) fmt::print("nothing to remove\n");
  if (failed > 0) fail("{} segment{} could not be removed (see above)", failed, failed == 1 ? "" : "s");
  return 0;
}

// Root may remove another user's segment by name (it is the administrator's explicit request); the
// message then says whose it was.
int remove_segment(const std::string& name) {
  std::string bare = name.starts_with("/") ? name.substr(1) : name;
  if (!bare.starts_with("tandem.")) fail("'{}' is not a Tandem segment name (they start with tandem.)", name);
  if (bare.find('/') != std::string::npos) fail("'{}' is not a segment name: it contains '/'", name);
  const auto r = shm::Segment::remove(bare);
  if (r.result == shm::Segment::Removal::absent) fail("no segment '/{}' in /dev/shm: `tandem shm ls` lists them", bare);
  if (r.result == shm::Segment::Removal::denied)
    fail(ErrorKind::owner,
         "cannot remove '/{}': it is owned by uid {}, not by this user (uid {}) ({}): run `tandem shm rm` as that user",
         bare, r.owner_uid, ::getuid(), std::strerror(r.error));
  fmt::print("removed /{}{}\n", bare, r.owner_uid != ::getuid() ? fmt::format(" (owned by uid {})", r.owner_uid) : "");
  return 0;
}

}  // namespace

void add_shm_commands(CLI::App& app) {
  auto* shm = app.add_subcommand("shm", "inspect and clean Tandem's shared-memory segments");
  shm->footer(
      "Segments live in /dev/shm. TANDEM_SHM_LIMIT=SIZE (bytes, or K/M/G, powers of 1024) caps the space "
      "Tandem believes /dev/shm has free, e.g. to test a small /dev/shm (docs/FORMAT.md).");
  shm->require_subcommand(1);
  cli::on_run(shm->add_subcommand("ls", "list Tandem segments in /dev/shm"), [] { return print_segments(); });

  auto* gc_cmd = shm->add_subcommand("gc",
                                     "remove this user's job segments whose creator is gone and abandoned preloads");
  static bool dry_run = false, all_invalid = false;
  gc_cmd->add_flag("-n,--dry-run", dry_run, "only say what would be removed");
  gc_cmd->add_flag("--all-invalid", all_invalid,
                   "also remove this user's tandem.* objects that are not valid Tandem segments (reported otherwise)");
  cli::on_run(gc_cmd, [] { return gc(dry_run, all_invalid); });

  auto* rm = shm->add_subcommand("rm", "remove one segment by name");
  static std::string name;
  rm->add_option("name", name, "segment name, e.g. tandem.myjob.weights")->required();
  cli::on_run(rm, [] { return remove_segment(name); });
}

}  // namespace tandem::tools
