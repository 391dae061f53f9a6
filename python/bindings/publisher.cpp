// _tandem.WeightPublisher: learner::ModelPublisher over a Python module's parameters and buffers.
//
// The tensors are flattened (common/torch/flat_params.hpp): they stay the same Parameter objects, now
// views of one flat buffer, so an optimizer built before or after keeps working and a publish is one
// copy of that buffer. The Publisher's contract applies (learner/publisher.hpp): call from the
// training thread; on a GPU, publish() enqueues a snapshot on the stream that was current at
// construction and returns, and a committer thread copies it into the slab; on the CPU with
// `overlap`, publish() hands a slot to the copier thread and wait_before_update() is the fence
// before the optimizer step.
//
// Each publish publishes what the model holds at the call: tensors replaced in the model since
// (ModelOwners) or rebound in place (ModelPublisher's check) are adopted back into the flat buffer,
// and one whose dtype, shape or device changed is a ShapeError naming it. A publisher of a slab that
// was removed meanwhile refuses to publish (ModelPublisher), and a second publisher of the same job in
// this process is refused like one of another process (SegmentExistsError).
#include <torch/csrc/autograd/python_variable.h>  // before pybind11: the at::Tensor caster

#include <pybind11/stl.h>

#include <optional>
#include <string>

#include "common/error.hpp"
#include "common/quote.hpp"
#include "common/torch/flat_params.hpp"
#include "learner/model_publisher.hpp"
#include "python/bindings/model_owners.hpp"
#include "python/bindings/module.hpp"
#include "python/bindings/tensors.hpp"

namespace tandem::python {
namespace {

struct PublisherArgs {
  std::string model = "model";
  bool bf16 = false;
  std::uint32_t slots = shm::kDefaultSlots;
  std::uint32_t leases = shm::kDefaultLeases;
  bool device_slab = false;
  std::uint64_t after_version = 0;
  bool replace_dead_writer = true;
  bool persist = false;  // keep the slab after this process (under `tandem run`: the launcher removes it)
  bool overlap = false;  // CPU: copy on the copier thread; the caller fences (tandem/weights.py hooks the optimizer)
};

class PyWeightPublisher {
 public:
  PyWeightPublisher(NamedTensors named, const py::dict& owners, const std::string& slab, const PublisherArgs& a)
      : slab_(slab) {
    for (const auto& [name, t] : named)
      (void)format_dtype_of(t.scalar_type(), fmt::format("tensor {}", quote_escaped(name)));
    params_ = FlatParams::flatten(std::move(named));
    owners_ = ModelOwners(params_, owners);
    learner::ModelPublisherOptions o;
    o.model = a.model;
    o.bf16 = a.bf16;
    o.slots = a.slots;
    o.leases = a.leases;
    o.device_slab = a.device_slab;
    o.replace_dead_writer = a.replace_dead_writer;
    o.when.after_version = a.after_version;
    o.when.overlap_host_copy = a.overlap;
    py::gil_scoped_release release;
    publisher_.emplace(slab, params_, o);
    if (a.persist) publisher_->slab().persist();
  }

  std::optional<std::uint64_t> publish(std::uint64_t step) {
    adopt_replaced();
    learner::Publisher::Result r{};
    {
      py::gil_scoped_release release;
      r = open().publish(step);
    }
    if (r.outcome == learner::Publisher::Outcome::skipped) return std::nullopt;
    return r.version;
  }

  void flush() {
    py::gil_scoped_release release;
    open().publisher().flush();
  }

  void wait_before_update() {
    py::gil_scoped_release release;
    open().publisher().wait_before_update();
  }

  std::uint64_t publish_final(std::uint64_t step, double timeout_s) {
    adopt_replaced();
    py::gil_scoped_release release;
    return open().publish_final(step, timeout_s);
  }

