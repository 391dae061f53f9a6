// GraphCapture: one training step's device work, warmed up eagerly, captured once in a CUDA graph and
// replayed every step after. CapturedTrainStep (the supervised step) and the RL update's PPO minibatch
// (learner/rl/update.hpp) build on it.
//
//   GraphCapture g(device, 3);
//   switch (g.run([&] { body(); })) { case GraphCapture::Ran::refused: /* run the step eagerly */ ... }
//
// The first `warmup_steps` calls run the body eagerly on a side stream (cuDNN and cuBLAS make their
// handles and workspaces, autograd allocates the gradients), as PyTorch's CUDA-graph notes require;
// the next call captures it on that side stream and replays it on the caller's stream, as does every
// later one. Capturing runs no kernel, so a refused capture has changed nothing on the device: the
// caller then runs that step, and the later ones, another way (why_refused() says why, one line).
//
// The body: the same device work on every call, over tensors that keep their addresses (inputs the
// caller fills before each call, parameters, gradients, outputs), and no host read of a device value
// (.item(), nonzero(), a data-dependent shape). Capture is thread-local: other threads' CUDA calls (the
// publisher's, the feeds') go on meanwhile. Threads: the one thread that drives the step, always with
// the same current stream. In a build whose LibTorch has no CUDA the constructor throws a UserError.
#pragma once

#include <torch/types.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace tandem {

class GraphCapture {
 public:
  // Why a step on `device` cannot be captured (a CPU device, a build without CUDA), or nullopt.
  static std::optional<std::string> unsupported(torch::Device device);

  GraphCapture(torch::Device device, int warmup_steps);
  ~GraphCapture();
  GraphCapture(const GraphCapture&) = delete;
  GraphCapture& operator=(const GraphCapture&) = delete;

  enum class Ran { warmup, replayed, refused };
  // refused: the capture failed this call; nothing ran, and every later call is refused too.
  Ran run(const std::function<void()>& body);
  // Runs fn on the side stream the warm-up and capture use, ordered after, and before, the caller's
  // stream (a data-parallel sync's hooks are made there, so their accumulators share it).
  void on_side_stream(const std::function<void()>& fn);

  bool captured() const;                   // the graph exists and replays
  const std::string& why_refused() const;  // empty until a capture fails

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem
