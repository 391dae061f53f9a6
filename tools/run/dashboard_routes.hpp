// What the launcher's endpoint (and `tandem dashboard RUN_DIR`) serves:
//   /  and /dashboard   the page (tools/dashboard/, embedded at build time with its chart library)
//   /metrics            Prometheus text (a live job only)
//   /api/state          status_json() of a live job; {"live": false, ...} for a finished run dir
//   /api/history?metrics=M&eval=E
//                       the run dir's metrics.jsonl and eval.jsonl from byte offsets M and E, whole
//                       lines only, at most 4 MiB of each per answer: {"live", "job", "run_dir",
//                       "metrics": {"text", "next", "size"}, "eval": {...}}; the page asks again from
//                       "next" until it reaches "size", so a reload rebuilds every curve from the files.
// Threads: the handlers run on the endpoint's thread; `live` must outlive the routes' use.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "shm/control_block.hpp"
#include "tools/run/metrics_endpoint.hpp"

namespace tandem::run {

// `live`: the running job's control block, or nullptr for a finished run dir.
HttpRoutes dashboard_routes(const std::filesystem::path& run_dir, const shm::ControlBlock* live);

// Writes http://127.0.0.1:<port>/ to <run_dir>/dashboard.url (where `tandem status` finds it) and
// returns the line to print.
std::string announce_dashboard(const std::filesystem::path& run_dir, std::uint16_t port);

}  // namespace tandem::run
