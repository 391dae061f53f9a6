// `tandem-bench python` in a build without LibTorch: the feeds, the publisher and the package need it.
#include "common/error.hpp"
#include "tools/bench/python_options.hpp"

namespace tandem::bench {

int bench_python(const PythonBenchOptions&) {
  fail("tandem-bench python needs LibTorch and this build has none: install libtorch-dev (or pass -Dtorch_root) and "
       "rebuild");
}

}  // namespace tandem::bench
