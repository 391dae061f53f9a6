// _tandem.Job: a Python program's row in its job's control block, as tandem-learner and tandem-actor
// keep theirs (shm/control_client.hpp, shm/job_process.hpp): attach from the launcher's TANDEM_JOB,
// TANDEM_ROLE and TANDEM_INDEX (or given ones), report running, beat the heartbeat from a thread of
// its own, read the stop request, write metrics records that `tandem status`, /metrics, metrics.jsonl
// and the dashboard show like the built-in programs' ones, and report stopping at the end.
// tandem/job.py makes it the context manager tandem.job().
#include <torch/csrc/autograd/python_variable.h>  // before pybind11: the at::Tensor caster

#include <fmt/ranges.h>
#include <pybind11/stl.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "python/bindings/arguments.hpp"
#include "common/error.hpp"
#include "python/bindings/module.hpp"
#include "shm/control_client.hpp"
#include "shm/heartbeat_thread.hpp"
#include "shm/metric_fields.hpp"
#include "shm/segment.hpp"

namespace tandem::python {
namespace {

// The metric names, for report()'s refusal and tandem._tandem.metric_names.
std::vector<std::string> metric_names() {
  std::vector<std::string> names;
  for (const shm::MetricField& f : shm::kMetricFields) names.emplace_back(f.name);
  return names;
}

// ProcessMetrics by field name (shm/metric_fields.hpp): what report() accepts.
void set_metric(shm::ProcessMetrics& m, const std::string& key, const py::handle& value) {
  const shm::MetricField* f = shm::find_metric(key);
  if (!f)
    fail("report() has no metric '{}': use {} (docs/FORMAT.md, ProcessMetrics)", key, fmt::join(metric_names(), ", "));
  const std::string what = "report() " + key;
  if (f->kind == shm::MetricKind::measure) shm::set_measure(m, *f, number_argument(value, what));
  else shm::set_count(m, *f, integer_as<std::uint64_t>(value, what));
}

class PyJob {
 public:
  PyJob(std::optional<std::string> job, const std::optional<std::string>& role, std::optional<std::uint32_t> index,
        std::optional<double> hang_timeout_s) {
    if (job) {
      auto r = shm::parse_role(role.value_or(""));
      if (!r) fail("role '{}' is not a role: it must be learner or actor", role.value_or(""));
      client_.emplace(shm::ControlClient::attach(*job, *r, index.value_or(0)));
    } else if (auto c = shm::ControlClient::from_env()) {
      client_.emplace(std::move(*c));
    } else {
      fail(ErrorKind::not_in_job,
           "not in a Tandem job: TANDEM_JOB is not set (start this program with `tandem run`, as "
           "run.learner_program or run.actor_program, or pass job=, role= and index=)");
    }
    stall_limit_ = std::chrono::milliseconds(hang_timeout_s ? static_cast<std::int64_t>(*hang_timeout_s * 1000) : 0);
  }

  void start() {
    client_->set_state(shm::ProcessState::running);
    heartbeat_.emplace(*client_, std::chrono::milliseconds(500), stall_limit_);
  }
  void stop() {
    heartbeat_.reset();  // joins the thread
    client_->set_state(shm::ProcessState::stopping);
  }

  void tick() {
    if (heartbeat_) heartbeat_->tick();
  }
  bool should_stop() {
    tick();
    return client_->should_stop();
  }
  void report(const py::kwargs& metrics) {
    shm::ProcessMetrics m;
    for (const auto& [key, value] : metrics) set_metric(m, key.cast<std::string>(), value);
    tick();
    client_->report(m);
  }
  void saw_version(py::handle version) {
    client_->saw_version(integer_as<std::uint64_t>(version, "saw_version version"));
  }

  const shm::ControlClient& client() const { return *client_; }

 private:
  std::optional<shm::ControlClient> client_;
  std::chrono::milliseconds stall_limit_{0};
  std::optional<shm::HeartbeatThread> heartbeat_;  // after client_: stopped before it goes
};

}  // namespace

void bind_job(py::module_& m) {
  py::class_<PyJob>(m, "Job")
      .def(py::init<std::optional<std::string>, std::optional<std::string>, std::optional<std::uint32_t>,
                    std::optional<double>>(),
           py::arg("job") = py::none(), py::arg("role") = py::none(), py::arg("index") = py::none(),
           py::arg("hang_timeout_s") = py::none())
      .def("start", &PyJob::start)
      .def("stop", &PyJob::stop)
      .def("tick", &PyJob::tick)
      .def_property_readonly("should_stop", &PyJob::should_stop)
      .def("report", &PyJob::report)
      .def("saw_version", &PyJob::saw_version, py::arg("version"))
      .def_property_readonly("id", [](const PyJob& j) { return j.client().job(); })
      .def_property_readonly("role", [](const PyJob& j) { return std::string(shm::role_name(j.client().role())); })
      .def_property_readonly("index", [](const PyJob& j) { return j.client().index(); })
      .def_property_readonly("name", [](const PyJob& j) { return j.client().name(); })
      .def_property_readonly("run_dir", [](const PyJob& j) { return j.client().run_dir(); })
      .def_property_readonly("restarts", [](const PyJob& j) { return j.client().restarts(); });

  m.attr("metric_names") = py::tuple(py::cast(metric_names()));

  m.def(
      "job_segment_name",
      [](const std::string& job, const std::string& kind) {
    for (const shm::Kind k : {shm::Kind::weights, shm::Kind::weights_cuda, shm::Kind::experience, shm::Kind::control})
      if (shm::kind_name(k) == kind) return shm::job_segment_name(job, k);
    fail("segment kind '{}' is not one of a job's: use weights, weights.cuda, exp or ctl", kind);
      },
      py::arg("job"), py::arg("kind"),
      "tandem.<job>.<kind> (kind: weights, weights.cuda, exp or ctl), the job and kind checked as the C++ side "
      "checks them");
}

}  // namespace tandem::python
