#include "shm/dataset_cache.hpp"

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <thread>

#include "common/checked_math.hpp"
#include "common/error.hpp"

namespace tandem::shm {

namespace {

template <std::size_t N>
void copy_name(char (&dst)[N], std::string_view src, std::string_view what) {
  if (src.size() >= N) fail("{} '{}' is longer than {} characters", what, src, N - 1);
  std::memset(dst, 0, N);
  std::memcpy(dst, src.data(), src.size());
}

std::string_view name_of(const char* field, std::size_t n) { return {field, strnlen(field, n)}; }

std::string preload_fix(std::string_view name) {
  return fmt::format("run `tandem data preload {} --from PATH --force` (or `tandem data rm {}`)", name, name);
}

}  // namespace

DatasetWriter DatasetWriter::create(const DatasetSpec& spec, bool force) {
  const std::string seg_name = dataset_segment_name(spec.name);
  if (spec.fields.empty() || spec.fields.size() > kMaxFields)
    fail("dataset '{}' has {} fields: a cache holds 1 to {}", spec.name, spec.fields.size(), kMaxFields);
  if (spec.splits.size() > kMaxSplits)
    fail("dataset '{}' has {} splits: a cache holds at most {}", spec.name, spec.splits.size(), kMaxSplits);

  DatasetDescriptor d{};
  copy_name(d.name, spec.name, "dataset name");
  copy_name(d.source, spec.source.substr(0, sizeof d.source - 1), "source");
  copy_name(d.format, spec.format, "format");
  d.num_samples = spec.num_samples;
  d.num_fields = static_cast<std::uint32_t>(spec.fields.size());
  d.num_splits = static_cast<std::uint32_t>(spec.splits.size());

  // Sizes from a file header: every product and sum is checked, so a header whose sizes wrap is
  // refused here instead of producing a cache smaller than its descriptor says.
  auto too_big = [&](std::string_view field) -> std::uint64_t {
    fail(
        "dataset '{}': field '{}' of {} samples does not fit in 64-bit byte counts: the input's header is "
        "corrupt",
        spec.name, field, spec.num_samples);
  };
  std::uint64_t offset = align_up(kHeaderBytes, kPayloadAlignment);
  for (std::size_t i = 0; i < spec.fields.size(); ++i) {
    const FieldSpec& f = spec.fields[i];
    FieldDesc& fd = d.fields[i];
    if (f.sample_shape.size() > kMaxDims)
      fail("field '{}' has {} dimensions: at most {}", f.name, f.sample_shape.size(), kMaxDims);
    if (dtype_size(f.dtype) == 0)
      fail("field '{}' has an unknown dtype code {}", f.name, static_cast<std::uint32_t>(f.dtype));
    copy_name(fd.name, f.name, "field name");
    fd.dtype = f.dtype;
    fd.ndim = static_cast<std::uint32_t>(f.sample_shape.size());
    std::copy(f.sample_shape.begin(), f.sample_shape.end(), fd.shape);
    const auto stride = checked_product(dtype_size(f.dtype), f.sample_shape);
    fd.stride = stride ? *stride : too_big(f.name);
    if (fd.stride == 0)
      fail("dataset '{}': field '{}' has a zero dimension: the input's header is corrupt", spec.name, f.name);
    fd.offset = offset;
    fd.bytes = checked_mul(fd.stride, spec.num_samples).value_or(~0ull);
    const auto end = checked_add(offset, fd.bytes);
    if (!end || *end > ~0ull - kPayloadAlignment) too_big(f.name);
    offset = align_up(*end, kPayloadAlignment);
  }
  for (std::size_t i = 0; i < spec.splits.size(); ++i) {
    const SplitSpec& s = spec.splits[i];
    if (s.begin > s.end || s.end > spec.num_samples)
      fail("split '{}' [{}, {}) does not fit in {} samples", s.name, s.begin, s.end, spec.num_samples);
    copy_name(d.splits[i].name, s.name, "split name");
    d.splits[i].begin = s.begin;
    d.splits[i].end = s.end;
  }

  const std::uint64_t payload_bytes = offset - align_up(kHeaderBytes, kPayloadAlignment);
  if (force && Segment::remove(seg_name).result == Segment::Removal::denied)
    fail(ErrorKind::segment_exists, "dataset cache '{}' cannot be replaced ({}): choose another name", spec.name,
         Segment::foreign_owner(seg_name).empty() ? "permission denied" : Segment::foreign_owner(seg_name));
  Segment seg = Segment::create(
      seg_name, Kind::dataset, kDatasetLayoutVersion, payload_bytes,
      fmt::format("dataset '{}' is already preloaded: pass --force to replace it", spec.name));
  seg.descriptor_as<DatasetDescriptor>() = d;
  return DatasetWriter(std::move(seg));
}

std::byte* DatasetWriter::field_data(std::size_t field) const {
  return segment_.base() + descriptor().fields[field].offset;
}

void DatasetWriter::commit(std::uint64_t load_ns, unsigned threads) {
  auto& d = segment_.descriptor_as<DatasetDescriptor>();
  d.payload_checksum = payload_checksum(segment_, d, threads);
  d.load_ns = load_ns;
  segment_.mark_ready();
  segment_.persist();
}

namespace {

// Everything a reader indexes with, checked against the real mapping before anything uses it: a
// descriptor's sizes come from shared memory that any process of this uid can write.
// A name from the descriptor, fit for a one-line message whatever bytes it holds.
std::string printable(const char* field, std::size_t n) {
  std::string out(name_of(field, n));
  for (char& c : out)
    if (!std::isprint(static_cast<unsigned char>(c))) c = '?';
  return out;
}

std::string check_descriptor(const DatasetDescriptor& d, const Segment& seg) {
  if (d.num_fields < 1 || d.num_fields > kMaxFields)
    return fmt::format("{} fields (a cache holds 1 to {})", d.num_fields, kMaxFields);
  if (d.num_splits > kMaxSplits) return fmt::format("{} splits (a cache holds at most {})", d.num_splits, kMaxSplits);
  for (std::uint32_t i = 0; i < d.num_fields; ++i) {
    const FieldDesc& f = d.fields[i];
    const std::string name = printable(f.name, sizeof f.name);
    if (dtype_size(f.dtype) == 0)
      return fmt::format("field '{}' has an unknown dtype code {}", name, static_cast<std::uint32_t>(f.dtype));
    if (f.ndim > kMaxDims) return fmt::format("field '{}' has {} dimensions (at most {})", name, f.ndim, kMaxDims);
    const std::span<const std::uint64_t> shape(f.shape, f.ndim);
    if (std::ranges::find(shape, 0u) != shape.end()) return fmt::format("field '{}' has a zero dimension", name);
    const auto stride = checked_product(dtype_size(f.dtype), shape);
    if (!stride || *stride != f.stride)
      return fmt::format("field '{}' has stride {}, not its dtype size times its shape", name, f.stride);
    const auto bytes = checked_mul(f.stride, d.num_samples);
    if (!bytes || *bytes != f.bytes)
      return fmt::format("field '{}' has {} bytes, not stride {} x {} samples", name, f.bytes, f.stride, d.num_samples);
    const auto end = checked_add(f.offset, f.bytes);
    if (f.offset < seg.header().payload_offset || f.offset % kPayloadAlignment != 0 || !end || *end > seg.size())
      return fmt::format("field '{}' at [{}, +{}) lies outside the {}-byte segment's payload (or is not 2 MiB aligned)",
                         name, f.offset, f.bytes, seg.size());
  }
  for (std::uint32_t i = 0; i < d.num_splits; ++i) {
    const SplitDesc& s = d.splits[i];
    if (s.begin > s.end || s.end > d.num_samples)
      return fmt::format("split '{}' [{}, {}) is not a range within its {} samples", printable(s.name, sizeof s.name),
                         s.begin, s.end, d.num_samples);
  }
  return "";
}

}  // namespace

DatasetCache DatasetCache::attach(std::string_view name) {
  const std::string seg_name = dataset_segment_name(name);
  std::string fix = Segment::exists(seg_name) ? preload_fix(name)
                                              : fmt::format("run `tandem data preload {} --from PATH`", name);
  Segment seg = Segment::attach(seg_name, Kind::dataset, kDatasetLayoutVersion, Segment::Access::read_only, fix);
  if (std::string problem = check_descriptor(seg.descriptor_as<DatasetDescriptor>(), seg); !problem.empty())
    fail(ErrorKind::corrupt_segment, "dataset cache '{}' is invalid: {}: {}", name, problem, preload_fix(name));
  return DatasetCache(std::move(seg));
}

bool DatasetCache::has_field(std::string_view name) const {
  const auto& d = descriptor();
  for (std::uint32_t i = 0; i < d.num_fields; ++i)
    if (name_of(d.fields[i].name, sizeof d.fields[i].name) == name) return true;
  return false;
}

DatasetCache::Field DatasetCache::field(std::string_view name) const {
  const auto& d = descriptor();
  for (std::uint32_t i = 0; i < d.num_fields; ++i) {
    const FieldDesc& f = d.fields[i];
    if (name_of(f.name, sizeof f.name) != name) continue;
    return Field{name_of(f.name, sizeof f.name), f.dtype, std::span<const std::uint64_t>(f.shape, f.ndim),
                 segment_.base() + f.offset, f.stride};
  }
  fail("dataset cache '{}' has no field '{}'", name_of(d.name, sizeof d.name), name);
}

SplitSpec DatasetCache::split(std::string_view name) const {
  const auto& d = descriptor();
  std::string known;
  for (std::uint32_t i = 0; i < d.num_splits; ++i) {
    auto split_name = name_of(d.splits[i].name, sizeof d.splits[i].name);
    if (split_name == name) return {std::string(split_name), d.splits[i].begin, d.splits[i].end};
    known += (known.empty() ? "" : ", ") + std::string(split_name);
  }
  fail("dataset cache '{}' has no split '{}' (it has: {})", name_of(d.name, sizeof d.name), name, known);
}

std::uint64_t DatasetCache::compute_checksum(unsigned threads) const {
  return payload_checksum(segment_, descriptor(), threads);
}

std::uint64_t payload_checksum(const Segment& segment, const DatasetDescriptor& d, unsigned threads) {
  struct Chunk {
    const std::byte* data;
    std::size_t bytes;
  };
  std::vector<Chunk> chunks;
  for (std::uint32_t i = 0; i < d.num_fields; ++i) {
    const std::byte* base = segment.base() + d.fields[i].offset;
    for (std::uint64_t at = 0; at < d.fields[i].bytes; at += kChecksumChunk)
      chunks.push_back(
          {base + at, static_cast<std::size_t>(std::min<std::uint64_t>(kChecksumChunk, d.fields[i].bytes - at))});
  }
  std::vector<XXH64_hash_t> digests(chunks.size());
  threads = std::max(1u, std::min<unsigned>(threads, static_cast<unsigned>(chunks.size())));
  std::vector<std::jthread> pool;
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (std::size_t c = t; c < chunks.size(); c += threads)
        digests[c] = XXH3_64bits(chunks[c].data, chunks[c].bytes);
    });
  pool.clear();  // joins
  return XXH3_64bits(digests.data(), digests.size() * sizeof(XXH64_hash_t));
}

}  // namespace tandem::shm
