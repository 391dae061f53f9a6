#include "learner/rl/rl_checkpoint.hpp"

#include <fmt/ranges.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <charconv>
#include <vector>

#include "common/error.hpp"
#include "common/torch/safetensors.hpp"

namespace tandem::rl {
namespace {

constexpr const char* kFormat = "tandem-checkpoint-1";  // the trainer's: one format for every learner

NamedTensors everything(const Model& model, const Optimizer& optimizer, const NamedTensors& learner_state) {
  NamedTensors all;
  for (auto& [name, t] : model.named_parameters()) all.emplace_back("model." + name, t);
  for (auto& [name, t] : model.named_buffers()) all.emplace_back("model." + name, t);
  for (auto& [name, t] : optimizer.state_tensors()) all.emplace_back("optim." + name, t);
  for (auto& [name, t] : learner_state) all.emplace_back("rl." + name, t);
  return all;
}

}  // namespace

void save_checkpoint(const std::string& path, const Model& model, const Optimizer& optimizer, std::int64_t step,
                     const std::map<std::string, std::string>& extra, const NamedTensors& learner_state) {
  safetensors::Metadata meta(extra.begin(), extra.end());
  meta["format"] = kFormat;
  meta["step"] = std::to_string(step);
  meta["optimizer"] = optimizer.config().kind;
  meta["optimizer_steps"] = std::to_string(optimizer.steps_taken());
  meta["model"] = model.spec().name;
  safetensors::save_file(path, everything(model, optimizer, learner_state), meta);
}

std::uint64_t metadata_count(const std::string& path, const std::map<std::string, std::string>& meta,
                             const std::string& key, std::uint64_t otherwise) {
  const auto it = meta.find(key);
  if (it == meta.end()) return otherwise;
  std::uint64_t v = 0;
  const std::string& text = it->second;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size())
    fail("checkpoint {} has {} \"{}\", not a count: remove the file or resume from another run dir", path, key, text);
  return v;
}

Restored load_checkpoint(const std::string& path, Model& model, Optimizer& optimizer,
                         const NamedTensors& learner_state) {
  const safetensors::Contents c = safetensors::load_file(path);
  if (c.meta("format") != kFormat)
    fail("{} is a '{}' file, not a {}: point resume at a Tandem checkpoint", path, c.meta("format"), kFormat);
  if (c.meta("optimizer") != optimizer.config().kind)
    fail("{} holds {} optimizer state, this run uses {}: resume with the same optimizer or start afresh", path,
         c.meta("optimizer"), optimizer.config().kind);
  std::vector<std::pair<torch::Tensor, const torch::Tensor*>> copies;
  for (auto& [name, into] : everything(model, optimizer, learner_state)) {
    if (!c.has(name))
      fail(
          "{} has no tensor '{}': it was written with other rl.norm_obs / rl.norm_reward settings or another model; "
          "resume with the settings that wrote it or start a new run dir",
          path, name);
    const torch::Tensor& t = c.at(name);
    if (t.sizes() != into.sizes() || t.scalar_type() != into.scalar_type())
      fail("{} holds '{}' as {} [{}], this model has {} [{}]: resume with the model and env that wrote it", path, name,
           c10::toString(t.scalar_type()), fmt::join(t.sizes(), "x"), c10::toString(into.scalar_type()),
           fmt::join(into.sizes(), "x"));
    copies.emplace_back(into, &t);
  }
  const std::int64_t step = static_cast<std::int64_t>(metadata_count(path, c.metadata, "step", 0));
  const std::int64_t optimizer_steps = static_cast<std::int64_t>(
      metadata_count(path, c.metadata, "optimizer_steps", 0));
  {
    torch::NoGradGuard no_grad;
    for (auto& [into, from] : copies) into.copy_(*from);
  }
  optimizer.set_steps_taken(optimizer_steps);
  return {step, c.metadata};
}

}  // namespace tandem::rl
