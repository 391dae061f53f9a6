#include "shm/control_block_format.hpp"

namespace tandem::shm {

std::string_view role_name(Role role) {
  switch (role) {
    case Role::learner: return "learner";
    case Role::actor: return "actor";
  }
  return "unknown";
}

std::optional<Role> parse_role(std::string_view name) {
  if (name == "learner") return Role::learner;
  if (name == "actor") return Role::actor;
  return std::nullopt;
}

std::string_view state_name(ProcessState state) {
  switch (state) {
    case ProcessState::empty: return "empty";
    case ProcessState::starting: return "starting";
    case ProcessState::running: return "running";
    case ProcessState::stopping: return "stopping";
    case ProcessState::exited: return "exited";
    case ProcessState::failed: return "failed";
    case ProcessState::waiting: return "waiting";
  }
  return "unknown";
}

std::string_view stop_reason_name(StopReason reason) {
  switch (reason) {
    case StopReason::none: return "none";
    case StopReason::finished: return "finished";
    case StopReason::interrupted: return "interrupted";
    case StopReason::failure: return "failure";
  }
  return "unknown";
}

}  // namespace tandem::shm
