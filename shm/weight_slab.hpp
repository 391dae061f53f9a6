// The weight slab /tandem.<job>.weights: K full copies ("slots") of a model's flat parameters,
// written by one learner and read by any number of actors, never torn and never blocking the writer.
//
// Layout (docs/FORMAT.md, "Weight slab"; absolute offsets from the start of the segment):
//   [0, 64)                 SegmentHeader (segment.hpp), kind = weights
//   [64, ...)               SlabDescriptor: model name and signature, counts, offsets below
//   [control_offset, +4096) SlabControl (latest, counters) then SlotHeader[num_slots]; 64 B each
//   [lease_offset, ...)     LeaseEntry[num_leases], 64 B each, page aligned and padded to a page
//   [table_offset, ...)     TensorEntry[num_tensors]: where each tensor lies inside a slot
//   [slots_offset + i * slot_stride, + slot_bytes)   slot i, 2 MiB aligned
//
// The contract
//  * Processes and threads. One writer: the process that called WeightSlabWriter::create, from one
//    thread at a time (begin_write / commit / abort are not thread-safe against each other; the
//    learner's Publisher serialises them). Any number of readers in any processes; a
//    WeightSlabReader and its ReadLeases belong to one thread.
//  * Seqlock per slot (SlotHeader::seq, even = stable, odd = being written). Writer: seq = odd
//    (relaxed), seq_cst fence, write payload and header fields (relaxed atomics), seq = even
//    (release), then `latest` = (version << 8 | slot) (release). Reader: latest (acquire), seq
//    (acquire) must be even, read, acquire fence, seq again (relaxed): equal = the read is one
//    complete version, else discard it. This alone makes a torn read impossible (a Python reader
//    relies on nothing else); leases only make a read impossible to *lose*.
//  * Leases. A reader owns lease entries (owner = pid | start-time << 32), claimed by CAS from 0 or a
//    dead owner's word. To lease, it stores (pid << 32 | slot + 1) in its entry, issues a seq_cst fence,
//    then checks that the slot's seq is even and its version is the one `latest` named. The writer marks
//    a slot odd, issues a seq_cst fence, then re-scans the leases: by this Dekker pairing either the
//    writer sees the lease (and backs off, restoring seq) or the reader sees the odd seq (and retries). A
//    held lease therefore pins its slot's bytes until released (store 0, release); nobody else clears it.
//  * The writer never waits. It never picks the latest slot or a leased one, prefers the free slot
//    holding the oldest version, and with no free slot returns nothing from begin_write() and
//    counts a skip. Before skipping it frees dead owners' entries (process_alive: gone, a zombie, a
//    reused pid): CAS owner from the word found dead to its own (acq_rel; a reader that claimed the
//    entry meanwhile keeps it, lease and all), then lease = 0, owner = 0 (release).
//  * Readers map the segment read-write (needed to open it for the lease table) and immediately
//    mprotect everything but the lease pages read-only: one object with one lifetime, yet a stray
//    write into the payload by a reader faults instead of corrupting the weights everyone runs.
//    A separate lease segment would give the same protection at the price of a second name that
//    must be created, attached and unlinked in step with the first.
//  * Misuse: committing a version not above the latest one, or a slot not begun, throws
//    std::logic_error; a second writer cannot exist (create is exclusive); a reader that ignores
//    leases can only see reads fail validation, never a torn one accepted.
//  * Device slab (/tandem.<job>.weights.cuda, kind weights_cuda): the same descriptor, control block,
//    lease table and tensor table, but the slots live in one cudaMalloc'ed buffer on the writer's GPU,
//    exported with cudaIpcGetMemHandle; DeviceSlabInfo (descriptor bytes [256, +128), covered by the
//    segment's header checksum like the rest of the descriptor) records the handle, the GPU and the
//    buffer, and slots_offset is 0 (no payload in the segment). The seqlock and lease protocol is
//    unchanged: only where slot i's bytes lie differs. This code never touches device memory: the
//    writer is handed the device pointer, a reader binds the one it mapped (common/cuda_ipc.hpp);
//    copy_latest() is host-only and refuses a device slab.
//  * Waiting. A reader may sleep in FUTEX_WAIT (shared, any process) on the low 32 bits of `latest`,
//    which change with every commit; the writer issues FUTEX_WAKE on that word after each commit.
//    A reader therefore learns of a version when it is committed, without polling; a waiter that
//    misses a wake (a writer of another build) still wakes at the end of its time slice.
//  * Memory model caveat: payload bytes are copied with plain memcpy while the writer may be
//    writing them (only without a lease); the seqlock check discards such copies. This is the
//    classic seqlock data race, benign on every platform we run on, and not TSan-clean.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shm/dtype.hpp"
#include "shm/segment.hpp"

