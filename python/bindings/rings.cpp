// _tandem.ExperienceRings (the consumer: a learner), _tandem.ExperienceWriter (actor a's producer)
// and _tandem.Slot, over shm/experience_ring.hpp: the same commit protocol and checksums as the C++
// rollout actors and RL learner, so either side may be Python.
//
// A Slot is the slot in place: every field a tensor view of the mapping (zero-copy), the header's
// policy_version and episodes as attributes. A writer's slot is valid until commit; a consumer's until
// release, after which the actor may overwrite it: copy what you keep. The segment stays mapped as long
// as a handle, slot or view lives. u32 fields (episode_lengths) appear as int32: lengths stay below 2^31.
#include <torch/csrc/autograd/python_variable.h>  // before pybind11: the at::Tensor caster

#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>

#include "common/error.hpp"
#include "python/bindings/arguments.hpp"
#include "python/bindings/blocking.hpp"
#include "python/bindings/module.hpp"
#include "python/bindings/tensors.hpp"
#include "shm/experience_ring.hpp"

namespace tandem::python {
namespace {

using I = std::int64_t;

class PySlot {
 public:
  PySlot(std::shared_ptr<const void> owner, shm::SlotView view, const shm::ExperienceDescriptor& d)
      : owner_(std::move(owner)), view_(view), d_(d) {}

  const shm::SlotView& view() const { return view_; }
  std::uint64_t index() const { return view_.index(); }
  std::uint64_t seq() const { return view_.header().seq; }
  std::uint64_t checksum() const { return view_.header().checksum; }
  std::uint64_t policy_version() const { return view_.header().policy_version; }
  void set_policy_version(py::handle v) {
    view_.header().policy_version = integer_as<std::uint64_t>(v, "Slot policy_version");
  }
  std::uint32_t episodes() const { return view_.header().episodes; }
  void set_episodes(py::handle value) {
    const auto n = integer_as<std::uint32_t>(value, "Slot episodes");
    if (n > d_.max_episodes)
      fail(ErrorKind::shape, "a slot records at most {} finished episodes (steps x envs), not {}", d_.max_episodes, n);
    view_.header().episodes = n;
  }

  at::Tensor field(std::uint64_t offset, std::vector<I> shape, at::ScalarType dtype) const {
    return view_of(owner_, view_.bytes() + offset, std::move(shape), dtype);
  }
  I t() const { return d_.steps; }
  I e() const { return d_.envs; }
  at::Tensor actions() const {
    if (d_.action_kind == static_cast<std::uint32_t>(shm::ActionKind::discrete))
      return field(d_.actions_offset, {t(), e()}, at::kLong);
    return field(d_.actions_offset, {t(), e(), I(d_.action_dim)}, at::kFloat);
  }
  at::Tensor raw() const { return field(0, {I(d_.slot_bytes)}, at::kByte); }  // header and fields, as bytes

  const shm::ExperienceDescriptor& d() const { return d_; }

 private:
  std::shared_ptr<const void> owner_;
  shm::SlotView view_;
  const shm::ExperienceDescriptor& d_;
};

py::dict shape_of(const shm::ExperienceDescriptor& d) {
  py::dict out;
  out["actors"] = d.num_actors;
  out["slots"] = d.slots_per_ring;
  out["steps"] = d.steps;
  out["envs"] = d.envs;
  out["obs_dim"] = d.obs_dim;
  out["action"] = d.action_kind == static_cast<std::uint32_t>(shm::ActionKind::discrete) ? "discrete" : "continuous";
  out["action_dim"] = d.action_dim;
  out["logits_dim"] = d.logits_dim;
  out["slot_bytes"] = d.slot_bytes;
  return out;
}

py::dict ring_counters(const shm::RingControl& r) {
  py::dict out;
  out["head"] = r.head.load();
  out["tail"] = r.tail.load();
  out["full_waits"] = r.full_waits.load();
  out["refused"] = r.refused.load();
  out["writer_pid"] = r.writer_pid.load();
  out["writer_attaches"] = r.writer_attaches.load();
  return out;
}

class PyRings {
 public:
  explicit PyRings(shm::ExperienceRings rings) : rings_(std::make_shared<shm::ExperienceRings>(std::move(rings))) {}

