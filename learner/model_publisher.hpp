// ModelPublisher: a model's FlatParams published into /tandem.<job>.weights. Owns the slab (as its
// writer) and a Publisher (publisher.hpp, whose contract applies: call from the training thread).
// The slab's tensor table is the flat layout, or with bf16 the same layout with the leading float32
// run converted to bfloat16 (half the bytes; everything after it shifts down: common/torch/bf16_slot.hpp).
// CUDA models publish from torch's current CUDA stream at construction: train on that stream.
#pragma once

#include <memory>
#include <string>

#include "common/torch/flat_params.hpp"
#include "learner/publisher.hpp"
#include "shm/weight_slab.hpp"

namespace tandem::learner {

struct ModelPublisherOptions {
  std::string model = "model";     // shown to actors in signature errors
  bool bf16 = false;
  std::uint32_t slots = shm::kDefaultSlots;
  std::uint32_t leases = shm::kDefaultLeases;
  PublisherOptions when;            // every N steps / T ms
  // Replace an existing slab of the same name when the process that created it has exited (a stale
  // slab of a crashed run). A slab whose writer still runs is never replaced: a UserError names it.
  bool replace_dead_writer = false;
};

// The slab layout for `params` (published dtype applied). Fails on dtypes the slab cannot describe.
shm::SlabSpec slab_spec_for(const FlatParams& params, const std::string& model, bool bf16);

class ModelPublisher {
 public:
  ModelPublisher(const std::string& slab_name, FlatParams& params, ModelPublisherOptions options = {});
  Publisher::Result publish(std::uint64_t step) { return publisher_->publish(step); }
  Publisher::Result maybe_publish(std::uint64_t step) { return publisher_->maybe_publish(step); }
  // Publishes and commits `step`'s weights, retrying while readers hold every slot (a skip), so the
  // final version actors must evaluate really reaches the slab; returns its version. A UserError
  // after timeout_s names the slab and why.
  std::uint64_t publish_final(std::uint64_t step, double timeout_s);
  Publisher& publisher() { return *publisher_; }
  shm::WeightSlabWriter& slab() { return slab_; }

 private:
  shm::WeightSlabWriter slab_;
  std::unique_ptr<Publisher> publisher_;
};

}  // namespace tandem::learner
