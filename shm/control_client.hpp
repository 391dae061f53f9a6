// ControlClient: a process's own side of the control block (control_block_format.hpp). A learner or
// actor started by `tandem run` attaches to its row, beats its heartbeat, reports its state, the
// weight version it runs and a metrics record, sees the launcher's stop request, and (learners) meets
// the other ranks through the NCCL id. It writes only the fields the format gives to the process.
//
// Threads: every method may be called from any thread of the process. report() serialises its
// callers with a process-local mutex, so the metrics seqlock keeps its single writer. The process's
// other policies (stdout buffering, a heartbeat thread: heartbeat_thread.hpp) belong to its main().
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "shm/control_block.hpp"

namespace tandem::shm {

// A process started by `tandem run` finds its job, role and index in the environment
// (TANDEM_JOB, TANDEM_ROLE = learner|actor, TANDEM_INDEX) and attaches to its own row.
class ControlClient {
 public:
  // nullopt when TANDEM_JOB is unset (the program runs on its own, e.g. under torchrun or by hand);
  // a UserError naming the variable when the variables are malformed or the block is missing.
  static std::optional<ControlClient> from_env();
  static ControlClient attach(std::string_view job, Role role, std::uint32_t index);

  ControlClient(ControlClient&& other) noexcept;
  ControlClient& operator=(ControlClient&&) = delete;
  ~ControlClient() = default;

  Role role() const { return role_; }
  std::uint32_t index() const { return index_; }
  std::string name() const;  // "learner.0"
  std::string job() const { return block_.job(); }
  std::string run_dir() const { return block_.descriptor().run_dir; }
  std::uint32_t restarts() const;  // how many times the launcher respawned this row
  const ControlBlock& block() const { return block_; }

  void heartbeat() const;                    // any thread; call at least every heartbeat timeout
  void set_state(ProcessState state) const;  // running or stopping
  void saw_version(std::uint64_t version) const;
  void report(ProcessMetrics metrics);  // sets updated_ns; any thread (serialised)
  bool should_stop() const;             // the launcher's stop request

  // Single-node NCCL rendezvous: rank 0 publishes its ncclUniqueId once; the others wait for it.
  void publish_nccl_id(std::span<const std::byte> id) const;
  // nullopt when the timeout passes or a stop is requested first.
  std::optional<std::array<std::byte, kNcclIdBytes>> wait_nccl_id(std::chrono::milliseconds timeout) const;

 private:
  ControlClient(ControlBlock block, Role role, std::uint32_t index, std::uint32_t row);
  ControlBlock block_;
  Role role_;
  std::uint32_t index_;
  std::uint32_t row_;
  std::mutex report_mutex_;
};

}  // namespace tandem::shm