  static std::unique_ptr<PyRings> create(const std::string& job, std::uint32_t actors, std::uint32_t slots,
                                         std::uint32_t steps, std::uint32_t envs, std::uint32_t obs_dim,
                                         const std::string& action, std::uint32_t action_dim,
                                         std::uint32_t logits_dim) {
    shm::ExperienceShape s;
    s.num_actors = actors;
    s.slots_per_ring = slots;
    s.steps = steps;
    s.envs = envs;
    s.obs_dim = obs_dim;
    if (action == "continuous") s.action_kind = shm::ActionKind::continuous;
    else if (action != "discrete") fail("action '{}' is not a kind of action: use 'discrete' or 'continuous'", action);
    s.action_dim = action == "discrete" ? 1 : action_dim;
    s.logits_dim = logits_dim;
    return std::make_unique<PyRings>(shm::ExperienceRings::create(job, s));
  }
  static std::unique_ptr<PyRings> attach(const std::string& job) {
    return std::make_unique<PyRings>(shm::ExperienceRings::attach(job));
  }

  std::optional<PySlot> peek(std::uint32_t actor, std::uint64_t ahead) const {
    auto v = open().peek(check(actor), ahead);
    if (!v) return std::nullopt;
    return PySlot(rings_, *v, open().descriptor());
  }
  bool verify(std::uint32_t actor, const PySlot& slot) const { return open().verify(check(actor), slot.view()); }
  void release(std::uint32_t actor) const { open().release(check(actor)); }

  // The slot at the tail once the actor has committed it, checksum and seq verified; refused slots are
  // released (and counted) on the way, as the C++ learner does.
  PySlot take(std::uint32_t actor, std::optional<double> timeout_s) const {
    const auto rings = rings_;  // alive while the GIL is released
    check(actor);
    for (;;) {
      poll_until([&] { return rings->peek(actor, 0).has_value(); }, timeout_s,
                 fmt::format("a committed slot in ring {} of /{}", actor, rings->segment_name()));
      const shm::SlotView v = *rings->peek(actor, 0);
      if (rings->verify(actor, v)) return PySlot(rings, v, rings->descriptor());
      rings->release(actor);
    }
  }

  py::dict shape() const { return shape_of(open().descriptor()); }
  py::dict counters(std::uint32_t actor) const { return ring_counters(open().ring(check(actor))); }
  std::string segment() const { return open().segment_name(); }
  void close() { rings_.reset(); }

 private:
  const shm::ExperienceRings& open() const {
    if (!rings_) fail("these experience rings are closed");
    return *rings_;
  }
  std::uint32_t check(std::uint32_t actor) const {
    if (actor >= open().descriptor().num_actors)
      fail("experience rings '/{}' have {} rings, so actor {} has none", open().segment_name(),
           open().descriptor().num_actors, actor);
    return actor;
  }
  std::shared_ptr<shm::ExperienceRings> rings_;
};

class PyWriter {
 public:
  PyWriter(const std::string& job, std::uint32_t actor)
      : writer_(std::make_shared<shm::ExperienceWriter>(shm::ExperienceWriter::attach(job, actor))) {}

  // The slot at head; waits (GIL released) while the ring is full, each try counted as full_waits.
  std::optional<PySlot> begin_write(bool wait, std::optional<double> timeout_s) {
    const auto writer = writer_;
    std::optional<shm::SlotView> v = writer->begin_write();
    if (!v && wait)
      poll_until([&] { return (v = writer->begin_write()).has_value(); }, timeout_s,
                 fmt::format("a free slot in ring {}", writer->actor()));
    if (!v) return std::nullopt;
    return PySlot(writer, *v, writer->descriptor());
  }
  void commit(const PySlot& slot) { writer_->commit(slot.view()); }
  py::dict shape() const { return shape_of(writer_->descriptor()); }
  py::dict counters() const { return ring_counters(writer_->ring()); }
  std::uint32_t actor() const { return writer_->actor(); }

