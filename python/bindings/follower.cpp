// _tandem.WeightFollower, _tandem.Lease and _tandem.BoundModel: the weight slab's reader side.
//  - WeightFollower wraps a shm::WeightSlabReader: the newest version, waiting for one, and leases.
//  - Lease is a shm::ReadLease with zero-copy views of the leased slot, one per tensor of the slab's
//    table. The slot's bytes stay that version until release() (tandem/weights.py releases it when
//    its with-block ends); views used after that may see a later version.
//    The views do not view the reader's mapping: that one is read-only (shm/weight_slab.hpp), and a
//    stray in-place write from Python (an `x += 1` on a weight, an inplace=True activation) would kill
//    the interpreter with SIGSEGV. Each lease maps its slot a second time, MAP_PRIVATE (copy-on-write),
//    as tandem.Dataset's fields do: reading shares the slab's pages, and a write lands in a private
//    copy of the touched pages, seen by this lease's views only, never by the slab or another reader.
//    Why not read-only views that raise: torch (1.13 as 2.x) has no read-only tensor; a Tensor
//    subclass that refuses in-place calls costs a Python call on every operation, misses writes
//    through .numpy() or .data, and changes the type every result carries. Why per lease, not one
//    private mapping per follower: shm::PrivateSlotMapping says (a written page would go stale).
//  - BoundModel is actor::Follower over a Python module's flattened tensors: load_into(model).
// The reader lives as long as the follower or its leases; a lease's private mapping as long as any
// view of it.
#include <torch/csrc/autograd/python_variable.h>  // before pybind11: the at::Tensor caster

#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>

#include "actor/follower.hpp"
#include "common/error.hpp"
#include "common/quote.hpp"
#include "common/torch/flat_params.hpp"
#include "python/bindings/blocking.hpp"
#include "python/bindings/model_owners.hpp"
#include "python/bindings/module.hpp"
#include "python/bindings/tensors.hpp"
#include "shm/weight_slab.hpp"

namespace tandem::python {
namespace {

struct ReaderState {
  shm::WeightSlabReader reader;
  std::uint32_t leases = 0;  // entries claimed
  std::uint32_t held = 0;    // Lease objects holding one now
};

std::string tensor_name(const shm::TensorEntry& t) { return std::string(t.name, strnlen(t.name, sizeof t.name)); }


class PyLease {
 public:
  PyLease(std::shared_ptr<ReaderState> state, shm::ReadLease lease)
      : state_(std::move(state)), lease_(std::move(lease)) {
    ++state_->held;
  }
  ~PyLease() { release(); }
  PyLease(const PyLease&) = delete;
  PyLease& operator=(const PyLease&) = delete;

  void release() {
    if (!lease_) return;
    lease_->release();
    lease_.reset();
    --state_->held;
  }
  bool released() const { return !lease_; }
  const shm::ReadLease& lease() const {
    if (!lease_) fail("this lease of /{} was released: take a new one", state_->reader.name());
    return *lease_;
  }
  bool still_valid() const { return lease().still_valid(); }

  py::dict tensors() {
    const std::shared_ptr<const shm::PrivateSlotMapping>& slot = private_slot();
    py::dict out;
    for (const shm::TensorEntry& t : state_->reader.tensors()) {
      std::vector<std::int64_t> shape(t.shape, t.shape + t.ndim);
      const std::string name = tensor_name(t);
      out[py::str(name)] = view_of(
          slot, slot->data() + t.offset, std::move(shape),
          scalar_type_of(t.dtype, fmt::format("tensor '{}' of /{}", name, state_->reader.name())));
    }
    return out;
  }
  at::Tensor flat() {  // the whole slot image, uint8
    const std::shared_ptr<const shm::PrivateSlotMapping>& slot = private_slot();
    return view_of(slot, slot->data(), {static_cast<std::int64_t>(slot->bytes())}, at::kByte);
  }

 private:
  const std::shared_ptr<const shm::PrivateSlotMapping>& private_slot() {
    const shm::ReadLease& l = lease();
    if (!slot_) slot_ = std::make_shared<const shm::PrivateSlotMapping>(state_->reader, l);
    return slot_;
  }
  std::shared_ptr<ReaderState> state_;
  std::optional<shm::ReadLease> lease_;
  std::shared_ptr<const shm::PrivateSlotMapping> slot_;  // made on the first view; views keep it mapped
};

class PyWeightFollower {
 public:
  PyWeightFollower(const std::string& slab, std::uint32_t leases)
      : state_(std::make_shared<ReaderState>(ReaderState{shm::WeightSlabReader::attach(slab, leases), leases, 0})) {}

  std::uint64_t latest_version() const { return reader().latest_version(); }

  // The GIL is released while waiting: `state` keeps the reader alive should another thread close().
  // The wait sleeps until the writer's commit wakes it (shm/weight_slab.hpp, "Waiting"): a version is
  // seen when it is committed, not at the next poll.
  std::uint64_t wait(std::uint64_t newer_than, std::optional<double> timeout_s) const {
    const std::shared_ptr<ReaderState> state = open();
    const shm::WeightSlabReader& r = state->reader;
    const std::string what = fmt::format("a version newer than {} in /{}", newer_than, r.name());
    sleep_until([&](std::chrono::nanoseconds limit) { return r.wait_newer(newer_than, limit) > newer_than; }, timeout_s,
                what);
    return r.latest_version();
  }

