// _tandem.VecEnv: Tandem's C++ vector env (envs/vec_env.hpp) driven from a Python loop, the way EnvPool
// is used; python/tandem/envs.py wraps it in Gymnasium's vector API.
//
// Stepping happens on a thread of the env's own (the stepper), which owns the VecEnv and steps envs
// beside the VecEnv's workers. send() hands the stepper the actions and returns at once; recv()
// waits for the step without the GIL (Ctrl-C still ends the wait) and returns it. step() is send()
// then recv().
//
// Outputs: every reset and step writes into tensors made for it, the envs writing their observations
// straight into the returned one (no copy of them), so what an earlier step returned is never
// overwritten; rewards and flags are copied (a few bytes an env).
//
// Threads: one Python thread at a time may call a VecEnv (as with any Gymnasium env); calls hold the
// GIL except while recv() waits. The stepper and the caller hand the step over under one mutex.
#include "python/bindings/env_io.hpp"  // first: LibTorch's at::Tensor caster before pybind11's headers

#include <pybind11/stl.h>

#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>

#include "common/error.hpp"
#include "envs/env_source.hpp"
#include "envs/vec_env.hpp"
#include "python/bindings/arguments.hpp"
#include "python/bindings/blocking.hpp"
#include "python/bindings/module.hpp"

namespace tandem::python {
namespace {

using I = std::int64_t;

class PyVecEnv {
 public:
  explicit PyVecEnv(const EnvRequest& r) {
    const envs::EnvSource source(r.settings);
    spec_ = source.spec();
    vec_ = std::make_unique<envs::VecEnv>(source.make(r.num_envs), r.seed, 0, 0, r.threads);
    stepper_ = std::jthread([this](const std::stop_token& stop) { run(stop); });
  }
  ~PyVecEnv() {
    if (one_caller_.forked()) {  // a child after fork(): the threads are the parent's (env_io.hpp)
      // Leaked, not joined or detached: either would call pthread on a thread this process lacks.
      (void)new std::jthread(std::move(stepper_));
      (void)vec_.release();
      (void)handoff_.release();
      return;
    }
    stepper_.request_stop();
    handoff_->cv.notify_all();
  }

  const EnvSpec& spec() const { return spec_; }
  int size() const { return vec_->size(); }
  int threads() const { return vec_->threads(); }

  StepResult reset(std::optional<std::uint64_t> seed) {
    require_idle("reset()");
    at::Tensor obs = next_observations();
    {
      py::gil_scoped_release release;  // resetting hundreds of MuJoCo envs takes a while
      vec_->observe_into(std::span<float>(obs.data_ptr<float>(), obs.numel()));
      vec_->reset(seed);
    }
    return result(obs, /*stepped=*/false);
  }

  void send(const at::Tensor& actions) {
    require_idle("send()");
    at::Tensor a = checked_actions(actions, spec_, vec_->size());
    observations_ = next_observations();
    std::lock_guard lock(handoff_->mutex);
    actions_ = std::move(a);
    pending_ = true;
    error_ = nullptr;
    handoff_->cv.notify_all();
  }

  StepResult recv() {
    {
      one_caller_.check("recv()");
      std::lock_guard lock(handoff_->mutex);
      if (!pending_ && !done_) fail("recv() without a send() before it: call send(actions) first");
    }
    const OneCaller::Waiting waiting = one_caller_.waiting();
    sleep_until(
        [this](std::chrono::nanoseconds limit) {
      std::unique_lock lock(handoff_->mutex);
      return handoff_->cv.wait_for(lock, limit, [this] { return done_; });
        },
        std::nullopt, "an env step");
    std::exception_ptr error;
    {
      std::lock_guard lock(handoff_->mutex);
      done_ = false;
      error = std::exchange(error_, nullptr);
    }
    if (error) {
      broken_ = true;
      std::rethrow_exception(error);
    }
    return result(observations_, /*stepped=*/true);
  }

 private:
  at::Tensor next_observations() const { return torch::empty({vec_->size(), I(spec_.obs_dim)}, torch::kFloat); }

  void require_idle(const char* call) const {
    one_caller_.check(call);
    if (broken_) fail("this env raised in an earlier step and cannot step again: make a new one");
    std::lock_guard lock(handoff_->mutex);
    if (pending_ || done_) fail("{} while a step sent with send() is not received: call recv() first", call);
  }