 private:
  std::shared_ptr<shm::ExperienceWriter> writer_;
};

}  // namespace

void bind_rings(py::module_& m) {
  py::class_<PySlot>(m, "Slot")
      .def_property_readonly("index", &PySlot::index)
      .def_property_readonly("seq", &PySlot::seq)
      .def_property_readonly("checksum", &PySlot::checksum)
      .def_property("policy_version", &PySlot::policy_version, &PySlot::set_policy_version)
      .def_property("episodes", &PySlot::episodes, &PySlot::set_episodes)
      .def_property_readonly(
          "observations",
          [](const PySlot& s) {
    return s.field(s.d().observations_offset, {s.t() + 1, s.e(), I(s.d().obs_dim)}, at::kFloat);
          })
      .def_property_readonly("actions", &PySlot::actions)
      .def_property_readonly(
          "rewards",
          [](const PySlot& s) {
    return s.field(s.d().rewards_offset, {s.t(), s.e()}, at::kFloat);
          })
      .def_property_readonly(
          "terminated",
          [](const PySlot& s) {
    return s.field(s.d().terminated_offset, {s.t(), s.e()}, at::kByte);
          })
      .def_property_readonly(
          "truncated",
          [](const PySlot& s) {
    return s.field(s.d().truncated_offset, {s.t(), s.e()}, at::kByte);
          })
      .def_property_readonly(
          "log_probs",
          [](const PySlot& s) {
    return s.field(s.d().log_probs_offset, {s.t(), s.e()}, at::kFloat);
          })
      .def_property_readonly(
          "logits",
          [](const PySlot& s) {
    return s.field(s.d().logits_offset, {s.t(), s.e(), I(s.d().logits_dim)}, at::kFloat);
          })
      .def_property_readonly(
          "values",
          [](const PySlot& s) {
    return s.field(s.d().values_offset, {s.t() + 1, s.e()}, at::kFloat);
          })
      .def_property_readonly(
          "episode_returns",
          [](const PySlot& s) { return s.field(s.d().episode_returns_offset, {I(s.d().max_episodes)}, at::kFloat); })
      .def_property_readonly(
          "episode_lengths",
          [](const PySlot& s) { return s.field(s.d().episode_lengths_offset, {I(s.d().max_episodes)}, at::kInt); })
      .def_property_readonly(
          "final_observations",
          [](const PySlot& s) {
    return s.field(s.d().final_observations_offset, {s.t(), s.e(), I(s.d().obs_dim)}, at::kFloat);
          })
      .def("raw", &PySlot::raw);

  py::class_<PyRings>(m, "ExperienceRings")
      .def_static("create", &PyRings::create, py::arg("job"), py::arg("actors"), py::arg("slots"), py::arg("steps"),
                  py::arg("envs"), py::arg("obs_dim"), py::arg("action") = "discrete", py::arg("action_dim") = 1,
                  py::arg("logits_dim") = 1)
      .def_static("attach", &PyRings::attach, py::arg("job"))
      .def("peek", &PyRings::peek, py::arg("actor"), py::arg("ahead") = 0)
      .def("verify", &PyRings::verify, py::arg("actor"), py::arg("slot"))
      .def("release", &PyRings::release, py::arg("actor"))
      .def("take", &PyRings::take, py::arg("actor"), py::arg("timeout") = py::none())
      .def("shape", &PyRings::shape)
      .def("counters", &PyRings::counters, py::arg("actor"))
      .def_property_readonly("segment", &PyRings::segment)
      .def("close", &PyRings::close);

  py::class_<PyWriter>(m, "ExperienceWriter")
      .def(py::init<const std::string&, std::uint32_t>(), py::arg("job"), py::arg("actor"))
      .def("begin_write", &PyWriter::begin_write, py::arg("wait") = true, py::arg("timeout") = py::none())
      .def("commit", &PyWriter::commit, py::arg("slot"))
      .def("shape", &PyWriter::shape)
      .def("counters", &PyWriter::counters)
      .def_property_readonly("actor", &PyWriter::actor);
}

}  // namespace tandem::python
