// Two helpers that belong in common/ and wait there for their home: parse_size (common/units.hpp)
// and self_exe (common/process.hpp). Until then `tandem` (to find tandem-bench) and tandem-bench (to
// re-run itself as a reader) share this one copy; when common/ has them, callers switch and this
// file goes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace tandem::bench {

// "605M" -> 605000000: a number with an optional K, M, G (powers of 1000) or Ki, Mi, Gi (powers of
// 1024) suffix; nullopt when the text is not that.
std::optional<std::uint64_t> parse_size(const std::string& text);

// The absolute path of the running program (/proc/self/exe); fails with a UserError when unreadable.
std::string self_exe();

}  // namespace tandem::bench
