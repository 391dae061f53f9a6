#include "tools/run/job_segments.hpp"

#include <dirent.h>

namespace tandem::run {

JobSegments JobSegments::create(const std::string& job, std::uint32_t learners, const std::vector<shm::RowGroup>& rows,
                                const std::string& run_dir) {
  auto control = shm::ControlBlock::create({.job = job,
                                            .learners = learners,
                                            .actors = static_cast<std::uint32_t>(rows.size()) - learners,
                                            .run_dir = run_dir,
                                            .groups = rows});
  return JobSegments(job, std::move(control));
}

JobSegments::~JobSegments() {
  if (job_.empty()) return;  // moved from
  owned_.clear();
  control_ = shm::ControlBlock();  // unlinks /tandem.<job>.ctl
  remove_job_segments(job_);       // and whatever the children created
}

std::vector<std::string> job_segments_in_shm(const std::string& job) {
  const std::string prefix = shm::job_segment_prefix(job);
  std::vector<std::string> names;
  if (DIR* dir = ::opendir("/dev/shm")) {
    while (dirent* entry = ::readdir(dir)) {
      std::string name = entry->d_name;
      if (name.starts_with(prefix)) names.push_back(name);
    }
    ::closedir(dir);
  }
  return names;
}

std::vector<std::string> remove_job_segments(const std::string& job) {
  std::vector<std::string> removed;
  for (const auto& name : job_segments_in_shm(job))
    if (shm::Segment::unlink(name)) removed.push_back(name);
  return removed;
}

}  // namespace tandem::run
