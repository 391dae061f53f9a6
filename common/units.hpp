// Byte counts as people read and write them. One rule everywhere: K, M, G, T are powers of 1024
// (a "K", "KB" and "KiB" suffix all mean 1024), so a size a user types and the size Tandem prints
// agree.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tandem {

// "0 B", "512 B", "1.5 KiB", "605.0 MiB", "2.0 GiB".
std::string format_bytes(std::uint64_t bytes);

// "4096", "64K", "1.5M", "2 GiB", "8gb" -> bytes. A UserError names `what` (e.g. "TANDEM_SHM_LIMIT")
// when the text is not a size or the size does not fit 64 bits.
std::uint64_t parse_size(std::string_view text, std::string_view what);

}  // namespace tandem
