// A model compiled ahead of time by AOTInductor (a `.pt2` package) as an evaluation forward whose
// weights follow the learner's: constants swapped in from the model's tensors on every new version,
// never recompiled.
//
//   AotiPackage package("resnet18.pt2", model.named_parameters() + named_buffers(), device);
//   package.load_weights();                 // after the follower copied a version into those tensors
//   torch::Tensor logits = package.run(x);  // x on the package's GPU
//
// How a user makes the package: docs/CUDA_GRAPHS.md, "AOTInductor packages" (tools/export_aoti.py).
// Every constant of the package must be one of the given tensors by name (the state_dict name of the
// Python module it was exported from), with the same shape and dtype: checked at load, one line
// naming the first mismatch. load_weights() copies the tensors into the package's inactive constant
// buffer and swaps it in (AOTIModelContainerRunner), so a run never sees half a version.
// Needs LibTorch 2.x with CUDA and its AOTInductor loader: unsupported() says why not; elsewhere
// the constructor throws that reason as a UserError (the LibTorch 1.13 CPU build compiles without it).
// Threads: one thread; runs on the current CUDA stream.
#pragma once

#include <torch/types.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tandem {

class AotiPackage {
 public:
  static std::optional<std::string> unsupported();

  AotiPackage(const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& weights,
              const torch::Device& device);
  ~AotiPackage();
  AotiPackage(const AotiPackage&) = delete;
  AotiPackage& operator=(const AotiPackage&) = delete;

  void load_weights();
  torch::Tensor run(const torch::Tensor& x);  // the package's first output
  const std::string& path() const { return path_; }

 private:
  struct Impl;
  std::string path_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem
