// The report of `tandem-bench publish`: the latency table, the peer's comparison (--peer) and the
// JSON line. Returns the exit code: 1 when a reader saw a torn read or a version go backwards.
#pragma once

#include "bench/publish_options.hpp"
#include "bench/publish_writer.hpp"

namespace tandem::bench {

int report_publish(const PublishBenchOptions& options, const ModelSize& size, const PublishMeasurement& m);

}  // namespace tandem::bench
