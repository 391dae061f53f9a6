// Who a process is: liveness, an identity that survives pid reuse, this program's path and host.
//
// A pid alone does not name a process for long: once it exits, the kernel may hand the number to
// another one. A ProcessIdentity adds the start time from /proc/<pid>/stat (clock ticks since boot),
// so records that other processes keep about a process (weight-slab lease owners) tell "the same
// process" from "a new process with the same pid". Everything here reads /proc or calls kill(pid, 0)
// and is safe from any thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace tandem {

// True while `pid` names a process, zombies included (kill(pid, 0) succeeds or says EPERM); false for 0.
bool process_alive(std::uint32_t pid);

struct ProcessIdentity {
  std::uint32_t pid = 0;
  std::uint64_t start_ticks = 0;  // /proc/<pid>/stat field 22: start time, clock ticks since boot
  char state = '?';               // field 3: 'R', 'S', ..., 'Z' (zombie), 'X' (dead)

  // Exited: a zombie not yet reaped, or dead. Such a process will never act again.
  bool exited() const { return state == 'Z' || state == 'X'; }
};

// nullopt when the process does not exist (or /proc/<pid>/stat cannot be parsed).
std::optional<ProcessIdentity> process_identity(std::uint32_t pid);

// The running program's absolute path (/proc/self/exe); throws std::filesystem::filesystem_error
// when /proc is not mounted.
std::filesystem::path self_exe();

// This machine's host name (gethostname), or "unknown-host" if it has none; read once.
const std::string& host_name();

}  // namespace tandem
