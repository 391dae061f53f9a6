// TorchScript models for tests, made without Python: Module::define compiles the source.
#pragma once

#include <torch/script.h>
#include <torch/types.h>

#include <cstdint>
#include <string>

namespace tandem::test {

// A linear classifier from `in` flattened inputs to `classes` logits, saved to `path`.
inline void save_linear_torchscript(const std::string& path, std::int64_t in, std::int64_t classes) {
  torch::jit::Module m("Linear");
  m.register_attribute("training", c10::BoolType::get(), true);  // as torch.jit.script gives every module
  m.register_parameter("weight", (torch::randn({classes, in}) * 0.01).requires_grad_(true), false);
  m.register_parameter("bias", torch::zeros({classes}).requires_grad_(true), false);
  m.define(R"(
def forward(self, x):
    return torch.addmm(self.bias, x.flatten(1), self.weight.t())
)");
  m.save(path);
}

}  // namespace tandem::test