namespace tandem::shm {

inline constexpr std::uint32_t kWeightSlabLayoutVersion = 1;
inline constexpr std::uint32_t kMaxSlots = 32;  // SlabControl + headers fit one page
inline constexpr std::uint32_t kDefaultSlots = 4;
inline constexpr std::uint32_t kDefaultLeases = 256;
inline constexpr std::uint32_t kMaxLeases = 65536;
inline constexpr std::size_t kTensorNameBytes = 160;
inline constexpr std::size_t kTensorMaxDims = 8;
inline constexpr std::size_t kSlotAlignment = kPayloadAlignment;  // 2 MiB

struct SlabDescriptor {
  char model[64];                 // free text: "resnet18", "bench", a TorchScript path's stem
  std::uint64_t model_signature;  // FlatParams signature of the writer's model (docs/FORMAT.md)
  std::uint64_t table_checksum;   // XXH3-64 of the TensorEntry array
  DType publish_dtype;            // dtype float32 tensors are published in (f32 or bf16)
  std::uint32_t num_slots;
  std::uint32_t num_leases;
  std::uint32_t num_tensors;
  std::uint64_t slot_bytes;      // bytes of one published copy
  std::uint64_t slot_stride;     // distance between slots, multiple of 2 MiB
  std::uint64_t control_offset;  // SlabControl
  std::uint64_t lease_offset;    // LeaseEntry[num_leases]
  std::uint64_t lease_bytes;     // multiple of 4096
  std::uint64_t table_offset;    // TensorEntry[num_tensors]
  std::uint64_t slots_offset;    // slot 0
};
static_assert(std::is_standard_layout_v<SlabDescriptor> && std::is_trivially_copyable_v<SlabDescriptor>);
static_assert(offsetof(SlabDescriptor, model_signature) == 64);
static_assert(offsetof(SlabDescriptor, publish_dtype) == 80);
static_assert(offsetof(SlabDescriptor, slot_bytes) == 96);
static_assert(offsetof(SlabDescriptor, slots_offset) == 144);
static_assert(sizeof(SlabDescriptor) == 152 && sizeof(SlabDescriptor) <= kDescriptorBytes);

// Written only by the writer. `latest` = version << 8 | slot; 0 until the first commit.
struct alignas(64) SlabControl {
  std::atomic<std::uint64_t> latest;
  std::atomic<std::uint64_t> published;  // commits
  std::atomic<std::uint64_t> skipped;    // begin_write found no free slot
  std::atomic<std::uint64_t> reclaimed;  // leases cleared because their owner died
  std::atomic<std::uint64_t> writer_pid;
  std::uint64_t reserved[3];
};

// One per slot, written only by the writer inside the slot's seqlock.
struct alignas(64) SlotHeader {
  std::atomic<std::uint64_t> seq;          // odd while being written
  std::atomic<std::uint64_t> version;      // 0 = never written
  std::atomic<std::uint64_t> step;         // the training step the weights come from
  std::atomic<std::uint64_t> bytes;        // bytes of payload written
  std::atomic<std::uint64_t> snapshot_ns;  // CLOCK_MONOTONIC when publish was called
  std::atomic<std::uint64_t> publish_ns;   // CLOCK_MONOTONIC at commit
  std::uint64_t reserved[2];
};

// One per reader lease; readers write their own entries, the writer frees dead owners' ones.
struct alignas(64) LeaseEntry {
  std::atomic<std::uint64_t> owner;    // 0 = free, else pid | (start time ticks & 0xffffffff) << 32
  std::atomic<std::uint64_t> lease;    // 0 = none, else pid << 32 | (slot + 1)
  std::atomic<std::uint64_t> version;  // the version leased (informational)
  std::uint64_t reserved[5];
};

// A device slab's export record, at descriptor offset kDeviceInfoOffset (after SlabDescriptor).
struct DeviceSlabInfo {
  std::uint8_t ipc_handle[64];  // cudaIpcMemHandle_t of the slot buffer (slot i at i * slot_stride)
  std::uint8_t gpu_uuid[16];    // cudaDeviceProp::uuid of the exporter's GPU: readers compare theirs
  char pci_bus_id[32];          // cudaDeviceGetPCIBusId, NUL-terminated, for messages
  std::uint64_t buffer_bytes;   // the allocation's size, >= num_slots * slot_stride
  std::uint64_t exporter_pid;   // the allocation dies with this process
};
inline constexpr std::size_t kDeviceInfoOffset = 256;  // from the start of the descriptor
static_assert(std::is_standard_layout_v<DeviceSlabInfo> && std::is_trivially_copyable_v<DeviceSlabInfo>);
static_assert(offsetof(DeviceSlabInfo, gpu_uuid) == 64 && offsetof(DeviceSlabInfo, pci_bus_id) == 80);
static_assert(offsetof(DeviceSlabInfo, buffer_bytes) == 112 && offsetof(DeviceSlabInfo, exporter_pid) == 120);
static_assert(sizeof(DeviceSlabInfo) == 128 && kDeviceInfoOffset + sizeof(DeviceSlabInfo) <= kDescriptorBytes);

// The device slabs that go with host slab `slab_name`: "<slab_name>.cuda" on the learner's GPU, and
// "<slab_name>.cuda.<k>" (k = 1 .. kMaxDeviceSlabs - 1) on other GPUs of the node.
inline constexpr unsigned kMaxDeviceSlabs = 16;
inline std::string device_slab_name(const std::string& slab_name, unsigned copy = 0) {
  return copy == 0 ? slab_name + ".cuda" : slab_name + ".cuda." + std::to_string(copy);
}

struct TensorEntry {
  char name[kTensorNameBytes];  // NUL-terminated
  DType dtype;
  std::uint32_t ndim;
  std::uint64_t shape[kTensorMaxDims];
  std::uint64_t offset;  // from the start of a slot
  std::uint64_t bytes;
};

static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
static_assert(std::is_standard_layout_v<SlabControl> && sizeof(SlabControl) == 64);
static_assert(std::is_standard_layout_v<SlotHeader> && sizeof(SlotHeader) == 64);
static_assert(offsetof(SlotHeader, version) == 8 && offsetof(SlotHeader, publish_ns) == 40);
static_assert(std::is_standard_layout_v<LeaseEntry> && sizeof(LeaseEntry) == 64);
static_assert(offsetof(LeaseEntry, lease) == 8);
static_assert(std::is_standard_layout_v<TensorEntry> && std::is_trivially_copyable_v<TensorEntry>);
static_assert(offsetof(TensorEntry, dtype) == 160 && offsetof(TensorEntry, shape) == 168);
static_assert(offsetof(TensorEntry, offset) == 232 && sizeof(TensorEntry) == 248);
static_assert(sizeof(SlabControl) + kMaxSlots * sizeof(SlotHeader) <= 4096);

// `latest` packs the version above 8 bits of slot: versions stop at 2^56 - 1.
inline constexpr std::uint64_t kMaxVersion = (std::uint64_t{1} << 56) - 1;
inline constexpr std::uint64_t pack_latest(std::uint64_t version, std::uint32_t slot) { return version << 8 | slot; }
inline constexpr std::uint64_t latest_version(std::uint64_t latest) { return latest >> 8; }
inline constexpr std::uint32_t latest_slot(std::uint64_t latest) { return static_cast<std::uint32_t>(latest & 0xff); }

// What the writer declares.
struct TensorSpec {
  std::string name;
  DType dtype;
  std::vector<std::uint64_t> shape;
  std::uint64_t offset;
  std::uint64_t bytes;
};
struct SlabSpec {
  std::string model;
  std::uint64_t model_signature = 0;
  DType publish_dtype = DType::f32;
  std::vector<TensorSpec> tensors;
  std::uint64_t slot_bytes = 0;  // >= every tensor's offset + bytes
  std::uint32_t num_slots = kDefaultSlots;
  std::uint32_t num_leases = kDefaultLeases;
};

// ---- writer -------------------------------------------------------------------------------------

// Counts a name among this process's live writers for as long as it lives (move-only). A process may
// hold its own slab's name twice only by mistake (a notebook cell run twice): the second writer would
// replace the first's segment while the first goes on publishing into an object nobody can attach to.
class LiveWriterMark {
 public:
  LiveWriterMark() = default;
  explicit LiveWriterMark(std::string name);
  LiveWriterMark(LiveWriterMark&& o) noexcept;
  LiveWriterMark& operator=(LiveWriterMark&& o) noexcept;
  ~LiveWriterMark();
  LiveWriterMark(const LiveWriterMark&) = delete;
  LiveWriterMark& operator=(const LiveWriterMark&) = delete;
  static bool held(const std::string& name);  // thread-safe

