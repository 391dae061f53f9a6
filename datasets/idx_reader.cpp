#include "datasets/idx_reader.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>
#include <optional>
#include <span>
#include <vector>

#include "common/checked_math.hpp"
#include "common/error.hpp"
#include "datasets/input_file.hpp"

namespace fs = std::filesystem;

namespace tandem::data {
namespace {

constexpr std::size_t kPiece = 4u << 20;  // bytes per read, and per progress report

std::optional<fs::path> find_file(const fs::path& dir, const std::string& split, const std::string& kind, int ndim) {
  for (const char* sep : {"-", "."})
    for (const char* ext : {"", ".gz"}) {
      fs::path p = dir / fmt::format("{}-{}{}idx{}-ubyte{}", split, kind, sep, ndim, ext);
      if (fs::is_regular_file(p)) return p;
    }
  return std::nullopt;
}

struct IdxFile {
  fs::path path;
  std::vector<std::uint64_t> dims;  // dims[0] is the count
  std::uint64_t header_bytes = 0;
  std::uint64_t sample_bytes = 0;  // product of dims[1:]
  std::uint64_t data_bytes = 0;    // count * sample_bytes, checked against the file
};

std::uint32_t big_endian(const unsigned char* b) {
  return (static_cast<std::uint32_t>(b[0]) << 24) | (b[1] << 16) | (b[2] << 8) | b[3];
}

// Reads the header and proves that the file holds exactly the bytes it promises: a plain file by
// its size; a gzip file first by deflate's maximum ratio (no inflating for an absurd claim), then
// by inflating it to the end, so that no header or forged trailer can make a preload reserve shared
// memory for data that is not there.
IdxFile open_idx(const fs::path& path, std::uint32_t ndim) {
  IdxFile f{path, {}, 4 + 4 * ndim, 1, 0};
  GzReader reader(path);
  unsigned char magic[4];
  reader.read(magic, 4);
  const std::uint32_t want = 0x00000800u | ndim;
  if (magic[0] != 0 || magic[1] != 0 || magic[3] != ndim)
    fail(
        "{} is not an IDX file with {} dimensions (magic 0x{:08x}, expected 0x{:08x}): pass the "
        "original train-/t10k- files",
        path.string(), ndim, big_endian(magic), want);
  if (magic[2] != 0x08)
    fail("{} holds IDX type 0x{:02x}; only unsigned bytes (0x08) are read: convert it to .npy and use --format npy",
         path.string(), magic[2]);
  for (std::uint32_t i = 0; i < ndim; ++i) {
    unsigned char b[4];
    reader.read(b, 4);
    f.dims.push_back(big_endian(b));
  }
  if (f.dims[0] == 0) fail("{} holds no samples (count 0)", path.string());
  for (std::uint32_t i = 1; i < ndim; ++i)
    if (f.dims[i] == 0)
      fail("{} has a 0 in its IDX header's dimensions ({}): images need rows and columns", path.string(),
           fmt::join(f.dims, "x"));
  // Two u32 factors never overflow; a third can, and a wrapped product must not match a small file.
  f.sample_bytes = *checked_product(1, std::span(f.dims).subspan(1));
  const std::optional<std::uint64_t> data_bytes = checked_mul(f.dims[0], f.sample_bytes);
  const std::optional<std::uint64_t> file_bytes = checked_add(f.header_bytes, data_bytes.value_or(~0ull));
  if (!data_bytes || !file_bytes)
    fail(
        "{} has an IDX header ({}) whose size does not fit in 64 bits: the file is corrupt or forged "
        "(re-download it)",
        path.string(), fmt::join(f.dims, "x"));
  f.data_bytes = *data_bytes;
  const std::uint64_t total = *file_bytes;
  File file(path);
  if (is_gzip(file)) {
    if (total > max_gunzip_bytes(file.size()))
      fail(
          "{} is {} bytes of gzip, which cannot inflate to the {} bytes its IDX header ({}) claims: the file is "
          "corrupt or forged (re-download it)",
          path.string(), file.size(), total, fmt::join(f.dims, "x"));
    reader.skip_to_exact_end(f.data_bytes);
  } else if (file.size() != total) {
    fail("{} is {} bytes but its IDX header ({}) needs {}: the file is truncated or not IDX", path.string(),
         file.size(), fmt::join(f.dims, "x"), total);
  }
  return f;
}

// Decompresses the image bytes straight into field x.
LoadJob images_job(const IdxFile& f, std::uint64_t first_sample) {
  const std::uint64_t at = first_sample * f.sample_bytes;  // within the field plan_idx sized
  return {f.path.filename().string(), f.data_bytes, [f, at](JobSink& sink) {
            GzReader reader(f.path);
            std::vector<unsigned char> header(f.header_bytes);
            reader.read(header.data(), header.size());
            std::byte* dst = sink.fields[0] + at;
            for (std::uint64_t done = 0; done < f.data_bytes && !sink.stopped();) {
              std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(kPiece, f.data_bytes - done));
              reader.read(dst + done, n);
              done += n;
              sink.progress(n);
            }
          }};
}

// Labels are one byte each in IDX and int64 in the cache.
LoadJob labels_job(const IdxFile& f, std::uint64_t first_sample) {
  const std::uint64_t count = f.dims[0];
  return {f.path.filename().string(), count * 8, [f, count, first_sample](JobSink& sink) {
            GzReader reader(f.path);
            std::vector<std::byte> bytes(f.header_bytes + count);
            reader.read(bytes.data(), bytes.size());
            auto* y = reinterpret_cast<std::int64_t*>(sink.fields[1]) + first_sample;
            widen_to_i64(shm::DType::u8, bytes.data() + f.header_bytes, y, count);
            sink.progress(count * 8);
          }};
}

}  // namespace

