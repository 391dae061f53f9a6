#include "learner/model_publisher.hpp"

#include <torch/types.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "common/error.hpp"
#include "common/process.hpp"
#include "shm/segment.hpp"
#include "common/torch/bf16_slot.hpp"

#ifdef TANDEM_TORCH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

namespace tandem::learner {
namespace {

shm::DType slab_dtype(c10::ScalarType t, const std::string& name) {
  switch (t) {
    case c10::ScalarType::Float: return shm::DType::f32;
    case c10::ScalarType::Double: return shm::DType::f64;
    case c10::ScalarType::Half: return shm::DType::f16;
    case c10::ScalarType::BFloat16: return shm::DType::bf16;
    case c10::ScalarType::Long: return shm::DType::i64;
    case c10::ScalarType::Int: return shm::DType::i32;
    case c10::ScalarType::Short: return shm::DType::i16;
    case c10::ScalarType::Char: return shm::DType::i8;
    case c10::ScalarType::Byte: return shm::DType::u8;
    default:
      fail(
          "tensor '{}' has dtype {}, which the weight slab cannot publish: convert it (e.g. to float32) or "
          "make it a non-persistent buffer",
          name, c10::toString(t));
  }
}

cuda::StreamHandle current_stream(const at::Tensor& on) {
#ifdef TANDEM_TORCH_CUDA
  return reinterpret_cast<cuda::StreamHandle>(c10::cuda::getCurrentCUDAStream(on.device().index()).stream());
#else
  fail("the model is on {}, but this LibTorch has no CUDA: rebuild Tandem against a CUDA LibTorch", on.device().str());
#endif
}

// Unlinks `name` if its creator (the writer) has exited; a live writer's slab is an error here rather
// than two writers racing on one slab (two learner ranks of one node both publishing, or two jobs of
// one name), and so is a live writer of this very process (a second publisher of the same job: the
// first would go on publishing into an object nobody can attach to any more). The header records the
// creator's pid only: were it reused by a live process, this errs on the side of refusing, with a
// message that says which process to look at. An object Tandem did not make is never removed.
void remove_if_writer_dead(const std::string& name, shm::Kind kind) {
  for (const shm::SegmentInfo& info : shm::list_segments()) {
    if (info.name != name || !info.ours) continue;
    const bool tandem_made = info.valid || info.problem == "corrupt header" || info.problem.starts_with("abandoned") ||
                             info.problem == "being written";
    if (!tandem_made)
      fail(ErrorKind::foreign_segment,
           "'/dev/shm/{}' is not a Tandem segment ({}): Tandem removes only what it made; remove it yourself if "
           "nothing needs it (rm /dev/shm/{}) or use another job name",
           name, info.problem == "not a Tandem segment" ? "no Tandem header" : info.problem, name);
    if (info.valid && info.kind != kind)
      fail(
          ErrorKind::foreign_segment,
          "shared-memory segment '/{}' holds a {} segment, not a {} one: remove it (`tandem shm rm {}`) or use another job name",
          name, shm::kind_name(info.kind), shm::kind_name(kind), name);
    const bool this_process = info.creator_pid == static_cast<std::uint32_t>(::getpid());
    if (this_process && shm::WeightSlabWriter::live_in_this_process(name))
      fail(ErrorKind::segment_exists,
           "weight slab /{} is being written by live process {} (this one: another publisher of this job is still "
           "open): close it first (Python: pub.close(), or make it in a with-block) or use another job name",
           name, info.creator_pid);
    if (info.creator_alive && !this_process)
      fail(ErrorKind::segment_exists,
           "weight slab /{} is being written by live process {}: only one learner per node publishes (local rank "
           "0), and job names must be unique; stop that process or use another job name",
           name, info.creator_pid);
    shm::Segment::unlink(name);
  }
}

}  // namespace

shm::SlabSpec slab_spec_for(const FlatParams& params, const std::string& model, bool bf16) {
  const Bf16SlotLayout packed = Bf16SlotLayout::of(params);
  shm::SlabSpec spec;
  spec.model = model;
  spec.model_signature = params.signature();
  spec.publish_dtype = bf16 ? shm::DType::bf16 : shm::DType::f32;
  spec.slot_bytes = bf16 ? packed.slot_bytes() : params.bytes();
  for (const FlatTensorInfo& t : params.table()) {
    shm::TensorSpec s{t.name, slab_dtype(t.dtype, t.name), {}, t.offset, t.bytes};
    for (auto d : t.shape) s.shape.push_back(static_cast<std::uint64_t>(d));
    if (bf16) {
      if (packed.in_bf16_run(t.offset)) {
        s.dtype = shm::DType::bf16;
        s.bytes /= 2;
      }
      s.offset = packed.slot_offset(t.offset);
    }
    spec.tensors.push_back(std::move(s));
  }
  return spec;
}

ModelPublisher::ModelPublisher(const std::string& slab_name, FlatParams& params, const ModelPublisherOptions& options)
    : params_(&params) {
  shm::SlabSpec spec = slab_spec_for(params, options.model, options.bf16);
  spec.num_slots = options.slots;
  spec.num_leases = options.leases;
  const at::Tensor& flat = params.buffer();
  if (options.device_slab && flat.is_cuda()) {
    std::vector<int> gpus{flat.device().index()};
    for (int gpu : options.peer_gpus)
      if (std::find(gpus.begin(), gpus.end(), gpu) == gpus.end()) gpus.push_back(gpu);
    if (gpus.size() > shm::kMaxDeviceSlabs)
      fail("weight slab '/{}': {} GPUs with device slabs, at most {}: follow from fewer GPUs", slab_name, gpus.size(),
           shm::kMaxDeviceSlabs);
    for (unsigned copy = 0; copy < gpus.size(); ++copy) {
      const std::string device_name = shm::device_slab_name(slab_name, copy);
      if (options.replace_dead_writer) remove_if_writer_dead(device_name, shm::Kind::weights_cuda);
      device_slabs_.push_back(OwnedDeviceSlab::create(device_name, spec, gpus[copy]));
    }
    cuda::set_device(gpus[0]);
  }
  if (options.replace_dead_writer) remove_if_writer_dead(slab_name, shm::Kind::weights);
  slab_ = shm::WeightSlabWriter::create(slab_name, spec);

  PublishSource source;
  source.data = static_cast<const std::byte*>(flat.data_ptr());
  source.bytes = spec.slot_bytes;
  if (flat.is_cuda()) {
    source.device = flat.device().index();  // NOLINT(bugprone-signed-char-misuse): c10::DeviceIndex is an int8_t number
    source.stream = current_stream(flat);
  }
  if (options.bf16) {
    // Conversion during the snapshot: on the current stream (source.stream) for a CUDA model.
    source.snapshot = [flat, packed = Bf16SlotLayout::of(params)](std::byte* dst, cuda::StreamHandle) {
      pack_bf16_slot(flat, packed, dst);
    };
  }
  std::vector<OwnedDeviceSlab*> device_slabs;
  device_slabs.reserve(device_slabs_.size());
  for (OwnedDeviceSlab& d : device_slabs_) device_slabs.push_back(&d);
  publisher_ = std::make_unique<Publisher>(slab_, std::move(source), options.when, std::move(device_slabs));
}

void ModelPublisher::check_source() {
  const shm::WeightSlabWriter* removed = slab_.linked() ? nullptr : &slab_;
  for (const OwnedDeviceSlab& d : device_slabs_)
    if (removed == nullptr && !d.writer.linked()) removed = &d.writer;
  if (removed != nullptr)
    fail(ErrorKind::segment_not_found,
         "weight slab '/{}' was removed while this publisher was writing it (`tandem shm rm` or gc, or a replacement): "
         "no reader can attach to what it publishes; close this publisher and make a new one",
         removed->name());
  for (std::size_t i = 0; i < params_->table().size(); ++i)
    if (!params_->in_place(i)) {
      publisher_->wait_before_update();  // a copy in flight may still read the buffer adopt() writes
      params_->adopt_rebound(FlatParams::Values::copy);
      return;
    }
}

void ModelPublisher::adopt(std::size_t index, const at::Tensor& tensor) {
  publisher_->wait_before_update();
  params_->adopt(index, tensor, FlatParams::Values::copy);
}

std::uint64_t ModelPublisher::publish_final(std::uint64_t step, double timeout_s) {
  check_source();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    publisher_->flush();  // a publish in flight would otherwise coalesce with this one
    const Publisher::Result r = publisher_->publish(step);
    publisher_->flush();
    // Any slab may have skipped it (its slots all leased): every one must hold the final version.
    const bool landed = slab_.latest_version() == r.version &&
                        std::all_of(device_slabs_.begin(), device_slabs_.end(),
                                    [&](const OwnedDeviceSlab& d) { return d.writer.latest_version() == r.version; });
    if (r.outcome != Publisher::Outcome::skipped && landed) return r.version;
    if (std::chrono::steady_clock::now() > deadline)
      fail(
          "the final weights (step {}) could not be published to /{} within {} s: readers held every one of its "
          "{} slots the whole time; give the slab more slots or check for a stuck actor",
          step, slab_.name(), timeout_s, slab_.descriptor().num_slots);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace tandem::learner
