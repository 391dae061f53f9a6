#include "python/bindings/blocking.hpp"

#include <torch/csrc/autograd/python_variable.h>  // before pybind11: the at::Tensor caster

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <future>
#include <thread>

#include "common/error.hpp"
#include "python/bindings/module.hpp"

namespace tandem::python {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kSignalCheck = std::chrono::milliseconds(50);

// With the GIL released by the caller: takes it for one signal check, throws what a handler raised.
void check_signals() {
  py::gil_scoped_acquire gil;
  if (PyErr_CheckSignals() != 0) throw py::error_already_set();
}

}  // namespace

void run_interruptible(const std::function<void(const std::atomic<bool>&)>& work) {
  std::atomic<bool> cancel{false};
  std::future<void> done = std::async(std::launch::async, [&] { work(cancel); });
  std::exception_ptr interrupted;
  {
    py::gil_scoped_release release;
    while (done.wait_for(kSignalCheck) != std::future_status::ready) {
      if (interrupted) continue;  // cancelled: wait for the helper to wind down
      try {
        check_signals();
      } catch (...) {
        interrupted = std::current_exception();
        cancel.store(true);
      }
    }
  }
  if (interrupted) {
    try {
      done.get();
    } catch (...) {  // the helper's answer to the cancel: the interrupt is what the caller sees
    }
    std::rethrow_exception(interrupted);
  }
  done.get();
}

void poll_until(const std::function<bool()>& ready, std::optional<double> timeout_s, std::string_view what) {
  py::gil_scoped_release release;
  const auto start = Clock::now();
  auto next_check = start + kSignalCheck;
  auto pause = std::chrono::microseconds(20);
  while (!ready()) {
    const auto now = Clock::now();
    if (timeout_s && now - start >= std::chrono::duration<double>(*timeout_s))
      fail(ErrorKind::timeout, "{} did not happen within {} s", what, *timeout_s);
    if (now >= next_check) {
      check_signals();
      next_check = now + kSignalCheck;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
  }
}

void sleep_until(const std::function<bool(std::chrono::nanoseconds)>& wait, std::optional<double> timeout_s,
                 std::string_view what) {
  py::gil_scoped_release release;
  const auto start = Clock::now();
  for (;;) {
    std::chrono::nanoseconds slice = kSignalCheck;
    if (timeout_s) {
      const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(*timeout_s) -
                                                                             (Clock::now() - start));
      if (left <= std::chrono::nanoseconds::zero()) {
        if (wait(std::chrono::nanoseconds::zero())) return;
        fail(ErrorKind::timeout, "{} did not happen within {} s", what, *timeout_s);
      }
      slice = std::min(slice, left);
    }
    if (wait(slice)) return;
    check_signals();
  }
}

}  // namespace tandem::python
