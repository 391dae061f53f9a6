#include "datasets/cifar_reader.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/error.hpp"
#include "datasets/input_file.hpp"

namespace fs = std::filesystem;

namespace tandem::data {
namespace {

constexpr std::size_t kRecordsPerRead = 1024;

fs::path batches_dir(const fs::path& dir) {
  fs::path inner = dir / "cifar-10-batches-bin";  // what the official tarball unpacks to
  return fs::is_directory(inner) ? inner : dir;
}

// Copies records [0, count) of one batch file into samples [first, first + count).
LoadJob batch_job(const fs::path& path, std::uint64_t count, std::uint64_t first) {
  return {path.filename().string(), count * (kCifarImageBytes + 8), [path, count, first](JobSink& sink) {
            File file(path);
            std::vector<unsigned char> buf(std::min<std::uint64_t>(kRecordsPerRead, count) * kCifarRecordBytes);
            std::byte* x = sink.fields[0] + first * kCifarImageBytes;
            auto* y = reinterpret_cast<std::int64_t*>(sink.fields[1]) + first;
            for (std::uint64_t r = 0; r < count && !sink.stopped();) {
              std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(kRecordsPerRead, count - r));
              file.read_at(r * kCifarRecordBytes, buf.data(), n * kCifarRecordBytes);
              for (std::size_t i = 0; i < n; ++i, ++r) {
                const unsigned char* rec = buf.data() + i * kCifarRecordBytes;
                if (rec[0] > 9)
                  fail("{} record {} has label {}: CIFAR-10 labels are 0-9 (is this CIFAR-100? convert it to .npy)",
                       path.string(), r, rec[0]);
                y[r] = rec[0];
                std::memcpy(x + r * kCifarImageBytes, rec + 1, kCifarImageBytes);
              }
              sink.progress(n * (kCifarImageBytes + 8));
            }
          }};
}

}  // namespace

bool looks_like_cifar10(const fs::path& dir) {
  fs::path d = batches_dir(dir);
  return fs::is_regular_file(d / "data_batch_1.bin") || fs::is_regular_file(d / "test_batch.bin");
}

LoadPlan plan_cifar10(const fs::path& dir) {
  const fs::path d = batches_dir(dir);
  std::vector<fs::path> train;
  for (int i = 1; fs::is_regular_file(d / fmt::format("data_batch_{}.bin", i)); ++i)
    train.push_back(d / fmt::format("data_batch_{}.bin", i));
  if (train.empty())
    fail("{} has no data_batch_1.bin: point --from at the CIFAR-10 binary version's folder", d.string());
  const fs::path test = d / "test_batch.bin";

  LoadPlan plan;
  plan.spec.source = d.string();
  plan.spec.format = "cifar10";
  auto add = [&](const fs::path& path) {
    const std::uint64_t bytes = File(path).size();
    if (bytes == 0 || bytes % kCifarRecordBytes != 0)
      fail(
          "{} is {} bytes, not a whole number of {}-byte CIFAR-10 records (1 label + 3072 pixels): the "
          "file is truncated or not CIFAR-10 binary",
          path.string(), bytes, kCifarRecordBytes);
    const std::uint64_t count = bytes / kCifarRecordBytes;
    plan.jobs.push_back(batch_job(path, count, plan.spec.num_samples));
    plan.spec.num_samples += count;
  };
  for (const auto& p : train) add(p);
  plan.spec.splits.push_back({"train", 0, plan.spec.num_samples});
  if (fs::is_regular_file(test)) {
    const std::uint64_t begin = plan.spec.num_samples;
    add(test);
    plan.spec.splits.push_back({"test", begin, plan.spec.num_samples});
  }
  plan.spec.fields = {{"x", shm::DType::u8, {3, 32, 32}}, {"y", shm::DType::i64, {}}};
  return plan;
}

}  // namespace tandem::data
