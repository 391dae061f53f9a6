#include "shm/job_process.hpp"

#include <chrono>
#include <cstdio>

#include "common/log.hpp"
#include "common/program.hpp"

namespace tandem::shm {

JobProcess::JobProcess(std::string_view role_by_hand, std::chrono::milliseconds stall_limit)
    : client_(ControlClient::from_env()),
      job_(client_ ? client_->job() : "local"),
      run_dir_(client_ ? client_->run_dir() : std::string(".")) {
  if (!client_) {
    log::set_role(std::string(role_by_hand));
    return;
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  log::set_role(client_->name());
  heartbeat_.emplace(*client_, std::chrono::milliseconds(500), stall_limit);
}

bool JobProcess::stop_requested() const { return stop_signal() != 0 || (client_ && client_->should_stop()); }

}  // namespace tandem::shm