 private:
  void release() noexcept;
  std::string name_;
};

class WeightSlabWriter {
 public:
  struct Slot {
    std::uint32_t index;
    std::byte* data;    // slot_bytes writable bytes
    std::uint64_t seq;  // the odd value this write holds
  };
  struct Stats {
    std::uint64_t published, skipped, reclaimed, latest_version;
  };

  // Creates the segment exclusively. With `force`, an existing segment of that name is unlinked
  // first without checking whether its writer still runs (processes that mapped it keep their
  // mappings, but nobody can attach to it any more).
  static WeightSlabWriter create(const std::string& name, const SlabSpec& spec, bool force = false);
  // A device slab (see the contract): slots at device_slots + i * slot_stride, in the allocation
  // `info` describes. device_slab_bytes() says how much to allocate.
  static WeightSlabWriter create_on_device(const std::string& name, const SlabSpec& spec, DeviceSlabInfo info,
                                           std::byte* device_slots);
  static std::uint64_t device_slab_bytes(const SlabSpec& spec);

  WeightSlabWriter() = default;
  WeightSlabWriter(WeightSlabWriter&&) noexcept = default;
  WeightSlabWriter& operator=(WeightSlabWriter&&) noexcept = default;

  // Picks a free slot and opens its seqlock; nullopt (and `skipped` + 1) when every slot but the
  // latest is leased by a live reader. Never waits. Not reentrant: one open write at a time.
  [[nodiscard]] std::optional<Slot> begin_write();
  // Closes the seqlock and makes the slot the latest. `version` must exceed the latest version.
  void commit(const Slot& slot, std::uint64_t version, std::uint64_t step, std::uint64_t bytes,
              std::uint64_t snapshot_ns);
  void abort(const Slot& slot);  // gives the slot back unchanged (seq restored)

