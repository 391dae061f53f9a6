// `tandem-bench python`: is the `tandem` Python package as fast as the C++ it binds? In one run, on
// the same dataset cache and the same model size:
//   feed     the C++ HostFeed (and DeviceFeed on a GPU) and the same feeds through `import tandem`
//            (bench/python/python_side.py), samples/s at batch 256/512/1024, alternating C++ and
//            Python for --rounds rounds, the best round of each kept (2 shared cores are noisy)
//   publish  learner::ModelPublisher and tandem.WeightPublisher over a --tensors-tensor float32 model of
//            --bytes: publish-to-visible (the commit's publish_ns minus the clock before publish())
//            and the time inside publish(), median of --reps after a publish into every slot; also
//            alternating for --rounds rounds, the round with the lower median kept
// With --peer, bench/peers/feed_peer.py (DataLoader) and bench/peers/publish_peer.py (state_dict ->
// load_state_dict) run in the same run, and the ratios are printed against their targets.
#pragma once

#include <cstdint>
#include <string>

namespace tandem::bench {

struct PythonBenchOptions {
  std::string dataset;  // empty: 50000 synthetic 3x32x32 uint8 samples in a temporary cache
  std::string split = "train";
  double seconds = 2.0;  // per feed measurement
  int rounds = 2;
  std::string bytes = "605000000";  // the publish model's size (K/M/G suffixes are powers of 1024)
  int tensors = 256;
  int reps = 20;
  std::string json;
  bool peer = false;
  std::string python = "python3";
  std::string script;  // python_side.py; default: found in the source tree
  unsigned workers = 0;
  unsigned ring_slots = 4;
  std::uint32_t device = 0;
};

// Built from python_bench.cpp where LibTorch is found, else from python_without_torch.cpp.
int bench_python(const PythonBenchOptions& options);

}  // namespace tandem::bench