  py::dict stats() {
    const learner::PublisherStats s = open().publisher().stats();
    const shm::WeightSlabWriter::Stats slab = open().slab().stats();
    py::dict out;
    out["calls"] = s.calls;
    out["committed"] = s.committed;
    out["skipped"] = s.skipped;
    out["coalesced"] = s.coalesced;
    out["device_committed"] = s.device_committed;
    out["device_skipped"] = s.device_skipped;
    out["max_call_us"] = s.max_call_us;
    out["mean_call_us"] = s.calls ? s.total_call_us / static_cast<double>(s.calls) : 0.0;
    out["fences"] = s.fences;
    out["max_fence_us"] = s.max_fence_us;
    out["total_fence_us"] = s.total_fence_us;
    // The training thread's time in publish() and the fences, per publish call.
    out["mean_blocked_us"] = s.calls ? s.blocked_us() / static_cast<double>(s.calls) : 0.0;
    out["latest_version"] = slab.latest_version;
    out["reclaimed"] = slab.reclaimed;
    return out;
  }

  py::list take_timings() {
    py::list out;
    for (const learner::PublishTiming& t : open().publisher().take_timings()) {
      py::dict d;
      d["version"] = t.version;
      d["snapshot_ms"] = t.snapshot_ms;
      d["d2h_ms"] = t.d2h_ms;
      d["visible_ms"] = t.visible_ms;
      d["device_copy_ms"] = t.device_copy_ms;
      d["device_visible_ms"] = t.device_visible_ms;
      out.append(d);
    }
    return out;
  }

  std::uint64_t next_version() { return open().publisher().next_version(); }
  at::Tensor buffer() {  // the flat uint8 buffer the model's tensors now view
    open();
    return params_.buffer();
  }
  std::uint64_t signature() const { return params_.signature(); }
  const std::string& slab() const { return slab_; }
  bool has_device_slab() { return open().device_slab() != nullptr; }

  void close() {
    py::gil_scoped_release release;  // flushes what is in flight, then removes the slab(s)
    publisher_.reset();
  }
  bool closed() const { return !publisher_; }

 private:
  learner::ModelPublisher& open() {
    if (!publisher_) fail("the weight publisher of /{} is closed", slab_);
    return *publisher_;
  }
  void adopt_replaced() {
    learner::ModelPublisher& p = open();
    owners_.check(params_, [&](std::size_t i, const at::Tensor& t) { p.adopt(i, t); });
  }

  std::string slab_;
  FlatParams params_;  // before publisher_, which refers to it
  ModelOwners owners_;
  std::optional<learner::ModelPublisher> publisher_;
};

}  // namespace

void bind_publisher(py::module_& m) {
  py::class_<PublisherArgs>(m, "PublisherOptions")
      .def(py::init<>())
      .def_readwrite("model", &PublisherArgs::model)
      .def_readwrite("bf16", &PublisherArgs::bf16)
      .def_readwrite("slots", &PublisherArgs::slots)
      .def_readwrite("leases", &PublisherArgs::leases)
      .def_readwrite("device_slab", &PublisherArgs::device_slab)
      .def_readwrite("after_version", &PublisherArgs::after_version)
      .def_readwrite("replace_dead_writer", &PublisherArgs::replace_dead_writer)
      .def_readwrite("persist", &PublisherArgs::persist)
      .def_readwrite("overlap", &PublisherArgs::overlap);

  py::class_<PyWeightPublisher>(m, "WeightPublisher")
      .def(py::init<NamedTensors, const py::dict&, const std::string&, const PublisherArgs&>(),
           py::arg("named_tensors"), py::arg("owners"), py::arg("slab"), py::arg("options"))
      .def("publish", &PyWeightPublisher::publish, py::arg("step") = 0)
      .def("flush", &PyWeightPublisher::flush)
      .def("wait_before_update", &PyWeightPublisher::wait_before_update)
      .def("publish_final", &PyWeightPublisher::publish_final, py::arg("step"), py::arg("timeout_s") = 60.0)
      .def("stats", &PyWeightPublisher::stats)
      .def("take_timings", &PyWeightPublisher::take_timings)
      .def_property_readonly("next_version", &PyWeightPublisher::next_version)
      .def_property_readonly("buffer", &PyWeightPublisher::buffer)
      .def_property_readonly("signature", &PyWeightPublisher::signature)
      .def_property_readonly("slab", &PyWeightPublisher::slab)
      .def_property_readonly("has_device_slab", &PyWeightPublisher::has_device_slab)
      .def_property_readonly("closed", &PyWeightPublisher::closed)
      .def("close", &PyWeightPublisher::close);
}

}  // namespace tandem::python
