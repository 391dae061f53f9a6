// tandem data preload | ls | info | verify | rm: the node-wide dataset caches (/tandem.data.<name>).
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <cstring>
#include <ctime>
#include <limits>
#include <thread>
#include <vector>

#include "common/clock.hpp"
#include "common/error.hpp"
#include "common/units.hpp"
#include "shm/dataset_cache.hpp"
#include "common/cli_actions.hpp"
#include "tools/commands.hpp"
#include "datasets/input_file.hpp"
#include "datasets/load_plan.hpp"
#include "datasets/preload.hpp"
#include "datasets/progress.hpp"

namespace tandem::tools {
namespace {


// A NUL-padded name field of the descriptor as a string.
template <std::size_t N>
std::string text(const char (&field)[N]) {
  return std::string(field, strnlen(field, N));
}

std::string shape_text(const shm::FieldDesc& f) {
  if (f.ndim == 0) return "scalar";
  return fmt::format("{}", fmt::join(f.shape, f.shape + f.ndim, "x"));
}

std::string splits_text(const shm::DatasetDescriptor& d) {
  std::string out;
  for (std::uint32_t i = 0; i < d.num_splits; ++i)
    out += fmt::format("{}{} {}", i ? ", " : "", text(d.splits[i].name), d.splits[i].end - d.splits[i].begin);
  return out;
}

int run_preload(data::PreloadOptions options) {
  data::PreloadResult r;
  {
    data::ProgressBar bar("preloading " + options.name);  // erased before anything else is printed
    options.progress = [&bar](std::uint64_t done, std::uint64_t total) { bar.update(done, total); };
    r = data::preload(options);
  }
  shm::DatasetCache cache = shm::DatasetCache::attach(options.name);
  const double secs = r.load_ns / 1e9;
  fmt::print("preloaded '{}' ({}): {} samples ({}), {} in {:.2f} s ({}/s), checksum xxh3:{:016x} -> /dev/shm/{}\n",
             options.name, r.format, r.num_samples, splits_text(cache.descriptor()), format_bytes(r.payload_bytes),
             secs, format_bytes(static_cast<std::uint64_t>(r.payload_bytes / std::max(secs, 1e-9))), r.checksum,
             r.segment);
  return 0;
}

// Smallest and largest value of an integer field (the label range `info` shows).
std::pair<std::int64_t, std::int64_t> value_range(const shm::FieldDesc& f, const std::byte* data, std::uint64_t n) {
  std::int64_t lo = std::numeric_limits<std::int64_t>::max(), hi = std::numeric_limits<std::int64_t>::min();
  std::vector<std::int64_t> buf(1 << 16);
  const std::uint64_t values = n * (f.stride / shm::dtype_size(f.dtype));
  for (std::uint64_t at = 0; at < values; at += buf.size()) {
    std::size_t k = static_cast<std::size_t>(std::min<std::uint64_t>(buf.size(), values - at));
    data::widen_to_i64(f.dtype, data + at * shm::dtype_size(f.dtype), buf.data(), k);
    for (std::size_t i = 0; i < k; ++i) lo = std::min(lo, buf[i]), hi = std::max(hi, buf[i]);
  }
  return {lo, hi};
}

int info(const std::string& name) {
  shm::DatasetCache cache = shm::DatasetCache::attach(name);
  const auto& d = cache.descriptor();
  const auto& h = cache.segment().header();
  struct stat st {};
  TANDEM_CHECK_SYS(::fstat(cache.segment().fd(), &st));
  const std::time_t created = static_cast<std::time_t>(h.created_unix_ns / 1'000'000'000ull);
  char when[32];
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", std::localtime(&created));

  fmt::print("dataset   {}\n", text(d.name));
  fmt::print("segment   /dev/shm/{}  {} ({} bytes), mode {:04o}, created {} by pid {}\n", cache.segment().name(),
             format_bytes(cache.segment().size()), cache.segment().size(), st.st_mode & 07777, when, h.creator_pid);
  fmt::print("source    {} ({}), loaded in {:.2f} s\n", text(d.source), text(d.format), d.load_ns / 1e9);
  fmt::print("checksum  xxh3:{:016x}\n", d.payload_checksum);
  fmt::print("samples   {}\n", d.num_samples);
  fmt::print("fields\n");
  for (std::uint32_t i = 0; i < d.num_fields; ++i) {
    const shm::FieldDesc& f = d.fields[i];
    std::string extra;
    if (data::is_integer(f.dtype) && text(f.name) == "y" && d.num_samples > 0) {
      auto [lo, hi] = value_range(f, cache.segment().base() + f.offset, d.num_samples);
      extra = fmt::format("  labels {}-{}", lo, hi);
    }
    fmt::print("  {:<6} {:<8} {:<12} {:>10}{}\n", text(f.name), shm::dtype_name(f.dtype), shape_text(f),
               format_bytes(f.bytes), extra);
  }
  fmt::print("splits\n");
  for (std::uint32_t i = 0; i < d.num_splits; ++i) {
    const shm::SplitDesc& s = d.splits[i];
    fmt::print("  {:<6} {:>10}  [{}, {})\n", text(s.name), s.end - s.begin, s.begin, s.end);
  }
  return 0;
}

int print_datasets() {
  int shown = 0;
  for (const auto& s : shm::list_segments()) {
    if (!s.name.starts_with("tandem.data.")) continue;
    const std::string name = s.name.substr(12);
    if (shown++ == 0)
      fmt::print("{:<24} {:>10} {:>10}  {:<8} {:<10} {}\n", "NAME", "SAMPLES", "SIZE", "FORMAT", "STATE", "SOURCE");
    try {
      shm::DatasetCache cache = shm::DatasetCache::attach(name);
      const auto& d = cache.descriptor();
      fmt::print("{:<24} {:>10} {:>10}  {:<8} {:<10} {}\n", name, d.num_samples, format_bytes(s.bytes), text(d.format),
                 "ready", text(d.source));
    } catch (const UserError&) {
      fmt::print("{:<24} {:>10} {:>10}  {:<8} {:<10}\n", name, "-", format_bytes(s.bytes), "-",
                 !s.ours   ? fmt::format("uid {}", s.owner_uid)
                 : s.valid ? std::string("invalid")
                           : s.problem);
    }
  }
  if (shown == 0) fmt::print("no dataset caches: `tandem data preload NAME --from PATH` makes one\n");
  return 0;
}

int verify(const std::string& name, unsigned threads) {
  const auto start = std::chrono::steady_clock::now();
  shm::DatasetCache cache = shm::DatasetCache::attach(name);
  const auto& d = cache.descriptor();
  std::uint64_t bytes = 0;
  for (std::uint32_t i = 0; i < d.num_fields; ++i) bytes += d.fields[i].bytes;
  const std::uint64_t sum = cache.compute_checksum(threads ? threads
                                                           : std::max(1u, std::thread::hardware_concurrency()));
  if (sum != d.payload_checksum)
    fail(ErrorKind::corrupt_segment,
         "dataset cache '{}' is corrupt: its payload hashes to xxh3:{:016x}, it was written as xxh3:{:016x}: run "
         "`tandem data preload {} --from {} --force`",
         name, sum, d.payload_checksum, name, text(d.source));
  const double secs = seconds_since(start);
  fmt::print("dataset cache '{}' is intact: {} hash to xxh3:{:016x} ({:.2f} s)\n", name, format_bytes(bytes), sum,
             secs);
  return 0;
}

int remove_dataset(const std::string& name) {
  const auto r = shm::Segment::remove(shm::dataset_segment_name(name));
  if (r.result == shm::Segment::Removal::absent)
    fail("there is no dataset cache '{}': `tandem data ls` lists them", name);
  if (r.result == shm::Segment::Removal::denied)
    fail(ErrorKind::owner,
         "cannot remove dataset cache '{}': it is owned by uid {}, not by this user (uid {}) ({}): run `tandem data rm "
         "{}` as that user",
         name, r.owner_uid, ::getuid(), std::strerror(r.error), name);
  // Root may remove another user's cache; say whose it was.
  fmt::print("removed dataset cache '{}'{}\n", name,
             r.owner_uid != ::getuid() ? fmt::format(" (owned by uid {})", r.owner_uid) : "");
  return 0;
}

}  // namespace

void add_data_commands(CLI::App& app) {
  auto* data = app.add_subcommand("data", "node-wide dataset caches in shared memory");
  data->require_subcommand(1);

  static data::PreloadOptions pre;
  auto* p = data->add_subcommand("preload", "load a dataset into /dev/shm/tandem.data.NAME once per node");
  p->footer(
      "The cache is refused before anything is written when /dev/shm lacks the space. TANDEM_SHM_LIMIT=SIZE "
      "(bytes, or K/M/G, powers of 1024) caps the space Tandem believes /dev/shm has free (docs/FORMAT.md).");
  p->add_option("name", pre.name, "cache name, e.g. fmnist")->required();
  p->add_option("--from", pre.from, "folder with IDX files, CIFAR-10 batches or x_/y_{train,test}.npy")->required();
  p->add_option("--format", pre.format, "idx, cifar10 or npy (default: detected from the files)")
      ->check(CLI::IsMember({"idx", "cifar10", "npy"}));
  p->add_flag("--force", pre.force, "replace an existing cache of that name");
  p->add_option("--threads", pre.threads, "loader threads (default: all cores)");
  cli::on_run(p, [] { return run_preload(pre); });

  cli::on_run(data->add_subcommand("ls", "list the dataset caches"), [] { return print_datasets(); });

  static std::string name;
  static unsigned threads = 0;
  auto* i = data->add_subcommand("info", "fields, splits, label range, size, checksum and source of a cache");
  i->add_option("name", name, "cache name")->required();
  cli::on_run(i, [] { return info(name); });

  auto* v = data->add_subcommand("verify", "recompute a cache's checksum; exit 1 if it changed");
  v->add_option("name", name, "cache name")->required();
  v->add_option("--threads", threads, "hashing threads (default: all cores)");
  cli::on_run(v, [] { return verify(name, threads); });

  auto* r = data->add_subcommand("rm", "remove a dataset cache");
  r->add_option("name", name, "cache name")->required();
  cli::on_run(r, [] { return remove_dataset(name); });
}

}  // namespace tandem::tools
