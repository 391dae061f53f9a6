// ModelPublisher: a model's FlatParams published into /tandem.<job>.weights. Owns the slab (as its
// writer) and a Publisher (publisher.hpp, whose contract applies: call from the training thread).
// The slab's tensor table is the flat layout, or with bf16 the same layout with the leading float32
// run converted to bfloat16 (half the bytes; everything after it shifts down: common/torch/bf16_slot.hpp).
// CUDA models publish from torch's current CUDA stream at construction: train on that stream.
// Every publish first checks its source (check_source): the slab must still be in /dev/shm (a
// UserError once it was removed: its versions would reach nobody), and a tensor the module rebound
// since flattening is adopted back into the buffer, or refused by name when its dtype, shape or
// device changed (common/torch/flat_params.hpp): never the old bytes in silence.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/cuda.hpp"
#include "common/torch/flat_params.hpp"
#include "learner/publisher.hpp"
#include "shm/weight_slab.hpp"

namespace tandem::learner {

struct ModelPublisherOptions {
  std::string model = "model";  // shown to actors in signature errors
  bool bf16 = false;
  std::uint32_t slots = shm::kDefaultSlots;
  std::uint32_t leases = shm::kDefaultLeases;
  PublisherOptions when{};  // every N steps / T ms
  // Replace an existing slab of the same name when the process that created it has exited (a stale
  // slab of a crashed run). A slab whose writer still runs is never replaced: a UserError names it.
  bool replace_dead_writer = false;
  // A CUDA model also publishes into the device slab <slab_name>.cuda (shm/weight_slab.hpp), created
  // before the host slab so that an actor that finds the host slab finds it too. Ignored on a CPU model.
  bool device_slab = false;
  // With device_slab: further device slabs <slab_name>.cuda.1, .2, ... on these GPUs (not the model's),
  // filled GPU to GPU by a pipelined chain in this order (learner/device_chain.hpp), so that actors there
  // load from their own GPU's memory. Each needs peer access to the ones before it.
  std::vector<int> peer_gpus{};
};

// The slab layout for `params` (published dtype applied). Fails on dtypes the slab cannot describe.
shm::SlabSpec slab_spec_for(const FlatParams& params, const std::string& model, bool bf16);

class ModelPublisher {
 public:
  ModelPublisher(const std::string& slab_name, FlatParams& params, const ModelPublisherOptions& options = {});
  Publisher::Result publish(std::uint64_t step) {
    check_source();
    return publisher_->publish(step);
  }
  Publisher::Result maybe_publish(std::uint64_t step) {
    check_source();
    return publisher_->maybe_publish(step);
  }
  // Tensor `index` of the flat table is `tensor` from now on (one that replaced it in the module):
  // fences the copy in flight, then FlatParams::adopt.
  void adopt(std::size_t index, const at::Tensor& tensor);
  // Publishes and commits `step`'s weights, retrying while readers hold every slot (a skip), so the
  // final version actors must evaluate really reaches the slab; returns its version. A UserError
  // after timeout_s names the slab and why.
  std::uint64_t publish_final(std::uint64_t step, double timeout_s);
  Publisher& publisher() { return *publisher_; }
  shm::WeightSlabWriter& slab() { return slab_; }
  shm::WeightSlabWriter* device_slab() { return device_slabs_.empty() ? nullptr : &device_slabs_[0].writer; }
  std::size_t device_slab_count() const { return device_slabs_.size(); }

 private:
  void check_source();
  FlatParams* params_;  // outlives this publisher
  // Destroyed in reverse: the publisher (flushes), then the device slabs (each its name, then its GPU memory).
  shm::WeightSlabWriter slab_;
  std::vector<OwnedDeviceSlab> device_slabs_;
  std::unique_ptr<Publisher> publisher_;
};

}  // namespace tandem::learner
