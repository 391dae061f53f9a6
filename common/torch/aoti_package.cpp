#include "common/torch/aoti_package.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <unordered_map>

#include "common/error.hpp"

#if defined(TANDEM_TORCH_CUDA) && __has_include(<torch/csrc/inductor/aoti_package/model_package_loader.h>)
#define TANDEM_AOTI 1
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#endif

namespace tandem {

#ifdef TANDEM_AOTI

std::optional<std::string> AotiPackage::unsupported() { return std::nullopt; }

struct AotiPackage::Impl {
  std::unique_ptr<torch::inductor::AOTIModelPackageLoader> loader;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> sources;  // (our tensor, its staging copy)
  // The package's constants by FQN: staging copies that own their storage, because the loader copies
  // a constant's whole storage, and our tensors are views into one flat buffer (flat_params.hpp).
  std::unordered_map<std::string, torch::Tensor> staging;
  c10::DeviceIndex device;
};

AotiPackage::AotiPackage(const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& weights,
                         const torch::Device& device)
    : path_(path), impl_(std::make_unique<Impl>()) {
  if (!device.is_cuda()) fail("AOTInductor package '{}' runs on a GPU: set the actor's device to cuda", path);
  if (!std::filesystem::is_regular_file(path))
    fail("AOTInductor package '{}' does not exist: make it with tools/export_aoti.py (docs/CUDA_GRAPHS.md)", path);
  impl_->device = device.index();
  c10::cuda::CUDAGuard guard(impl_->device);
  try {
    impl_->loader = std::make_unique<torch::inductor::AOTIModelPackageLoader>(path, "model",
                                                                              /*run_single_threaded=*/false,
                                                                              /*num_runners=*/1, impl_->device);
  } catch (const std::exception& e) {
    fail("'{}' is not an AOTInductor package this LibTorch loads ({}): export it with this torch version", path,
         first_line(e));
  }
  std::unordered_map<std::string, torch::Tensor> ours(weights.begin(), weights.end());
  const auto theirs = impl_->loader->get_runner()->extract_constants_map(/*use_inactive=*/false);
  for (const std::string& fqn : impl_->loader->get_constant_fqns()) {
    const auto mine = ours.find(fqn);
    if (mine == ours.end())
      fail(
          "AOTInductor package '{}' has a constant '{}' that the model has no parameter or buffer for: export it "
          "from a module with the learner's state_dict names",
          path, fqn);
    const auto it = theirs.find(fqn);
    if (it != theirs.end() &&
        (it->second.sizes() != mine->second.sizes() || it->second.scalar_type() != mine->second.scalar_type()))
      fail("AOTInductor package '{}' holds '{}' as {} [{}], the model as {} [{}]: export it from the same architecture",
           path, fqn, c10::toString(it->second.scalar_type()), fmt::join(it->second.sizes(), "x"),
           c10::toString(mine->second.scalar_type()), fmt::join(mine->second.sizes(), "x"));
    impl_->sources.emplace_back(mine->second, torch::empty_like(mine->second, at::MemoryFormat::Contiguous));
    impl_->staging.emplace(fqn, impl_->sources.back().second);
  }
}

AotiPackage::~AotiPackage() = default;

void AotiPackage::load_weights() {
  c10::cuda::CUDAGuard guard(impl_->device);
  for (auto& [ours, copy] : impl_->sources) copy.copy_(ours);
  // The loader copies with a blocking cudaMemcpy, which does not wait for our (non-blocking) stream.
  c10::cuda::getCurrentCUDAStream(impl_->device).synchronize();
  // Copied into the inactive buffer while the active one may still serve, then swapped in.
  impl_->loader->load_constants(impl_->staging, /*use_inactive=*/true, /*check_full_update=*/true);
  impl_->loader->get_runner()->swap_constant_buffer();
}

torch::Tensor AotiPackage::run(const torch::Tensor& x) {
  c10::cuda::CUDAGuard guard(impl_->device);
  void* stream = c10::cuda::getCurrentCUDAStream(impl_->device).stream();
  std::vector<torch::Tensor> out = impl_->loader->run({x}, stream);
  if (out.empty()) fail("AOTInductor package '{}' returned no output: export a module that returns its logits", path_);
  return out[0];
}

#else

std::optional<std::string> AotiPackage::unsupported() {
  return "this build's LibTorch has no AOTInductor package loader (LibTorch 2.x with CUDA has)";
}

struct AotiPackage::Impl {};

AotiPackage::AotiPackage(const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>&,
                         const torch::Device&)
    : path_(path) {
  fail("model package '{}': {}", path, *unsupported());
}
AotiPackage::~AotiPackage() = default;
void AotiPackage::load_weights() {}
torch::Tensor AotiPackage::run(const torch::Tensor&) { fail("AOTInductor packages need LibTorch 2.x with CUDA"); }

#endif

}  // namespace tandem
