// _tandem.AsyncVecEnv: Tandem's asynchronous vector env (envs/async_vec_env.hpp) driven from a Python
// loop, the way EnvPool's async mode is used; python/tandem/envs.py wraps it as
// tandem.envs.AsyncVectorEnv.
//
// reset() and send() queue work and return at once; recv() waits for the next batch of batch_size
// envs without the GIL (Ctrl-C still ends the wait) and returns it with the ids of its envs.
//
// Outputs: each batch buffer writes its observations into a tensor of its own, and recv() hands that
// tensor out and gives the buffer a new one for its next batch, so the envs write observations
// straight into the returned tensor (no copy) and what an earlier recv() returned is never
// overwritten; rewards, flags and ids are copied (a few bytes an env).
//
// Threads: one Python thread at a time may call it; calls hold the GIL except while recv() waits.
#include "python/bindings/env_io.hpp"  // first: LibTorch's at::Tensor caster before pybind11's headers

#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "envs/async_vec_env.hpp"
#include "envs/env_source.hpp"
#include "python/bindings/arguments.hpp"
#include "python/bindings/blocking.hpp"

namespace tandem::python {
namespace {

using I = std::int64_t;

class PyAsyncVecEnv {
 public:
  PyAsyncVecEnv(const EnvRequest& r, int batch_size) {
    const envs::EnvSource source(r.settings);
    spec_ = source.spec();
    vec_ = std::make_unique<envs::AsyncVecEnv>(source.make(r.num_envs), batch_size, r.threads, r.seed);
    for (int b = 0; b < vec_->buffers(); ++b) {
      observations_.push_back(next_observations());
      observe(b);
    }
  }

  ~PyAsyncVecEnv() {
    if (one_caller_.forked()) (void)vec_.release();  // a child after fork(): its workers are the parent's
  }

  const EnvSpec& spec() const { return spec_; }
  int size() const { return vec_->size(); }
  int batch_size() const { return vec_->batch_size(); }
  int threads() const { return vec_->threads(); }

  void reset(std::optional<std::uint64_t> seed) {
    one_caller_.check("reset()");
    vec_->reset(seed);
  }

  void send(const at::Tensor& actions, const at::Tensor& env_ids) {
    one_caller_.check("send()");
    require_strided(env_ids, "env_id");
    if (env_ids.device().type() != c10::DeviceType::CPU || env_ids.dim() != 1 ||
        at::isFloatingType(env_ids.scalar_type()) || env_ids.scalar_type() == at::kBool)
      fail(ErrorKind::shape, "env_id of {}: pass a 1-D array of env indices, one for each row of actions",
           described(env_ids));
    const at::Tensor ids = env_ids.to(torch::kInt).contiguous();
    if (!env_ids.eq(ids.to(env_ids.scalar_type())).all().item<bool>())
      fail(ErrorKind::shape, "env_id holds values beyond int32: pass env indices 0..{}", size() - 1);
    const at::Tensor a = checked_actions(actions, spec_, ids.numel());
    const std::span<const std::int32_t> id_span(ids.data_ptr<std::int32_t>(), ids.numel());
    if (spec_.discrete()) vec_->send(std::span<const std::int32_t>(a.data_ptr<std::int32_t>(), a.numel()), id_span);
    else vec_->send(std::span<const float>(a.data_ptr<float>(), a.numel()), id_span);
  }

  StepResult recv() {
    one_caller_.check("recv()");
    (void)vec_->wait_for(std::chrono::nanoseconds(0));  // refuses here, with the GIL, when it could never end
    {
      const OneCaller::Waiting waiting = one_caller_.waiting();
      sleep_until([this](std::chrono::nanoseconds limit) { return vec_->wait_for(limit); }, std::nullopt,
                  "a batch of env steps");
    }
    const envs::AsyncBatch batch = vec_->recv();
    StepResult r;
    r.observations = observations_[static_cast<std::size_t>(batch.buffer)];
    observations_[static_cast<std::size_t>(batch.buffer)] = next_observations();
    observe(batch.buffer);
    r.rewards = copy_of(batch.rewards, torch::kFloat);
    r.terminated = copy_of(batch.terminated, torch::kUInt8).to(torch::kBool);
    r.truncated = copy_of(batch.truncated, torch::kUInt8).to(torch::kBool);
    r.final_observations = copy_of(batch.final_observations, torch::kFloat).view({batch_size(), I(spec_.obs_dim)});
    r.episode_returns = copy_of(batch.episode_returns, torch::kDouble);
    r.episode_lengths = copy_of(batch.episode_lengths, torch::kInt);
    r.env_ids = copy_of(batch.env_ids, torch::kInt);
    return r;
  }

 private:
  at::Tensor next_observations() const { return torch::empty({batch_size(), I(spec_.obs_dim)}, torch::kFloat); }
  void observe(int buffer) {
    at::Tensor& rows = observations_[static_cast<std::size_t>(buffer)];
    vec_->observe_into(buffer, std::span<float>(rows.data_ptr<float>(), rows.numel()));
  }

  EnvSpec spec_;
  OneCaller one_caller_;
  std::vector<at::Tensor> observations_;    // buffer b's next batch writes into observations_[b]
  std::unique_ptr<envs::AsyncVecEnv> vec_;  // last: its workers stop before the tensors they write go
};

}  // namespace

void bind_async_envs(py::module_& m) {
  py::class_<PyAsyncVecEnv>(m, "AsyncVecEnv")
      .def(py::init([](const std::string& name, const std::string& plugin, py::handle num_envs, py::handle batch_size,
                       py::handle threads, py::handle seed) {
             const EnvRequest r = env_request(name, plugin, num_envs, threads, seed);
             return std::make_unique<PyAsyncVecEnv>(
                 r, integer_as<int>(batch_size, "tandem.envs.make batch_size", 1, r.num_envs));
           }),
           py::arg("name"), py::arg("plugin"), py::arg("num_envs"), py::arg("batch_size"), py::arg("threads"),
           py::arg("seed"))
      .def_property_readonly("spec", [](const PyAsyncVecEnv& v) { return spaces_of(v.spec()); })
      .def_property_readonly("num_envs", &PyAsyncVecEnv::size)
      .def_property_readonly("batch_size", &PyAsyncVecEnv::batch_size)
      .def_property_readonly("threads", &PyAsyncVecEnv::threads)
      .def(
          "reset", [](PyAsyncVecEnv& v, py::handle seed) { v.reset(reset_seed(seed)); }, py::arg("seed"))
      .def("send", &PyAsyncVecEnv::send, py::arg("actions"), py::arg("env_ids"))
      .def("recv", &PyAsyncVecEnv::recv);
}

}  // namespace tandem::python
