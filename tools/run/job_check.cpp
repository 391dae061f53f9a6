#include "tools/run/job_check.hpp"

#include "envs/env_source.hpp"
#include "shm/dataset_check.hpp"

namespace tandem::run {

void check_job_inputs(const JobSettings& s) {
  if (s.learner.rl()) {
    envs::check_env(s.env);
    return;
  }
  const shm::JobData data = shm::attach_job_data(s, s.shape.actors.value_or(0) > 0);
  (void)supervised_budget(s, data.train.name, data.train.end - data.train.begin);
}

}  // namespace tandem::run