  // Clears leases whose owner is dead and frees their entries; returns how many leases it cleared.
  std::uint32_t reclaim_dead();

  Stats stats() const;
  const SlabDescriptor& descriptor() const { return segment_.descriptor_as<SlabDescriptor>(); }
  std::byte* slot_data(std::uint32_t index) const;
  std::byte* slots_begin() const { return slot_data(0); }
  std::size_t slots_span_bytes() const;  // num_slots * slot_stride: everything a D2H may target
  const std::string& name() const { return segment_.name(); }
  std::uint64_t latest_version() const { return latest_version_; }
  // Leaves the segment in /dev/shm when this writer is destroyed (a launcher removes it later).
  void persist() { segment_.persist(); }
  // False once the segment was removed from /dev/shm (see Segment::linked): readers cannot find it.
  bool linked() const { return segment_.linked(); }
  // Whether a writer of this process writes `name` now; a persisted slab whose writer is gone does not count.
  static bool live_in_this_process(const std::string& name) { return LiveWriterMark::held(name); }

 private:
  static WeightSlabWriter create_segment(const std::string& name, const SlabSpec& spec, bool force,
                                         const DeviceSlabInfo* device, std::byte* device_slots);
  std::uint32_t leased_mask() const;
  Segment segment_;
  LiveWriterMark live_;
  std::byte* slots_ = nullptr;  // slot 0: in the segment, or on the GPU for a device slab
  std::uint64_t latest_version_ = 0;
  std::uint32_t latest_slot_ = ~0u;
  bool writing_ = false;
};

// ---- reader -------------------------------------------------------------------------------------

struct LeaseInfo {  // one row of the lease table, for inspection and tests
  std::uint32_t owner_pid;
  bool has_lease;
  std::uint32_t slot;
  std::uint64_t version;
};

class WeightSlabReader;

// A leased slot: its bytes stay exactly `version` until this handle is released or destroyed.
class ReadLease {
 public:
  ReadLease() = default;
  ReadLease(ReadLease&& o) noexcept;
  ReadLease& operator=(ReadLease&& o) noexcept;
  ~ReadLease();
  void release();
  explicit operator bool() const { return entry_ != nullptr; }

  std::uint64_t version() const { return version_; }
  std::uint64_t step() const { return step_; }
  std::uint64_t bytes() const { return bytes_; }
  std::uint64_t snapshot_ns() const { return snapshot_ns_; }
  std::uint64_t publish_ns() const { return publish_ns_; }
  std::uint32_t slot() const { return slot_; }
  const std::byte* data() const { return data_; }
  // The seqlock check: true while the slot still holds this version untouched. Always true for a
  // live lease; tests and paranoid readers call it after reading.
  [[nodiscard]] bool still_valid() const;