  // The stepper thread: waits for send(), steps, hands the step back.
  void run(const std::stop_token& stop) {
    std::unique_lock lock(handoff_->mutex);
    for (;;) {
      handoff_->cv.wait(lock, [&] { return pending_ || stop.stop_requested(); });
      if (stop.stop_requested()) return;
      lock.unlock();
      std::exception_ptr error;
      try {
        step_now();
      } catch (...) {
        error = std::current_exception();
      }
      lock.lock();
      pending_ = false;
      done_ = true;
      error_ = error;
      handoff_->cv.notify_all();
    }
  }

  void step_now() {
    vec_->observe_into(std::span<float>(observations_.data_ptr<float>(), observations_.numel()));
    const bool stepped = spec_.discrete()
                             ? vec_->step(
                                   std::span<const std::int32_t>(actions_.data_ptr<std::int32_t>(), actions_.numel()))
                             : vec_->step(std::span<const float>(actions_.data_ptr<float>(), actions_.numel()));
    if (!stepped) fail("the env refused the actions (checked before sending: a bug in tandem.envs)");
  }

  StepResult result(const at::Tensor& obs, bool stepped) const {
    StepResult r;
    r.observations = obs;
    r.rewards = copy_of(vec_->rewards(), torch::kFloat);
    r.terminated = copy_of(vec_->terminated(), torch::kUInt8).to(torch::kBool);
    r.truncated = copy_of(vec_->truncated(), torch::kUInt8).to(torch::kBool);
    if (!stepped) {  // a reset ends no episode
      r.rewards.zero_();
      r.terminated.zero_();
      r.truncated.zero_();
    }
    r.final_observations = copy_of(vec_->final_observations(), torch::kFloat).view({vec_->size(), I(spec_.obs_dim)});
    r.episode_returns = copy_of(vec_->episode_returns(), torch::kDouble);
    r.episode_lengths = copy_of(vec_->episode_lengths(), torch::kInt);
    return r;
  }

  EnvSpec spec_;
  std::unique_ptr<envs::VecEnv> vec_;
  at::Tensor observations_;  // where the step in flight writes its observations
  at::Tensor actions_;
  // On the heap so that a forked child can leak it: the stepper waits on the cv, and destroying a cv
  // with a waiter blocks (glibc), a waiter the child's copy still counts.
  struct Handoff {
    std::mutex mutex;
    std::condition_variable cv;
  };
  std::unique_ptr<Handoff> handoff_ = std::make_unique<Handoff>();
  bool pending_ = false;  // sent, not yet stepped
  bool done_ = false;     // stepped, not yet received
  bool broken_ = false;   // an env threw: the VecEnv must not step again (vec_env.hpp)
  std::exception_ptr error_;
  OneCaller one_caller_;
  std::jthread stepper_;  // last: joins before the members it uses go
};

}  // namespace

void bind_envs(py::module_& m) {
  py::class_<StepResult>(m, "StepResult")
      .def_readonly("observations", &StepResult::observations)
      .def_readonly("rewards", &StepResult::rewards)
      .def_readonly("terminated", &StepResult::terminated)
      .def_readonly("truncated", &StepResult::truncated)
      .def_readonly("final_observations", &StepResult::final_observations)
      .def_readonly("episode_returns", &StepResult::episode_returns)
      .def_readonly("episode_lengths", &StepResult::episode_lengths)
      .def_readonly("env_ids", &StepResult::env_ids);

  py::class_<PyVecEnv>(m, "VecEnv")
      .def(py::init([](const std::string& name, const std::string& plugin, py::handle num_envs, py::handle threads,
                       py::handle seed) {
             return std::make_unique<PyVecEnv>(env_request(name, plugin, num_envs, threads, seed));
           }),
           py::arg("name"), py::arg("plugin"), py::arg("num_envs"), py::arg("threads"), py::arg("seed"))
      .def_property_readonly("spec", [](const PyVecEnv& v) { return spaces_of(v.spec()); })
      .def_property_readonly("num_envs", &PyVecEnv::size)
      .def_property_readonly("threads", &PyVecEnv::threads)
      .def(
          "reset", [](PyVecEnv& v, py::handle seed) { return v.reset(reset_seed(seed)); }, py::arg("seed"))
      .def("send", &PyVecEnv::send, py::arg("actions"))
      .def("recv", &PyVecEnv::recv);
  m.def("env_names", &envs::builtin_env_names, "the built-in envs' names (envs/env_source.hpp)");
}

}  // namespace tandem::python
