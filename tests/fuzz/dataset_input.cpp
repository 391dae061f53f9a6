#include "tests/fuzz/dataset_input.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <vector>

#include "common/checked_math.hpp"
#include "common/error.hpp"
#include "common/file_descriptor.hpp"
#include "datasets/preload.hpp"

namespace fs = std::filesystem;

namespace tandem::fuzz {

TwoFiles split_input(const std::uint8_t* data, std::size_t size) {
  const auto* bytes = reinterpret_cast<const char*>(data);
  if (size < 2) return {{}, {bytes, size}};
  const std::size_t n = std::min<std::size_t>(data[0] | (data[1] << 8), size - 2);
  return {{bytes + 2, n}, {bytes + 2 + n, size - 2 - n}};
}

const fs::path& input_dir() {
  // Never destroyed, so the atexit handler that removes the folder can still read its name.
  static const fs::path* dir = [] {
    std::string pattern = (fs::temp_directory_path() / "tandem-fuzz-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) std::abort();
    auto* path = new fs::path(pattern);
    std::atexit([] { fs::remove_all(input_dir()); });
    return path;
  }();
  return *dir;
}

namespace {
// Empties the folder when an input is done, so the next one starts from nothing.
struct ClearInputDir {
  ~ClearInputDir() {
    for (const auto& entry : fs::directory_iterator(input_dir())) fs::remove(entry.path());
  }
};
}  // namespace

void write_file(const std::string& name, std::string_view bytes) {
  const FileDescriptor fd(::open((input_dir() / name).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (fd.get() < 0 || ::write(fd.get(), bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size())) std::abort();
}

void plan_and_load(const std::string& format, std::uint64_t max_field_bytes) {
  const ClearInputDir clear;
  data::LoadPlan plan;
  try {
    plan = data::plan_load(input_dir(), format);
  } catch (const UserError&) {
    return;
  }
  const shm::DatasetSpec& spec = plan.spec;
  for (const auto& s : spec.splits)
    if (s.begin > s.end || s.end > spec.num_samples) __builtin_trap();
  std::vector<std::vector<std::byte>> fields;
  for (const auto& f : spec.fields) {
    auto bytes = checked_product(shm::dtype_size(f.dtype), f.sample_shape);
    if (bytes) bytes = checked_mul(*bytes, spec.num_samples);
    if (!bytes || *bytes > max_field_bytes) __builtin_trap();
    fields.emplace_back(*bytes);
  }
  std::vector<std::byte*> arrays;
  for (auto& f : fields) arrays.push_back(f.data());
  data::JobSink sink{arrays, [](std::uint64_t) {}, nullptr};
  try {
    for (auto& job : plan.jobs) job.run(sink);
  } catch (const UserError&) {
    // truncated or corrupt data found while reading: the real preload removes its segment
  }
}

}  // namespace tandem::fuzz