bool looks_like_idx(const fs::path& dir) { return find_file(dir, "train", "images", 3).has_value(); }

LoadPlan plan_idx(const fs::path& dir) {
  LoadPlan plan;
  plan.spec.source = dir.string();
  plan.spec.format = "idx";
  std::optional<std::array<std::uint64_t, 2>> image_hw;
  for (const char* split : {"train", "t10k"}) {
    auto images = find_file(dir, split, "images", 3);
    auto labels = find_file(dir, split, "labels", 1);
    if (!images && !labels) {
      if (std::string(split) == "t10k") continue;  // the test split is optional
      fail(
          "{} has no train-images-idx3-ubyte[.gz] / train-labels-idx1-ubyte[.gz]: point --from at the "
          "folder holding the IDX files",
          dir.string());
    }
    if (!images || !labels)
      fail("{} has {}-{} but no {}-{}-idx{}-ubyte[.gz]: IDX splits need both images and labels", dir.string(), split,
           images ? "images" : "labels", split, images ? "labels" : "images", images ? 1 : 3);
    IdxFile x = open_idx(*images, 3);
    IdxFile y = open_idx(*labels, 1);
    if (x.dims[0] != y.dims[0])
      fail("{} holds {} images but {} holds {} labels: the counts must match", images->string(), x.dims[0],
           labels->string(), y.dims[0]);
    std::array<std::uint64_t, 2> hw{x.dims[1], x.dims[2]};
    if (image_hw && *image_hw != hw)
      fail("{} has {}x{} images, the train split {}x{}: splits must agree", images->string(), hw[0], hw[1],
           (*image_hw)[0], (*image_hw)[1]);
    image_hw = hw;

    const std::uint64_t begin = plan.spec.num_samples;
    plan.spec.num_samples += x.dims[0];
    plan.spec.splits.push_back({std::string(split) == "train" ? "train" : "test", begin, plan.spec.num_samples});
    plan.jobs.push_back(images_job(x, begin));
    plan.jobs.push_back(labels_job(y, begin));
  }
  plan.spec.fields = {{"x", shm::DType::u8, {1, (*image_hw)[0], (*image_hw)[1]}}, {"y", shm::DType::i64, {}}};
  return plan;
}

}  // namespace tandem::data
