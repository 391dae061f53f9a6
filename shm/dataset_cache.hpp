// The dataset cache: a node-wide, read-only, columnar copy of a dataset in /tandem.data.<name>.
//
// Layout (docs/FORMAT.md, "Dataset cache"): the segment header, then at byte 64 a DatasetDescriptor
// (field table and splits), then each field as one contiguous C-order array starting at its own
// 2 MiB-aligned offset (absolute, from the start of the segment). Sample i of a field is the
// `stride` bytes at offset + i * stride.
//
// Ownership and threads: DatasetWriter belongs to the one process that preloads; until commit() the
// segment is `writing` and unlinked if the writer is destroyed, so a failed or interrupted preload
// leaves nothing. After commit() the cache is immutable: any number of processes attach read-only
// (PROT_READ; zero-copy) and any thread may read it without synchronisation. `ready`'s
// release/acquire pair (segment.hpp) is the only ordering the format relies on.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shm/dtype.hpp"
#include "shm/segment.hpp"

namespace tandem::shm {

inline constexpr std::uint32_t kDatasetLayoutVersion = 1;
inline constexpr std::size_t kMaxFields = 8;
inline constexpr std::size_t kMaxDims = 4;
inline constexpr std::size_t kMaxSplits = 4;

struct FieldDesc {
  char name[32];  // NUL-terminated, e.g. "x", "y"
  DType dtype;
  std::uint32_t ndim;             // dimensions of one sample (0 for a scalar label)
  std::uint64_t shape[kMaxDims];  // per-sample shape, unused dims 0
  std::uint64_t offset;           // of the array, from the start of the segment; 2 MiB aligned
  std::uint64_t stride;           // bytes per sample = dtype size * product(shape)
  std::uint64_t bytes;            // stride * num_samples
};
static_assert(sizeof(FieldDesc) == 96);

struct SplitDesc {
  char name[16];        // "train", "test"
  std::uint64_t begin;  // sample range [begin, end)
  std::uint64_t end;
};
static_assert(sizeof(SplitDesc) == 32);

struct DatasetDescriptor {
  char name[64];
  char source[256];  // where it was loaded from (a path), for `tandem data info`
  char format[16];   // "idx", "cifar10", "npy", "synthetic"
  std::uint64_t num_samples;
  std::uint32_t num_fields;
  std::uint32_t num_splits;
  std::uint64_t payload_checksum;  // XXH3-64 over every field's bytes, fields in table order
  std::uint64_t load_ns;           // how long the preload took
  FieldDesc fields[kMaxFields];
  SplitDesc splits[kMaxSplits];
};
static_assert(std::is_standard_layout_v<DatasetDescriptor> && std::is_trivially_copyable_v<DatasetDescriptor>);
static_assert(offsetof(DatasetDescriptor, num_samples) == 336);
static_assert(offsetof(DatasetDescriptor, fields) == 368);
static_assert(offsetof(DatasetDescriptor, splits) == 368 + 8 * 96);
static_assert(sizeof(DatasetDescriptor) == 1264 && sizeof(DatasetDescriptor) <= kDescriptorBytes);

// What a preload declares before writing.
struct FieldSpec {
  std::string name;
  DType dtype;
  std::vector<std::uint64_t> sample_shape;
};
struct SplitSpec {
  std::string name;
  std::uint64_t begin;
  std::uint64_t end;
};
struct DatasetSpec {
  std::string name;
  std::string source;
  std::string format;
  std::uint64_t num_samples = 0;
  std::vector<FieldSpec> fields;
  std::vector<SplitSpec> splits;
};

class DatasetWriter {
 public:
  // Creates the segment (replacing an existing cache of that name only when `force`).
  static DatasetWriter create(const DatasetSpec& spec, bool force);

  std::byte* field_data(std::size_t field) const;  // writable array of field `field`
  const DatasetDescriptor& descriptor() const { return segment_.descriptor_as<DatasetDescriptor>(); }
  const std::string& segment_name() const { return segment_.name(); }

  // Records the checksum (computed with `threads` threads over fixed chunks) and load time, marks
  // the segment ready and keeps it after this process exits.
  void commit(std::uint64_t load_ns, unsigned threads);

 private:
  explicit DatasetWriter(Segment s) : segment_(std::move(s)) {}
  Segment segment_;
};

class DatasetCache {
 public:
  struct Field {
    std::string_view name;
    DType dtype;
    std::span<const std::uint64_t> sample_shape;
    const std::byte* data;  // sample i at data + i * stride
    std::uint64_t stride;
  };

  // Attaches read-only; errors name the cache and the fix (`tandem data preload ...`).
  static DatasetCache attach(std::string_view name);

  const DatasetDescriptor& descriptor() const { return segment_.descriptor_as<DatasetDescriptor>(); }
  std::uint64_t num_samples() const { return descriptor().num_samples; }
  Field field(std::string_view name) const;  // UserError if absent
  bool has_field(std::string_view name) const;
  SplitSpec split(std::string_view name) const;  // UserError if absent
  const Segment& segment() const { return segment_; }

  // Recomputes the payload checksum (`tandem data verify`).
  std::uint64_t compute_checksum(unsigned threads) const;

 private:
  explicit DatasetCache(Segment s) : segment_(std::move(s)) {}
  Segment segment_;
};

// The payload checksum: XXH3-64 over the concatenation of per-chunk XXH3-64 digests, chunks being
// kChecksumChunk bytes of each field in table order. Chunking lets threads hash in parallel while
// staying a pure function of the bytes (same value for any thread count).
inline constexpr std::size_t kChecksumChunk = 4u << 20;
std::uint64_t payload_checksum(const Segment& segment, const DatasetDescriptor& d, unsigned threads);

}  // namespace tandem::shm
