// A Tandem shared-memory segment: one POSIX shm object with a 4 KiB header, then a payload aligned
// to 2 MiB. Layout (docs/FORMAT.md, "Segment header"):
//
//   [0, 64)      SegmentHeader: magic, kind, layout version, creator uid/pid, creation time, total
//                size, payload offset, header checksum, `ready`
//   [64, 4096)   the kind's descriptor (field tables, slot counts, ...), immutable once ready
//   [payload_offset, total_size)  the payload
//
// Lifecycle: the creator maps the new object read-write with `ready` = 0, fills the descriptor and
// payload, then calls mark_ready(), which writes the header checksum and stores `ready` = 1 with
// release ordering; an attacher loads `ready` with acquire ordering, so everything written before
// mark_ready() is visible to it. A created segment is unlinked when its Segment is destroyed unless
// persist() was called: a creation that throws or unwinds leaves nothing in /dev/shm.
//
// Threading: a Segment is a move-only handle owned by one thread; the memory it maps is shared and
// its meaning (which atomics, which orderings) is defined by each kind's header (dataset_cache.hpp,
// weight_slab.hpp, ...). No interprocess mutexes anywhere: a process killed holding one would wedge
// the node.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "common/file_descriptor.hpp"

namespace tandem::shm {

inline constexpr std::uint64_t kMagic = 0x004d485344'4e4154ULL;  // "TANDSHM\0" little-endian
inline constexpr std::size_t kHeaderBytes = 4096;
inline constexpr std::size_t kDescriptorOffset = 64;
inline constexpr std::size_t kDescriptorBytes = kHeaderBytes - kDescriptorOffset;
inline constexpr std::size_t kPayloadAlignment = 2u << 20;

enum class Kind : std::uint32_t { dataset = 1, weights = 2, experience = 3, control = 4, weights_cuda = 5, reduce = 6 };
std::string_view kind_name(Kind kind);

enum class Ready : std::uint32_t { writing = 0, ready = 1 };

struct SegmentHeader {
  std::uint64_t magic;
  Kind kind;
  std::uint32_t layout_version;
  std::uint32_t creator_uid;
  std::uint32_t creator_pid;
  std::uint64_t created_unix_ns;     // wall clock (common/clock.hpp: unix_ns)
  std::uint64_t total_size;          // bytes of the whole object, header included
  std::uint64_t payload_offset;      // multiple of kPayloadAlignment
  std::uint64_t header_checksum;     // XXH3-64 of bytes [0, 48) then [64, 4096)
  std::atomic<std::uint32_t> ready;  // Ready; stored last, with release ordering
  // The low 32 bits of the creator's start time (/proc/<pid>/stat field 22), so that a pid reused
  // by a later process does not keep a dead creator's segment alive; 0: not recorded.
  std::uint32_t creator_start;
};
static_assert(std::is_standard_layout_v<SegmentHeader>);
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);
static_assert(sizeof(SegmentHeader) == kDescriptorOffset);
static_assert(offsetof(SegmentHeader, header_checksum) == 48);
static_assert(offsetof(SegmentHeader, ready) == 56);

// Every segment's name is built here, returned without the leading slash (as Boost.Interprocess and
// /dev/shm spell it). The part after the job is the kind's name (kind_name), so a name says its kind:
//   /tandem.data.<dataset>            dataset cache
//   /tandem.<job>.weights             weight slab            /tandem.<job>.weights.cuda   device slab
//   /tandem.<job>.exp                 experience rings       /tandem.<job>.ctl            control block
//   /tandem.<job>.reduce-<pid>[-slots]  node reduce group, <pid> rank 0's (one per group that process makes)
// Names are checked: [A-Za-z0-9_-], 1..64 characters. Python builds a name in one place,
// tandem.slab_name (python/tandem/weights.py), through job_segment_name in the extension.
std::string dataset_segment_name(std::string_view dataset);
// `kind`: weights, weights_cuda, experience or control (a logic_error for the others, named above).
std::string job_segment_name(std::string_view job, Kind kind);
std::string reduce_segment_name(std::string_view job, std::uint32_t rank0_pid, bool slots);
std::string job_segment_prefix(std::string_view job);  // "tandem.<job>.": every name above of that job
void check_name_part(std::string_view what, std::string_view value);

class Segment {
 public:
  enum class Access { read_only, read_write };

  // Creates `name` exclusively (mode 0600) with room for payload_bytes after the header; checks and
  // reserves /dev/shm space first, so a full /dev/shm is a clear error here and never a SIGBUS later.
  // `exists_fix` is appended to the error when the name is taken (e.g. "pass --force to replace it").
  static Segment create(const std::string& name, Kind kind, std::uint32_t layout_version, std::size_t payload_bytes,
                        std::string_view exists_fix);

