// The benches that need LibTorch, in a build without it: each command still exists and says what is
// missing. One pattern serves every command whose library a build may lack: meson compiles a
// `*_without_<library>.cpp` in place of the real sources (tools/plot/plot_without_cairo.cpp for
// cairo), so the files both builds share carry no #ifdef for it.
#include <string_view>

#include "common/error.hpp"
#include "bench/block_options.hpp"
#include "bench/feed_options.hpp"
#include "bench/graph_options.hpp"
#include "bench/python_options.hpp"

namespace tandem::bench {
namespace {

[[noreturn]] void needs_torch(std::string_view bench) {
  fail(
      "bench {} needs LibTorch and this build has none: install libtorch-dev (or pass -Dtorch_root) and "
      "rebuild",
      bench);
}

}  // namespace

int bench_feed(const FeedBenchOptions&) { needs_torch("feed"); }
int bench_graph(const GraphBenchOptions&) { needs_torch("graph"); }
int bench_block(const BlockBenchOptions&) { needs_torch("block"); }
int bench_python(const PythonBenchOptions&) { needs_torch("python"); }

}  // namespace tandem::bench
