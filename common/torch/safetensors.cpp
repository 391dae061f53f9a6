#include "common/torch/safetensors.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/error.hpp"
#include "common/file_descriptor.hpp"

namespace tandem::safetensors {
namespace {

static_assert(std::endian::native == std::endian::little, "safetensors stores little-endian bytes");

// Python's safetensors refuses headers over 100 MB; so do we (a corrupt length must not allocate).
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

struct DTypeName {
  torch::ScalarType type;
  const char* name;
};
constexpr DTypeName kDTypes[] = {
    {torch::kFloat64, "F64"}, {torch::kFloat32, "F32"}, {torch::kFloat16, "F16"}, {torch::kBFloat16, "BF16"},
    {torch::kInt64, "I64"},   {torch::kInt32, "I32"},   {torch::kInt16, "I16"},   {torch::kInt8, "I8"},
    {torch::kUInt8, "U8"},    {torch::kBool, "BOOL"},
};

const char* dtype_to_name(torch::ScalarType t, const std::string& tensor) {
  for (const auto& d : kDTypes)
    if (d.type == t) return d.name;
  fail("tensor '{}' has dtype {}, which safetensors files here do not hold: convert it to float or an integer type",
       tensor, c10::toString(t));
}

[[noreturn]] void bad_file(const std::string& what, std::string_view reason) {
  fail("{} is not a valid safetensors file ({}): it is truncated or corrupt; delete it or write it again", what,
       reason);
}

}  // namespace

bool Contents::has(std::string_view name) const {
  return std::any_of(tensors.begin(), tensors.end(), [&](const auto& t) { return t.first == name; });
}

const torch::Tensor& Contents::at(std::string_view name) const {
  for (const auto& t : tensors)
    if (t.first == name) return t.second;
  fail("{} has no tensor '{}': it was written by another model or program", path, name);
}

const std::string& Contents::meta(std::string_view key) const {
  auto it = metadata.find(std::string(key));
  if (it == metadata.end()) fail("{} has no metadata key '{}': it was not written by this program", path, key);
  return it->second;
}

std::string serialize(const NamedTensors& tensors, const Metadata& metadata) {
  // CPU, C-order copies, then the layout order: element size descending, then name.
  std::vector<std::pair<std::string, torch::Tensor>> cpu;
  cpu.reserve(tensors.size());
  for (const auto& [name, t] : tensors) {
    if (name.empty() || name == "__metadata__") fail("a safetensors tensor cannot be named '{}'", name);
    dtype_to_name(t.scalar_type(), name);
    cpu.emplace_back(name, t.detach().to(torch::kCPU).contiguous());
  }
  std::sort(cpu.begin(), cpu.end(), [](const auto& a, const auto& b) {
    if (a.second.element_size() != b.second.element_size()) return a.second.element_size() > b.second.element_size();
    return a.first < b.first;
  });
  for (std::size_t i = 1; i < cpu.size(); ++i)
    if (cpu[i].first == cpu[i - 1].first)
      fail("two tensors are named '{}': safetensors names are unique", cpu[i].first);

  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::uint64_t offset = 0;
  for (const auto& [name, t] : cpu) {
    const std::uint64_t bytes = t.numel() * t.element_size();
    header[name] = {{"dtype", dtype_to_name(t.scalar_type(), name)},
                    {"shape", std::vector<std::int64_t>(t.sizes().begin(), t.sizes().end())},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string json = header.dump();
  json.append((8 - (8 + json.size()) % 8) % 8, ' ');  // the buffer starts 8-byte aligned

  std::string out;
  out.reserve(8 + json.size() + offset);
  const std::uint64_t n = json.size();
  out.append(reinterpret_cast<const char*>(&n), 8);
  out += json;
  for (const auto& [name, t] : cpu) out.append(static_cast<const char*>(t.data_ptr()), t.numel() * t.element_size());
  return out;
}

Contents deserialize(std::string_view bytes, const std::string& what) {
  if (bytes.size() < 8) bad_file(what, fmt::format("{} bytes, shorter than the 8-byte header length", bytes.size()));
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  if (n > kMaxHeaderBytes || n > bytes.size() - 8)
    bad_file(what, fmt::format("header length {} does not fit in {} bytes", n, bytes.size()));
  const std::string_view header_text = bytes.substr(8, n);
  if (header_text.empty() || header_text[0] != '{') bad_file(what, "the header is not a JSON object");
  const std::string_view buffer = bytes.substr(8 + n);

  nlohmann::json header;
  try {
    header = nlohmann::json::parse(header_text);
  } catch (const nlohmann::json::exception& e) {
    bad_file(what, fmt::format("header JSON: {}", e.what()));
  }
  if (!header.is_object()) bad_file(what, "the header is not a JSON object");

  Contents c;
  c.path = what;
  struct Span {
    std::uint64_t begin, end;
    std::size_t index;
  };
  std::vector<Span> spans;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) bad_file(what, "__metadata__ is not an object");
      for (const auto& [k, v] : entry.items()) {
        if (!v.is_string()) bad_file(what, fmt::format("metadata '{}' is not a string", k));
        c.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") || !entry.contains("data_offsets") ||
        !entry["dtype"].is_string() || !entry["shape"].is_array() || !entry["data_offsets"].is_array() ||
        entry["data_offsets"].size() != 2)
      bad_file(what, fmt::format("tensor '{}' lacks dtype, shape or data_offsets", name));
    const std::string dtype = entry["dtype"].get<std::string>();
    const DTypeName* dt = nullptr;
    for (const auto& d : kDTypes)
      if (dtype == d.name) dt = &d;
    if (!dt) bad_file(what, fmt::format("tensor '{}' has unsupported dtype '{}'", name, dtype));
    std::vector<std::int64_t> shape;
    std::uint64_t numel = 1;
    for (const auto& s : entry["shape"]) {
      if (!s.is_number_unsigned()) bad_file(what, fmt::format("tensor '{}' has a bad shape", name));
      shape.push_back(s.get<std::int64_t>());
      if (__builtin_mul_overflow(numel, s.get<std::uint64_t>(), &numel))
        bad_file(what, fmt::format("tensor '{}' has an impossible shape", name));
    }
    const auto& off = entry["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      bad_file(what, fmt::format("tensor '{}' has bad data_offsets", name));
    const std::uint64_t begin = off[0].get<std::uint64_t>(), end = off[1].get<std::uint64_t>();
    std::uint64_t want = 0;
    if (__builtin_mul_overflow(numel, c10::elementSize(dt->type), &want) || end < begin || end - begin != want)
      bad_file(what, fmt::format("tensor '{}' spans {} bytes, its shape needs {}", name, end - begin, want));
    if (end > buffer.size())
      bad_file(what, fmt::format("tensor '{}' ends at byte {} of a {}-byte buffer", name, end, buffer.size()));
    torch::Tensor t = torch::empty(shape, torch::TensorOptions().dtype(dt->type));
    if (want > 0) std::memcpy(t.data_ptr(), buffer.data() + begin, want);
    spans.push_back({begin, end, c.tensors.size()});
    c.tensors.emplace_back(name, std::move(t));
  }
  // The spec's last rule: the tensors tile the buffer exactly.
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
  std::uint64_t at = 0;
  for (const Span& s : spans) {
    if (s.begin != at) bad_file(what, fmt::format("tensor data overlaps or leaves a gap at byte {}", at));
    at = s.end;
  }
  if (at != buffer.size())
    bad_file(what, fmt::format("{} bytes of tensor data, the buffer holds {}", at, buffer.size()));
  NamedTensors ordered;
  for (const Span& s : spans) ordered.push_back(std::move(c.tensors[s.index]));
  c.tensors = std::move(ordered);
  return c;
}

void write_file_atomically(const std::string& path, std::string_view bytes) {
  const std::filesystem::path target(path);
  const std::filesystem::path dir = target.has_parent_path() ? target.parent_path() : std::filesystem::path(".");
  const std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  auto failed = [&](std::string_view step) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail("cannot write '{}' ({} failed: {}): check that {} exists, is writable and has space", path, step,
         std::strerror(err), dir.string());
  };
  {
    FileDescriptor fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!fd) failed("open");
    std::size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t w = ::write(fd.get(), bytes.data() + done, bytes.size() - done);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) failed("write");
      done += static_cast<std::size_t>(w);
    }
    if (::fsync(fd.get()) != 0) failed("fsync");
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) failed("rename");
  // The rename is durable only once the directory entry is.
  FileDescriptor dfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dfd || ::fsync(dfd.get()) != 0)
    fail("cannot sync directory '{}' after writing '{}': {}", dir.string(), path, std::strerror(errno));
}

void save_file(const std::string& path, const NamedTensors& tensors, const Metadata& metadata) {
  write_file_atomically(path, serialize(tensors, metadata));
}

Contents load_file(const std::string& path) {
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) fail("cannot read '{}': {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) fail("cannot read '{}': {}", path, std::strerror(errno));
  std::string bytes(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t r = ::read(fd.get(), bytes.data() + done, bytes.size() - done);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) fail("cannot read '{}': {}", path, std::strerror(errno));
    if (r == 0) break;
    done += static_cast<std::size_t>(r);
  }
  bytes.resize(done);
  return deserialize(bytes, path);
}

}  // namespace tandem::safetensors
