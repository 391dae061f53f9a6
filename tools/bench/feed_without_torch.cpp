// `tandem-bench feed` in a build without LibTorch: the feeds are LibTorch code.
#include "common/error.hpp"
#include "tools/bench/feed_options.hpp"

namespace tandem::bench {

int bench_feed(const FeedBenchOptions&) {
  fail("tandem-bench feed needs LibTorch and this build has none: install libtorch-dev (or pass -Dtorch_root) and rebuild");
}

}  // namespace tandem::bench