  std::unique_ptr<PyLease> lease(std::uint64_t newer_than, std::optional<double> timeout_s) {
    const std::shared_ptr<ReaderState> state = open();
    if (state->held >= state->leases)
      fail(
          "all {} lease entries of this follower of /{} are held: release a lease (leave its with-block) or create "
          "the follower with leases={}",
          state->leases, state->reader.name(), state->leases + 1);
    for (;;) {
      wait(newer_than, timeout_s);
      // nullopt now means the writer overtook every attempt (it is K-1 publishes ahead): try again.
      if (auto l = state->reader.lease_latest(); l && l->version() > newer_than)
        return std::make_unique<PyLease>(state, std::move(*l));
    }
  }

  py::list tensors() const {
    py::list out;
    for (const shm::TensorEntry& t : reader().tensors()) {
      py::list shape;
      for (std::uint32_t k = 0; k < t.ndim; ++k) shape.append(t.shape[k]);
      out.append(
          py::make_tuple(tensor_name(t), std::string(shm::dtype_name(t.dtype)), py::tuple(shape), t.offset, t.bytes));
    }
    return out;
  }

  py::dict info() const {
    const shm::SlabDescriptor& d = reader().descriptor();
    const shm::WeightSlabWriter::Stats s = reader().stats();
    py::dict out;
    out["slab"] = reader().name();
    out["model"] = std::string(d.model, strnlen(d.model, sizeof d.model));
    out["signature"] = d.model_signature;
    out["publish_dtype"] = std::string(shm::dtype_name(d.publish_dtype));
    out["slots"] = d.num_slots;
    out["slot_bytes"] = d.slot_bytes;
    out["published"] = s.published;
    out["skipped"] = s.skipped;
    out["reclaimed"] = s.reclaimed;
    out["latest_version"] = s.latest_version;
    return out;
  }

  void close() {
    if (state_ && state_->held > 0)
      fail("the follower of /{} still has {} lease(s) held: release them first", state_->reader.name(), state_->held);
    state_.reset();
  }

 private:
  const std::shared_ptr<ReaderState>& open() const {
    if (!state_) fail("this weight follower is closed");
    return state_;
  }
  const shm::WeightSlabReader& reader() const { return open()->reader; }
  std::shared_ptr<ReaderState> state_;
};

class PyBoundModel {
 public:
  PyBoundModel(NamedTensors named, const py::dict& owners, const std::string& slab, const std::string& mode,
               const std::string& model) {
    actor::FollowerOptions o;
    if (mode == "zero_copy") o.mode = actor::LoadMode::zero_copy;
    else if (mode != "copy") fail("load mode {} is not one: use 'copy' or 'zero_copy'", quote_escaped(mode));
    o.model = model;
    params_ = FlatParams::flatten(std::move(named));
    owners_ = ModelOwners(params_, owners);
    follower_.emplace(slab, params_, o);
  }
  // A tensor replaced in the model is adopted keeping the loaded values (the model holds the version
  // it loaded last); one rebound in place is the Follower's to adopt.
  std::optional<std::uint64_t> update() {
    owners_.check(params_, [&](std::size_t i, const at::Tensor& t) { params_.adopt(i, t, FlatParams::Values::keep); });
    py::gil_scoped_release release;
    return follower_->update();
  }
  std::uint64_t version() const { return follower_->version(); }
  std::uint64_t step() const { return follower_->step(); }
  double last_load_ms() const { return follower_->last_load_ms(); }
  bool via_device_slab() const { return follower_->via_device_slab(); }
  at::Tensor buffer() const { return params_.buffer(); }

 private:
  FlatParams params_;  // before follower_, which refers to it
  ModelOwners owners_;
  std::optional<actor::Follower> follower_;
};

}  // namespace

void bind_follower(py::module_& m) {
  py::class_<PyLease>(m, "Lease")
      .def_property_readonly("version", [](const PyLease& l) { return l.lease().version(); })
      .def_property_readonly("step", [](const PyLease& l) { return l.lease().step(); })
      .def_property_readonly("nbytes", [](const PyLease& l) { return l.lease().bytes(); })
      .def_property_readonly("slot", [](const PyLease& l) { return l.lease().slot(); })
      .def_property_readonly("snapshot_ns", [](const PyLease& l) { return l.lease().snapshot_ns(); })
      .def_property_readonly("publish_ns", [](const PyLease& l) { return l.lease().publish_ns(); })
      .def_property_readonly("released", &PyLease::released)
      .def("tensors", &PyLease::tensors)
      .def("flat", &PyLease::flat)
      .def("still_valid", &PyLease::still_valid)
      .def("release", &PyLease::release);

  py::class_<PyWeightFollower>(m, "WeightFollower")
      .def(py::init<const std::string&, std::uint32_t>(), py::arg("slab"), py::arg("leases") = 2)
      .def_property_readonly("latest_version", &PyWeightFollower::latest_version)
      .def("wait", &PyWeightFollower::wait, py::arg("newer_than") = 0, py::arg("timeout") = py::none())
      .def("lease", &PyWeightFollower::lease, py::arg("newer_than") = 0, py::arg("timeout") = py::none())
      .def("tensors", &PyWeightFollower::tensors)
      .def("info", &PyWeightFollower::info)
      .def("close", &PyWeightFollower::close);

  py::class_<PyBoundModel>(m, "BoundModel")
      .def(py::init<NamedTensors, const py::dict&, const std::string&, const std::string&, const std::string&>(),
           py::arg("named_tensors"), py::arg("owners"), py::arg("slab"), py::arg("mode") = "copy",
           py::arg("model") = "model")
      .def("update", &PyBoundModel::update)
      .def_property_readonly("version", &PyBoundModel::version)
      .def_property_readonly("step", &PyBoundModel::step)
      .def_property_readonly("last_load_ms", &PyBoundModel::last_load_ms)
      .def_property_readonly("via_device_slab", &PyBoundModel::via_device_slab)
      .def_property_readonly("buffer", &PyBoundModel::buffer);
}

}  // namespace tandem::python
