// The job's shared-memory segments, owned by the launcher for the job's whole life.
//
// The launcher creates the control block before it starts any process. Other segments of the job
// (the weight slab, which learner rank 0 creates; experience rings) may be made by children; whoever
// creates them, they are named /tandem.<job>.<kind>, and destroying JobSegments removes every one of
// them: the control block through its handle, the rest by a sweep of /dev/shm for the job's prefix.
// The launcher destroys it only after every child is reaped (a live learner could otherwise recreate
// a segment after the sweep), on every exit path, exceptions included. Only a SIGKILLed launcher
// leaves segments behind; `tandem shm gc` removes them (their creator is gone).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "shm/control_block.hpp"

namespace tandem::run {

class JobSegments {
 public:
  // `rows`: each control-block row's program group, the `learners` ranks first.
  static JobSegments create(const std::string& job, std::uint32_t learners, const std::vector<shm::RowGroup>& rows,
                            const std::string& run_dir);
  JobSegments(JobSegments&& other) noexcept
      : job_(std::exchange(other.job_, {})), control_(std::move(other.control_)), owned_(std::move(other.owned_)) {}
  JobSegments& operator=(JobSegments&&) = delete;
  JobSegments(const JobSegments&) = delete;
  ~JobSegments();

  const shm::ControlBlock& control() const { return control_; }

 private:
  JobSegments(std::string job, shm::ControlBlock control) : job_(std::move(job)), control_(std::move(control)) {}
  std::string job_;
  shm::ControlBlock control_;
  // Segments the launcher itself creates for the job go here, after the control block: e.g. the
  // weight slab, should the launcher rather than learner rank 0 own it (created in create(), sized
  // from the config). Each is an unpersisted shm::Segment, removed with this object.
  std::vector<shm::Segment> owned_;
};

// Names (without the leading slash) of every segment in /dev/shm that belongs to `job`.
std::vector<std::string> job_segments_in_shm(const std::string& job);
// Removes them; returns the names it removed.
std::vector<std::string> remove_job_segments(const std::string& job);

}  // namespace tandem::run
