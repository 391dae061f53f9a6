// What `tandem run` checks of the programs' settings before it creates a run directory or spawns
// anything, so that a job whose learner or actors could only fail at start is one line naming the
// key instead of a run dir, a crash loop and a LibTorch backtrace. Every rule is the programs' own,
// called here with the job's shape: the tables and the rules between them (JobSettings::parse, in
// JobConfig::load), the dataset cache of a supervised job (shm/dataset_check.hpp) and its length
// (supervised_budget), the env of an RL job (envs/env_source.hpp).
//
// Threads: main's, before anything starts. Attaches the cache read-only and detaches it again: it
// creates nothing in /dev/shm.
#pragma once

#include "common/settings/job.hpp"

namespace tandem::run {

// Throws a UserError naming the key and the fix on the first problem found.
void check_job_inputs(const JobSettings& settings);

}  // namespace tandem::run
