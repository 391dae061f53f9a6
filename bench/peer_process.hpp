// The PyTorch peers (bench/peers/*.py): found in the source tree, run through the shell with their
// output echoed under ours, and their one JSON line handed back parsed; and the `tandem` launcher the
// job benches run.
#pragma once

#include <string>

#include "bench/bench_json.hpp"

namespace tandem::bench {

// explicit_path when given, else bench/peers/<script> under $TANDEM_SOURCE_ROOT, the source tree
// this binary was built from, or the current directory; fails naming --peer-script otherwise.
std::string find_peer_script(const std::string& explicit_path, const std::string& script);

// explicit_path when given, else the launcher installed beside this binary or in the build tree's
// sibling folder (build/tools/tandem beside build/bench/tandem-bench); fails naming --tandem otherwise.
std::string find_tandem_launcher(const std::string& explicit_path);

// Single-quotes text for the shell.
std::string shell_quote(const std::string& text);

// Runs `command` (stderr merged into stdout), echoes each line prefixed "  | ", and returns the
// JSON object the peer printed whose "bench" is bench_name; fails when the peer exits non-zero or
// prints no such line.
Json run_peer(const std::string& command, const std::string& bench_name);

}  // namespace tandem::bench
