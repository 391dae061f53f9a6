// Waiting from Python. Every wait releases the GIL (other Python threads run meanwhile) and still
// answers Ctrl-C: the waiting thread wakes at least every 50 ms to let Python run its signal handlers
// (PyErr_CheckSignals, which acts only on the main thread), and a handler's exception
// (KeyboardInterrupt) ends the wait and propagates as py::error_already_set.
//
// Threads: call with the GIL held, from any Python thread.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <optional>
#include <string_view>

namespace tandem::python {

// Runs work(cancel) on a helper thread and waits for it. When a signal handler raises, `cancel` is set;
// `work` must notice it soon (a progress callback that throws, say) and return or throw; its own
// exception is then dropped in favour of the Python one. Otherwise work's exception propagates.
void run_interruptible(const std::function<void(const std::atomic<bool>& cancel)>& work);

// Calls ready() without the GIL until it returns true, sleeping 20 us growing to 1 ms between tries.
// timeout_s: nullopt waits for ever; else a UserError of kind timeout ("<what> did not happen within
// <t> s"; Python's TimeoutError) when it runs out.
void poll_until(const std::function<bool()>& ready, std::optional<double> timeout_s, std::string_view what);

// As poll_until, for a condition with a way to sleep on it: wait(limit) returns true once it holds, else
// sleeps until it may (a futex wake) or `limit` passed and returns false. Nothing polls meanwhile.
void sleep_until(const std::function<bool(std::chrono::nanoseconds limit)>& wait, std::optional<double> timeout_s,
                 std::string_view what);

}  // namespace tandem::python
