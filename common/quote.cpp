#include "common/quote.hpp"

#include <fmt/format.h>

namespace tandem {

std::string quote_escaped(std::string_view text) {
  std::string out = "'";
  for (const char c : text) {
    const auto b = static_cast<unsigned char>(c);
    if (b < 0x20 || b >= 0x7f || c == '\\') out += fmt::format("\\x{:02x}", b);
    else out += c;
  }
  return out + "'";
}

std::string quote_cut(std::string_view text, std::size_t max_bytes) {
  if (text.size() <= max_bytes) return quote_escaped(text);
  return quote_escaped(text.substr(0, max_bytes)) + "...";
}

}  // namespace tandem
