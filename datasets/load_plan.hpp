// A load plan is what a reader produces from the input files BEFORE any shared memory exists: the
// dataset's shape (a DatasetSpec, validated against the files' sizes) and a list of independent
// jobs that fill the cache's field arrays. Preloading then creates the segment and runs the jobs on
// a pool of threads; a reader's jobs write disjoint byte ranges, so they need no locks.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "shm/dataset_cache.hpp"

namespace tandem::data {

// What a running job sees. Called from the job's worker thread.
struct JobSink {
  std::vector<std::byte*> fields;                     // writable array of each field, table order
  std::function<void(std::uint64_t bytes)> progress;  // thread-safe; bytes written since last call
  const std::atomic<bool>* stop = nullptr;            // another job failed: return early

  bool stopped() const { return stop != nullptr && stop->load(std::memory_order_relaxed); }
};

struct LoadJob {
  std::string what;         // "train-images-idx3-ubyte.gz", for messages
  std::uint64_t bytes = 0;  // bytes it writes (the progress total)
  std::function<void(JobSink&)> run;
};

struct LoadPlan {
  shm::DatasetSpec spec;  // name, force and timing are filled in by preload()
  std::vector<LoadJob> jobs;
};

// Integer label widening shared by the readers: `count` values of `from` into int64.
void widen_to_i64(shm::DType from, const std::byte* in, std::int64_t* out, std::size_t count);
bool is_integer(shm::DType dtype);

}  // namespace tandem::data
