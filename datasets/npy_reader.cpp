#include "datasets/npy_reader.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <span>

#include "common/checked_math.hpp"
#include "common/error.hpp"
#include "datasets/input_file.hpp"

namespace fs = std::filesystem;

namespace tandem::data {
namespace {

constexpr std::uint64_t kChunk = 16u << 20;  // bytes per job: parallelism and progress granularity

struct HeaderText {
  const fs::path& path;
  std::string text;

  [[noreturn]] void bad(std::string_view what) const {
    fail("{} has an unreadable .npy header ({}): save it with numpy.save", path.string(), what);
  }
  // The text right after "'key':", spaces skipped.
  std::size_t value_of(std::string_view key) const {
    std::size_t at = text.find(fmt::format("'{}':", key));
    if (at == std::string::npos) bad(fmt::format("no '{}'", key));
    at += key.size() + 3;
    while (at < text.size() && text[at] == ' ') ++at;
    return at;
  }
};

shm::DType parse_descr(const HeaderText& h) {
  std::size_t at = h.value_of("descr");
  if (h.text[at] != '\'')
    fail("{} has a structured dtype: save x and y as plain arrays (one dtype each)", h.path.string());
  std::size_t end = h.text.find('\'', at + 1);
  if (end == std::string::npos) h.bad("descr");
  const std::string descr = h.text.substr(at + 1, end - at - 1);
  static const std::pair<const char*, shm::DType> known[] = {
      {"u1", shm::DType::u8},  {"i1", shm::DType::i8},  {"u2", shm::DType::u16}, {"i2", shm::DType::i16},
      {"u4", shm::DType::u32}, {"i4", shm::DType::i32}, {"i8", shm::DType::i64}, {"f2", shm::DType::f16},
      {"f4", shm::DType::f32}, {"f8", shm::DType::f64}};
  if (descr.size() == 3)
    for (const auto& [code, dtype] : known)
      if (descr.compare(1, 2, code) == 0) {
        if (descr[0] == '>' && shm::dtype_size(dtype) > 1)
          fail("{} is big-endian ('{}'): convert it with a.astype(a.dtype.newbyteorder('<'))", h.path.string(), descr);
        return dtype;
      }
  fail(
      "{} has dtype '{}', which a cache cannot hold: convert it to one of uint8 int8 uint16 int16 "
      "uint32 int32 int64 float16 float32 float64",
      h.path.string(), descr);
}

std::vector<std::uint64_t> parse_shape(const HeaderText& h) {
  std::size_t at = h.value_of("shape");
  std::size_t end = h.text.find(')', at);
  if (h.text[at] != '(' || end == std::string::npos) h.bad("shape");
  std::vector<std::uint64_t> shape;
  for (const char* p = h.text.c_str() + at + 1; p < h.text.c_str() + end;) {
    while (*p == ' ' || *p == ',') ++p;
    if (p >= h.text.c_str() + end) break;
    // strtoull alone would accept "-1" and saturate on overflow; a dimension is plain digits < 2^64.
    if (*p < '0' || *p > '9') h.bad("shape");
    char* next = nullptr;
    errno = 0;
    shape.push_back(std::strtoull(p, &next, 10));
    if (errno == ERANGE) h.bad("a dimension above 2^64");
    p = next;
  }
  return shape;
}

// Byte-copies elements [first, first + count) of a .npy array into `dst` (+ the same offset).
LoadJob copy_job(const fs::path& path, std::uint64_t src, std::uint64_t bytes, std::size_t field, std::uint64_t dst) {
  return {path.filename().string(), bytes, [=](JobSink& sink) {
            File(path).read_at(src, sink.fields[field] + dst, bytes);
            sink.progress(bytes);
          }};
}

// Reads `count` integer labels and widens them into the int64 field y.
LoadJob widen_job(const fs::path& path, const NpyHeader& h, std::uint64_t first, std::uint64_t count,
                  std::uint64_t dst_sample) {
  return {path.filename().string(), count * 8, [=](JobSink& sink) {
            const std::size_t size = shm::dtype_size(h.dtype);
            std::vector<std::byte> buf(count * size);
            File(path).read_at(h.data_offset + first * size, buf.data(), buf.size());
            widen_to_i64(h.dtype, buf.data(), reinterpret_cast<std::int64_t*>(sink.fields[1]) + dst_sample, count);
            sink.progress(count * 8);
          }};
}

// Valid only after read_npy_header checked that the whole array's size fits in 64 bits.
std::uint64_t sample_bytes(const NpyHeader& h) {
  return *checked_product(shm::dtype_size(h.dtype), std::span(h.shape).subspan(1));
}

bool y_is_label(const NpyHeader& y) { return y.shape.size() == 1 && is_integer(y.dtype); }

}  // namespace

NpyHeader read_npy_header(const fs::path& path) {
  File file(path);
  unsigned char pre[12] = {};
  if (file.size() < 10) fail("{} is not a .npy file (only {} bytes)", path.string(), file.size());
  file.read_at(0, pre, std::min<std::uint64_t>(12, file.size()));
  if (std::memcmp(pre, "\x93NUMPY", 6) != 0)
    fail("{} is not a .npy file (no \\x93NUMPY magic): save it with numpy.save", path.string());
  const unsigned major = pre[6];
  if (major < 1 || major > 3) fail("{} is .npy format version {}, this reads 1-3", path.string(), major);
  const std::uint64_t len_bytes = major == 1 ? 2 : 4;
  const std::uint64_t len = major == 1 ? (pre[8] | (pre[9] << 8))
                                       : (pre[8] | (pre[9] << 8) | (pre[10] << 16) | (std::uint64_t(pre[11]) << 24));
  NpyHeader h;
  h.data_offset = 8 + len_bytes + len;
  if (h.data_offset > file.size()) fail("{} is truncated inside its .npy header", path.string());
  HeaderText text{path, std::string(len, '\0')};
  file.read_at(8 + len_bytes, text.text.data(), len);

  h.dtype = parse_descr(text);
  std::size_t fortran = text.value_of("fortran_order");
  if (text.text.compare(fortran, 4, "True") == 0)
    fail("{} is in Fortran order: save np.ascontiguousarray(a) instead", path.string());
  h.shape = parse_shape(text);
  if (h.shape.empty() || h.shape[0] == 0)
    fail("{} holds no samples (shape must be (N, ...) with N > 0)", path.string());
  if (h.shape.size() - 1 > shm::kMaxDims)
    fail("{} has {} dimensions per sample; a cache holds at most {}", path.string(), h.shape.size() - 1, shm::kMaxDims);
  if (std::find(h.shape.begin() + 1, h.shape.end(), 0) != h.shape.end())
    fail("{} has a 0 in its per-sample shape ({}): a sample must hold at least one value", path.string(),
         fmt::join(h.shape, ", "));
  const auto data_bytes = checked_product(shm::dtype_size(h.dtype), h.shape);
  const auto file_bytes = checked_add(h.data_offset, data_bytes.value_or(~0ull));
  if (!data_bytes || !file_bytes)
    fail(
        "{} has a .npy header whose shape ({}) does not fit in 64 bits of bytes: the file is corrupt or forged "
        "(save it again with numpy.save)",
        path.string(), fmt::join(h.shape, ", "));
  h.data_bytes = *data_bytes;
  if (file.size() != *file_bytes)
    fail("{} is {} bytes but its header (shape ({}), {}) needs {}: the file is truncated or padded", path.string(),
         file.size(), fmt::join(h.shape, ", "), shm::dtype_name(h.dtype), h.data_offset + h.data_bytes);
  return h;
}

bool looks_like_npy(const fs::path& dir) { return fs::is_regular_file(dir / "x_train.npy"); }

LoadPlan plan_npy(const fs::path& dir) {
  LoadPlan plan;
  plan.spec.source = dir.string();
  plan.spec.format = "npy";
  std::optional<NpyHeader> first_x, first_y;
  for (const char* split : {"train", "test"}) {
    const fs::path xp = dir / fmt::format("x_{}.npy", split), yp = dir / fmt::format("y_{}.npy", split);
    if (std::string(split) == "test" && !fs::exists(xp) && !fs::exists(yp)) continue;
    if (!fs::exists(xp) || !fs::exists(yp)) fail("{} needs both x_{}.npy and y_{}.npy", dir.string(), split, split);
    NpyHeader x = read_npy_header(xp), y = read_npy_header(yp);
    if (x.shape[0] != y.shape[0])
      fail("{} holds {} samples but {} holds {}: x and y must have the same first dimension", xp.string(), x.shape[0],
           yp.string(), y.shape[0]);
    auto same = [](const NpyHeader& a, const NpyHeader& b) {
      return a.dtype == b.dtype && std::equal(a.shape.begin() + 1, a.shape.end(), b.shape.begin() + 1, b.shape.end());
    };
    auto same_y = [&](const NpyHeader& a, const NpyHeader& b) { return y_is_label(a) ? y_is_label(b) : same(a, b); };
    if ((first_x && !same(*first_x, x)) || (first_y && !same_y(*first_y, y)))
      fail("{} and the train split differ in dtype or per-sample shape: splits must agree", dir.string());
    first_x = x;
    first_y = y;

    const std::uint64_t begin = plan.spec.num_samples, n = x.shape[0];
    const std::uint64_t xs = sample_bytes(x), ys = sample_bytes(y);
    for (std::uint64_t at = 0; at < x.data_bytes; at += kChunk)
      plan.jobs.push_back(copy_job(xp, x.data_offset + at, std::min(kChunk, x.data_bytes - at), 0, begin * xs + at));
    if (y_is_label(y)) {
      const std::uint64_t per = kChunk / 8;
      for (std::uint64_t i = 0; i < n; i += per)
        plan.jobs.push_back(widen_job(yp, y, i, std::min(per, n - i), begin + i));
    } else {
      for (std::uint64_t at = 0; at < y.data_bytes; at += kChunk)
        plan.jobs.push_back(copy_job(yp, y.data_offset + at, std::min(kChunk, y.data_bytes - at), 1, begin * ys + at));
    }
    plan.spec.num_samples += n;
    plan.spec.splits.push_back({split, begin, plan.spec.num_samples});
  }
  if (!first_x) fail("{} has no x_train.npy / y_train.npy", dir.string());
  plan.spec.fields = {{"x", first_x->dtype, {first_x->shape.begin() + 1, first_x->shape.end()}},
                      y_is_label(*first_y)
                          ? shm::FieldSpec{"y", shm::DType::i64, {}}
                          : shm::FieldSpec{"y", first_y->dtype, {first_y->shape.begin() + 1, first_y->shape.end()}}};
  return plan;
}

}  // namespace tandem::data
