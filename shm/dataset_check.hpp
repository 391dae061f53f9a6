// What a supervised job's programs require of its dataset cache, checked by one function that the
// launcher calls before it starts anything and the learner and the evaluators call at start: the
// cache data.name exists; x holds uint8 images (C,H,W or H,W) and y one int64 label per sample; the
// splits data.train_split and data.test_split lie within the cache and hold samples; every label of
// them is a class of the model (a label outside makes LibTorch's loss abort in the learner, or the
// evaluators crash on every try); data.mean and data.std give one value or one per channel; and
// actor.batch_size fits the test split. The training length is common/settings/job.hpp's
// supervised_budget(), from train's size.
//
// Threads: any; it reads the mapped cache and writes nothing.
#pragma once

#include "common/settings/job.hpp"
#include "shm/dataset_cache.hpp"

namespace tandem::shm {

struct JobData {
  DatasetCache cache;
  SplitSpec train;
  SplitSpec test;  // cut to actor.max_samples; empty unless evaluated
};

// evaluated: the test split's rules too (the evaluators', which the launcher checks when the job has
// actors). UserError naming the key and the fix on the first problem.
JobData attach_job_data(const JobSettings& settings, bool evaluated);

}  // namespace tandem::shm
