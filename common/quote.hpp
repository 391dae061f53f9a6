// A user-given text as a one-line message shows it. Torch-free, any thread.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tandem {

// `text` in single quotes, with every byte a terminal would not print (NUL, control characters, DEL,
// bytes >= 0x80) and the backslash written as \xNN. Unescaped, a name with a NUL byte is cut at the
// NUL (an exception's what() is a C string) and a newline breaks the one-line rule.
std::string quote_escaped(std::string_view text);

// quote_escaped of the first `max_bytes` bytes of `text`, then "..." where it is longer: a 10 kB name
// shows as its first bytes and the message stays readable.
std::string quote_cut(std::string_view text, std::size_t max_bytes = 60);

}  // namespace tandem
