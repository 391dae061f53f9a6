// Who a process is: liveness, an identity that survives pid reuse, this program's path and host.
//
// A pid alone does not name a process for long: once it exits, the kernel may hand the number to
// another one. A ProcessIdentity adds the start time from /proc/<pid>/stat (clock ticks since boot),
// so records that other processes keep about a process (weight-slab lease owners, node-group ranks)
// tell "the same process" from "a new process with the same pid". Everything here reads /proc or
// calls kill(pid, 0) and is safe from any thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace tandem {

// Liveness, the one rule every "is its owner still there" check uses (shm gc, segment attach, lease
// owners, device-slab exporters, node-group ranks, the launcher): a process is gone when no process
// has its pid, when it has exited (state Z, a zombie its parent has not reaped yet, or X: it will
// never act again, though kill(pid, 0) still finds it), or, given the start time recorded while it
// ran, when the process holding the pid now started at another time (the pid was reused).
// `start_mask` names the bits of the start time the record kept (a lease owner word keeps 32).
// Where /proc cannot say (hidepid), a pid that kill(pid, 0) finds counts as alive. False for pid 0.
bool process_alive(std::uint32_t pid);
bool process_alive(std::uint32_t pid, std::uint64_t start_ticks, std::uint64_t start_mask = ~std::uint64_t{0});

struct ProcessIdentity {
  std::uint32_t pid = 0;
  std::uint64_t start_ticks = 0;  // /proc/<pid>/stat field 22: start time, clock ticks since boot
  char state = '?';               // field 3: 'R', 'S', ..., 'Z' (zombie), 'X' (dead)
};

// nullopt when the process does not exist (or /proc/<pid>/stat cannot be parsed).
std::optional<ProcessIdentity> process_identity(std::uint32_t pid);

// The running program's absolute path (/proc/self/exe); throws std::filesystem::filesystem_error
// when /proc is not mounted.
std::filesystem::path self_exe();

// This machine's host name (gethostname), or "unknown-host" if it has none; read once.
const std::string& host_name();

}  // namespace tandem
