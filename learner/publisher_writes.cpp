#include "learner/publisher_writes.hpp"

#include <utility>

namespace tandem::learner {

TransferWrites::TransferWrites(shm::WeightSlabWriter& host, std::vector<shm::WeightSlabWriter*> devices)
    : devices(devices.size()), host_slab_(&host), device_slabs_(std::move(devices)) {}

bool TransferWrites::open() {
  host = host_slab_->begin_write();
  bool any = host.has_value();
  for (std::size_t i = 0; i < device_slabs_.size(); ++i) {
    devices[i] = device_slabs_[i]->begin_write();
    any = any || devices[i].has_value();
  }
  return any;
}

void TransferWrites::run_or_abort(const std::function<void()>& enqueue) {
  try {
    enqueue();
  } catch (...) {
    abort();
    throw;
  }
}

void TransferWrites::abort() {
  if (host) host_slab_->abort(*std::exchange(host, std::nullopt));
  for (std::size_t i = 0; i < device_slabs_.size(); ++i)
    if (devices[i]) device_slabs_[i]->abort(*std::exchange(devices[i], std::nullopt));
}

}  // namespace tandem::learner
