#include "actor/follower.hpp"

#include <torch/types.h>
#include <torch/utils.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <memory>

#include "common/clock.hpp"
#include "common/error.hpp"
#include "common/process.hpp"
#include "common/torch/bf16_slot.hpp"

namespace tandem::actor {

Follower::Follower(const std::string& slab_name, FlatParams& params, FollowerOptions options)
    : reader_(shm::WeightSlabReader::attach(slab_name, options.mode == LoadMode::zero_copy ? 2 : 1)),
      params_(params),
      options_(std::move(options)) {
  const shm::SlabDescriptor& d = reader_.descriptor();
  if (d.model_signature != params_.signature())
    fail(ErrorKind::shape,
         "weight slab '/{}' holds model '{}' with signature {:016x}, but this actor's model '{}' has signature {}: "
         "build the actor with the learner's model (same architecture, sizes and dtypes)",
         slab_name, d.model, d.model_signature, options_.model, params_.signature_hex());
  bf16_ = d.publish_dtype == shm::DType::bf16;
  const at::Tensor& flat = params_.buffer();
  if (options_.mode == LoadMode::zero_copy && (bf16_ || !flat.is_cpu()))
    fail(
        "weight slab '/{}': zero-copy loading needs a CPU model and a float32 slab ({} model, {} slab): use copy "
        "mode, or publish without bf16",
        slab_name, flat.device().str(), shm::dtype_name(d.publish_dtype));
  if (flat.is_cuda() && options_.mode == LoadMode::copy) attach_device_slab(slab_name, flat.device().index());
  if (flat.is_cuda() && !device_reader_) {
    cuda::set_device(flat.device().index());
    // Registered read-only: this process maps the slots PROT_READ.
    registration_ = cuda::HostRegistration(const_cast<std::byte*>(reader_.slots_begin()), reader_.slots_span_bytes(),
                                           /*read_only=*/true);
    stream_ = cuda::Stream::create(flat.device().index());
  }
}

// The learner creates its device slabs before the host slab, so they exist by now if they will at all.
// One on this GPU is read within it; else one on a GPU with a direct path to ours (NVLink, PCIe peer
// access) GPU to GPU; else none: the host slab. Attach errors (stale, corrupt, foreign) propagate: they
// name the segment and the fix.
void Follower::attach_device_slab(const std::string& slab_name, int device) {
  const cuda::DeviceIdentity ours = cuda::device_identity(device);
  std::optional<shm::WeightSlabReader> chosen;
  int chosen_gpu = -1;
  for (unsigned copy = 0; copy < shm::kMaxDeviceSlabs; ++copy) {
    const std::string name = shm::device_slab_name(slab_name, copy);
    if (!std::filesystem::exists("/dev/shm/" + name)) break;
    shm::WeightSlabReader reader = shm::WeightSlabReader::attach_device(name, 1);
    if (reader.descriptor().model_signature != reader_.descriptor().model_signature ||
        reader.descriptor().slot_bytes != reader_.descriptor().slot_bytes)
      fail(
          "device weight slab '/{}' does not match host slab '/{}' (another model): remove both (`tandem shm gc`) and "
          "restart the job",
          name, slab_name);
    // CUDA opens no handle in the process that exported it (a learner following its own slab).
    if (reader.device_info().exporter_pid == static_cast<std::uint64_t>(::getpid())) return;
    std::array<std::uint8_t, 16> uuid{};
    std::memcpy(uuid.data(), reader.device_info().gpu_uuid, uuid.size());
    const int gpu = cuda::device_with_uuid(uuid);
    if (gpu < 0 || !cuda::can_access_peer(device, gpu)) continue;
    const bool local = uuid == ours.uuid;
    if (!chosen || local) {
      chosen = std::move(reader);
      chosen_gpu = gpu;
    }
    if (local) break;
  }
  if (!chosen) return;
  cuda::IpcHandle handle;
  std::memcpy(handle.data(), chosen->device_info().ipc_handle, handle.size());
  mapping_ = cuda::IpcMapping::open(handle, device);
  chosen->bind_device_slots(static_cast<const std::byte*>(mapping_.data()));
  stream_ = cuda::Stream::create(device);
  device_reader_ = std::move(chosen);
  device_slab_gpu_ = chosen_gpu;
}

bool Follower::exporter_alive() const {
  return process_alive(static_cast<std::uint32_t>(device_reader_->device_info().exporter_pid));
}

void Follower::fall_back_to_host_slab() {
  device_reader_.reset();  // frees its lease entry
  device_slab_gpu_ = -1;
  mapping_ = cuda::IpcMapping();
  const at::Tensor& flat = params_.buffer();
  registration_ = cuda::HostRegistration(const_cast<std::byte*>(reader_.slots_begin()), reader_.slots_span_bytes(),
                                         /*read_only=*/true);
  stream_ = cuda::Stream::create(flat.device().index());
}

std::optional<std::uint64_t> Follower::update() {
  // A tensor the module rebound since (model.to(), p.data = t) would miss every load: point it back at
  // the buffer, which holds the version loaded last, or refuse a converted one by name.
  params_.adopt_rebound(FlatParams::Values::keep);
  if (!has_new()) return std::nullopt;
  if (device_reader_ && !exporter_alive()) fall_back_to_host_slab();
  auto lease = active().lease_latest();
  if (!lease || lease->version() <= version_) return std::nullopt;
  const std::uint64_t t0 = monotonic_ns();
  const at::Tensor& flat = params_.buffer();
  if (options_.mode == LoadMode::zero_copy) {
    // The slot mapped copy-on-write for this lease: the buffer's deleter keeps it mapped.
    auto mapping = std::make_shared<shm::PrivateSlotMapping>(reader_, *lease);
    std::byte* data = mapping->data();
    const auto bytes = static_cast<std::int64_t>(mapping->bytes());
    params_.rebind(torch::from_blob(
        data, {bytes}, [mapping = std::move(mapping)](void*) mutable { mapping.reset(); },
        torch::TensorOptions().dtype(torch::kUInt8)));
    held_ = std::move(*lease);  // releases the slot the model ran on until now
  } else if (flat.is_cuda()) {
    load_device(*lease);
    if (device_reader_ && !exporter_alive()) {  // it may have read freed memory: load it again from the host slab
      lease.reset();
      fall_back_to_host_slab();
      return update();
    }
  } else {
    load_copy(*lease);
  }
  const shm::ReadLease& now = options_.mode == LoadMode::zero_copy ? held_ : *lease;
  version_ = now.version();
  step_ = now.step();
  last_load_ms_ = double(monotonic_ns() - t0) / 1e6;
  return version_;
}

// No still_valid() check after the copy: a held lease pins its slot, and the writer never clears a
// live owner's lease (it frees only an entry it claimed from the owner word it found dead).
void Follower::load_copy(const shm::ReadLease& lease) {
  const at::Tensor& flat = params_.buffer();
  torch::NoGradGuard no_grad;
  if (!bf16_) {
    std::memcpy(flat.data_ptr(), lease.data(), lease.bytes());
    return;
  }
  unpack_bf16_slot(lease.data(), Bf16SlotLayout::of(params_), flat);
}

// H2D from the pinned slot (or D2D from the mapped device slot: copy_async lets unified addressing
// pick the direction) on our stream; the lease is held until the copy has finished.
void Follower::load_device(const shm::ReadLease& lease) {
  const at::Tensor& flat = params_.buffer();
  torch::NoGradGuard no_grad;
  if (!bf16_) {
    cuda::copy_async(flat.data_ptr(), lease.data(), lease.bytes(), stream_.get());
    stream_.synchronize();
    return;
  }
  // bf16: bring the bytes over as they are, then widen on the GPU (torch's current stream).
  auto staging = torch::empty({static_cast<std::int64_t>(lease.bytes())}, flat.options());
  cuda::copy_async(staging.data_ptr(), lease.data(), lease.bytes(), stream_.get());
  stream_.synchronize();
  unpack_bf16_slot(static_cast<const std::byte*>(staging.data_ptr()), Bf16SlotLayout::of(params_), flat);
}

}  // namespace tandem::actor
