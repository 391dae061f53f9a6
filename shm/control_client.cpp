#include "shm/control_client.hpp"

#include <unistd.h>

#include <fmt/format.h>

#include <charconv>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "common/clock.hpp"
#include "common/error.hpp"

namespace tandem::shm {

namespace {
std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}
}  // namespace

std::optional<ControlClient> ControlClient::from_env() {
  const std::string job = env_or_empty("TANDEM_JOB");
  if (job.empty()) return std::nullopt;
  const std::string role_text = env_or_empty("TANDEM_ROLE");
  auto role = parse_role(role_text);
  if (!role) fail("TANDEM_ROLE='{}' is not a role: it must be learner or actor (set by `tandem run`)", role_text);
  const std::string index_text = env_or_empty("TANDEM_INDEX");
  std::uint32_t index = 0;
  auto [end, ec] = std::from_chars(index_text.data(), index_text.data() + index_text.size(), index);
  if (index_text.empty() || ec != std::errc{} || end != index_text.data() + index_text.size())
    fail("TANDEM_INDEX='{}' is not a process index: it must be a number (set by `tandem run`)", index_text);
  return attach(job, *role, index);
}

ControlClient ControlClient::attach(std::string_view job, Role role, std::uint32_t index) {
  ControlBlock block = ControlBlock::attach(job, Segment::Access::read_write);
  const std::uint32_t row = block.row_of(role, index);
  return ControlClient(std::move(block), role, index, row);
}

ControlClient::ControlClient(ControlBlock block, Role role, std::uint32_t index, std::uint32_t row)
    : block_(std::move(block)), role_(role), index_(index), row_(row) {
  ProcessRow& r = block_.row(row_);
  r.pid.store(static_cast<std::int32_t>(::getpid()), std::memory_order_relaxed);
  heartbeat();
}

ControlClient::ControlClient(ControlClient&& other) noexcept
    : block_(std::move(other.block_)), role_(other.role_), index_(other.index_), row_(other.row_) {}

std::string ControlClient::name() const { return fmt::format("{}.{}", role_name(role_), index_); }

std::uint32_t ControlClient::restarts() const { return block_.row(row_).restarts.load(std::memory_order_relaxed); }

void ControlClient::heartbeat() const {
  block_.row(row_).heartbeat_ns.store(monotonic_ns(), std::memory_order_relaxed);
}

void ControlClient::set_state(ProcessState state) const {
  if (state != ProcessState::running && state != ProcessState::stopping)
    throw std::logic_error("a process may only set its state to running or stopping");
  block_.set_state(row_, state);
}

void ControlClient::saw_version(std::uint64_t version) const {
  block_.row(row_).version_seen.store(version, std::memory_order_relaxed);
}

void ControlClient::report(ProcessMetrics metrics) {
  metrics.updated_ns = monotonic_ns();
  std::lock_guard lock(report_mutex_);  // the seqlock has one writer
  block_.write_metrics(row_, metrics);
}

bool ControlClient::should_stop() const { return block_.stop_requested(); }

void ControlClient::publish_nccl_id(std::span<const std::byte> id) const {
  if (id.size() > kNcclIdBytes) throw std::logic_error("an NCCL unique id is at most 128 bytes");
  JobControl& job = block_.job_control();
  auto expected = static_cast<std::uint32_t>(NcclIdState::empty);
  if (!job.nccl_id_state.compare_exchange_strong(expected, static_cast<std::uint32_t>(NcclIdState::writing),
                                                 std::memory_order_relaxed))
    throw std::logic_error("the NCCL unique id of this job was already published");
  std::memset(job.nccl_id, 0, kNcclIdBytes);
  std::memcpy(job.nccl_id, id.data(), id.size());
  job.nccl_id_state.store(static_cast<std::uint32_t>(NcclIdState::published), std::memory_order_release);
}

std::optional<std::array<std::byte, kNcclIdBytes>> ControlClient::wait_nccl_id(
    std::chrono::milliseconds timeout) const {
  const JobControl& job = block_.job_control();
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    if (job.nccl_id_state.load(std::memory_order_acquire) == static_cast<std::uint32_t>(NcclIdState::published)) {
      std::array<std::byte, kNcclIdBytes> id;
      std::memcpy(id.data(), job.nccl_id, kNcclIdBytes);
      return id;
    }
    if (should_stop() || std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    heartbeat();  // waiting for rank 0 is not hanging
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace tandem::shm
