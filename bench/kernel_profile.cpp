#include "bench/kernel_profile.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "common/error.hpp"

#if defined(TANDEM_TORCH_CUDA) && __has_include(<torch/csrc/autograd/profiler_kineto.h>)
#define TANDEM_KINETO 1
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#endif

namespace tandem::bench {

void KernelProfile::print(std::FILE* out, std::size_t top) const {
  fmt::print(out, "  {:.3f} ms of kernels per call, {:.0f} launches\n", busy_ms_per_call, launches_per_call);
  for (std::size_t i = 0; i < std::min(top, rows.size()); ++i)
    fmt::print(out, "  {:8.3f} ms {:6.1f}x  {}\n", rows[i].ms_per_call, rows[i].launches_per_call, rows[i].name);
}

void KernelProfile::print_sequence(std::FILE* out) const {
  if (sequence.empty()) {
    fmt::print(out, "  (no launch sequence: no kernels ran, or the profiled calls launched different ones)\n");
    return;
  }
  double at_ms = 0;
  for (std::size_t i = 0; i < sequence.size(); ++i) {
    fmt::print(out, "  {:4d} {:8.3f} {:8.3f} ms  {}\n", i, at_ms, sequence[i].ms_per_call, sequence[i].name);
    at_ms += sequence[i].ms_per_call;
  }
}

#ifdef TANDEM_KINETO

namespace {

// "void at::native::foo<float, 4>(Args)" -> "at::native::foo": the template makes one name per
// instantiation, which hides how much one kind of kernel costs. ATen's elementwise kernels are one
// template for every op, so for them the op (the functor, their second template argument) is kept:
// "at::native::vectorized_elementwise_kernel [CUDAFunctor_add]".
std::string short_name(std::string name) {
  for (const std::string noise : {"(anonymous namespace)::", "void ", "at::native::"}) {
    for (std::size_t at; (at = name.find(noise)) != std::string::npos;) name.erase(at, noise.size());
  }
  const std::size_t open = std::min(name.find('<'), name.find('('));
  std::string shown = name.substr(0, open);
  if (shown.ends_with("elementwise_kernel") && open < name.size() && name[open] == '<') {
    const std::size_t comma = name.find(", ", open);
    if (comma != std::string::npos) {
      const std::size_t end = std::min(name.find_first_of("<,(", comma + 2), name.size());
      shown += " [" + name.substr(comma + 2, end - comma - 2).substr(0, 60) + "]";
    }
  }
  return shown.substr(0, 100);
}

}  // namespace

KernelProfile profile_kernels(const std::function<void()>& call, int calls) {
  namespace prof = torch::profiler::impl;
  call();
  c10::cuda::device_synchronize();
  const prof::ProfilerConfig config(prof::ProfilerState::KINETO);
  const std::set<prof::ActivityType> activities{prof::ActivityType::CUDA};
  torch::autograd::profiler::prepareProfiler(config, activities);
  torch::autograd::profiler::enableProfiler(config, activities);
  for (int i = 0; i < calls; ++i) call();
  c10::cuda::device_synchronize();
  const auto result = torch::autograd::profiler::disableProfiler();
  std::vector<const torch::autograd::profiler::KinetoEvent*> events;
  for (const auto& e : result->events())
    if (e.deviceType() == c10::DeviceType::CUDA) events.push_back(&e);
  std::sort(events.begin(), events.end(), [](const auto* a, const auto* b) { return a->startNs() < b->startNs(); });
  std::vector<KernelRow> launches;  // in launch order, each as one call's share
  for (const auto* e : events)
    launches.push_back({short_name(e->name()), static_cast<double>(e->durationNs()) / 1e6 / calls, 1.0 / calls});

  std::map<std::string, KernelRow> by_name;
  KernelProfile p;
  for (const KernelRow& launch : launches) {
    KernelRow& row = by_name[launch.name];
    row.name = launch.name;
    row.ms_per_call += launch.ms_per_call;
    row.launches_per_call += launch.launches_per_call;
  }
  const std::size_t per_call = launches.size() / static_cast<std::size_t>(calls);
  bool same_every_call = launches.size() % static_cast<std::size_t>(calls) == 0;
  for (std::size_t i = per_call; same_every_call && i < launches.size(); ++i)
    same_every_call = launches[i].name == launches[i % per_call].name;
  if (same_every_call) {
    p.sequence.resize(per_call);
    for (std::size_t i = 0; i < launches.size(); ++i) {
      KernelRow& row = p.sequence[i % per_call];
      row.name = launches[i].name;
      row.ms_per_call += launches[i].ms_per_call;
      row.launches_per_call = 1;
    }
  }
  for (auto& [name, row] : by_name) {
    p.busy_ms_per_call += row.ms_per_call;
    p.launches_per_call += row.launches_per_call;
    p.rows.push_back(row);
  }
  std::sort(p.rows.begin(), p.rows.end(),
            [](const KernelRow& a, const KernelRow& b) { return a.ms_per_call > b.ms_per_call; });
  return p;
}

#else

KernelProfile profile_kernels(const std::function<void()>&, int) {
  fail("bench graph --profile needs a CUDA build of LibTorch 2.x (its Kineto profiler)");
}

#endif

}  // namespace tandem::bench
