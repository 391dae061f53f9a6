// tandem.Dataset's C++ side: one attachment of a dataset cache (shm/dataset_cache.hpp), shared by the
// Python object, every field tensor handed out and every feed built over it, so the cache stays mapped
// while any of them lives.
//
// Field tensors view a second mapping of the same /dev/shm object, made MAP_PRIVATE (copy-on-write):
// reading is zero-copy from the pages every process shares, and an in-place write from Python lands
// in a private copy of the touched pages of this process, never in /dev/shm, so a Python bug can
// neither corrupt the cache other processes read nor crash on a read-only page.
//
// Threads: built and closed with the GIL held; the mappings are read by any thread (feed workers).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "shm/dataset_cache.hpp"

namespace tandem::python {

class DatasetAttachment {
 public:
  explicit DatasetAttachment(const std::string& name);
  ~DatasetAttachment();
  DatasetAttachment(const DatasetAttachment&) = delete;
  DatasetAttachment& operator=(const DatasetAttachment&) = delete;

  const std::string& name() const { return name_; }
  const shm::DatasetCache& cache() const { return cache_; }
  // The copy-on-write mapping: same offsets as the segment's own.
  const std::byte* private_base() const { return private_base_; }

 private:
  std::string name_;
  shm::DatasetCache cache_;
  std::byte* private_base_ = nullptr;
  std::size_t bytes_ = 0;
};

// What _tandem.Dataset binds; the feeds take one to read from.
class PyDataset {
 public:
  explicit PyDataset(const std::string& cache) : name(cache), attachment_(std::make_shared<DatasetAttachment>(cache)) {}
  // The attachment, or a UserError once close() was called.
  const std::shared_ptr<DatasetAttachment>& attachment() const;
  void close() { attachment_.reset(); }  // tensors and feeds made from it keep their own reference
  bool closed() const { return !attachment_; }
  std::string name;  // kept after close() for messages

 private:
  std::shared_ptr<DatasetAttachment> attachment_;
};

}  // namespace tandem::python
