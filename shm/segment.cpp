#include "shm/segment.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <boost/interprocess/shared_memory_object.hpp>
#include <fmt/format.h>
#include <xxhash.h>

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <utility>

#include "common/clock.hpp"
#include "common/error.hpp"
#include "common/quote.hpp"
#include "common/process.hpp"
#include "common/units.hpp"

namespace bip = boost::interprocess;

namespace tandem::shm {

std::uint64_t align_up(std::uint64_t value, std::uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

std::uint64_t header_checksum(const std::byte* header) {
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  XXH3_64bits_update(state, header, offsetof(SegmentHeader, header_checksum));
  XXH3_64bits_update(state, header + kDescriptorOffset, kHeaderBytes - kDescriptorOffset);
  std::uint64_t sum = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  return sum;
}

namespace {

// Read at each creation, never cached: a child forked after a first creation is another process.
std::uint32_t own_start_low() {
  const auto self = process_identity(static_cast<std::uint32_t>(::getpid()));
  return self ? static_cast<std::uint32_t>(self->start_ticks) : 0u;
}

bool creator_alive(const SegmentHeader& h) {
  if (h.creator_start == 0) return process_alive(h.creator_pid);  // made before the start time was kept
  return process_alive(h.creator_pid, h.creator_start, 0xffff'ffffu);
}

std::byte* map(int fd, std::size_t size, Segment::Access access, const std::string& name) {
  int prot = PROT_READ | (access == Segment::Access::read_write ? PROT_WRITE : 0);
  void* p = ::mmap(nullptr, size, prot, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) TANDEM_FAIL_SYS(errno, "mmap(/dev/shm/" + name + ")");
  return static_cast<std::byte*>(p);
}

}  // namespace

std::uint64_t shm_free_bytes() {
  struct statvfs st {};
  TANDEM_CHECK_SYS(::statvfs("/dev/shm", &st));
  std::uint64_t free = static_cast<std::uint64_t>(st.f_bavail) * st.f_frsize;
  if (const char* limit = std::getenv("TANDEM_SHM_LIMIT")) free = std::min(free, parse_size(limit, "TANDEM_SHM_LIMIT"));
  return free;
}

namespace {
// A name given whole (a Python slab= or a C++ caller's): the system calls read it as a C string, so a
// NUL would silently name another object, and a '/' a path.
void check_object_name(const std::string& name) {
  if (name.empty() || name.size() > 255 || name.find_first_of(std::string_view("\0/", 2)) != std::string::npos)
    fail("shared-memory segment name {} is not a name: use 1-255 characters without '/' or NUL bytes",
         quote_escaped(name));
}
}  // namespace

Segment Segment::create(const std::string& name, Kind kind, std::uint32_t layout_version, std::size_t payload_bytes,
                        std::string_view exists_fix) {
  check_object_name(name);
  const std::uint64_t payload_offset = align_up(kHeaderBytes, kPayloadAlignment);
  const std::uint64_t total = payload_offset + align_up(payload_bytes, 4096);
  const std::uint64_t free = shm_free_bytes();
  auto too_small = [&](std::uint64_t available) {
    fail(ErrorKind::no_space,
         "not enough shared memory for '/{}': it needs {}, /dev/shm has {} free: enlarge /dev/shm "
         "(docker run --shm-size=..., or mount -o remount,size=... /dev/shm) or remove segments with "
         "`tandem shm gc` / `tandem data rm`",
         name, format_bytes(total), format_bytes(available));
  };
  if (total > free) too_small(free);

  Segment seg;
  try {
    bip::permissions owner_only(0600);
    bip::shared_memory_object object(bip::create_only, name.c_str(), bip::read_write, owner_only);
    seg.fd_.reset(::fcntl(object.get_mapping_handle().handle, F_DUPFD_CLOEXEC, 0));
    if (!seg.fd_) {  // the name exists now: remove it before reporting, so nothing is left behind
      const int err = errno;
      bip::shared_memory_object::remove(name.c_str());
      TANDEM_FAIL_SYS(err, "fcntl(F_DUPFD_CLOEXEC, /dev/shm/" + name + ")");
    }
  } catch (const bip::interprocess_exception& e) {
    if (e.get_error_code() == bip::already_exists_error)
      fail(ErrorKind::segment_exists, "shared-memory segment '/{}' already exists: {}", name, exists_fix);
    fail("cannot create shared-memory segment '/{}': {}", name, e.what());
  }
  seg.name_ = name;
  seg.unlink_on_destroy_ = true;  // from here on, any failure removes the half-made object
  TANDEM_CHECK_SYS(::fchmod(seg.fd_.get(), 0600));
  TANDEM_CHECK_SYS(::ftruncate(seg.fd_.get(), static_cast<off_t>(total)));
  // Reserve the pages now: tmpfs otherwise allocates on first touch and a full /dev/shm kills the
  // writer with SIGBUS halfway through.
  if (int err = ::posix_fallocate(seg.fd_.get(), 0, static_cast<off_t>(total)); err != 0) {
    if (err == ENOSPC) too_small(shm_free_bytes());
    TANDEM_FAIL_SYS(err, "posix_fallocate(/dev/shm/" + name + ")");
  }
  seg.size_ = total;
  seg.base_ = map(seg.fd_.get(), total, Access::read_write, name);

  SegmentHeader& h = seg.header();
  h.magic = kMagic;
  h.kind = kind;
  h.layout_version = layout_version;
  h.creator_uid = ::getuid();
  h.creator_pid = static_cast<std::uint32_t>(::getpid());
  h.creator_start = own_start_low();
  h.created_unix_ns = unix_ns();
  h.total_size = total;
  h.payload_offset = payload_offset;
  h.ready.store(static_cast<std::uint32_t>(Ready::writing), std::memory_order_relaxed);
  return seg;
}

Segment Segment::attach(const std::string& name, Kind kind, std::uint32_t layout_version, Access access,
                        std::string_view fix) {
  check_object_name(name);
  Segment seg;
  seg.name_ = name;
  if (std::string owner = foreign_owner(name); !owner.empty())
    fail(ErrorKind::owner,
         "shared-memory segment '/{}' is {}, not by this user (uid {}): it is another user's; run as that "
         "user or choose another name",
         name, owner, ::getuid());
  try {
    bip::shared_memory_object object(bip::open_only, name.c_str(),
                                     access == Access::read_write ? bip::read_write : bip::read_only);
    seg.fd_.reset(::fcntl(object.get_mapping_handle().handle, F_DUPFD_CLOEXEC, 0));
    if (!seg.fd_) TANDEM_FAIL_SYS(errno, "fcntl(F_DUPFD_CLOEXEC, /dev/shm/" + name + ")");
  } catch (const bip::interprocess_exception& e) {
    if (e.get_error_code() == bip::not_found_error)
      fail(ErrorKind::segment_not_found, "shared-memory segment '/{}' does not exist: {}", name, fix);
    fail("cannot open shared-memory segment '/{}': {}: {}", name, e.what(), fix);
  }
  struct stat st {};
  TANDEM_CHECK_SYS(::fstat(seg.fd_.get(), &st));
  if (st.st_uid != ::getuid())  // replaced between the check above and the open
    fail(ErrorKind::owner,
         "shared-memory segment '/{}' is owned by uid {}, not by this user (uid {}): it is another user's; "
         "run as that user or choose another name",
         name, st.st_uid, ::getuid());
  if (static_cast<std::size_t>(st.st_size) < kHeaderBytes)
    fail(ErrorKind::corrupt_segment, "shared-memory segment '/{}' is truncated ({} bytes, less than its header): {}",
         name, st.st_size, fix);
  seg.size_ = static_cast<std::size_t>(st.st_size);
  seg.base_ = map(seg.fd_.get(), seg.size_, access, name);

  const SegmentHeader& h = seg.header();
  if (h.magic != kMagic)
    fail(ErrorKind::foreign_segment, "shared-memory segment '/{}' is not a Tandem segment (bad magic): {}", name, fix);
  if (h.ready.load(std::memory_order_acquire) != static_cast<std::uint32_t>(Ready::ready)) {
    const bool alive = creator_alive(h);
    fail(ErrorKind::corrupt_segment, "shared-memory segment '/{}' is not ready: {}: {}", name,
         alive ? fmt::format("its creator (pid {}) is still writing it", h.creator_pid)
               : fmt::format("its creator (pid {}) died before finishing it", h.creator_pid),
         fix);
  }
  if (h.header_checksum != header_checksum(seg.base_))
    fail(ErrorKind::corrupt_segment, "shared-memory segment '/{}' has a corrupt header (checksum mismatch): {}", name,
         fix);
  if (h.kind != kind)
    fail(ErrorKind::foreign_segment, "shared-memory segment '/{}' holds a {} segment, not a {} one: {}", name,
         kind_name(h.kind), kind_name(kind), fix);
  if (h.layout_version != layout_version)
    fail(ErrorKind::foreign_segment, "shared-memory segment '/{}' was written by layout {}, this build reads {}: {}",
         name, h.layout_version, layout_version, fix);
  if (h.total_size != seg.size_)
    fail(ErrorKind::corrupt_segment, "shared-memory segment '/{}' is {} bytes but its header says {}: {}", name,
         seg.size_, h.total_size, fix);
  // The payload starts on its own 2 MiB boundary after the header, inside the object.
  if (h.payload_offset < kHeaderBytes || h.payload_offset % kPayloadAlignment != 0 || h.payload_offset > h.total_size)
    fail(ErrorKind::corrupt_segment,
         "shared-memory segment '/{}' has a payload offset {} outside its {} bytes (or not 2 MiB aligned): {}", name,
         h.payload_offset, seg.size_, fix);
  return seg;
}

bool Segment::exists(const std::string& name) {
  struct stat st {};
  return ::stat(("/dev/shm/" + name).c_str(), &st) == 0;
}

bool Segment::unlink(const std::string& name) { return bip::shared_memory_object::remove(name.c_str()); }

Segment::Removal Segment::remove(const std::string& name) {
  const std::string path = "/dev/shm/" + name;
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return {Removal::absent, 0, errno};
  if (::unlink(path.c_str()) == 0) return {Removal::removed, st.st_uid, 0};
  const int err = errno;
  if (err == ENOENT) return {Removal::absent, st.st_uid, err};  // someone else removed it meanwhile
  return {Removal::denied, st.st_uid, err};
}

std::string Segment::foreign_owner(const std::string& name) {
  struct stat st {};
  if (::lstat(("/dev/shm/" + name).c_str(), &st) != 0 || st.st_uid == ::getuid()) return "";
  return fmt::format("owned by uid {}", st.st_uid);
}

void Segment::mark_ready() {
  SegmentHeader& h = header();
  h.header_checksum = header_checksum(base_);
  h.ready.store(static_cast<std::uint32_t>(Ready::ready), std::memory_order_release);
}

void Segment::persist() { unlink_on_destroy_ = false; }

void Segment::prefault_for_write(std::size_t offset, std::size_t bytes) {
  if (offset + bytes > size_) throw std::logic_error("segment: prefault range outside the mapping");
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  std::byte* begin = base_ + offset / page * page;
  const std::size_t len = static_cast<std::size_t>(base_ + offset + bytes - begin);
#ifdef MADV_POPULATE_WRITE  // Linux 5.14+: populates the page tables without touching the data
  if (::madvise(begin, len, MADV_POPULATE_WRITE) == 0) return;
#endif
  // Older kernels: one write per page. The range is fresh from posix_fallocate, so writing back the
  // byte that is there changes nothing a reader could see (the segment is not ready yet).
  for (std::size_t i = 0; i < len; i += page) {
    auto* b = reinterpret_cast<volatile unsigned char*>(begin + i);
    *b = *b;
  }
}

void Segment::unlink_now() {
  unlink_if_ours();
  unlink_on_destroy_ = false;
}

bool Segment::linked() const {
  struct stat st {};
  return fd_ && ::fstat(fd_.get(), &st) == 0 && st.st_nlink > 0;
}

void Segment::unlink_if_ours() noexcept {
  if (name_.empty()) return;
  struct stat ours {
  }, named{};
  if (fd_ && ::fstat(fd_.get(), &ours) == 0 &&
      (::lstat(("/dev/shm/" + name_).c_str(), &named) != 0 || named.st_ino != ours.st_ino ||
       named.st_dev != ours.st_dev))
    return;  // gone, or another object under our name
  unlink(name_);
}

Segment::Segment(Segment&& other) noexcept
    : name_(std::move(other.name_)),
      base_(std::exchange(other.base_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      fd_(std::move(other.fd_)),
      unlink_on_destroy_(std::exchange(other.unlink_on_destroy_, false)) {}

Segment& Segment::operator=(Segment&& other) noexcept {
  if (this != &other) {
    reset();
    name_ = std::move(other.name_);
    base_ = std::exchange(other.base_, nullptr);
    size_ = std::exchange(other.size_, 0);
    fd_ = std::move(other.fd_);
    unlink_on_destroy_ = std::exchange(other.unlink_on_destroy_, false);
  }
  return *this;
}

Segment::~Segment() { reset(); }

void Segment::reset() noexcept {
  if (base_ != nullptr) ::munmap(base_, size_);
  if (unlink_on_destroy_) unlink_if_ours();
  fd_.reset();
  base_ = nullptr;
  unlink_on_destroy_ = false;
}

std::vector<SegmentInfo> list_segments() {
  std::vector<SegmentInfo> out;
  DIR* dir = ::opendir("/dev/shm");
  if (dir == nullptr) return out;
  while (dirent* entry = ::readdir(dir)) {
    std::string name = entry->d_name;
    if (!name.starts_with("tandem.")) continue;
    SegmentInfo info;
    info.name = name;
    struct stat st {};
    if (::lstat(("/dev/shm/" + name).c_str(), &st) != 0) continue;  // removed meanwhile
    info.owner_uid = st.st_uid;
    info.ours = st.st_uid == ::getuid();
    info.bytes = static_cast<std::uint64_t>(st.st_size);
    // O_NOFOLLOW: a symlink named tandem.* is reported, never followed.
    const FileDescriptor fd(
        S_ISREG(st.st_mode) ? ::open(("/dev/shm/" + name).c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW) : -1);
    if (!fd || ::fstat(fd.get(), &st) != 0) {
      info.problem = !S_ISREG(st.st_mode) ? "not a regular file"
                     : info.ours          ? "cannot be opened"
                                          : fmt::format("owned by uid {}, cannot be opened", info.owner_uid);
      out.push_back(info);
      continue;
    }
    info.bytes = static_cast<std::uint64_t>(st.st_size);
    if (info.bytes < kHeaderBytes) {
      info.problem = "truncated";
    } else {
      std::byte header[kHeaderBytes];
      if (::pread(fd.get(), header, kHeaderBytes, 0) == static_cast<ssize_t>(kHeaderBytes)) {
        const auto* h = reinterpret_cast<const SegmentHeader*>(header);
        info.ready = h->ready.load(std::memory_order_acquire) == static_cast<std::uint32_t>(Ready::ready);
        if (h->magic != kMagic) {
          info.problem = "not a Tandem segment";  // its other header bytes mean nothing: none is quoted
        } else {
          info.kind = h->kind;
          info.layout_version = h->layout_version;
          info.creator_pid = h->creator_pid;
          info.creator_alive = creator_alive(*h);
          info.created_unix_ns = h->created_unix_ns;
          if (info.ready && h->header_checksum != header_checksum(header)) {
            info.problem = "corrupt header";
            info.creator_pid = 0;  // unchecked bytes: never quoted as a pid
            info.creator_alive = false;
          } else if (!info.ready) {
            info.problem = info.creator_alive ? "being written" : "abandoned while being written";
          } else {
            info.valid = true;
          }
        }
      }
    }
    out.push_back(info);
  }
  ::closedir(dir);
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return out;
}

// ---- UnlinkOnSignal: the handler only unlinks a path copied in beforehand (async-signal-safe).
namespace {
char g_unlink_path[256];
struct sigaction g_previous[3];
constexpr int kSignals[3] = {SIGINT, SIGTERM, SIGHUP};

void unlink_and_reraise(int sig) {
  ::unlink(g_unlink_path);
  for (int i = 0; i < 3; ++i) ::sigaction(kSignals[i], &g_previous[i], nullptr);
  ::raise(sig);
}
}  // namespace

UnlinkOnSignal::UnlinkOnSignal(const std::string& name) {
  std::snprintf(g_unlink_path, sizeof g_unlink_path, "/dev/shm/%s", name.c_str());
  struct sigaction sa {};
  sa.sa_handler = unlink_and_reraise;
  sigemptyset(&sa.sa_mask);
  for (int i = 0; i < 3; ++i) ::sigaction(kSignals[i], &sa, &g_previous[i]);
}

UnlinkOnSignal::~UnlinkOnSignal() {
  for (int i = 0; i < 3; ++i) ::sigaction(kSignals[i], &g_previous[i], nullptr);
}

}  // namespace tandem::shm