  // Maps an existing segment after checking, in order: it exists, it belongs to this uid (checked
  // before opening, so another user's segment is "owned by uid N", never "does not exist"; root is
  // refused too: a job never adopts another user's segment), it is large enough to hold a header,
  // magic, ready, header checksum, kind, layout version, then size and payload offset against the
  // real mapping. Each failure is a UserError naming the segment, what is wrong, and `fix`.
  static Segment attach(const std::string& name, Kind kind, std::uint32_t layout_version, Access access,
                        std::string_view fix);

  static bool exists(const std::string& name);
  static bool unlink(const std::string& name);  // false if it did not exist (or could not be removed)

  // What a command that removes a segment on a user's behalf reports: never "removed" or "not
  // found" for a name it was not allowed to remove.
  struct Removal {
    enum Result { removed, absent, denied } result;
    std::uint32_t owner_uid;  // of the object, when it existed
    int error;                // errno when denied
  };
  static Removal remove(const std::string& name);
  // "" when `name` belongs to this uid (or does not exist), else "owned by uid N".
  static std::string foreign_owner(const std::string& name);

  Segment() = default;
  Segment(Segment&& other) noexcept;
  Segment& operator=(Segment&& other) noexcept;
  ~Segment();

  void mark_ready();  // creator only, once, after descriptor and payload are written
  void persist();     // creator only: keep the object after this handle is destroyed
  void unlink_now();  // remove the name now (mappings stay valid until destroyed)
  // Whether /dev/shm still names this object: false once anyone removed it (`tandem shm rm`, gc, a
  // replacement), after which nobody can attach to what this handle writes. One fstat.
  bool linked() const;
  // Creator only: maps [offset, offset + bytes) of this process's mapping writable now, so that a
  // later first write takes no page faults (posix_fallocate reserved the pages, but each is still
  // faulted into this mapping on first touch: ~0.8 s for 2.4 GB, on whichever call touches it first).
  void prefault_for_write(std::size_t offset, std::size_t bytes);

  const std::string& name() const { return name_; }
  SegmentHeader& header() const { return *reinterpret_cast<SegmentHeader*>(base_); }
  std::byte* descriptor() const { return base_ + kDescriptorOffset; }
  std::byte* payload() const { return base_ + header().payload_offset; }
  std::size_t payload_size() const { return size_ - header().payload_offset; }
  std::byte* base() const { return base_; }
  std::size_t size() const { return size_; }
  int fd() const { return fd_.get(); }

  template <class T>
  T& descriptor_as() const {
    static_assert(std::is_standard_layout_v<T> && sizeof(T) <= kDescriptorBytes);
    return *reinterpret_cast<T*>(descriptor());
  }

 private:
  void reset() noexcept;
  // Removes the name only while it still names this object, so that a handle whose object was
  // removed and replaced by someone else's never removes theirs.
  void unlink_if_ours() noexcept;
  std::string name_;
  std::byte* base_ = nullptr;
  std::size_t size_ = 0;
  FileDescriptor fd_;
  bool unlink_on_destroy_ = false;
};

std::uint64_t header_checksum(const std::byte* header);

// Free bytes in /dev/shm, capped by TANDEM_SHM_LIMIT (bytes; K/M/G suffixes are powers of 1024) when that is set:
// the cap lets tests and cautious users simulate a small /dev/shm.
std::uint64_t shm_free_bytes();

// What `tandem shm ls` shows: every /dev/shm object whose name starts with "tandem.".
struct SegmentInfo {
  std::string name;
  std::uint32_t owner_uid = 0;
  bool ours = false;  // owned by this process's uid
  std::uint64_t bytes = 0;
  bool valid = false;   // magic and checksum good
  std::string problem;  // why not valid, if not
  Kind kind{};
  std::uint32_t layout_version = 0;
  std::uint32_t creator_pid = 0;
  bool creator_alive = false;
  bool ready = false;
  std::uint64_t created_unix_ns = 0;
};
std::vector<SegmentInfo> list_segments();

// Unlinks `name` if the process receives SIGINT, SIGTERM or SIGHUP before the guard is destroyed,
// then re-raises the signal. For long creations (a preload) that a user may interrupt.
class UnlinkOnSignal {
 public:
  explicit UnlinkOnSignal(const std::string& name);
  ~UnlinkOnSignal();
  UnlinkOnSignal(const UnlinkOnSignal&) = delete;
  UnlinkOnSignal& operator=(const UnlinkOnSignal&) = delete;
};

std::uint64_t align_up(std::uint64_t value, std::uint64_t alignment);

}  // namespace tandem::shm