 private:
  friend class WeightSlabReader;
  LeaseEntry* entry_ = nullptr;
  const SlotHeader* header_ = nullptr;
  const std::byte* data_ = nullptr;
  std::uint64_t seq_ = 0, version_ = 0, step_ = 0, bytes_ = 0, snapshot_ns_ = 0, publish_ns_ = 0;
  std::uint32_t slot_ = 0;
};

class WeightSlabReader {
 public:
  // Attaches (see the contract for the mapping), claims `leases` lease entries for this reader.
  static WeightSlabReader attach(const std::string& name, std::uint32_t leases = 2);
  // Attaches a device slab; its slots have no address here until bind_device_slots() is given the
  // mapping of device_info().ipc_handle (lease_latest() refuses until then).
  static WeightSlabReader attach_device(const std::string& name, std::uint32_t leases = 2);
  bool on_device() const { return device_; }
  const DeviceSlabInfo& device_info() const;
  void bind_device_slots(const std::byte* mapped) { slots_ = mapped; }

  WeightSlabReader() = default;
  WeightSlabReader(WeightSlabReader&&) noexcept;
  WeightSlabReader& operator=(WeightSlabReader&&) noexcept;
  ~WeightSlabReader();  // frees the entries; leases still held by ReadLeases must be gone first

  const SlabDescriptor& descriptor() const { return segment_.descriptor_as<SlabDescriptor>(); }
  std::span<const TensorEntry> tensors() const;
  const std::string& name() const { return segment_.name(); }

  // One acquire load: the newest committed version (0 = nothing published yet).
  std::uint64_t latest_version() const;
  // Sleeps until a version newer than `newer_than` is committed or `limit` has passed; returns the
  // latest version then. Woken by the writer's commit (see "Waiting" in the contract), not polled.
  std::uint64_t wait_newer(std::uint64_t newer_than, std::chrono::nanoseconds limit) const;
  // Leases the latest version; nullopt when nothing is published, every entry of this reader is in
  // use, or the writer kept overtaking for `attempts` tries.
  [[nodiscard]] std::optional<ReadLease> lease_latest(int attempts = 64);
  // Lease-free read of the latest version into dst (>= slot_bytes): the numpy reader's protocol.
  // Returns the version read, or nullopt when the copy was overwritten meanwhile (try again).
  struct Copied {
    std::uint64_t version, step, bytes, snapshot_ns, publish_ns;
  };
  [[nodiscard]] std::optional<Copied> copy_latest(std::byte* dst) const;

  const std::byte* slot_data(std::uint32_t index) const;
  const std::byte* slots_begin() const { return slot_data(0); }
  std::size_t slots_span_bytes() const;
  // The segment's descriptor (to map a slot a second time, e.g. copy-on-write: slot i lies at file
  // offset slots_offset + i * slot_stride of this descriptor).
  int fd() const { return segment_.fd(); }
  std::vector<LeaseInfo> lease_table() const;
  WeightSlabWriter::Stats stats() const;

 private:
  static WeightSlabReader attach_kind(const std::string& name, std::uint32_t leases, bool device);
  Segment segment_;
  const std::byte* slots_ = nullptr;  // slot 0 (null: a device slab not bound yet)
  bool device_ = false;
  std::vector<LeaseEntry*> entries_;  // ours; one is free while its lease word is 0
  std::uint64_t owner_word_ = 0;
  friend class ReadLease;
};

// A leased slot mapped a second time, copy-on-write (MAP_PRIVATE), for code that may write where it
// reads (a Python view of a weight, a model run zero-copy whose BatchNorm statistics update in place):
// reads share the slab's pages; a write lands in a private copy of the touched pages, seen through
// this mapping only, where the reader's own PROT_READ mapping would kill the process. Make one per
// lease: a page once written stays private for the mapping's life, so a mapping reused for a later
// version in the same slot would show that page stale. Costs one mmap and first-touch page faults.
// Host slabs only. Move-only; unmapped on destruction (the lease may be released before).
class PrivateSlotMapping {
 public:
  PrivateSlotMapping(const WeightSlabReader& reader, const ReadLease& lease);
  PrivateSlotMapping(PrivateSlotMapping&& o) noexcept;
  PrivateSlotMapping& operator=(PrivateSlotMapping&& o) noexcept;
  ~PrivateSlotMapping();
  std::byte* data() const { return data_; }
  std::uint64_t bytes() const { return bytes_; }  // the lease's payload

 private:
  std::byte* data_ = nullptr;
  std::size_t mapped_ = 0;
  std::uint64_t bytes_ = 0;
};

}  // namespace tandem::shm
